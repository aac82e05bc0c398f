"""Phase 3's sibling offsets on the CPU as compiled loops (numba), for large forests.

:func:`distgrail.stages.ranks.offsets_in_key_order` orders the children of every parent by
their keys with ``np.lexsort((key, parent))``, a comparison sort of all C components per
dimension. Here the same order comes from linear passes: the keys (the counter hash of
:mod:`distgrail.hashing`, computed here), a least-significant-digit radix sort of them (eight
passes of 8 bits), and a stable counting sort of that order by parent, whose buckets are the
same in every dimension (:func:`parent_buckets`). Sorting by key and then stably by parent is
lexsort's order; the keys are distinct, so the order, and every offset, is the twin's exactly.

Imported only for forests of at least :data:`~distgrail.stages.ranks.COMPILED_RANKS_COMPONENTS`
components; where numba does not import, the NumPy twin runs (same numbers).
"""

from __future__ import annotations

import numpy as np

from ..jit import njit

__all__ = ["parent_buckets", "sibling_offsets_into"]

_DIGIT = 8
_BUCKETS = 1 << _DIGIT


@njit(nogil=True)
def parent_buckets(parent):
    """Start of each parent's children in a grouping by ``parent + 1`` (roots, parent -1, in
    bucket 0): int64, C + 2 entries."""
    C = parent.shape[0]
    start = np.zeros(C + 2, dtype=np.int64)
    for v in range(C):
        start[parent[v] + 2] += 1
    for b in range(1, C + 2):
        start[b] += start[b - 1]
    return start


@njit(nogil=True)
def _keys(C, base, golden, m1, m2):
    """``hash3(seed, stream, arange(C))`` of :mod:`distgrail.hashing` (``base`` its hash_base)."""
    key = np.empty(C, dtype=np.uint64)
    one = np.uint64(1)
    for i in range(C):
        z = ((np.uint64(i) + one) * golden) ^ base
        z = z ^ (z >> np.uint64(30))
        z = z * m1
        z = z ^ (z >> np.uint64(27))
        z = z * m2
        key[i] = z ^ (z >> np.uint64(31))
    return key


@njit(nogil=True)
def _radix_order(key):
    """Ids 0..C-1 sorted by ``key`` (uint64, reordered in place): stable counting passes of
    :data:`_DIGIT` bits, least significant first, their counts taken in one pass."""
    C = key.shape[0]
    passes = -(-64 // _DIGIT)
    count = np.zeros((passes, _BUCKETS), dtype=np.int64)
    mask = np.uint64(_BUCKETS - 1)
    for i in range(C):
        k = key[i]
        for p in range(passes):
            count[p, (k >> np.uint64(p * _DIGIT)) & mask] += 1
    ka = key
    kb = np.empty(C, dtype=np.uint64)
    ia = np.arange(C)
    ib = np.empty(C, dtype=ia.dtype)
    for p in range(passes):
        shift = np.uint64(p * _DIGIT)
        total = 0
        for b in range(_BUCKETS):
            c = count[p, b]
            count[p, b] = total
            total += c
        for i in range(C):
            k = ka[i]
            d = (k >> shift) & mask
            j = count[p, d]
            count[p, d] = j + 1
            kb[j] = k
            ib[j] = ia[i]
        ka, kb = kb, ka
        ia, ib = ib, ia
    return ia


@njit(nogil=True)
def sibling_offsets_into(out, parent, size, buckets, base, golden, m1, m2):
    """``out[v]`` = the sum of the sizes of ``v``'s siblings placed before it when each parent's
    children (and the roots) are ordered by the key of ``(base, v)``: the twin's
    ``offsets_in_key_order(parent, size, sibling_keys(...))``. ``buckets``: :func:`parent_buckets`."""
    C = parent.shape[0]
    by_key = _radix_order(_keys(C, base, golden, m1, m2))
    fill = buckets[:C + 1].copy()
    order = np.empty(C, dtype=np.int64)
    for i in range(C):  # stable by parent: each parent's children stay in key order
        v = by_key[i]
        b = parent[v] + 1
        order[fill[b]] = v
        fill[b] += 1
    for b in range(C + 1):
        acc = 0
        for j in range(buckets[b], buckets[b + 1]):
            v = order[j]
            out[v] = acc
            acc += size[v]
