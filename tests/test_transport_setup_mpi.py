"""NCCL set up in the background (distgrail.mpi.transport + distgrail.mpi.ncclinit), under MPI
(launch/test.sh runs these with mpiexec -n 2 and -n 3) with the fake NCCL of tests/test_transport.py.

``ncclCommInitRank`` and the warm-up run on a thread while the main thread goes on; the first
collective joins them; a failure there, on any rank, is every rank's error (never a hang, even
where the other ranks' set-up waits for the failed one: pytest-timeout guards every test).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import distgrail
from distgrail.mpi import placement as distributed
from distgrail.mpi import transport
from distgrail.mpi.errors import RankError
from test_distributed_mpi import cyclic_graph, everywhere, same_index
from test_transport import fake_cupy, fake_gpu_backend, fake_nccl, install
from test_transport_mpi import nccl_build

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]


def held_init(nccl):
    """Make the fake's ncclCommInitRank wait until the returned event is set (30 s at most);
    ``seen`` records whether the event was set when the init got going."""
    gate, seen = threading.Event(), []
    plain = nccl.NcclCommunicator

    class Held(plain):
        def __init__(self, *a):
            seen.append(gate.wait(30))
            super().__init__(*a)

    nccl.NcclCommunicator = Held
    return gate, seen


def test_transport_for_returns_while_ncclcomminitrank_still_runs(comm, wire, monkeypatch):
    """transport_for does not wait for ncclCommInitRank: it returns with the init held back on
    its thread; a transfer meanwhile goes through host memory; once joined, transfers go by NCCL."""
    nccl = fake_nccl(wire)
    cp = fake_cupy(nccl)
    install(monkeypatch, cp, nccl)
    monkeypatch.delenv("DISTGRAIL_NCCL", raising=False)
    monkeypatch.delenv("DISTGRAIL_NCCL_EARLY", raising=False)
    gate, seen = held_init(nccl)
    tp = transport.transport_for(comm, fake_gpu_backend(cp))
    me = comm.Get_rank()
    early = tp.bcast(np.arange(4, dtype=np.int32) + 7 if me == 0 else None)  # by MPI: NCCL is not up
    before = [e[0] for e in nccl.log]
    gate.set()
    tp.ready()
    got = tp.bcast(np.arange(5, dtype=np.int64) * 3 if me == 0 else None)
    t = tp.take_timings()
    everywhere(comm, tp.name == "nccl" and before == [] and seen == [True], f"{tp.name}, {before}, {seen}")
    everywhere(comm, early.tolist() == [7, 8, 9, 10] and got.tolist() == [0, 3, 6, 9, 12], f"{early} {got}")
    want = {"nccl_init", "nccl_warmup", "nccl_wait", "nccl_before_ready"}
    everywhere(comm, set(t) == want and min(t.values()) >= 0 and t["nccl_before_ready"] == 1.0, t)
    everywhere(comm, nccl.init_threads == ["distgrail-nccl-init"] and tp.take_timings() == {}, nccl.init_threads)
    # the warm-up (one broadcast, one grouped gather) ran on that thread before the first transfer
    kinds = [e[0] for e in nccl.log]
    warm = kinds[:kinds.index("bcast", 2)] if kinds.count("bcast") > 1 else kinds
    everywhere(comm, warm[:2] == ["init", "bcast"] and warm[-1] == "group" and kinds.count("bcast") == 2, kinds)


def test_a_large_transfer_waits_for_the_set_up(comm, wire, monkeypatch):
    """While ncclCommInitRank still runs, a transfer of at most EARLY_HOST_BYTES (every rank's
    bytes together) goes through host memory, a larger one waits for the set-up and goes by
    NCCL: the host path is slower for a graph's edges than the rest of the set-up (issue 42)."""
    nccl = fake_nccl(wire)
    cp = fake_cupy(nccl)
    install(monkeypatch, cp, nccl)
    monkeypatch.delenv("DISTGRAIL_NCCL", raising=False)
    monkeypatch.delenv("DISTGRAIL_NCCL_EARLY", raising=False)
    me, size = comm.Get_rank(), comm.Get_size()
    monkeypatch.setattr(transport, "EARLY_HOST_BYTES", 8 * size)
    gate, seen = held_init(nccl)
    tp = transport.transport_for(comm, fake_gpu_backend(cp))
    small = tp.bcast(np.arange(4, dtype=np.int32) if me == 0 else None)  # 16 bytes: host memory
    tiny = tp.gatherv(np.full(1, me, np.int64))  # 8 bytes a rank: host memory
    before = [e[0] for e in nccl.log]
    timer = threading.Timer(0.3, gate.set)
    timer.start()
    try:
        big = tp.gatherv(np.full((2, 2), me, np.int64))  # 32 bytes a rank: waits for the set-up
    finally:
        timer.join()
    t = tp.take_timings()
    everywhere(comm, before == [] and seen == [True] and t.get("nccl_before_ready") == 2.0, f"{before} {t}")
    # the big gather went by NCCL: rank 0 received each other rank's 32 bytes
    everywhere(comm, me != 0 or sum(e[:2] == ("recv", 32) for e in nccl.log) == size - 1, nccl.log)
    everywhere(comm, small.tolist() == list(range(4)), small)
    everywhere(comm, me != 0 or (tiny.tolist() == list(range(size))
                                 and big.reshape(-1).tolist() == [r for r in range(size) for _ in range(4)]),
               f"{tiny} {big}")


