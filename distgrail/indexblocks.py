"""Reading an index's large datasets in parallel blocks, each block's CRC-32 taken as it lands.

A dataset the index writer stored (contiguous, no filter, little-endian integers) is one run of
bytes at a known offset of the file (``Dataset.id.get_offset()``). Read through HDF5 it is one
thread's copy, and its checksum is a second pass over memory; here every ``crc32_block`` bytes of
it are one task of a thread pool: ``os.preadv`` straight into the array, then ``zlib.crc32`` of
the block while it is in the cache (both release the GIL). The CRCs are then compared as
:func:`distgrail.indexfile.read_index_file` compares those of a dataset read by HDF5, so a block
read from a wrong offset (a damaged header) is a checksum error like any other.

Datasets below :data:`PARALLEL_MIN_BYTES`, with a filter or chunks (files of earlier releases),
or of any other type are read by HDF5.
"""

from __future__ import annotations

import os
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .errors import IndexFormatError

__all__ = ["PARALLEL_MIN_BYTES", "parallel_read", "can_read_in_blocks", "Deferred"]

#: datasets at least this large are read in parallel blocks (smaller ones by HDF5)
PARALLEL_MIN_BYTES = 16 << 20


def can_read_in_blocks(ds, block) -> bool:
    """Whether dataset ``ds`` (with CRC block size ``block`` from its attributes) is one plain run
    of little-endian integer bytes in the file that is worth reading in parallel."""
    dt = ds.dtype
    if dt.kind not in "iu" or dt.byteorder == ">" or (dt.byteorder == "=" and np.little_endian is False):
        return False
    if isinstance(block, (bool, np.bool_)) or not isinstance(block, (int, np.integer)) or block < 1:
        return False
    if ds.chunks is not None or ds.compression is not None or ds.fletcher32 or ds.shuffle or ds.scaleoffset:
        return False
    if ds.external:
        return False
    return int(ds.size) * dt.itemsize >= PARALLEL_MIN_BYTES and ds.id.get_offset() is not None


def _read_block(fd, view: memoryview, offset: int) -> int:
    """Read ``len(view)`` bytes at ``offset`` into ``view``; returns the CRC-32 of the block, or
    -1 when the file ends first."""
    got = 0
    while got < len(view):
        k = os.preadv(fd, [view[got:]], offset + got)
        if k <= 0:
            return -1
        got += k
    return zlib.crc32(view)


def parallel_read(path, fd, ds, name, block: int, pool):
    """(array, futures of the CRC-32 of every ``block`` bytes) of dataset ``ds`` read from the
    open file descriptor ``fd`` by ``pool``'s threads; a future's value -1 means the file ended
    before the block (reported by :func:`check_block_reads`)."""
    out = np.empty(ds.shape, dtype=ds.dtype.newbyteorder("<"))
    raw = memoryview(out.reshape(-1).view(np.uint8))
    start = int(ds.id.get_offset())
    block = int(block)
    futs = [pool.submit(_read_block, fd, raw[i:i + block], start + i) for i in range(0, len(raw), block)]
    return out, futs


def check_block_reads(path, name, values) -> None:
    """Raise when a block of dataset ``name`` could not be read in full (the file is too short)."""
    if any(v < 0 for v in values):
        raise IndexFormatError(f"{path}: damaged index: dataset /{name} cannot be read (the file ends before "
                               f"its data: truncated?)")


class Deferred:
    """A large dataset left in the file when the index was read (``read_index_file(defer=...)``):
    its ``shape`` and ``dtype`` (what the shape and type checks see), where its bytes start, and
    its stored CRC-32s, so that a slice is read later with :meth:`read` and checked block by block
    (the spread queries read only their rows of ``/dag/indices``)."""

    def __init__(self, path, name, ds, crc):
        self.path, self.name = path, name
        self.shape, self.dtype = tuple(ds.shape), ds.dtype.newbyteorder("<")
        self.offset = int(ds.id.get_offset())
        self.crc, self.block = np.asarray(crc[0]), int(crc[1])
        self.size = int(np.prod(self.shape)) if self.shape else 1

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Elements ``lo .. hi-1`` (of the flat dataset): the CRC blocks that hold them are read and
        checked against the stored checksums, so a damaged block is an IndexFormatError, as when
        the whole index is read."""
        lo, hi = max(0, int(lo)), min(self.size, int(hi))
        isz = self.dtype.itemsize
        nbytes = self.size * isz
        if hi <= lo:
            return np.zeros(0, self.dtype)
        b0, b1 = lo * isz // self.block, -(-hi * isz // self.block)
        if self.crc.dtype.kind not in "iu" or self.crc.shape != (-(-nbytes // self.block),):
            raise IndexFormatError(f"{self.path}: damaged index: dataset /{self.name} cannot be read (checksum "
                                   f"error: {self.crc.size} stored checksums for {-(-nbytes // self.block)} blocks)")
        start, stop = b0 * self.block, min(nbytes, b1 * self.block)
        raw = np.empty(stop - start, np.uint8)
        view = memoryview(raw)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            with ThreadPoolExecutor(max_workers=max(1, min(16, os.cpu_count() or 1, b1 - b0))) as pool:
                got = list(pool.map(lambda i: _read_block(fd, view[i * self.block:(i + 1) * self.block],
                                                          self.offset + start + i * self.block), range(b1 - b0)))
        finally:
            os.close(fd)
        check_block_reads(self.path, self.name, got)
        bad = [b0 + i for i, x in enumerate(got) if x != int(self.crc[b0 + i])]
        if bad:
            raise IndexFormatError(f"{self.path}: damaged index: dataset /{self.name} cannot be read (checksum "
                                   f"error: CRC-32 mismatch, block {bad[0]} of {self.crc.size})")
        first = lo * isz - start
        return raw[first:first + (hi - lo) * isz].view(self.dtype)
