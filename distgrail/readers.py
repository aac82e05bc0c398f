"""Graph file readers: GRAIL ``.gra``, whitespace edge lists, Matrix Market, binary HDF5.

Text is parsed without a Python loop per line or per edge: the file is read in chunks of
``CHUNK_BYTES`` that end at line ends. Each chunk first takes a fast path: one
``bytes.translate`` (markers to blanks, anything unexpected to 0x01), a few byte-wide NumPy
passes that locate ':', '#' and newlines and count tokens per line with a packed bitmap, and
``numpy.fromstring`` for the numbers (about half the time). Anything unusual (a bad byte, a
malformed line, an id out of range, many comments) sends the chunk to the general path, which
checks every line byte-exactly and reports ``file:line: what is wrong, got 'value'``; the error
line is found only then, so the fast path pays nothing for it. The file's SHA-256 is computed
beside the parse (on another thread when two cores are usable).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import warnings

import numpy as np

from .errors import GraphFormatError
from .graph import EdgeGraph, id_dtype

__all__ = ["read_graph", "read_pairs", "detect_format", "FORMATS"]

FORMATS = ("auto", "gra", "edgelist", "mtx", "h5")
#: bytes per parse chunk; chunks end at line ends (tests shrink it to cross many boundaries)
CHUNK_BYTES = 4 << 20
#: chunks with more comment characters than this take the general (slower) path
_MAX_FAST_COMMENTS = 4096


def _table(blank: bytes) -> bytes:
    """A ``bytes.translate`` table for the fast path: digits and '\n' stay, spaces, tabs, CR and
    ``blank`` become ' ', anything else becomes 0x01 (which sends the chunk to the general path)."""
    t = bytearray(b"\x01" * 256)
    for c in b"0123456789\n":
        t[c] = c
    for c in b" \t\r" + blank:
        t[c] = 32
    return bytes(t)


_GRA_TABLE = _table(b":#")
_PAIRS_TABLE = _table(b"")

_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 13, 32]] = True
_DIGIT = np.zeros(256, dtype=bool)
_DIGIT[48:58] = True
_NUMERIC_TEXT = _WS | _DIGIT  # what may remain once markers and ignored columns are blanked


def detect_format(path: str) -> str:
    """Guess a file's format from its name, then from its first line."""
    low = str(path).lower()
    if low.endswith((".h5", ".hdf5")):
        return "h5"
    if low.endswith(".gra"):
        return "gra"
    if low.endswith(".mtx"):
        return "mtx"
    with open(path, "rb") as f:
        head = f.read(4096)
    first = head.split(b"\n", 1)[0].strip()
    if first.startswith(b"graph_for_greach"):
        return "gra"
    if first.lower().startswith(b"%%matrixmarket"):
        return "mtx"
    if head.startswith(b"\x89HDF"):
        return "h5"
    return "edgelist"


def _count_newlines(buf, end: int) -> int:
    if end <= 0:
        return 0
    return int(np.count_nonzero(np.frombuffer(buf, dtype=np.uint8, count=end) == 10))


