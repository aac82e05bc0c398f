"""What every text reader refuses, wherever it reads (the CPU readers, the GPU parser's host side,
compressed streams): a carriage return that ends no line, and more edges than this machine can
hold, and an empty field of a comma-separated file or of a tab-separated one; and how the readers
count an edge line's fields (when the first edge line is all integers, every later edge line of
integers only has as many fields). A file is read whole or refused (issue 40)."""

from __future__ import annotations

import re

import numpy as np

from ..jit import guard, load, restarts

__all__ = ["STRAY_CR", "stray_cr", "room_problem", "EMPTY_FIELD", "empty_field", "empty_field_numpy", "EMPTY_TAB_FIELD",
           "empty_tab_field", "empty_tab_walk", "first_edge_tab", "GLUED_MARK", "glued_mark", "BLANK_FIELD", "NO_COMMA",
           "blank_field", "comma_ids", "width_message", "line_fields", "line_integer", "first_edge_fields",
           "first_edge_width", "comma_width", "comma_width_numpy", "compiled_fields"]

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


def compiled_fields():
    """:mod:`distgrail.io.fields_jit` (the readers' compiled scans and numbers), or None where
    numba is missing, broken or turned off (``NUMBA_DISABLE_JIT``: its loops would run as
    Python, slower than the NumPy ones). Seen through :func:`distgrail.jit.guard`: a scan that
    fails to compile raises :class:`~distgrail.jit.CompileFailed`, and its caller, run under
    :func:`distgrail.jit.restarts`, scans again with NumPy."""
    return guard(load("distgrail.io.fields_jit", "text scans", stacklevel=5), "text scans")


@restarts
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
    jit = compiled_fields()
    if jit is None:  # (numba missing, broken or turned off)
        return empty_field_numpy(data)
    return int(jit.first_empty_field(arr))


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


#: the message of an empty first or second field of a tab-separated edge list of integer ids
EMPTY_TAB_FIELD = ("an empty source or target field (the first edge line holds a tab, so the file is tab-separated: "
                   "each tab ends a field and two in a row hold an empty one; tr -s '\\t' squeezes runs of tabs), got ")
#: what a tab that may make an empty field follows (its line's start, a blank), each found by one ``bytes.find``
_TAB_AFTER = (b"\n\t", b"\t\t", b" \t")


def _first_edge_content(data: bytes):
    """The first line of ``data`` with a byte other than a blank before its comment, cut at the
    comment (the first edge line, or a header); None when there is none."""
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        content = _COMMENT.split(data[pos:end], 1)[0]
        if content.translate(None, b" \t\r"):
            return content
        pos = end + 1
    return None


def first_edge_tab(data: bytes):
    """Whether the first edge line of ``data`` (whole lines of an edge list that is not
    comma-separated) holds a tab before its comment: the file is then tab-separated
    (:func:`empty_tab_field`); None when ``data`` has no edge line.

    >>> [first_edge_tab(x) for x in (b"# a\\tb\\n0\\t1\\n", b"0 1 # \\t\\n", b"\\t\\n# c\\n")]
    [True, False, None]
    """
    content = _first_edge_content(data)
    return None if content is None else b"\t" in content


@restarts
def empty_tab_field(data: bytes) -> int:
    """The offset in ``data`` (whole lines of a tab-separated edge list of integer ids: its first
    edge line holds a tab, :func:`first_edge_tab`) of the tab that makes a line's first or second
    field empty, outside a ``#``/``%`` comment, or -1: a tab before the line's first token
    (``\\t2\\t4``) or the second of two tabs between its first two tokens with only blanks between
    them (``2\\t\\t4``, ``2\\t \\t4``). Read as blanks, those tabs would shift the columns
    (``2\\t\\t4``, 2 then an empty target then 4, would be the edge from 2 to 4), as a CSV's
    ``2,,4`` would (:func:`empty_field`). Blanks are the ids' separators too, so ``0 1\\t\\t5`` (an
    empty third field) reads. One ``find`` per pattern when no line can hold such a tab; the tabs
    that follow a line end or a blank (the only ones that may) walked one by one when they are
    few (:func:`empty_tab_walk`), else one compiled pass (:mod:`distgrail.io.fields_jit`).

    >>> [empty_tab_field(x) for x in (b"0\\t1\\n2\\t\\t4\\n", b"\\t0\\t1\\n", b"0\\t1\\t\\t5\\n", b"0 1\\n\\t# c\\n")]
    [6, 0, -1, -1]
    >>> empty_tab_field(b"0\\t1 # \\t\\t\\n"), empty_tab_field(b"0\\t\\t1\\n")
    (-1, 2)
    """
    if not data.startswith(b"\t") and not any(cut in data for cut in _TAB_AFTER):
        return -1
    arr = np.frombuffer(data, np.uint8)
    tabs = np.flatnonzero(arr == 9)
    before = arr[np.maximum(tabs - 1, 0)]
    cand = tabs[(tabs == 0) | (before == 10) | (before == 9) | (before == 32)]
    if not cand.size:
        return -1
    if cand.size <= SPECIAL_JIT and len(data) < JIT_MIN_BYTES:
        return empty_tab_walk(data, cand.tolist())
    jit = compiled_fields()
    if jit is None:
        return empty_tab_walk(data, cand.tolist())
    return int(jit.first_empty_tab_field(arr))


