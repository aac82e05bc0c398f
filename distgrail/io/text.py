"""Text access for the graph readers: chunks that end at line ends, tokens, errors with file:line,
and the SHA-256 of the file computed beside the parse.

No Python loop per line or edge: chunks of ``CHUNK_BYTES`` take a fast path (``bytes.translate``,
byte-wide NumPy passes, token counts by packed bitmap, ``numpy.fromstring``); anything unusual
sends a chunk to the general path, which checks every line byte-exactly and reports
``file:line: what is wrong, got 'value'``. SHA-256 runs beside the parse (a thread on two cores).
"""

from __future__ import annotations

import mmap
import os
import warnings

import numpy as np

from .. import cores
from ..errors import GraphFormatError, id_range
from ..jit import restarts
from .excerpt import looks_binary, shown  # noqa: F401 (looks_binary: re-exported)
from .guards import EMPTY_FIELD, STRAY_CR, compiled_fields, empty_field, room_problem, stray_cr

__all__ = ["shown", "Text", "Chunk", "Sink", "TokenCounter", "CHUNK_BYTES", "concat", "parse_n", "fast_numbers", "token_starts",
           "COMPILED_NUMBERS_BYTES", "chunks_ahead", "large_text", "EXTRA_TABLE"]

#: bytes per parse chunk; chunks end at line ends (tests shrink it to cross many boundaries)
CHUNK_BYTES = 4 << 20
#: chunks with more comment characters than this take the general (slower) path
MAX_FAST_COMMENTS = 4096


def _table(blank: bytes) -> bytes:
    """A ``bytes.translate`` table for the fast path: digits and '\n' stay, spaces, tabs, CR and
    ``blank`` become ' ', anything else becomes 0x01 (which sends the chunk to the general path)."""
    t = bytearray(b"\x01" * 256)
    for c in b"0123456789\n":
        t[c] = c
    for c in b" \t\r" + blank:
        t[c] = 32
    return bytes(t)


GRA_TABLE = _table(b":#")
PAIRS_TABLE = _table(b"")


def _extra_table() -> bytes:
    """:data:`PAIRS_TABLE`, but every other printable byte (and every byte past ASCII) becomes
    ``a``, a token byte that is no digit: lines whose columns after the first two hold weights,
    times or words (``0 1 0.5``) stay on the fast path, which checks that no ``a`` falls in a
    line's first two tokens. ``#`` and ``%`` stay 0x01 (comments, blanked first), as do
    control bytes (the general path judges them)."""
    t = bytearray(PAIRS_TABLE)
    for c in range(33, 256):
        if t[c] == 1 and c not in b"#%" and c != 127:
            t[c] = ord("a")
    return bytes(t)


#: the fast path's table for lines with more than two columns (:func:`_extra_table`)
EXTRA_TABLE = _extra_table()

WS = np.zeros(256, dtype=bool)
WS[[9, 10, 13, 32]] = True
DIGIT = np.zeros(256, dtype=bool)
DIGIT[48:58] = True
NUMERIC_TEXT = WS | DIGIT  # what may remain once markers and ignored columns are blanked


def count_newlines(buf, end: int) -> int:
    if end <= 0:
        return 0
    return int(np.count_nonzero(np.frombuffer(buf, dtype=np.uint8, count=end) == 10))


