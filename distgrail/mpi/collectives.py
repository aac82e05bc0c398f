"""Buffer-based collectives for big arrays, in rounds that keep every MPI count below 2^31.

Big arrays travel as raw bytes (``Bcast``, ``Scatterv``, ``Gatherv``), in rounds of at most
:data:`CHUNK_BYTES`; only small headers (shapes, dtypes, names, statistics) are pickled.
"""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np

from .. import settings
from ..errors import DistGrailError
from .errors import mpi, run_shared

__all__ = ["CHUNK_BYTES", "byte_spans", "ROOT_SHARE", "split_counts", "dims_split", "root_share", "offsets", "bcast_array",
           "gather_rows", "scatter_rows", "bcast_dataclass"]

#: most bytes one collective call moves (below 2^31 so every MPI count and displacement fits)
CHUNK_BYTES = 1 << 30


def split_counts(total: int, parts: int) -> np.ndarray:
    """Contiguous split of ``total`` items over ``parts`` ranks; earlier ranks get the extra ones.

    >>> split_counts(5, 3).tolist(), split_counts(2, 4).tolist()
    ([2, 2, 1], [1, 1, 0, 0])
    """
    base, extra = divmod(int(total), int(parts))
    return np.array([base + (r < extra) for r in range(parts)], dtype=np.int64)


#: rank 0's share of the label dimensions against an even split (:func:`dims_split`; 1 = even:
#: a smaller share ran slower, docs/benchmarks.md "MPI: rank 0's share of the dimensions");
#: ``DISTGRAIL_ROOT_SHARE`` overrides it for other machines.
ROOT_SHARE = 1.0


def dims_split(d: int, ranks: int, share: float = ROOT_SHARE) -> np.ndarray:
    """Contiguous blocks of ``d`` dimensions over ``ranks`` ranks, in rank order, rank 0's
    smaller by ``share``. Rule: rank 0 takes ``floor(d / ranks * share)`` dimensions, but at
    least 1 (it keeps dimension 0, whose post-order ranks the index stores) and at most ``d``;
    ranks 1.. split the rest evenly, earlier ranks taking the extra ones (:func:`split_counts`).
    One rank takes all; ``d = 0`` gives zeros. Any split gives the same index: dimension i
    depends only on (seed, i) and the blocks are gathered in rank order.

    >>> dims_split(16, 2).tolist(), dims_split(8, 2, 0.8).tolist(), dims_split(16, 2, 0.8).tolist()
    ([8, 8], [3, 5], [6, 10])
    >>> dims_split(5, 3, 1.0).tolist(), dims_split(1, 3).tolist(), dims_split(7, 1, 0.1).tolist()
    ([1, 2, 2], [1, 0, 0], [7])
    """
    d, ranks, share = int(d), int(ranks), float(share)
    if d < 0 or ranks < 1 or not (math.isfinite(share) and share >= 0):
        raise DistGrailError(f"dims_split: need d >= 0, ranks >= 1 and a finite share >= 0, got {d}, {ranks}, {share}")
    if ranks == 1 or d == 0:
        return np.array([d] + [0] * (ranks - 1), dtype=np.int64)
    first = min(d, max(1, math.floor(d * share / ranks + 1e-9)))  # + 1e-9: 0.1 + 0.2 style rounding
    return np.concatenate(([first], split_counts(d - first, ranks - 1))).astype(np.int64)


def root_share() -> float:
    """``DISTGRAIL_ROOT_SHARE`` (a number >= 0), or :data:`ROOT_SHARE` when it is not set."""
    return settings.get("DISTGRAIL_ROOT_SHARE")


def offsets(counts) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)


# -- buffer-based transfers (chunked) ----------------------------------------------------------

def _bytes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


def receive_buffer(shape, dtype) -> np.ndarray:
    """A fresh array to receive into (the one place collectives allocate: tests inject failures here)."""
    return np.empty(shape, dtype=np.dtype(dtype))


def byte_spans(nbytes: int, chunk_bytes: int | None = None):
    """``(lo, hi)`` byte ranges of one collective call each: at most ``chunk_bytes`` (default
    :data:`CHUNK_BYTES`, read at the call; below 2^31, so every MPI count and displacement fits
    an int).

    >>> byte_spans(10, 4), byte_spans(0, 4)
    ([(0, 4), (4, 8), (8, 10)], [])
    """
    from ..gpu.memory import pieces

    return pieces(nbytes, chunk_bytes or CHUNK_BYTES)


