"""Queries on a DAG spread over ranks (issue 24): distgrail/query/partitioned_search.py over K
simulated ranks against the one-process forward search (answers, rounds, frontier sizes) and
BFS; a rank failing inside the search ends it on every rank; rows of /dag/indices read by CRC
blocks; under MPI, ``open_spread_index`` + ``query`` and ``distgrail query --partition on`` against
one process and BFS; on a GPU, the CuPy search against the NumPy one."""

from __future__ import annotations

import os

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.errors import IndexFormatError
from distgrail.index import field_labels
from distgrail.io.graph import EdgeGraph
from distgrail.query import partitioned_search as ps
from distgrail.query.prefilter import prefilter
from distgrail.query.search import guided_search_numpy
from distgrail.query.stats import UNDECIDED, QueryStats
from test_parse_mpi import shared_dir  # noqa: F401 - the fixture: a directory every rank sees
from test_partition import GRAPHS, OnDevice, Threads, written_mpi_graphs

SEED = 3


def _index(name, supports, dims=3):
    n, s, d = GRAPHS[name]
    g = EdgeGraph(n, s, d, name=name)
    return g, distgrail.build_index(g, dims=dims, backend="cpu", supports=supports, seed=SEED)


def _pairs(n, k=400, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, k).astype(np.int64), rng.integers(0, n, k).astype(np.int64)


def _spread(idx, K, s, t, chunk, xp=np, fail_on=None, sizes=None, wrap=None):
    """Every simulated rank's (answers, stats, error) for the pairs cut in K contiguous shards;
    ``wrap(rank, ex)``: each rank's exchange as the search sees it."""
    a = idx.arrays
    L = field_labels(a, idx.C, idx.dims, idx.supports, put=xp.asarray, csr=False)
    ip = a["dag/indptr"].astype(np.int64)
    bounds = ps.row_bounds(ip, K)
    cut = np.linspace(0, s.size, K + 1).astype(int)

    def one(r, ex, *_):
        if xp is not np:
            ex = OnDevice(xp, ex)
        if wrap is not None:
            ex = wrap(r, ex)
        e0, e1 = ip[bounds[r]], ip[bounds[r + 1]]
        rows = ps.RowBlock(xp, ip[bounds[r]:bounds[r + 1] + 1] - e0, a["dag/indices"][e0:e1], bounds, r)
        st = QueryStats()
        ans, err = ps.answer_spread(xp, ex, L, rows, s[cut[r]:cut[r + 1]], t[cut[r]:cut[r + 1]], st, chunk=chunk,
                                    sizes=sizes if r == 0 else None)
        return ans, st, err

    if fail_on is not None:
        fail_on(ps)
    return Threads(K).run(one, np.zeros(K, np.int64), np.zeros(K, np.int64))


def _forward(idx, s, t):
    """(answers, undecided count, rounds, frontier sizes) of the one-process forward search."""
    L = idx.labels("cpu")
    cu, cv = L.comp[s], L.comp[t]
    ans, code = prefilter(L, cu, cv)
    und = np.flatnonzero(code == UNDECIDED)
    sizes = []
    found, rounds = guided_search_numpy(L, cu[und], cv[und], sizes)
    ans[und] = found
    return ans, und.size, rounds, sizes


@pytest.mark.parametrize("K", [1, 2, 3, 4])
@pytest.mark.parametrize("name", ["deep chain", "dense dag", "chain of cycles", "giant", "random 0", "random 2",
                                  "isolated", "one vertex", "self loops"])
