"""Plain BFS: the ground truth of the tests and the baseline of the benchmarks."""

from __future__ import annotations

from collections import deque

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order

__all__ = ["bfs_reachable", "reachable_set", "csr_of"]


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
