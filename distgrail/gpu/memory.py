"""GPU memory and the launchers' device: checking an estimate against what is free before a
launcher allocates, running a launcher on its backend's device, and turning CuPy's
out-of-memory error into a :class:`~distgrail.errors.BackendError` that says what to do."""

from __future__ import annotations

import functools

import numpy as np

from ..errors import BackendError
from .sweep import cupy

__all__ = ["ensure_fits", "launcher", "oom_guard", "check_ids"]


def ensure_fits(nbytes: int, what: str) -> None:
    """Raise :class:`BackendError` with the estimate if ``nbytes`` cannot be allocated now on the
    current device (free device memory plus what CuPy's pool holds unused)."""
    cp = cupy()
    dev = cp.cuda.Device()
    free, total = dev.mem_info
    avail = free + cp.get_default_memory_pool().free_bytes()
    if nbytes > avail:
        raise BackendError(f"{what} needs about {nbytes / 2**30:.2f} GiB of GPU memory, but only "
                           f"{avail / 2**30:.2f} GiB of {total / 2**30:.2f} GiB are free on GPU "
                           f"{dev.id}; use --backend cpu or a larger GPU")


def _oom_message(name, e):
    return f"{name}: GPU out of memory ({e}); use --backend cpu or a larger GPU"


def oom_guard(fn):
    """CuPy's out-of-memory error in ``fn`` becomes a :class:`BackendError`."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        cp = cupy()
        try:
            return fn(*args, **kwargs)
        except cp.cuda.memory.OutOfMemoryError as e:
            raise BackendError(_oom_message(fn.__name__, e)) from None

    return wrapper


def launcher(fn):
    """Decorator of a stage's CUDA launcher ``fn(be, ...)``: it runs on ``be.device`` (not on
    whatever device is current), and an out-of-memory error becomes a :class:`BackendError`."""
    @functools.wraps(fn)
    def wrapper(be, *args, **kwargs):
        cp = cupy()
        with cp.cuda.Device(be.device):
            try:
                return fn(be, *args, **kwargs)
            except cp.cuda.memory.OutOfMemoryError as e:
                raise BackendError(_oom_message(fn.__name__, e)) from None

    return wrapper


def check_ids(indices, what):
    if indices.dtype != np.int32:
        raise BackendError(f"the GPU backend needs int32 vertex ids ({what} has dtype {indices.dtype}); "
                           "graphs of 2^31 or more components must use --backend cpu")