@pytest.mark.parametrize("supports,dims", [(0, 1), (0, 3), (3, 1), (3, 3)])
def test_spread_search_equals_forward_search_and_bfs(name, K, supports, dims):
    g, idx = _index(name, supports, dims)
    s, t = _pairs(g.n)
    want, und, rounds, sizes = _forward(idx, s, t)
    np.testing.assert_array_equal(want, bfs_reachable(*csr_of(g), s, t))
    got_sizes = []
    out = _spread(idx, K, s, t, chunk=37, sizes=got_sizes)
    assert all(err is None for _, _, err in out)
    np.testing.assert_array_equal(np.concatenate([a for a, _, _ in out]), want, err_msg=name)
    merged = QueryStats()
    for _, st, _ in out:
        merged = merged.merge(st)
    assert merged.queries == s.size and merged.reachable == int(want.sum())
    assert merged.searched == und
    assert merged.search_rounds == rounds
    assert got_sizes == sizes  # the same frontiers, round by round


@pytest.mark.parametrize("limit", [1, 5])
@pytest.mark.parametrize("K", [1, 3])
@pytest.mark.parametrize("name", ["dense dag", "random 2", "giant", "deep chain"])
def test_frontiers_expanded_in_slices_give_the_same_rounds(name, K, limit, monkeypatch):
    """A round's frontier cut into slices of at most ``limit`` children (EXPAND_EDGES) leaves the
    answers, the rounds and every frontier as one pass over it."""
    g, idx = _index(name, 3, 3)
    s, t = _pairs(g.n)
    want, und, rounds, sizes = _forward(idx, s, t)
    calls = []
    real = ps._slices
    monkeypatch.setattr(ps, "EXPAND_EDGES", limit)
    monkeypatch.setattr(ps, "_slices", lambda *a: calls.append(len(real(*a))) or real(*a))
    got_sizes = []
    out = _spread(idx, K, s, t, chunk=1 << 16, sizes=got_sizes)
    assert all(err is None for _, _, err in out)
    np.testing.assert_array_equal(np.concatenate([a for a, _, _ in out]), want, err_msg=name)
    assert max(st.search_rounds for _, st, _ in out) == rounds and got_sizes == sizes
    assert und == 0 or max(calls) > 1  # some round was cut


def test_slices_hold_at_most_the_limit_or_one_row():
    deg = np.array([3, 0, 9, 2, 2, 2, 0, 1, 12, 1], np.int64)
    for limit in (1, 4, 5, 12, 100):
        cuts = ps._slices(np, deg, limit)
        assert cuts[0][0] == 0 and cuts[-1][1] == deg.size
        assert all(a < b for a, b in cuts) and all(b == c for (_, b), (c, _) in zip(cuts, cuts[1:]))
        assert all(deg[a:b].sum() <= limit or b - a == 1 for a, b in cuts)
        # the greedy cut: the next entry would not have fitted
        assert all(deg[a:b + 1].sum() > limit for a, b in cuts[:-1])
    assert ps._slices(np, deg, 100) == [(0, 10)] and ps._slices(np, deg[:0], 4) == [(0, 0)]


def test_expand_limit_is_a_quarter_of_free_memory_at_64_bytes_a_child_for_5_dims():
    assert ps.expand_limit(4 * 64 * (1 << 24), 5) == 1 << 24
    assert ps.expand_limit(4 * 32 * (1 << 24), 1) == 1 << 24
    assert ps.expand_limit(0, 5) == 1 << 20  # never below 2^20 children


def test_the_expand_argument_reaches_every_round():
    g, idx = _index("random 0", 0)
    s, t = _pairs(g.n)
    want, und, rounds, sizes = _forward(idx, s, t)
    a = idx.arrays
    L = field_labels(a, idx.C, idx.dims, idx.supports, csr=False)
    ip = a["dag/indptr"].astype(np.int64)
    rows = ps.RowBlock(np, ip, a["dag/indices"], ps.row_bounds(ip, 1), 0)
    seen = []
    real = ps._slices

    def spy(xp, deg, limit):
        seen.append(limit)
        return real(xp, deg, limit)

    ps._slices = spy
    try:
        got, err = Threads(1).run(lambda r, ex, *_: ps.answer_spread(np, ex, L, rows, s, t, expand=3),
                                  np.zeros(1, np.int64), np.zeros(1, np.int64))[0]
    finally:
        ps._slices = real
    assert err is None and und > 0 and set(seen) == {3} and len(seen) == rounds
    np.testing.assert_array_equal(got, want)


