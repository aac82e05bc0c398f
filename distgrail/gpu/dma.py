"""Large host↔device copies by direct DMA from the host array's own page-locked pages.

Pages are locked with ``cudaHostRegister`` for the copy (far cheaper than a fresh pinned
allocation: docs/benchmarks.md); when they cannot be locked, the copy goes through pinned staging
buffers. :func:`touch_pages` pre-faults fresh host memory while the GPU works. A
:class:`Stager` sends many large arrays at once through page-locked buffers over host threads
(an index's query state: locking each array's pages runs on one thread in the driver).
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

from .. import cores
from ..arrays import populate

__all__ = ["STAGE_MIN_BYTES", "upload_large", "download_large", "touch_pages", "lock_pages", "NoThread", "Arrivals",
           "Stager", "STAGER_THREADS", "STAGER_PIECE", "device_for_good"]


class NoThread:
    def join(self):
        pass


def touch_pages(flat: np.ndarray) -> None:
    flat[::_PAGE] = 0  # one write per page faults it in (NumPy drops the GIL for this loop)

#: host arrays at least this big move by direct DMA from/to the page-locked array itself
#: (pageable copies of large arrays run several times slower than DMA: docs/benchmarks.md)
STAGE_MIN_BYTES = 32 << 20
_STAGE_CHUNK = 64 << 20
_PAGE = 4096


class _Locked:
    """Page-lock the host pages under ``a`` (``cudaHostRegister``) for the ``with`` block.

    Registering the pages an array already has costs a fraction of a fresh pinned allocation
    (docs/benchmarks.md).
    Raises if the pages cannot be locked (e.g. some of them are registered already).
    """

    def __init__(self, cupy, a: np.ndarray):
        ptr = a.ctypes.data
        self.runtime = cupy.cuda.runtime
        self.base = ptr & ~(_PAGE - 1)
        self.size = ((ptr + a.nbytes + _PAGE - 1) & ~(_PAGE - 1)) - self.base

    def __enter__(self):
        self.runtime.hostRegister(self.base, self.size, 0)
        return self

    def __exit__(self, *exc):
        self.runtime.hostUnregister(self.base)


def lock_pages(cupy, a: np.ndarray):
    """Page-lock the pages under the host array ``a`` (``cudaHostRegister``; populate a fresh
    array first, :func:`~distgrail.arrays.populate`, or the driver maps its pages one at a time)
    until the returned function is called, which must happen before ``a`` goes. Raises when they
    cannot be locked."""
    locked = _Locked(cupy, a)
    locked.__enter__()
    return locked.__exit__


def _dma(cupy, host: np.ndarray, dst_ptr, src_ptr, kind) -> bool:
    """One ``cudaMemcpy`` of ``host.nbytes`` bytes with ``host``'s pages locked for it; False
    (nothing copied) when they cannot be locked."""
    locked = _Locked(cupy, host)
    try:
        locked.__enter__()
    except Exception:
        return False
    try:
        stream = cupy.cuda.get_current_stream()
        cupy.cuda.runtime.memcpyAsync(dst_ptr, src_ptr, host.nbytes, kind, stream.ptr)
        stream.synchronize()
    finally:
        locked.__exit__()
    return True


def upload_large(cupy, a: np.ndarray):
    """Host -> device: DMA straight from ``a``'s page-locked pages; through pinned staging
    buffers when they cannot be locked."""
    a = np.ascontiguousarray(a)
    out = cupy.empty(a.shape, dtype=a.dtype)
    if not _dma(cupy, a, out.data.ptr, a.ctypes.data, cupy.cuda.runtime.memcpyHostToDevice):
        _staged_upload(cupy, a, out)
    return out


def download_large(cupy, a, out=None) -> np.ndarray:
    """Device -> host into ``out`` (a new array when None), by DMA into its locked pages, or
    through a pinned staging buffer when they cannot be locked."""
    a = cupy.ascontiguousarray(a)
    if out is None:
        out = np.empty(a.shape, dtype=a.dtype)
        populate(out)  # (mapped over the host threads first: locking fresh pages maps them on one thread)
    if not _dma(cupy, out, out.ctypes.data, a.data.ptr, cupy.cuda.runtime.memcpyDeviceToHost):
        _staged_download(cupy, a, out)
    return out


def device_for_good(cupy, device: int) -> None:
    """Make ``device`` current for good on the calling thread, one of distgrail's own (a thread
    of its own, a pool's initializer): leaving a ``Device`` context on a fresh thread would make
    device 0 current, creating a context on a GPU another rank may own."""
    cupy.cuda.Device(device).use()


#: host threads of a :class:`Stager` (at most; no more than the cores this process may use) and
#: the bytes of each of a thread's two page-locked buffers: 8 threads copy through such buffers
#: at twice the rate of a copy from pages locked with ``cudaHostRegister``, which the driver
#: does on one thread (docs/benchmarks.md); their 256 MiB is taken once, from CuPy's pinned pool
STAGER_THREADS = 8
STAGER_PIECE = 16 << 20


def _stager_threads(threads: int | None) -> int:
    """A Stager's threads: ``threads``, else :data:`STAGER_THREADS` or the usable cores if fewer."""
    return max(1, min(STAGER_THREADS, cores.usable()) if threads is None else int(threads))


