"""The backend seam: NumPy on the CPU, CuPy on a GPU.

Stage modules take a :class:`Backend` and call ``be.xp`` for array code shared by both, and
``be.pick(numpy_twin, cuda_kernel_wrapper)`` where the GPU runs a hand-written kernel from
``kernels/``. Nothing else in the package asks which device it is on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .errors import BackendError

__all__ = ["Backend", "get_backend", "gpu_available", "BACKENDS"]

BACKENDS = ("auto", "cpu", "gpu")


def gpu_available() -> bool:
    """True when CuPy imports *and* a CUDA device is usable (an importable CuPy is not enough)."""
    try:
        import cupy
    except Exception:
        return False
    try:
        return bool(cupy.cuda.is_available())
    except Exception:
        return False


@dataclass
class Backend:
    """An array module plus the device it runs on."""

    name: str  # "cpu" or "gpu"
    xp: object
    device: int | None = None
    _modules: dict = field(default_factory=dict, repr=False)

    @property
    def is_gpu(self) -> bool:
        return self.name == "gpu"

    def asarray(self, a, dtype=None):
        """``a`` on this backend's device. Large host arrays go to a GPU by direct DMA (see
        :func:`_upload_large`)."""
        if self.is_gpu and isinstance(a, np.ndarray) and a.nbytes >= STAGE_MIN_BYTES:
            a = a if dtype is None else a.astype(dtype, copy=False)
            return _upload_large(self.xp, a)
        return self.xp.asarray(a, dtype=dtype)

    def to_host(self, a, out: np.ndarray | None = None) -> np.ndarray:
        """``a`` as a host array, written into ``out`` when given (C-contiguous, same shape and
        dtype; e.g. a slice of an MPI shared-memory window)."""
        if out is not None:
            if not (isinstance(out, np.ndarray) and out.flags.c_contiguous and out.shape == tuple(a.shape)
                    and out.dtype == a.dtype):
                raise BackendError(f"to_host: out must be a C-contiguous {a.dtype} array of shape "
                                   f"{tuple(a.shape)}, got {getattr(out, 'dtype', type(out))} {getattr(out, 'shape', '')}")
        if self.is_gpu:
            if getattr(a, "nbytes", 0) >= STAGE_MIN_BYTES:
                return _download_large(self.xp, a, out)
            if out is None:
                return self.xp.asnumpy(a)
            self.xp.ascontiguousarray(a).get(out=out)
            return out
        if out is None:
            return np.asarray(a)
        np.copyto(out, a)
        return out

    def prefault(self, a: np.ndarray):
        """Start touching every page of host array ``a`` in a background thread, so that a later
        ``to_host(..., out=a)`` does not pay the page faults of fresh memory (they cost as much
        as the copy itself). Returns an object with ``join()``. On the CPU it does nothing: the
        CPU is busy with the work itself there."""
        if not (self.is_gpu and a.nbytes >= STAGE_MIN_BYTES):
            return _NoThread()
        import threading

        flat = a.reshape(-1).view(np.uint8)
        t = threading.Thread(target=_touch_pages, args=(flat,), name="distgrail-prefault", daemon=True)
        t.start()
        return t

    def pick(self, numpy_twin, cuda_version):
        """Return the implementation of a stage for this backend."""
        return cuda_version if self.is_gpu else numpy_twin

    def synchronize(self):
        if self.is_gpu:
            self.xp.cuda.get_current_stream().synchronize()

    def kernels(self, name: str):
        """The compiled ``kernels/<name>.cu`` module for this device (GPU only, cached)."""
        from .kernels import load_module

        if name not in self._modules:
            self._modules[name] = load_module(name, self.device)
        return self._modules[name]


_CACHE: dict = {}


class _NoThread:
    def join(self):
        pass


def _touch_pages(flat: np.ndarray) -> None:
    flat[::_PAGE] = 0  # one write per page faults it in (NumPy drops the GIL for this loop)

#: host arrays at least this big move by direct DMA from/to the page-locked array itself
#: (pageable copies of large arrays ran at ~1.5-9 GB/s on the lent H200s, DMA at ~55 GB/s)
STAGE_MIN_BYTES = 32 << 20
_STAGE_CHUNK = 64 << 20
_PAGE = 4096


class _Locked:
    """Page-lock the host pages under ``a`` (``cudaHostRegister``) for the ``with`` block.

    Registering the pages an array already has costs ~0.04 ms/MB (measured on an H200 host,
    600 MB in ~24 ms with the unregister), against ~0.5 ms/MB for a fresh pinned allocation.
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


def _upload_large(cupy, a: np.ndarray):
    """Host -> device: DMA straight from ``a``'s page-locked pages; through pinned staging
    buffers when they cannot be locked."""
    a = np.ascontiguousarray(a)
    out = cupy.empty(a.shape, dtype=a.dtype)
    if not _dma(cupy, a, out.data.ptr, a.ctypes.data, cupy.cuda.runtime.memcpyHostToDevice):
        _staged_upload(cupy, a, out)
    return out


def _download_large(cupy, a, out=None) -> np.ndarray:
    """Device -> host into ``out`` (a new array when None), by DMA into its locked pages, or
    through a pinned staging buffer when they cannot be locked."""
    a = cupy.ascontiguousarray(a)
    out = np.empty(a.shape, dtype=a.dtype) if out is None else out
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


def get_backend(name: str = "auto", device: int | None = None) -> Backend:
    """Resolve ``"auto" | "cpu" | "gpu"`` to a :class:`Backend`.

    ``auto`` takes the GPU when CuPy is importable and ``cupy.cuda.is_available()``; ``gpu``
    raises :class:`BackendError` when it is not. ``DISTGRAIL_BACKEND`` overrides ``auto``.

    Examples
    --------
    >>> get_backend("cpu").name
    'cpu'
    """
    if isinstance(name, Backend):
        return name
    if name not in BACKENDS:
        raise BackendError(f"backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    if name == "auto":
        name = os.environ.get("DISTGRAIL_BACKEND", "auto")
        if name not in BACKENDS:
            raise BackendError(f"DISTGRAIL_BACKEND must be one of {', '.join(BACKENDS)}, got {name!r}")
        if name == "auto":
            name = "gpu" if gpu_available() else "cpu"
    key = (name, device)
    if key in _CACHE:
        return _CACHE[key]
    if name == "cpu":
        be = Backend("cpu", np)
    else:
        if not gpu_available():
            raise BackendError("backend 'gpu' needs CuPy and a usable CUDA device; none found "
                               "(install distgrail[gpu] on a GPU machine, or use --backend cpu)")
        import cupy

        dev = int(device) if device is not None else cupy.cuda.Device().id
        cupy.cuda.Device(dev).use()
        be = Backend("gpu", cupy, device=dev)
    _CACHE[key] = be
    return be
