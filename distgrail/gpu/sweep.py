"""The level-sweep scheduler shared by the GPU launchers of the phases.

Level sweeps: a level whose rows + edges are at most ``SMALL_LEVEL`` joins a run of consecutive
small levels that ONE block walks in a single launch (``__syncthreads`` between levels,
edge-parallel, the next level's structure prefetched; the edges' rows from a COO array in the
ζ and phase-4 sweeps, by search in the dist sweep, where the dfs rule's memory is tightest);
larger levels get a grid launch each, with rows and edges split evenly by merge path
(``kernels/sweep.cuh``). The launch shapes come from :mod:`distgrail.constants`.
"""

from __future__ import annotations

import numpy as np

from ..constants import (BATCH_THREADS, GRID_THREADS, HUB, HUB_TEAM_WARPS, ITEMS_PER_THREAD, MAX_DIMS_PER_SWEEP,
                         SMALL_LEVEL)
from .kernels import load_module

__all__ = ["SMALL_LEVEL", "HUB", "BATCH_THREADS", "GRID_THREADS", "ITEMS_PER_THREAD", "MAX_DIMS_PER_SWEEP",
           "U64_MAX", "cupy", "kernel", "sm_count", "level_work", "plan_sweep", "sweep", "warp_grid",
           "rows_if_needed", "hub_team"]

U64_MAX = np.uint64(np.iinfo(np.uint64).max)


def cupy():
    import cupy

    return cupy


def kernel(stage: str, name: str):
    """Function ``name`` of ``kernels/<stage>.cu``, compiled for the current device (a launcher
    runs under ``with cupy.cuda.Device(be.device)``; see :func:`distgrail.gpu.memory.launcher`).
    Template instantiations are named as written: ``kernel("intervals", "dg_sweep_iv<3>")``."""
    return load_module(stage, cupy().cuda.Device().id).get_function(name)


_SM_COUNT: dict = {}


def sm_count():
    dev = cupy().cuda.Device().id
    if dev not in _SM_COUNT:
        _SM_COUNT[dev] = int(cupy().cuda.runtime.getDeviceProperties(dev)["multiProcessorCount"])
    return _SM_COUNT[dev]


def warp_grid(rows: int, sms: int) -> int:
    """Blocks of ``GRID_THREADS`` for a warp-per-row kernel over ``rows`` rows (grid-stride,
    at most 32 blocks per SM)."""
    return max(1, min(-(-int(rows) // (GRID_THREADS // 32)), sms * 32))


def hub_team(n_hubs: int, warp: int, n_warps: int, team_warps: int = HUB_TEAM_WARPS):
    """``(teams, size, team, place)`` of grid warp ``warp`` of ``n_warps`` in a ``*_hubs`` kernel
    over ``n_hubs`` listed rows: twin of ``dg_hub_team`` (kernels/common.cuh). Team ``t`` (of
    ``size`` warps) sweeps rows t, t + teams, ...; a warp of team >= teams sweeps none."""
    most = max(1, n_warps // team_warps)
    teams = 1 if n_hubs < 1 else min(n_hubs, most)
    size = n_warps // teams
    team = warp // size
    return teams, size, team, warp - team * size


def level_work(ptr, lp_dev, level_ptr):
    """Rows + edges of every level for the CSR ``ptr`` (device int64 array)."""
    pl = ptr[lp_dev].get()
    return np.diff(level_ptr) + np.diff(pl)


def plan_sweep(work, lo, hi, bottom_up, sms):
    """The launches that sweep levels lo..hi (inclusive), deepest first if ``bottom_up``.

    Returns a list of ``(kind, first_level, step, nlev, blocks)``: ``kind`` "small" is ONE
    block walking a run of ``nlev`` consecutive levels of at most ``SMALL_LEVEL`` rows + edges;
    "big" is one grid launch of one larger level, ``blocks`` sized for ``ITEMS_PER_THREAD``
    items per thread and capped at 16 blocks per SM.
    """
    if hi < lo:
        return []
    step = -1 if bottom_up else 1
    ls = np.arange(hi, lo - 1, -1) if bottom_up else np.arange(lo, hi + 1)
    w = np.asarray(work)[ls]
    is_small = w <= SMALL_LEVEL
    chg = np.flatnonzero(is_small[1:] != is_small[:-1]) + 1
    starts = np.concatenate(([0], chg)).tolist()
    ends = np.concatenate((chg, [ls.size])).tolist()
    cap = sms * 16
    plan = []
    for s, e in zip(starts, ends):
        if is_small[s]:
            plan.append(("small", int(ls[s]), step, e - s, 1))
        else:
            for i in range(s, e):
                blocks = max(1, min(cap, -(-int(w[i]) // (GRID_THREADS * ITEMS_PER_THREAD))))
                plan.append(("big", int(ls[i]), 1, 1, blocks))
    return plan


def sweep(big, small, lp_dev, work, lo, hi, bottom_up, big_args, small_args, sms=None):
    """Launch :func:`plan_sweep`'s plan: ``small`` with one block of ``BATCH_THREADS``, ``big``
    with grids of ``GRID_THREADS``; every kernel gets ``(level_ptr, l0, step, nlev, *args)``."""
    i32 = np.int32
    for kind, l0, step, nlev, blocks in plan_sweep(work, lo, hi, bottom_up, sm_count() if sms is None else sms):
        if kind == "small":
            small((1,), (BATCH_THREADS,), (lp_dev, i32(l0), i32(step), i32(nlev), *small_args))
        else:
            big((blocks,), (GRID_THREADS,), (lp_dev, i32(l0), i32(step), i32(nlev), *big_args))


def needs_rows(work, level_ptr, lo, hi) -> bool:
    """True when some level in lo..hi is swept by the single-block kernel AND has edges (only
    those read the COO row array)."""
    if hi < lo:
        return False
    sl = np.arange(lo, hi + 1)
    edges = np.asarray(work)[sl] - np.diff(np.asarray(level_ptr))[sl]
    return bool(((np.asarray(work)[sl] <= SMALL_LEVEL) & (edges > 0)).any())


def rows_if_needed(stage, ptr, lp, work, lo, hi):
    """Row of every CSR entry (int32, by ``dg_csr_rows`` of ``kernels/<stage>.cu``) if
    :func:`needs_rows`; else a one-element dummy."""
    cp = cupy()
    if needs_rows(work, lp, lo, hi):
        C = ptr.size - 1
        m = int(ptr[-1].get())
        rows = cp.empty(max(m, 1), dtype=cp.int32)
        kernel(stage, "dg_csr_rows")((warp_grid(C, sm_count()),), (GRID_THREADS,), (ptr, rows, np.int64(C)))
        return rows
    return cp.zeros(1, dtype=cp.int32)