class Stager:
    """Host -> device copies of many arrays at once: each array cut into pieces of ``piece``
    bytes, dealt round-robin to ``threads`` host threads, each of which copies its pieces into
    one of two page-locked buffers of its own (NumPy's copy drops the GIL) and sends it on a
    stream of its own while it fills the other. ``upload(arrays)`` returns the device arrays
    (same shapes and types; an array already on the device is passed through) once every piece
    has landed; :meth:`fill` does the same with each piece written into the buffer by a function
    of the caller's (an index's bytes read from its file straight into it). The threads' streams start after the work queued on the caller's stream so far
    (the new arrays may reuse memory that work still reads). Made on ``device``; a ``with``
    block or :meth:`close` ends the threads (the buffers go back to CuPy's pinned pool). One
    upload at a time: the threads' buffers are the Stager's."""

    def __init__(self, cupy, device: int, threads: int | None = None, piece: int = STAGER_PIECE):
        self.cp, self.device = cupy, int(device)
        self.threads = _stager_threads(threads)
        self.piece = max(1, int(piece))
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="distgrail-stage",
                                        initializer=device_for_good, initargs=(cupy, self.device))
        self._lanes = [None] * self.threads  # per thread: (buffers, stream, events), made there

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._lanes = [None] * self.threads

    @staticmethod
    def reserve(cupy, threads: int | None = None, piece: int = STAGER_PIECE) -> None:
        """Take the page-locked buffers of a Stager of ``threads`` threads into CuPy's pinned pool
        now, where the Stager finds them (:func:`~distgrail.gpu.backend.ready_beside`)."""
        held = [cupy.cuda.alloc_pinned_memory(int(piece)) for _ in range(2 * _stager_threads(threads))]
        del held  # (back to the pool, kept there)

    def upload(self, arrays) -> list:
        cp = self.cp
        out, pieces = [], []
        with cp.cuda.Device(self.device):
            for h in arrays:
                if not isinstance(h, np.ndarray):
                    out.append(cp.asarray(h))
                    continue
                h = np.require(h, dtype=h.dtype.newbyteorder("="), requirements="C")  # (bytes sent as they lie)
                d = cp.empty(h.shape, dtype=h.dtype)
                out.append(d)
                if h.nbytes:
                    src = h.reshape(-1).view(np.uint8)
                    pieces += [(_copier(src, lo, hi), d.data.ptr, lo, hi)
                               for lo in range(0, src.size, self.piece) for hi in [min(src.size, lo + self.piece)]]
            after = cp.cuda.get_current_stream().record() if pieces else None
        self._run(pieces, after)
        return out

    def fill(self, targets) -> list:
        """Device arrays of ``targets`` = ``[(shape, dtype, pieces), ...]``, each array's bytes
        ``lo .. hi-1`` written by ``write(view)`` for each ``(lo, hi, write)`` of its ``pieces``
        (``view``: ``hi - lo`` page-locked bytes of a thread's buffer, sent once ``write``
        returns; pieces of at most the Stager's ``piece`` bytes, covering the array): an index's
        datasets read from their file straight into the buffers
        (:func:`distgrail.indexfile.read_device.upload_datasets`). The first error a ``write``
        raises is raised here once every thread has stopped."""
        cp = self.cp
        out, pieces = [], []
        with cp.cuda.Device(self.device):
            for shape, dtype, parts in targets:
                d = cp.empty(shape, dtype=dtype)
                out.append(d)
                for lo, hi, write in parts:
                    if not 0 <= hi - lo <= self.piece:
                        raise ValueError(f"Stager.fill: piece {lo}..{hi} is not 0..{self.piece} bytes")
                    pieces.append((write, d.data.ptr, lo, hi))
            after = cp.cuda.get_current_stream().record() if pieces else None
        self._run(pieces, after)
        return out

    def _run(self, pieces, after) -> None:
        """``pieces`` (``(write, device pointer, lo, hi)``) dealt round-robin to the threads."""
        if not pieces:
            return
        lanes = min(self.threads, len(pieces))
        sent = [self._pool.submit(self._send, k, pieces[k::lanes], after) for k in range(lanes)]
        wait(sent)  # every thread done before any failure is raised: nothing writes into `out` after
        for f in sent:
            f.result()

    def _send(self, k: int, pieces, after) -> None:
        """Thread ``k`` (its device current for good: the pool's initializer): fill ``pieces``
        into its two buffers in turn and send each, its stream waiting for ``after``; its copies
        finished when it returns or raises."""
        cp = self.cp
        if self._lanes[k] is None:
            mems = [cp.cuda.alloc_pinned_memory(self.piece) for _ in range(2)]
            bufs = [np.frombuffer(m, dtype=np.uint8, count=self.piece) for m in mems]
            self._lanes[k] = (bufs, mems, cp.cuda.Stream(non_blocking=True), [None, None])
        bufs, _mems, stream, done = self._lanes[k]
        stream.wait_event(after)
        try:
            for j, (write, dst, lo, hi) in enumerate(pieces):
                b = j % 2
                if done[b] is not None:
                    done[b].synchronize()  # the copy out of this buffer has finished
                write(bufs[b][:hi - lo])
                cp.cuda.runtime.memcpyAsync(dst + lo, bufs[b].ctypes.data, hi - lo,
                                            cp.cuda.runtime.memcpyHostToDevice, stream.ptr)
                done[b] = stream.record()
        finally:
            stream.synchronize()


