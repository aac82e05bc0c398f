"""Block CRC-32s of an index file's datasets, computed where the arrays are: on the GPU.

An index file stores zlib's CRC-32 of every block of ``block`` bytes of each dataset
(:func:`distgrail.indexfile.layout.block_crcs`, on the host). An update whose swept arrays are on
the GPU needs those of its result; computing them there spares bringing every array down or
reading the base's blocks back (:mod:`distgrail.indexfile.patch`, ``crcs=``).

CRC-32 is linear once its initial and final XOR are set apart. With ``L(M)`` the CRC of ``M``
from a zero register and no final XOR (a product modulo the polynomial, bits reflected):
``L(A + B) = L(A) * x^(8 |B|) + L(B)`` and ``crc32(M) = L(M) ^ (0xFFFFFFFF * x^(8 |M|)) ^
0xFFFFFFFF``. So every block is cut into chunks of ``chunk`` bytes (its last one may be
shorter). ``L`` of each chunk is multiplied by ``x^(8 z)``, ``z`` the block's bytes after the
chunk, and the products are XORed per block: :func:`block_raws_numpy` (twin) and
``dg_crc_chunks`` (kernels/checksums.cu), one chunk a thread. :func:`finish` then adds each
block's initial and final XOR.
"""

from __future__ import annotations

import numpy as np

from ..constants import CRC_CHUNK, CRC_POLY, GRID_THREADS
from ..gpu.memory import launcher
from ..gpu.sweep import cupy, kernel, sm_count

__all__ = ["times_mod_p", "x_to_8n", "X2K", "slicing_tables", "finish", "block_raws_numpy", "block_crcs_numpy",
           "block_crcs_cuda"]

_ONE = 1 << 31  # x^0, reflected


def times_mod_p(a: int, b: int) -> int:
    """``a * b`` modulo the CRC-32 polynomial, both reflected (bit 31 the constant term): zlib's
    ``multmodp``."""
    m, p = _ONE, 0
    while m:
        if a & m:
            p ^= b
            if not a & (m - 1):
                break
        m >>= 1
        b = (b >> 1) ^ CRC_POLY if b & 1 else b >> 1
    return p


def _powers_of_x(count: int = 32) -> tuple:
    """``x^(2^k)`` modulo the polynomial for k = 0..count-1."""
    out = [1 << 30]  # x^1
    for _ in range(count - 1):
        out.append(times_mod_p(out[-1], out[-1]))
    return tuple(out)


#: ``x^(2^k)`` modulo the polynomial for k = 0..31: ``x^(8 n)`` is the product over the set bits
#: of ``n`` (k from 3; x's powers repeat with a period dividing 2^32 - 1, so ``x^(2^k)`` is entry
#: ``k & 31``, as in zlib); the kernel gets the same table
X2K = _powers_of_x()


def x_to_8n(n: int) -> int:
    """``x^(8 n)`` modulo the polynomial: ``n`` zero bytes through the register."""
    n, k, p = int(n), 3, _ONE
    while n:
        if n & 1:
            p = times_mod_p(X2K[k & 31], p)
        n >>= 1
        k += 1
    return p


