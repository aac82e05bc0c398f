"""The SHA-256 of an input file, computed in the background while the build goes on.

:class:`FileDigest` starts a thread that reads the file on its own descriptor in large blocks (from
the page cache, into one reused buffer) and hashes them; hashlib releases the GIL, so parsing,
condensing and labeling go on meanwhile. Nothing waits for the value until it is needed:
:meth:`FileDigest.hexdigest` (also ``str(digest)``) joins the thread, which happens when the index
is assembled, or when :attr:`distgrail.io.graph.EdgeGraph.sha256` is read.

The file's size, modification time and inode are taken when the digest starts and compared again
once the last byte is hashed (and by :meth:`FileDigest.check`, which readers call at the end of
the parse):
a file changed between the parse and the hash raises :class:`~distgrail.errors.GraphFormatError`
naming the file, rather than storing a hash of other bytes. :meth:`FileDigest.cancel` stops the
thread early (errors in the parse); the thread always closes its descriptor.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time

from ..errors import GraphFormatError

__all__ = ["FileDigest", "BLOCK_BYTES", "THREAD_NAME", "resolve", "start_early", "take", "discard_early"]

#: bytes read and hashed per step
BLOCK_BYTES = 16 << 20
#: name of the hashing threads (tests count them)
THREAD_NAME = "distgrail-sha256"


def _stamp(st: os.stat_result) -> tuple:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


class FileDigest:
    """SHA-256 of the file at ``path``, hashed on a thread started here; ``hexdigest()`` joins."""

    def __init__(self, path, block_bytes: int = BLOCK_BYTES):
        self.path = os.fspath(path)
        self._block = max(int(block_bytes), 4096)
        self._fd = os.open(self.path, os.O_RDONLY)
        try:
            self._stamp = _stamp(os.fstat(self._fd))
        except BaseException:
            os.close(self._fd)
            raise
        self._stop = threading.Event()
        self._hex: str | None = None
        self._error: str | None = None
        self._read_error: str | None = None  # the file could not be read or hashed (not a change)
        self._end = None  # the file's stamp once hashed
        #: seconds callers spent waiting in :meth:`hexdigest` for the thread (0 when it was done)
        self.wait_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def _run(self):
        fd, size = self._fd, self._stamp[0]
        try:
            h = hashlib.sha256()
            buf = bytearray(min(self._block, max(size, 1)))
            view = memoryview(buf)
            pos = 0
            while pos < size:
                if self._stop.is_set():
                    return
                k = os.preadv(fd, [view[: min(len(buf), size - pos)]], pos)
                if k <= 0:
                    self._error = f"it ended at byte {pos:,} while being read (it was {size:,} bytes)"
                    return
                h.update(view[:k])
                pos += k
            if os.pread(fd, 1, size):
                self._error = f"it grew beyond its {size:,} bytes while being read"
                return
            self._end = self._stamp_now()
            self._hex = h.hexdigest()
        except OSError as e:
            self._read_error = f"cannot read the file: {e.strerror}"
        except Exception as e:  # noqa: BLE001 - e.g. MemoryError for the buffer: never a silent empty hash
            self._read_error = f"hashing it failed: {type(e).__name__}: {e}"
        finally:
            os.close(fd)

    @property
    def size(self) -> int:
        return self._stamp[0]

    def done(self) -> bool:
        """True once the thread has finished (hashed, failed or cancelled)."""
        return not self._thread.is_alive()

    def _stamp_now(self):
        try:
            return _stamp(os.stat(self.path))
        except OSError as e:
            return e.strerror

    def check(self, now=None) -> None:
        """Raise GraphFormatError if the file at ``path`` is not the one the digest started on
        (size, modification time or inode changed); readers call it once they have read it all."""
        now = self._stamp_now() if now is None else now
        if isinstance(now, str):
            raise GraphFormatError(f"the file went away while it was read ({now})", path=self.path)
        if now != self._stamp:
            what = ", ".join(w for w, a, b in zip(("size", "modification time", "inode", "device"), self._stamp, now)
                             if a != b)
            raise GraphFormatError(f"the file changed while it was read ({what}); run again on a file that "
                                   "stays the same", path=self.path)

    def hexdigest(self) -> str:
        """Wait for the hash and return it (hex); raises GraphFormatError if the file changed."""
        t = time.perf_counter()
        self._thread.join()
        self.wait_seconds += time.perf_counter() - t
        if self._stop.is_set() and self._hex is None and self._error is None:
            raise GraphFormatError("the file's SHA-256 was cancelled (the read failed)", path=self.path)
        if self._read_error is not None:
            raise GraphFormatError(f"cannot compute the file's SHA-256: {self._read_error}", path=self.path)
        if self._error is not None:
            raise GraphFormatError(f"the file changed while it was read: {self._error}", path=self.path)
        if self._hex is None:
            raise GraphFormatError("the file's SHA-256 was not computed", path=self.path)
        self.check(self._end)  # as it was when the last byte was hashed
        return self._hex

    def cancel(self) -> None:
        """Stop hashing and wait for the thread (it closes its descriptor)."""
        self._stop.set()
        self._thread.join()

    def __str__(self) -> str:
        return self.hexdigest()

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return f"FileDigest({self.path!r}, {state})"


def resolve(value) -> str:
    """A SHA-256 value as a string: a :class:`FileDigest` (or anything with ``hexdigest()``) is
    joined, a string is returned as it is."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return value.hexdigest() if hasattr(value, "hexdigest") else str(value)


# -- a digest started before the slow imports ------------------------------------------------

#: digests started by :func:`start_early`, by real path, until a reader takes them
_EARLY: dict = {}


def start_early(path) -> None:
    """Start hashing the text graph file ``path`` now, before the slow start-up work (importing
    CuPy takes ~1.3 s on the GPU machine), so the hash is done when the index is assembled
    (``distgrail index`` does this for one-process GPU builds). The next :func:`take` of the
    same, unchanged file takes it over; :func:`discard_early` stops what nobody took. Does
    nothing if the file cannot be opened (the reader reports that). Callers skip binary graphs
    (:func:`distgrail.io.read.hash_early`)."""
    key = os.path.realpath(os.fspath(path))
    try:
        if key not in _EARLY:
            _EARLY[key] = FileDigest(key)
    except OSError:
        pass


def take(path) -> FileDigest:
    """The digest of ``path``: the one :func:`start_early` started if the file is unchanged since,
    else a new one."""
    d = _EARLY.pop(os.path.realpath(os.fspath(path)), None)
    if d is not None:
        if d._stamp_now() == d._stamp and not d._stop.is_set():
            return d
        d.cancel()
    return FileDigest(path)


def discard_early() -> None:
    """Cancel the early digests no reader took (e.g. the CPU reader hashed the file itself)."""
    while _EARLY:
        _EARLY.popitem()[1].cancel()
