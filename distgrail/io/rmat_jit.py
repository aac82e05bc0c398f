"""The R-MAT generator's compiled kernels (numba, ``nogil``): the same numbers and bytes as the
NumPy code in :mod:`distgrail.io.rmat` (tests/test_rmat.py checks both), faster
(docs/benchmarks.md) and free of the GIL, so chunks run on a thread pool at full speed. Imported
only when a graph is generated; without numba the NumPy code runs."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def levels(draws, ta, tab, tabc, full_a, full_ab, full_abc, u, v):  # pragma: no cover - compiled
    """u, v (zeroed) get one bit per level of ``draws`` (scale, count) uint32, most significant
    first: bottom half when draw >= a+b, right half when in [a, a+b) or >= a+b+c."""
    scale, count = draws.shape
    for lvl in range(scale):
        row = draws[lvl]
        for i in range(count):
            r = row[i]
            bot = (r >= tab) and not full_ab
            right = ((r >= ta) and not full_a) != bot
            if not full_abc and r >= tabc:
                right = not right
            u[i] = (u[i] << 1) | bot
            v[i] = (v[i] << 1) | right


@njit(nogil=True, cache=True)
def scramble(x, scale, k0, k1, k2, k3, k4, k5):  # pragma: no cover - compiled
    """In place: the bijection of :func:`distgrail.io.rmat.scramble` (uint64 arithmetic wraps)."""
    mask = np.uint64((1 << scale) - 1) if scale < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)
    h = np.uint64(max(1, (scale + 1) // 2))
    ks = (k0, k1, k2, k3, k4, k5)
    for i in range(x.size):
        y = np.uint64(x[i])
        for r in range(3):
            y = ((y * ks[2 * r] + ks[2 * r + 1]) & mask)
            y ^= y >> h
        x[i] = y


@njit(nogil=True, cache=True)
def _digits(x):  # pragma: no cover - compiled
    n = 1
    while x >= 10:
        x //= 10
        n += 1
    return n


@njit(nogil=True, cache=True)
def edge_lines(u, v):  # pragma: no cover - compiled
    """``"u v\\n"`` per edge as one uint8 array (the bytes of :func:`distgrail.io.rmat.edge_lines`)."""
    total = 0
    for i in range(u.size):
        total += _digits(u[i]) + _digits(v[i]) + 2
    out = np.empty(total, dtype=np.uint8)
    pos = 0
    for i in range(u.size):
        for x, end in ((u[i], 32), (v[i], 10)):
            n = _digits(x)
            p = pos + n - 1
            y = x
            for _ in range(n):
                out[p] = 48 + y % 10
                y //= 10
                p -= 1
            out[pos + n] = end
            pos += n + 1
    return out


# -- the .h5 graph's CSR from the edges' 64-bit keys (source << 32 | target): a bucket sort ------

@njit(nogil=True, cache=True)
def key_counts(keys, lo, hi, shift, counts):  # pragma: no cover - compiled
    """``counts[b]`` += the keys of ``keys[lo:hi]`` in bucket ``b = key >> shift``."""
    for i in range(lo, hi):
        counts[np.int64(keys[i] >> shift)] += 1


@njit(nogil=True, cache=True)
def key_scatter(keys, lo, hi, shift, at, out):  # pragma: no cover - compiled
    """Each key of ``keys[lo:hi]`` to ``out[at[b]]`` of its bucket ``b`` (``at[b]`` then moves on):
    in order within a bucket, so buckets filled slice after slice hold the keys stably."""
    for i in range(lo, hi):
        k = keys[i]
        b = np.int64(k >> shift)
        out[at[b]] = k
        at[b] += 1


@njit(nogil=True, cache=True)
def distinct_degrees(keys, lo, hi, degree):  # pragma: no cover - compiled
    """The distinct keys of the sorted ``keys[lo:hi]``, each counted in ``degree`` at its source
    (``key >> 32``); returns how many."""
    c = 0
    for i in range(lo, hi):
        k = keys[i]
        if i == lo or k != keys[i - 1]:
            degree[np.int64(k >> np.uint64(32))] += 1
            c += 1
    return c


@njit(nogil=True, cache=True)
def distinct_targets(keys, lo, hi, out, at):  # pragma: no cover - compiled
    """The targets (``key & 0xFFFFFFFF``) of the distinct keys of the sorted ``keys[lo:hi]``,
    written to ``out[at:]`` in order."""
    j = at
    mask = np.uint64(0xFFFFFFFF)
    for i in range(lo, hi):
        k = keys[i]
        if i == lo or k != keys[i - 1]:
            out[j] = k & mask
            j += 1
