"""Integer types: the smallest that holds a range of ids or counts."""

from __future__ import annotations

import numpy as np

__all__ = ["smallest_uint", "smallest_int"]


def smallest_uint(max_value: int):
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        if max_value <= np.iinfo(dt).max:
            return dt
    raise OverflowError(max_value)  # pragma: no cover


def smallest_int(max_value: int):
    return np.int32 if max_value < 2**31 - 1 else np.int64
