"""Whether an index's components are numbered by level, and the file check of its levels.

Every build numbers the components by level (``dag/level`` non-decreasing; the compiled CPU
search and prefilter then test levels by comparing ids). An update that keeps the component ids
(:data:`~distgrail.indexfile.layout.BY_LEVEL` = 0 in the file) raises levels in place, so they are
no longer sorted by id, and merged components leave dead rows (no vertex maps to them, no DAG edge
reaches them, their DAG rows are empty). Such a file is as valid as a sorted one: its levels are
checked for what the queries need, values in ``0 .. n_levels - 1`` with some component at the top
level and every DAG edge going up the levels (that check stays in
:func:`~distgrail.indexfile.read.check_index`), not for their order.
"""

from __future__ import annotations

import numpy as np

from ..errors import IndexFormatError
from .layout import BY_LEVEL

__all__ = ["numbered_by_level", "check_level_order"]


def numbered_by_level(path, meta: dict) -> bool:
    """Whether ``meta`` (an index's root attributes) says its components are numbered by level:
    :data:`~distgrail.indexfile.layout.BY_LEVEL` absent or 1; 0 says not; any other value is a
    damaged index (IndexFormatError naming the file)."""
    v = meta.get(BY_LEVEL, 1)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or int(v) not in (0, 1):
        raise IndexFormatError(f"{path}: damaged index: attribute {BY_LEVEL!r} must be 0 or 1, got {v!r}")
    return bool(v)


def check_level_order(path, meta: dict, level, L: int, C: int, bad, within, non_decreasing):
    """``level`` (``dag/level``) checked, and returned: values in ``0 .. L - 1``
    (``within(name, array, lo, hi)``, the reader's range test); numbered by level
    (:func:`numbered_by_level`), non-decreasing up to ``L - 1``; else some component at level
    ``L - 1``. ``bad(name, what)`` raises; ``non_decreasing(array)`` is the reader's parallel test."""
    within("dag/level", level, 0, max(L - 1, 0))
    if not C:
        return level
    if numbered_by_level(path, meta):
        if not non_decreasing(level) or int(level[-1]) != L - 1:
            bad("dag/level", f"is not sorted up to n_levels - 1 = {L - 1}")
    elif int(level.max()) != L - 1:  # (NumPy's or CuPy's)
        bad("dag/level", f"has no component at level n_levels - 1 = {L - 1}")
    return level
