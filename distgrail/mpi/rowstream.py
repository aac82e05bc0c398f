"""A spread DAG's rows streamed into rank 0's index file: no rank, and no host, holds all edges.

When the condensed DAG stays spread over the ranks (:mod:`distgrail.mpi.partition_dag`) and rank
0 writes the index, ``/dag/indices`` is a :class:`~distgrail.indexfile.write.StreamedArray` on rank 0
(:func:`rows_stream`): while the file is written, rank 0 takes its own rows from its device in
pieces of at most :data:`PIECE_BYTES`, then asks rank 1, 2, … in turn for theirs; each rank
(:func:`serve_rows`) waits for that one request and answers with its rows from its device, a
header (``("ok", values)``) before each piece and ``("end",)`` after the last, or ``("error",
text)``. At any time one piece is on rank 0's host (in one buffer, allocated before any rank is
asked) and one on the sender's. Rank 0 writes each piece at its place
(:func:`~distgrail.indexfile.write.write_streamed`) and the file is byte for byte that of a
one-process build.

Never a hang: when rank 0's write fails (a full disk, a bad piece), ``close(True)`` receives and
drops what the rank it was reading from still sends up to its end marker, and then, whatever
happened, tells every rank not yet asked to stop;
a rank that cannot send (its device copy failed) sends its error in the header, which fails rank
0's write with the rank named. Every rank then leaves the step, where
:func:`~distgrail.mpi.errors.run_shared` shares the failure.

After the write, rank 0's index holds ``/dag/indices`` as a read-only memory map of the written
file (:func:`rows_on_file`; read instead where the file system cannot map it): queries that
need the DAG read it from the page cache, as an index opened with :func:`distgrail.open_index`
would.
"""

from __future__ import annotations

import numpy as np

from ..arrays import to_host as _host
from ..errors import DistGrailError
from ..indexfile import StreamedArray
from .errors import mpi

__all__ = ["PIECE_BYTES", "rows_stream", "serve_rows", "rows_on_file"]

#: the most bytes of rows in one message (and on one host at a time)
PIECE_BYTES = 256 << 20
_CMD, _HEAD, _DATA = 2424, 2425, 2426  # rank 0's request; a piece's header; its values


def _step(dt) -> int:
    return max(1, PIECE_BYTES // np.dtype(dt).itemsize)


def rows_stream(comm, be, own, counts) -> StreamedArray:
    """Rank 0: every rank's rows in rank order (``counts[r]`` values on rank r; ``own`` this
    rank's, on its device, of the type every rank's are) as a StreamedArray; every other rank is in
    :func:`serve_rows` meanwhile. Each sender's messages: per piece a header ``("ok", k)`` and
    its k values (tag of their own), then ``("end",)``; or ``("error", text)`` and nothing more.
    The pieces are received into one buffer of a piece, allocated before any rank is asked."""
    dt = np.dtype(own.dtype)
    counts = [int(c) for c in counts]
    size = comm.Get_size()
    step = _step(dt)
    # the rank being read (0: none yet), whether its "end"/"error" is still to come, a piece
    # announced and not yet received, the values received from it, the receive buffer
    state = {"asked": 0, "open": False, "pending": 0, "got": 0, "buf": None}

    def data(r, k):
        """The k values announced by rank r's last header (into the buffer, or dropped when
        they do not fit it: a sender that does not keep to the protocol)."""
        buf = state["buf"]
        if buf is None or k > buf.size:
            st = mpi().Status()
            comm.Probe(source=r, tag=_DATA, status=st)
            comm.Recv(np.empty(st.Get_count(mpi().BYTE), np.uint8), source=r, tag=_DATA)
            state["pending"] = 0
            raise DistGrailError(f"rank {r} sent a piece of {k:,} DAG row values (at most {step:,} expected)")
        comm.Recv(buf[:k], source=r, tag=_DATA)
        state["pending"] = 0
        return buf[:k]

    def head(r):
        """The next header of rank r: a piece's values, or None at its end."""
        h = comm.recv(source=r, tag=_HEAD)
        if h[0] == "ok":
            state["pending"] = int(h[1])
            return data(r, int(h[1]))
        state["open"] = False
        if h[0] == "end":
            return None
        raise DistGrailError(f"rank {r} could not send its DAG rows: {h[1]}")

    def pieces():
        for lo in range(0, counts[0], step):
            with be.on_device():
                h = _host(own[lo:lo + step]).astype(dt, copy=False)
            yield h
        if size > 1:
            state["buf"] = np.empty(min(step, max(counts[1:])), dt)
        for r in range(1, size):
            state.update(asked=r, open=True, got=0)
            comm.send("send", dest=r, tag=_CMD)
            while (piece := head(r)) is not None:
                state["got"] += piece.size
                if state["got"] > counts[r]:
                    raise DistGrailError(f"rank {r} sent more than its {counts[r]:,} DAG row values")
                yield piece
            if state["got"] != counts[r]:
                raise DistGrailError(f"rank {r} sent {state['got']:,} of its {counts[r]:,} DAG row values")

    def close(failed):
        r = state["asked"]
        try:
            if state["pending"]:  # a piece announced, not received: taken and dropped
                data(r, state["pending"])
            while state["open"]:  # the rank being read sends on to its end: taken and dropped
                head(r)
        except DistGrailError:
            pass
        finally:
            for q in range(r + 1, size):
                comm.send("stop", dest=q, tag=_CMD)
            state.update(asked=size, open=False, buf=None)

    return StreamedArray(sum(counts), dt, pieces, close)


def serve_rows(comm, be, own) -> None:
    """Every rank but 0, while rank 0 writes: wait for rank 0's request, then send ``own`` (this
    rank's rows, on its device) in pieces and the end; a failure is sent to rank 0, then raised."""
    if comm.recv(source=0, tag=_CMD) != "send":
        return
    dt = np.dtype(own.dtype)
    step = _step(dt)
    for lo in range(0, int(own.shape[0]), step):
        try:
            with be.on_device():
                h = np.ascontiguousarray(_host(own[lo:lo + step]).astype(dt, copy=False))
        except Exception as e:
            comm.send(("error", f"{type(e).__name__}: {e}"), dest=0, tag=_HEAD)
            raise
        comm.send(("ok", int(h.size)), dest=0, tag=_HEAD)
        comm.Send(h, dest=0, tag=_DATA)
    comm.send(("end",), dest=0, tag=_HEAD)


def rows_on_file(path, name: str = "dag/indices"):
    """Dataset ``name`` of the index just written at ``path``: a read-only memory map of its bytes
    (contiguous, unfiltered, as the writer stores it), or the values read when it has none."""
    import h5py

    with h5py.File(path, "r") as f:
        ds = f[name]
        at = ds.id.get_offset() if ds.size and ds.chunks is None and ds.compression is None else None
        if at is not None:
            try:
                return np.memmap(path, dtype=ds.dtype, mode="r", offset=int(at), shape=ds.shape)
            except (OSError, ValueError):  # a file system that cannot map: the values read
                pass
        return ds[()]
