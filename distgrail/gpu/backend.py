"""The backend seam: NumPy on the CPU, CuPy on a GPU.

The device is chosen once (:func:`get_backend`) and the chosen :class:`Backend` is passed down.
Each stage function dispatches in one place: its NumPy twin on the CPU, its CUDA launcher
``<stage>_cuda(be, ...)`` on a GPU, which runs on ``be.device`` (``distgrail.gpu.memory.launcher``),
not on whatever device is current. Host↔device copies go through :meth:`Backend.asarray` and
:meth:`Backend.to_host`, also on ``be.device``.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import numpy as np

from .. import settings
from ..errors import BackendError
from .dma import STAGE_MIN_BYTES, NoThread, device_for_good, download_large, touch_pages, upload_large

__all__ = ["Backend", "get_backend", "gpu_available", "ready_beside", "BACKENDS"]

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


def ready_beside(be) -> object:
    """Make GPU backend ``be``'s CUDA context and put a :class:`~distgrail.gpu.dma.Stager`'s
    page-locked buffers into CuPy's pinned pool on a thread of its own, while the caller reads an
    index: the labels' upload then finds both. Returns what to ``join()`` before the upload
    (nothing is done on the CPU). CuPy is imported by the caller (:func:`get_backend` did): an
    import on the thread would hold the GIL the read's threads need. A failure here is left to
    the upload to meet and report."""
    if not be.is_gpu:
        return NoThread()
    import threading

    from .dma import Stager

    cp = be.xp

    def run():
        try:
            device_for_good(cp, be.device)  # (a thread of its own)
            cp.cuda.runtime.free(0)  # (makes the context)
            Stager.reserve(cp)
        except Exception:  # noqa: BLE001 - an optimisation only
            pass

    t = threading.Thread(target=run, name="distgrail-gpu-ready", daemon=True)
    t.start()
    return t


@dataclass(frozen=True)
class Backend:
    """An array module plus the device it runs on (immutable: one value passed everywhere)."""

    name: str  # "cpu" or "gpu"
    xp: object
    device: int | None = None

    @property
    def is_gpu(self) -> bool:
        return self.name == "gpu"

    def on_device(self):
        """Context manager: this backend's device is current inside (nothing on the CPU)."""
        if self.is_gpu:
            return self.xp.cuda.Device(self.device)
        return contextlib.nullcontext()

    def asarray(self, a, dtype=None):
        """``a`` on this backend's device. Large host arrays go to a GPU by direct DMA (see
        :func:`upload_large`)."""
        if not self.is_gpu:
            return np.asarray(a, dtype=dtype)
        with self.on_device():
            if isinstance(a, np.ndarray) and a.nbytes >= STAGE_MIN_BYTES:
                a = a if dtype is None else a.astype(dtype, copy=False)
                return upload_large(self.xp, a)
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
            with self.on_device():
                if getattr(a, "nbytes", 0) >= STAGE_MIN_BYTES:
                    return download_large(self.xp, a, out)
                if out is None:
                    return self.xp.asnumpy(a)
                self.xp.ascontiguousarray(a).get(out=out)
                return out
        if out is None:
            return np.asarray(a)
        np.copyto(out, a)
        return out

    def land(self, a, landing=None) -> np.ndarray:
        """``to_host(a)``, into ``landing``'s array (``(host array, thread touching its pages)``,
        as :meth:`prefault` starts it) once that thread is done, where shape and dtype match."""
        if landing is None or tuple(landing[0].shape) != tuple(a.shape) or landing[0].dtype != a.dtype:
            return self.to_host(a)
        landing[1].join()
        return self.to_host(a, out=landing[0])

    def prefault(self, a: np.ndarray):
        """Start touching every page of host array ``a`` in a background thread, so that a later
        ``to_host(..., out=a)`` does not pay the page faults of fresh memory (they cost as much
        as the copy itself). Returns an object with ``join()``. On the CPU it does nothing: the
        CPU is busy with the work itself there."""
        if not (self.is_gpu and a.nbytes >= STAGE_MIN_BYTES):
            return NoThread()
        import threading

        flat = a.reshape(-1).view(np.uint8)
        t = threading.Thread(target=touch_pages, args=(flat,), name="distgrail-prefault", daemon=True)
        t.start()
        return t

    def pick(self, numpy_twin, cuda_launcher):
        """The implementation of a stage for this backend, ready to call with the stage's arguments:
        ``numpy_twin`` on the CPU, ``cuda_launcher`` with this backend bound as its first argument
        on a GPU (every launcher takes ``be`` first and runs on ``be.device``). The one way a stage
        chooses between its twin and its kernels."""
        return functools.partial(cuda_launcher, self) if self.is_gpu else numpy_twin

    def side_stream(self):
        """A context manager for another thread, made here and entered there: this backend's device
        current and, on a GPU, a stream of its own that starts after the work this thread has
        queued so far (its copies then run beside this thread's later kernels, not between them)."""
        if not self.is_gpu:
            return contextlib.nullcontext()
        with self.on_device():
            device = self.xp.cuda.Device().id
            stream = self.xp.cuda.Stream(non_blocking=True)
            stream.wait_event(self.xp.cuda.get_current_stream().record())
        return _on_stream(self.xp, device, stream)

    def synchronize(self):
        if self.is_gpu:
            with self.on_device():
                self.xp.cuda.get_current_stream().synchronize()


@contextlib.contextmanager
def _on_stream(cupy, device: int, stream):
    """On the thread entering it: ``device`` made current for good (:func:`device_for_good`),
    then ``stream``."""
    device_for_good(cupy, device)
    with stream:
        yield


_CACHE: dict = {}


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
        name = settings.get("DISTGRAIL_BACKEND")  # (a BackendError naming it when it is not one of BACKENDS)
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

        # the device is the backend's (every launcher runs on be.device); the process-wide current
        # device is not changed here (an MPI rank's binding, distgrail.mpi.binding, sets it once)
        dev = int(device) if device is not None else cupy.cuda.Device().id
        be = Backend("gpu", cupy, device=dev)
        from .memory import gpu_memory_limit

        cap = gpu_memory_limit()  # DISTGRAIL_GPU_MEMORY_LIMIT: every CuPy allocation of this process
        if cap is not None:
            with cupy.cuda.Device(dev):
                cupy.get_default_memory_pool().set_limit(size=cap)
    _CACHE[key] = be
    return be
