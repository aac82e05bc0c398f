"""The empty-field scan of comma-separated edge lists, compiled (numba, ``nogil``): one pass over
a chunk's bytes, what :func:`distgrail.io.guards.empty_field` computes with NumPy (tests check
both on the same inputs). Imported when a CSV is read; without numba the NumPy code runs."""

from __future__ import annotations

from numba import njit


@njit(nogil=True, cache=True)
def first_empty_field(a):  # pragma: no cover - compiled
    """The offset of the comma that ends an empty first field or starts an empty second field of
    a line of ``a`` (uint8), outside a ``#``/``%`` comment; -1 when none."""
    n = a.size
    i = 0
    while i < n:
        j = i
        while j < n and (a[j] == 32 or a[j] == 9):
            j += 1
        if j < n and a[j] == 44:
            return j
        while j < n and a[j] != 44 and a[j] != 10 and a[j] != 35 and a[j] != 37:
            j += 1
        if j < n and a[j] == 44:
            k = j + 1
            if k >= n or a[k] == 44 or a[k] == 10 or a[k] == 13:
                return j
        while j < n and a[j] != 10:
            j += 1
        i = j + 1
    return -1
