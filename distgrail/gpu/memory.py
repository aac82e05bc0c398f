"""GPU memory: checking an estimate against what is free before a launcher allocates, and turning
CuPy's out-of-memory error into a :class:`~distgrail.errors.BackendError` that says what to do."""

from __future__ import annotations

import functools

import numpy as np

from ..errors import BackendError
from .sweep import cupy

__all__ = ["ensure_fits", "oom_guard", "check_ids"]


def ensure_fits(nbytes: int, what: str) -> None:
    """Raise :class:`BackendError` with the estimate if ``nbytes`` cannot be allocated now."""
    cp = cupy()
    free, total = cp.cuda.Device().mem_info
    avail = free + cp.get_default_memory_pool().free_bytes()
    if nbytes > avail:
        raise BackendError(f"{what} needs about {nbytes / 2**30:.2f} GiB of GPU memory, but only "
                           f"{avail / 2**30:.2f} GiB of {total / 2**30:.2f} GiB are free on GPU "
                           f"{cp.cuda.Device().id}; use --backend cpu or a larger GPU")


def oom_guard(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        cp = cupy()
        try:
            return fn(*args, **kwargs)
        except cp.cuda.memory.OutOfMemoryError as e:
            raise BackendError(f"{fn.__name__}: GPU out of memory ({e}); use --backend cpu or a larger GPU") from None

    return wrapper


def check_ids(indices, what):
    if indices.dtype != np.int32:
        raise BackendError(f"the GPU backend needs int32 vertex ids ({what} has dtype {indices.dtype}); "
                           "graphs of 2^31 or more components must use --backend cpu")