class Text:
    """A memory-mapped text file with helpers for error messages."""

    #: every offset's bytes stay at hand, so chunks may be read ahead of the checks
    #: (:func:`chunks_ahead`); a decompressed stream keeps only recent ones
    whole = True

    def __init__(self, path: str, data: bytes | None = None, translate: bytes | None = None):
        self.path, self.translate = str(path), translate  # translate: a table for the chunks (CSV: ',' -> ' ')
        self._f = None
        self._h = None  # the digest fed with the chunks as they are parsed (one-core case)
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
        line = count_newlines(buf, start) + 1
        return line, bytes(buf[start:end]).decode("utf-8", "replace").rstrip("\r")

    def excerpt(self, pos: int) -> str:
        """The line holding byte ``pos``, quoted, escaped and cut to about 40 bytes."""
        buf = self.buf
        start = buf.rfind(b"\n", 0, pos) + 1
        end = buf.find(b"\n", pos)
        end = len(buf) if end < 0 else end
        return shown(bytes(buf[start:min(end, start + 4096)]).rstrip(b"\r"))

    def token_at(self, pos: int) -> str:
        buf = self.buf
        stops = b" \t\r\n," if self.translate else b" \t\r\n"
        s = pos
        while s > 0 and buf[s - 1] not in stops:
            s -= 1
        e = pos
        while e < len(buf) and buf[e] not in stops:
            e += 1
        return bytes(buf[s:e]).decode("utf-8", "replace")

    def check_room(self, edges: int) -> None:
        """Refuse the file, with need against have, once the ``edges`` read so far cannot fit
        (:func:`distgrail.io.guards.room_problem`: a gzip bomb ends here, not killed by the kernel)."""
        why = room_problem(edges)
        if why:
            raise GraphFormatError(self.read_so_far() + why, path=self.path)

    def read_so_far(self) -> str:
        """The start of :meth:`check_room`'s message."""
        return "the file holds at least "

    def fail(self, pos: int, message: str):
        line, _ = self.line_at(pos)
        raise GraphFormatError(message, path=self.path, line=line)

    def bad_token(self, pos: int):
        tok = self.token_at(pos)
        body = tok.rstrip(":")
        if body.startswith("-") and body[1:].isdigit():
            self.fail(pos, f"negative vertex id, got {tok!r}")
        self.fail(pos, f"vertex id must be a non-negative integer, got {shown(tok.encode())}")

    def header_lines(self, count: int, start: int = 0):
        """Yield (line_number, text, end_offset) for the next ``count`` lines from ``start``."""
        pos = start
        line = count_newlines(self.buf, start) + 1
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
            cr = stray_cr(data, pos + len(data) >= size)
            if cr >= 0:
                self.fail(pos + cr, STRAY_CR + self.excerpt(pos + cr))
            if self._h is not None and pos >= self._hashed:
                self._feed(pos)
                self._h.update(data)
                self._hashed += len(data)
            if self.translate is not None:  # CSV: no empty field (its commas become blanks)
                blank = empty_field(data)
                if blank >= 0:
                    self.fail(pos + blank, EMPTY_FIELD + self.excerpt(pos + blank))
                self._raw = (pos, data)  # (the fields of its lines are counted by its commas: raw_chunk)
            yield pos, (data if self.translate is None else data.translate(self.translate))
            pos += len(data)
        self._raw = None

    def raw_chunk(self, pos: int, size: int) -> bytes:
        """The bytes ``pos:pos+size`` of the chunk :meth:`chunks` yielded last, as in the file (the
        chunk comes translated: a CSV's commas made blanks)."""
        raw = getattr(self, "_raw", None)  # (a StreamText reads its own buffer)
        if raw is not None and raw[0] == pos and len(raw[1]) == size:
            return raw[1]
        return self.read(pos, size)

    def _feed(self, upto: int):
        while self._hashed < upto:
            data = self.read(self._hashed, min(4 << 20, upto - self._hashed))
            self._h.update(data)
            self._hashed += len(data)

    def digest(self, given=None):
        """Start the file's digest (BLAKE3, :mod:`distgrail.io.digest`), or take over ``given``, the
        one the file's opener started, if it is of this file, unchanged (:func:`~distgrail.io.digest.adopt`).

        With ``given`` or two or more usable cores: a running :class:`~distgrail.io.digest.FileDigest`
        (its own descriptor and threads; the graph keeps it pending, the index joins it when assembled).
        Else None: the parser's own chunks are hashed as they come (no second read, no thread
        switching) and :meth:`chunk_digest` gives the value once the parse is done."""
        from .digest import adopt, new_hasher

        if cores.usable() >= 2 or given is not None:
            return adopt(given, self.path)
        self._h = new_hasher(threads=False)
        return None

    def chunk_digest(self) -> str:
        """``"blake3:<hex>"`` of the chunks hashed during the parse, and of the rest of the file."""
        from .digest import labelled

        self._feed(len(self))
        return labelled(self._h)