def test_with_early_wait_the_first_transfer_waits(comm, wire, monkeypatch):
    """DISTGRAIL_NCCL_EARLY=wait (rank 0's setting decides): no transfer through host memory."""
    nccl = fake_nccl(wire)
    monkeypatch.setenv("DISTGRAIL_NCCL_EARLY", "wait" if comm.Get_rank() == 0 else "host")
    tp, _ = transport.nccl_transport(comm, distgrail.get_backend("cpu"), nccl, background=True)
    got = tp.gatherv(np.full((2, 1), comm.Get_rank(), np.int16))
    t = tp.take_timings()
    everywhere(comm, tp.early == "wait" and "nccl_before_ready" not in t and "nccl_wait" in t, t)
    everywhere(comm, comm.Get_rank() != 0 or got.ravel().tolist() == [r for r in range(comm.Get_size()) for _ in "ab"],
               got)


@pytest.mark.parametrize("where", ["last", "first", "all"])
def test_a_failing_background_init_fails_every_rank(comm, wire, monkeypatch, where):
    """ncclCommInitRank fails on some ranks: the first transfer raises the same RankError on
    every rank, naming the lowest failing rank and its message; the ranks whose communicator
    came up abort it (their warm-up may wait for the failed rank: no rank waits forever)."""
    last = comm.Get_size() - 1
    bad = {"last": lambda r: r == last, "first": lambda r: r == 0, "all": lambda r: True}[where]
    nccl = fake_nccl(wire, fail_init=bad)
    cp = fake_cupy(nccl)
    install(monkeypatch, cp, nccl)
    tp, why = transport.nccl_transport(comm, fake_gpu_backend(cp), nccl, background=True)
    everywhere(comm, tp is not None and why is None, why)
    lowest = {"last": last, "first": 0, "all": 0}[where]
    with pytest.raises(RankError, match=f"rank {lowest}.*setting up NCCL.*ncclCommInitRank failed on rank "
                                        f"{lowest} \\(injected\\)"):
        tp.ready()  # or the first transfer after the failure
    me = comm.Get_rank()
    aborted = ("abort",) in nccl.log
    everywhere(comm, aborted != bad(me) and not tp.usable, f"aborted {aborted}, log {nccl.log}")
    got = transport.MpiTransport(comm, tp.be).gatherv(np.full((1, 2), me, np.int32))  # MPI still works
    everywhere(comm, me != 0 or got[:, 0].tolist() == list(range(comm.Get_size())), repr(got))


def test_waiting_for_the_init_falls_back_like_before(comm, wire, capsys):
    """nccl_transport without background waits for the set-up and, where it failed on some rank,
    gives (None, why) on every rank (the communicators that came up are aborted)."""
    last = comm.Get_size() - 1
    nccl = fake_nccl(wire, fail_init=lambda r: r == last)
    tp, why = transport.nccl_transport(comm, distgrail.get_backend("cpu"), nccl)
    me = comm.Get_rank()
    everywhere(comm, tp is None and f"rank {last}: RuntimeError: ncclCommInitRank failed" in why, why)
    everywhere(comm, (("abort",) in nccl.log) == (me != last), nccl.log)


def test_a_cached_transport_that_failed_is_set_up_again(wire, monkeypatch):
    """After a failed background set-up, the next transport_for on that communicator sets NCCL
    up anew (and it works)."""
    from mpi4py import MPI

    fail = [True]
    last = wire.Get_size() - 1
    nccl = fake_nccl(wire, fail_init=lambda r: fail[0] and r == last)
    cp = fake_cupy(nccl)
    install(monkeypatch, cp, nccl)
    monkeypatch.delenv("DISTGRAIL_NCCL", raising=False)
    be = fake_gpu_backend(cp)
    c = MPI.COMM_WORLD.Dup()
    try:
        a = transport.transport_for(c, be)
        with pytest.raises(RankError, match="setting up NCCL"):
            a.ready()
        fail[0] = False
        b = transport.transport_for(c, be)
        got = b.bcast(np.arange(3) if c.Get_rank() == 0 else None)
        everywhere(wire, b is not a and b.name == "nccl" and got.tolist() == [0, 1, 2], f"{b.name} {got}")
    finally:
        c.Free()