class _Text:
    """A memory-mapped text file with helpers for error messages."""

    def __init__(self, path: str, data: bytes | None = None):
        self.path = str(path)
        self._f = None
        self._h = None  # SHA-256 fed with the chunks as they are parsed (one-core case)
        self._hashed = 0
        if data is not None:
            self.buf = data
            return
        self._f = open(self.path, "rb")
        size = os.fstat(self._f.fileno()).st_size
        self.buf = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    def close(self):
        if isinstance(self.buf, mmap.mmap):
            self.buf.close()
        if self._f is not None:
            self._f.close()

    def __len__(self):
        return len(self.buf)

    def line_at(self, pos: int) -> tuple[int, str]:
        """1-based line number and text of the line holding byte ``pos``."""
        buf = self.buf
        start = buf.rfind(b"\n", 0, pos) + 1
        end = buf.find(b"\n", pos)
        end = len(buf) if end < 0 else end
        line = _count_newlines(buf, start) + 1
        return line, bytes(buf[start:end]).decode("utf-8", "replace").rstrip("\r")

    def token_at(self, pos: int) -> str:
        buf = self.buf
        s = pos
        while s > 0 and buf[s - 1] not in b" \t\r\n":
            s -= 1
        e = pos
        while e < len(buf) and buf[e] not in b" \t\r\n":
            e += 1
        return bytes(buf[s:e]).decode("utf-8", "replace")

    def fail(self, pos: int, message: str):
        line, _ = self.line_at(pos)
        raise GraphFormatError(message, path=self.path, line=line)

    def bad_token(self, pos: int):
        tok = self.token_at(pos)
        body = tok.rstrip(":")
        if body.startswith("-") and body[1:].isdigit():
            self.fail(pos, f"negative vertex id, got {tok!r}")
        self.fail(pos, f"vertex id must be a non-negative integer, got {tok!r}")

    def header_lines(self, count: int, start: int = 0):
        """Yield (line_number, text, end_offset) for the next ``count`` lines from ``start``."""
        pos = start
        line = _count_newlines(self.buf, start) + 1
        for _ in range(count):
            if pos >= len(self.buf):
                return
            end = self.buf.find(b"\n", pos)
            end = len(self.buf) if end < 0 else end
            yield line, bytes(self.buf[pos:end]).decode("utf-8", "replace").strip(), end + 1
            pos = end + 1
            line += 1

    def read(self, pos: int, count: int) -> bytes:
        """Bytes ``pos:pos+count``. Files are read with ``pread`` rather than through the map, so
        parsed text does not stay resident (the map is only touched to report errors)."""
        if self._f is None:
            return bytes(self.buf[pos : pos + count])
        return os.pread(self._f.fileno(), count, pos)

    def chunks(self, start: int, chunk_bytes: int | None = None):
        """Yield (offset, bytes) pieces of the file from ``start``, each ending at a line end."""
        chunk_bytes = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
        size = len(self.buf)
        pos = start
        while pos < size:
            data = self.read(pos, chunk_bytes)
            if pos + len(data) < size:
                nl = data.rfind(b"\n")
                if nl < 0:  # a line longer than a chunk
                    nl = self.buf.find(b"\n", pos + len(data))
                    end = size if nl < 0 else nl + 1
                    data = self.read(pos, end - pos)
                else:
                    data = data[: nl + 1]
            if self._h is not None and pos >= self._hashed:
                self._feed(pos)
                self._h.update(data)
                self._hashed += len(data)
            yield pos, data
            pos += len(data)

    def _feed(self, upto: int):
        while self._hashed < upto:
            data = self.read(self._hashed, min(4 << 20, upto - self._hashed))
            self._h.update(data)
            self._hashed += len(data)

    def sha256(self):
        """Start computing the file's SHA-256; return a function that gives the hex digest.

        With two or more usable cores the file is hashed on another thread while it is parsed;
        on one core the parser's own chunks are hashed as they come (no second read, no thread
        switching)."""
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # pragma: no cover - not Linux
            cores = os.cpu_count() or 1
        if cores >= 2:
            return self.sha256_async()
        self._h = hashlib.sha256()

        def result():
            self._feed(len(self))
            return self._h.hexdigest()

        return result

    def sha256_async(self):
        """Start hashing the whole file on another thread (hashlib releases the GIL); return a
        function that waits for the hex digest."""
        import threading

        h = hashlib.sha256()
        size = len(self)

        def work():
            for p in range(0, size, 4 << 20):
                h.update(self.read(p, min(4 << 20, size - p)))

        th = threading.Thread(target=work, name="distgrail-sha256", daemon=True)
        th.start()

        def result():
            th.join()
            return h.hexdigest()

        return result


