"""Segmented reductions over CSR rows for the NumPy twins (the GPU phases use kernels/ instead)."""

from __future__ import annotations

import numpy as np

__all__ = ["row_ids", "seg_min", "seg_max", "seg_first_true", "sorted_unique", "gather_rows"]


def row_ids(indptr):
    """Row of every CSR entry."""
    n = indptr.size - 1
    return np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))


def _seg_reduce(ufunc, vals, starts):
    if starts.size == 0:
        return vals[..., :0]
    return ufunc.reduceat(vals, starts, axis=-1)


def seg_min(vals, starts):
    """Minimum of each non-empty segment ``vals[..., starts[i]:starts[i+1]]``."""
    return _seg_reduce(np.minimum, vals, starts)


def seg_max(vals, starts):
    """Maximum of each non-empty segment."""
    return _seg_reduce(np.maximum, vals, starts)


def seg_first_true(mask, seg_of_elem, nseg):
    """Index of the first True element of each segment (segments must each hold one True)."""
    idx = np.flatnonzero(mask)
    segs = seg_of_elem[idx]
    first = np.ones(idx.size, dtype=bool)
    first[1:] = segs[1:] != segs[:-1]
    out = np.full(nseg, -1, dtype=np.int64)
    out[segs[first]] = idx[first]
    return out


def sorted_unique(a):
    """Sorted distinct values (by sorting: NumPy 2's hash-based ``unique`` is slower here)."""
    s = np.sort(a)
    if s.size == 0:
        return s
    keep = np.ones(s.size, dtype=bool)
    keep[1:] = s[1:] != s[:-1]
    return s[keep]


def gather_rows(indptr, indices, rows):
    """Concatenate the CSR rows ``rows``; return (values, row lengths)."""
    starts = indptr[rows]
    counts = indptr[rows + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return indices[:0], counts
    shift = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return indices[shift + np.arange(total, dtype=shift.dtype)], counts
