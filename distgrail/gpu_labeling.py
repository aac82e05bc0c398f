"""GPU implementations of the labeling phases 1–4 (CuPy + kernels/labeling.cu).

Each function here is the CUDA counterpart of a ``*_numpy`` twin in the stage modules and
returns bit-identical numbers (same values, same dtypes), as CuPy arrays.

How the work is laid out (see the comments in ``kernels/labeling.cu``):

phase 1   ``max-level``: two passes over the forward CSR (``kernels/forest.cu``), a warp per
          row; no level loop and no reverse CSR. ``dfs``: ζ by a bottom-up level sweep, the
          per-row exclusive ζ prefix by a warp scan, dist by a top-down level sweep, then a
          parent-selection pass over the reverse CSR, a warp per vertex and a block per hub
          (in-degree > ``HUB``).
phase 2   subtree sizes: bottom-up level sweep, every vertex adds its size into its DT parent.
phase 3   per dimension: two sorts give the sibling order, a segmented prefix the sibling
          offsets; the root-path sums of all dimensions together by pointer jumping
          (ceil(log2(levels)) launches, independent of depth).
phase 4   bottom-up level sweep over the CSR, up to 8 dimensions per sweep in one interleaved
          int32 buffer that is reused for the next 8.

Level sweeps: a level whose rows + edges are at most ``SMALL_LEVEL`` joins a run of consecutive
small levels that ONE block walks in a single launch (``__syncthreads`` between levels,
edge-parallel, the next level's structure prefetched; the edges' rows from a COO array in the
ζ and phase-4 sweeps, by search in the dist sweep, where the dfs rule's memory is tightest);
larger levels get a grid launch each, with rows and edges split evenly by merge path.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import satmath
from .errors import BackendError
from .hashing import STREAM_DIM0, STREAM_PARENT, hash_base

__all__ = [
    "parents_max_level_cuda", "parents_dfs_cuda", "subtree_sizes_cuda", "post_order_ranks_cuda",
    "descendant_intervals_cuda", "forest_bytes", "label_bytes", "ensure_fits",
]

#: levels with at most this many rows + edges are batched into single-block launches
SMALL_LEVEL = 4096
#: vertices with a larger in-degree get a block of their own in parent selection
HUB = 4096
_BATCH_THREADS = 1024
_GRID_THREADS = 256
_ITEMS_PER_THREAD = 8
_MAX_DIMS_PER_SWEEP = 8
_U64_MAX = np.uint64(np.iinfo(np.uint64).max)


def _cp():
    import cupy

    return cupy


def _mod():
    from .kernels import load_module

    return load_module("labeling")


def _fn(name):
    return _mod().get_function(name)


_SM_COUNT: dict = {}


def _sm_count():
    cp = _cp()
    dev = cp.cuda.Device().id
    if dev not in _SM_COUNT:
        _SM_COUNT[dev] = int(cp.cuda.runtime.getDeviceProperties(dev)["multiProcessorCount"])
    return _SM_COUNT[dev]


# -- memory --------------------------------------------------------------------------------------
def forest_bytes(C: int, m: int, parent_rule: str = "max-level", id_bytes: int = 4) -> int:
    """Estimated peak GPU bytes of phases 1–2 (DAG upload included)."""
    csr = 2 * (8 * (C + 1) + id_bytes * m)
    est = csr + 4 * C + 8 * C + 17 * C  # level, parent, hub scan
    est += 8 * C  # phase 2: sizes
    if parent_rule == "dfs":
        est += 8 * C * 2 + 8 * m + 4 * m  # zeta, dist, per-edge ζ prefix, COO rows (ζ sweep)
    return int(est)


def label_bytes(C: int, m: int, dims: int, id_bytes: int = 4) -> int:
    """Estimated peak GPU bytes of phases 3–4 for ``dims`` dimensions (CSR upload included)."""
    k = int(dims)
    est = 8 * (C + 1) + id_bytes * m + 16 * C + 4 * m  # CSR, parent, size, COO rows
    p3 = 16 * k * C + 80 * C  # ranks + jump buffer + per-dimension sort scratch
    p4 = 8 * k * C + 8 * min(k, _MAX_DIMS_PER_SWEEP) * C + 16 * k * C + 16 * k * C  # post, buffer, lo/hi, stack
    return int(est + max(p3, p4))


def ensure_fits(nbytes: int, what: str) -> None:
    """Raise :class:`BackendError` with the estimate if ``nbytes`` cannot be allocated now."""
    cp = _cp()
    free, total = cp.cuda.Device().mem_info
    avail = free + cp.get_default_memory_pool().free_bytes()
    if nbytes > avail:
        raise BackendError(f"{what} needs about {nbytes / 2**30:.2f} GiB of GPU memory, but only "
                           f"{avail / 2**30:.2f} GiB of {total / 2**30:.2f} GiB are free on GPU "
                           f"{cp.cuda.Device().id}; use --backend cpu or a larger GPU")


def _oom_guard(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        cp = _cp()
        try:
            return fn(*args, **kwargs)
        except cp.cuda.memory.OutOfMemoryError as e:
            raise BackendError(f"{fn.__name__}: GPU out of memory ({e}); use --backend cpu or a larger GPU") from None

    return wrapper


def _check_ids(indices, what):
    if indices.dtype != np.int32:
        raise BackendError(f"the GPU backend needs int32 vertex ids ({what} has dtype {indices.dtype}); "
                           "graphs of 2^31 or more components must use --backend cpu")


# -- level sweeps --------------------------------------------------------------------------------
def _level_work(ptr, lp_dev, level_ptr):
    """Rows + edges of every level for the CSR ``ptr`` (host int64 array)."""
    pl = ptr[lp_dev].get()
    return np.diff(level_ptr) + np.diff(pl)


def _sweep(big, small, lp_dev, work, lo, hi, bottom_up, big_args, small_args):
    """Levels lo..hi (inclusive), deepest first if ``bottom_up``.

    A run of consecutive levels with at most ``SMALL_LEVEL`` rows + edges is ONE launch of
    ``small`` with one block; every larger level is one grid launch of ``big``.
    """
    if hi < lo:
        return
    step = -1 if bottom_up else 1
    ls = np.arange(hi, lo - 1, -1) if bottom_up else np.arange(lo, hi + 1)
    w = work[ls]
    is_small = w <= SMALL_LEVEL
    chg = np.flatnonzero(is_small[1:] != is_small[:-1]) + 1
    starts = np.concatenate(([0], chg)).tolist()
    ends = np.concatenate((chg, [ls.size])).tolist()
    cap = _sm_count() * 16
    i32 = np.int32
    for s, e in zip(starts, ends):
        if is_small[s]:
            small((1,), (_BATCH_THREADS,), (lp_dev, i32(ls[s]), i32(step), i32(e - s), *small_args))
        else:
            for i in range(s, e):
                items = int(w[i])
                blocks = max(1, min(cap, -(-items // (_GRID_THREADS * _ITEMS_PER_THREAD))))
                big((blocks,), (_GRID_THREADS,), (lp_dev, i32(ls[i]), i32(1), i32(1), *big_args))


def _rows_if_needed(ptr, lp, work, lo, hi):
    """Row of every CSR entry (int32), if some small level in lo..hi has edges; else a dummy."""
    cp = _cp()
    C = ptr.size - 1
    if hi >= lo:
        sl = np.arange(lo, hi + 1)
        edges = work[sl] - np.diff(lp)[sl]
        if ((work[sl] <= SMALL_LEVEL) & (edges > 0)).any():
            m = int(ptr[-1].get())
            rows = cp.empty(max(m, 1), dtype=cp.int32)
            blocks = max(1, min(-(-C // (_GRID_THREADS // 32)), _sm_count() * 32))
            _fn("dg_csr_rows")((blocks,), (_GRID_THREADS,), (ptr, rows, np.int64(C)))
            return rows
    return cp.zeros(1, dtype=cp.int32)


# -- phase 1 -------------------------------------------------------------------------------------
def _select_parents_dfs(dag, base, zex, dist):
    """dfs rule: the in-neighbour with the smallest dist[p] + w(p -> v) (then highest level,
    then hash), a warp per vertex and a block per hub (in-degree > ``HUB``)."""
    cp = _cp()
    C = dag.rindptr.size - 1
    parent = cp.empty(C, dtype=cp.int64)
    if C == 0:
        return parent
    common = (dag.rindptr, dag.rindices, dag.level, dag.indptr, dag.indices, zex, dist, parent,
              np.int64(C), np.uint64(base))
    warps_per_block = _GRID_THREADS // 32
    blocks = max(1, min(-(-C // warps_per_block), _sm_count() * 32))
    _fn("dg_parent_warp")((blocks,), (_GRID_THREADS,), (*common, np.int64(HUB)))
    hubs = cp.flatnonzero(cp.diff(dag.rindptr) > HUB)
    if hubs.size:
        nb = max(1, min(int(hubs.size), _sm_count() * 8))
        _fn("dg_parent_hubs")((nb,), (256,), (*common, hubs, np.int64(hubs.size)))
    return parent


@_oom_guard
def parents_max_level_cuda(dag, seed):
    """GPU twin of :func:`distgrail.forest.parents_max_level`, from the forward CSR
    (``kernels/forest.cu``): the reverse CSR never has to reach the GPU for this rule."""
    from .kernels import load_module

    cp = _cp()
    _check_ids(dag.indices, "the CSR")
    C = dag.indptr.size - 1
    if C == 0:
        return cp.empty(0, dtype=cp.int64)
    mod = load_module("forest", cp.cuda.Device().id)
    level = dag.level if dag.level.dtype == cp.int32 else dag.level.astype(cp.int32)
    base = np.uint64(hash_base(seed, STREAM_PARENT))
    blocks = max(1, min(-(-C // (_GRID_THREADS // 32)), _sm_count() * 32))
    best = cp.zeros(C, dtype=cp.uint64)
    csr = (dag.indptr, dag.indices, level)
    mod.get_function("dg_parent_best_hash")((blocks,), (_GRID_THREADS,), csr + (best, np.int64(C), base))
    parent = cp.full(C, C, dtype=cp.uint64)  # C: no candidate (a source)
    mod.get_function("dg_parent_pick")((blocks,), (_GRID_THREADS,), csr + (best, parent, np.int64(C), base))
    del best
    out = parent.view(cp.int64)
    out[out == C] = -1
    return out


@_oom_guard
def parents_dfs_cuda(dag, seed):
    """GPU twin of :func:`distgrail.forest.parents_dfs` (ζ-SSSP rule)."""
    cp = _cp()
    _check_ids(dag.indices, "the CSR")
    C = dag.indptr.size - 1
    if C == 0:
        return cp.empty(0, dtype=cp.int64)
    lp = np.asarray(dag.level_ptr, dtype=np.int64)
    L = lp.size - 1
    lp_dev = cp.asarray(lp)
    # ζ: paths leaving each vertex, bottom-up
    zeta = cp.ones(C, dtype=cp.uint64)
    work = _level_work(dag.indptr, lp_dev, lp)
    rows = _rows_if_needed(dag.indptr, lp, work, 0, L - 1)
    _sweep(_fn("dg_sweep_zeta"), _fn("dg_small_zeta"), lp_dev, work, 0, L - 1, True,
           (dag.indptr, dag.indices, zeta), (dag.indptr, dag.indices, rows, zeta))
    del rows
    # exclusive ζ prefix along every CSR row: the edge weights minus one
    m = dag.indices.size
    zex = cp.empty(max(m, 1), dtype=cp.uint64)
    blocks = max(1, min(-(-C // (_GRID_THREADS // 32)), _sm_count() * 32))
    _fn("dg_zeta_exclusive")((blocks,), (_GRID_THREADS,), (dag.indptr, dag.indices, zeta, zex, np.int64(C)))
    # dist: roots get the exclusive prefix of ζ over the roots, the rest a top-down min
    dist = cp.full(C, _U64_MAX, dtype=cp.uint64)
    nroots = int(lp[1]) if L >= 1 else 0
    if nroots:
        dist[:nroots] = satmath.seg_exclusive_prefix(zeta[:nroots], cp.zeros(nroots, dtype=cp.int64), cp)
    del zeta
    rwork = _level_work(dag.rindptr, lp_dev, lp)
    args = (dag.rindptr, dag.rindices, dag.indptr, dag.indices, zex, dist)
    _sweep(_fn("dg_sweep_dist"), _fn("dg_small_dist"), lp_dev, rwork, 1, L - 1, False, args, args)
    return _select_parents_dfs(dag, hash_base(seed, STREAM_PARENT), zex, dist)


# -- phase 2 -------------------------------------------------------------------------------------
@_oom_guard
def subtree_sizes_cuda(parent, level_ptr):
    """GPU twin of :func:`distgrail.subtree.subtree_sizes_numpy`."""
    cp = _cp()
    C = parent.size
    size = cp.ones(C, dtype=cp.int64)
    lp = np.asarray(level_ptr, dtype=np.int64)
    L = lp.size - 1
    if C == 0 or L <= 1:
        return size
    lp_dev = cp.asarray(lp)
    work = np.diff(lp)  # vertex-parallel: each child level adds its sizes into the parents
    size_levels = _fn("dg_size_levels")
    _sweep(size_levels, size_levels, lp_dev, work, 1, L - 1, True, (parent, size), (parent, size))
    return size


# -- phase 3 -------------------------------------------------------------------------------------
@_oom_guard
def post_order_ranks_cuda(parent, size, level_ptr, seed, dims):
    """GPU twin of :func:`distgrail.ranks.post_order_ranks_numpy`: shape (len(dims), C)."""
    cp = _cp()
    dims = [int(d) for d in dims]
    k = len(dims)
    C = parent.size
    out = cp.empty((k, C), dtype=cp.int64)
    if C == 0 or k == 0:
        return out
    L = int(np.asarray(level_ptr).size) - 1
    gs = (max(1, min(-(-C // _GRID_THREADS), _sm_count() * 32)),)
    bs = (_GRID_THREADS,)
    hash_f64 = _fn("dg_hash_f64")
    fix_ties = _fn("dg_fix_ties")
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
        jump = _fn("dg_jump")
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


# -- phase 4 -------------------------------------------------------------------------------------
@_oom_guard
def descendant_intervals_cuda(indptr, indices, level_ptr, post):
    """GPU twin of :func:`distgrail.intervals.descendant_intervals_numpy`: (lo, hi)."""
    cp = _cp()
    _check_ids(indices, "the CSR")
    k, C = post.shape
    lo = cp.empty((k, C), dtype=cp.int64)
    hi = cp.empty((k, C), dtype=cp.int64)
    if C == 0 or k == 0:
        return lo, hi
    if C >= 2**31 - 1:
        raise BackendError(f"the GPU backend keeps ranks in int32; {C} components is too many")
    lp = np.asarray(level_ptr, dtype=np.int64)
    L = lp.size - 1
    lp_dev = cp.asarray(lp)
    work = _level_work(indptr, lp_dev, lp)
    rows = _rows_if_needed(indptr, lp, work, 0, L - 2)  # phase 4's small levels: COO rows
    kmax = min(k, _MAX_DIMS_PER_SWEEP)
    buf = cp.empty(C * kmax * 2, dtype=cp.int32)  # reused by every group of dimensions
    for c0 in range(0, k, kmax):
        K = min(kmax, k - c0)
        lh = buf[: C * K * 2].reshape(C, K, 2)
        p = post[c0 : c0 + K].T
        lh[:, :, 0] = p
        lh[:, :, 1] = p
        del p
        _sweep(_fn(f"dg_sweep_iv{K}"), _fn(f"dg_small_iv{K}"), lp_dev, work, 0, L - 2, True,
               (indptr, indices, lh), (indptr, indices, lh, rows))
        lo[c0 : c0 + K] = lh[:, :, 0].T
        hi[c0 : c0 + K] = lh[:, :, 1].T
    return lo, hi