def slicing_tables() -> np.ndarray:
    """(4, 256) uint32: zlib's byte table (row 0) and the three that take a byte 1, 2, 3 bytes
    further on (slicing by 4)."""
    t = np.zeros((4, 256), dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ CRC_POLY if c & 1 else c >> 1
        t[0, i] = c
    for k in range(1, 4):
        t[k] = (t[k - 1] >> 8) ^ t[0][t[k - 1] & 0xFF]
    return t


def _lengths(nbytes: int, block: int) -> np.ndarray:
    """Bytes of every block (int64): ``block`` each, the last one the rest."""
    n_blocks = -(-int(nbytes) // int(block))
    return np.minimum(int(block), int(nbytes) - np.arange(n_blocks, dtype=np.int64) * int(block))


def finish(raws, nbytes: int, block: int) -> np.ndarray:
    """The CRC-32s (uint32) of the blocks of a dataset of ``nbytes`` bytes from their ``L``
    values ``raws``: each block's initial and final XOR added."""
    lens = _lengths(nbytes, block)
    fix = {int(n): times_mod_p(x_to_8n(n), 0xFFFFFFFF) ^ 0xFFFFFFFF for n in set(lens.tolist())}
    return np.asarray(raws, dtype=np.uint32) ^ np.array([fix[int(n)] for n in lens], dtype=np.uint32).reshape(-1)


def _times_mod_p_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`times_mod_p` over arrays (uint32): all 32 bits of ``a``, no early stop."""
    a, b = a.astype(np.uint32), b.astype(np.uint32).copy()
    p = np.zeros(np.broadcast(a, b).shape, dtype=np.uint32)
    for s in range(31, -1, -1):
        p ^= np.where((a >> np.uint32(s)) & np.uint32(1), b, np.uint32(0))
        b = (b >> np.uint32(1)) ^ np.where(b & np.uint32(1), np.uint32(CRC_POLY), np.uint32(0))
    return p


def block_raws_numpy(data, block: int, chunk: int = CRC_CHUNK) -> np.ndarray:
    """NumPy twin of ``dg_crc_chunks``: ``L`` (uint32) of every ``block`` bytes of ``data`` (any
    array, its bytes in C order) from its chunks of ``chunk`` bytes (module doc), bytewise."""
    buf = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    block, chunk = int(block), int(chunk)
    if block < 1 or chunk < 1:
        raise ValueError(f"block and chunk must be positive, got {block} and {chunk}")
    lens = _lengths(buf.size, block)
    per_block = -(-block // chunk)
    c0 = np.arange(per_block, dtype=np.int64) * chunk
    kk, jj = np.nonzero(c0[None, :] < lens[:, None])  # (every block, its chunks)
    first = c0[jj]
    clen = np.minimum(chunk, lens[kk] - first)
    start = kk * block + first
    tab = slicing_tables()[0]
    crc = np.zeros(kk.size, dtype=np.uint32)
    for i in range(int(clen.max()) if clen.size else 0):
        on = np.flatnonzero(clen > i)
        c = crc[on]
        crc[on] = tab[(c ^ buf[start[on] + i]) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
    z = lens[kk] - first - clen  # the block's bytes after the chunk
    shift = np.full(kk.size, _ONE, dtype=np.uint32)
    for bit in range(int(z.max()).bit_length() if z.size else 0):
        on = ((z >> bit) & 1).astype(bool)
        shift[on] = _times_mod_p_np(np.uint32(X2K[(bit + 3) & 31]), shift[on])
    raws = np.zeros(lens.size, dtype=np.uint32)
    np.bitwise_xor.at(raws, kk, _times_mod_p_np(shift, crc))
    return raws


def block_crcs_numpy(data, block: int, chunk: int = CRC_CHUNK) -> np.ndarray:
    """The CRC-32 (uint32) of every ``block`` bytes of ``data``: :func:`finish` of the twin's
    :func:`block_raws_numpy` (what :func:`zlib.crc32` gives block by block)."""
    nbytes = np.asarray(data).nbytes
    return finish(block_raws_numpy(data, block, chunk), nbytes, block)


# -- CUDA launcher (kernels/checksums.cu) --------------------------------------------------------

@launcher
def block_crcs_cuda(be, a, block: int, chunk: int = CRC_CHUNK, raw: bool = False) -> np.ndarray:
    """GPU twin of :func:`block_crcs_numpy` for the C-contiguous device array ``a``: one launch of
    ``dg_crc_chunks`` (a thread per chunk); the block values come to the host (4 bytes a block),
    where :func:`finish` completes them (``raw=True``: not, the twin of :func:`block_raws_numpy`)."""
    cp = cupy()
    block, chunk = int(block), int(chunk)
    if block < 1 or chunk < 1:
        raise ValueError(f"block and chunk must be positive, got {block} and {chunk}")
    if not a.flags.c_contiguous:
        raise ValueError("block_crcs_cuda: the array must be C-contiguous (its bytes as a file stores them)")
    nbytes = int(a.nbytes)
    n_blocks = -(-nbytes // block)
    out = cp.zeros(n_blocks, dtype=cp.uint32)
    if nbytes:
        per_block = -(-block // chunk)
        chunks = n_blocks * per_block
        grid = max(1, min(-(-chunks // GRID_THREADS), sm_count() * 32))
        buf = a.reshape(-1).view(cp.uint8)
        tables = cp.asarray(slicing_tables().reshape(-1))
        x2k = cp.asarray(np.array(X2K, dtype=np.uint32))
        kernel("checksums", "dg_crc_chunks")((grid,), (GRID_THREADS,), (
            buf, np.int64(nbytes), np.int64(block), np.int64(chunk), np.int64(per_block), np.int64(chunks),
            tables, x2k, out))
    raws = out.get()
    return raws if raw else finish(raws, nbytes, block)
