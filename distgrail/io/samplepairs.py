"""Query pairs made from an index (``distgrail pairs``), written in the pairs format that
``distgrail query`` reads; and the text of one-off answers (``distgrail query --pair``).

* ``random``: ``u`` and ``v`` uniform over the vertices, independently (most such pairs are
  unreachable on large sparse graphs).
* ``reachable``: pairs known reachable (``u != v``). Up to :data:`MAX_SOURCES` random source
  vertices that reach another vertex are drawn; each source's reach is found by a BFS over the
  index's condensation DAG, stopped once :data:`MAX_REACH` components are reached; each pair is a
  random drawn source and a random vertex of the components its BFS reached (its own component
  included, without the source itself). Not uniform over all reachable pairs; exact and the same
  for the same index and seed.

Pairs are written as text ``u v`` lines (``.gz`` compressed when the name ends so), with the
graph's node labels when the index has them, or as a ``.npy`` (k, 2) array of ids or integer
labels: int32 when every value fits (what a GPU query stages with a plain copy, not a cast: half
the bytes to read), else int64.
"""

from __future__ import annotations

import os

import numpy as np

from ..arrays import sorted_distinct, unique
from ..errors import DistGrailError, QueryError
from .atomic import atomic_path

__all__ = ["sample_pairs", "write_pairs", "MAX_SOURCES", "MAX_REACH", "pair_tokens"]

#: distinct sources of the reachable pairs
MAX_SOURCES = 1024
#: components a source's BFS visits at most
MAX_REACH = 1 << 16


def _members(component: np.ndarray, C: int):
    order = np.argsort(component, kind="stable")
    start = np.zeros(C + 1, np.int64)
    np.cumsum(np.bincount(component, minlength=C), out=start[1:])
    return order, start


def _bfs(indptr, indices, c: int, limit: int) -> np.ndarray:
    """Components reached from component ``c`` (itself first), at most ``limit``, level by level."""
    seen = np.zeros(indptr.size - 1, bool)
    seen[c] = True
    out, frontier, total = [np.array([c])], np.array([c]), 1
    while frontier.size and total < limit:
        lo, hi = indptr[frontier], indptr[frontier + 1]
        nxt = indices[_ranges(lo, hi)]
        nxt = sorted_distinct(np, nxt[~seen[nxt]])[: limit - total]
        seen[nxt] = True
        out.append(nxt)
        total += nxt.size
        frontier = nxt
    return np.concatenate(out).astype(np.int64)


def _ranges(lo, hi):
    size = hi - lo
    keep = size > 0
    lo, size = lo[keep], size[keep]
    if not size.size:
        return np.zeros(0, np.int64)
    step = np.ones(int(size.sum()), np.int64)
    head = np.concatenate(([0], np.cumsum(size)[:-1]))
    step[0] = lo[0]
    step[head[1:]] = lo[1:] - (lo[:-1] + size[:-1] - 1)
    return np.cumsum(step)


def _vertex_at(order, start, r, cum, j):
    """The vertex at position ``j`` of the members of components ``r`` (in that order)."""
    c = np.searchsorted(cum, j, side="right")
    before = np.where(c > 0, cum[np.maximum(c - 1, 0)], 0)
    return order[start[r[c]] + j - before].astype(np.int64)


def sample_pairs(idx, count: int, kind: str = "random", seed: int = 0):
    """``count`` pairs (u, v) of vertex ids of the index ``idx`` (see the module doc)."""
    if count < 0:
        raise QueryError(f"the number of pairs must be >= 0, got {count}")
    n = int(idx.n)
    rng = np.random.default_rng(seed)
    if n == 0:
        raise QueryError("the index has no vertex: no pairs to make")
    if kind == "random":
        uv = rng.integers(0, n, (count, 2), dtype=np.int64)
        return uv[:, 0], uv[:, 1]
    if kind != "reachable":
        raise QueryError(f"pair kind must be 'random' or 'reachable', got {kind!r}")
    comp = np.asarray(idx.arrays["vertex/component"], np.int64)
    indptr = np.asarray(idx.arrays["dag/indptr"], np.int64)
    indices = np.asarray(idx.arrays["dag/indices"], np.int64)
    order, start = _members(comp, indptr.size - 1)
    size = np.diff(start)
    sources, reach = [], []
    for u in rng.permutation(n).tolist():
        if len(sources) == MAX_SOURCES or count == 0:
            break
        r = _bfs(indptr, indices, int(comp[u]), MAX_REACH)
        if int(size[r].sum()) > 1:  # u reaches a vertex besides itself
            sources.append(u)
            reach.append(r)
    if count and not sources:
        raise QueryError("the graph has no edge between distinct vertices: no reachable pair u -> v, u != v")
    pick = rng.integers(0, max(len(sources), 1), count)
    x = rng.random(count)
    s = np.asarray(sources, np.int64)[pick] if count else np.zeros(0, np.int64)
    t = np.empty(count, np.int64)
    for i in unique(np, pick).tolist():  # the pairs of source i, at once
        at = np.flatnonzero(pick == i)
        r = reach[i]
        cum = np.cumsum(size[r])
        total = int(cum[-1])  # vertices of the reached components, the source included
        j = (x[at] * (total - 1)).astype(np.int64)  # one of total - 1 positions ...
        v = _vertex_at(order, start, r, cum, j)
        v[v == sources[i]] = _vertex_at(order, start, r, cum, np.array([total - 1]))[0]  # ... not u
        t[at] = v
    return s, t


def pair_tokens(idx, s: np.ndarray, t: np.ndarray):
    """The pairs as the user names the vertices: node labels when the index has them, else ids."""
    labels = idx.node_labels
    if labels is None:
        return s, t
    return labels.values[s], labels.values[t]


def write_pairs(u, v, path) -> None:
    """Pairs ``u v`` per line (ids or labels; ``.gz``: gzip) or ``.npy`` (k, 2), int32 when every
    value fits, else int64; atomically."""
    path = os.fspath(path)
    u, v = np.asarray(u), np.asarray(v)
    if path.endswith(".npy"):
        if u.dtype.kind not in "iu":
            raise DistGrailError(f"{path}: a .npy pairs file holds integers; this index has string node labels "
                                 "(write a text file instead)")
        narrow = u.size == 0 or (min(int(u.min()), int(v.min())) >= 0
                                 and max(int(u.max()), int(v.max())) <= np.iinfo(np.int32).max)
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.save(f, np.stack([u, v], axis=1).astype(np.int32 if narrow else np.int64))
        return
    if u.dtype.kind in "iu" and (u.size == 0 or min(int(u.min()), int(v.min())) >= 0):
        from .writers import format_ints

        vals = np.empty(2 * u.size, np.int64)
        vals[0::2], vals[1::2] = u, v
        body = format_ints(vals, np.tile(np.array([0, 1], np.int8), u.size), [b" ", b"\n"])
    else:
        body = "".join(f"{a} {b}\n" for a, b in zip(u.tolist(), v.tolist())).encode()
    from .answers import write_text_body

    write_text_body(path, body)
