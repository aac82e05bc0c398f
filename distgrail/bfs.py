"""Plain BFS: the ground truth of the tests and the baseline of the benchmarks."""

from __future__ import annotations

from collections import deque

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order

__all__ = ["bfs_reachable", "reachable_set", "csr_of", "positive_pairs"]


def csr_of(graph):
    """CSR (indptr, indices) of an EdgeGraph, duplicates kept (plain BFS does not care)."""
    a = sp.csr_matrix((np.ones(graph.m, dtype=np.bool_), (graph.src, graph.dst)), shape=(graph.n, graph.n))
    return a.indptr, a.indices


def bfs_reachable(indptr, indices, sources, targets) -> np.ndarray:
    """One BFS per pair with early exit, over the input graph's CSR (the baseline)."""
    ip = indptr.tolist()
    ix = indices.tolist()
    n = len(ip) - 1
    out = np.zeros(len(sources), dtype=bool)
    mark = [0] * n
    for k, (s, t) in enumerate(zip(np.asarray(sources).tolist(), np.asarray(targets).tolist())):
        if s == t:
            out[k] = True
            continue
        stamp = k + 1
        mark[s] = stamp
        q = deque([s])
        found = False
        while q and not found:
            u = q.popleft()
            for j in range(ip[u], ip[u + 1]):
                w = ix[j]
                if w == t:
                    found = True
                    break
                if mark[w] != stamp:
                    mark[w] = stamp
                    q.append(w)
        out[k] = found
    return out


def reachable_set(indptr, indices, s: int) -> np.ndarray:
    """Boolean mask of the vertices ``s`` reaches (``s`` included)."""
    n = len(indptr) - 1
    a = sp.csr_matrix((np.ones(len(indices), dtype=np.bool_), indices, indptr), shape=(n, n))
    mask = np.zeros(n, dtype=bool)
    mask[breadth_first_order(a, s, directed=True, return_predecessors=False)] = True
    return mask


def positive_pairs(g, k, max_sources, seed):
    """k pairs (s, t), t != s, s ->* t: up to max_sources random sources that reach another
    vertex, each pair a random source and a random vertex of its BFS."""
    ip, ix = csr_of(g)
    a = sp.csr_matrix((np.ones(len(ix), dtype=np.bool_), ix, ip), shape=(g.n, g.n))
    rng = np.random.default_rng(seed)
    srcs, reach = [], []
    for s in rng.permutation(g.n):
        r = breadth_first_order(a, int(s), directed=True, return_predecessors=False)
        r = r[r != s]
        if r.size:
            srcs.append(s)
            reach.append(r)
        if len(srcs) == max_sources:
            break
    size = np.array([r.size for r in reach])
    off = np.concatenate([[0], np.cumsum(size)[:-1]])
    flat = np.concatenate(reach).astype(np.int64)
    pick = rng.integers(0, len(srcs), k)
    t = flat[off[pick] + (rng.random(k) * size[pick]).astype(np.int64)]
    return np.asarray(srcs, dtype=np.int64)[pick], t