_SOLID = re.compile(rb"[^ \t\r]")


def empty_tab_walk(data: bytes, cand) -> int:
    """:func:`empty_tab_field` line by line at the tabs ``cand`` (ascending offsets: those that
    follow a line end, a tab or a space; the compiled pass's twin)."""
    for c in cand:
        start = data.rfind(b"\n", 0, c) + 1
        head = data[start:c]
        if b"#" in head or b"%" in head:
            continue  # (inside a comment)
        toks = _TOKEN.findall(head)
        if not toks:  # a tab before the first field, if a field follows it
            m = _SOLID.search(data, c)
            if m is not None and data[m.start()] not in b"\n#%":
                return c
        elif len(toks) == 1 and head[len(head.rstrip(b" \t\r")):].count(b"\t") >= 1:
            return c  # (the second tab after the first field)
    return -1


#: the message of a comment mark glued to one of a line's first two fields
GLUED_MARK = ("a comment mark inside a field: '#' and '%' start a comment at a line's start or after a blank or a "
              "separator, so one right after a byte of the source or the target would cut it ('0,5%20' is no edge "
              "from 0 to 5; write the comment apart, or give the node another name), got ")


def glued_mark(data: bytes, sep: bytes = b" ", marks: bytes = b"#%") -> int:
    """The offset in ``data`` (whole lines) of the first comment mark (a byte of ``marks``) that
    starts its line's comment right after a byte of the line's first or second field, or -1: the
    byte before it is none of a line end, a blank (space, tab, ``\\r``) or ``sep``. The fields:
    ``sep`` b" " (an edge list of ids, a CSV's commas made blanks; names split at blanks) its
    blank-separated tokens; b"," or b"\\t" (names of a comma- or tab-separated file) the pieces
    between its ``sep`` bytes. Read as a comment's start it would cut the id or the name
    (``0,5%20`` would be the edge from 0 to 5, ``alice bob#2`` the edge to bob); a mark after a
    blank starts a comment (``0 1 # c``), and one glued to a later field too (``0 1 7#x``, Gephi's
    ``0,1,Directed,0,#python,1.0``: columns no reader keeps). One ``find`` per mark when ``data``
    holds none.

    >>> [glued_mark(x) for x in (b"0 1\\n0 5%20\\n", b"0 1 # c\\n", b"0 1 7#x\\n", b"# 0#1\\n", b"0#x 1\\n")]
    [7, -1, -1, -1, 1]
    >>> glued_mark(b"John Smith,Jane Doe#x\\n", b","), glued_mark(b"a b,c d,e#x\\n", b",")
    (19, -1)
    >>> glued_mark(b"1 2%x", marks=b"#"), glued_mark(b"a b\\tc%x", b"\\t"), glued_mark(b"a\\tb\\tc%x", b"\\t")
    (-1, 5, -1)
    """
    if not any(data.find(bytes((m,))) >= 0 for m in marks):
        return -1
    arr = np.frombuffer(data, np.uint8)
    at = np.flatnonzero(np.isin(arr, np.frombuffer(marks, np.uint8)))
    nl = np.flatnonzero(arr == 10)
    line = np.searchsorted(nl, at)
    first = np.ones(at.size, bool)
    first[1:] = line[1:] != line[:-1]  # (a line's first mark starts its comment: later ones are inside it)
    at, line = at[first], line[first]
    prev = arr[np.maximum(at - 1, 0)]
    glued = (at > 0) & (prev != 10) & (prev != 32) & (prev != 9) & (prev != 13) & (prev != sep[0])
    at, line = at[glued], line[glued]
    if not at.size:
        return -1
    start = np.concatenate(([0], nl + 1))[line]
    if sep == b" ":  # (the field it is glued to is one of the tokens before it)
        word = (arr != 32) & (arr != 9) & (arr != 13) & (arr != 10)
        starts = np.flatnonzero(word & ~np.concatenate(([False], word[:-1])))
        index = np.searchsorted(starts, at) - np.searchsorted(starts, start) - 1
    else:
        cuts = np.flatnonzero(arr == sep[0])
        index = np.searchsorted(cuts, at) - np.searchsorted(cuts, start)
    bad = np.flatnonzero(index < 2)
    return int(at[bad[0]]) if bad.size else -1



