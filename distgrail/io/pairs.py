"""Query pairs files: text ``u v`` per line (``.gz`` allowed) or a ``.npy`` (k, 2) array; a third
column of 0/1 (``u v answer``, the GRAIL benchmark's query files; ``.npy`` (k, 3)) is the
expected answer of each pair (:func:`read_query_pairs`)."""

from __future__ import annotations

import os
import re
import tokenize
from dataclasses import dataclass

import numpy as np

from ..arrays import as_unsigned, copy_parallel, max_parallel
from ..errors import GraphFormatError, id_range
from .answers import compression_of
from .dialect import COMMA_TABLE
from .edgelist import Width, read_columns
from .regular import check_regular
from .text import Chunk, Text, digits_value, shown

__all__ = ["read_pairs", "read_query_pairs", "read_pairs_for", "QueryPairs", "npy_pairs_array", "read_npy_rows", "npy_rows", "is_npy"]

#: ids in a pairs file read without the index's vertex count are below this (checked later)
_CAP = 2**40
#: how a line of node labels was split, said where its fields are not two or three
_SPLIT = {b" ": " (split at blanks and tabs; name the file .tsv or .csv to split it at tabs or commas, so that "
               "labels may hold blanks)",
          b",": " (split at commas: the file is named .csv)", b"\t": " (split at tabs: the file is named .tsv)"}


@dataclass
class QueryPairs:
    """A pairs file read: ``sources``, ``targets``; ``expected`` (bool, or None: no third column);
    ``lines`` (1-based line of each pair in a text file with expected answers or node labels, else
    None); ``ids``: the vertex ids ``(sources, targets)`` (int64) of node labels read against an
    index's labels (None otherwise), so that they are not looked up again."""

    path: str
    sources: np.ndarray
    targets: np.ndarray
    expected: np.ndarray | None = None
    lines: np.ndarray | None = None
    ids: tuple | None = None

    def where(self, k: int) -> str:
        """``file:line`` of pair ``k`` (``file[k]`` for a .npy array)."""
        return f"{self.path}:{int(self.lines[k])}" if self.lines is not None else f"{self.path}[{k}]"


def read_pairs(path, labels: str | None = None, n: int | None = None, known=None) -> tuple[np.ndarray, np.ndarray]:
    """Read query pairs: text ``u v`` per line (``#``/``%`` comments, ``.gz`` in any case) or a ``.npy``
    array of shape (k, 2); a third column of expected answers is checked and left out (see
    :func:`read_query_pairs`).

    ``labels`` ("int" or "str"): the index maps node labels (see :mod:`distgrail.nodelabels`); the
    two fields of a line are then labels (integers, negative ones too, or strings; split at commas
    in a ``.csv``, at tabs in a ``.tsv``, where a label may hold blanks, else at blanks).
    ``n`` (vertex ids) or ``known`` (the index's :class:`~distgrail.nodelabels.NodeLabels`): an id
    out of range 0..n-1, or a label not in the graph, is refused here with its file and line;
    without them ids are checked against the index later, by :meth:`Index.query`."""
    q = read_query_pairs(path, labels, n, known)
    return q.sources, q.targets


