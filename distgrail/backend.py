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
        return self.xp.asarray(a, dtype=dtype)

    def to_host(self, a) -> np.ndarray:
        if self.is_gpu:
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