class _Chunk:
    """Byte-level view of one chunk: lines, whitespace tokens, cumulative token counts."""

    def __init__(self, text: _Text, offset: int, data: bytes, blank_markers: bytes = b""):
        self.text = text
        self.offset = offset
        arr = np.frombuffer(data, dtype=np.uint8)
        self.markers = {}
        if blank_markers:
            arr = arr.copy()
            for ch in blank_markers:
                pos = np.flatnonzero(arr == ch)
                self.markers[ch] = pos
                arr[pos] = 32
        self.arr = arr
        nl = np.flatnonzero(arr == 10)
        self.nl = nl
        self.line_start = np.concatenate(([0], nl + 1))
        self.line_end = np.concatenate((nl, [arr.size]))
        if self.line_start[-1] == arr.size:  # chunk ends with '\n': no trailing empty line
            self.line_start = self.line_start[:-1]
            self.line_end = self.line_end[:-1]
        self.refresh()

    def refresh(self):
        ws = _WS[self.arr]
        starts = ~ws
        starts[1:] &= ws[:-1]
        self.starts = starts
        self.cum = np.concatenate(([0], np.cumsum(starts, dtype=np.int64)))
        self.tokens_per_line = self.cum[self.line_end] - self.cum[self.line_start]

    def line_of(self, pos):
        return np.searchsorted(self.nl, pos)

    def count_per_line(self, pos):
        return np.bincount(self.line_of(pos), minlength=self.line_start.size)

    def blank_comments(self, chars: bytes):
        """Blank everything from a comment character to the end of its line."""
        mask = np.zeros(self.arr.size, dtype=bool)
        for ch in chars:
            mask |= self.arr == ch
        pos = np.flatnonzero(mask)
        if pos.size == 0:
            return
        lines, first = np.unique(self.line_of(pos), return_index=True)
        delta = np.zeros(self.arr.size + 1, dtype=np.int8)
        delta[pos[first]] = 1
        delta[self.line_end[lines]] -= 1
        self.arr = np.where(np.cumsum(delta[:-1], dtype=np.int8) > 0, np.uint8(32), self.arr)
        self.refresh()

    def keep_columns(self, k: int):
        """Blank every token after the k-th of its line (weights, values)."""
        extra = self.tokens_per_line > k
        if not extra.any():
            return
        token_line = np.repeat(np.arange(self.line_start.size), self.tokens_per_line)
        token_col = np.arange(token_line.size) - self.cum[self.line_start][token_line]
        tok_of_byte = self.cum[1:] - 1  # token index of each byte (valid on token bytes)
        ws = _WS[self.arr]
        drop = ~ws & (token_col[np.maximum(tok_of_byte, 0)] >= k)
        self.arr = np.where(drop, np.uint8(32), self.arr)
        self.refresh()

    def abs(self, pos) -> int:
        return self.offset + int(pos)

    def check_numeric(self):
        bad = ~_NUMERIC_TEXT[self.arr]
        if bad.any():
            self.text.bad_token(self.abs(np.flatnonzero(bad)[0]))

    def numbers(self) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            vals = np.fromstring(self.arr.tobytes(), dtype=np.int64, sep=" ")
        if vals.size != self.cum[-1]:  # cannot happen after check_numeric; keep the guard
            raise GraphFormatError("internal parse mismatch", path=self.text.path)
        return vals

    def token_pos(self, k) -> int:
        return self.abs(np.flatnonzero(self.starts)[k])

    def check_range(self, vals, n: int, base: int = 0, what: str = "vertex id"):
        """Every value must lie in base..base+n-1; report the first that does not."""
        if vals.size == 0:
            return
        bad = (vals < base) | (vals >= base + n)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            pos = self.token_pos(k)
            self.text.fail(pos, f"{what} out of range {base}..{base + n - 1}, got {self.text.token_at(pos)!r}")


def _parse_n(text: _Text, line: int, value: str, what: str) -> int:
    if not value.isdigit():
        raise GraphFormatError(f"{what} must be a non-negative integer, got {value!r}", path=text.path, line=line)
    return int(value)


