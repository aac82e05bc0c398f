"""Compressed text graph files (``.gz``, ``.bz2``, ``.zst``), decompressed as they are parsed.

The codec is told by the file's first bytes (gzip ``1f 8b``, bzip2 ``BZh``, Zstandard
``28 b5 2f fd``), so a misnamed file still reads. :class:`StreamText` gives the graph readers the
interface of :class:`~distgrail.io.text.Text` (chunks ending at line ends, ``file:line`` errors)
without the whole text in memory: a thread decompresses blocks ahead of the parser (zlib, bz2 and
zstandard release the GIL), and only the chunk being parsed, the one before it and the block read
ahead are kept (errors in them name the exact line). The graph's ``digest`` is the hash of the file
as stored (compressed), computed in the background like a plain file's.

The GPU path parses compressed edge lists itself: :class:`distgrail.io.decompress.Blocks`
decompresses on the host in a thread while the kernels parse.
"""

from __future__ import annotations

import os
import queue
import threading

from ..errors import GraphFormatError
from .guards import EMPTY_FIELD, STRAY_CR, empty_field, stray_cr
from .text import CHUNK_BYTES, Text

__all__ = ["CODECS", "codec_of", "open_codec", "peek", "StreamText"]

#: codec -> (magic bytes, name in messages)
CODECS = {"gz": (b"\x1f\x8b", "gzip"), "bz2": (b"BZh", "bzip2"), "zst": (b"\x28\xb5\x2f\xfd", "Zstandard")}
#: decompressed bytes per block handed from the thread to the parser
BLOCK = 4 << 20
#: blocks decompressed ahead of the parser
AHEAD = 2


