"""Integer types: the smallest that holds a range of ids or counts."""

from __future__ import annotations

import os

import numpy as np

from . import settings

__all__ = ["smallest_uint", "smallest_int", "physical_memory", "max_vertices", "size_problem",
           "BYTES_PER_VERTEX", "BYTES_PER_EDGE"]


def smallest_uint(max_value: int):
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        if max_value <= np.iinfo(dt).max:
            return dt
    raise OverflowError(max_value)  # pragma: no cover


def smallest_int(max_value: int):
    return np.int32 if max_value < 2**31 - 1 else np.int64


#: a lower bound of the memory an index build needs per vertex (CSR and reverse CSR offsets,
#: component, level, forest, post-order rank, d=5 intervals: about 80 bytes) and per edge
BYTES_PER_VERTEX = 64
BYTES_PER_EDGE = 16


def physical_memory() -> int:
    """Bytes of physical memory of this machine (DISTGRAIL_MEMORY overrides it, for tests)."""
    if (given := settings.get("DISTGRAIL_MEMORY")) is not None:
        return given
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 1 << 40


def max_vertices() -> int:
    """The most vertices this machine can index (a graph with more cannot fit its memory)."""
    return max(1, physical_memory() // BYTES_PER_VERTEX)


def size_problem(n: int, m: int = 0) -> str | None:
    """None when ``n`` vertices and ``m`` edges may fit this machine, else why not."""
    need = n * BYTES_PER_VERTEX + m * BYTES_PER_EDGE
    have = physical_memory()
    if need <= have:
        return None
    if max(n, m) >= 1 << 63:  # (past int64: no graph; and its bytes past a float)
        return f"{'vertices' if n >= 1 << 63 else 'edges'} past 2^63 (at most {max_vertices():,} vertices here)"
    return (f"{n:,} vertices{f' and {m:,} edges' if m else ''} need at least {need / 2**30:,.1f} GiB, this "
            f"machine has {have / 2**30:,.1f} GiB (at most {max_vertices():,} vertices)")
