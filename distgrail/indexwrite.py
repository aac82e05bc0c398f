"""Writing an index's large datasets in parallel blocks, each block's CRC-32 taken as it leaves.

The mirror of :mod:`distgrail.indexblocks`. Through HDF5 a dataset is written by one thread's
copy, after a cast of the whole array to its stored type (a second copy) and with its checksums
a third pass over memory. Here HDF5 creates the dataset exactly as ``create_dataset(data=...)``
does (contiguous, no filter, storage allocated at the first write, no fill value written) and
writes its first bytes, which allocates the storage; :meth:`BlockWrites.write` then hands every
``crc32_block`` bytes of it to a thread pool: cast that block of the source array to the stored
type (a view between integer types of one size), ``os.pwritev`` it at the dataset's offset in the
file (``Dataset.id.get_offset()``) through a descriptor of its own, and ``zlib.crc32`` of the cast
bytes (all three release the GIL); the dataset's range is allocated at once first
(:func:`_reserve`). The file is byte for byte the one HDF5 alone writes (tests/test_indexwrite.py):
the same header, the same blocks, the same checksums.

HDF5 never writes these bytes again: its first write is larger than its sieve buffer (so it goes
straight to the file, leaving nothing cached to flush later), and the default fill value is
never written. The pool's writes end before the file is closed (their CRCs are needed for the
attributes); a failed write (``ENOSPC``, ``EIO``) raises its OSError from the CRC's future, which
:class:`distgrail.io.atomic.atomic_path` turns into the usual ``OutputError``, the temporary file
removed, after :meth:`BlockWrites.__exit__` cancelled the blocks not yet started and waited for
the running ones.

Datasets below :data:`distgrail.indexblocks.PARALLEL_MIN_BYTES`, and any of a stored type other
than little-endian integers, are written by HDF5.

A :class:`StreamedArray` (a partitioned build's DAG rows, held by the ranks that built them) is
never whole in this process: :func:`write_streamed` writes its pieces as they arrive, in order,
each through HDF5 at its place, and takes the CRC-32 of every ``crc32_block`` bytes across the
pieces' edges (``zlib.crc32`` carried on); the file is the same, byte for byte.
"""

from __future__ import annotations

import errno
import os
import zlib

import numpy as np

from . import indexblocks

__all__ = ["BlockWrites", "can_write_in_blocks", "as_type", "StreamedArray", "write_streamed"]

#: at least this many first bytes of a dataset are written by HDF5 (and again, the same, by the pool)
PREFIX_BYTES = 1 << 20


def as_type(data: np.ndarray, t) -> np.ndarray:
    """``data.astype(t)``; between integer types of one size a view (the same bits: astype wraps
    modulo 2^bits too), so the big CSR is not copied."""
    t = np.dtype(t)
    if data.dtype == t:
        return data
    if data.dtype.kind in "iu" and t.kind in "iu" and data.dtype.itemsize == t.itemsize:
        return data.view(t)
    return data.astype(t)


def can_write_in_blocks(data: np.ndarray, t) -> bool:
    """Whether ``data``, stored as type ``t``, is large enough to be written in parallel blocks
    and its stored bytes are its little-endian integer values (what the reader reads in blocks)."""
    t = np.dtype(t)
    if t.kind not in "iu" or t.byteorder == ">" or (t.byteorder == "=" and not np.little_endian):
        return False
    if data.dtype.kind not in "biuf":
        return False
    return int(data.size) * t.itemsize >= indexblocks.PARALLEL_MIN_BYTES


