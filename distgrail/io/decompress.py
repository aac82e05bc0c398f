"""Decompressed text in blocks for the GPU parser (:func:`distgrail.io.parse.read_text_graph`):
a host thread decompresses a gzip, bzip2 or Zstandard edge list ahead of the kernels (zlib, bz2
and zstandard release the GIL, so it runs beside the parse), and
:class:`~distgrail.io.chunks.ChunkReader` cuts the blocks into the parser's chunks. A compressed
stream has no byte ranges, so ranks never split one: one rank reads it.

Nothing here reports bad input: any failure (damaged, truncated, data after the end) is a
:class:`StreamError`, and the file then goes to the CPU reader (:mod:`distgrail.io.compressed`),
whose error names the file, line and value.
"""

from __future__ import annotations

import os
import queue
import threading

import numpy as np

from .compressed import CODECS, bz2_pieces, put_unless_stopped, zstd_pieces

__all__ = ["Blocks", "StreamError", "BLOCK", "inflater"]

#: decompressed bytes per block handed from the thread to the parser
BLOCK = 4 << 20


class StreamError(Exception):
    """The decompressing thread of :class:`Blocks` failed (damaged or truncated data, or anything
    unusual): the GPU path then lets the CPU reader read the file and report it."""


def inflater():
    """The ``decompressobj`` that inflates gzip members: ISA-L's (the ``isal`` package, a dependency:
    over twice zlib's speed on one core, docs/benchmarks.md) when it imports,
    else zlib's. Both check each member's CRC-32 and size."""
    try:
        from isal import isal_zlib

        return isal_zlib.decompressobj
    except ImportError:
        import zlib

        return zlib.decompressobj


def _gzip_blocks(raw, block: int, decompressobj=None):
    """Decompressed pieces (at most ``block`` bytes) of the gzip members in ``raw``, by
    ``decompressobj`` (:func:`inflater`'s) itself. Anything :mod:`gzip` might judge otherwise (data
    after a member that is neither zero padding nor another member; a member cut short) raises
    :class:`StreamError`: the CPU reader, which reads with :mod:`gzip`, then decides."""
    new = decompressobj or inflater()
    d, data = new(31), b""
    while True:
        if not data:
            data = raw.read(1 << 20)
            if not data:
                if d.eof:
                    return
                raise StreamError("the gzip data ends inside a member")
        if d.eof:  # a member ended: zero padding, or the next member
            data = data.lstrip(b"\0")
            if not data:
                continue
            if len(data) < 2:  # (two bytes tell a member's magic)
                more = raw.read(1 << 20)
                if not more:
                    raise StreamError("data after a gzip member")
                data += more
                continue
            if not data.startswith(b"\x1f\x8b"):
                raise StreamError("data after a gzip member")
            d = new(31)
        out = d.decompress(data, block)
        while True:
            if out:
                yield out
            if d.eof:  # the rest is in unused_data (unconsumed_tail is then stale)
                break
            if d.unconsumed_tail:
                out = d.decompress(d.unconsumed_tail, block)
            elif len(out) == block:  # a full block: zlib may hold more output
                out = d.decompress(b"", block)
            else:
                break
        data = d.unused_data if d.eof else b""


class Blocks:
    """The decompressed text of ``path`` in blocks, decompressed ahead by a thread (zlib, bz2 and
    zstandard release the GIL, so it runs beside the parse). :meth:`readinto` fills an array;
    :meth:`total` estimates the whole text's size from the compressed bytes consumed so far."""

    def __init__(self, path: str, codec: str, block: int | None = None, ahead: int = 16):
        self.path, self.codec = str(path), codec
        self.block = BLOCK if block is None else int(block)
        self.stored = max(os.path.getsize(self.path), 1)
        self._raw = open(self.path, "rb")
        self._q: queue.Queue = queue.Queue(maxsize=ahead)
        self._stop = threading.Event()
        self._cur, self._off = b"", 0
        self._seen, self._consumed, self._eof = 0, 0, False
        self._thread = threading.Thread(target=self._work, name="distgrail-decompress", daemon=True)
        self._thread.start()

    def _pieces(self):
        if self.codec == "gz":
            return _gzip_blocks(self._raw, self.block)
        if self.codec == "bz2":
            return bz2_pieces(self._raw, self.block)  # (checks that the data ends where a stream does)
        return zstd_pieces(self._raw, self.block)  # (checks that the data ends where a frame does)

    def _work(self):
        try:
            for piece in self._pieces():
                if self._stop.is_set():
                    return
                self._put((piece, self._raw.tell()))
            self._put((b"", self.stored))
        except BaseException as e:  # noqa: BLE001 - handed to the reader
            self._put(e)

    def _put(self, item):
        put_unless_stopped(self._q, self._stop, item)

    def _next(self) -> bool:
        if self._eof:
            return False
        item = self._q.get()
        if isinstance(item, BaseException):
            self._eof = True
            raise StreamError(f"{CODECS[self.codec][1]} data: {item}") from None
        self._cur, self._off = item[0], 0
        self._consumed = item[1]
        self._seen += len(item[0])
        self._eof = not item[0]
        return not self._eof

    def readinto(self, out) -> int:
        """Fill the uint8 array ``out`` with the next text bytes; fewer only at the end."""
        got, want = 0, out.size
        while got < want:
            if self._off >= len(self._cur) and not self._next():
                break
            k = min(want - got, len(self._cur) - self._off)
            out[got:got + k] = np.frombuffer(self._cur, np.uint8, k, self._off)
            got, self._off = got + k, self._off + k
        return got

    def skip_to_newline(self) -> int:
        """Bytes up to and including the next newline (all that is left if none), consumed."""
        count = 0
        while True:
            if self._off >= len(self._cur) and not self._next():
                return count
            i = self._cur.find(b"\n", self._off)
            if i >= 0:
                count += i + 1 - self._off
                self._off = i + 1
                return count
            count += len(self._cur) - self._off
            self._off = len(self._cur)

    def total(self) -> int:
        """Estimated bytes of the whole text: those seen, scaled by the stored file's size over the
        compressed bytes consumed for them (exact at the end)."""
        if self._eof or not self._consumed:
            return max(self._seen, 1)
        return max(self._seen * self.stored // self._consumed, self._seen)

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self._raw.close()
