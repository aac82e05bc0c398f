"""The level-sweep scheduler shared by the GPU launchers of the phases, and their launch constants.

Level sweeps: a level whose rows + edges are at most ``SMALL_LEVEL`` joins a run of consecutive
small levels that ONE block walks in a single launch (``__syncthreads`` between levels,
edge-parallel, the next level's structure prefetched; the edges' rows from a COO array in the
ζ and phase-4 sweeps, by search in the dist sweep, where the dfs rule's memory is tightest);
larger levels get a grid launch each, with rows and edges split evenly by merge path.
"""

from __future__ import annotations

import numpy as np

from .kernels import load_module

__all__ = ["SMALL_LEVEL", "HUB", "BATCH_THREADS", "GRID_THREADS", "ITEMS_PER_THREAD", "MAX_DIMS_PER_SWEEP",
           "cupy", "kernel", "sm_count", "level_work", "sweep", "rows_if_needed"]

#: levels with at most this many rows + edges are batched into single-block launches
SMALL_LEVEL = 4096
#: vertices with a larger in-degree get a block of their own in parent selection
HUB = 4096
BATCH_THREADS = 1024
GRID_THREADS = 256
ITEMS_PER_THREAD = 8
MAX_DIMS_PER_SWEEP = 8
U64_MAX = np.uint64(np.iinfo(np.uint64).max)


def cupy():
    import cupy

    return cupy


def kernel(module: str, name: str):
    """Function ``name`` of ``kernels/<module>.cu``, compiled for the current device."""
    return load_module(module, cupy().cuda.Device().id).get_function(name)


_SM_COUNT: dict = {}


def sm_count():
    dev = cupy().cuda.Device().id
    if dev not in _SM_COUNT:
        _SM_COUNT[dev] = int(cupy().cuda.runtime.getDeviceProperties(dev)["multiProcessorCount"])
    return _SM_COUNT[dev]


def level_work(ptr, lp_dev, level_ptr):
    """Rows + edges of every level for the CSR ``ptr`` (host int64 array)."""
    pl = ptr[lp_dev].get()
    return np.diff(level_ptr) + np.diff(pl)


def sweep(big, small, lp_dev, work, lo, hi, bottom_up, big_args, small_args):
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
    cap = sm_count() * 16
    i32 = np.int32
    for s, e in zip(starts, ends):
        if is_small[s]:
            small((1,), (BATCH_THREADS,), (lp_dev, i32(ls[s]), i32(step), i32(e - s), *small_args))
        else:
            for i in range(s, e):
                items = int(w[i])
                blocks = max(1, min(cap, -(-items // (GRID_THREADS * ITEMS_PER_THREAD))))
                big((blocks,), (GRID_THREADS,), (lp_dev, i32(ls[i]), i32(1), i32(1), *big_args))


def rows_if_needed(ptr, lp, work, lo, hi):
    """Row of every CSR entry (int32), if some small level in lo..hi has edges; else a dummy."""
    cp = cupy()
    C = ptr.size - 1
    if hi >= lo:
        sl = np.arange(lo, hi + 1)
        edges = work[sl] - np.diff(lp)[sl]
        if ((work[sl] <= SMALL_LEVEL) & (edges > 0)).any():
            m = int(ptr[-1].get())
            rows = cp.empty(max(m, 1), dtype=cp.int32)
            blocks = max(1, min(-(-C // (GRID_THREADS // 32)), sm_count() * 32))
            kernel("labeling", "dg_csr_rows")((blocks,), (GRID_THREADS,), (ptr, rows, np.int64(C)))
            return rows
    return cp.zeros(1, dtype=cp.int32)