#: the message of a blank between two tokens in a comma-separated line's first or second field
BLANK_FIELD = ("a blank inside a source or target field (a CSV's fields are split at its commas, so '12 13,3' is "
               "the field '12 13' then 3, not two ids: the source and the target are the first two fields), got ")
#: the message of an edge line without a comma in a comma-separated file
NO_COMMA = ("an edge line without a comma in a comma-separated file (its first edge line has one, so fields are "
            "split at commas: '1 2' is one field, not two ids), got ")


def comma_ids(data: bytes):
    """Whether the first edge line of ``data`` (whole lines of a comma-separated edge list, as
    stored) holds its ids in its first two comma fields, so that :func:`blank_field` holds every
    line to them: not when it has no comma (a header's commas made the file comma-separated:
    ``src,dst`` then ``0 1``), nor when its first comma field (before the comment) holds three tokens or more,
    ids separated by blanks and a comma in a later column only (NetworkX's dicts, ``0 1 {'a': 1,
    'b': 2}``), read as before. None when ``data`` has no edge line.

    >>> [comma_ids(x) for x in (b"# c\\n0,1\\n", b"0 1 {'a': 1, 'b': 2}\\n", b"12 13,3\\n", b"\\n# c\\n", b"0 1\\n")]
    [True, False, True, None, False]
    """
    content = _first_edge_content(data)
    return None if content is None else b"," in content and len(_TOKEN.findall(content.split(b",", 1)[0])) < 3


def blank_field(data: bytes) -> tuple[int, str]:
    """(offset, message) of the first edge line of ``data`` (whole lines of a comma-separated edge
    list of integer ids, as stored) whose first or second comma field holds a blank between two
    tokens before the line's comment (``12 13,3``: read as blanks, the edge from 12 to 13, the target
    3 lost), the offset of the second token; :data:`NO_COMMA` when the line has no comma (``1 2``),
    else :data:`BLANK_FIELD`. (-1, "") when none. Blanks around a field (``0, 1``) are no such
    blank. One ``find`` per blank byte when ``data`` holds no space and no tab (a plain CSV).

    >>> [blank_field(x)[0] for x in (b"0,1\\n12 13,3\\n", b"0, 1 ,2 3\\n", b"0,1 # a b\\n", b"0,1\\n1 2\\n")]
    [7, -1, -1, 6]
    >>> blank_field(b"0,1\\n1 2\\n")[1] == NO_COMMA, blank_field(b"0,1\\t2\\n")[1] == BLANK_FIELD
    (True, True)
    """
    if data.find(b" ") < 0 and data.find(b"\t") < 0:
        return -1, ""
    arr = np.frombuffer(data, np.uint8)
    blank = (arr == 32) | (arr == 9) | (arr == 13)
    q = np.flatnonzero(~blank)  # (line ends, commas, comment marks and tokens' bytes)
    if q.size < 2:
        return -1, ""
    word = ~blank & (arr != 10) & (arr != 44) & (arr != 35) & (arr != 37)
    gap = (q[1:] - q[:-1] > 1) & word[q[:-1]] & word[q[1:]]
    cand = q[1:][gap]  # a token right after a blank run that follows another token
    if not cand.size:
        return -1, ""
    nl = np.flatnonzero(arr == 10)
    start = np.concatenate(([0], nl + 1))[np.searchsorted(nl, cand)]
    ccum = np.concatenate(([0], np.cumsum(arr == 44)))
    mcum = np.concatenate(([0], np.cumsum((arr == 35) | (arr == 37))))
    bad = np.flatnonzero((ccum[cand] - ccum[start] < 2) & (mcum[cand] == mcum[start]))
    if not bad.size:
        return -1, ""
    pos, first = int(cand[bad[0]]), int(start[bad[0]])
    end = data.find(b"\n", pos)
    content = _COMMENT.split(data[first:len(data) if end < 0 else end], 1)[0]
    return pos, (BLANK_FIELD if b"," in content else NO_COMMA)

