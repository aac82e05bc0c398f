"""Phase 3 (top-down): post-order rank of the forest DT under dimension i's sibling order.

Siblings (and roots) are ordered by the counter hash of (seed, dimension, vertex), ties by id.
A vertex's post-order rank is ``start + size - 1`` where ``start`` is the first rank of its
subtree: the sum, over the path to its root, of the sizes of earlier siblings.
"""

from __future__ import annotations

import math
import numpy as np

from ..hashing import STREAM_DIM0, hash3, hash_base
from ..gpu.memory import oom_guard
from ..gpu.sweep import GRID_THREADS, cupy, kernel, sm_count

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
    return be.pick(post_order_ranks_numpy, post_order_ranks_cuda)(parent, size, level_ptr, seed, dims)


# -- CUDA launcher ------------------------------------------------------------------------

@oom_guard
def post_order_ranks_cuda(parent, size, level_ptr, seed, dims):
    """GPU twin of :func:`distgrail.stages.ranks.post_order_ranks_numpy`: shape (len(dims), C)."""
    cp = cupy()
    dims = [int(d) for d in dims]
    k = len(dims)
    C = parent.size
    out = cp.empty((k, C), dtype=cp.int64)
    if C == 0 or k == 0:
        return out
    L = int(np.asarray(level_ptr).size) - 1
    gs = (max(1, min(-(-C // GRID_THREADS), sm_count() * 32)),)
    bs = (GRID_THREADS,)
    hash_f64 = kernel("labeling", "dg_hash_f64")
    fix_ties = kernel("labeling", "dg_fix_ties")
    fh = cp.empty(C, dtype=cp.float64)
    pkey = (parent + 1) * C
    ar = cp.arange(C, dtype=cp.int64)
    rk = cp.empty(C, dtype=cp.int64)
    for i, dim in enumerate(dims):
        # sibling order: by parent, then float64(hash) (as the twin's lexsort sees it), then id
        hash_f64(gs, bs, (fh, np.int64(C), np.uint64(hash_base(seed, STREAM_DIM0 + dim))))
        r = cp.argsort(fh)
        fix_ties(gs, bs, (fh, r, np.int64(C)))  # equal floats: by id, as the twin's stable lexsort
        rk[r] = ar
        del r
        order = cp.argsort(pkey + rk)  # keys are unique
        s = size[order]
        excl = cp.cumsum(s) - s
        par = parent[order]
        new_group = cp.ones(C, dtype=cp.bool_)
        new_group[1:] = par[1:] != par[:-1]
        del par
        first = cp.flatnonzero(new_group)
        gid = cp.cumsum(new_group) - 1
        row = out[i]
        row[order] = excl - excl[first][gid]
        del row
        del s, excl, new_group, first, gid, order
    del fh, pkey, ar, rk
    # start = sum of the offsets along the root path: pointer jumping, all dimensions at once
    rounds = math.ceil(math.log2(L)) if L > 1 else 0
    if rounds:
        jump = kernel("labeling", "dg_jump")
        anc = parent.astype(cp.int32)
        anc2 = cp.empty_like(anc)
        tmp = cp.empty_like(out)
        a, b = out, tmp
        for _ in range(rounds):
            jump(gs, bs, (a, b, anc, anc2, np.int64(C), np.int32(k)))
            a, b = b, a
            anc, anc2 = anc2, anc
        out = a
        del b, tmp, anc, anc2
    out += size - 1
    return out
