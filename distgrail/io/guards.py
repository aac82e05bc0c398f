"""What every text reader refuses, wherever it reads (the CPU readers, the GPU parser's host side,
compressed streams): a carriage return that ends no line, and more edges than this machine can
hold, and an empty field of a comma-separated file. A file is read whole or refused (issue 40)."""

from __future__ import annotations

import numpy as np

__all__ = ["STRAY_CR", "stray_cr", "room_problem", "EMPTY_FIELD", "empty_field"]

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
EMPTY_FIELD = "an empty field between commas (every column of a CSV edge list holds a value), got "
#: what an empty field looks like, each found by one ``bytes.find`` pass (no per-comma Python work)
_EMPTY = (b",,", b",\n", b",\r", b"\n,")


def empty_field(data: bytes) -> int:
    """The offset in ``data`` (whole lines of a comma-separated edge list) of the first empty field
    outside a ``#``/``%`` comment (``2,,4``, ``,1``, ``0,1,``), or -1. Commas read as blanks would
    shift the columns after an empty one (``2,,4`` would be the edge from 2 to 4)."""
    start = 0
    while True:
        found = [start] if data.startswith(b",", start) else []
        found += [at + (1 if cut == b"\n," else 0) for cut in _EMPTY if (at := data.find(cut, start)) >= 0]
        if data.endswith(b","):
            found.append(len(data) - 1)
        if not found:
            return -1
        at = min(found)
        line = data.rfind(b"\n", 0, at) + 1
        if data.find(b"#", line, at) < 0 and data.find(b"%", line, at) < 0:
            return at
        nxt = data.find(b"\n", at)  # inside a comment: the lines after it
        if nxt < 0:
            return -1
        start = nxt + 1
