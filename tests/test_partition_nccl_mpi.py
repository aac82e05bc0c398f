"""The partitioned build's exchange GPU to GPU (distgrail/mpi/exchange.py, NcclExchange).

CI has no GPU: under MPI (-n 2, -n 3) a stand-in for ``cupy.cuda.nccl`` moves the bytes at the
addresses it is given by MPI (sends and receives of a group matched in order per peer, as NCCL
matches them), so the exchange's own logic — pieces, pairing, dtypes — is
checked against MpiExchange (OR: a ring of sends with the ORs on the device), and a spread build through it is byte-identical to one process's.
On a GPU the same calls go through a real one-rank NCCL communicator on CuPy arrays (ranks
sharing one GPU cannot form an NCCL communicator; no machine with two GPUs was lent)."""

from __future__ import annotations

import ctypes
import os
from collections import Counter

import numpy as np
import pytest

from distgrail.mpi import exchange
from test_partition import same_as_one_process_and_bfs, written_mpi_graphs
from test_parse_mpi import shared_dir  # noqa: F401 - the fixture: a directory every rank sees

_TYPES = {"NCCL_INT8": "i1", "NCCL_UINT8": "u1", "NCCL_INT32": "i4", "NCCL_UINT32": "u4", "NCCL_INT64": "i8",
          "NCCL_UINT64": "u8", "NCCL_FLOAT16": "f2", "NCCL_FLOAT32": "f4", "NCCL_FLOAT64": "f8"}


def _at(ptr, count, dt):
    """The ``count`` values of type ``dt`` at address ``ptr``, as a writable NumPy array."""
    dt = np.dtype(dt)
    if not count:
        return np.zeros(0, dt)
    return np.ctypeslib.as_array((ctypes.c_uint8 * (count * dt.itemsize)).from_address(ptr)).view(dt)


class FakeNccl:
    """``cupy.cuda.nccl`` and an ``NcclCommunicator`` in one, over MPI on host memory."""

    def __init__(self, comm):
        from mpi4py import MPI

        self.MPI, self.comm = MPI, comm.Dup()
        for k, v in _TYPES.items():
            setattr(self, k, v)
        self.NCCL_SUM, self.NCCL_MAX, self.NCCL_MIN = MPI.SUM, MPI.MAX, MPI.MIN
        self.group, self.calls = None, Counter()

    def groupStart(self):
        self.group = []

    def groupEnd(self):
        ops, self.group = self.group, None
        reqs = [self.comm.Isend(_at(p, k, "u1"), dest=peer, tag=7) if kind == "send" else
                self.comm.Irecv(_at(p, k, "u1"), source=peer, tag=7) for kind, p, k, peer in ops if k]
        self.MPI.Request.Waitall(reqs)

    def send(self, ptr, nbytes, dt, peer, stream):
        self.calls["send"] += 1
        self.group.append(("send", ptr, nbytes * np.dtype(dt).itemsize, peer))

    def recv(self, ptr, nbytes, dt, peer, stream):
        self.calls["recv"] += 1
        self.group.append(("recv", ptr, nbytes * np.dtype(dt).itemsize, peer))

    def allReduce(self, sp, rp, count, dt, op, stream):
        self.calls["allReduce"] += 1
        self.comm.Allreduce(_at(sp, count, dt), _at(rp, count, dt), op=op)

    def bcast(self, ptr, nbytes, dt, root, stream):
        self.calls["bcast"] += 1
        self.comm.Bcast(_at(ptr, nbytes, dt), root=root)

    def allGather(self, sp, rp, count, dt, stream):
        self.calls["allGather"] += 1
        self.comm.Allgather(_at(sp, count, dt), _at(rp, count * self.comm.size, dt))


def _fake_exchange(comm):
    from distgrail.gpu.backend import get_backend
    from distgrail.mpi.transport import NcclTransport

    fake = FakeNccl(comm)
    tp = NcclTransport(comm, get_backend("cpu"), fake, nc=fake)
    return exchange.NcclExchange(comm, np, tp), fake


def _inputs(rank):
    rng = np.random.default_rng(11 + rank)
    return {"i64": rng.integers(-50, 50, 1001), "u8": rng.integers(0, 256, 77).astype(np.uint8),
            "bool": rng.random(333) < 0.1, "i32": rng.integers(0, 9, (5, 7)).astype(np.int32)}


