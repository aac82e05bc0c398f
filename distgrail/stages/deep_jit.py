"""The CPU backend's level sweeps as compiled loops over the components (numba), for deep DAGs.

The NumPy twins (``*_numpy`` in the stage modules) sweep one level per Python iteration, as the
CUDA launches do; on a DAG of many narrow levels (a long chain) that per-level overhead is the
whole cost. Components are numbered by level and every DAG edge (and every forest edge) goes to
a later level, so visiting the components one by one in id order (top-down sweeps) or in reverse
id order (bottom-up sweeps) finishes every component a sweep reads before it is read: one pass,
the same numbers as the per-level twins (integer sums, minima, maxima and ORs are exact in any
order). :mod:`distgrail.stages.deep` chooses between the two; this module is imported only when
a compiled sweep runs (numba's import and its cache load are paid by deep DAGs only).

``cache=True``: compiled once per set of argument dtypes, then loaded from ``__pycache__`` (or
numba's user cache directory); ``nogil=True``: the loops release the GIL (the condensation runs
its level sweep beside a transpose on another thread).
"""

from __future__ import annotations

import numpy as np
from ..jit import njit

__all__ = ["kahn_rest", "subtree_sizes", "add_parent_starts", "intervals_bottom_up", "or_children_bottom_up",
           "or_parents_top_down", "path_counts", "dfs_parents"]


@njit(nogil=True)
def kahn_rest(indptr, indices, indeg, level, frontier, lev):
    """Kahn's level sweep continued from ``frontier`` (the components of level ``lev``, whose
    in-degrees ``indeg`` have reached 0): sets ``level`` of every component reached, in place.
    A component joins the next level's queue when its last parent is taken off, which is its
    longest-path level."""
    C = level.shape[0]
    q = np.empty(C, dtype=np.int64)
    tail = 0
    for i in range(frontier.shape[0]):
        q[tail] = frontier[i]
        tail += 1
    head = 0
    while head < tail:
        end = tail
        for i in range(head, end):
            u = q[i]
            level[u] = lev
            for e in range(indptr[u], indptr[u + 1]):
                c = indices[e]
                indeg[c] -= 1
                if indeg[c] == 0:
                    q[tail] = c
                    tail += 1
        head = end
        lev += 1


@njit(nogil=True)
def subtree_sizes(parent, first):
    """Phase 2: size[v] = 1 + the sizes of v's forest children; components ``first..C-1`` (the
    levels below the roots) add themselves into their parents, the deepest first."""
    C = parent.shape[0]
    size = np.ones(C, dtype=np.int64)
    for v in range(C - 1, first - 1, -1):
        p = parent[v]
        if p >= 0:
            size[p] += size[v]
    return size


@njit(nogil=True)
def add_parent_starts(start, parent, first):
    """Phase 3: ``start[v] += start[parent[v]]`` for ``v`` = ``first..C-1`` in id order (a parent's
    start is final before its children read it): the sum of the offsets along the root path."""
    for v in range(first, start.shape[0]):
        start[v] += start[parent[v]]


@njit(nogil=True)
def intervals_bottom_up(indptr, indices, lo, hi, rows):
    """Phase 4 on (C, k) arrays: for ``r`` = ``rows-1`` down to 0, ``lo[r]`` (``hi[r]``) becomes the
    minimum (maximum) of itself and of its children's, dimension by dimension."""
    k = lo.shape[1]
    for r in range(rows - 1, -1, -1):
        for e in range(indptr[r], indptr[r + 1]):
            c = indices[e]
            for j in range(k):
                if lo[c, j] < lo[r, j]:
                    lo[r, j] = lo[c, j]
                if hi[c, j] > hi[r, j]:
                    hi[r, j] = hi[c, j]


@njit(nogil=True)
def or_children_bottom_up(mask, indptr, indices, rows):
    """Phase 5, ``out``: for ``r`` = ``rows-1`` down to 0, ``mask[r] |=`` the OR of its children's rows."""
    W = mask.shape[1]
    for r in range(rows - 1, -1, -1):
        for e in range(indptr[r], indptr[r + 1]):
            c = indices[e]
            for w in range(W):
                mask[r, w] |= mask[c, w]


@njit(nogil=True)
def or_parents_top_down(mask, rindptr, rindices, first):
    """Phase 5, ``in``: for ``r`` = ``first..C-1`` in id order, ``mask[r] |=`` the OR of its parents' rows."""
    W = mask.shape[1]
    for r in range(first, mask.shape[0]):
        for e in range(rindptr[r], rindptr[r + 1]):
            p = rindices[e]
            for w in range(W):
                mask[r, w] |= mask[p, w]


@njit(nogil=True)
def path_counts(indptr, indices, zeta, rows, cap):
    """Phase 1, ``dfs`` rule: for ``r`` = ``rows-1`` down to 0 with children, ``zeta[r]`` = the
    saturating sum of its children's ζ plus one, summed as :func:`distgrail.satmath.seg_sum` does
    (32-bit halves apart, then combined and capped at ``cap``)."""
    half = np.uint64(32)
    low = np.uint64(0xFFFFFFFF)
    big = np.uint64(1 << 30)
    one = np.uint64(1)
    for r in range(rows - 1, -1, -1):
        e0, e1 = indptr[r], indptr[r + 1]
        if e0 == e1:
            continue
        hi = np.uint64(0)
        lo = np.uint64(0)
        for e in range(e0, e1):
            z = zeta[indices[e]]
            hi += z >> half
            lo += z & low
        total = cap
        if hi < big:
            total = (hi << half) + lo
            if total > cap:
                total = cap
        total += one
        zeta[r] = total if total < cap else cap


@njit(nogil=True)
def dfs_parents(rindptr, rindices, w_in, level, tie, dist, parent, first, cap):
    """Phase 1, ``dfs`` rule: for ``v`` = ``first..C-1`` in id order, the in-edge with the smallest
    ``min(dist[p] + w_in, cap)``, then the parent of the largest level, then the largest ``tie``,
    then the first in reverse-CSR order; ``dist[v]`` and ``parent[v]`` from it."""
    for v in range(first, parent.shape[0]):
        e0, e1 = rindptr[v], rindptr[v + 1]
        best = -1
        bd = np.uint64(0)
        bl = 0
        bt = np.uint64(0)
        for e in range(e0, e1):
            p = rindices[e]
            d = dist[p] + w_in[e]
            if d > cap:
                d = cap
            lv = level[p]
            t = tie[e]
            if best < 0 or d < bd or (d == bd and (lv > bl or (lv == bl and t > bt))):
                best, bd, bl, bt = e, d, lv, t
        if best >= 0:
            dist[v] = bd
            parent[v] = rindices[best]