def test_freeing_the_communicator_while_the_init_runs(wire, monkeypatch):
    """A communicator freed before its NCCL transport was ever used (e.g. the read failed): the
    set-up is abandoned (aborted, not destroyed) without waiting for the other ranks."""
    from mpi4py import MPI

    nccl = fake_nccl(wire)
    cp = fake_cupy(nccl)
    install(monkeypatch, cp, nccl)
    monkeypatch.delenv("DISTGRAIL_NCCL", raising=False)
    c = MPI.COMM_WORLD.Dup()
    tp = transport.transport_for(c, fake_gpu_backend(cp))
    tp._setup.thread.join(30)  # let this rank's warm-up finish or wait for the others'
    wire.Barrier()
    c.Free()
    everywhere(wire, not tp.usable and ("destroy",) not in nccl.log, nccl.log)


@pytest.mark.parametrize("readable", ["graph", "file"])
@pytest.mark.parametrize("early", ["host", "wait"])
def test_a_failing_init_in_a_build_fails_every_rank_and_writes_nothing(comm, wire, tmp_path, monkeypatch, readable,
                                                                       early):
    """Whether a transfer waited for the set-up or not, the build fails on every rank before
    the write."""
    last = comm.Get_size() - 1
    nccl_build(monkeypatch, wire, early, fail_init=lambda r: r == last)
    out = tmp_path / "x.h5"
    g = cyclic_graph()
    if readable == "file":
        path = comm.bcast(str(tmp_path / "g.gra"))
        if comm.Get_rank() == 0:
            from distgrail.io.writers import write_graph

            write_graph(g, path)
        comm.Barrier()
        g = path
    with pytest.raises(RankError, match=f"rank {last}, setting up NCCL.*injected"):
        distgrail.build_index(g, dims=3, backend="cpu", output=out, comm=comm, full_index_on="root")
    left = sorted(p.name for p in tmp_path.iterdir())
    everywhere(comm, left == ([] if readable == "graph" or comm.Get_rank() else ["g.gra"]), left)


@pytest.mark.parametrize("full_index_on", ["all", "root"])
@pytest.mark.parametrize("opens", ["after-condense", "at-the-end"])
def test_a_build_with_a_slow_init_is_byte_identical(comm, wire, tmp_path, monkeypatch, full_index_on, opens):
    """The init held back until rank 0 has condensed, or until the labels are done (every transfer
    then goes through host memory, and the build joins the set-up before assembling): the index
    is the one-process index, and the build reports the set-up times."""
    nccl = nccl_build(monkeypatch, wire, "host")
    gate, seen = held_init(nccl)
    where = "condense" if opens == "after-condense" else "join_digest"
    plain = getattr(distributed.AcrossRanks, where)

    def then_open(*a):
        out = plain(*a)
        gate.set()
        return out

    monkeypatch.setattr(distributed.AcrossRanks, where, then_open)
    if comm.Get_rank() != 0 and opens == "after-condense":
        gate.set()
    g = cyclic_graph()
    ref = distgrail.build_index(g, dims=4, seed=5, backend="cpu", supports=64)
    idx = distgrail.build_index(g, dims=4, seed=5, backend="cpu", comm=comm, supports=64,
                                              full_index_on=full_index_on, output=tmp_path / "x.h5")
    me = comm.Get_rank()
    want = {"nccl_init", "nccl_wait", "rank1 nccl_wait"} | ({"nccl_before_ready"} if opens == "at-the-end" else set())
    if idx is None:
        ok, why = me != 0 and full_index_on == "root", "no index"
    else:
        why = same_index(ref, idx) or sorted(want - set(idx.timings))
        ok = not why
        if ok and me == 0:
            ref.save(tmp_path / "ref.h5")
            ok, why = (tmp_path / "ref.h5").read_bytes() == (tmp_path / "x.h5").read_bytes(), "file bytes differ"
    everywhere(comm, ok and seen == [True], f"{why}; init held: {seen}")
    if opens == "at-the-end":  # nothing went by NCCL but the warm-up
        everywhere(comm, [e[0] for e in nccl.log].count("bcast") == 1, nccl.log)


def test_a_message_nobody_received_does_not_reach_the_next_communicator():
    """A send left unmatched on a communicator the tests release (conftest ``release_comm``: the
    fake NCCL's warm-up send to a rank whose set-up failed) is not received by the next
    ``Dup``, which MPICH gives the freed context id: one test's stray 4 bytes once became the
    first DAG index of a later one."""
    import time

    from mpi4py import MPI

    from conftest import release_comm

    world = MPI.COMM_WORLD
    last = world.Get_size() - 1
    old = world.Dup()
    if old.Get_rank() == 0:
        old.Isend(bytearray(b"\xec\x07\x00\x00"), dest=last, tag=777).Wait()
    release_comm(old)
    new = world.Dup()
    new.Barrier()
    time.sleep(0.01)
    stray = new.Iprobe(source=0, tag=777)
    new.Free()
    everywhere(world, not stray, "a message of a released communicator reached the next one")
