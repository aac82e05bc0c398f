"""The block CRC-32s of a patched dataset from the changed bytes alone (numba; each call one range
of blocks, on one host thread): what :func:`distgrail.indexfile.patch._patched_crcs` computes by
reading, patching and checksumming every block a changed row touches.

CRC-32 (zlib's: reflected polynomial ``0xEDB88320``, initial and final XOR ``0xFFFFFFFF``) is
affine in the data: for two blocks ``A`` and ``B`` of one length, ``crc(B) = crc(A) ^ L(A ^ B)``,
where ``L`` is the same CRC with no initial or final XOR, linear over GF(2). ``A ^ B`` is zero
but at the changed rows, so ``L`` of it is the XOR over the changed segments of ``L(segment)``
times ``x^(8 z)`` modulo the polynomial, ``z`` the bytes from the segment's end to the block's
(zeros after a segment multiply by ``x^8`` each; zeros before it change nothing). ``shifts[z]``
holds ``x^(8 z)`` for every ``z`` up to the block size; :func:`multmodp` is zlib's product modulo
the polynomial. Integers are int64 holding 32-bit values.
"""

from __future__ import annotations

import numpy as np

from ..constants import CRC_POLY as POLY
from ..jit import njit

__all__ = ["POLY", "table", "zero_shifts", "multmodp", "crc_raw", "block_crcs"]


@njit()
def table():
    """The byte table of the reflected polynomial (int64)."""
    t = np.empty(256, np.int64)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ POLY if c & 1 else c >> 1
        t[i] = c
    return t


@njit()
def zero_shifts(n, tab):
    """``x^(8 z)`` modulo the polynomial for ``z`` in ``0..n`` (``x^0`` is bit 31, reflected)."""
    x = np.empty(n + 1, np.int64)
    c = 0x80000000
    for z in range(n + 1):
        x[z] = c
        c = tab[c & 0xFF] ^ (c >> 8)
    return x


@njit(nogil=True)
def multmodp(a, b):
    """``a * b`` modulo the polynomial (zlib's ``multmodp``), 32-bit values in int64."""
    m = 0x80000000
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ POLY if b & 1 else b >> 1
    return p


@njit(nogil=True)
def crc_raw(data, tab):
    """``L(data)``: CRC-32 of the uint8 array ``data`` with no initial or final XOR."""
    c = 0
    for j in range(data.size):
        c = tab[(c ^ data[j]) & 0xFF] ^ (c >> 8)
    return c


@njit(nogil=True)
def block_crcs(k0, k1, old_crcs, rows, dims, C, rb, new, ref, block, nbytes, tab, shifts, out):
    """``out[k]`` for blocks ``k0 <= k < k1`` of a dataset of ``nbytes`` bytes (``dims`` runs of
    ``C`` rows of ``rb`` bytes each; rows of run ``d`` start at byte ``(d * C + r) * rb``): its
    CRC-32 once ``rows`` (sorted, distinct, along the runs) take the bytes ``new`` (uint8,
    ``(dims, len(rows), rb)``), from ``old_crcs`` (the block CRC-32s of the bytes ``ref``, the
    whole dataset as uint8, before)."""
    for k in range(k0, k1):
        b0 = k * block
        b1 = min(nbytes, b0 + block)
        acc = 0
        r0 = b0 // rb
        r1 = (b1 + rb - 1) // rb
        for d in range(r0 // C, min(dims, (r1 - 1) // C + 1)):
            i0 = np.searchsorted(rows, max(r0, d * C) - d * C)
            i1 = np.searchsorted(rows, min(r1, (d + 1) * C) - d * C)
            for i in range(i0, i1):
                o = (d * C + rows[i]) * rb
                s0 = max(o, b0)
                s1 = min(o + rb, b1)
                c = 0
                for j in range(s0 - o, s1 - o):
                    c = tab[(c ^ (new[d, i, j] ^ ref[o + j])) & 0xFF] ^ (c >> 8)
                if c != 0:
                    acc ^= multmodp(shifts[b1 - s1], c)
        out[k] = old_crcs[k] ^ acc
