"""Writing an index's large datasets in parallel blocks, each block's CRC-32 taken as it leaves.

The mirror of :mod:`distgrail.indexblocks`. Through HDF5 a dataset is written by one thread's
copy, after a cast of the whole array to its stored type (a second copy) and with its checksums
a third pass over memory. Here HDF5 creates the dataset exactly as ``create_dataset(data=...)``
does (contiguous, no filter, storage allocated at the first write, no fill value written) and
writes its first bytes, which allocates the storage; :meth:`BlockWrites.write` finds the
dataset's offset in the file (``Dataset.id.get_offset()``), allocates its range at once
(:func:`_reserve`), maps that range into memory (one shared, writable ``mmap`` of the file per
dataset, through a descriptor of its own) and hands every ``crc32_block`` bytes of it to a thread
pool: cast that block of the source array to the stored type (a view between integer types of
one size), copy its bytes into the mapping (a NumPy copy between two uint8 arrays) and take
``zlib.crc32`` of them. The file is byte for byte the one HDF5 alone writes
(tests/test_indexwrite.py): the same header, the same blocks, the same checksums.

Why a mapping: on the GPU host (ext4, 32 cores) a probe writing 7.8 GB into a fresh,
allocated file got 4.0-4.35 GB/s from ``os.pwritev``, whether from 1 thread or 16 (ext4 takes the
inode's lock for every buffered write, so the writes run one at a time), and 8.1-9.0 GB/s from
copies into one shared mapping of the file from 8-16 threads (2.7 GB/s from 1 thread). The
copies run at once only because NumPy releases the GIL while it copies: slice assignment on
the ``mmap`` object itself copies with the GIL held, and an earlier mapping writer that (most
likely) did so was slower than ``pwritev`` (3.6 s against 1.9 s for 7.6 GB). So every copy here
is ``np.copyto`` between contiguous uint8 arrays (:func:`_copy`), run by the pool's threads.

The mapping is used only where ``posix_fallocate`` really allocated the range: stores into a
mapped page of a file whose blocks are not allocated would meet a full disk as SIGBUS, which
kills the process; allocated first, a full disk is an ``ENOSPC`` from the allocation, before any
byte is written. Where the file system cannot allocate ahead (``posix_fallocate`` missing, or
failing with ``EOPNOTSUPP``, ``EINVAL``) or the ``mmap`` fails, that dataset's blocks are
``os.pwritev``'d at their offset instead (as all were before; :data:`USE_MMAP` False, or
``BlockWrites(..., use_mmap=False)``, forces it for tests and the write benchmark). No ``msync``:
the mapped pages are the page cache's, the same that HDF5's own writes through its descriptor
land in, and HDF5 closes the file afterwards as before.

HDF5 never writes these bytes again: its first write is larger than its sieve buffer (so it goes
straight to the file, leaving nothing cached to flush later), and the default fill value is
never written. The pool's writes end before the file is closed (their CRCs are needed for the
attributes); a failed write (``ENOSPC``, ``EIO``) raises its OSError from the CRC's future, which
:class:`distgrail.io.atomic.atomic_path` turns into the usual ``OutputError``, the temporary file
removed, after :meth:`BlockWrites.__exit__` cancelled the blocks not yet started, waited for the
running ones and only then unmapped the mappings (a running copy holds a view of its mapping,
and ``mmap.close`` refuses while one is held; the raw ``munmap`` under a copy would crash the
process) and closed the descriptor.

Datasets below :data:`distgrail.indexblocks.PARALLEL_MIN_BYTES`, and any of a stored type other
than little-endian integers, are written by HDF5.

A :class:`StreamedArray` (a partitioned build's DAG rows, held by the ranks that built them) is
never whole in this process: :func:`write_streamed` writes its pieces as they arrive, in order,
each through HDF5 at its place, and takes the CRC-32 of every ``crc32_block`` bytes across the
pieces' edges (``zlib.crc32`` carried on); the file is the same, byte for byte.
"""

from __future__ import annotations

import errno
import mmap
import os
import zlib

import numpy as np

from . import indexblocks

__all__ = ["BlockWrites", "can_write_in_blocks", "as_type", "StreamedArray", "write_streamed"]

#: at least this many first bytes of a dataset are written by HDF5 (and again, the same, by the pool)
PREFIX_BYTES = 1 << 20

#: copy the blocks into a shared mapping of the file where its range was allocated ahead; False:
#: ``os.pwritev`` them always (read when a :class:`BlockWrites` is made; tests and the benchmark)
USE_MMAP = True


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


