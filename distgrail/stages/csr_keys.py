"""CSR from 64-bit ``(row << 32 | col)`` keys, the way GPU condensation builds it (NumPy twin;
the kernels are in kernels/condense.cu, launched by :class:`distgrail.stages.scc.CudaSteps`).

Up to ``limit`` keys (2^31 - 1) one library sort and one scan do it. Past that, CuPy's scan and
sort index with 32 bits, so the keys are sorted in row buckets of at most ``limit`` keys
(:func:`sort_keys_in_buckets`) and the kept keys' places come from a scan in pieces with int64
positions: the same CSR, computed in steps that each stay below 2^31 items.
"""

from __future__ import annotations

import numpy as np

__all__ = ["key_buckets", "sort_keys_in_buckets", "keys_csr_numpy", "SENTINEL"]

#: the key of a dropped edge (a self-loop, or inside one component): sorted last; kernels/condense.cu's
#: ``DG_SENTINEL`` (tests/test_csr_keys_sentinel.py reads it there)
SENTINEL = 2**64 - 1
_MASK = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)


def key_buckets(xp, cum, piece: int, limit: int = 2**31 - 1):
    """Row bounds ``b_0 = 0 < ... < b_B = rows`` (host int64) of buckets of sorted keys, each
    bucket the rows ``b_j .. b_{j+1} - 1`` holding at most ``limit`` keys, from ``cum`` (rows + 1
    entries: keys in the rows before each row, the last the total): a bound where the running
    count passes each multiple of ``piece``, so a bucket holds less than ``piece`` plus one row.
    Raises :class:`~distgrail.errors.BackendError` when one row alone holds more than ``limit``.

    >>> key_buckets(np, np.array([0, 3, 3, 5, 9, 10]), 4, limit=5).tolist()
    [0, 2, 3, 5]
    """
    from ..errors import BackendError

    rows = int(cum.shape[0]) - 1
    total = int(cum[-1])
    targets = xp.arange(piece, total, piece, dtype=xp.int64)
    cut = xp.searchsorted(cum, targets, side="right") - 1 if targets.size else xp.zeros(0, xp.int64)
    cut = np.asarray(cut.get() if hasattr(cut, "get") else cut, dtype=np.int64)
    bounds = np.unique(np.concatenate(([0], cut[(cut > 0) & (cut < rows)], [rows]))).astype(np.int64)
    at = cum[xp.asarray(bounds)]
    at = np.asarray(at.get() if hasattr(at, "get") else at, dtype=np.int64)
    if (np.diff(at) > int(limit)).any():
        raise BackendError(f"a row of the graph holds more than {int(limit):,} edges (repeats included): "
                           "too many for one GPU sort; use --backend cpu")
    return bounds


def sort_keys_in_buckets(xp, keys, n: int, limit: int, count=None, scatter=None):
    """``keys`` sorted, with library sorts of at most ``limit`` keys: ``count(keys, n)`` gives the
    keys of the rows before each row (n + 2 entries; the sentinel ``2^64 - 1`` counts as row
    ``n``), the keys go into row buckets (:func:`key_buckets`) by ``scatter(keys, n, bounds,
    starts)`` and each bucket is sorted alone. Buckets aim at ``limit / 8`` keys (plus at most one
    row), so a bucket's sort scratch stays near 2 GiB at the real limit. The NumPy ``count`` and ``scatter`` (defaults)
    are the twins of the kernels ``dg_cond_key_rows`` and ``dg_cond_bucket``.

    >>> k = np.array([5 << 32 | 1, 1 << 32 | 7, 3 << 32, 1 << 32 | 2, 2**64 - 1, 0], np.uint64)
    >>> bool((sort_keys_in_buckets(np, k, 6, 2) == np.sort(k)).all())
    True
    """
    cum = (count or _count_numpy)(keys, n)
    # rows 0..n-1 in buckets; the sentinels (row n, all equal) in a last one that needs no sort
    bounds = np.append(key_buckets(xp, cum[:n + 1], max(1, int(limit) // 8), limit), n + 1)
    starts = cum[xp.asarray(bounds)]
    starts = np.asarray(starts.get() if hasattr(starts, "get") else starts, dtype=np.int64)
    out = (scatter or _scatter_numpy)(keys, n, bounds, starts)
    for s, e in zip(starts[:-2], starts[1:-1]):
        if e - s > 1:
            out[int(s):int(e)].sort()
    return out


def _key_rows(keys, n):
    return np.where(keys == np.uint64(SENTINEL), np.uint64(n), keys >> _32).astype(np.int64)


def _count_numpy(keys, n):
    cnt = np.zeros(n + 2, dtype=np.int64)
    cnt[1:] = np.bincount(_key_rows(keys, n), minlength=n + 1)
    return np.cumsum(cnt)


def _scatter_numpy(keys, n, bounds, starts):
    row = _key_rows(keys, n)
    bucket = np.searchsorted(bounds, row, side="right") - 1
    return keys[np.argsort(bucket, kind="stable")]


def keys_csr_numpy(a, b, C, limit: int = 2**31 - 1):
    """CSR of the edges a[i] -> b[i] on ``C`` vertices: rows sorted, repeats and a == b dropped.
    Past ``limit`` keys the steps of the GPU's wide path: a sort in row buckets and the kept keys'
    places from a scan of the keep flags in pieces (int64 positions)."""
    from ..gpu.memory import offset_dtype, scan_in_pieces

    a = np.asarray(a)
    b = np.asarray(b)
    keep = a != b
    keys = (a[keep].astype(np.uint64) << _32) | b[keep].astype(np.uint64)
    wide = keys.size > int(limit)
    keys = sort_keys_in_buckets(np, keys, C, limit) if wide else np.sort(keys)
    if keys.size:
        first = np.ones(keys.size, dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        if wide:
            pos = scan_in_pieces(np, first.view(np.uint8), offset_dtype(keys.size, limit), limit)
            out = np.empty(int(pos[-1]), dtype=np.uint64)
            out[pos[first] - 1] = keys[first]
            keys = out
        else:
            keys = keys[first]
    ptr = np.searchsorted(keys, np.arange(C + 1, dtype=np.uint64) << _32).astype(np.int64)
    return ptr, (keys & _MASK).astype(np.int32)
