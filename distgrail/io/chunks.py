"""Host side of the GPU text parser (:mod:`distgrail.io.parse`): what to parse (format, header,
id range), and the file read in chunks that end at line ends into a ring of (pinned) buffers. (The
file's digest is computed apart, in the background: :mod:`distgrail.io.digest`.)

Headers are parsed here with the CPU reader's rules; when anything in them is unusual,
:func:`plan_read` returns a plan of kind ``"cpu"`` and the caller reads the file with the CPU
reader, which reports the error exactly as without a GPU.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import GraphFormatError
from .dialect import SNIFF_BYTES
from .edgelist import MTX_FIELDS, MTX_VALUES
from .formats import FMT_CODES, FORMATS, Source, host_only
from .excerpt import bom_problem, looks_binary
from .regular import special_kind
from .text import Text, digits_value, is_digits, parse_n

__all__ = ["Plan", "plan_read", "ChunkReader", "LineTooLong", "memory_estimate", "estimate_edges", "FMT_CODES",
           "MAX_ID32"]

#: decompressed text bytes assumed per stored byte of a compressed edge list before it is read
#: (sizes the first output buffers and the memory check; the parse grows them as it learns)
TEXT_PER_STORED = 4
#: largest id an int32 result can hold as the CPU reader makes it (it widens from 2^31 - 2 on)
MAX_ID32 = 2**31 - 3


class LineTooLong(Exception):
    """A line does not fit one chunk buffer; ``need`` is the chunk size that holds it."""

    def __init__(self, message: str, need: int):
        super().__init__(message)
        self.need = need


def _line_end(fd: int, pos: int, size: int) -> int:
    """Offset just past the first newline at or after ``pos`` (``size`` if none)."""
    while pos < size:
        piece = os.pread(fd, 1 << 20, pos)
        if not piece:
            break
        i = piece.find(b"\n")
        if i >= 0:
            return pos + i + 1
        pos += len(piece)
    return size


@dataclass
class Plan:
    """What to parse: ``kind`` is "text" (parse on the device), "stream" (a compressed edge list,
    decompressed on the host while the device parses; ``body`` and ``size`` are offsets in the
    decompressed text, ``size`` an estimate; never split between ranks), "cpu" (header or
    arguments the CPU reader must judge) or "h5" (binary file, nothing to parse)."""

    kind: str
    path: str
    fmt: str = ""
    body: int = 0  # file offset of the first line after the header
    size: int = 0
    lo: int = 0  # ids must lie in lo..hi (inclusive); stored minus lo
    hi: int = MAX_ID32
    n: int | None = None  # vertices (None: largest id + 1)
    nnz: int | None = None  # Matrix Market entries
    symmetric: bool = False
    fields: int = 0  # Matrix Market: the fields of every entry line, as its header's field says (edgelist.MTX_FIELDS)
    values: int = 0  # Matrix Market: what the fields after row and col must be (edgelist.MTX_VALUES; 0: none)
    reason: str = ""
    comma: bool = False  # an edge list whose fields commas separate (CSV)
    codec: str | None = None  # "gz", "bz2", "zst" (kind "stream")
    source: Source | None = field(default=None, repr=False, compare=False)  # the file as looked at here

    @property
    def code(self) -> int:
        """The format code of kernels/parse.cu."""
        return FMT_CODES["csv" if self.comma else self.fmt]


def _gra_header(text: Text):
    """(n, body) as read_gra finds them, or None when read_gra would raise."""
    lines = list(text.header_lines(2))
    if not lines:
        return None
    if lines[0][1].strip() == "graph_for_greach":
        if len(lines) < 2:
            return None
        nline, nval, body = lines[1]
    else:
        nline, nval, body = lines[0]
    try:
        return parse_n(text, nline, nval, "vertex count"), body
    except GraphFormatError:
        return None


def _mtx_header(text: Text):
    """(rows, nnz, symmetric, body, fields, values) as read_mtx finds them (``fields``: of every
    entry line, :data:`~distgrail.io.edgelist.MTX_FIELDS`; ``values``: what those after the first
    two must be, :data:`~distgrail.io.edgelist.MTX_VALUES`), or None when read_mtx would raise."""
    header = None
    for _line, content, end in text.header_lines(1 << 20):
        if header is None:
            header = content
            parts = content.lower().split()
            if len(parts) < 5 or parts[0] != "%%matrixmarket":
                return None
            if parts[1] != "matrix" or parts[2] != "coordinate":
                return None
            if parts[3] not in MTX_FIELDS:
                return None
            fields, values = MTX_FIELDS[parts[3]][0], MTX_VALUES[parts[3]]
            if parts[4] not in ("general", "symmetric", "skew-symmetric", "hermitian"):
                return None
            symmetric = parts[4] != "general"
            continue
        if not content or content.startswith("%"):
            continue
        parts = content.split()
        if len(parts) != 3 or not all(is_digits(p) for p in parts):
            return None
        rows, cols, nnz = (digits_value(p) for p in parts)
        if rows != cols:
            return None
        return rows, nnz, symmetric, end, fields, values
    return None


def plan_read(path, fmt: str = "auto", num_vertices: int | None = None) -> Plan:
    """Decide how to read ``path``: the checks of :func:`~distgrail.io.read.read_graph` in its
    order, then the header. Never raises for bad input: such files get kind "cpu". The plan's
    ``source`` is the file as looked at here (``read_graph(..., source=plan.source)`` does not look again)."""
    path = os.fspath(path)
    if fmt not in FORMATS or not os.path.exists(path):
        return Plan("cpu", path, reason="bad arguments")
    if special_kind(path):  # a FIFO, device or socket: the CPU reader refuses it (never opened here)
        return Plan("cpu", path, reason="not a regular file")
    source = Source(path, fmt)
    return replace(_plan(source, num_vertices), source=source)


def _plan(source: Source, num_vertices: int | None) -> Plan:
    """:func:`plan_read` of a file that exists and is not a FIFO, device or socket."""
    path = source.path
    try:
        spec = source.format
    except GraphFormatError:  # a compressed head that does not inflate: the CPU reader says so
        return Plan("cpu", path, reason="damaged compressed data")
    fmt = spec.name
    if spec.storage == "binary":
        return Plan("h5", path, fmt)
    codec = source.codec
    try:  # the (decompressed) head read once: the edge-list dialect and the binary check
        head = source.head(SNIFF_BYTES)
    except GraphFormatError:  # damaged compressed data: the CPU reader says so
        return Plan("cpu", path, fmt, reason="damaged compressed data")
    dialect = source.dialect if spec.dialect else None
    host = host_only(fmt, codec, dialect)  # tables, node names, compressed .gra/.mtx: the host readers
    if host:
        return Plan("cpu", path, fmt, reason=host)
    if num_vertices is not None and (not spec.num_vertices or int(num_vertices) < 0):
        return Plan("cpu", path, fmt, reason="bad arguments")
    if looks_binary(head[:4096]):  # the CPU reader's check, so its error text
        return Plan("cpu", path, fmt, reason="binary data")
    if bom_problem(head, fmt):  # (likewise)
        return Plan("cpu", path, fmt, reason="byte order mark")
    size = os.path.getsize(path)
    if spec.dialect:  # an edge list: the body starts after the dialect's header
        if num_vertices is None:  # (the vertex count distgrail's writer states on the first line)
            num_vertices = dialect.vertices
        n = None if num_vertices is None else int(num_vertices)
        if n is not None and n >= 2**31 - 1:
            return Plan("cpu", path, fmt, reason=f"{n} vertices need 64-bit ids")
        hi = MAX_ID32 if n is None else n - 1
        if codec:  # offsets in the decompressed text; its size is an estimate
            return Plan("stream", path, fmt, dialect.body, max(size * TEXT_PER_STORED, dialect.body), 0, hi, n,
                        comma=dialect.comma, codec=codec)
        return Plan("text", path, fmt, dialect.body, size, 0, hi, n, comma=dialect.comma)
    text = Text(path)
    try:
        got = _gra_header(text) if fmt == "gra" else _mtx_header(text)
    finally:
        text.close()
    if got is None:
        return Plan("cpu", path, fmt, reason="header")
    if fmt == "gra":
        n, body = got
        plan = Plan("text", path, fmt, body, size, 0, n - 1, n)
    else:
        rows, nnz, symmetric, body, fields, values = got
        plan = Plan("text", path, fmt, body, size, 1, rows, rows, nnz, symmetric, fields=fields, values=values)
    if plan.n >= 2**31 - 1:
        return Plan("cpu", path, fmt, reason=f"{plan.n} vertices need 64-bit ids")
    return plan


#: text bodies at least this large are sized by their sampled density (:func:`estimate_edges`)
SAMPLE_MIN = 64 << 20


def memory_estimate(plan: Plan, chunk_bytes: int) -> int:
    """Device bytes the parse may need at its peak: the output edges at the most the text can
    hold (every .gra successor takes >= 2 bytes, every edge-list line >= 4; a symmetric Matrix
    Market file doubles) -- for a plain body of at least :data:`SAMPLE_MIN` bytes at most twice
    what :func:`estimate_edges` samples in its densest window (R-MAT text has ~17 bytes a line, so the worst case
    refused ranges whose edges fit the cap: docs/benchmarks.md; a parse that still
    runs out of memory is read on the CPU) -- two chunk buffers, one chunk's token and line
    arrays (a token takes >= 2 bytes: 8 bytes of arrays per token, 36 per line, lines rarely
    shorter than 4 bytes), the vertex counts of a .gra file, and growth of the output by copying
    (x 1.5)."""
    body = max(plan.size - plan.body, 0)
    edges = body // 2 if plan.fmt == "gra" else body // 4
    if plan.kind == "text" and body >= SAMPLE_MIN:
        edges = min(edges, 2 * estimate_edges(plan, densest=True)[0] + 1024)
    if plan.symmetric:
        edges *= 2
    out = 8 * edges * 3 // 2
    chunk = min(chunk_bytes, max(body, 1))
    scratch = 2 * (chunk + 1024) + 4 * chunk + 9 * chunk + (4 * chunk // 1024 + 16) * 2
    return out + scratch + 4 * (plan.n or 0)


def _last_newline(buf: np.ndarray, filled: int) -> int:
    end, w = filled, 4096
    while end > 0:
        s = max(0, end - w)
        hit = np.flatnonzero(buf[s:end] == 10)
        if hit.size:
            return s + int(hit[-1])
        end, w = s, w * 4
    return -1


def _read_full(fd: int, out: np.ndarray, pos: int) -> int:
    got = 0
    view = memoryview(out)
    while got < out.size:
        k = os.preadv(fd, [view[got:]], pos + got)
        if k <= 0:
            break
        got += k
    return got


#: threads that read one chunk of a plain file (``os.preadv`` releases the GIL), each a piece of at
#: least :data:`READ_PIECE` bytes; the environment's ``DISTGRAIL_READ_THREADS`` overrides it (1: one thread).
#: 8, not 4: eight read a rank's range faster on the GPU hosts (docs/benchmarks.md)
READ_THREADS = 8
READ_PIECE = 4 << 20
_POOL: list = []


def _read_parallel(fd: int, out: np.ndarray, pos: int) -> int:
    """:func:`_read_full` of ``out`` split into up to :data:`READ_THREADS` pieces read at once;
    returns the bytes read from the front (a short piece ends it)."""
    from ..settings import get as setting
    threads = setting("DISTGRAIL_READ_THREADS")  # (READ_THREADS unless it is a whole number)
    k = min(threads, out.size // READ_PIECE)
    if k <= 1:
        return _read_full(fd, out, pos)
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(16, thread_name_prefix="distgrail-read"))
    cuts = [out.size * i // k for i in range(k + 1)]
    futs = [_POOL[0].submit(_read_full, fd, out[a:b], pos + a) for a, b in zip(cuts, cuts[1:])]
    wait(futs)  # every piece, also after one failed: none writes into the buffer later
    got = 0
    for (a, b), f in zip(zip(cuts, cuts[1:]), futs):
        g = f.result()  # (raises a piece's error)
        got += g
        if g < b - a:
            break
    return got


class ChunkReader:
    """Bytes ``start:size`` of an open file as chunks in a ring of equal buffers; every chunk ends
    at a line end (the last one at the end of the file); the partial last line moves to the front
    of the next buffer. Iterating yields ``(k, slot, length)``: chunk ``k`` is
    ``buffers[slot][:length]``. A buffer is refilled only once ``before_refill(slot)`` (if given)
    returns, i.e. once the consumer is done with it. With ``stream`` (a
    :class:`~distgrail.io.compressed.Blocks`, already past ``start``) the bytes come from it until
    it ends, and ``fd`` and ``size`` are not used."""

    def __init__(self, fd: int, start: int, size: int, buffers, before_refill=None, stream=None):
        self.fd, self.start, self.size, self.buffers = fd, start, size, buffers
        self.before_refill = before_refill
        self.stream = stream
        self.bytes_done = 0  # body bytes handed out so far

    def _fill(self, out: np.ndarray, pos: int) -> tuple[int, bool]:
        """(bytes read into ``out``, whether the input ended)."""
        if self.stream is not None:
            got = self.stream.readinto(out) if out.size else 0
            return got, got < out.size
        want = min(out.size, self.size - pos)
        got = _read_parallel(self.fd, out[:want], pos) if want > 0 else 0
        return got, pos + got >= self.size

    def _too_long(self, pos: int, filled: int, size: int):
        if self.stream is not None:
            need = filled + self.stream.skip_to_newline()
        else:
            need = _line_end(self.fd, pos, self.size) - (pos - filled)
        return LineTooLong(f"a line of {need} bytes is longer than the {size}-byte chunk buffer", need)

    def __iter__(self):
        bufs = self.buffers
        pos = self.start if self.stream is not None else min(self.start, self.size)
        carry, prev, prev_valid, k = 0, 0, 0, 0
        while True:
            slot = k % len(bufs)
            buf = bufs[slot]
            if self.before_refill is not None:
                self.before_refill(slot)
            if carry:
                buf[:carry] = bufs[prev][prev_valid : prev_valid + carry]
            got, ended = self._fill(buf[carry:], pos)
            pos += got
            filled = carry + got
            if filled == 0:
                return
            if ended:
                valid = filled
            else:
                nl = _last_newline(buf, filled)
                if nl < 0:
                    raise self._too_long(pos, filled, buf.size)
                valid = nl + 1
            self.bytes_done += valid
            yield k, slot, valid
            carry, prev, prev_valid, k = filled - valid, slot, valid, k + 1


def estimate_edges(plan: Plan, windows: int = 4, window: int = 1 << 18, densest: bool = False) -> tuple[int, int]:
    """``(m, n)``: an estimate of the edges of a text graph before parsing it, low rather than
    high (a build is refused on it before parsing: it must not refuse a graph that fits), and a
    lower bound of its vertices. A Matrix Market header gives both (``nnz``, mirrored when
    symmetric: counted once here); a ``.gra`` header gives ``n``. Otherwise ``windows`` evenly
    spaced windows of ``window`` bytes of the body are read, whole lines only, and the edges per
    byte of the sparsest window (``densest``: of the densest, an estimate high rather than low,
    for sizing buffers) (ids get longer further into a sorted file) times the body's
    bytes is ``m``; ``n`` is at least the largest id seen + 1. The exact sizes are checked again
    after parsing."""
    if plan.kind != "text":
        return 0, 0
    if plan.fmt == "mtx" and plan.nnz is not None:
        return int(plan.nnz), int(plan.n or 0)
    body = max(plan.size - plan.body, 0)
    if body == 0:
        return 0, int(plan.n or 0)
    density, top = None, -1
    with open(plan.path, "rb") as f:
        starts = sorted({plan.body + (body - min(window, body)) * k // max(windows - 1, 1) for k in range(windows)})
        for s in starts:
            f.seek(s)
            buf = f.read(min(window, body))
            if s > plan.body:  # whole lines: from the first line start on
                cut = buf.find(b"\n")
                buf = buf[cut + 1:] if cut >= 0 else b""
            end = buf.rfind(b"\n")
            if plan.size > s + len(buf) and end >= 0:
                buf = buf[:end + 1]
            if not buf:
                continue
            edges, big = _count_edges(buf.replace(b",", b" ") if plan.comma else buf, plan.fmt)
            top = max(top, big)
            d = edges / len(buf)
            density = d if density is None else max(density, d) if densest else min(density, d)
    m = int((density or 0.0) * body)
    n = int(plan.n) if plan.n is not None else top + 1 - int(plan.lo)
    return m, max(n, 0)


def _count_edges(buf: bytes, fmt: str) -> tuple[int, int]:
    """(edges, largest id) of whole lines of a text graph (.gra: the successors of each vertex
    line; edge lists and Matrix Market: lines with two ids before any comment)."""
    edges, top = 0, -1
    for line in buf.split(b"\n"):
        if fmt == "gra":
            head, colon, rest = line.partition(b":")
            if not colon:
                continue
            succ = rest.partition(b"#")[0].split()
            edges += len(succ)
            ids = [t for t in succ if is_digits(t)] + ([head.strip()] if is_digits(head.strip()) else [])
        else:
            toks = line.split(b"#")[0].split(b"%")[0].split()
            if len(toks) < 2 or not (is_digits(toks[0]) and is_digits(toks[1])):
                continue
            edges += 1
            ids = toks[:2]
        if ids:
            top = max(top, max(digits_value(t) for t in ids))
    return edges, top