def _pairs_file(path) -> str:
    """``path`` as a str, refused unless it names an existing regular file (a FIFO is never
    opened: it could block forever)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise GraphFormatError("no such pairs file", path=path)
    if os.path.isdir(path):
        raise GraphFormatError("is a directory, not a pairs file", path=path)
    check_regular(path, "query pairs", GraphFormatError)
    return path


def is_npy(path) -> bool:
    """Whether a pairs file is read as ``.npy``: by its name's ending, in any case (``P.NPY`` too,
    as answers are: :func:`distgrail.io.writers.check_extension`)."""
    return os.fspath(path).lower().endswith(".npy")


def read_query_pairs(path, labels: str | None = None, n: int | None = None, known=None,
                     mapped: bool = False) -> QueryPairs:
    """:func:`read_pairs`, with the expected answers of a file of three columns ``u v answer``
    (answer 0 or 1; every pair line then has three columns) and the line of each such pair.
    ``mapped``: the id columns of a ``.npy`` of native 64-bit or int32 ids, checked against ``n``,
    are the mapped file's own (read-only views, no copy; :func:`read_npy_rows`): the file is then read
    until the answers are made, and must not be truncated or rewritten meanwhile (the process
    would end with SIGBUS)."""
    path = _pairs_file(path)
    if is_npy(path):
        if labels is not None:
            return _npy_label_pairs(path, labels, known)
        return _npy_pairs(path, n, copy=not (mapped and n is not None))
    data = None
    if compression_of(path) == "gz":  # (by the name in any case, as the writers tell it)
        import gzip
        import zlib

        if os.path.getsize(path) == 0:  # (gzip reads it as no data: no gzip stream is empty, so it was cut short)
            raise GraphFormatError("not a readable gzip file, truncated or damaged (an empty file named as gzip "
                                   "data: no gzip stream is empty)", path=path)
        try:
            with gzip.open(path, "rb") as f:
                data = f.read()
        except (OSError, EOFError, zlib.error) as e:
            raise GraphFormatError(f"not a readable gzip file, truncated or damaged ({e})", path=path) from None
    if labels is not None:
        return _label_pairs(path, data, labels, known)
    if data is None:
        with open(path, "rb") as f:
            head = f.read(256)
            if head and os.fstat(f.fileno()).st_size == 0:  # (a /proc or /sys file: its size says 0, its
                data = head + f.read()  # reads give text; mapped by its size, it would be read as no pairs)
        _no_bom(path, head)
    else:
        _no_bom(path, data[:256])
    sep = separator_of(path)
    comma = sep == b","
    text = Text(path, data, translate=COMMA_TABLE if comma else None)
    width = _SeparatedIds(sep) if sep != b" " else None  # (a .csv's or .tsv's fields: each one id or answer)
    try:
        start = answers_header(text.buf, sep)[1]
        first = _first_pair_line(text, start)
        if len(first.translate(COMMA_TABLE).split() if comma else first.split()) == 3:
            return _three_columns(text, n, width, start)
        u, v, _ = read_columns(text, start, 2, b"#%", 0, n, what="query pair", exact=True, cap=_CAP, width=width)
    finally:
        text.close()
    return QueryPairs(path, u.astype(np.int64), v.astype(np.int64))


def _no_bom(path, head: bytes) -> None:
    """A text pairs file starting with binary data (the graph reader's rule,
    :func:`~distgrail.io.excerpt.looks_binary`: a NUL byte, an executable, an archive ...) or with a
    UTF-8 byte order mark (its first id or label would start with U+FEFF: no id, no node of the
    graph) is refused; ``head``: its first line, or more."""
    from .excerpt import bom_problem, looks_binary

    if looks_binary(head):
        raise GraphFormatError(f"binary data, not a text pairs file: it starts with {shown(head)}", path=path)
    bom = bom_problem(head, "a pairs file")
    if bom:
        raise GraphFormatError(bom, path=path, line=1)


def read_pairs_for(path, index, mapped: bool = False) -> QueryPairs:
    """:func:`read_query_pairs` for ``index``: its labels, or ids checked against its vertex count,
    so that a pair it cannot answer is refused with the file and line (the command line's way)."""
    labels = index.node_labels
    if labels is None:
        return read_query_pairs(path, None, n=index.n, mapped=mapped)
    return read_query_pairs(path, labels.kind, known=labels)


def _npy_pairs(path, n, copy: bool = True) -> QueryPairs:
    """An integer ``.npy`` of shape (k, 2), or (k, 3) with the expected answers. The file is mapped,
    not loaded: each id column is checked by one threaded maximum (as unsigned, a negative id is
    huge) and copied out by the host threads (:mod:`distgrail.arrays`); only a file that fails
    the check is searched for its first bad id, in row order, for the message. ``copy=False``:
    native 64-bit and int32 id columns stay views of the mapped file (:func:`_npy_ids`)."""
    arr = npy_pairs_array(path)
    expected = None
    if arr.shape[1] == 3:
        bad = np.flatnonzero((arr[:, 2] != 0) & (arr[:, 2] != 1))
        if bad.size:
            raise GraphFormatError(f"expected answer 0 or 1, got {int(arr[bad[0], 2])}", path=f"{path}[{bad[0]}, 2]")
        expected = np.asarray(arr[:, 2]).astype(bool)
    s, t = _npy_ids(path, arr, n, copy=copy)
    return QueryPairs(path, s, t, expected)


def _npy_label_pairs(path, kind, known) -> QueryPairs:
    """A ``.npy`` of integer node labels (shape (k, 2), or (k, 3) with the expected answers), for
    an index of integer labels; ``known``: each must be in it. A label that is not (one past
    2^63 - 1 among them) is named as an id is, by its row and column: ``p.npy[1, 1]: node 3 is not
    in the graph``. An index of string labels takes them from a text pairs file."""
    arr = npy_pairs_array(path)
    if kind != "int":
        raise GraphFormatError(f"this index takes the graph's string node labels, got {arr.dtype} pairs "
                               f"(give them in a text pairs file, one 'u v' pair a line)", path=path)
    # a label past 2^63 - 1 (uint64 of either byte order) is no node (as int64 it would be another)
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size:
        big = np.flatnonzero(np.asarray(arr[:, :2]).reshape(-1) > np.uint64(2**63 - 1))
        if big.size:
            row, col = divmod(int(big[0]), 2)
            raise GraphFormatError(f"node {int(arr[row, col])} is not in the graph", path=f"{path}[{row}, {col}]")
    q = _npy_pairs(path, None)
    if known is not None and q.sources.size:
        ids, found = known.lookup(np.stack([q.sources, q.targets], axis=1).astype(np.int64))
        if not found.all():
            row, col = divmod(int(np.flatnonzero(~found.reshape(-1))[0]), 2)
            raise GraphFormatError(f"node {int((q.sources, q.targets)[col][row])} is not in the graph",
                                   path=f"{path}[{row}, {col}]")
        q.ids = (ids[:, 0], ids[:, 1])
    return q


def npy_pairs_array(path) -> np.ndarray:
    """The ``.npy`` pairs file mapped (not read), its shape and type checked: integer, (k, 2) or
    (k, 3)."""
    path = _pairs_file(path)
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic != b"\x93NUMPY":  # (np.load takes any other file for a pickle, and says to load it unsafely)
        raise GraphFormatError(f"not a .npy array: it starts with {shown(magic)}, not NumPy's magic "
                               f"'\\x93NUMPY'", path=path)
    try:
        arr = np.load(path, allow_pickle=False, mmap_mode="r")
    except (ValueError, OSError, EOFError, SyntaxError, tokenize.TokenError) as e:
        # (TokenError, SyntaxError: a header whose length field cuts its text short)
        raise GraphFormatError(f"not a readable .npy array ({' '.join(str(e).split())})", path=path) from None
    if arr.ndim != 2 or arr.shape[1] not in (2, 3) or arr.dtype.kind not in "iu":  # (timedelta64 is np.integer too)
        raise GraphFormatError(f"expected an integer array of shape (k, 2), or (k, 3) with the expected answers, "
                               f"got {arr.dtype} {arr.shape}", path=path)
    _check_npy_size(path, arr)
    return arr


def _check_npy_size(path, arr) -> None:
    """The file must hold the header and the array, nothing more: bytes after the array (a second
    ``np.save`` into the same file handle, an appended array) would be pairs left unread."""
    size = os.path.getsize(path)
    header = getattr(arr, "offset", None)  # np.load(mmap_mode=...) gives a np.memmap: its offset is the header's length
    if header is None:  # pragma: no cover - np.load maps every .npy it is asked to map
        with open(path, "rb") as f:
            np.lib.format._read_array_header(f, np.lib.format.read_magic(f))
            header = f.tell()
    if size != header + arr.nbytes:
        raise GraphFormatError(f"{size - header - arr.nbytes:,} bytes after the {arr.dtype} {arr.shape} array "
                               f"({header:,}-byte header + {arr.nbytes:,} bytes of pairs, the file has {size:,}): "
                               f"one array per .npy file (two np.save calls into one file?)", path=path)


def mapped_as_rows(path) -> bool:
    """Whether the id columns a mapped read of this pairs file gives (:func:`read_npy_rows`,
    ``read_query_pairs(mapped=True)``) are the two columns of one (k, 2) array: a ``.npy`` of
    native 64-bit or int32 ids, shape (k, 2), C order. The GPU staging then uploads them as rows,
    so that is the layout to page-lock its slots for beforehand; False for any other file (its
    columns are copied out), and for one that cannot be read (the read itself says why)."""
    if not is_npy(path):
        return False
    try:
        arr = npy_pairs_array(path)
    except GraphFormatError:
        return False
    return (arr.shape[1] == 2 and arr.flags.c_contiguous
            and ((arr.dtype.itemsize == 8 and arr.dtype.isnative) or arr.dtype == np.dtype(np.int32)))


def npy_rows(path) -> int:
    """The number of pairs a ``.npy`` pairs file holds, from its header (0 for any other file, and
    for one that cannot be read: the read itself says why)."""
    if not is_npy(path):
        return 0
    try:
        return int(npy_pairs_array(path).shape[0])
    except GraphFormatError:
        return 0


def read_npy_rows(path, n: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """``(sources, targets)`` of rows ``lo..hi-1`` of a (k, 2) ``.npy`` pairs file, ids checked
    against ``n`` (a bad one named by its row in the whole file): what each MPI rank of
    ``query`` reads for its own shard, so that no rank reads or sends another's pairs. Ids
    stored as native 64-bit integers come back as the two (strided) columns of the mapped rows,
    not copied: the GPU query stages them into its pinned slots itself, one host pass fewer."""
    return _npy_ids(path, npy_pairs_array(path)[lo:hi], n, lo, copy=False)


def _npy_ids(path, arr, n, first: int = 0, copy: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The two id columns of the mapped rows ``arr`` (row ``first`` of the file onwards), checked
    and copied out by the host threads; with ``copy=False``, native 64-bit columns are returned
    as views of ``arr`` (uint64 ones, checked below 2^63, viewed as int64), and native int32
    ones checked against ``n`` as int32 views."""
    # without n, only unsigned ids past 2^63 - 1 are refused (they would wrap); signed ones pass
    limit = (2**63 - 1) if n is None else int(n) - 1  # the largest id allowed
    checked = n is not None or (arr.dtype.kind == "u" and arr.dtype.itemsize == 8)
    flat = arr.reshape(-1) if arr.shape[1] == 2 and arr.flags.c_contiguous else None  # both columns in one pass
    if checked and arr.shape[0] and any(int(max_parallel(as_unsigned(col, limit + 1))) > limit
                                        for col in ((flat,) if flat is not None else (arr[:, 0], arr[:, 1]))):
        _first_bad_id(path, np.asarray(arr[:, :2]), n, first)  # raises, naming the first bad id in row order
    if not copy and arr.dtype.itemsize == 8 and arr.dtype.isnative and checked:
        return arr[:, 0].view(np.int64), arr[:, 1].view(np.int64)
    if not copy and arr.dtype == np.dtype(np.int32) and n is not None:  # (checked: 0 <= id < n)
        return arr[:, 0], arr[:, 1]  # int32 views: the GPU staging copies them up as they are
    ids = []
    for c in (0, 1):
        col = np.empty(arr.shape[0], np.int64)
        copy_parallel(col, arr[:, c])
        ids.append(col)
    return ids[0], ids[1]


def _first_bad_id(path, arr, n, first: int = 0) -> None:
    """Raise the error for the first id, in row order, that is not a vertex id: above 2^63 - 1
    (unsigned ids would wrap) or, with ``n``, outside 0..n-1 (``arr`` starting at row ``first``)."""
    _check_fits_int64(path, arr, first)
    if n is not None and arr.size:
        ids = arr.astype(np.int64)
        bad = np.flatnonzero(((ids < 0) | (ids >= n)).reshape(-1))
        if bad.size:
            row, col = divmod(int(bad[0]), 2)
            raise GraphFormatError(f"vertex id {id_range(n, whose='the index')}, got {int(arr[row, col])}",
                                   path=f"{path}[{first + row}, {col}]")
    raise AssertionError("_first_bad_id: no bad id found")  # pragma: no cover - the caller's check found one


class _SeparatedIds(Width):
    """The fields of a ``.csv`` or ``.tsv`` pairs file of ids (``sep``): read as blank-separated
    tokens (a CSV's commas made blanks), so each line is first held to its fields
    (:func:`separated_problem`): as many as the first pair line's, none empty, none holding a blank
    between two tokens; else ``1,2,,1`` would be the pair (1, 2) expected 1 and ``1<tab><tab>2``
    the pair (1, 2). :func:`~distgrail.io.edgelist.read_columns` and :func:`_three_columns` call
    :meth:`commas` on every chunk."""

    def __init__(self, sep: bytes):
        super().__init__(True)
        self.sep, self.want = sep, None

    def commas(self, text: Text, offset: int, size: int) -> None:
        bad, why, self.want = separated_problem(text.raw_chunk(offset, size), self.sep, self.want)
        if bad >= 0:
            text.fail(offset + bad, f"{why} (a {'.csv' if self.sep == b',' else '.tsv'} pairs file: each "
                                    f"field one id or answer), got {text.excerpt(offset + bad)}")


def separated_problem(raw: bytes, sep: bytes, want: int | None = None) -> tuple[int, str, int | None]:
    r"""``(offset, why, fields)``: the first line of ``raw`` (whole lines) split at ``sep`` (b"," or
    b"\t"; a ``#``/``%`` comment left out, blanks and ``\r`` around a field cut) whose fields are
    not ``want`` (None: the first line's with a field, returned as ``fields``), or hold an empty
    one or one with a blank between two tokens; offset -1 when none. Vectorised: no loop per line.

    >>> separated_problem(b"1,2\n3, 4 # a,,b\n", b",")[::2], separated_problem(b"1,2,,1\n", b",")[:2]
    ((-1, 2), (4, 'an empty field'))
    >>> separated_problem(b"1\t2\n3 4\t5\n", b"\t")[:2], separated_problem(b"1,2\n3,4,1\n", b",", 2)[:2]
    ((4, 'a blank inside a field'), (4, 'a line of 3 fields, the first pair line has 2'))
    """
    if not raw:
        return -1, "", want
    size = len(raw)
    if raw[-1:] != b"\n":  # the file's last line, without its line end: ended here, so that an empty
        raw = bytes(raw) + b"\n"  # last field (``3,4,`` at the end of the file) is a field as on any line
    a = np.frombuffer(raw, np.uint8)
    nl = a == 10
    line = np.cumsum(nl) - nl  # each byte's line
    marks = np.flatnonzero((a == 35) | (a == 37))
    live = np.ones(a.size, bool)
    if marks.size:  # a comment: from a line's first mark to its end
        first = np.full(int(line[-1]) + 1, a.size, np.int64)
        np.minimum.at(first, line[marks], marks)
        live = np.arange(a.size) < first[line]
    cut = nl | ((a == sep[0]) & live)
    blank = (a == 32) | (a == 13) | (a == 9)
    solid = live & ~cut & ~blank
    seg = np.cumsum(cut) - cut  # each byte's field (a cut ends its field)
    nseg = int(seg[-1]) + 1
    starts = np.concatenate(([0], np.flatnonzero(cut) + 1))[:nseg]  # each field's first byte
    solid_in = np.bincount(seg[solid], minlength=nseg)
    runs = np.bincount(seg[solid & ~np.concatenate(([False], solid[:-1]))], minlength=nseg)  # tokens a field
    seg_line = line[np.minimum(starts, a.size - 1)]
    fields = np.bincount(seg_line, minlength=int(line[-1]) + 1)
    has = np.bincount(seg_line, weights=solid_in, minlength=fields.size) > 0  # lines with a field
    problems = []
    if want is None and has.any():
        want = int(fields[np.flatnonzero(has)[0]])
    wrong = np.flatnonzero(has & (fields != want))
    if wrong.size:
        k = int(wrong[0])
        problems.append((int(starts[np.flatnonzero(seg_line == k)[0]]),
                         f"a line of {int(fields[k])} field{'' if fields[k] == 1 else 's'}, the first pair line "
                         f"has {want}"))
    empty = np.flatnonzero(has[seg_line] & (solid_in == 0))
    if empty.size:
        problems.append((int(starts[empty[0]]), "an empty field"))
    inner = np.flatnonzero(runs > 1)
    if inner.size:
        problems.append((int(starts[inner[0]]), "a blank inside a field"))
    if not problems:
        return -1, "", want
    at, why = min(problems, key=lambda p: int(line[min(p[0], a.size - 1)]))
    return min(at, size - 1), why, want


def _first_field_line(buf, start: int = 0) -> tuple[bytes, int, int]:
    """``(line, begin, end)``: the first line at or after ``start`` that holds a field (its first
    4,096 bytes, comments ``#``/``%`` cut, as stored), the offsets of its start and of its line end;
    ``(b"", size, size)`` when none does."""
    pos, size = start, len(buf)
    while pos < size:
        end = buf.find(b"\n", pos)
        end = size if end < 0 else end
        line = bytes(buf[pos:min(end, pos + 4096)]).split(b"#")[0].split(b"%")[0]
        if line.split():
            return line, pos, end
        pos = end + 1
    return b"", size, size


def _first_pair_line(text: Text, start: int = 0) -> bytes:
    """The first line at or after ``start`` that holds a field (:func:`_first_field_line`). Its
    fields are the columns: two, or three with the expected answers."""
    return _first_field_line(text.buf, start)[0]


def answers_header(buf, sep: bytes) -> tuple[int, int]:
    """``(begin, end)``, the offsets of the start of the first line that holds a field and just
    past it, when that line is exactly the
    header :func:`~distgrail.io.answers.write_answer_rows` writes (``u v reachable``, its fields
    split at ``sep`` as a pairs line's, :func:`_label_fields`): an answers file is read back as
    pairs with their expected answers; ``(0, 0)`` otherwise. No pair line reads so (its third
    column would be 0 or 1), so no other header is guessed at."""
    from .answers import COLUMNS

    line, begin, end = _first_field_line(buf)
    if line and [f.decode("latin-1") for f in _label_fields(line, sep)] == list(COLUMNS):
        return begin, min(end + 1, len(buf))
    return 0, 0


def _three_columns(text: Text, n: int | None, width: Width | None = None, start: int = 0) -> QueryPairs:
    """``u v answer`` lines from ``start`` (past a header: :func:`answers_header`): pairs,
    expected answers (0/1) and the line of each pair; ``width``: a comma-separated file's, whose
    lines must hold three comma fields (``1 2,1`` is refused)."""
    us, vs, es, lines = [], [], [], []
    before = bytes(text.buf[:start]).count(b"\n")  # lines before the chunk
    for offset, data in text.chunks(start):
        if width is not None:
            width.commas(text, offset, len(data))
        ch = Chunk(text, offset, data)
        ch.blank_comments(b"#%")
        odd = (ch.tokens_per_line != 0) & (ch.tokens_per_line != 3)
        if odd.any():
            pos = ch.abs(ch.line_start[int(np.flatnonzero(odd)[0])])
            text.fail(pos, f"expected three columns 'u v answer' (query pair and expected answer, as on the first "
                           f"pair line), got {text.excerpt(pos)}")
        ch.check_numeric()
        vals = ch.numbers()
        answer = vals[2::3]
        bad = np.flatnonzero((answer != 0) & (answer != 1))
        if bad.size:
            pos = ch.token_pos(3 * int(bad[0]) + 2)
            text.fail(pos, f"expected answer 0 or 1 in the third column, got {shown(text.token_at(pos).encode())}")
        ids = vals.copy()
        ids[2::3] = 0
        ch.check_range(ids, _CAP if n is None else n, whose="the index")
        us.append(vals[0::3])
        vs.append(vals[1::3])
        es.append(answer.astype(bool))
        lines.append(before + 1 + np.flatnonzero(ch.tokens_per_line == 3))
        before += data.count(b"\n")
        text.check_room(sum(u.size for u in us))
    cat = (lambda parts, dt: np.concatenate(parts).astype(dt) if parts else np.zeros(0, dt))
    return QueryPairs(text.path, cat(us, np.int64), cat(vs, np.int64), cat(es, bool), cat(lines, np.int64))


def _check_fits_int64(path, arr, first: int = 0) -> None:
    """Unsigned ids above 2^63 - 1 would wrap to negative ones: refuse them with the value as given
    (``arr`` starting at row ``first``)."""
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size:
        big = np.flatnonzero(arr.reshape(-1) > np.uint64(2**63 - 1))
        if big.size:
            row, col = divmod(int(big[0]), 2)
            raise GraphFormatError(f"{('sources', 'targets')[col]}[{first + row}] out of range (vertex ids are below "
                                   f"2^63), got {int(arr[row, col])}", path=path)


#: an integer node label as the graph's file writes one: ASCII digits, a minus sign allowed
_INT_LABEL = re.compile(r"-?[0-9]+")


def _int_label(x: str):
    """The value of an integer label (matched by ``_INT_LABEL``), or None when it has more than 19
    digits past its leading zeros (past int64: no node; ``int()`` refuses more than 4,300 digits)."""
    neg = x.startswith("-")
    v = digits_value(x[neg:])
    if v >= 10 ** 19:
        return None
    return -v if neg else v


def separator_of(path) -> bytes:
    """How a text pairs file's fields are split, told by its name (``.gz`` after it, any case):
    b"," for ``.csv``, b"\t" for ``.tsv``, else b" " (at blanks and tabs). Split at commas or
    tabs, a node label may hold blanks (``John Smith,Jane Doe``). By the name, not the content: a
    ``u v`` file's labels may hold commas (``a,b d``), so a comma on its first line says nothing;
    the writers choose by the name too (:func:`distgrail.io.samplepairs.write_pairs`)."""
    from .answers import uncompressed_name

    name = uncompressed_name(os.fspath(path)).lower()
    return b"," if name.endswith(".csv") else b"\t" if name.endswith(".tsv") else b" "


def _label_fields(line: bytes, sep: bytes) -> list:
    """The fields of a pairs line (its comment cut) split at ``sep`` (:func:`separator_of`):
    at runs of blanks and tabs (the line's own ends cut; any other space character stays in its
    label, which is refused); at every comma, each field's blanks and tabs around it cut (empty
    ones kept: an empty label is refused); at tabs, each field's blanks cut, a run of tabs after
    the second field one cut (an empty first or second field stays, and is refused). A ``\r``
    ends only the line (``\r\n``): anywhere else it stays, and is refused."""
    line = line[:-1] if line.endswith(b"\r") else line
    if sep == b" ":  # (blanks and tabs cut at the ends, not a form feed or a \r: they stay, and are refused)
        return [t for t in re.split(rb"[ \t]+", line.strip(b" \t")) if t]
    fields = [f.strip(b" \t" if sep == b"," else b" ") for f in line.split(sep)]
    return fields if sep == b"," else fields[:2] + [f for f in fields[2:] if f]


def _glued_mark(raw: bytes, sep: bytes) -> bool:
    """Whether the line's first ``#``/``%`` is glued to its first or second field (right after a
    byte of it: ``x x#2`` would name the node ``x``, not ``x#2``): a graph file's rule 2."""
    at = min((i for i in (raw.find(b"#"), raw.find(b"%")) if i >= 0), default=-1)
    if at <= 0 or raw[at - 1:at] in (b" ", b"\t", sep):
        return False
    head = raw[:at]
    fields = [t for t in re.split(rb"[ \t]+", head.strip()) if t] if sep == b" " else head.split(sep)
    return len(fields) <= 2


def _label_lines(path, data, sep, kind):
    """:func:`_label_pairs`' loop over the lines, which refuses a file with its line and value:
    ``(sources, targets, expected answers or None, lines)``."""
    us, vs, es, lines = [], [], [], []
    width = None
    for no, raw in enumerate(data.split(b"\n"), 1):
        line = raw.split(b"#")[0].split(b"%")[0]
        if _glued_mark(raw, sep):
            raise GraphFormatError(f"a comment mark ('#' or '%') right after a byte of a node label: it would cut "
                                   f"the label there, got {shown(raw)}", path=path, line=no)
        if not (line[:-1] if line.endswith(b"\r") else line).strip(b" \t"):  # (a form feed's line is no blank one)
            continue
        try:
            tok = [t.decode("utf-8") for t in _label_fields(line, sep)]
        except UnicodeDecodeError:
            raise GraphFormatError(f"expected two node labels, got {shown(raw)}", path=path, line=no) from None
        inner = (lambda c: c.isspace()) if sep == b" " else (lambda c: c.isspace() and c != " ")
        if any(any(inner(c) or c in "\x00\x1c\x1d\x1e\x1f" for c in t) for t in tok):  # (as the graph's reader)
            what = "a blank or tab" if sep == b" " else "a blank" if sep == b"," else "a blank (tabs split the line)"
            raise GraphFormatError(f"a control or space character other than {what} in a label, got "
                                   f"{shown(raw)}", path=path, line=no)
        if sep != b" " and len(tok) >= 2 and any(not t or '"' in t for t in tok[:2]):
            what = ("an empty node label" if not all(tok[:2])
                    else "a double quote in a node label (CSV quoting is not read)")
            raise GraphFormatError(f"{what}, got {shown(raw)}", path=path, line=no)
        width = len(tok) if width is None and len(tok) in (2, 3) else width
        if len(tok) != (width or 2):
            want = "two node labels 'u v'" if width != 3 else "two node labels and the expected answer 'u v answer'"
            raise GraphFormatError(f"expected {want}{_SPLIT[sep]}, got {shown(raw)}", path=path, line=no)
        if width == 3:
            if tok[2] not in ("0", "1"):
                raise GraphFormatError(f"expected answer 0 or 1 in the third column, got {tok[2]!r}", path=path, line=no)
            es.append(tok[2] == "1")
        if kind == "int":
            if not all(_INT_LABEL.fullmatch(x) for x in tok[:2]):  # (int() also takes '+1', '1_0', '٣')
                raise GraphFormatError(f"this index takes integer node labels, got {shown(raw)}", path=path, line=no)
            vals = [_int_label(x) for x in tok[:2]]  # (None: more than 19 digits, past int64; int() refuses 4,301)
            wide = [(x if len(x) <= 64 else shown(x.encode())) if v is None else repr(v) for x, v in zip(tok, vals)
                    if v is None or not -2**63 <= v < 2**63]
            if wide:  # (labels are int64: no such one is a node)
                raise GraphFormatError(f"node {wide[0]} is not in the graph", path=path, line=no)
            tok = vals
        us.append(tok[0])
        vs.append(tok[1])
        lines.append(no)
    return us, vs, (np.array(es, dtype=bool) if width == 3 else None), lines


def _label_pairs(path, data, kind, known) -> QueryPairs:
    """Pairs of node labels, one pair per line, a third column of 0/1 on every line or none;
    ``known``: every label must be in it. The fields are split at commas, tabs or blanks, the
    file's name tells which (:func:`separator_of`): a ``.csv``'s or ``.tsv``'s labels may hold
    blanks. A clean file is read without a loop per line
    (:func:`~distgrail.io.label_pairs.clean_label_pairs`); any other by :func:`_label_lines`."""
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    _no_bom(path, data[:256])
    sep = separator_of(path)
    at, past = answers_header(data, sep)
    if past:  # an answers file's header: made a comment (the lines keep their numbers)
        data = data[:at] + b"#" + data[at + 1:]
    from .label_pairs import clean_label_pairs

    got = clean_label_pairs(data, sep, kind)  # (a clean file without a loop per line)
    us, vs, es, lines = got if got is not None else _label_lines(path, data, sep, kind)
    dt = np.int64 if kind == "int" else str
    u, v = np.array(us, dtype=dt), np.array(vs, dtype=dt)
    ids = None
    if known is not None and u.size:
        both, found = known.lookup(np.stack([u, v], axis=1))
        if not found.all():
            k, col = divmod(int(np.flatnonzero(~found.reshape(-1))[0]), 2)
            raise GraphFormatError(f"node {(u, v)[col][k].item()!r} is not in the graph", path=path, line=lines[k])
        ids = (both[:, 0], both[:, 1])
    return QueryPairs(path, u, v, es, np.asarray(lines, dtype=np.int64), ids)