class _FakeGpu:
    is_gpu = True

    def on_device(self):
        import contextlib

        return contextlib.nullcontext()


def test_partition_auto_spreads_only_a_gpu_index_one_gpu_cannot_hold(tmp_path, monkeypatch):
    from distgrail.gpu import memory
    from distgrail.mpi.partition_query import wants_spread_query

    _, idx = _index("dense dag", 3)
    path = str(tmp_path / "i.h5")
    idx.save(path)
    gpu = _FakeGpu()
    monkeypatch.setattr(memory, "available_gpu_bytes", lambda share=1: (1 << 40, 1 << 40, 0))
    assert not wants_spread_query("auto", path, gpu, 2)  # fits
    monkeypatch.setattr(memory, "available_gpu_bytes", lambda share=1: (1 << 29, 1 << 40, 0))
    assert wants_spread_query("auto", path, gpu, 2)  # the state and its 1 GiB of scratch do not fit
    assert not wants_spread_query("auto", path, gpu, 1)  # one rank: nothing to spread over
    assert not wants_spread_query("auto", path, type("Cpu", (), {"is_gpu": False})(), 4)
    assert wants_spread_query("on", path, None, 1) and not wants_spread_query("off", path, gpu, 4)


def test_partition_auto_names_a_bad_index_file(tmp_path):
    import h5py

    from distgrail.mpi.partition_query import wants_spread_query

    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = np.arange(3)
    fifo = tmp_path / "fifo.h5"
    os.mkfifo(fifo)
    text = tmp_path / "text.h5"
    text.write_text("not hdf5\n")
    for path, what in [(tmp_path / "none.h5", "no such index file"), (tmp_path, "is a directory"),
                       (fifo, "FIFO"), (plain, "not a distgrail index"), (text, "not a distgrail index")]:
        with pytest.raises(IndexFormatError, match=what) as e:
            wants_spread_query("auto", str(path), _FakeGpu(), 2)
        assert str(path) in str(e.value)


def test_row_bounds_balance_edges_and_cover_every_row():
    ip = np.concatenate(([0], np.cumsum(np.random.default_rng(0).integers(0, 50, 1000))))
    for K in (1, 2, 3, 7, 64):
        b = ps.row_bounds(ip, K)
        assert b[0] == 0 and b[-1] == 1000 and (np.diff(b) >= 0).all() and b.size == K + 1
        per = ip[b[1:]] - ip[b[:-1]]
        assert per.sum() == ip[-1] and per.max() <= ip[-1] / K + 50  # at most one row's edges over a share
    assert ps.row_bounds(np.zeros(5, np.int64), 3).tolist() == [0, 0, 0, 4]  # no edges: the rows go last


def test_one_rank_failing_in_a_round_stops_every_rank():
    g, idx = _index("random 0", 0)
    s, t = _pairs(g.n)
    assert _forward(idx, s, t)[2] >= 2  # searches of several rounds
    real = ps._expand
    calls = {"n": 0}

    def patch(mod):
        def expand(xp, L, rows, keys, tv, done, limit=None):
            if rows.rank == 1 and keys.size:
                calls["n"] += 1
                if calls["n"] == 2:
                    raise MemoryError("out of memory on rank 1")
            return real(xp, L, rows, keys, tv, done)

        mod._expand = expand

    try:
        out = _spread(idx, 3, s, t, chunk=1 << 16, fail_on=patch)
    finally:
        ps._expand = real
    errs = [e for _, _, e in out]
    assert isinstance(errs[1], MemoryError) and errs[0] is None and errs[2] is None
    assert calls["n"] == 2  # failed in its second round
    assert all(a is None for a, _, _ in out)  # no rank returns answers when one failed


