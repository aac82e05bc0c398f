"""The collective side of ``distgrail serve`` under MPI (:mod:`distgrail.mpi.serve`), without HTTP:
rank 0's Dispatcher fed from threads, the other ranks following; answers equal to Index.query, a
failure on one rank while answering is the same RankError on rank 0's batch (the client's 500)
with the ranks still in step, and STOP ends every rank. Run with
``mpiexec -n 2 python -m pytest --only-mpi tests/test_server_mpi.py``."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import distgrail
from distgrail.gpu.backend import get_backend


def _drive(d, client) -> list:
    """Run ``client()`` (an HTTP handler's thread: it calls the dispatcher) beside ``d.run()`` on
    this (main) thread, the only one that calls MPI; ``d.stop()`` once the client is done.
    Returns what the client raised, as text."""
    errors = []

    def run():
        try:
            client()
        except Exception as e:  # noqa: BLE001 - returned to the test
            errors.append(repr(e))
        finally:
            d.stop()

    th = threading.Thread(target=run)
    th.start()
    d.run()
    th.join(60)
    return errors


def _answer_each(d, batches):
    """Each batch through ``d`` from a client thread (an HTTP handler's), one at a time, so that a
    failing one is known; returns (each batch's result or RankError, what the client raised)."""
    from distgrail.mpi.errors import RankError

    got = []

    def clients():
        for s, t in batches:
            try:
                got.append(d.answer(s, t, timeout=60))
            except RankError as e:
                got.append(e)

    return got, _drive(d, clients)


@pytest.mark.mpi(min_size=2)
def test_dispatcher_shards_batches_and_a_failure_on_one_rank_is_that_batch_error_only(monkeypatch):
    from mpi4py import MPI

    from distgrail.mpi.errors import RankError
    from distgrail.mpi.serve import Dispatcher, Stopping, follow

    comm = MPI.COMM_WORLD.Clone()
    me, size = comm.Get_rank(), comm.Get_size()
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu")
    be = get_backend("cpu")
    failing = size - 1  # the last rank fails its shard of the second batch, once
    calls = {"n": 0}
    query_local = idx._query_local

    def flaky(s, t, be_, search=None, **kw):
        calls["n"] += 1
        if me == failing and calls["n"] == 2:
            raise MemoryError("out of device memory (planted)")
        return query_local(s, t, be_, search, **kw)

    monkeypatch.setattr(idx, "_query_local", flaky)
    if me != 0:
        taken = follow(comm, idx, be)
        assert comm.allgather(taken)[me] == 3 and calls["n"] == 4  # the failed batch is not counted
        comm.Free()
        return
    rng = np.random.default_rng(7)
    batches = [(rng.integers(0, idx.n, k), rng.integers(0, idx.n, k)) for k in (1000, 777, 2, 5000)]
    d = Dispatcher(comm, idx, be)
    got, errors = _answer_each(d, batches)
    every = comm.allgather(None)
    assert not errors and len(got) == 4, errors
    for (s, t), out in zip([batches[0], batches[2], batches[3]], [got[0], got[2], got[3]]):
        answers, stats = out
        assert np.array_equal(answers, idx.query(s, t, backend="cpu")[0]) and stats.ranks == size
        assert stats.queries == s.size
    e = got[1]
    assert isinstance(e, RankError) and e.rank == failing and "out of device memory (planted)" in str(e)
    assert str(e).startswith(f"rank {failing}, answering queries ")
    assert (d.batches, d.pairs, d.failed) == (3, 6002, 1) and len(every) == size
    late = d.submit(batches[0][0], batches[0][1])
    with pytest.raises(Stopping):
        late.result(1)
    comm.Free()


@pytest.mark.mpi(min_size=2)
def test_an_update_moves_every_rank_and_a_failed_one_moves_none():
    """The dispatcher's UPDATE between batches: every rank inserts the edges and answers with the
    new version after; an update failing on one rank is the same RankError on rank 0 and every
    rank keeps the version it had."""
    from mpi4py import MPI

    from distgrail.bfs import bfs_reachable, csr_of
    from distgrail.io.generate import generate
    from distgrail.io.graph import EdgeGraph
    from distgrail.mpi.errors import RankError
    from distgrail.mpi.serve import Dispatcher, follow
    import distgrail.update as update

    comm = MPI.COMM_WORLD.Clone()
    me, size = comm.Get_rank(), comm.Get_size()
    g = generate("paper", 300, 3, seed=5)
    idx = distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=2, backend="cpu")
    be = get_backend("cpu")
    real = update.insert_edges
    calls = {"n": 0}

    def flaky(index, s, t, **kw):  # the last rank fails the second update, once
        calls["n"] += 1
        if me == size - 1 and calls["n"] == 2:
            raise MemoryError("out of device memory (planted)")
        return real(index, s, t, **kw)

    update.insert_edges = flaky
    try:
        if me != 0:
            follow(comm, idx, be)
            comm.Free()
            return
        rng = np.random.default_rng(3)
        a, b = rng.integers(0, g.n, 40), rng.integers(0, g.n, 40)
        qs, qt = rng.integers(0, g.n, 3000), rng.integers(0, g.n, 3000)
        after = bfs_reachable(*csr_of(EdgeGraph(g.n, np.r_[g.src, a], np.r_[g.dst, b])), qs, qt)
        d = Dispatcher(comm, idx, be)
        out = {}

        def client():
            new, rep = d.update(a, b)
            out["given"] = rep.given
            out["one"] = d.answer(qs, qt, timeout=60)[0]
            try:
                d.update(a[:3], b[:3])
            except RankError as e:
                out["error"] = str(e)
            out["two"] = d.answer(qs, qt, timeout=60)[0]
            out["version"] = d.index is new

        errors = _drive(d, client)
        comm.Free()
        assert not errors, errors
        assert out["given"] == 40 and np.array_equal(out["one"], after) and np.array_equal(out["two"], after)
        assert f"rank {size - 1}" in out["error"] and "out of device memory (planted)" in out["error"]
        assert out["version"]
    finally:
        update.insert_edges = real


@pytest.mark.mpi(min_size=2)
def test_batches_through_node_shared_arrays_kept_from_batch_to_batch(monkeypatch):
    """With a :class:`SharedBatches` (``serve`` on one node) batches of SHARED_MIN_PAIRS pairs or
    more go through node-shared arrays made once and grown only for a larger batch (in steps of
    GROW_PAIRS), smaller ones by Scatterv; answers equal Index.query, the stats part the steps;
    a rank failing its shard of a windowed batch is that batch's RankError and the next batch is
    right; with DISTGRAIL_SHM=0 nothing is shared."""
    from mpi4py import MPI

    import distgrail.mpi.query as mq
    from distgrail.mpi.errors import RankError
    from distgrail.mpi.query import SharedBatches
    from distgrail.mpi.serve import Dispatcher, follow

    monkeypatch.setattr(mq, "SHARED_MIN_PAIRS", 500)
    monkeypatch.setattr(mq, "GROW_PAIRS", 1000)
    comm = MPI.COMM_WORLD.Clone()
    me, size = comm.Get_rank(), comm.Get_size()
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu")
    be = get_backend("cpu")
    shared = SharedBatches(comm)
    assert shared.groups is not None  # every rank on this one machine
    caps = []
    query_local = idx._query_local
    calls = {"n": 0}

    def watched(s, t, be_, search=None, **kw):  # the capacity each batch saw; the last rank fails batch 4 once
        caps.append(shared.cap)
        calls["n"] += 1
        if me == size - 1 and calls["n"] == 4:
            raise MemoryError("out of device memory (planted)")
        return query_local(s, t, be_, search, **kw)

    monkeypatch.setattr(idx, "_query_local", watched)
    sizes = (600, 2500, 700, 2100, 3000, 100, 999)
    if me != 0:
        follow(comm, idx, be, shared=shared)
    else:
        rng = np.random.default_rng(11)
        # batches 1 (node-shared arrays) and 5 (Scatterv) of int32 ids, as a server's clients send them
        batches = [tuple(rng.integers(0, idx.n, k).astype(np.int32 if i in (1, 5) else np.int64) for _ in "st")
                   for i, k in enumerate(sizes)]
        got, errors = _answer_each(Dispatcher(comm, idx, be, shared), batches)
    seen = comm.allgather(caps)[me]  # (every collective before any assert: a failing rank would leave the rest waiting)
    windows = len(shared.groups._windows)
    shared.close()
    monkeypatch.setenv("DISTGRAIL_SHM", "0")
    off = SharedBatches(comm)
    comm.Free()
    if me == 0:
        assert not errors, errors
        for i, ((s, t), out) in enumerate(zip(batches, got)):
            if i == 3:
                assert isinstance(out, RankError) and "out of device memory (planted)" in str(out)
                continue
            answers, stats = out
            assert np.array_equal(answers, idx.query(s, t, backend="cpu")[0]) and stats.queries == s.size, i
            if s.size >= 500:
                assert set(stats.mpi_seconds) == {"prepare", "scatter", "answer", "gather"}, i
    # 600 -> one step; 2500 -> three; 700, 2100 reuse; 3000 -> three still; 100 by Scatterv; 999 reuse
    assert seen == [1000, 3000, 3000, 3000, 3000, 3000, 3000], seen
    assert windows == 3  # one set of arrays, the old ones freed
    assert shared.groups is None and shared.arrays(5000) is None
    assert off.groups is None and off.arrays(5000) is None


@pytest.mark.mpi(min_size=2)
def test_shared_batch_arrays_shrink_after_small_batches(monkeypatch):
    """After SHRINK_AFTER batches in a row that each fill at most a quarter of the node-shared
    arrays, :class:`SharedBatches` makes them again at the latest batch's size (every rank
    deciding alike); the new arrays hold what every rank writes into its shard."""
    from mpi4py import MPI

    import distgrail.mpi.query as mq
    from distgrail.mpi.collectives import offsets, split_counts
    from distgrail.mpi.query import SharedBatches

    monkeypatch.setattr(mq, "SHARED_MIN_PAIRS", 500)
    monkeypatch.setattr(mq, "GROW_PAIRS", 1000)
    monkeypatch.setattr(mq, "SHRINK_AFTER", 2)
    comm = MPI.COMM_WORLD.Clone()
    me, size = comm.Get_rank(), comm.Get_size()
    shared = SharedBatches(comm)
    caps, held = [], []
    remakes = []
    make = shared._make
    monkeypatch.setattr(shared, "_make", lambda cap, k: (remakes.append(cap), make(cap, k)))
    for k in (5000, 600, 1000, 1500, 500, 500, 500, 100, 900):
        w = shared.arrays(k)
        caps.append(shared.cap)
        if w is not None:
            at = offsets(split_counts(k, size))
            w[0][at[me]:at[me + 1]] = np.arange(at[me], at[me + 1]) + k
            comm.Barrier()
            held.append(bool(np.array_equal(w[0][:k], np.arange(k) + k)))
            comm.Barrier()  # (every rank read before any writes the next batch)
    got = comm.allgather((caps, held))
    shared.close()
    comm.Free()
    # 5000 grows to 5000; 600 small (1), 1000 small (2): made again at 1000; 1500 grows to 2000;
    # 500 would be given 1000 afresh, not a quarter of 2000: never made again at the same size;
    # 100 goes by messages; 900 fits
    assert all(c == got[0][0] for c, _ in got), got
    assert caps == [5000, 5000, 1000, 2000, 2000, 2000, 2000, 2000, 2000], caps
    assert remakes == [5000, 1000, 2000], remakes
    assert all(all(h) for _, h in got) and len(held) == 8, got


def _forwarding(comm, idx, be, rank0, last, slow_move: float = 0.0):
    """Rank 0 runs a Dispatcher (``rank0(d)`` sets it up, from threads), the last rank a Forwarder
    fed by ``last(fwd)`` in a thread, the others follow; every rank records the versions it moved
    to, ``(index, edges, time.monotonic() when moved)`` (rank 0 moving ``slow_move`` s late).
    Returns ``(versions, what the last rank's client got)`` on every rank."""
    from distgrail.mpi.serve import Dispatcher, Forwarder, follow

    me, size = comm.Get_rank(), comm.Get_size()
    versions, got = [], {}

    def moved(new, k):
        if me == 0:
            time.sleep(slow_move)
        versions.append((new, k, time.monotonic()))

    if me == 0:
        d = Dispatcher(comm, idx, be, on_version=moved, poll=0.005)
        threading.Thread(target=rank0, args=(d, versions)).start()
        d.run()
    elif me == size - 1:
        fwd = Forwarder(comm)
        th = threading.Thread(target=lambda: got.update(last(fwd)))
        th.start()
        follow(comm, idx, be, forward=fwd, on_version=moved)
        th.join(60)
    else:
        follow(comm, idx, be, on_version=moved)
    return versions, got


@pytest.mark.mpi(min_size=2)
def test_an_update_forwarded_by_a_rank_moves_every_rank_before_it_is_answered():
    """``--front ranks``: the last rank's update goes to rank 0, which applies it on every rank;
    every rank has moved (``on_version``; rank 0 made slow to) before the last rank's client has its
    answer (the clocks are one machine's), and every rank's new version answers as BFS over the
    graph plus the edges."""
    from mpi4py import MPI

    from distgrail.bfs import bfs_reachable, csr_of
    from distgrail.io.generate import generate
    from distgrail.io.graph import EdgeGraph

    comm = MPI.COMM_WORLD.Clone()
    g = generate("paper", 300, 3, seed=5)
    idx = distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=2, backend="cpu")
    rng = np.random.default_rng(4)
    a, b = rng.integers(0, g.n, 40), rng.integers(0, g.n, 40)
    qs, qt = rng.integers(0, g.n, 3000), rng.integers(0, g.n, 3000)
    after = bfs_reachable(*csr_of(EdgeGraph(g.n, np.r_[g.src, a], np.r_[g.dst, b])), qs, qt)

    def rank0(d, versions):
        for _ in range(6000):  # until the forwarded update has been applied here
            if versions:
                break
            threading.Event().wait(0.01)
        d.stop()

    def last(fwd):
        new, rep = fwd.update(a, b)
        at = time.monotonic()
        for _ in range(1000):  # the send let go once rank 0 has taken it (each holds its pickled edges)
            if not fwd._requests:
                break
            time.sleep(0.005)
        return {"given": rep.given, "at": at, "answers": new.query(qs, qt, backend="cpu")[0],
                "sends_held": len(fwd._requests)}

    versions, got = _forwarding(comm, idx, get_backend("cpu"), rank0, last, slow_move=0.3)
    me = comm.Get_rank()
    ok = len(versions) == 1 and versions[0][1] == 40 and np.array_equal(versions[0][0].query(qs, qt)[0], after)
    if me == comm.Get_size() - 1:
        ok = ok and got.get("given") == 40 and np.array_equal(got.get("answers"), after) and got["sends_held"] == 0
    moved = comm.allgather(versions[0][2] if versions else float("inf"))
    answered = comm.bcast(got.get("at") if me == comm.Get_size() - 1 else None, root=comm.Get_size() - 1)
    oks = comm.allgather(ok)
    comm.Free()
    assert all(oks), oks
    assert answered is not None and max(moved) <= answered, (moved, answered)


@pytest.mark.mpi(min_size=2)
def test_an_update_forwarded_as_the_server_stops_is_refused_and_no_rank_hangs(monkeypatch):
    """Rank 0 stops without taking the last rank's forwarded update (planted: its loop does not
    look for one): the update is received and dropped after ``STOP``, the last rank's client gets
    :class:`Stopping`, no rank moves and none waits for a message never received."""
    from mpi4py import MPI

    from distgrail.mpi.serve import Dispatcher, Stopping

    real = Dispatcher._forwarded_update
    monkeypatch.setattr(Dispatcher, "_forwarded_update",
                        lambda self, block_from=None: None if block_from is None else real(self, block_from))
    comm = MPI.COMM_WORLD.Clone()
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")

    def rank0(d, versions):
        threading.Event().wait(0.3)  # the last rank's update sent meanwhile (or still queued: refused alike)
        d.stop()

    def last(fwd):
        try:
            fwd.update(np.array([0]), np.array([1]))
        except Stopping as e:
            return {"refused": str(e)}
        return {}

    versions, got = _forwarding(comm, idx, get_backend("cpu"), rank0, last)
    me = comm.Get_rank()
    ok = not versions and (me != comm.Get_size() - 1 or "the update was not applied" in got.get("refused", ""))
    oks = comm.allgather(ok)
    comm.Free()
    assert all(oks), oks
