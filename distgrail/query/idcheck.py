"""The rule a query batch's vertex ids must pass: integer ids in ``0 .. n-1``, a QueryError naming
the first bad one (sources before targets) otherwise. One place for it, whoever checks:
:meth:`distgrail.index.Index.check_pairs` before any work (the server and the sharded query, before
their collectives), and the compiled CPU prefilter (:mod:`distgrail.query.prefilter_jit`), which
tests each id as its first pass reads it, so a one-process CPU query reads a batch of good ids once
(:meth:`~distgrail.index.Index.query`)."""

from __future__ import annotations

import numpy as np

from ..arrays import as_unsigned, interleaved_rows, max_parallel
from ..errors import QueryError, id_range

__all__ = ["checked_ids", "refuse_out_of_range", "range_left_to_prefilter"]

_NATIVE = (np.dtype(np.int64), np.dtype(np.int32))


def range_left_to_prefilter(s: np.ndarray, t: np.ndarray) -> bool:
    """Whether the range check of the 1-D ids ``s`` and ``t`` may be left to the compiled CPU
    prefilter: both native int64 or both int32, the types it reads as they are (any other type is
    converted, or refused as not integer, by :func:`checked_ids` first: its errors keep their order)."""
    return s.dtype == t.dtype and s.dtype in _NATIVE


def refuse_out_of_range(s: np.ndarray, t: np.ndarray, n: int) -> None:
    """Raise the QueryError naming the first bad id of ``s`` (``sources``), then of ``t``
    (``targets``): ids of a type not integer, or an id outside ``0 .. n-1``; nothing when every
    id is good. One pass over each: as unsigned, a negative id is huge, so a single maximum
    catches both ends."""
    for arr, what in ((s, "sources"), (t, "targets")):
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise QueryError(f"{what} must be integer vertex ids, got dtype {arr.dtype}")
        if arr.size and int(max_parallel(as_unsigned(arr, n))) >= n:
            i = int(np.flatnonzero((arr < 0) | (arr >= n))[0])
            raise QueryError(f"{what}[{i}] {id_range(n, whose='the index')}, got {int(arr[i])!r}")


def checked_ids(s: np.ndarray, t: np.ndarray, n: int, narrow: bool = False):
    """1-D ids ``s`` and ``t`` of equal shapes, checked to be integer ids in ``0 .. n-1``
    (a QueryError naming the first bad one), as int64; ``narrow``: native int32 ids stay int32.
    The two columns of one (k, 2) array are checked in one pass over its rows, read as unsigned
    values of their width: a negative int64 id is then at least 2^63, a negative int32 one at
    least 2^31, below an ``n`` above 2^31 (such int32 rows take the column by column check)."""
    rows = interleaved_rows(s, t)
    if (rows is not None and (narrow or rows.dtype == np.int64) and (rows.itemsize == 8 or n <= 2**31)
            and int(max_parallel(rows.reshape(-1).view(f"u{rows.itemsize}"))) < n):
        return s, t
    refuse_out_of_range(s, t, n)
    if narrow and s.dtype == t.dtype == np.dtype(np.int32):
        return s, t
    return s.astype(np.int64, copy=False), t.astype(np.int64, copy=False)