def _concat(parts: list, dtype) -> np.ndarray:
    """Concatenate ``parts`` into one ``dtype`` array, freeing each part once copied (peak memory
    is the result plus one part, not twice the result)."""
    out = np.empty(sum(int(p.size) for p in parts), dtype=dtype)
    pos = 0
    parts.reverse()
    while parts:
        p = parts.pop()
        out[pos : pos + p.size] = p
        pos += p.size
        del p
    return out


class _Sink:
    """An output array filled chunk by chunk. Its capacity is an upper bound from the file size
    (every number takes at least two bytes); pages never written are never touched, so only
    the filled part costs memory, and no final concatenation copies the result."""

    def __init__(self, capacity: int, dtype):
        self.buf = np.empty(max(int(capacity), 0), dtype=dtype)
        self.size = 0

    def append(self, a: np.ndarray):
        """Copy ``a`` in; the caller makes sure its values fit the dtype (see :meth:`widen`)."""
        end = self.size + a.size
        if end > self.buf.size:  # cannot happen with a true upper bound; stay correct anyway
            self._move(max(end, 2 * self.buf.size), self.buf.dtype)
        self.buf[self.size : end] = a
        self.size = end

    def widen(self):
        """Switch to int64 (ids beyond int32)."""
        if self.buf.dtype != np.int64:
            self._move(self.buf.size, np.int64)

    def _move(self, capacity, dtype):
        grown = np.empty(capacity, dtype=dtype)
        grown[: self.size] = self.buf[: self.size]
        self.buf = grown

    def result(self) -> np.ndarray:
        return self.buf[: self.size]


def _token_starts(b: np.ndarray) -> np.ndarray:
    """Offsets of the first digit of every token in a translated chunk (digits > 47, rest blank)."""
    if b.size == 0:
        return np.zeros(0, np.int64)
    dig = b > 47
    ts = np.flatnonzero(dig[1:] > dig[:-1])
    ts += 1
    if dig[0]:
        ts = np.concatenate((np.zeros(1, ts.dtype), ts))
    return ts


_HI_BITS = np.array([(0xFF00 >> r) & 0xFF for r in range(8)], dtype=np.uint8)


class _TokenCounter:
    """T(p) = number of tokens starting before offset p of a translated chunk, for many p at
    once: token starts as a bitmap, popcount per byte, prefix sums over bytes (cheaper than
    listing every token's offset)."""

    def __init__(self, b: np.ndarray):
        # digits as bits (most significant bit first), padded so that p >> 3 of p = len stays inside
        dig = np.packbits(np.concatenate((b, np.zeros(8, np.uint8))) > 47) if b.size < 8 else \
            np.concatenate((np.packbits(b > 47), np.zeros(1, np.uint8)))
        prev = dig >> 1  # the bit of the byte before each position
        prev[1:] |= dig[:-1] << 7
        self.packed = dig & ~prev  # first digit of each token
        self.cum = np.zeros(self.packed.size + 1, dtype=np.int64)
        np.cumsum(np.bitwise_count(self.packed), out=self.cum[1:])
        self.total = int(self.cum[-1])

    def __call__(self, pos: np.ndarray) -> np.ndarray:
        byte = pos >> 3
        return self.cum[byte] + np.bitwise_count(self.packed[byte] & _HI_BITS[pos & 7])