class Chunk:
    """Byte-level view of one chunk: lines, whitespace tokens, cumulative token counts."""

    def __init__(self, text: Text, offset: int, data: bytes, blank_markers: bytes = b""):
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
        ws = WS[self.arr]
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
        ws = WS[self.arr]
        drop = ~ws & (token_col[np.maximum(tok_of_byte, 0)] >= k)
        self.arr = np.where(drop, np.uint8(32), self.arr)
        self.refresh()

    def abs(self, pos) -> int:
        return self.offset + int(pos)

    def check_numeric(self):
        bad = ~NUMERIC_TEXT[self.arr]
        if bad.any():
            self.text.bad_token(self.abs(np.flatnonzero(bad)[0]))

    def numbers(self) -> np.ndarray:
        if not self.cum[-1]:  # (a chunk of comments and blanks only: fromstring reads b'  ' as [0])
            return np.zeros(0, np.int64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            vals = np.fromstring(self.arr.tobytes(), dtype=np.int64, sep=" ")
        if vals.size != self.cum[-1]:  # cannot happen after check_numeric; keep the guard
            raise GraphFormatError("internal parse mismatch", path=self.text.path)
        return vals

    def token_pos(self, k) -> int:
        return self.abs(np.flatnonzero(self.starts)[k])

    def check_range(self, vals, n: int, base: int = 0, what: str = "vertex id", whose: str | None = None):
        """Every value must lie in base..base+n-1; report the first that does not (``whose``:
        what has the ``n`` vertices, named where it has none, :func:`~distgrail.errors.id_range`;
        None: an edge list read against a count given, ``--num-vertices`` or an index's)."""
        if vals.size == 0:
            return
        bad = (vals < base) | (vals >= base + n)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            pos = self.token_pos(k)
            self.text.fail(pos, f"{what} {id_range(n, base, whose=whose)}, got {self.text.token_at(pos)!r}")


def is_digits(value: str) -> bool:
    """``value`` is ASCII digits only (``str.isdigit`` also takes '³' and '٣', which ``int`` then
    refuses or reads)."""
    return value.isascii() and value.isdigit()


#: significant digits past which :func:`digits_value` stops reading (Python's ``int`` refuses more
#: than 4,300 digits; any count or id with more than 20 is past every limit anyway)
_MOST_DIGITS = 4000


def digits_value(value) -> int:
    """The value of ASCII digits ``value`` (str or bytes; :func:`is_digits` checked), past any
    leading zeros; a value of more digits than ``int`` reads is given as ``10 ** 4000``, which
    every count and id check refuses (quoting the text as written)."""
    digits = value.lstrip(b"0" if isinstance(value, bytes) else "0")
    if len(digits) > _MOST_DIGITS:
        return 10 ** _MOST_DIGITS
    return int(digits) if digits else 0


def parse_n(text: Text, line: int, value: str, what: str) -> int:
    if not is_digits(value):
        raise GraphFormatError(f"{what} must be a non-negative integer, got {value!r}", path=text.path, line=line)
    return digits_value(value)


def concat(parts: list, dtype) -> np.ndarray:
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


class Sink:
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


#: chunks read ahead per thread by :func:`chunks_ahead`, and its most threads
AHEAD_PER_THREAD = 2
AHEAD_THREADS = 8


def chunks_ahead(chunks, work, threaded: bool, threads: int | None = None):
    """``(offset, data, done)`` for each ``(offset, data)`` of the generator ``chunks``, in order;
    ``done()`` returns ``work(data)``. ``threaded``: the chunks are read ahead and ``work`` runs on
    threads (at most :data:`AHEAD_THREADS`, :data:`AHEAD_PER_THREAD` chunks each in flight); an error the generator
    raises while reading ahead is raised only where the caller reaches it, so errors come in file
    order, as without threads. ``work`` must not raise for input it is given (a caller's checks
    raise). On a stop (an error, a closed generator) the chunks not yet worked are dropped."""
    if not threaded:
        for offset, data in chunks:
            yield offset, data, (lambda data=data: work(data))
        return
    import collections
    from concurrent.futures import ThreadPoolExecutor

    threads = threads or max(1, min(AHEAD_THREADS, cores.usable()))
    pending: collections.deque = collections.deque()
    error: list = []
    with ThreadPoolExecutor(threads) as pool:
        try:
            while True:
                while not error and len(pending) < AHEAD_PER_THREAD * threads:
                    try:
                        offset, data = next(chunks)
                    except StopIteration:
                        break
                    except Exception as e:  # noqa: BLE001 - the file's error: raised when its turn comes
                        error.append(e)
                        break
                    pending.append((offset, data, pool.submit(work, data)))
                if not pending:
                    break
                offset, data, future = pending.popleft()
                yield offset, data, future.result
            if error:
                raise error[0]
        finally:
            for *_, future in pending:
                future.cancel()
            chunks.close()


def token_starts(b: np.ndarray) -> np.ndarray:
    """Offsets of the first digit of every token in a translated chunk (digits > 47, rest blank)."""
    if b.size == 0:
        return np.zeros(0, np.int64)
    dig = b > 47
    ts = np.flatnonzero(dig[1:] > dig[:-1])
    ts += 1
    if dig[0]:
        ts = np.concatenate((np.zeros(1, ts.dtype), ts))
    return ts


HI_BITS = np.array([(0xFF00 >> r) & 0xFF for r in range(8)], dtype=np.uint8)


class TokenCounter:
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
        return self.cum[byte] + np.bitwise_count(self.packed[byte] & HI_BITS[pos & 7])


#: text bytes from which the fast path reads its numbers compiled (:func:`fast_numbers`): where
#: numba's import and cache load cost less than ``np.fromstring`` takes (docs/benchmarks.md, session 43)
COMPILED_NUMBERS_BYTES = 128 << 20


def large_text(text: Text, start: int) -> bool:
    """Whether ``text`` from ``start`` is large enough for the compiled numbers and the chunks
    read ahead (:data:`COMPILED_NUMBERS_BYTES`), and the compiled numbers load (numba)."""
    return len(text) - start >= COMPILED_NUMBERS_BYTES and compiled_fields() is not None


@restarts
def fast_numbers(blanked: bytes, count: int, starts: np.ndarray | None = None):
    """The ``count`` integers of a translated chunk, or None if ``fromstring`` disagrees. With the
    tokens' ``starts`` (a large file, :data:`COMPILED_NUMBERS_BYTES`), one compiled pass reads
    them (:func:`distgrail.io.fields_jit.numbers_at`, the same values), or None for a value of
    10^18 or more (``fromstring`` saturates it past every vertex id: the general path refuses the
    line either way); without numba, ``fromstring``. ``fromstring`` reads every token: with
    ``starts`` (the compiled pass failed to compile, :func:`~distgrail.jit.restarts`), None unless
    they are all the chunk's tokens (the fast path leaves later columns, ``0 1 0.5``, in a large
    file's chunk for the compiled pass to skip: read by ``fromstring`` they would raise or shift
    the ids)."""
    if count == 0:
        return np.zeros(0, np.int64)
    if starts is not None and starts.size == count:
        jit = compiled_fields()
        if jit is not None:
            vals, ok = jit.numbers_at(np.frombuffer(blanked, np.uint8), starts)
            return vals if ok else None
    if starts is not None and token_starts(np.frombuffer(blanked, np.uint8)).size != count:
        return None
    blanked = bytes(blanked)  # (fromstring takes read-only bytes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        vals = np.fromstring(blanked, dtype=np.int64, sep=" ")
    return vals if vals.size == count else None