def _copier(src: np.ndarray, lo: int, hi: int):
    """A piece's ``write``: bytes ``lo .. hi-1`` of ``src`` copied into the buffer (NumPy's copy
    drops the GIL)."""
    return lambda view: np.copyto(view, src[lo:hi])


def _pinned(cupy, nbytes):
    mem = cupy.cuda.alloc_pinned_memory(nbytes)
    return np.frombuffer(mem, dtype=np.uint8, count=nbytes), mem


def _staged_upload(cupy, a: np.ndarray, out):
    src = a.reshape(-1).view(np.uint8)
    dst = out.reshape(-1).view(cupy.uint8)
    bufs = [_pinned(cupy, min(_STAGE_CHUNK, src.size)) for _ in range(2)]
    stream = cupy.cuda.Stream(non_blocking=True)
    done = [None, None]
    for k, lo in enumerate(range(0, src.size, _STAGE_CHUNK)):
        hi = min(src.size, lo + _STAGE_CHUNK)
        buf, _ = bufs[k % 2]
        if done[k % 2] is not None:
            done[k % 2].synchronize()  # the copy out of this buffer has finished
        np.copyto(buf[: hi - lo], src[lo:hi])
        dst[lo:hi].set(buf[: hi - lo], stream=stream)
        done[k % 2] = stream.record()
    stream.synchronize()
    return out


def _staged_download(cupy, a, out) -> np.ndarray:
    dst = out.reshape(-1).view(np.uint8)
    src = a.reshape(-1).view(cupy.uint8)
    buf, _mem = _pinned(cupy, min(_STAGE_CHUNK, src.size))
    cupy.cuda.get_current_stream().synchronize()
    for lo in range(0, src.size, _STAGE_CHUNK):
        hi = min(src.size, lo + _STAGE_CHUNK)
        src[lo:hi].get(out=buf[: hi - lo])
        np.copyto(dst[lo:hi], buf[: hi - lo])
    return out