class _FailsAfter:
    """An exchange whose ``which`` call number ``at`` raises on its rank after the messages went
    through (as a device upload running out of memory would)."""

    def __init__(self, ex, which, at):
        self.ex, self.which, self.at, self.n = ex, which, at, 0
        self.root, self.rank, self.size = ex.root, ex.rank, ex.size

    def __getattr__(self, name):
        return getattr(self.ex, name)

    def _call(self, name, *a):
        out = getattr(self.ex, name)(*a)
        if name == self.which:
            self.n += 1
            if self.n == self.at:
                raise MemoryError(f"out of memory after {name} {self.n}")
        return out

    def alltoall(self, parts):
        return self._call("alltoall", parts)

    def allgather(self, a):
        return self._call("allgather", a)

    def allreduce(self, a, op):
        return self._call("allreduce", a, op)


@pytest.mark.parametrize("which,at", [("alltoall", 1), ("alltoall", 3), ("allgather", 2), ("allgather", 3),
                                      ("allgather", 4)])
def test_a_rank_failing_after_an_exchange_stops_every_rank(which, at):
    """A failure once an exchange's messages have gone through (the received data put on the
    device) is that rank's failure: every rank leaves at the same round, none returns answers,
    and no rank waits (the simulated ranks' barrier times out rather than hang). (allgather 1 is
    the query counts, and the allreduces are the round counts: a few bytes, not guarded.)"""
    g, idx = _index("random 2", 0)
    s, t = _pairs(g.n)
    assert _forward(idx, s, t)[2] >= 3  # searches of several rounds
    out = _spread(idx, 3, s, t, chunk=1 << 16, wrap=lambda r, ex: _FailsAfter(ex, which, at) if r == 2 else ex)
    errs = [e for _, _, e in out]
    assert isinstance(errs[2], MemoryError) and str(errs[2]) == f"out of memory after {which} {at}"
    assert errs[0] is None and errs[1] is None
    assert all(a is None for a, _, _ in out)


def test_a_rank_failing_before_the_search_stops_every_rank(monkeypatch):
    g, idx = _index("random 0", 0)
    s, t = _pairs(g.n)
    real = ps.prefilter

    def pre(L, cu, cv):
        if cu.size and int(cu[0]) == int(idx.labels("cpu").comp[s[0]]):  # rank 0's first pair
            raise MemoryError("out of memory in the prefilter")
        return real(L, cu, cv)

    monkeypatch.setattr(ps, "prefilter", pre)
    out = _spread(idx, 2, s, t, chunk=1 << 16)
    assert isinstance(out[0][2], MemoryError) and out[1][2] is None
    assert out[0][0] is None and out[1][0] is None


def test_rows_of_indices_read_by_crc_blocks_and_damage_is_named(tmp_path, monkeypatch):
    from distgrail.indexfile import Deferred, layout, read_index_file

    monkeypatch.setattr(layout, "CRC_BLOCK", 64)  # blocks of 64 bytes
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1)
    g, idx = _index("dense dag", 0)
    path = str(tmp_path / "d.h5")
    idx.save(path)
    meta, arrays = read_index_file(path, defer=("dag/indices",))
    ix = arrays["dag/indices"]
    assert isinstance(ix, Deferred) and ix.shape == idx.arrays["dag/indices"].shape
    whole = idx.arrays["dag/indices"]
    for lo, hi in ((0, whole.size), (5, 6), (15, 17), (100, 300), (whole.size - 3, whole.size), (7, 7)):
        np.testing.assert_array_equal(ix.read(lo, hi), whole[lo:hi])
    import h5py

    with h5py.File(path, "r") as f:
        at = int(f["dag/indices"].id.get_offset())
    with open(path, "r+b") as f:  # one byte of block 3
        f.seek(at + 3 * 64 + 5)
        b = f.read(1)
        f.seek(at + 3 * 64 + 5)
        f.write(bytes([b[0] ^ 0xFF]))
    per = 64 // ix.dtype.itemsize  # ids per block (the file holds the smallest type)
    meta, arrays = read_index_file(path, defer=("dag/indices",))  # the damage is not read yet
    np.testing.assert_array_equal(arrays["dag/indices"].read(0, 3 * per), whole[:3 * per])
    with pytest.raises(IndexFormatError, match=r"dag/indices.*CRC-32 mismatch, block 3 of"):
        arrays["dag/indices"].read(3 * per - 1, 3 * per + 1)
    with pytest.raises(IndexFormatError, match="dag/indices"):
        read_index_file(path)  # the whole read sees it too


