"""A spread DAG's rows streamed into rank 0's index file: no rank, and no host, holds all edges.

When the condensed DAG stays spread over the ranks (:mod:`distgrail.mpi.partition_dag`) and rank
0 writes the index, ``/dag/indices`` is a :class:`~distgrail.indexwrite.StreamedArray` on rank 0
(:func:`rows_stream`): while the file is written, rank 0 takes its own rows from its device in
pieces of at most :data:`PIECE_BYTES`, then asks rank 1, 2, … in turn for theirs; each rank
(:func:`serve_rows`) waits for that one request and answers with its rows from its device, a
header (``("ok", values)`` or ``("error", text)``) before each piece. At any time one piece is on
rank 0's host and one on the sender's. Rank 0 writes each piece at its place
(:func:`~distgrail.indexwrite.write_streamed`) and the file is byte for byte that of a
one-process build.

Never a hang: when rank 0's write fails (a full disk, a bad piece), ``close(True)`` receives and
drops what the rank it was reading from still sends, and tells every rank not yet asked to stop;
a rank that cannot send (its device copy failed) sends its error in the header, which fails rank
0's write with the rank named. Every rank then leaves the step, where
:func:`~distgrail.mpi.errors.run_shared` shares the failure.

After the write, rank 0's index holds ``/dag/indices`` as a read-only memory map of the written
file (:func:`rows_on_file`): queries that need the DAG read it from the page cache, as an index
opened with :func:`distgrail.open_index` would.
"""

from __future__ import annotations

import numpy as np

from ..errors import DistGrailError
from ..indexwrite import StreamedArray

__all__ = ["PIECE_BYTES", "rows_stream", "serve_rows", "rows_on_file"]

#: the most bytes of rows in one message (and on one host at a time)
PIECE_BYTES = 256 << 20
_TAG = 2424


def _host(a):
    return a if isinstance(a, np.ndarray) else a.get()


def _step(dt) -> int:
    return max(1, PIECE_BYTES // np.dtype(dt).itemsize)


def rows_stream(comm, be, own, counts, dtype) -> StreamedArray:
    """Rank 0: every rank's rows in rank order (``counts[r]`` values on rank r; ``own`` this
    rank's, on its device) as a StreamedArray of ``dtype``; every other rank is in
    :func:`serve_rows` meanwhile."""
    dt = np.dtype(dtype)
    counts = [int(c) for c in counts]
    size = comm.Get_size()
    state = {"asked": 0, "left": 0}  # the rank being read (0: none yet), the values it still sends

    def take(r):
        head = comm.recv(source=r, tag=_TAG)
        if head[0] != "ok":
            state["left"] = 0
            raise DistGrailError(f"rank {r} could not send its DAG rows: {head[1]}")
        if not 0 < int(head[1]) <= state["left"]:
            left, state["left"] = state["left"], 0
            raise DistGrailError(f"rank {r} sent {head[1]} DAG row values with {left:,} to come")
        buf = np.empty(int(head[1]), dt)
        comm.Recv(buf, source=r, tag=_TAG)
        state["left"] -= buf.size
        return buf

    def pieces():
        step = _step(dt)
        for lo in range(0, counts[0], step):
            with be.on_device():
                h = _host(own[lo:lo + step]).astype(dt, copy=False)
            yield h
        for r in range(1, size):
            state["asked"], state["left"] = r, counts[r]
            comm.send("send", dest=r, tag=_TAG)
            while state["left"]:
                yield take(r)

    def close(failed):
        r = state["asked"]
        if failed:
            while state["left"]:  # the rank being read sends on: taken and dropped
                try:
                    take(r)
                except DistGrailError:
                    break
        for q in range(r + 1, size):
            comm.send("stop", dest=q, tag=_TAG)
        state["asked"] = size

    return StreamedArray(sum(counts), dt, pieces, close)


def serve_rows(comm, be, own, dtype) -> None:
    """Every rank but 0, while rank 0 writes: wait for rank 0's request, then send ``own`` (this
    rank's rows, on its device) in pieces; a failure is sent to rank 0, then raised."""
    if comm.recv(source=0, tag=_TAG) != "send":
        return
    dt = np.dtype(dtype)
    step = _step(dt)
    for lo in range(0, int(own.shape[0]), step):
        try:
            with be.on_device():
                h = np.ascontiguousarray(_host(own[lo:lo + step]).astype(dt, copy=False))
        except Exception as e:
            comm.send(("error", f"{type(e).__name__}: {e}"), dest=0, tag=_TAG)
            raise
        comm.send(("ok", int(h.size)), dest=0, tag=_TAG)
        comm.Send(h, dest=0, tag=_TAG)


def rows_on_file(path, name: str = "dag/indices"):
    """Dataset ``name`` of the index just written at ``path``: a read-only memory map of its bytes
    (contiguous, unfiltered, as the writer stores it), or the values read when it has none."""
    import h5py

    with h5py.File(path, "r") as f:
        ds = f[name]
        at = ds.id.get_offset() if ds.size and ds.chunks is None and ds.compression is None else None
        if at is None:
            return ds[()]
        dt, shape = ds.dtype, ds.shape
    return np.memmap(path, dtype=dt, mode="r", offset=int(at), shape=shape)