@pytest.mark.mpi(min_size=2)
def test_nccl_exchange_equals_the_host_exchange_in_small_pieces(monkeypatch):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    monkeypatch.setattr(exchange, "CHUNK_BYTES", 24)  # every call in many pieces
    nx, fake = _fake_exchange(comm)
    hx = exchange.MpiExchange(comm, np)
    got = _inputs(comm.rank)
    for name, a in got.items():
        for op in (("sum",) if a.dtype != bool else ()) + ("max", "min") + (("bor",) if a.dtype.kind == "u" else ()):
            # a uint8 sum that overflows is the MPI library's own (Open MPI saturates, MPICH and NCCL
            # wrap): summed, the values are quartered, so up to 4 ranks stay below 256
            x = a >> 2 if op == "sum" and a.dtype == np.uint8 else a
            want = hx.allreduce(x.view(np.uint8) if x.dtype == bool else x, op).view(x.dtype)  # (MPI: no bool MAX)
            out = nx.allreduce(x, op)
            assert out.dtype == x.dtype and out.shape == x.shape, (name, op)
            np.testing.assert_array_equal(out, want, err_msg=f"{name} {op}")
    assert fake.calls["allReduce"] > 100  # 24-byte pieces
    rng = np.random.default_rng(comm.rank)
    sizes = [int(rng.integers(1, 40)) for j in range(comm.size)]
    if comm.size > 2:
        sizes[(comm.rank + 1) % comm.size] = 0  # an empty part
    parts = [np.arange(k, dtype=np.int64) + 1000 * comm.rank + 100 * j for j, k in enumerate(sizes)]
    want = hx.alltoall([p.copy() for p in parts])
    box = list(parts)
    out = nx.alltoall(box)
    assert box == [] and out.dtype == np.int64
    np.testing.assert_array_equal(out, want)
    assert fake.calls["send"] > comm.size and fake.calls["recv"] > comm.size
    for a in (got["i64"][: 10 * comm.rank], got["bool"]):
        np.testing.assert_array_equal(nx.allgather(a), hx.allgather(a))
        g = nx.gather(a)
        assert (g is None) == (comm.rank != 0)
        if g is not None:
            np.testing.assert_array_equal(g, hx.gather(a))
        else:
            hx.gather(a)
        np.testing.assert_array_equal(nx.bcast(a if comm.rank == 0 else None), hx.bcast(a))


@pytest.mark.mpi(min_size=2)
def test_allgather_with_counts_and_bcast_from_equal_the_host_exchange():
    """With every rank's counts known (kahn_levels' one size exchange a level) the allgather is
    one ncclAllGather of blocks padded to the largest, cut back in rank order: equal to MPI's,
    with empty blocks, with every block empty and with blocks of one size (sent as they are, the
    peel's equal blocks); bcast_from gives any rank's array to all."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    nx, fake = _fake_exchange(comm)
    hx = exchange.MpiExchange(comm, np)
    for k in (0, 3 * comm.rank, 7 + comm.rank, 1 if comm.rank == comm.size - 1 else 0, 5, 1):
        a = np.arange(k, dtype=np.int64) * 10 + comm.rank
        counts = nx.counts(a.size)
        assert counts == hx.counts(a.size) and len(counts) == comm.size
        before = fake.calls["allGather"]
        out = nx.allgather(a, counts)
        assert out.dtype == np.int64
        np.testing.assert_array_equal(out, hx.allgather(a, counts))
        assert fake.calls["allGather"] == before + (max(counts) > 0)
    for root in range(comm.size):
        mine = np.full((2, 3), root, np.uint64) if comm.rank == root else None
        got = nx.bcast_from(mine, root)
        want = hx.bcast_from(mine, root)
        np.testing.assert_array_equal(got, np.full((2, 3), root, np.uint64))
        np.testing.assert_array_equal(want, got)


@pytest.mark.mpi(min_size=2)
def test_ring_or_equals_the_host_or(monkeypatch):
    """OR has no NCCL op: a ring of sends and receives (reduce-scatter, then allgather) with the
    ORs on the device, equal to MPI's BOR for bytes, words, booleans, arrays shorter than the ranks
    (empty pieces) and empty ones; no allReduce, 2 (N - 1) grouped steps."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    monkeypatch.setattr(exchange, "CHUNK_BYTES", 5)  # every piece in several sends
    nx, fake = _fake_exchange(comm)
    hx = exchange.MpiExchange(comm, np)
    rng = np.random.default_rng(5 + comm.rank)
    cases = [rng.integers(0, 256, 77).astype(np.uint8), rng.integers(0, 2**63, (5, 3)).astype(np.uint64),
             rng.random(333) < 0.05, np.array([1 << comm.rank], np.uint8), np.zeros(0, np.uint64)]
    for a in cases:
        before = Counter(fake.calls)
        out = nx.allreduce(a, "bor")
        want = hx.allreduce(a.view(np.uint8) if a.dtype == bool else a, "bor").view(a.dtype)
        assert out.dtype == a.dtype and out.shape == a.shape
        np.testing.assert_array_equal(out, want)
        assert fake.calls["allReduce"] == before["allReduce"]
        if a.nbytes >= 5 * comm.size * comm.size:
            assert fake.calls["send"] - before["send"] >= 2 * (comm.size - 1)
    assert int(nx.allreduce(np.array([1 << comm.rank], np.uint8), "bor")[0]) == (1 << comm.size) - 1