def _fast_numbers(blanked: bytes, count: int):
    """The ``count`` integers of a translated chunk, or None if ``fromstring`` disagrees."""
    if count == 0:
        return np.zeros(0, np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        vals = np.fromstring(blanked, dtype=np.int64, sep=" ")
    return vals if vals.size == count else None


def _gra_chunk_fast(data: bytes, n: int, dt):
    """Fast path for a chunk of ``.gra`` vertex lines: only byte-wide NumPy passes over the text
    and ``fromstring``. Returns (ids, degrees, successors, offset of the last vertex line) or None
    when anything is unusual; the general path then parses the chunk or reports the error."""
    bl = data.translate(_GRA_TABLE)
    if bl.find(b"\x01") >= 0:
        return None
    a = np.frombuffer(data, dtype=np.uint8)
    tc = _TokenCounter(np.frombuffer(bl, dtype=np.uint8))
    mk = np.flatnonzero((a == 58) | (a == 35) | (a == 10))
    typ = a[mk]
    nl, col, hs = mk[typ == 10], mk[typ == 58], mk[typ == 35]
    if col.size != hs.size:
        return None
    if col.size == 0:
        return None if tc.total else (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, dt), None)
    line = np.searchsorted(nl, col)
    if not (np.array_equal(line, np.searchsorted(nl, hs)) and (line[1:] > line[:-1]).all() and (hs > col).all()):
        return None
    ls = np.concatenate(([-1], nl))[line] + 1
    le = np.concatenate((nl, [a.size]))[line]
    t_ls, t_col, t_hs, t_le = (tc(x) for x in (ls, col, hs, le))
    # one token before ':', none after '#', no tokens outside vertex lines
    if (t_col - t_ls != 1).any() or (t_le != t_hs).any() or int((t_le - t_ls).sum()) != tc.total:
        return None
    vals = _fast_numbers(bl, tc.total)
    if vals is None or int(vals.max()) >= n:
        return None
    keep = np.ones(vals.size, dtype=bool)
    keep[t_ls] = False
    return vals[t_ls], t_hs - t_col, vals[keep].astype(dt), int(ls[-1])


def _gra_chunk_general(text: _Text, offset: int, data: bytes, n: int, dt):
    """Byte-exact checks of every line; raises GraphFormatError with file:line on bad input."""
    ch = _Chunk(text, offset, data, blank_markers=b":#")
    ch.check_numeric()
    ncol = ch.count_per_line(ch.markers[58])
    nhash = ch.count_per_line(ch.markers[35])
    vertex_line = (ch.tokens_per_line > 0) | (ncol > 0) | (nhash > 0)
    bad = vertex_line & ((ncol != 1) | (nhash != 1))
    if bad.any():
        li = int(np.flatnonzero(bad)[0])
        pos = ch.abs(ch.line_start[li])
        if nhash[li] == 0:
            text.fail(pos, "vertex line does not end with '#' (truncated file?), got "
                           f"{text.line_at(pos)[1]!r}")
        if ncol[li] == 0:
            text.fail(pos, f"expected '<id>: <successors> #', got {text.line_at(pos)[1]!r}")
        text.fail(pos, f"expected one ':' and one '#' per vertex line, got {text.line_at(pos)[1]!r}")
    lines_v = np.flatnonzero(vertex_line)
    cpos = np.empty(ch.line_start.size, dtype=np.int64)
    hpos = np.empty(ch.line_start.size, dtype=np.int64)
    cpos[ch.line_of(ch.markers[58])] = ch.markers[58]
    hpos[ch.line_of(ch.markers[35])] = ch.markers[35]
    cpos, hpos = cpos[lines_v], hpos[lines_v]
    ls, le = ch.line_start[lines_v], ch.line_end[lines_v]
    before = ch.cum[cpos] - ch.cum[ls]
    after = ch.cum[le] - ch.cum[hpos]
    wrong = (before != 1) | (after != 0) | (hpos < cpos)
    if wrong.any():
        li = int(np.flatnonzero(wrong)[0])
        pos = ch.abs(ls[li])
        text.fail(pos, f"expected '<id>: <successors> #', got {text.line_at(pos)[1]!r}")
    vals = ch.numbers()
    first = ch.cum[ls]
    ids = vals[first]
    ch.check_range(vals, n)
    is_succ = np.ones(vals.size, dtype=bool)
    is_succ[first] = False
    last = int(ls[-1]) if lines_v.size else None
    return ids, ch.tokens_per_line[lines_v] - 1, vals[is_succ].astype(dt), last


