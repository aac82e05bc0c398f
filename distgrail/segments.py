"""Segmented reductions over CSR rows for the NumPy twins (``row_ids`` and ``sorted_unique`` take
``xp`` and also run on CuPy; the GPU phases use kernels/ for the rest)."""

from __future__ import annotations

import numpy as np

__all__ = ["row_ids", "seg_min", "seg_max", "seg_first_true", "sorted_unique", "gather_rows"]


def row_ids(indptr, xp=np):
    """Row of every CSR entry."""
    n = indptr.size - 1
    return xp.repeat(xp.arange(n, dtype=xp.int64), xp.diff(indptr))


def _seg_reduce(ufunc_name, vals, starts, xp):
    # NumPy only: the GPU phases use kernels/ instead of these helpers
    if starts.size == 0:
        return vals[..., :0]
    return getattr(np, ufunc_name).reduceat(vals, starts, axis=-1)


def seg_min(vals, starts, xp=np):
    """Minimum of each non-empty segment ``vals[..., starts[i]:starts[i+1]]``."""
    return _seg_reduce("minimum", vals, starts, xp)


def seg_max(vals, starts, xp=np):
    """Maximum of each non-empty segment."""
    return _seg_reduce("maximum", vals, starts, xp)


def seg_first_true(mask, seg_of_elem, nseg, xp=np):
    """Index of the first True element of each segment (segments must each hold one True)."""
    idx = xp.flatnonzero(mask)
    segs = seg_of_elem[idx]
    first = xp.ones(idx.size, dtype=bool)
    first[1:] = segs[1:] != segs[:-1]
    out = xp.full(nseg, -1, dtype=xp.int64)
    out[segs[first]] = idx[first]
    return out


def sorted_unique(a, xp=np):
    """Sorted distinct values (by sorting: NumPy 2's hash-based ``unique`` is slower here)."""
    s = xp.sort(a)
    if s.size == 0:
        return s
    keep = xp.ones(s.size, dtype=bool)
    keep[1:] = s[1:] != s[:-1]
    return s[keep]


def gather_rows(indptr, indices, rows, xp=np):
    """Concatenate the CSR rows ``rows``; return (values, row lengths)."""
    starts = indptr[rows]
    counts = indptr[rows + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return indices[:0], counts
    shift = xp.repeat(starts - (xp.cumsum(counts) - counts), counts)
    return indices[shift + xp.arange(total, dtype=shift.dtype)], counts