def put_unless_stopped(q: queue.Queue, stop: threading.Event, item) -> None:
    """Put ``item`` on the bounded queue ``q`` (a decompressing thread's hand-over), waiting while
    it is full, unless ``stop`` is set (the reader closed)."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def codec_of(head: bytes) -> str | None:
    """"gz", "bz2" or "zst" when ``head`` (a file's first bytes) starts like that codec's data."""
    for codec, (magic, _) in CODECS.items():
        if head.startswith(magic):
            return codec
    if len(head) >= 4 and head[0] & 0xF0 == 0x50 and head[1:4] == b"\x2a\x4d\x18":
        return "zst"  # (a Zstandard skippable frame first: metadata, then the frames)
    return None


def _zstd_errors():
    import zstandard

    return (zstandard.ZstdError,)


def open_codec(path: str, codec: str):
    """A binary file object that reads the decompressed bytes of ``path``."""
    if codec == "gz":
        import gzip

        return gzip.open(path, "rb")
    if codec == "bz2":
        return Bz2Streams(open(path, "rb"))
    try:
        import zstandard  # noqa: F401 (installed?)
    except ImportError:
        raise GraphFormatError("Zstandard-compressed file, but the 'zstandard' package is not installed "
                               "(pip install zstandard)", path=path) from None
    return ZstdFrames(open(path, "rb"))


class ZstdTruncated(EOFError):
    """The Zstandard data ended inside a frame."""


def zstd_pieces(raw, block: int):
    """Decompressed pieces (about ``block`` bytes or fewer) of the Zstandard frames in the binary
    file ``raw``, one after the other, checking that the data ends where a frame ends:
    python-zstandard's ``stream_reader`` and ``read_to_iter`` end quietly at a frame cut short (a
    file truncated after its first block read as 1,001 of its 2,000 edges), so each frame goes
    through a ``decompressobj`` of its own, and ``eof`` must be set when the input ends
    (:class:`ZstdTruncated` otherwise). Skippable frames give no bytes; data after the last frame
    that is not a frame is a ``ZstdError``. The compressed bytes fed per call follow the ratio seen
    so far, so one call inflates about ``block`` bytes even from a bomb (ratios of 10,000:1)."""
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    d, fed, step = dctx.decompressobj(), False, 1 << 12
    while True:
        data = raw.read(step)
        if not data:
            if fed and not d.eof:
                raise ZstdTruncated("the data ends inside a frame")
            return
        while data:
            if d.eof:  # a frame ended: the next one starts in what it did not use
                d, fed = dctx.decompressobj(), False
            out = d.decompress(data)
            fed = True
            data = d.unused_data if d.eof else b""
            if out:
                yield out
                step = max(1 << 10, min(1 << 20, block * (step or 1) // max(len(out), 1)))


class Bz2Truncated(EOFError):
    """The bzip2 data ended inside a stream."""


class Bz2Trailing(OSError):
    """Data after a bzip2 stream that is not another stream."""


def bz2_pieces(raw, block: int):
    """Decompressed pieces (at most ``block`` bytes) of the bzip2 streams in the binary file
    ``raw``, one after the other, checking that the data ends where a stream ends: :mod:`bz2`'s
    ``BZ2File`` (``bz2.open``) takes any error after the first stream for trailing garbage and ends
    quietly (two streams as pbzip2 and lbzip2 write them, the second damaged, read as the first
    one's 1,000 of 2,000 edges; so did text or a gzip member after a stream). So each stream goes
    through a ``BZ2Decompressor`` of its own; the data after a stream must be nothing or another
    stream (``BZh``, :class:`Bz2Trailing` otherwise; zero bytes to the end are padding, as bzip2 and
    gzip take them), which must decompress cleanly, and ``eof``
    must be set when the input ends (:class:`Bz2Truncated` otherwise). Compressed bytes are read a
    MiB at a time and each call inflates at most ``block`` bytes (``max_length``), even from a bomb."""
    import bz2

    d, data, magic = bz2.BZ2Decompressor(), b"", CODECS["bz2"][0]
    while True:
        if not data:
            data = raw.read(1 << 20)
            if not data:
                if not d.eof:
                    raise Bz2Truncated("the data ends inside a stream")
                return
        if d.eof:  # a stream ended: only another stream may follow
            while len(data) < len(magic):  # (the magic may straddle two reads)
                more = raw.read(1 << 20)
                if not more:
                    break
                data += more
            if not data.startswith(magic):
                if not data.strip(b"\0"):  # zero padding (a blocked writer's), as bzip2 and gzip allow: the rest
                    # must be zeros too
                    while data:
                        data = raw.read(1 << 20)
                        if data.strip(b"\0"):
                            raise Bz2Trailing("data after the end of a stream that is not another stream")
                    return
                raise Bz2Trailing("data after the end of a stream that is not another stream")
            d = bz2.BZ2Decompressor()
        out = d.decompress(data, block)
        while True:
            if out:
                yield out
            if d.eof or d.needs_input:
                break
            out = d.decompress(b"", block)  # (it holds input that gives more output)
        data = d.unused_data if d.eof else b""


class ZstdFrames:
    """A binary file object over :func:`zstd_pieces` of ``raw`` (``read(count)``, ``close``)."""

    def __init__(self, raw, block: int = 4 << 20):
        self._raw, self._pieces, self._buf = raw, self._make(raw, block), b""

    @staticmethod
    def _make(raw, block: int):
        return zstd_pieces(raw, block)

    def read(self, count: int = -1) -> bytes:
        while count < 0 or len(self._buf) < count:
            piece = next(self._pieces, b"")
            if not piece:
                break
            self._buf += piece
        if count < 0:
            count = len(self._buf)
        out, self._buf = self._buf[:count], self._buf[count:]
        return out

    def close(self):
        self._raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Bz2Streams(ZstdFrames):
    """A binary file object over :func:`bz2_pieces` of ``raw`` (``read(count)``, ``close``)."""

    @staticmethod
    def _make(raw, block: int):
        return bz2_pieces(raw, block)


def _damaged(path: str, codec: str, e: BaseException) -> GraphFormatError:
    return GraphFormatError(f"not a readable {CODECS[codec][1]} file, truncated or damaged ({e})", path=path)


def _read_errors(codec: str) -> tuple:
    import zlib

    errs = (OSError, EOFError, ValueError, zlib.error)
    return errs + _zstd_errors() if codec == "zst" else errs


def peek(path: str, codec: str, count: int = 4096) -> bytes:
    """The first ``count`` decompressed bytes (fewer at the end of the data)."""
    try:
        with open_codec(path, codec) as f:
            out = b""
            while len(out) < count:
                got = f.read(count - len(out))
                if not got:
                    break
                out += got
            return out
    except _read_errors(codec) as e:
        if isinstance(e, GraphFormatError):
            raise
        raise _damaged(path, codec, e) from None


class StreamText(Text):
    """The decompressed text of ``path`` as the readers use a :class:`Text`; offsets are offsets in
    the decompressed text. Only recent bytes are kept, so ``line_at``/``excerpt`` work for the
    current and the previous chunk (older offsets get the error without a line number)."""

    whole = False

    def __init__(self, path: str, codec: str, translate: bytes | None = None):
        self.path = str(path)
        self.codec = codec
        self.translate = translate
        self._f = None
        self._h = None
        self.buf = None
        self._data = bytearray()  # decompressed bytes self._base .. self._base + len(self._data)
        self._base = 0
        self._base_lines = 0  # newlines before self._base
        self._eof = False
        self._hint = 4 * os.path.getsize(self.path)  # text is usually 3-5x its gzip size
        self._q: queue.Queue = queue.Queue(maxsize=AHEAD)
        self._stop = threading.Event()
        self._stream = open_codec(self.path, codec)
        self._thread = threading.Thread(target=self._work, name="distgrail-decompress", daemon=True)
        self._thread.start()

    # -- the decompressing thread ---------------------------------------------------------
    def _work(self):
        try:
            while not self._stop.is_set():
                block = self._stream.read(BLOCK)
                self._put(block)
                if not block:
                    return
        except BaseException as e:  # handed to the parser, which raises it with the file's name
            self._put(e)

    def _put(self, item):
        put_unless_stopped(self._q, self._stop, item)

    def _more(self) -> bool:
        """Append the next decompressed block; False at the end of the data."""
        if self._eof:
            return False
        item = self._q.get()
        if isinstance(item, BaseException):
            self._eof = True
            if isinstance(item, _read_errors(self.codec)):
                raise _damaged(self.path, self.codec, item) from None
            raise item
        if not item:
            self._eof = True
            return False
        self._data += item
        return True

    def _ensure(self, upto: int) -> None:
        while self._base + len(self._data) < upto and self._more():
            pass

    def _drop_before(self, pos: int) -> None:
        self._ensure(pos)
        k = min(pos, self._base + len(self._data)) - self._base
        if k > 0:
            self._base_lines += self._data.count(b"\n", 0, k)
            del self._data[:k]
            self._base += k

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self._stream.close()
        except Exception:  # noqa: BLE001 - closing after a read error
            pass

    def __len__(self):
        """The decompressed size once known (after the last chunk), else an estimate (never below
        what has been seen): readers only size growable buffers with it before the end."""
        seen = self._base + len(self._data)
        return seen if self._eof else max(seen, self._hint)

    def read_so_far(self) -> str:
        def size(b: int) -> str:
            return f"{b / 1e9:,.1f} GB" if b >= 1e9 else f"{b / 1e6:,.1f} MB"

        return (f"its {CODECS[self.codec][1]} data ({size(os.path.getsize(self.path))}) inflate to at least "
                f"{size(self._base + len(self._data))} of text holding at least ")

    # -- the Text interface -----------------------------------------------------------------
    def _line_bounds(self, pos: int):
        if pos < self._base:
            return None
        self._ensure(pos + 1)
        rel = pos - self._base
        start = self._data.rfind(b"\n", 0, rel) + 1
        end = self._data.find(b"\n", rel)
        while end < 0 and self._more():
            end = self._data.find(b"\n", rel)
        return start, len(self._data) if end < 0 else end

    def line_at(self, pos: int):
        b = self._line_bounds(pos)
        if b is None:
            return None, ""
        line = self._base_lines + self._data.count(b"\n", 0, b[0]) + 1
        return line, bytes(self._data[b[0]:b[1]]).decode("utf-8", "replace").rstrip("\r")

    def excerpt(self, pos: int) -> str:
        from .excerpt import shown

        b = self._line_bounds(pos)
        return "(line no longer in memory)" if b is None else \
            shown(bytes(self._data[b[0]:min(b[1], b[0] + 4096)]).rstrip(b"\r"))

    def token_at(self, pos: int) -> str:
        b = self._line_bounds(pos)
        if b is None:
            return "?"
        line = bytes(self._data[b[0]:b[1]])
        rel = pos - self._base - b[0]
        s = rel
        while s > 0 and line[s - 1] not in b" \t\r\n,":
            s -= 1
        e = rel
        while e < len(line) and line[e] not in b" \t\r\n,":
            e += 1
        return line[s:e].decode("utf-8", "replace")

    def header_lines(self, count: int, start: int = 0):
        pos = max(start, self._base)
        line = self._base_lines + self._data.count(b"\n", 0, pos - self._base) + 1
        for _ in range(count):
            self._ensure(pos + 1)
            if pos >= self._base + len(self._data):
                return
            rel = pos - self._base
            end = self._data.find(b"\n", rel)
            while end < 0 and self._more():
                end = self._data.find(b"\n", rel)
            end = len(self._data) if end < 0 else end
            yield line, bytes(self._data[rel:end]).decode("utf-8", "replace").strip(), self._base + end + 1
            pos = self._base + end + 1
            line += 1

    def read(self, pos: int, count: int) -> bytes:
        self._ensure(pos + count)
        return bytes(self._data[pos - self._base: pos - self._base + count])

    def chunks(self, start: int, chunk_bytes: int | None = None):
        chunk_bytes = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
        pos, prev = start, start
        while True:
            self._drop_before(min(prev, pos))  # keep the previous chunk for error messages
            self._ensure(pos + chunk_bytes)
            end = min(pos + chunk_bytes, self._base + len(self._data))
            if end <= pos:
                return
            if not (self._eof and end == self._base + len(self._data)):
                nl = self._data.rfind(b"\n", pos - self._base, end - self._base)
                while nl < 0:  # a line longer than a chunk
                    grown = len(self._data)
                    if not self._more():
                        nl = len(self._data) - 1
                        break
                    nl = self._data.find(b"\n", grown)
                end = self._base + nl + 1
            data = bytes(self._data[pos - self._base:end - self._base])
            cr = stray_cr(data, self._eof and end == self._base + len(self._data))
            if cr >= 0:
                self.fail(pos + cr, STRAY_CR + self.excerpt(pos + cr))
            if self.translate is not None:  # CSV: no empty field (its commas become blanks)
                blank = empty_field(data)
                if blank >= 0:
                    self.fail(pos + blank, EMPTY_FIELD + self.excerpt(pos + blank))
                data = data.translate(self.translate)
            yield pos, data
            prev, pos = pos, end

    def digest(self, given=None):
        """The digest of the compressed file as stored (a running FileDigest: never None here):
        ``given``, the one the file's opener started, if it is of this file, unchanged
        (:func:`~distgrail.io.digest.adopt`)."""
        from .digest import adopt

        return adopt(given, self.path)