# -- the fields of an edge line --------------------------------------------------------------------

_COMMENT = re.compile(rb"[#%]")
_TOKEN = re.compile(rb"[^ \t\r]+")
#: a chunk with more double quotes and comment marks than this is scanned by the compiled pass
#: (:func:`comma_width`)
SPECIAL_JIT = 4096


def width_message(fields: int, line: int | None, comma: bool) -> str:
    """What an edge line of integers only whose field count differs from the file's first edge line
    (``fields`` integer fields, at ``line``) is told, up to its value."""
    where = f"the first edge line (line {line})" if line else "the first edge line"
    what = "comma-separated integer fields" if comma else "integer fields"
    return (f"expected {fields} {what}, as on {where}: an edge list's lines of integers hold the same "
            f"columns (an adjacency list is no edge list), got ")


def line_fields(line: bytes, comma: bool) -> int:
    """The fields of one ``line`` (without its ``\n``) as the readers count them: 0 when it has no
    field before its first ``#``/``%`` (a blank or comment line); else, whitespace-separated, its
    tokens (runs of bytes other than spaces, tabs and ``\r``) before that comment; comma-separated,
    its commas + 1 (an empty field is a field: Gephi's ``0,1,Directed,0,,,1.0``), not counting the
    commas inside double-quoted fields (RFC 4180: a field that starts with ``"`` runs to the next
    lone ``"``; ``""`` inside it is a quote) nor after the first ``#``/``%`` outside them.

    >>> [line_fields(x, False) for x in (b"0 1", b"0\t\t1 2 # 3 4", b"# 0 1", b" ")]
    [2, 3, 0, 0]
    >>> [line_fields(x, True) for x in (b"0,1,Directed,0,,,1.0", b'0,1,"a, b",2', b"0,1 # a,b")]
    [7, 4, 2]
    """
    content = _COMMENT.split(line, 1)[0]
    if not content.translate(None, b" \t\r," if comma else b" \t\r"):
        return 0
    if not comma:
        return len(_TOKEN.findall(content))
    return _csv_fields(line) if b'"' in line else content.count(b",") + 1


def _csv_fields(line: bytes) -> int:
    """Commas + 1 of a comma-separated ``line`` outside double-quoted fields, up to its first
    ``#``/``%`` outside them (the compiled :func:`distgrail.io.fields_jit.comma_width` walks alike)."""
    n, i, k, start, quoted = 1, 0, len(line), True, False
    while i < k:
        c = line[i]
        if quoted:
            if c == 34:
                if i + 1 < k and line[i + 1] == 34:
                    i += 1  # ("" inside a quoted field)
                else:
                    quoted = False
        elif c == 35 or c == 37:
            break
        elif c == 44:
            n += 1
            start = True
            i += 1
            continue
        elif c == 34 and start:
            quoted = True
        start = False
        i += 1
    return n


def line_integer(line: bytes, comma: bool) -> bool:
    """Whether every field of ``line`` before its first ``#``/``%`` is a non-negative decimal
    integer (``[0-9]+``): whitespace-separated, its tokens; comma-separated, the pieces between its
    commas, blanks (spaces, tabs, ``\\r``) around them taken off (an empty field is no integer, nor
    is a quoted one). Only lines of integers are held to the first edge line's field count: a
    float weight, a dict of attributes (NetworkX's ``{'weight': 1.0}``), a word or an empty CSV
    field frees a line of it.

    >>> [line_integer(x, False) for x in (b"0 1 2 3", b"0 1 0.5", b"0 1 {}", b"0 1 7#x", b"0 1 7x")]
    [True, False, False, True, False]
    >>> [line_integer(x, True) for x in (b"0, 1 ,2\\r", b"0,1,", b"0,1,Directed", b'0,1,"2"', b"0,1,5%20,3")]
    [True, False, False, False, True]
    """
    content = _COMMENT.split(line, 1)[0]
    parts = [p.strip(b" \t\r") for p in content.split(b",")] if comma else _TOKEN.findall(content)
    return bool(parts) and all(p.isdigit() for p in parts)


