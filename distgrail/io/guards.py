"""What every text reader refuses, wherever it reads (the CPU readers, the GPU parser's host side,
compressed streams): a carriage return that ends no line, and more edges than this machine can
hold, and an empty field of a comma-separated file. A file is read whole or refused (issue 40)."""

from __future__ import annotations

import numpy as np

__all__ = ["STRAY_CR", "stray_cr", "room_problem", "EMPTY_FIELD", "empty_field", "empty_field_numpy"]

#: what a carriage return that does not end a line is told
STRAY_CR = ("carriage return inside a line (old Mac line endings?): lines end with '\\n' or '\\r\\n' "
            "(tr '\\r' '\\n' converts the file), got ")


def stray_cr(data: bytes, last: bool) -> int:
    """Offset of the first ``\\r`` in ``data`` that is not followed by ``\\n``, or -1. ``last``: the
    data ends the file (a ``\\r`` as its very last byte ends the last line). Readers treat
    ``\\r\\n`` as a line end; a lone ``\\r`` would split nothing (``0 1\\r1 2`` is one line of
    four fields, read as one edge), so it is refused. One ``find`` when the text has no ``\\r``."""
    if data.find(b"\r") < 0:
        return -1
    ok = data.count(b"\r\n") + (1 if last and data.endswith(b"\r") else 0)
    if data.count(b"\r") == ok:
        return -1
    a = np.frombuffer(data, dtype=np.uint8)
    cr = np.flatnonzero(a == 13)
    nxt = a[np.minimum(cr + 1, a.size - 1)]
    bad = (nxt != 10) & ~((cr == a.size - 1) & last)
    return int(cr[np.flatnonzero(bad)[0]])


def room_problem(edges: int) -> str | None:
    """None while ``edges`` edges may fit this machine's memory
    (:data:`~distgrail.dtypes.BYTES_PER_EDGE` each, the least a build needs), else the rest of the
    message, need against have. Readers call it after every chunk: a compressed file's text is
    not known before it is inflated, so a gzip bomb (20 MB holding 20 GB of ``0 1``) is refused
    on the way, before memory runs out."""
    from ..dtypes import BYTES_PER_EDGE, physical_memory

    need, have = int(edges) * BYTES_PER_EDGE, physical_memory()
    if need <= have:
        return None
    return f"{int(edges):,} edges, which need at least {need / 2**30:,.1f} GiB, this machine has {have / 2**30:,.1f} GiB"


#: the message of an empty field in a comma-separated file
EMPTY_FIELD = "an empty source or target field (the first two columns of a CSV edge list hold the ids), got "
#: chunks of at least this many bytes are scanned by the compiled pass (:func:`empty_field`)
JIT_MIN_BYTES = 8 << 20
#: what an empty field looks like, each found by one ``bytes.find`` pass
_EMPTY = (b",,", b",\n", b",\r", b"\n,", b" ,", b"\t,")


def empty_field(data: bytes) -> int:
    """The offset in ``data`` (whole lines of a comma-separated edge list) of the comma that ends
    an empty first field or starts an empty second field of a line, outside a ``#``/``%`` comment
    (``,1``; ``2,,4``; ``2,``), or -1. Commas read as blanks would shift the columns after an empty
    one (``2,,4`` would be the edge from 2 to 4). Fields after the second may be empty (Gephi's
    edge tables: ``0,1,Directed,0,,,1.0``). A large chunk: one compiled pass
    (:mod:`distgrail.io.fields_jit`); a small one, or without numba, :func:`empty_field_numpy`
    (numba's import costs more than a small chunk's few passes)."""
    if len(data) < JIT_MIN_BYTES:
        return empty_field_numpy(data)
    arr = np.frombuffer(data, np.uint8)
    try:
        from .fields_jit import first_empty_field
    except ImportError:  # pragma: no cover - numba is a dependency
        return empty_field_numpy(data)
    return int(first_empty_field(arr))


def empty_field_numpy(data: bytes) -> int:
    """:func:`empty_field` with NumPy (the compiled scan's twin)."""
    if not data.startswith(b",") and not data.endswith(b",") and not any(cut in data for cut in _EMPTY):
        return -1  # (most files: a few passes, no per-line work)
    arr = np.frombuffer(data, np.uint8)
    nl = np.flatnonzero(arr == 10)
    starts = np.concatenate(([0], nl + 1))
    starts = starts[starts < arr.size]
    ends = np.searchsorted(nl, starts)  # index of each line's '\n'
    ends = np.where(ends < nl.size, nl[np.minimum(ends, max(nl.size - 1, 0))] if nl.size else arr.size, arr.size)
    commas = np.flatnonzero(arr == 44)
    marks = np.flatnonzero((arr == 35) | (arr == 37))
    k = np.searchsorted(commas, starts)  # each line's first comma (if inside the line)
    first = np.where(k < commas.size, commas[np.minimum(k, max(commas.size - 1, 0))] if commas.size else arr.size,
                     arr.size)
    has = first < ends
    j = np.searchsorted(marks, starts)
    mark = np.where(j < marks.size, marks[np.minimum(j, max(marks.size - 1, 0))] if marks.size else arr.size, arr.size)
    live = has & ~(mark < first)  # (a comma in a comment is none)
    lead = live & (first == starts + _blanks(arr, starts, first))  # nothing but blanks before the first comma
    after = np.minimum(first + 1, arr.size - 1)
    nxt = np.where(first + 1 < arr.size, arr[after], 10)
    second = live & ((nxt == 44) | (nxt == 10) | (nxt == 13) | (first + 1 >= ends))
    bad = np.flatnonzero(lead | second)
    return int(first[bad[0]]) if bad.size else -1


def _blanks(arr, starts, first):
    """The blanks (spaces, tabs) at the start of each line, up to its first comma."""
    out = np.zeros(starts.size, np.int64)
    for t in range(8):  # (a few leading blanks at most; more than 8 count as a field)
        pos = starts + out
        ok = (pos < first) & ((arr[np.minimum(pos, arr.size - 1)] == 32) | (arr[np.minimum(pos, arr.size - 1)] == 9))
        if not ok.any():
            break
        out += ok
    return out
