"""The renumbering of :mod:`distgrail.stages.insertion` (step 5) compiled with numba for the CPU:
each dimension's intervals gathered into the new component order and mapped by the monotone rank
map in one pass.

NumPy takes the same numbers in two passes over ``d x C`` 64-bit values, each a gather
(``np.take(lo, order, axis=1)``, then ``np.take(f, ...)``), and was most of a CPU update's
renumbering. Here every row is one loop, the rows on the shared host threads
(:mod:`distgrail.arrays`; the loop releases the GIL). Loaded
through :func:`distgrail.jit.load`; ``insertion._renumber`` falls back to the NumPy passes."""

from __future__ import annotations

import numpy as np

from ..arrays import _run_pieces
from ..jit import njit

__all__ = ["gather_row", "rows_gathered"]


@njit(nogil=True)
def gather_row(row, order, f, out):
    """``out[j] = f[row[order[j]]]`` for every ``j`` (``f`` of no entries: ``row[order[j]]``);
    ``order`` and the values of ``row`` are ids within ``row`` and ``f`` (not checked)."""
    if f.size:
        for j in range(order.size):
            out[j] = f[np.uint64(row[np.uint64(order[j])])]
    else:
        for j in range(order.size):
            out[j] = row[np.uint64(order[j])]


def rows_gathered(v: np.ndarray, order: np.ndarray, f: np.ndarray | None, threads: int) -> np.ndarray:
    """``f[v[:, order]]`` (``v[:, order]`` when ``f`` is None), of ``v``'s type: ``(d, order.size)``;
    ``threads`` > 1: the rows on the shared host threads."""
    out = np.empty((v.shape[0], order.size), dtype=v.dtype)
    fv = np.zeros(0, v.dtype) if f is None else np.ascontiguousarray(f, dtype=v.dtype)
    order = np.ascontiguousarray(order, dtype=np.int64)
    rows = [np.ascontiguousarray(v[k]) for k in range(v.shape[0])]
    if threads <= 1 or len(rows) <= 1:
        for k, row in enumerate(rows):
            gather_row(row, order, fv, out[k])
        return out
    gather_row(rows[0][:1], order[:0], fv, out[0][:0])  # compiled (or loaded) here, before the threads call it
    _run_pieces(gather_row, [(row, order, fv, out[k]) for k, row in enumerate(rows)])  # (the shared host threads)
    return out