def first_edge_fields(data: bytes, comma: bool) -> tuple[int, int, bool]:
    """(offset, fields, integer) of the first edge line of ``data`` (whole lines;
    :func:`line_fields`, :func:`line_integer`), or (-1, 0, False) when it has none."""
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        f = line_fields(data[pos:end], comma)
        if f:
            return pos, f, line_integer(data[pos:end], comma)
        pos = end + 1
    return -1, 0, False


def first_edge_width(data: bytes, comma: bool) -> tuple[int, int]:
    """(offset, width) of the first edge line of ``data``: ``width`` the field count every later
    edge line of integers only must have (its fields, when they are all integers), -1 when it
    holds some other field (nothing is held to a count then), 0 when ``data`` has no edge line
    (offset -1).

    >>> [first_edge_width(x, False) for x in (b"# c\\n0 1 2\\n", b"0 1 0.5\\n", b"#\\n")]
    [(4, 3), (0, -1), (-1, 0)]
    """
    pos, fields, integer = first_edge_fields(data, comma)
    return pos, (fields if integer else -1) if pos >= 0 else 0


@restarts
def comma_width(data: bytes, fields: int) -> tuple[int, int, int]:
    """``(bad, fields, first)`` of ``data``, whole lines of a comma-separated edge list: ``first``
    the offset of its first edge line (-1: none, or not looked for: -1 given); ``fields`` the width
    (:func:`first_edge_width`) every later edge line of integers only must have: the one given,
    or with 0 given the first edge line's (returned; -1: that line holds another field than an
    integer, so nothing is checked); ``bad`` the offset of the first edge line of integers only
    (:func:`line_integer`) of another count (:func:`line_fields`), or -1. A large chunk, or one of
    many comment marks, quotes or lines to walk one by one: one compiled pass
    (:mod:`distgrail.io.fields_jit`); else :func:`comma_width_numpy`."""
    if fields < 0:
        return -1, fields, -1
    if len(data) < JIT_MIN_BYTES and data.count(b'"') + data.count(b"#") + data.count(b"%") <= SPECIAL_JIT:
        got = comma_width_numpy(data, fields, walk=SPECIAL_JIT)
        if got is not None:
            return got
    jit = compiled_fields()
    if jit is None:
        return comma_width_numpy(data, fields)
    bad, fields, first = jit.comma_width(np.frombuffer(data, np.uint8), int(fields))
    return int(bad), int(fields), int(first)


#: the bytes a comma-separated line of integers only holds (digits, blanks, commas, line ends)
_CSV_INTEGER = np.zeros(256, bool)
_CSV_INTEGER[list(b"0123456789 \t\r,\n")] = True


def comma_width_numpy(data: bytes, fields: int, walk: int | None = None):
    """:func:`comma_width` with NumPy (the compiled pass's twin): every line's commas at once;
    the lines of digits, blanks and commas only whose count differs, and those that hold a comment
    mark or a quote, then one by one (:func:`line_fields`, :func:`line_integer`). ``walk``: None
    when more lines than that are to be walked (the compiled pass then runs)."""
    if fields < 0:
        return -1, fields, -1
    first, got = first_edge_width(data, True)
    if first < 0:
        return -1, fields, -1
    fields = fields or got
    if fields < 0:
        return -1, fields, first
    arr = np.frombuffer(data, np.uint8)
    marks = np.flatnonzero((arr == 44) | (arr == 10))  # commas and line ends, in order
    at = np.flatnonzero(arr[marks] == 10)
    nl = marks[at]
    count = np.diff(at, prepend=-1)  # commas + 1 of each line that ends with '\n'
    if not data.endswith(b"\n"):  # (the last line)
        count = np.append(count, marks.size - (int(at[-1]) if at.size else -1))
    look = count != fields
    if look.any():  # (a line of another byte than digits, blanks and commas holds a field no integer)
        other = np.bincount(np.searchsorted(nl, np.flatnonzero(~_CSV_INTEGER[arr])), minlength=look.size)
        look &= other == 0
    for c in b'#%"':
        if data.find(bytes((c,))) >= 0:  # (a line of a comment or a quoted field: walked)
            look[np.searchsorted(nl, np.flatnonzero(arr == c))] = True
    lines = np.flatnonzero(look)
    if walk is not None and lines.size > walk:
        return None
    for k in lines.tolist():
        s = int(nl[k - 1]) + 1 if k else 0
        e = int(nl[k]) if k < nl.size else len(data)
        if line_fields(data[s:e], True) not in (0, fields) and line_integer(data[s:e], True):
            return s, fields, first
    return -1, fields, first