class Arrivals:
    """Device arrays coming down one after another on a thread of their own, into host arrays
    made before: ``items`` = ``[(name, device array, host array), ...]`` in the order a writer
    reads them, copied by ``to_host(device, out=host)`` (a backend's). A writer then starts on the
    first while the next comes down (``distgrail update``: the index's write beside the swept
    arrays' download). :meth:`wait` returns once one has landed; :meth:`join` once the thread is
    done. ``context``: entered by the thread for its copies, made in the caller's thread (a
    backend's ``side_stream()``: its device current for good and a stream of its own that starts
    after the work queued there so far). ``make(device array)``: makes the host array of an item
    given None, on the thread (a served update's arrays come down after its reply: their fresh
    pages are mapped there too); ``into``: a dict whose entry of each name is set to its host array
    once it has landed (the entries exist before: the thread replaces values, adds no key)."""

    def __init__(self, to_host, items, context=None, make=None, into=None):
        self._items = list(items)
        self._to_host, self._make, self._into = to_host, make, into
        self._order = {name: i for i, (name, _, _) in enumerate(self._items)}
        self._landed = 0  # arrays landed, in order
        self._moved = threading.Condition()
        self._retry = threading.Lock()  # (one caller of finish() copies again at a time)
        self._error = None
        self._cancel = False
        self._over = False
        self.seconds = 0.0  #: the thread's time copying, once joined
        self._thread = threading.Thread(target=self._run, args=(context,), name="distgrail-arrivals",
                                        daemon=True)
        self._thread.start()

    def _run(self, context) -> None:
        t = time.perf_counter()
        try:
            with context if context is not None else contextlib.nullcontext():
                for i in range(len(self._items)):
                    if self._cancel:
                        break
                    self._land(i)
        except BaseException as e:  # noqa: BLE001 - raised by wait/join in the caller's thread
            self._error = e
        finally:
            self.seconds = time.perf_counter() - t
            with self._moved:
                self._over = True
                self._moved.notify_all()

    def _land(self, i: int) -> None:
        """Copy item ``i`` down (its host array made first where it has none), let its device
        array go, set it into ``into`` and count it landed."""
        name, dev, host = self._items[i]
        if host is None:
            host = self._make(dev)
        self._to_host(dev, out=host)
        self._items[i] = (name, None, host)  # (the device array let go once it has landed)
        del dev
        if self._into is not None:
            self._into[name] = host
        with self._moved:
            self._landed += 1
            self._moved.notify_all()

    def finish(self) -> None:
        """Wait for the thread; where its download failed, copy the arrays that had not landed
        again, here (their device arrays are kept until they land): each call retries them, and
        raises where that fails too (a served update's index: a failed copy, e.g. no host memory
        for a moment, is not the end of its host arrays)."""
        self._thread.join()
        with self._retry:  # (two readers at once: the second finds the first's copies landed)
            if self._error is not None and not self._cancel:
                for i in range(self._landed, len(self._items)):
                    self._land(i)  # (raises again: the caller's read fails, the next one retries)
                self._error = None
            self.join()

    def wait(self, name) -> None:
        """Return once array ``name`` has landed (at once for a name not among them); raise the
        download's error when it failed first."""
        i = self._order.get(name)
        if i is None:
            return
        with self._moved:
            self._moved.wait_for(lambda: self._landed > i or self._over)
            if self._landed > i:
                return
        if self._error is not None:
            raise self._error
        from ..errors import BackendError

        raise BackendError(f"{name}: its download from the device was cancelled")

    def join(self, cancel: bool = False) -> None:
        """Wait for the thread (``cancel``: it copies no array after the current one); raise the
        download's error unless cancelled. The device arrays are released."""
        if cancel:
            self._cancel = True
        self._thread.join()
        self._items = [(n, None, None) for n, _, _ in self._items]
        if self._error is not None and not cancel:
            raise self._error
