"""Saturating unsigned arithmetic for path counts (DESIGN invariant 4: saturate, never wrap).

Values live in 0..CAP with CAP = 2**62 (:mod:`distgrail.constants`, also ``DG_CAP`` in the
kernels); sums are exact below CAP and CAP above it. Sums are split into 32-bit halves so that
no intermediate wraps. Only :func:`seg_exclusive_prefix` also runs on CuPy (the GPU dfs rule's
roots); the GPU sums everything else in kernels/forest.cu.
"""

from __future__ import annotations

import numpy as np

from .constants import CAP

__all__ = ["CAP", "sat_add", "seg_sum", "seg_exclusive_prefix"]

_LO = (1 << 32) - 1


def _combine(hi, lo, xp):
    cap = xp.uint64(CAP)
    big = hi >= xp.uint64(1 << 30)
    hi = xp.where(big, xp.uint64(0), hi)
    total = (hi << xp.uint64(32)) + lo
    return xp.where(big | (total > cap), cap, total)


def sat_add(a, b):
    """min(a + b, CAP) for a, b in 0..CAP."""
    return np.minimum(a + b, np.uint64(CAP))


def seg_sum(vals, seg_starts):
    """Saturating sum of each non-empty segment of ``vals`` starting at ``seg_starts``."""
    if seg_starts.size == 0:
        return vals[:0]
    hi = np.add.reduceat(vals >> np.uint64(32), seg_starts)
    lo = np.add.reduceat(vals & np.uint64(_LO), seg_starts)
    return _combine(hi, lo, np)


def seg_exclusive_prefix(vals, first_of_elem, xp=np):
    """Saturating sum of the earlier elements of each element's segment (NumPy or CuPy ``xp``).

    ``first_of_elem[i]`` is the index of the first element of i's segment.
    """
    out = []
    for part in (vals >> xp.uint64(32), vals & xp.uint64(_LO)):
        cs = xp.cumsum(part, dtype=xp.uint64)
        out.append(cs - part - (cs[first_of_elem] - part[first_of_elem]))
    return _combine(out[0], out[1], xp)