def _read_gra(text: _Text) -> EdgeGraph:
    lines = list(text.header_lines(2))
    if not lines:
        raise GraphFormatError("empty file: expected 'graph_for_greach' and the vertex count", path=text.path, line=1)
    body = 0
    if lines[0][1].startswith("graph_for_greach"):
        if len(lines) < 2:
            raise GraphFormatError("truncated file: vertex count line missing", path=text.path, line=2)
        nline, nval, body = lines[1]
    else:
        nline, nval, body = lines[0]
    n = _parse_n(text, nline, nval, "vertex count")
    dt = id_dtype(n)
    ids_parts, deg_parts = [], []
    succ = _Sink((len(text) - body + 1) // 2, dt)
    last_line_pos = None
    for offset, data in text.chunks(body):
        got = _gra_chunk_fast(data, n, dt)
        if got is None:
            got = _gra_chunk_general(text, offset, data, n, dt)
        ids, deg, chunk_succ, last = got
        ids_parts.append(ids.astype(dt))
        deg_parts.append(deg.astype(np.int32))
        succ.append(chunk_succ)
        del got, chunk_succ
        if last is not None:
            last_line_pos = offset + last
    ids = _concat(ids_parts, dt)
    deg = _concat(deg_parts, np.int32)
    if ids.size != n:
        where = last_line_pos if last_line_pos is not None else max(len(text) - 1, 0)
        kind = "truncated file? " if ids.size < n else ""
        text.fail(where, f"{kind}vertex count says {n} but the file lists {ids.size} vertex lines")
    if not (ids.size and ids[0] == 0 and (np.diff(ids) == 1).all()):  # lines not in id order
        seen = np.bincount(ids, minlength=n)
        if (seen != 1).any():
            v = int(np.flatnonzero(seen != 1)[0])
            raise GraphFormatError(f"vertex {v} is listed {int(seen[v])} times (each of 0..{n - 1} must appear once)",
                                   path=text.path)
    dst = succ.result()
    src = np.repeat(ids, deg)
    return EdgeGraph(n=n, src=src, dst=dst)


def _pairs_chunk_fast(data: bytes, comments: bytes, base: int, n: int | None):
    """Fast path for a chunk of 'u v' lines; returns the 2k values or None (general path)."""
    bl = data.translate(_PAIRS_TABLE)
    if comments and bl.find(b"\x01") >= 0:
        hits = []
        for c in comments:
            p = data.find(bytes([c]))
            while p >= 0 and len(hits) <= _MAX_FAST_COMMENTS:
                e = data.find(b"\n", p)
                e = len(data) if e < 0 else e
                hits.append((p, e))
                p = data.find(bytes([c]), e)
        if len(hits) > _MAX_FAST_COMMENTS:
            return None
        bl = bytearray(bl)
        for p, e in hits:
            bl[p:e] = b" " * (e - p)
    if bl.find(b"\x01") >= 0:
        return None
    b = np.frombuffer(bl, dtype=np.uint8)
    ts = _token_starts(b)
    if ts.size % 2:
        return None
    if ts.size > 2:
        # between the two tokens of a line no newline, between lines at least one
        nxt = ts[1:]
        single = b[nxt - 2] > 47  # one separator byte between the tokens
        has_nl = b[nxt - 1] == 10
        if not single.all():
            nl = np.flatnonzero(b == 10)
            odd = np.flatnonzero(~single)
            has_nl[odd] = np.searchsorted(nl, nxt[odd]) > np.searchsorted(nl, ts[odd])
        if has_nl[0::2].any() or not has_nl[1::2].all():
            return None
    vals = _fast_numbers(bytes(bl), ts.size)
    if vals is None or vals.size == 0:
        return vals
    lo, hi = int(vals.min()), int(vals.max())
    if lo < base or (hi >= base + n if n is not None else hi >= 2**40):
        return None
    return vals


def _pairs_chunk_general(text: _Text, offset: int, data: bytes, comments: bytes, base: int, n: int | None,
                         what: str):
    ch = _Chunk(text, offset, data)
    if comments:
        ch.blank_comments(comments)
    short = (ch.tokens_per_line > 0) & (ch.tokens_per_line < 2)
    if short.any():
        li = int(np.flatnonzero(short)[0])
        pos = ch.abs(ch.line_start[li])
        text.fail(pos, f"expected 'u v' ({what}), got {text.line_at(pos)[1]!r}")
    ch.keep_columns(2)
    ch.check_numeric()
    vals = ch.numbers()
    if n is not None:
        ch.check_range(vals, n, base=base)
    elif base and vals.size and vals.min() < base:
        k = int(np.flatnonzero(vals < base)[0])
        text.fail(ch.token_pos(k), f"vertex id must be >= {base}, got {text.token_at(ch.token_pos(k))!r}")
    elif vals.size and vals.max() >= 2**40:
        k = int(np.flatnonzero(vals >= 2**40)[0])
        text.fail(ch.token_pos(k), f"vertex id too large (>= 2^40), got {text.token_at(ch.token_pos(k))!r}")
    return vals


def _read_pairs(text: _Text, start: int, columns: int, comments: bytes, base: int, n: int | None,
                what: str = "edge"):
    """Read lines of >= 2 integer columns (extra columns ignored); return (u, v, lines) minus base,
    as int32 when every id fits, else int64."""
    cap = (len(text) - start + 1) // 4  # a pair takes at least 'u v\n'
    us, vs = _Sink(cap, np.int32), _Sink(cap, np.int32)
    for offset, data in text.chunks(start):
        vals = _pairs_chunk_fast(data, comments, base, n)
        if vals is None:
            vals = _pairs_chunk_general(text, offset, data, comments, base, n, what)
        if base:
            vals -= base
        if vals.size and int(vals.max()) >= 2**31 - 2:  # ids beyond int32: keep int64
            us.widen()
            vs.widen()
        us.append(vals[0::2])
        vs.append(vals[1::2])
        del vals
    return us.result(), vs.result(), us.size


def _read_edgelist(text: _Text, num_vertices: int | None) -> EdgeGraph:
    u, v, _ = _read_pairs(text, 0, 2, b"#%", 0, num_vertices)
    n = num_vertices if num_vertices is not None else int(max(u.max(initial=-1), v.max(initial=-1))) + 1
    dt = id_dtype(n)
    return EdgeGraph(n=n, src=u.astype(dt, copy=False), dst=v.astype(dt, copy=False))


def _read_mtx(text: _Text) -> EdgeGraph:
    header = None
    pos = 0
    size_line = None
    for line, content, end in text.header_lines(1 << 20):
        if header is None:
            header = (line, content)
            parts = content.lower().split()
            if not content.lower().startswith("%%matrixmarket") or len(parts) < 5:
                raise GraphFormatError(f"expected '%%MatrixMarket matrix coordinate <field> <symmetry>', got {content!r}",
                                       path=text.path, line=line)
            if parts[1] != "matrix" or parts[2] != "coordinate":
                raise GraphFormatError(f"only 'matrix coordinate' Matrix Market files hold graphs, got {content!r}",
                                       path=text.path, line=line)
            field, symmetry = parts[3], parts[4]
            if field not in ("pattern", "real", "integer", "complex", "double"):
                raise GraphFormatError(f"unknown Matrix Market field {field!r}", path=text.path, line=line)
            if symmetry not in ("general", "symmetric", "skew-symmetric", "hermitian"):
                raise GraphFormatError(f"unknown Matrix Market symmetry {symmetry!r}", path=text.path, line=line)
            pos = end
            continue
        pos = end
        if not content or content.startswith("%"):
            continue
        size_line = (line, content)
        break
    if size_line is None:
        raise GraphFormatError("truncated file: size line 'rows cols entries' missing", path=text.path,
                               line=(header[0] + 1) if header else 1)
    sl, sc = size_line
    parts = sc.split()
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise GraphFormatError(f"expected size line 'rows cols entries', got {sc!r}", path=text.path, line=sl)
    rows, cols, nnz = (int(p) for p in parts)
    if rows != cols:
        raise GraphFormatError(f"adjacency matrix must be square, got {rows} x {cols}", path=text.path, line=sl)
    u, v, count = _read_pairs(text, pos, 2, b"%", 1, rows, what="entry 'row col [value]'")
    if count != nnz:
        where = max(len(text) - 1, 0)
        kind = "truncated file? " if count < nnz else ""
        text.fail(where, f"{kind}size line says {nnz} entries but the file has {count}")
    if symmetry != "general":
        off = u != v
        u, v = np.concatenate((u, v[off])), np.concatenate((v, u[off]))
    dt = id_dtype(rows)
    return EdgeGraph(n=rows, src=u.astype(dt, copy=False), dst=v.astype(dt, copy=False))


def read_graph(path, fmt: str = "auto", num_vertices: int | None = None) -> EdgeGraph:
    """Read a graph file.

    Parameters
    ----------
    path : str or os.PathLike
    fmt : {"auto", "gra", "edgelist", "mtx", "h5"}
        ``auto`` looks at the file name, then at the first line.
    num_vertices : int, optional
        Edge lists only: the number of vertices (ids must be below it). Default: largest id + 1.

    Raises
    ------
    GraphFormatError
        With ``file:line:`` and the offending value.

    Examples
    --------
    >>> from distgrail import bundled_graph
    >>> g = read_graph(bundled_graph())
    >>> g.n
    3617
    """
    path = os.fspath(path)
    if fmt not in FORMATS:
        raise GraphFormatError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}", path=path)
    if not os.path.exists(path):
        raise GraphFormatError("no such file", path=path)
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "h5":
        from .binary import read_binary_graph

        return read_binary_graph(path)
    if num_vertices is not None and fmt != "edgelist":
        raise GraphFormatError(f"--num-vertices applies to edge lists only, not {fmt!r} files", path=path)
    if num_vertices is not None and int(num_vertices) < 0:
        raise GraphFormatError(f"number of vertices must be >= 0, got {num_vertices!r}", path=path)
    text = _Text(path)
    digest = text.sha256()
    try:
        if fmt == "gra":
            g = _read_gra(text)
        elif fmt == "mtx":
            g = _read_mtx(text)
        else:
            g = _read_edgelist(text, num_vertices)
        g.sha256 = digest()
    finally:
        if text._h is None:
            digest()  # let the hashing thread finish before the file closes
        text.close()
    g.name = os.path.basename(path)
    g.meta["path"] = os.path.abspath(path)
    g.meta["format"] = fmt
    return g


def read_pairs(path) -> tuple[np.ndarray, np.ndarray]:
    """Read query pairs: text ``u v`` per line (``#``/``%`` comments, ``.gz`` allowed) or a ``.npy``
    array of shape (k, 2). Ids are checked against the index later, by :meth:`Index.query`."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise GraphFormatError("no such pairs file", path=path)
    if path.endswith(".npy"):
        arr = np.load(path)
        if arr.ndim != 2 or arr.shape[1] != 2 or not np.issubdtype(arr.dtype, np.integer):
            raise GraphFormatError(f"expected an integer array of shape (k, 2), got {arr.dtype} {arr.shape}",
                                   path=path)
        return arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64)
    data = None
    if path.endswith(".gz"):
        import gzip

        try:
            with gzip.open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise GraphFormatError(f"not a readable gzip file ({e})", path=path) from None
    text = _Text(path, data)
    try:
        u, v, _ = _read_pairs(text, 0, 2, b"#%", 0, None, what="query pair")
    finally:
        text.close()
    return u.astype(np.int64), v.astype(np.int64)
