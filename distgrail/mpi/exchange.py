"""The partitioned build's exchanges: :class:`MpiExchange` through host memory, and GPU to GPU
:class:`NcclExchange`, the exchange of
:mod:`distgrail.stages.partitioned_scc` and :mod:`distgrail.stages.partitioned_dag` over the
build's NCCL communicator (:class:`~distgrail.mpi.transport.NcclTransport`), chosen by
:func:`exchange_for` when the ranks' transport is NCCL (one GPU per rank) and
``DISTGRAIL_PARTITION_NCCL`` is not ``0``.

- ``allreduce`` (sum, max, min): ``ncclAllReduce`` on the device arrays, in calls of at most
  :data:`~distgrail.mpi.collectives.CHUNK_BYTES`; booleans travel as bytes. NCCL has no bitwise
  OR, so op ``"bor"`` (the packed presence and reach bitmaps, phase 5's mask words) is a ring of
  NCCL sends and receives (:meth:`NcclExchange._ring_or`): a reduce-scatter whose ORs run on the
  device, then an allgather; each rank sends 2 (N - 1) / N of the bytes, as an allreduce does.
  Through host memory each call was slower (trimming's bitmaps: docs/benchmarks.md).
- ``alltoall`` (the DAG's rows routed to their owners): the sizes by MPI, then one NCCL group of
  sends and receives with every other rank, in pieces of at most ``CHUNK_BYTES``; the own part
  copied on the device.
- ``gather``, ``bcast``, ``bcast_from``, ``allgather``: the transport's NCCL ``gatherv`` and
  ``bcast`` (an allgather is a gather to rank 0 and a broadcast).

Headers (sizes, dtypes) go by MPI pickles; nothing comes back to the host but them.
"""

from __future__ import annotations

import numpy as np

from ..arrays import to_host as _host
from ..errors import DistGrailError
from .collectives import CHUNK_BYTES
from .errors import mpi
from .ncclinit import nccl_switch, pointer

__all__ = ["MpiExchange", "NcclExchange", "exchange_for", "partition_nccl_wanted"]

_OPS = {"sum": "NCCL_SUM", "max": "NCCL_MAX", "min": "NCCL_MIN"}
_TYPES = {"int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "bool": "NCCL_UINT8", "int32": "NCCL_INT32",
          "uint32": "NCCL_UINT32", "int64": "NCCL_INT64", "uint64": "NCCL_UINT64", "float16": "NCCL_FLOAT16",
          "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64"}


