"""The BLAKE3 digest of an input file, computed in the background while the build goes on.

:class:`FileDigest` starts a thread that reads the file on its own descriptor in large blocks (from
the page cache) and hashes them with BLAKE3 on every core (the ``blake3`` package, ``max_threads =
AUTO``: its Rust thread pool splits each block). Reading is pipelined: a few reader threads fill
the next block with ``preadv`` (which releases the GIL) while the current one is hashed, so the
digest runs at memory speed, not at one core's hashing speed, and the build does not wait for it
(docs/benchmarks.md). Plain reads, not ``mmap``: a file truncated under the hash is an error
message, never a SIGBUS.

The hash waits while the graph is parsed: a GPU parse reads the same file from the page cache
at memory speed, and two readers of one file slow each other down (docs/benchmarks.md). Readers
:meth:`~FileDigest.pause` it before the parse (or start it paused) and :meth:`~FileDigest.resume`
it after; it then runs beside the condensation, which is the GPU's work, and is done long before
the index is assembled.

Nothing waits for the value until it is needed: :meth:`FileDigest.result` (also ``str(digest)``)
joins the thread, which happens when the index is assembled, or when
:attr:`distgrail.io.graph.EdgeGraph.digest` is read. Values are strings ``"blake3:<hex>"``
(:func:`split_digest` gives the algorithm and the hex); the index stores the two apart
(``source_digest_algorithm``, ``source_digest``). Files of earlier releases carry a SHA-256
(``source_sha256``): they read as ``"sha256:<hex>"``.

The file's size, modification time and inode are taken when the digest starts and compared again
once the last byte is hashed (and by :meth:`FileDigest.check`, which readers call at the end of
the parse): a file changed between the parse and the hash raises
:class:`~distgrail.errors.GraphFormatError` naming the file, rather than storing a hash of other
bytes. :meth:`FileDigest.cancel` stops the thread early (errors in the parse); the thread always
closes its descriptor.

Whoever opens the input may start the digest before any reader runs (``distgrail index`` does, so
that the hash overlaps the slow import of CuPy) and hand it down explicitly: the readers take a
``digest=`` keyword, and :func:`adopt` uses the one given when it is of the same, unchanged file
(else starts one). The starter owns it as a context manager: ``with FileDigest(path) as d:`` cancels
it at the end unless a reader took it over; no module keeps digests between calls.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..errors import GraphFormatError

__all__ = ["FileDigest", "ALGORITHM", "BLOCK_BYTES", "THREAD_NAME", "new_hasher", "labelled", "split_digest",
           "resolve", "adopt"]

#: the algorithm of the digests distgrail computes (older indexes and graph files: "sha256")
ALGORITHM = "blake3"
#: bytes read and hashed per step (two such buffers are in use: one read, one hashed)
BLOCK_BYTES = 32 << 20
#: reader threads that fill the next block (each copies from the page cache at several GB/s)
READERS = 4
#: name of the hashing threads (tests count them)
THREAD_NAME = "distgrail-digest"


def new_hasher(threads: bool = True):
    """A BLAKE3 hasher (``update``, ``hexdigest``); on every core unless ``threads`` is False."""
    import blake3

    return blake3.blake3(max_threads=blake3.blake3.AUTO if threads else 1)


def labelled(hasher) -> str:
    """``"blake3:<hex>"`` of a hasher from :func:`new_hasher`."""
    return f"{ALGORITHM}:{hasher.hexdigest()}"


def split_digest(value: str) -> tuple[str, str]:
    """``(algorithm, hex)`` of a digest string ``"algorithm:hex"``; ``("", "")`` for ""."""
    value = str(value or "")
    alg, sep, hexd = value.partition(":")
    return (alg, hexd) if sep else ("", value)


def _stamp(st: os.stat_result) -> tuple:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


class FileDigest:
    """BLAKE3 of the file at ``path``, hashed on a thread started here; ``result()`` joins."""

    algorithm = ALGORITHM

    def __init__(self, path, block_bytes: int = BLOCK_BYTES, readers: int = READERS, paused: bool = False):
        self.path = os.fspath(path)
        self._block = max(int(block_bytes), 4096)
        self._readers = max(1, int(readers))
        self._fd = os.open(self.path, os.O_RDONLY)
        try:
            self._stamp = _stamp(os.fstat(self._fd))
        except BaseException:
            os.close(self._fd)
            raise
        self._stop = threading.Event()
        self._go = threading.Event()  # cleared: the thread waits before its next block
        if not paused:
            self._go.set()
        self._hex: str | None = None
        self._error: str | None = None
        self._read_error: str | None = None  # the file could not be read or hashed (not a change)
        self._end = None  # the file's stamp once hashed
        #: seconds callers spent waiting in :meth:`result` for the thread (0 when it was done)
        self.wait_seconds = 0.0
        #: seconds the thread took to read and hash the file (None until it is done)
        self.hash_seconds = None
        #: a reader took it over (:func:`adopt`): the ``with`` block of whoever started it does not cancel it
        self.taken = False
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def _fill(self, view, pos: int) -> int:
        """Read ``len(view)`` bytes at ``pos`` (fewer only at the end of the file)."""
        got = 0
        while got < len(view):
            k = os.preadv(self._fd, [view[got:]], pos + got)
            if k <= 0:
                break
            got += k
        return got

    def _read_block(self, pool, view, pos: int):
        """Futures reading ``view`` from ``pos`` in ``readers`` pieces of whole 64 KiB pages."""
        n = len(view)
        piece = max(64 << 10, (-(-n // self._readers) + 0xFFFF) & ~0xFFFF)
        return [(a, min(n, a + piece), pool.submit(self._fill, view[a:min(n, a + piece)], pos + a))
                for a in range(0, n, piece)]

    def _run(self):
        t0 = time.perf_counter()
        size = self._stamp[0]
        pool = None
        try:
            h = new_hasher()
            block = min(self._block, max(size, 1))
            views = [memoryview(bytearray(block)), memoryview(bytearray(block) if size > block else b"")]
            pool = ThreadPoolExecutor(self._readers, thread_name_prefix=THREAD_NAME + "-read")
            pos, i = 0, 0
            self._go.wait()
            if self._stop.is_set():  # cancelled while paused: nothing read
                return
            pending = self._read_block(pool, views[0][: min(block, size)], 0) if size else []
            while pos < size:
                want = min(block, size - pos)
                for a, b, fut in pending:
                    got = fut.result()
                    if got < b - a:
                        self._error = f"it ended at byte {pos + a + got:,} while being read (it was {size:,} bytes)"
                        return
                nxt = pos + want
                self._go.wait()  # (paused while the graph is parsed)
                if self._stop.is_set():
                    return
                # the next block is read while this one is hashed (blake3 releases the GIL)
                pending = (self._read_block(pool, views[1 - i][: min(block, size - nxt)], nxt) if nxt < size
                           else [])
                h.update(views[i][:want])
                pos, i = nxt, 1 - i
            if os.pread(self._fd, 1, size):
                self._error = f"it grew beyond its {size:,} bytes while being read"
                return
            self._end = self._stamp_now()
            self._hex = labelled(h)
        except OSError as e:
            self._read_error = f"cannot read the file: {e.strerror}"
        except Exception as e:  # noqa: BLE001 - e.g. MemoryError for the buffer: never a silent empty hash
            self._read_error = f"hashing it failed: {type(e).__name__}: {e}"
        finally:
            if pool is not None:
                pool.shutdown(wait=True)  # no reader still holds the descriptor
            os.close(self._fd)
            self.hash_seconds = time.perf_counter() - t0

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

    def result(self) -> str:
        """Wait for the hash and return it as ``"blake3:<hex>"``; raises GraphFormatError if the
        file changed or could not be read."""
        t = time.perf_counter()
        self._go.set()  # a value asked for is never left paused
        self._thread.join()
        self.wait_seconds += time.perf_counter() - t
        what = f"the file's {self.algorithm.upper()} digest"
        if self._stop.is_set() and self._hex is None and self._error is None:
            raise GraphFormatError(f"{what} was cancelled (the read failed)", path=self.path)
        if self._read_error is not None:
            raise GraphFormatError(f"cannot compute {what}: {self._read_error}", path=self.path)
        if self._error is not None:
            raise GraphFormatError(f"the file changed while it was read: {self._error}", path=self.path)
        if self._hex is None:
            raise GraphFormatError(f"{what} was not computed", path=self.path)
        self.check(self._end)  # as it was when the last byte was hashed
        return self._hex

    def hexdigest(self) -> str:
        """The hex digest alone (waits like :meth:`result`)."""
        return split_digest(self.result())[1]

    def pause(self) -> None:
        """Hold the hash after the block it is on (a parse of the same file is starting)."""
        self._go.clear()

    def resume(self) -> None:
        """Let a paused hash go on."""
        self._go.set()

    def cancel(self) -> None:
        """Stop hashing and wait for the thread (it closes its descriptor)."""
        self._stop.set()
        self._go.set()
        self._thread.join()

    def matches(self, path) -> bool:
        """True if this digest is of the file at ``path`` (same real path) as it is now (size,
        modification time, inode as when it started) and was not cancelled."""
        return (not self._stop.is_set() and os.path.realpath(os.fspath(path)) == os.path.realpath(self.path)
                and self._stamp_now() == self._stamp)

    def __enter__(self) -> FileDigest:
        return self

    def __exit__(self, kind, value, tb) -> None:
        """The end of its starter's ``with`` block: cancelled unless a reader took it over
        (:func:`adopt`) and the block ended without an error (the graph holding it then owns it)."""
        if kind is not None or not self.taken:
            self.cancel()

    def __str__(self) -> str:
        return self.result()

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return f"FileDigest({self.path!r}, {state})"


def resolve(value) -> str:
    """A digest value as a string ``"algorithm:hex"``: a :class:`FileDigest` (or anything with
    ``result()``) is joined, a string is returned as it is."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return value.result() if hasattr(value, "result") else str(value)


def adopt(given, path, paused: bool = False) -> FileDigest:
    """The digest a reader of ``path`` uses: ``given`` -- a :class:`FileDigest` handed down by
    whoever opened the input (the ``digest=`` of the readers; ``distgrail index`` starts it before
    its slow imports) -- when it is of that file, unchanged since it started and not cancelled
    (:meth:`FileDigest.matches`); else a new one started here. A ``given`` used is marked
    ``taken``: the reader cancels it if its read fails, its owner's ``with`` block only if the
    block ends in an error. One not used is left to its owner. ``paused``: as for
    :class:`FileDigest` (a parse of the same file comes first)."""
    if given is not None and given.matches(path):
        given.taken = True
        if paused:
            given.pause()
        else:
            given.resume()
        return given
    return FileDigest(path, paused=paused)
