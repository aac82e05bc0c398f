"""Phase 3 (top-down): post-order rank of the forest DT under dimension i's sibling order.

Siblings (and roots) are ordered by the counter hash of (seed, dimension, vertex), ties by id.
A vertex's post-order rank is ``start + size - 1`` where ``start`` is the first rank of its
subtree: the sum, over the path to its root, of the sizes of earlier siblings.
"""

from __future__ import annotations

import numpy as np

from .hashing import STREAM_DIM0, hash3

__all__ = ["post_order_ranks", "sibling_offsets"]


def sibling_offsets(parent, size, seed: int, dim: int, xp=np):
    """Sum of the sizes of the siblings placed before each vertex in dimension ``dim``."""
    C = parent.size
    key = hash3(seed, STREAM_DIM0 + dim, xp.arange(C, dtype=xp.int64), xp)
    order = xp.lexsort(xp.stack((key, parent.astype(xp.int64))))  # by parent, then hash, then id
    s = size[order]
    par = parent[order]
    cs = xp.cumsum(s)
    new_group = xp.ones(C, dtype=bool)
    new_group[1:] = par[1:] != par[:-1]
    group_first = xp.flatnonzero(new_group)
    gid = xp.cumsum(new_group) - 1
    base = (cs - s)[group_first]
    off = xp.empty(C, dtype=xp.int64)
    off[order] = cs - s - base[gid]
    return off


def post_order_ranks_numpy(parent, size, level_ptr, seed, dims):
    """NumPy twin: post-order ranks, shape (len(dims), C)."""
    C = parent.size
    out = np.empty((len(dims), C), dtype=np.int64)
    lp = level_ptr.tolist()
    for k, dim in enumerate(dims):
        start = sibling_offsets(parent, size, seed, dim)
        for lev in range(1, len(lp) - 1):
            a, b = lp[lev], lp[lev + 1]
            start[a:b] += start[parent[a:b]]
        out[k] = start + size - 1
    return out


def post_order_ranks(be, parent, size, level_ptr, seed, dims):
    """Phase 3 on backend ``be`` for the dimensions ``dims``."""
    from .gpu_labeling import post_order_ranks_cuda

    return be.pick(post_order_ranks_numpy, post_order_ranks_cuda)(parent, size, level_ptr, seed, dims)
