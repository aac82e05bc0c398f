"""Saturating unsigned arithmetic for path counts (DESIGN invariant 4: saturate, never wrap).

Values live in 0..CAP with CAP = 2**62; sums are exact below CAP and CAP above it. Sums are
split into 32-bit halves so that no intermediate wraps, on NumPy and CuPy alike.
"""

from __future__ import annotations

import numpy as np

CAP = 1 << 62
_LO = (1 << 32) - 1


def _combine(hi, lo, xp):
    cap = xp.uint64(CAP)
    big = hi >= xp.uint64(1 << 30)
    hi = xp.where(big, xp.uint64(0), hi)
    total = (hi << xp.uint64(32)) + lo
    return xp.where(big | (total > cap), cap, total)


def sat_add(a, b, xp=np):
    """min(a + b, CAP) for a, b in 0..CAP."""
    return xp.minimum(a + b, xp.uint64(CAP))


def seg_sum(vals, seg_starts, xp=np):
    """Saturating sum of each non-empty segment of ``vals`` starting at ``seg_starts``."""
    hi = _reduceat(vals >> xp.uint64(32), seg_starts, xp)
    lo = _reduceat(vals & xp.uint64(_LO), seg_starts, xp)
    return _combine(hi, lo, xp)


def seg_exclusive_prefix(vals, first_of_elem, xp=np):
    """Saturating sum of the earlier elements of each element's segment.

    ``first_of_elem[i]`` is the index of the first element of i's segment.
    """
    out = []
    for part in (vals >> xp.uint64(32), vals & xp.uint64(_LO)):
        cs = xp.cumsum(part, dtype=xp.uint64)
        out.append(cs - part - (cs[first_of_elem] - part[first_of_elem]))
    return _combine(out[0], out[1], xp)


def _reduceat(vals, starts, xp):
    # NumPy only (seg_sum serves the NumPy twin of phase 1; the GPU sums in kernels/labeling.cu)
    return np.add.reduceat(vals, starts) if starts.size else vals[:0]
