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
        """``a`` on this backend's device. Large host arrays go to a GPU through pinned staging."""
        if self.is_gpu and isinstance(a, np.ndarray) and a.nbytes >= STAGE_MIN_BYTES:
            a = a if dtype is None else a.astype(dtype, copy=False)
            return _staged_upload(self.xp, a)
        return self.xp.asarray(a, dtype=dtype)

    def to_host(self, a) -> np.ndarray:
        if self.is_gpu:
            if getattr(a, "nbytes", 0) >= STAGE_MIN_BYTES:
                return _staged_download(self.xp, a)
            return self.xp.asnumpy(a)
        return np.asarray(a)

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

#: host arrays at least this big move through a pinned staging buffer (pageable copies of
#: large arrays ran at ~1.5 GB/s on the lent H200s; pinned ones at PCIe speed)
STAGE_MIN_BYTES = 32 << 20
_STAGE_CHUNK = 64 << 20


def _pinned(cupy, nbytes):
    mem = cupy.cuda.alloc_pinned_memory(nbytes)
    return np.frombuffer(mem, dtype=np.uint8, count=nbytes), mem


def _staged_upload(cupy, a: np.ndarray):
    src = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    out = cupy.empty(a.shape, dtype=a.dtype)
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


def _staged_download(cupy, a) -> np.ndarray:
    a = cupy.ascontiguousarray(a)
    out = np.empty(a.shape, dtype=a.dtype)
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
