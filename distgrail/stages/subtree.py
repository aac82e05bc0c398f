"""Phase 2 (bottom-up): subtree sizes of the spanning forest DT.

A DT parent always sits on a lower level than its child, and components are numbered by level,
so sweeping levels from the deepest up finishes every subtree before its parent reads it.
"""

from __future__ import annotations

import numpy as np

from ..gpu.memory import ensure_fits, launcher
from ..jit import restarts
from .deep import compiled_sweeps, n_levels
from ..gpu.sweep import cupy, kernel, sweep

__all__ = ["subtree_sizes", "subtree_sizes_numpy", "subtree_sizes_cpu", "subtree_sizes_cuda", "subtree_bytes"]


def subtree_sizes_numpy(parent, level_ptr):
    """NumPy twin: size[v] = 1 + Σ size[children of v in DT]."""
    C = parent.size
    size = np.ones(C, dtype=np.int64)
    lp = level_ptr.tolist()
    for lev in range(len(lp) - 2, 0, -1):
        a, b = lp[lev], lp[lev + 1]
        par = parent[a:b]
        lo = int(par.min())
        if a - lo <= 8 * (b - a) + 64:  # parents in a narrow window (always so for max-level)
            size[lo:a] += np.bincount(par - lo, weights=size[a:b], minlength=a - lo).astype(np.int64)
        else:
            np.add.at(size, par, size[a:b])
    return size


@restarts
def subtree_sizes_cpu(parent, level_ptr):
    """The CPU backend's phase 2: the twin, or on a deep forest (:mod:`distgrail.stages.deep`) one
    compiled pass, deepest component first, with the same sizes (a pass that fails to compile: the
    twin, :func:`~distgrail.jit.restarts`)."""
    jit = compiled_sweeps(n_levels(level_ptr))
    if jit is None:
        return subtree_sizes_numpy(parent, level_ptr)
    return jit.subtree_sizes(parent, int(level_ptr[1]))


def subtree_sizes(be, parent, level_ptr):
    """Phase 2 on backend ``be`` (``parent`` on its device)."""
    return be.pick(subtree_sizes_cpu, subtree_sizes_cuda)(parent, level_ptr)


# -- CUDA launcher (kernels/subtree.cu) ----------------------------------------------------------

def subtree_bytes(C: int) -> int:
    """GPU bytes that :func:`subtree_sizes_cuda` allocates: the sizes."""
    return 8 * int(C)


@launcher
def subtree_sizes_cuda(be, parent, level_ptr):
    """GPU twin of :func:`subtree_sizes_numpy`: one vertex-parallel sweep of the child levels,
    deepest first (``dg_size_levels``), each adding its sizes into the parents."""
    cp = cupy()
    C = parent.size
    ensure_fits(subtree_bytes(C), f"phase 2 of a forest of {C:,} components")
    size = cp.ones(C, dtype=cp.int64)
    lp = np.asarray(level_ptr, dtype=np.int64)
    L = lp.size - 1
    if C == 0 or L <= 1:
        return size
    lp_dev = cp.asarray(lp)
    work = np.diff(lp)
    size_levels = kernel("subtree", "dg_size_levels")
    sweep(size_levels, size_levels, lp_dev, work, 1, L - 1, True, (parent, size), (parent, size))
    return size
