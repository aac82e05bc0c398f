"""NumPy or CuPy: which array module holds an array, and an array on the host.

The partitioned stages and searches are written once against an array module ``xp`` (NumPy on
the CPU backend, CuPy on a GPU backend); these two helpers are what they share. CuPy is imported
only when a CuPy array is met."""

from __future__ import annotations

import numpy as np

__all__ = ["to_host", "array_module", "csr_positions", "sorted_distinct", "unique", "scatter_max", "scatter_min",
           "scatter_at"]


def to_host(a) -> np.ndarray:
    """``a`` as a NumPy array: itself when it is one, else copied from its device (``a.get()``)."""
    return a if isinstance(a, np.ndarray) else a.get()


def array_module(a):
    """``numpy`` for NumPy arrays and scalars, ``cupy`` for CuPy arrays."""
    if isinstance(a, (np.ndarray, np.generic, int, float, bool)):
        return np
    if type(a).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def csr_positions(xp, ptr, rows, which: bool = False):
    """Positions in a CSR (offsets ``ptr``) of the entries of ``rows``, row by row (int64); with
    ``which``, also the index in ``rows`` of each entry's row (what ``repeat(arange(rows.size),
    degrees)`` gives, without CuPy's ``repeat``, which takes its counts through the host)."""
    start, deg = ptr[rows], ptr[rows + 1] - ptr[rows]
    cs = xp.cumsum(deg)
    total = int(cs[-1]) if cs.size else 0
    if total == 0:
        none = xp.zeros(0, dtype=xp.int64)
        return (none, none) if which else none
    e = xp.arange(total, dtype=xp.int64)
    r = xp.searchsorted(cs, e, side="right")
    pos = start[r] + e - (cs[r] - deg[r])
    return (pos, r) if which else pos


def sorted_distinct(xp, a):
    """``a`` (1-D) sorted in place and without repeats: a sort and a neighbour comparison. Not
    ``xp.unique``: it copies, and NumPy 2.3+ answers a plain ``np.unique`` of integers by hashing,
    far slower than this sort (docs/benchmarks.md)."""
    a.sort()
    if a.shape[0] < 2:
        return a
    keep = xp.empty(a.shape[0], dtype=xp.bool_)
    keep[0] = True
    xp.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def unique(xp, a):
    """The sorted distinct values of ``a`` (what ``xp.unique(a)`` gives; ``a`` is left alone):
    :func:`sorted_distinct` of a flat copy."""
    return sorted_distinct(xp, xp.array(a, copy=True).ravel())


def scatter_max(xp, a, idx, vals) -> None:
    """``a[idx[i]] = max(a[idx[i]], vals[i])`` for every i, repeated indices included
    (``maximum.at``: NumPy's, and CuPy's since CuPy 13; cupyx.scatter_max warns as deprecated)."""
    scatter_at(xp, "maximum", a, idx, vals)


def scatter_min(xp, a, idx, vals) -> None:
    """``a[idx[i]] = min(a[idx[i]], vals[i])`` for every i, repeated indices included."""
    scatter_at(xp, "minimum", a, idx, vals)


def scatter_at(xp, op, a, idx, vals) -> None:
    """``xp.<op>.at(a, idx, vals)``: the ufunc ``op`` ("maximum", "minimum", "add", "bitwise_or")
    applied in place at ``idx``, repeated indices included."""
    getattr(xp, op).at(a, idx, vals)  # (CuPy has ufunc.at since 13; the GPU extras need 13 or later)