class MpiExchange:
    """The exchange of :mod:`distgrail.stages.partitioned_scc` over host MPI: device arrays go
    through host memory; calls of at most 1 GiB each."""

    PIECE = 1 << 30
    name = "mpi"

    def __init__(self, comm, xp):
        self.comm, self.xp = comm, xp
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.root = self.rank == 0

    def _dev(self, h):
        return h if self.xp is np else self.xp.asarray(h)

    def allreduce(self, a, op):
        MPI = mpi()
        h = np.ascontiguousarray(_host(a))
        out = np.empty_like(h)
        flat, res = h.reshape(-1), out.reshape(-1)
        step = max(1, self.PIECE // max(h.itemsize, 1))
        mop = {"max": MPI.MAX, "min": MPI.MIN, "sum": MPI.SUM, "bor": MPI.BOR}[op]
        for lo in range(0, max(flat.size, 1), step):
            self.comm.Allreduce(flat[lo:lo + step], res[lo:lo + step], op=mop)
        return self._dev(out)

    def gather(self, a):
        from .collectives import gather_rows

        h = np.ascontiguousarray(_host(a))
        counts = self.comm.allgather(int(h.shape[0]))
        out = np.empty((sum(counts),) + h.shape[1:], h.dtype) if self.root else None
        gather_rows(self.comm, h, counts, out, root=0)
        return None if out is None else (out if self.xp is np else self.xp.asarray(out))

    def bcast(self, a):
        from .collectives import bcast_array

        out = bcast_array(self.comm, _host(a) if self.root else None, 0)
        return out if self.xp is np else self.xp.asarray(out)

    def bcast_from(self, a, root: int):
        """Rank ``root``'s ``a`` (None on the others) on every rank (``root`` keeps its own)."""
        from .collectives import bcast_array

        out = bcast_array(self.comm, _host(a) if self.rank == root else None, root)
        return a if self.rank == root else self._dev(out)

    def agree(self, step: str, error) -> None:
        """Collective: ``error`` (an exception, or None) of any rank raised on every rank, as a
        :class:`~distgrail.mpi.errors.RankError` naming the rank and ``step``: a step that one
        rank runs while the others wait in the exchange after it."""
        from .errors import share_outcome

        share_outcome(self.comm, step, error)

    def counts(self, k: int) -> list:
        """Every rank's ``k`` (a host int), in rank order, on every rank."""
        return [int(c) for c in self.comm.allgather(int(k))]

    def allgather(self, a, counts=None):
        """Every rank's 1-D ``a`` concatenated in rank order, on every rank: one Allgatherv after
        the sizes (``counts``: every rank's, from :meth:`counts`, when the caller has them) when
        the result is at most :attr:`PIECE` bytes, else gathered to rank 0 and broadcast (both
        in calls of bounded size)."""
        from .collectives import bcast_array, gather_rows

        h = np.ascontiguousarray(_host(a))
        counts = self.counts(h.shape[0]) if counts is None else counts
        nbytes = [c * h.dtype.itemsize for c in counts]
        if sum(nbytes) <= self.PIECE:
            MPI = mpi()
            out = np.empty(sum(counts), h.dtype)
            displ = np.concatenate(([0], np.cumsum(nbytes)[:-1])).tolist()
            self.comm.Allgatherv([h.view(np.uint8).reshape(-1), MPI.BYTE], [out.view(np.uint8), nbytes, displ, MPI.BYTE])
            return self._dev(out)
        out = np.empty(sum(counts), h.dtype) if self.root else None
        gather_rows(self.comm, h, counts, out, root=0)
        return self._dev(bcast_array(self.comm, out, 0))

    def alltoall(self, parts):
        """``parts[j]`` (1-D, one dtype) to rank j; what this rank got, in rank order: each pair
        of ranks in nonblocking messages of at most :attr:`PIECE` bytes. ``parts`` is emptied
        once copied to the host."""
        MPI = mpi()
        hs = [np.ascontiguousarray(_host(p)) for p in parts]
        parts.clear()  # the device copies go back before what comes in is uploaded
        sizes = self.comm.alltoall([int(h.shape[0]) for h in hs])
        dt = hs[self.rank].dtype
        step = max(1, self.PIECE // max(dt.itemsize, 1))
        got = [np.empty(c, dt) for c in sizes]
        got[self.rank][...] = hs[self.rank]
        for s in range(1, self.size):
            to, frm = (self.rank + s) % self.size, (self.rank - s) % self.size
            reqs = [self.comm.Isend(hs[to][lo:lo + step], dest=to, tag=24) for lo in range(0, hs[to].shape[0], step)]
            reqs += [self.comm.Irecv(got[frm][lo:lo + step], source=frm, tag=24)
                     for lo in range(0, got[frm].shape[0], step)]
            MPI.Request.Waitall(reqs)
        return self._dev(np.concatenate(got))


def partition_nccl_wanted() -> bool:
    """False when ``DISTGRAIL_PARTITION_NCCL`` turns the partitioned exchanges' NCCL off."""
    return nccl_switch("DISTGRAIL_PARTITION_NCCL")


def exchange_for(comm, xp, tp, nccl_ok: bool):
    """The partitioned build's exchange: :class:`NcclExchange` over ``tp`` when it is an NCCL
    transport and ``nccl_ok`` (rank 0's :func:`partition_nccl_wanted`, the same on every rank),
    else :class:`MpiExchange`."""
    if nccl_ok and getattr(tp, "name", "") == "nccl" and tp.usable:
        return NcclExchange(comm, xp, tp)
    return MpiExchange(comm, xp)


class NcclExchange(MpiExchange):
    """MpiExchange's calls GPU to GPU through the NCCL transport ``tp`` (module doc)."""

    name = "nccl"
    #: the fewest heads of a peel block (:func:`~distgrail.stages.partitioned_dag.csr_levels`): GPU
    #: to GPU a message of 256 KiB costs about its latency, so narrow levels never send again
    peel_block = 1 << 16

    def __init__(self, comm, xp, tp):
        super().__init__(comm, xp)
        self.tp = tp

    def _go(self, nbytes: int = 0, mine: int | None = None) -> bool:
        """Collective: this call goes by NCCL (the transport's set-up joined, or still running
        and a call of few bytes taking the host path meanwhile: ``NcclTransport._by_nccl``)."""
        return self.tp._by_nccl(nbytes, mine)

    def _sync(self):
        self.tp.be.synchronize()

    def allreduce(self, a, op):
        nbytes = int(a.size) * np.dtype(a.dtype).itemsize * self.size  # (the same shape on every rank)
        if op == "bor" and self._go(nbytes):
            return self._ring_or(a)
        if op not in _OPS or not self._go(nbytes):
            return super().allreduce(a, op)
        nccl, nc, xp = self.tp.nccl, self.tp.nc, self.xp
        src = xp.ascontiguousarray(a)
        if src.dtype.name not in _TYPES:
            raise DistGrailError(f"NCCL allreduce of {src.dtype} is not supported")
        out = xp.empty_like(src)
        dt, isz = getattr(nccl, _TYPES[src.dtype.name]), src.dtype.itemsize
        step = max(1, CHUNK_BYTES // isz)
        stream = self.tp._stream()
        with self.tp.be.on_device():
            s0, r0 = (pointer(src), pointer(out)) if src.size else (0, 0)
            for lo in range(0, int(src.size), step):
                nc.allReduce(s0 + lo * isz, r0 + lo * isz, min(step, int(src.size) - lo), dt,
                             getattr(nccl, _OPS[op]), stream)
        self._sync()
        return out

    def _ring_or(self, a):
        """The bitwise OR of every rank's ``a`` (integers or booleans, the same shape everywhere):
        its bytes cut into N pieces; N - 1 steps of a ring (send to the next rank, receive from
        the previous one) leave each rank one piece ORed over all ranks, N - 1 more pass the
        pieces round. Every step is one NCCL group on the current stream, the ORs between them
        too: no host wait until the end."""
        xp, nccl, nc = self.xp, self.tp.nccl, self.tp.nc
        me, N = self.rank, self.size
        with self.tp.be.on_device():
            out = xp.ascontiguousarray(a).copy()
            flat = out.reshape(-1).view(xp.uint8)
            cut = [int(flat.size) * j // N for j in range(N + 1)]
            piece = [flat[cut[j]:cut[j + 1]] for j in range(N)]
            tmp = xp.empty(max(cut[j + 1] - cut[j] for j in range(N)), xp.uint8)
            nxt, prv = (me + 1) % N, (me - 1) % N
            u8, stream = nccl.NCCL_UINT8, self.tp._stream()

            def step(send, recv):
                nccl.groupStart()
                try:
                    _pieces(lambda p, k: nc.send(p, k, u8, nxt, stream), send)
                    _pieces(lambda p, k: nc.recv(p, k, u8, prv, stream), recv)
                finally:
                    nccl.groupEnd()

            for s in range(N - 1):  # reduce-scatter: piece (me - s - 1) gathers one more rank's bits
                j = (me - s - 1) % N
                got = tmp[:piece[j].size]
                step(piece[(me - s) % N], got)
                xp.bitwise_or(piece[j], got, out=piece[j])
            for s in range(N - 1):  # allgather: this rank's whole piece (me + 1 - s) goes round
                step(piece[(me + 1 - s) % N], piece[(me - s) % N])
        self._sync()
        return out

    def gather(self, a):
        return self.tp.gatherv(self.xp.ascontiguousarray(a), 0)

    def bcast(self, a):
        return self.tp.bcast(a if self.root else None, 0)

    def bcast_from(self, a, root: int):
        return self.tp.bcast(a if self.rank == root else None, root)

    def allgather(self, a, counts=None):
        """With every rank's ``counts``: one ``ncclAllGather`` of the blocks padded to the
        largest (no message to learn the sizes, one collective; blocks of one size go as they
        are), when that is at most ``CHUNK_BYTES``; else a gather to rank 0 and a broadcast."""
        xp = self.xp
        if counts is not None:
            dt = np.dtype(a.dtype)
            most = max(counts)
            if most * dt.itemsize * self.size <= CHUNK_BYTES and self._go(sum(counts) * dt.itemsize):
                if most == 0:
                    return xp.zeros(0, dtype=dt)
                nccl, nc = self.tp.nccl, self.tp.nc
                equal = min(counts) == most  # (blocks of one size: sent as they are, nothing cut out)
                with self.tp.be.on_device():
                    if equal:
                        send = xp.ascontiguousarray(a)
                    else:
                        send = xp.zeros(most, dtype=dt)
                        send[:int(a.shape[0])] = a
                    got = xp.empty((self.size, most), dtype=dt)
                    nc.allGather(pointer(send), pointer(got), most * dt.itemsize, nccl.NCCL_UINT8, self.tp._stream())
                    if equal:
                        out = got.reshape(-1)
                    else:
                        keep = xp.arange(most)[None, :] < xp.asarray(np.asarray(counts))[:, None]
                        out = got[keep]
                self._sync()
                return out
        out = self.tp.gatherv(xp.ascontiguousarray(a), 0)
        return self.tp.bcast(out if self.root else None, 0)

    def alltoall(self, parts):
        if not self._go(mine=sum(int(p.size) * np.dtype(p.dtype).itemsize for p in parts)):
            return super().alltoall(parts)
        xp, nccl, nc = self.xp, self.tp.nccl, self.tp.nc
        sizes = self.comm.alltoall([int(p.shape[0]) for p in parts])
        dt = np.dtype(parts[self.rank].dtype)
        with self.tp.be.on_device():
            send = [xp.ascontiguousarray(p) for p in parts]
            got = [xp.empty(int(c), dtype=dt) for c in sizes]
            u8, stream = nccl.NCCL_UINT8, self.tp._stream()
            nccl.groupStart()
            try:
                for s in range(1, self.size):
                    to, frm = (self.rank + s) % self.size, (self.rank - s) % self.size
                    _pieces(lambda p, k: nc.send(p, k, u8, to, stream), send[to])
                    _pieces(lambda p, k: nc.recv(p, k, u8, frm, stream), got[frm])
            finally:
                nccl.groupEnd()
            got[self.rank][...] = send[self.rank]
        self._sync()
        parts.clear()
        del send
        return xp.concatenate(got) if got else xp.zeros(0, dtype=dt)


def _pieces(call, a) -> None:
    """``call(address, nbytes)`` over ``a``'s bytes in pieces of at most CHUNK_BYTES."""
    nbytes = int(a.size) * a.dtype.itemsize
    base = pointer(a) if nbytes else 0
    for lo in range(0, nbytes, CHUNK_BYTES):
        call(base + lo, min(CHUNK_BYTES, nbytes - lo))