# ---------------------------------------------------------------- under MPI

@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("index_layout", ["single", "split"])
def test_spread_query_equals_one_process_and_bfs(shared_dir, monkeypatch, index_layout):
    from mpi4py import MPI

    from distgrail.indexfile import Deferred, layout
    from distgrail.io.read import read_graph
    from distgrail.mpi.partition_query import open_spread_index

    comm = MPI.COMM_WORLD
    monkeypatch.setattr(layout, "CRC_BLOCK", 64)  # rows read by 64-byte CRC blocks, left in the file
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1)
    for name, path, nv in written_mpi_graphs(comm, shared_dir):
        out = os.path.join(shared_dir, f"{name}.spreadq-{index_layout}.h5")
        if comm.rank == 0:  # the split layout: rows read across 3 part files (distgrail.indexfile.read_split)
            built = distgrail.build_index(path, dims=3, backend="cpu", num_vertices=nv, supports=2)
            if index_layout == "split":
                from distgrail.indexfile.split import write_split_index

                write_split_index(out, built.meta, built.arrays, parts=3)
            else:
                built.save(out)
        comm.Barrier()
        idx = open_spread_index(out, comm)
        m = int(idx.meta["n_dag_edges"])
        lo, hi = idx.bounds[comm.rank], idx.bounds[comm.rank + 1]
        assert idx._rows[1].size == int(idx.arrays["dag/indptr"][hi]) - int(idx.arrays["dag/indptr"][lo])
        assert m == 0 or isinstance(idx.arrays["dag/indices"], Deferred)
        if m >= 4 * comm.size:
            assert idx._rows[1].size < m, name  # no rank holds every edge
        g = read_graph(path, num_vertices=nv)
        s, t = _pairs(g.n, 300, seed=comm.size) if comm.rank == 0 else (None, None)
        ans, st = idx.query(s, t, backend="cpu")
        one = distgrail.open_index(out)
        s, t = _pairs(g.n, 300, seed=comm.size)
        want, wst = one.query(s, t, backend="cpu")
        np.testing.assert_array_equal(ans, want, err_msg=name)
        np.testing.assert_array_equal(ans, bfs_reachable(*csr_of(g), s, t), err_msg=name)
        assert st.ranks == comm.size and st.queries == 300 and st.reachable == int(want.sum())
        # the rows and labels went to the device in the first call, timed apart; the next finds them
        assert st.prepare_seconds > 0 and st.mpi_seconds["prepare"] == st.prepare_seconds, st.mpi_seconds
        _, again = idx.query(s if comm.rank == 0 else None, t if comm.rank == 0 else None, backend="cpu")
        assert again.prepare_seconds == 0 == again.mpi_seconds["prepare"], again.mpi_seconds
        comm.Barrier()


@pytest.mark.mpi(min_size=2)
def test_cli_query_partition_on_writes_the_one_process_answers(shared_dir, capsys):
    from mpi4py import MPI

    from distgrail.cli import main

    comm = MPI.COMM_WORLD
    items = written_mpi_graphs(comm, shared_dir)
    name, path, nv = [x for x in items if x[0].startswith("giant")][0]
    out = os.path.join(shared_dir, "cli.spread.h5")
    pairs = os.path.join(shared_dir, "cli.pairs")
    if comm.rank == 0:
        distgrail.build_index(path, dims=2, backend="cpu", output=out, num_vertices=nv)
        s, t = _pairs(nv, 200)
        with open(pairs, "w") as f:
            f.writelines(f"{a} {b}\n" for a, b in zip(s.tolist(), t.tolist()))
    comm.Barrier()
    got = os.path.join(shared_dir, "cli.spread.txt")
    one = os.path.join(shared_dir, "cli.one.txt")
    capsys.readouterr()
    assert main(["query", out, pairs, "-o", got, "--backend", "cpu", "--partition", "on", "--json"]) == 0
    failed = None
    if comm.rank == 0:  # checked on rank 0; a failure is raised after the barrier, so no rank waits
        try:
            _check_cli_summary(capsys.readouterr().out, comm.size, out, pairs, got, one)
        except Exception as e:  # noqa: BLE001 - raised after the barrier
            failed = e
    comm.Barrier()
    if failed is not None:
        raise failed


