"""Phase 4 (bottom-up): L_v = [min, max] of the rank over all DAG descendants of v (v included).

This form is sound for any spanning forest and any sibling order (DESIGN invariant 2):
u →* v ⇒ descendants(v) ⊆ descendants(u) ⇒ L_v ⊆ L_u.
"""

from __future__ import annotations

import numpy as np

from ..constants import MAX_DIMS_PER_SWEEP
from ..errors import BackendError
from ..gpu.memory import check_ids, ensure_fits, launcher
from ..gpu.sweep import cupy, kernel, level_work, rows_if_needed, sweep
from ..jit import restarts
from .deep import compiled_sweeps, n_levels

__all__ = ["descendant_intervals", "descendant_intervals_numpy", "descendant_intervals_cpu", "descendant_intervals_cuda",
           "sweep_intervals_numpy", "sweep_intervals_cuda", "intervals_bytes"]


def descendant_intervals_numpy(indptr, indices, level_ptr, post):
    """NumPy twin: (lo, hi), each shaped like ``post`` (k, C)."""
    lo = post.copy()
    hi = post.copy()
    sweep_intervals_numpy(indptr, indices, level_ptr, lo, hi)
    return lo, hi


def sweep_intervals_numpy(indptr, indices, level_ptr, lo, hi, levels=None) -> None:
    """The twin's sweep, in place on the start values ``lo`` / ``hi`` ((k, C)), over the levels
    ``levels`` = ``(first, last)`` (default every level with children), deepest first (twin of
    :func:`sweep_intervals_cuda`)."""
    lp = np.asarray(level_ptr).tolist()
    first, last = (0, len(lp) - 3) if levels is None else (max(0, int(levels[0])), min(len(lp) - 3, int(levels[1])))
    for lev in range(last, first - 1, -1):
        a, b = lp[lev], lp[lev + 1]
        e0, e1 = int(indptr[a]), int(indptr[b])
        if e0 == e1:
            continue
        deg = np.diff(indptr[a : b + 1])
        nz = np.flatnonzero(deg)
        starts = (indptr[a:b] - e0)[nz]
        ch = indices[e0:e1]
        rows = a + nz
        lo[:, rows] = np.minimum(lo[:, rows], np.minimum.reduceat(lo[:, ch], starts, axis=1))
        hi[:, rows] = np.maximum(hi[:, rows], np.maximum.reduceat(hi[:, ch], starts, axis=1))


@restarts
def descendant_intervals_cpu(indptr, indices, level_ptr, post):
    """The CPU backend's phase 4: the twin, or on a deep DAG (:mod:`distgrail.stages.deep`) one
    compiled bottom-up pass over (C, k) copies (a component's k values in one cache line), with
    the same intervals (a pass that fails to compile: the twin, :func:`~distgrail.jit.restarts`)."""
    jit = compiled_sweeps(n_levels(level_ptr))
    if jit is None:
        return descendant_intervals_numpy(indptr, indices, level_ptr, post)
    lo = np.array(post.T, dtype=post.dtype, order="C")  # a copy: post stays as it is
    hi = lo.copy()
    jit.intervals_bottom_up(indptr, indices, lo, hi, int(level_ptr[-2]))
    lo = np.ascontiguousarray(lo.T)  # one (C, k) copy let go before the other is turned: 4 arrays of k*C at most
    return lo, np.ascontiguousarray(hi.T)


def descendant_intervals(be, indptr, indices, level_ptr, post):
    """Phase 4 on backend ``be`` (the CSR and ``post`` on its device)."""
    return be.pick(descendant_intervals_cpu, descendant_intervals_cuda)(indptr, indices, level_ptr, post)


# -- CUDA launcher (kernels/intervals.cu) --------------------------------------------------------

def intervals_bytes(C: int, m: int, k: int, fresh: bool = True) -> int:
    """Estimated GPU bytes that :func:`descendant_intervals_cuda` allocates for ``k`` dimensions:
    the COO rows of the small levels, the interleaved (lo, hi) buffer of one group of dimensions,
    and (``fresh``: not swept into the caller's arrays) lo and hi, and the stacked copy the caller
    casts them into."""
    return int(4 * m + 8 * min(k, MAX_DIMS_PER_SWEEP) * C + (32 * k * C if fresh else 0))


@launcher
def descendant_intervals_cuda(be, indptr, indices, level_ptr, post):
    """GPU twin of :func:`descendant_intervals_numpy`: (lo, hi). Dimensions go in groups of at
    most ``MAX_DIMS_PER_SWEEP``, each swept by the instantiation ``dg_sweep_iv<K>`` /
    ``dg_small_iv<K>`` for its size K."""
    return sweep_intervals_cuda(indptr, indices, level_ptr, post, post)


def sweep_intervals_cuda(indptr, indices, level_ptr, lo0, hi0, levels=None, into=None):
    """The sweep of :func:`descendant_intervals_cuda` on the current device from the start values
    ``lo0`` / ``hi0`` ((k, C) each; the post-order ranks for a whole build) over the levels
    ``levels`` = ``(first, last)`` (default every level with children), deepest first: new (lo,
    hi), int64, or written into ``into`` = ``(lo, hi)`` (which may be ``lo0`` and ``hi0``). A spread
    DAG's rank sweeps its own rows from the values the deeper ranks' rows reached
    (:func:`~distgrail.stages.partitioned_dag.spread_intervals`)."""
    cp = cupy()
    check_ids(indices, "the CSR")
    k, C = lo0.shape
    if C >= 2**31 - 1:
        raise BackendError(f"the GPU backend keeps ranks in int32; {C} components is too many")
    ensure_fits(intervals_bytes(C, indices.size, k, fresh=into is None),
                f"phase 4 of {k} dimension(s) of a DAG with {C:,} components and {indices.size:,} edges")
    lo, hi = (cp.empty((k, C), dtype=cp.int64) for _ in "lh") if into is None else into
    if C == 0 or k == 0:
        return lo, hi
    lp = np.asarray(level_ptr, dtype=np.int64)
    L = lp.size - 1
    first, last = (0, L - 2) if levels is None else (max(0, int(levels[0])), min(L - 2, int(levels[1])))
    lp_dev = cp.asarray(lp)
    work = level_work(indptr, lp_dev, lp)
    rows = rows_if_needed("intervals", indptr, lp, work, first, last)  # phase 4's small levels: COO rows
    kmax = min(k, MAX_DIMS_PER_SWEEP)
    buf = cp.empty(C * kmax * 2, dtype=cp.int32)  # reused by every group of dimensions
    for c0 in range(0, k, kmax):
        K = min(kmax, k - c0)
        lh = buf[: C * K * 2].reshape(C, K, 2)
        lh[:, :, 0] = lo0[c0 : c0 + K].T
        lh[:, :, 1] = hi0[c0 : c0 + K].T
        sweep(kernel("intervals", f"dg_sweep_iv<{K}>"), kernel("intervals", f"dg_small_iv<{K}>"), lp_dev, work,
              first, last, True, (indptr, indices, lh), (indptr, indices, lh, rows))
        lo[c0 : c0 + K] = lh[:, :, 0].T
        hi[c0 : c0 + K] = lh[:, :, 1].T
    return lo, hi