def _block_bytes(flat: np.ndarray, t: np.dtype, start: int, stop: int) -> np.ndarray:
    """The stored bytes [start, stop) of ``flat`` stored as ``t``: its elements that hold them
    cast to ``t``, as a contiguous uint8 array."""
    s = t.itemsize
    e0 = start // s
    cast = as_type(flat[e0:-(-stop // s)], t)
    return np.ascontiguousarray(cast).view(np.uint8)[start - e0 * s:stop - e0 * s]


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """Copy ``src`` into ``dst`` (uint8, contiguous, one length): NumPy releases the GIL while it
    copies, so the pool's copies into a mapping run at once."""
    np.copyto(dst, src)


class _Mapping:
    """A shared, writable mapping of ``nbytes`` of the file open as ``fd`` from offset ``at``
    (mapped from the page below it); ``dst`` those bytes, a uint8 array."""

    def __init__(self, fd, at: int, nbytes: int):
        base = at - at % mmap.ALLOCATIONGRANULARITY
        self.mm = mmap.mmap(fd, at + nbytes - base, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                            offset=base)
        self.dst = np.frombuffer(self.mm, np.uint8)[at - base:]

    def close(self) -> None:
        """Unmap (the views dropped first: an exported buffer makes ``mmap.close`` refuse)."""
        self.dst = None
        try:
            self.mm.close()
        except BufferError:  # pragma: no cover - a view still held elsewhere: unmapped when it goes
            pass


def _write_block(dst, flat: np.ndarray, t: np.dtype, at: int, start: int, stop: int) -> int:
    """Cast the elements of ``flat`` that hold stored bytes [start, stop) to ``t`` and write those
    bytes at ``at + start`` of the file: copied into the dataset's :class:`_Mapping` ``dst``, or
    ``os.pwritev``'d through descriptor ``dst``; their CRC-32."""
    src = _block_bytes(flat, t, start, stop)
    if isinstance(dst, _Mapping):
        try:
            _copy(dst.dst[start:stop], src)
        except BaseException as e:  # its traceback's frames would hold views of the mapping, and
            raise e.with_traceback(None)  # keep it from being unmapped while the error lives
        return zlib.crc32(src)
    view = memoryview(src)
    done = 0
    while done < len(view):
        k = os.pwritev(dst, [view[done:]], at + start + done)
        if k <= 0:
            raise OSError(errno.EIO, "write wrote nothing")
        done += k
    return zlib.crc32(view)


def _reserve(fd, at: int, nbytes: int) -> bool:
    """Allocate the dataset's blocks in the file at once (``posix_fallocate``, within the space
    HDF5 allocated); whether that was done. The block writes then neither extend the file nor
    reserve delayed blocks one page at a time (ext4: 1.5 GB written in 4 MiB blocks took 0.44 s
    instead of 0.54-1.4 s on this machine), a full disk is seen before any byte is written (it
    raises), and the range may be written through a mapping. Where the file system cannot
    allocate ahead, nothing is done (False)."""
    if not hasattr(os, "posix_fallocate"):
        return False
    try:
        os.posix_fallocate(fd, at, nbytes)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        return False
    return True


class BlockWrites:
    """Context manager over an HDF5 file being written at ``tmp``: :meth:`write` creates a dataset
    and queues its blocks on ``pool``, copied into a mapping of the file or, where the file
    cannot be mapped safely or ``use_mmap`` is False (default: :data:`USE_MMAP`), ``os.pwritev``'d.
    Leaving it waits for every block (cancelling those not started when an error is leaving),
    then unmaps the mappings and closes the descriptor; leave it before the file closes."""

    def __init__(self, tmp, pool, use_mmap: bool | None = None):
        self.tmp, self.pool = tmp, pool
        self.use_mmap = USE_MMAP if use_mmap is None else bool(use_mmap)
        self.fd = None
        self.futures, self.maps = [], []

    def __enter__(self):
        return self

    def write(self, f, name, data: np.ndarray, t, block: int) -> list:
        """Create dataset ``name`` of file ``f`` for ``data`` stored as ``t`` and queue its writes;
        the futures of the CRC-32 of every ``block`` stored bytes (their write's error, if any)."""
        t = np.dtype(t)
        flat = np.ascontiguousarray(data).reshape(-1)
        ds = f.create_dataset(name, shape=data.shape, dtype=t, track_times=False)
        sieve = f.id.get_access_plist().get_sieve_buf_size()
        sel, n = _prefix(data.shape, t.itemsize, max(PREFIX_BYTES, 2 * sieve + 1))
        ds[sel] = as_type(flat[:n], t).reshape(_sel_shape(data.shape, sel))  # allocates the storage
        at = ds.id.get_offset()
        if at is None:  # pragma: no cover - HDF5 allocates contiguous storage at the first write
            raise OSError(errno.EIO, f"HDF5 gave dataset /{name} no storage")
        if self.fd is None:  # read and write: a shared writable mapping needs both
            self.fd = os.open(self.tmp, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        at, nbytes = int(at), int(flat.size) * t.itemsize
        dst = self.fd
        if _reserve(self.fd, at, nbytes) and self.use_mmap:
            try:
                dst = _Mapping(self.fd, at, nbytes)
            except (OSError, ValueError, OverflowError):
                pass  # not mappable here: written by os.pwritev
            else:
                self.maps.append(dst)
        futs = []
        for i in range(0, nbytes, block):  # each kept at once: __exit__ waits for all that started
            futs.append(self.pool.submit(_write_block, dst, flat, t, at, i, min(i + block, nbytes)))
            self.futures.append(futs[-1])
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
            # only once no block runs (not so when interrupted while waiting: then the mappings
            # and the descriptor stay open: a mapping goes with the last view of it, and the
            # descriptor's number must not be reused under a running os.pwritev)
            if all(x.done() for x in self.futures):
                maps, self.maps = self.maps, []
                for m in maps:
                    m.close()
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
