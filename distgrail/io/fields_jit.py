"""The scans of comma- and tab-separated edge lists, compiled (numba, ``nogil``): one pass over a
chunk's bytes each, what :func:`distgrail.io.guards.empty_field`, :func:`~distgrail.io.guards.comma_width`
and :func:`~distgrail.io.guards.empty_tab_field` compute with NumPy or line by line (tests check
both on the same inputs); and the fast path's numbers of a large file (:func:`numbers_at`, what
``np.fromstring`` reads). Imported when a large chunk, a large file or one of many lines to walk
is read; without numba the NumPy code runs. Compiled by :func:`distgrail.jit.njit` (uncached where
numba cannot cache)."""

from __future__ import annotations

import numpy as np

from ..jit import njit


@njit(nogil=True)
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


@njit(nogil=True)
def comma_width(a, fields):  # pragma: no cover - compiled
    """``(bad, fields, first)`` of the lines of ``a`` (uint8) as
    :func:`distgrail.io.guards.comma_width_numpy` finds them: a line is an edge line when a byte
    other than a blank or a comma comes before its first ``#``/``%``; its fields are its commas + 1
    outside double-quoted fields, up to the first ``#``/``%`` outside them; it is of integers only
    when each of those fields is digits with blanks around them (a quote, any other byte, an empty
    field: not). ``fields``: 0, the first edge line's count when it is of integers only, else -1
    (then, or given -1, nothing is checked); a later line of integers only of another count is bad."""
    if fields < 0:
        return -1, fields, -1
    n = a.size
    i = 0
    first = -1
    while i < n:
        s = i
        count = 1
        live = False
        mark = False  # a '#' or '%' seen (the line's fields end there for the token readers)
        counting = True  # no '#' or '%' outside a quoted field yet
        quoted = False
        start = True
        integer = True
        state = 0  # in the current field: 0 nothing yet, 1 digits, 2 blanks after digits
        while i < n and a[i] != 10:
            c = a[i]
            if c == 35 or c == 37:
                mark = True
            if not mark and not (c == 32 or c == 9 or c == 13 or c == 44):
                live = True
            if counting:
                if quoted:
                    if c == 34:
                        if i + 1 < n and a[i + 1] == 34:
                            i += 1
                        else:
                            quoted = False
                    start = False
                elif c == 35 or c == 37:
                    counting = False
                elif c == 44:
                    count += 1
                    start = True
                    if state == 0:
                        integer = False  # (an empty field)
                    state = 0
                else:
                    quoted = c == 34 and start
                    start = False
                    if c >= 48 and c <= 57:
                        if state == 2:
                            integer = False  # (two numbers in one field)
                        state = 1
                    elif c == 32 or c == 9 or c == 13:
                        if state == 1:
                            state = 2
                    else:
                        integer = False
            i += 1
        if state == 0:
            integer = False  # (the last field empty)
        if live:
            if first < 0:
                first = s
            if fields == 0:
                fields = count if integer else -1
                if fields < 0:
                    return -1, fields, first
            elif count != fields and integer:
                return s, fields, first
        i += 1
    return -1, fields, first


@njit(nogil=True)
def first_empty_tab_field(a):  # pragma: no cover - compiled
    """The offset of the tab that makes a line's first or second field empty in ``a`` (uint8,
    whole lines of a tab-separated edge list of ids), outside a ``#``/``%`` comment, or -1: a tab
    among the blanks before the line's first token (when a token follows), else the second tab
    among the blanks right after that token (:func:`distgrail.io.guards.empty_tab_field`)."""
    n = a.size
    i = 0
    while i < n:
        j = i
        lead = -1
        while j < n and (a[j] == 32 or a[j] == 9 or a[j] == 13):
            if a[j] == 9 and lead < 0:
                lead = j
            j += 1
        if j < n and a[j] != 10 and a[j] != 35 and a[j] != 37:  # a field
            if lead >= 0:
                return lead
            while j < n and a[j] != 32 and a[j] != 9 and a[j] != 13 and a[j] != 10 and a[j] != 35 and a[j] != 37:
                j += 1
            if j < n and a[j] != 35 and a[j] != 37:
                tabs = 0
                while j < n and (a[j] == 32 or a[j] == 9 or a[j] == 13):
                    if a[j] == 9:
                        tabs += 1
                        if tabs == 2:
                            return j
                    j += 1
        while j < n and a[j] != 10:
            j += 1
        i = j + 1
    return -1


@njit(nogil=True)
def numbers_at(b, starts):  # pragma: no cover - compiled
    """``(values, ok)``: the integer of each token of ``b`` (a chunk translated for the fast path,
    where only digits are above 47) starting at ``starts``, as ``np.fromstring(..., sep=" ")``
    reads them (:func:`distgrail.io.text.fast_numbers`); ``ok`` False when a token has more than
    18 digits after its leading zeros (a value of 10^18 or more, where ``fromstring`` saturates:
    the caller's general path says why the file is refused)."""
    out = np.empty(starts.size, dtype=np.int64)
    n = b.size
    for k in range(starts.size):
        i = starts[k]
        while i < n and b[i] == 48:
            i += 1
        v = np.int64(0)
        d = 0
        while i < n and b[i] > 47:
            v = v * 10 + (np.int64(b[i]) - 48)
            i += 1
            d += 1
        if d > 18:
            return out, False
        out[k] = v
    return out, True
