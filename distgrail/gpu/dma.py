"""Large host↔device copies by direct DMA from the host array's own page-locked pages.

Pages are locked with ``cudaHostRegister`` for the copy (far cheaper than a fresh pinned
allocation: docs/benchmarks.md); when they cannot be locked, the copy goes through pinned staging
buffers. :func:`touch_pages` pre-faults fresh host memory while the GPU works.
"""

from __future__ import annotations

import numpy as np

from ..arrays import populate

__all__ = ["STAGE_MIN_BYTES", "upload_large", "download_large", "touch_pages", "lock_pages", "NoThread"]


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