def _check_cli_summary(stdout, size, out, pairs, got, one):
    import json

    from distgrail.cli import main

    summary = json.loads(stdout)
    assert summary["partition"] == "spread" and summary["ranks"] == size and summary["queries"] == 200
    per = summary["spread_ranks"]
    m = distgrail.open_index(out).meta["n_dag_edges"]
    assert [r["rank"] for r in per] == list(range(size))
    assert sum(r["dag edges held"] for r in per) == m and all(r["dag edges held"] < m for r in per if m)
    assert all(r["query state bytes"] > 0 for r in per)
    # on every rank one count allreduce per round and one to end each chunk, whenever pairs were
    # searched, and the closing one
    searched = summary["steps"]["search_positive"] + summary["steps"]["search_negative"]
    assert len({r["sweeps"] for r in per}) == 1
    assert (per[0]["sweeps"] >= summary["search_rounds"] + 2) == (searched > 0) and per[0]["sweeps"] >= 1
    assert main(["query", out, pairs, "-o", one, "--backend", "cpu", "--no-mpi", "--quiet"]) == 0
    assert open(got).read() == open(one).read()


@pytest.mark.mpi(min_size=2)
def test_damaged_rows_fail_every_rank_with_the_block_named(shared_dir, monkeypatch):
    from mpi4py import MPI

    from distgrail.indexfile import layout
    from distgrail.mpi.errors import RankError
    from distgrail.mpi.partition_query import open_spread_index

    comm = MPI.COMM_WORLD
    monkeypatch.setattr(layout, "CRC_BLOCK", 64)
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1)
    out = os.path.join(shared_dir, "damaged.spread.h5")
    if comm.rank == 0:
        _, idx = _index("dense dag", 0)
        idx.save(out)
        import h5py

        with h5py.File(out, "r") as f:
            at, nbytes = int(f["dag/indices"].id.get_offset()), int(f["dag/indices"].nbytes)
        with open(out, "r+b") as f:  # the last block: the last rank's rows
            f.seek(at + nbytes - 1)
            b = f.read(1)
            f.seek(at + nbytes - 1)
            f.write(bytes([b[0] ^ 0xFF]))
    comm.Barrier()
    import h5py

    with h5py.File(out, "r") as f:
        b = ps.row_bounds(f["dag/indptr"][()], comm.size)
    # every rank names the failing rank's own rows (not its own: each words the step with its rows)
    with pytest.raises(RankError, match=rf"rank {comm.size - 1}, reading DAG rows {b[-2]}\.\.{b[-1] - 1} of "
                                        r".*CRC-32 mismatch"):
        open_spread_index(out, comm)
    comm.Barrier()


# ---------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("name", ["dense dag", "giant", "deep chain", "random 2"])
def test_spread_search_on_cupy_equals_numpy(name):
    cp = pytest.importorskip("cupy")
    g, idx = _index(name, 3)
    s, t = _pairs(g.n)
    want, _, rounds, sizes = _forward(idx, s, t)
    got_sizes = []
    out = _spread(idx, 3, s, t, chunk=53, xp=cp, sizes=got_sizes)
    np.testing.assert_array_equal(np.concatenate([a for a, _, _ in out]), want)
    assert max(st.search_rounds for _, st, _ in out) == rounds and got_sizes == sizes