def _prefix(shape, itemsize: int, want: int):
    """(selection, elements): the first whole rows of the innermost axis whose rows together hold
    at least ``want`` bytes (one run of bytes at the dataset's start, at most 2 ``want`` long)."""
    shape = tuple(int(x) for x in shape)
    row = itemsize
    for j in range(len(shape) - 1, -1, -1):
        if shape[j] * row >= want or j == 0:
            k = min(shape[j], -(-want // row))
            sel = (0,) * j + (slice(0, k),)
            return sel, k * (row // itemsize)
        row *= shape[j]
    return (), 1  # a scalar


def _write_block(fd, flat: np.ndarray, t: np.dtype, at: int, start: int, stop: int) -> int:
    """Cast the elements of ``flat`` that hold stored bytes [start, stop) to ``t``, write those
    bytes at ``at + start`` of ``fd``; their CRC-32."""
    s = t.itemsize
    e0 = start // s
    cast = as_type(flat[e0:-(-stop // s)], t)
    view = memoryview(np.ascontiguousarray(cast).view(np.uint8))[start - e0 * s:stop - e0 * s]
    done = 0
    while done < len(view):
        k = os.pwritev(fd, [view[done:]], at + start + done)
        if k <= 0:
            raise OSError(errno.EIO, "write wrote nothing")
        done += k
    return zlib.crc32(view)


def _reserve(fd, at: int, nbytes: int) -> None:
    """Allocate the dataset's blocks in the file at once (``posix_fallocate``, within the space
    HDF5 allocated): the block writes then neither extend the file nor reserve delayed blocks one
    page at a time (ext4: 1.5 GB written in 4 MiB blocks took 0.44 s instead of 0.54-1.4 s on this
    machine), and a full disk is seen before any byte is written. Where the file system cannot
    allocate ahead, nothing is done."""
    if not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, at, nbytes)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise


class BlockWrites:
    """Context manager over an HDF5 file being written at ``tmp``: :meth:`write` creates a dataset
    and queues its blocks on ``pool``. Leaving it waits for every block (cancelling those not
    started when an error is leaving) and closes the descriptor; leave it before the file closes."""

    def __init__(self, tmp, pool):
        self.tmp, self.pool = tmp, pool
        self.fd = None
        self.futures = []

    def __enter__(self):
        return self

    def write(self, f, name, data: np.ndarray, t, block: int) -> list:
        """Create dataset ``name`` of file ``f`` for ``data`` stored as ``t`` and queue its writes;
        the futures of the CRC-32 of every ``block`` stored bytes (their write's error, if any)."""
        at = self.allocate(f, name, data.shape, t, data)
        return self.queue(data, t, at, block)

    def allocate(self, f, name, shape, t, data=None) -> int:
        """Create dataset ``name`` (``shape``, stored as ``t``) and write its first bytes, from
        ``data`` or zeros (:meth:`queue` writes them again), so that HDF5 allocates its storage now;
        its file offset, the range allocated in the file too (:func:`_reserve`)."""
        t = np.dtype(t)
        shape = tuple(int(x) for x in shape)
        ds = f.create_dataset(name, shape=shape, dtype=t, track_times=False)
        sieve = f.id.get_access_plist().get_sieve_buf_size()
        sel, n = _prefix(shape, t.itemsize, max(PREFIX_BYTES, 2 * sieve + 1))
        first = np.zeros(n, t) if data is None else as_type(np.ascontiguousarray(data).reshape(-1)[:n], t)
        ds[sel] = first.reshape(_sel_shape(shape, sel))  # allocates the storage
        at = ds.id.get_offset()
        if at is None:  # pragma: no cover - HDF5 allocates contiguous storage at the first write
            raise OSError(errno.EIO, f"HDF5 gave dataset /{name} no storage")
        if self.fd is None:
            self.fd = os.open(self.tmp, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        _reserve(self.fd, int(at), int(np.prod(shape, dtype=np.int64)) * t.itemsize)
        return int(at)

    def queue(self, data: np.ndarray, t, at: int, block: int) -> list:
        """Queue the block writes of ``data`` (stored as ``t``) at file offset ``at`` (from
        :meth:`allocate`); the futures of the CRC-32 of every ``block`` stored bytes."""
        t = np.dtype(t)
        flat = np.ascontiguousarray(data).reshape(-1)
        nbytes = int(flat.size) * t.itemsize
        futs = [self.pool.submit(_write_block, self.fd, flat, t, at, i, min(i + block, nbytes))
                for i in range(0, nbytes, block)]
        self.futures += futs
        return futs

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is not None:
                for x in self.futures:
                    x.cancel()
            for x in self.futures:
                if not x.cancelled():
                    x.exception()  # waits; the error itself is raised by whoever takes the CRC
        finally:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
        return False


class StreamedArray:
    """A 1-D dataset of ``size`` values of ``dtype`` that arrive as pieces (1-D arrays, in order,
    from ``pieces()``) while it is written: :func:`write_streamed`. ``close(failed)`` is called
    once the write is over, whether it ended well or not (the senders are released)."""

    def __init__(self, size: int, dtype, pieces, close=None):
        self.size = int(size)
        self.shape = (self.size,)
        self.dtype = np.dtype(dtype)
        self._pieces, self._close = pieces, close

    def pieces(self):
        return self._pieces()

    def close(self, failed: bool) -> None:
        if self._close is not None:
            close, self._close = self._close, None
            close(failed)


def write_streamed(f, name, src: StreamedArray, t, block: int) -> list:
    """Create dataset ``name`` (``src.shape``, stored as ``t``) of file ``f`` and write ``src``'s
    pieces into it as they come; the CRC-32 of every ``block`` stored bytes. A source that gives
    more or fewer values than its size is an error (nothing is taken for granted)."""
    t = np.dtype(t)
    ds = f.create_dataset(name, shape=src.shape, dtype=t, track_times=False)
    crcs, crc, filled, at = [], 0, 0, 0
    for piece in src.pieces():
        p = np.ascontiguousarray(as_type(np.asarray(piece).reshape(-1), t))
        if at + p.size > src.size:
            raise ValueError(f"/{name}: more than its {src.size:,} values arrived")
        if not p.size:
            continue
        ds[at:at + p.size] = p
        at += p.size
        mv = memoryview(p.view(np.uint8))
        while len(mv):
            take = min(block - filled, len(mv))
            crc = zlib.crc32(mv[:take], crc)
            filled += take
            mv = mv[take:]
            if filled == block:
                crcs.append(crc)
                crc = filled = 0
    if at != src.size:
        raise ValueError(f"/{name}: {at:,} of its {src.size:,} values arrived")
    if filled:
        crcs.append(crc)
    return crcs


def _sel_shape(shape, sel) -> tuple:
    """The shape of ``array[sel]`` for a prefix selection of :func:`_prefix`."""
    j = len(sel) - 1
    return (sel[j].stop,) + tuple(int(x) for x in shape[j + 1:]) if sel else ()