@pytest.mark.mpi(min_size=2)
def test_spread_build_through_the_nccl_exchange_is_byte_identical(shared_dir, monkeypatch):  # noqa: F811
    """The whole partitioned build, DAG spread, its exchanges through NcclExchange (the stand-in
    NCCL): the same index file as one process, exact answers, ``exchange: nccl`` reported."""
    from mpi4py import MPI

    import distgrail
    from distgrail.mpi import partition

    comm = MPI.COMM_WORLD
    monkeypatch.setenv("DISTGRAIL_PARTITION_DAG", "ranks")
    monkeypatch.setenv("DISTGRAIL_PARTITION_GATHER", "0")
    monkeypatch.setattr(exchange, "CHUNK_BYTES", 64)
    made = []

    def fake_for(comm_, xp, tp, ok):
        ex, fake = _fake_exchange(comm_)
        made.append(fake)
        return ex

    monkeypatch.setattr(partition, "exchange_for", fake_for)
    for name, path, nv in written_mpi_graphs(comm, shared_dir)[:6]:
        out = os.path.join(shared_dir, f"{name}.nccl.h5")
        idx = distgrail.build_index(path, dims=3, comm=comm, partition="on", backend="cpu", output=out,
                                    num_vertices=nv, supports="auto")
        assert [r["exchange"] for r in idx.meta["partition"]] == ["nccl"] * comm.size
        if comm.rank == 0:
            same_as_one_process_and_bfs(idx, path, nv, out, os.path.join(shared_dir, f"{name}.nccl.one.h5"),
                                        supports="auto")
        comm.Barrier()
    assert sum(f.calls["allReduce"] for f in made) > 0 and sum(f.calls["send"] for f in made) > 0


def test_exchange_for_picks_nccl_only_over_an_nccl_transport(monkeypatch):
    from types import SimpleNamespace

    assert exchange.exchange_for(_Comm(), np, SimpleNamespace(name="mpi"), True).name == "mpi"
    tp = SimpleNamespace(name="nccl", usable=True)
    assert exchange.exchange_for(_Comm(), np, tp, True).name == "nccl"
    assert exchange.exchange_for(_Comm(), np, tp, False).name == "mpi"
    for v, want in (("0", False), ("off", False), ("", True), ("1", True)):
        monkeypatch.setenv("DISTGRAIL_PARTITION_NCCL", v)
        assert exchange.partition_nccl_wanted() is want


class _Comm:
    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1


@pytest.mark.gpu
def test_nccl_exchange_on_a_gpu_with_one_rank():
    """A real one-rank NCCL communicator on CuPy arrays: allReduce, the grouped all-to-all (no
    peer: the own part copied), gather and broadcast through the transport, in small pieces."""
    cp = pytest.importorskip("cupy")
    from cupy.cuda import nccl
    from mpi4py import MPI

    from distgrail.gpu.backend import get_backend
    from distgrail.mpi.transport import NcclTransport

    be = get_backend("gpu")
    with be.on_device():
        nc = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
        tp = NcclTransport(MPI.COMM_SELF, be, nccl, nc=nc)
        nx = exchange.NcclExchange(MPI.COMM_SELF, cp, tp)
        try:
            for name, a in _inputs(0).items():
                d = cp.asarray(a)
                for op in (("sum",) if a.dtype != bool else ()) + ("max", "min") + (("bor",) if a.dtype.kind == "u" else ()):
                    out = nx.allreduce(d, op)
                    assert isinstance(out, cp.ndarray) and out.dtype == d.dtype
                    np.testing.assert_array_equal(cp.asnumpy(out), a, err_msg=f"{name} {op}")
                np.testing.assert_array_equal(cp.asnumpy(nx.allgather(d.reshape(-1))), a.reshape(-1))
                np.testing.assert_array_equal(cp.asnumpy(nx.bcast(d)), a)
            parts = [cp.arange(1000, dtype=cp.int64)]
            np.testing.assert_array_equal(cp.asnumpy(nx.alltoall(parts)), np.arange(1000))
            assert parts == []
        finally:
            nc.destroy()