def bcast_array(comm, a, root: int = 0, chunk_bytes: int | None = None) -> np.ndarray:
    """Collective: ``a`` from ``root`` on every rank (header pickled, data by ``Bcast`` in calls
    of at most ``chunk_bytes``)."""
    MPI = mpi()
    me = comm.Get_rank()
    if me == root:
        a = np.ascontiguousarray(a)
        head = (a.shape, a.dtype.str)
    else:
        head = None
    shape, dt = comm.bcast(head, root=root)
    got = run_shared(comm, f"allocating {np.dtype(dt).name} {tuple(shape)} to receive a broadcast",
                     receive_buffer if me != root else None, shape, dt)
    if me != root:
        a = got
    b = _bytes(a)
    for lo, hi in byte_spans(b.size, chunk_bytes):
        comm.Bcast([b[lo:hi], MPI.BYTE], root=root)
    return a


def gather_rows(comm, block: np.ndarray, counts, out=None, root: int = 0, chunk_bytes: int | None = None):
    """Collective: concatenate every rank's ``block`` along axis 0, in rank order, into ``out`` on root.

    ``counts[r]`` is rank r's number of rows, known on every rank; ``out`` (root only) must be a
    C-contiguous array of ``sum(counts)`` rows of the blocks' row shape and dtype. Rounds of at
    most ``chunk_bytes`` in all.
    """
    MPI = mpi()
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    me, size = comm.Get_rank(), comm.Get_size()
    block = np.ascontiguousarray(block)
    row = block.dtype.itemsize * int(np.prod(block.shape[1:], dtype=np.int64))
    nbytes = np.asarray(counts, dtype=np.int64) * row
    off = offsets(nbytes)
    mine = _bytes(block)
    dest = _bytes(out) if me == root else None
    if off[-1] <= chunk_bytes:  # the usual case: one call, straight into the result
        recv = [dest, nbytes.tolist(), off[:-1].tolist(), MPI.BYTE] if me == root else None
        comm.Gatherv([mine, MPI.BYTE], recv, root=root)
        return out
    piece = max(1, chunk_bytes // size)
    for lo in range(0, int(nbytes.max()), piece):
        c = np.clip(nbytes - lo, 0, piece)
        d = offsets(c)
        tmp = np.empty(int(d[-1]), np.uint8) if me == root else None
        recv = [tmp, c.tolist(), d[:-1].tolist(), MPI.BYTE] if me == root else None
        comm.Gatherv([mine[lo:lo + int(c[me])], MPI.BYTE], recv, root=root)
        if me == root:
            for r in range(size):
                dest[off[r] + lo:off[r] + lo + c[r]] = tmp[d[r]:d[r + 1]]
    return out


def scatter_rows(comm, a, counts, row_shape, dtype, root: int = 0, chunk_bytes: int | None = None) -> np.ndarray:
    """Collective: rank r receives rows ``offsets[r]:offsets[r+1]`` of root's array ``a`` (rounds
    of at most ``chunk_bytes`` in all)."""
    MPI = mpi()
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    me, size = comm.Get_rank(), comm.Get_size()
    dtype = np.dtype(dtype)
    row = dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
    nbytes = np.asarray(counts, dtype=np.int64) * row
    off = offsets(nbytes)
    block = run_shared(comm, "allocating a shard", receive_buffer, (int(counts[me]),) + tuple(row_shape), dtype)
    mine = _bytes(block)
    src = _bytes(np.ascontiguousarray(a, dtype=dtype)) if me == root else None
    if off[-1] <= chunk_bytes:
        send = [src, nbytes.tolist(), off[:-1].tolist(), MPI.BYTE] if me == root else None
        comm.Scatterv(send, [mine, MPI.BYTE], root=root)
        return block
    piece = max(1, chunk_bytes // size)
    for lo in range(0, int(nbytes.max()), piece):
        c = np.clip(nbytes - lo, 0, piece)
        d = offsets(c)
        send = None
        if me == root:
            tmp = np.empty(int(d[-1]), np.uint8)
            for r in range(size):
                tmp[d[r]:d[r + 1]] = src[off[r] + lo:off[r] + lo + c[r]]
            send = [tmp, c.tolist(), d[:-1].tolist(), MPI.BYTE]
        comm.Scatterv(send, [mine[lo:lo + int(c[me])], MPI.BYTE], root=root)
    return block


def bcast_dataclass(comm, obj, cls, root: int = 0, skip=()):
    """Collective: a dataclass instance from ``root`` on every rank. Its NumPy-array fields go by
    :func:`bcast_array`; the other fields (ints, dicts, strings) are pickled. Fields named in
    ``skip`` are not sent: they are None on the other ranks."""
    me = comm.Get_rank()
    if me == root:
        names = [f.name for f in fields(cls) if f.name not in skip]
        arrays = [k for k in names if isinstance(getattr(obj, k), np.ndarray)]
        head = (arrays, {k: getattr(obj, k) for k in names if k not in arrays})
    else:
        head = None
    arrays, rest = comm.bcast(head, root=root)
    got = {k: bcast_array(comm, getattr(obj, k) if me == root else None, root) for k in arrays}
    return obj if me == root else cls(**got, **rest, **{k: None for k in skip})
