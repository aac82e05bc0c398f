"""The spread condensed DAG (issue 24: DAGs that stay large): distgrail/stages/partitioned_dag.py
over K simulated ranks against the one-process condensation and phases 1, 4 and 5, stage by
stage; under MPI, ``DISTGRAIL_PARTITION_DAG=ranks`` builds against one process, byte for byte,
and against BFS; on a GPU the same stages with CuPy against NumPy."""

from __future__ import annotations

import os

import numpy as np
import pytest

from distgrail.io.graph import EdgeGraph
from distgrail.stages.condense import condense
from distgrail.stages.forest import parents_max_level
from distgrail.stages.intervals import descendant_intervals_numpy
from distgrail.stages.partitioned_dag import (gather_csr, spread_dag, spread_degrees, spread_intervals, spread_masks,
                                              spread_parents)
from distgrail.stages.partitioned_scc import Counted, partitioned_keys
from distgrail.stages.ranks import post_order_ranks_numpy
from distgrail.stages.subtree import subtree_sizes_numpy
from distgrail.stages.supports import choose_supports_numpy, support_masks_numpy
from test_partition import GRAPHS, OnDevice, Threads, same_as_one_process_and_bfs, written_mpi_graphs

SEED = 7


def random_dags():
    """Random DAGs (edges from a smaller to a larger position of a random order) with duplicates."""
    rng = np.random.default_rng(1)
    out = {}
    for t in range(5):
        n = int(rng.integers(50, 400))
        m = int(rng.integers(0, 6 * n))
        a, b, p = rng.integers(0, n, m), rng.integers(0, n, m), rng.permutation(n)
        s, d = p[np.minimum(a, b)], p[np.maximum(a, b)]
        out[f"dag {t}"] = (n, np.concatenate((s, s[: m // 3])), np.concatenate((d, d[: m // 3])))
    return out


CASES = {**GRAPHS, **random_dags()}


def spread_all(xp, ex, src, dst, n, ids_of):
    """Every spread stage on one rank: (PartDAG, parent, lo, hi, ids, out, in, indptr, indices)."""
    compact, C, keys = partitioned_keys(xp, src, dst, n, ex, 0)
    pd = spread_dag(xp, ex, n, compact, C, [keys])
    parent = spread_parents(xp, ex, pd, SEED)
    host = parent if xp is np else parent.get()
    size = subtree_sizes_numpy(host, pd.level_ptr)
    post = post_order_ranks_numpy(host, size, pd.level_ptr, SEED, range(3))
    lo, hi = spread_intervals(xp, ex, pd, xp.asarray(post))
    ids = ids_of(pd.C)
    out, inn = spread_masks(xp, ex, pd, ids)
    indeg, outdeg = spread_degrees(xp, ex, pd)
    ip, ix = gather_csr(xp, ex, pd)
    return pd, host, lo, hi, ids, out, inn, ip, ix, (indeg, outdeg)


def some_ids(C):
    return np.arange(0, C, max(1, C // 70))[:70].astype(np.int64)


@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_spread_stages_equal_one_process(name, K):
    n, src, dst = CASES[name]
    got = Threads(K).run(lambda r, ex, s, d: spread_all(np, Counted(ex), s, d, n, some_ids), src, dst)
    assert all(g[0].indices.dtype == np.int32 for g in got)
    _equal_one_process(n, src, dst, got)


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("name", ["dag 1", "giant", "deep chain", "dense dag", "empty", "isolated"])
def test_spread_stages_with_int64_ids_equal_one_process(name, K, monkeypatch):
    """From 2^31 components the rows' ids are int64 (not cast to int32): forced here on small
    graphs, the same numbers."""
    import distgrail.stages.partitioned_dag as pdag

    monkeypatch.setattr(pdag, "INT64_IDS_FROM", 0)
    n, src, dst = CASES[name]
    got = Threads(K).run(lambda r, ex, s, d: spread_all(np, Counted(ex), s, d, n, some_ids), src, dst)
    assert all(g[0].indices.dtype == np.int64 and g[0].erow.dtype == np.int64 for g in got)
    assert got[0][8].dtype == np.int64
    _equal_one_process(n, src, dst, got)


def _equal_one_process(n, src, dst, got):
    dag = condense(EdgeGraph(n=n, src=src, dst=dst))
    pd, parent, lo, hi, ids, out, inn, ip, ix, (indeg, outdeg) = got[0]
    assert (pd.C, pd.m, pd.n_levels) == (dag.C, dag.m, dag.n_levels)
    for a, b in ((pd.comp, dag.comp), (pd.level, dag.level), (pd.level_ptr, dag.level_ptr), (ip, dag.indptr),
                 (ix, dag.indices), (parent, parents_max_level(dag, SEED)), (indeg, np.diff(dag.rindptr)),
                 (outdeg, np.diff(dag.indptr))):
        np.testing.assert_array_equal(a, b)
    size = subtree_sizes_numpy(parent, dag.level_ptr)
    post = post_order_ranks_numpy(parent, size, dag.level_ptr, SEED, range(3))
    want = descendant_intervals_numpy(dag.indptr, dag.indices, dag.level_ptr, post)
    np.testing.assert_array_equal(lo, want[0])
    np.testing.assert_array_equal(hi, want[1])
    w_out, w_in = support_masks_numpy(dag, ids)
    np.testing.assert_array_equal(out, w_out)
    np.testing.assert_array_equal(inn, w_in)
    blocks = [(g[0].r0, g[0].r1) for g in got]  # the row blocks tile 0..C, each rank its own rows only
    assert blocks[0][0] == 0 and blocks[-1][1] == dag.C and all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    assert sum(int(g[0].indices.size) for g in got) == dag.m
    for g in got[1:]:  # the replicated arrays are the same on every rank
        np.testing.assert_array_equal(g[2], lo)
        np.testing.assert_array_equal(g[5], out)
        assert g[7] is None


def test_support_choice_from_spread_degrees_matches_choose_supports():
    """The spread phase 5 picks its supports from the degrees over all ranks: the same ids."""
    from distgrail.stages.supports import pick_per_slice, STREAM_SUPPORT
    from distgrail.hashing import hash3

    n, src, dst = CASES["dag 2"]
    dag = condense(EdgeGraph(n=n, src=src, dst=dst))
    got = Threads(3).run(lambda r, ex, s, d: spread_all(np, ex, s, d, n, some_ids), src, dst)
    indeg, outdeg = got[1][-1]
    score = (indeg.astype(np.uint64) + np.uint64(1)) * (outdeg.astype(np.uint64) + np.uint64(1))
    for K in (1, 5, 64, dag.C):
        ids = pick_per_slice(score, hash3(SEED, STREAM_SUPPORT, np.arange(dag.C)), K)
        np.testing.assert_array_equal(ids, choose_supports_numpy(dag, K, SEED))


def test_levels_exchange_ids_or_counts_by_size():
    """A level whose decrements are many (the dense DAG's first levels) goes as counts, a sparse
    one (the deep chain) as id lists: both give the one-process levels."""
    for name in ("dense dag", "deep chain"):
        n, src, dst = CASES[name]
        T = Threads(2)
        got = T.run(lambda r, ex, s, d: spread_all(np, Counted(ex), s, d, n, some_ids), src, dst)
        np.testing.assert_array_equal(got[0][0].level, condense(EdgeGraph(n=n, src=src, dst=dst)).level)


def test_dag_mode_is_read_when_a_build_starts_and_checked(monkeypatch):
    from distgrail.errors import DistGrailError
    from distgrail.mpi.partition_dag import dag_mode, spread_choice

    monkeypatch.delenv("DISTGRAIL_PARTITION_DAG", raising=False)
    assert dag_mode() == "auto"
    monkeypatch.setenv("DISTGRAIL_PARTITION_DAG", "Ranks")
    assert dag_mode() == "ranks"
    monkeypatch.setenv("DISTGRAIL_PARTITION_DAG", "everywhere")
    with pytest.raises(DistGrailError, match="DISTGRAIL_PARTITION_DAG must be one of auto, root, ranks"):
        dag_mode()

    class CPU:
        is_gpu = False

    assert spread_choice("ranks", CPU(), 10, 20, 2, 0, "max-level") is True
    assert spread_choice("auto", CPU(), 10, 20, 2, 0, "max-level") is False  # the CPU: rank 0 holds it
    assert spread_choice("auto", CPU(), 10, 20, 2, 0, "dfs") is False
    with pytest.raises(DistGrailError, match="dfs rule"):
        spread_choice("ranks", CPU(), 10, 20, 2, 0, "dfs")


from test_parse_mpi import shared_dir  # noqa: E402,F401 - the fixture: a directory every rank sees


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("supports", [0, "auto", 130])
def test_spread_index_is_byte_identical_and_exact(shared_dir, supports, monkeypatch):
    from mpi4py import MPI

    import distgrail

    comm = MPI.COMM_WORLD
    monkeypatch.setenv("DISTGRAIL_PARTITION_DAG", "ranks")
    monkeypatch.setenv("DISTGRAIL_PARTITION_GATHER", "0")
    for name, path, nv in written_mpi_graphs(comm, shared_dir):
        out = os.path.join(shared_dir, f"{name}.{supports}.spread.h5")
        idx = distgrail.build_index(path, dims=3, comm=comm, partition="on", backend="cpu", output=out,
                                    num_vertices=nv, supports=supports)
        rep = idx.meta["partition"]
        assert [r["dag"] for r in rep] == ["ranks"] * comm.size
        assert sum(r["dag edges held"] for r in rep) == idx.meta["n_dag_edges"], name
        if idx.meta["n_dag_edges"] >= 8 * comm.size:
            assert max(r["dag edges held"] for r in rep) < idx.meta["n_dag_edges"], name
        if comm.rank == 0:
            same_as_one_process_and_bfs(idx, path, nv, out, os.path.join(shared_dir, f"{name}.{supports}.one.h5"),
                                        supports=supports)
        comm.Barrier()


@pytest.mark.mpi(min_size=2)
def test_spread_rows_stream_into_rank_0s_file(shared_dir, monkeypatch):
    """Only rank 0 assembling (as the command line does), the rows reach the file from the ranks
    in pieces of 12 bytes, never gathered whole: the same file, exact answers, and rank 0's
    index maps its rows from the file."""
    from mpi4py import MPI

    import distgrail
    from distgrail.mpi import rowstream

    comm = MPI.COMM_WORLD
    monkeypatch.setenv("DISTGRAIL_PARTITION_DAG", "ranks")
    monkeypatch.setattr(rowstream, "PIECE_BYTES", 12)
    sent = []
    monkeypatch.setattr(rowstream, "serve_rows", _spy_serve(sent))
    graphs = written_mpi_graphs(comm, shared_dir)
    for name, path, nv in graphs:
        out = os.path.join(shared_dir, f"{name}.stream.h5")
        idx = distgrail.build_index(path, dims=3, comm=comm, partition="on", backend="cpu", output=out,
                                    num_vertices=nv, supports="auto", full_index_on="root")
        assert (idx is None) == (comm.rank != 0)
        if comm.rank == 0:
            ind = idx.arrays["dag/indices"]
            assert isinstance(ind, np.memmap) or ind.size == 0, type(ind)
            same_as_one_process_and_bfs(idx, path, nv, out, os.path.join(shared_dir, f"{name}.stream.one.h5"),
                                        supports="auto")
        comm.Barrier()
    if comm.rank:  # every rank answered once per build; the dense DAG's rows took several pieces
        assert len(sent) == len(graphs) and max(sent) > 1, sent


def _spy_serve(sent):
    from distgrail.mpi import rowstream

    real = rowstream.serve_rows

    def serve(comm, be, own):
        sent.append(-(-int(own.shape[0]) * own.dtype.itemsize // rowstream.PIECE_BYTES))
        return real(comm, be, own)

    return serve


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("fail", ["write before any row", "write on the last piece", "rank 1's device copy",
                                  "rank 1's pieces too large"])
def test_a_failed_streamed_write_fails_every_rank_and_leaves_no_file(shared_dir, monkeypatch, fail):
    """Rank 0's write failing before it reads a row (the ranks told to stop), or on the last
    piece (the sending rank drained), rank 1 failing to copy its rows, or sending a piece larger
    than rank 0's buffer (dropped, the rest drained to its end marker): every rank raises the
    same error, none hangs, no output or temporary file is left."""
    from mpi4py import MPI

    import distgrail
    import distgrail.indexfile.write as ixwrite
    from distgrail.mpi import rowstream

    comm = MPI.COMM_WORLD
    monkeypatch.setenv("DISTGRAIL_PARTITION_DAG", "ranks")
    monkeypatch.setattr(rowstream, "PIECE_BYTES", 16)
    path = [p for name, p, _ in written_mpi_graphs(comm, shared_dir) if name.startswith("dense_dag")][0]
    folder = os.path.join(shared_dir, f"fail-{fail.replace(' ', '_')}".replace("'", ""))
    if comm.rank == 0:
        os.makedirs(folder, exist_ok=True)
    comm.Barrier()
    out = os.path.join(folder, "x.h5")
    if fail.startswith("write"):
        def broken(f, name, src, t, block):
            if fail.endswith("last piece"):
                pieces = src.pieces()
                for _ in range(sum(1 for _ in _count_pieces(src)) - 1):
                    next(pieces)
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(ixwrite, "write_streamed", broken)
        want = "No space left"
    elif fail.endswith("too large"):  # rank 0's buffer holds 4 values: the piece is dropped, the rest drained
        if comm.rank == 1:
            monkeypatch.setattr(rowstream, "PIECE_BYTES", 1 << 20)
        want = "rank 1 sent a piece of"
    else:
        if comm.rank == 1:
            monkeypatch.setattr(rowstream, "_host", lambda a: (_ for _ in ()).throw(RuntimeError("copy failed")))
        want = "rank 1 could not send its DAG rows: RuntimeError: copy failed"
    with pytest.raises(distgrail.DistGrailError, match=want):
        distgrail.build_index(path, dims=3, comm=comm, partition="on", backend="cpu", output=out,
                              full_index_on="root")
    comm.Barrier()
    assert os.listdir(folder) == []


def _count_pieces(src):
    """The pieces a StreamedArray of a spread DAG will give (its size, 16-byte pieces per rank): an
    upper bound is enough to stop one short of the end."""
    from distgrail.mpi import rowstream

    step = rowstream.PIECE_BYTES // src.dtype.itemsize
    return range(max(1, -(-src.size // step)))


@pytest.mark.mpi(min_size=2)
def test_spread_with_dfs_rule_is_refused_on_every_rank(shared_dir, monkeypatch):
    from mpi4py import MPI

    import distgrail

    monkeypatch.setenv("DISTGRAIL_PARTITION_DAG", "ranks")
    with pytest.raises(distgrail.DistGrailError, match="dfs rule"):
        distgrail.build_index(distgrail.bundled_graph(), dims=2, comm=MPI.COMM_WORLD, partition="on", backend="cpu",
                              parent_rule="dfs")


@pytest.mark.mpi(min_size=2)
def test_a_failed_turn_under_mpi_is_one_error_on_every_rank(monkeypatch):
    """Under MPI, the last rank failing its turn of phase 4 ends every rank with one RankError
    naming that rank and its error once (the turn's agreement is not wrapped again by the
    build's own step)."""
    from mpi4py import MPI

    import distgrail
    import distgrail.stages.partitioned_dag as pdag
    from distgrail.mpi.errors import RankError

    comm = MPI.COMM_WORLD
    last = comm.Get_size() - 1

    def fails(xp, pd, lo, hi):
        if comm.Get_rank() == last:
            raise MemoryError("out of memory in the sweep")

    monkeypatch.setattr(pdag, "_intervals_here", fails)
    monkeypatch.setenv("DISTGRAIL_PARTITION_DAG", "ranks")
    with pytest.raises(RankError) as e:
        distgrail.build_index(distgrail.bundled_graph(), dims=2, comm=comm, partition="on", backend="cpu")
    msg = str(e.value)
    assert e.value.rank == last and msg.count("out of memory in the sweep") == 1 and msg.startswith(f"rank {last}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["dense dag", "deep chain", "random 2", "dag 3", "chain of cycles backward",
                                  "empty", "one vertex"])
def test_spread_stages_on_cupy_equal_numpy(name):
    """The same stages with xp = CuPy (scatter through ufunc.at, the hash on the device), the
    exchange through host memory as MpiExchange does, over 3 simulated ranks: bit for bit."""
    cp = pytest.importorskip("cupy")

    n, src, dst = CASES[name]

    def on_gpu(r, ex, s, d):
        with cp.cuda.Device(0):
            got = spread_all(cp, OnDevice(cp, ex), cp.asarray(s), cp.asarray(d), n, some_ids)
            pd = got[0]
            return (cp.asnumpy(pd.comp), cp.asnumpy(pd.level), pd.level_ptr, got[1], cp.asnumpy(got[2]),
                    cp.asnumpy(got[3]), cp.asnumpy(got[5]), cp.asnumpy(got[6]), got[7], got[8])

    gpu = Threads(3).run(on_gpu, src, dst)[0]
    cpu = Threads(3).run(lambda r, ex, s, d: spread_all(np, ex, s, d, n, some_ids), src, dst)[0]
    pd = cpu[0]
    want = (pd.comp, pd.level, pd.level_ptr, cpu[1], cpu[2], cpu[3], cpu[5], cpu[6], cpu[7], cpu[8])
    for a, b in zip(gpu, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["dense dag", "deep chain", "dag 3", "chain of cycles backward", "giant"])
def test_peeled_keys_on_cupy_equal_numpy(name):
    """The peel from the sources with xp = CuPy over 3 simulated ranks: the same SCC ids,
    condensed edges and levels as NumPy's, bit for bit (acyclic and cyclic graphs)."""
    cp = pytest.importorskip("cupy")
    from distgrail.stages.partitioned_scc import peeled_keys

    n, src, dst = CASES[name]

    def on_gpu(r, ex, s, d):
        with cp.cuda.Device(0):
            compact, C, keys, levels = peeled_keys(cp, cp.asarray(s), cp.asarray(d), n, OnDevice(cp, ex), 0)
            return cp.asnumpy(compact), C, cp.asnumpy(keys), None if levels is None else (cp.asnumpy(levels[0]),
                                                                                          levels[1])

    for g, c in zip(Threads(3).run(on_gpu, src, dst),
                    Threads(3).run(lambda r, ex, s, d: peeled_keys(np, s, d, n, ex, 0), src, dst)):
        np.testing.assert_array_equal(g[0], c[0])
        assert g[1] == c[1]
        np.testing.assert_array_equal(g[2], c[2])
        assert (g[3] is None) == (c[3] is None)
        if c[3] is not None:
            np.testing.assert_array_equal(g[3][0], c[3][0])
            assert g[3][1] == c[3][1]


@pytest.mark.mpi(min_size=2)
def test_mpi_exchange_alltoall_and_allgather_in_small_pieces(monkeypatch):
    """Pieces of 24 bytes (3 int64): every pair's message in several nonblocking pieces, pairs of
    unequal sizes (a rank sends more to one peer than it gets back), empty parts included."""
    from mpi4py import MPI

    from distgrail.mpi.partition import MpiExchange

    comm = MPI.COMM_WORLD
    monkeypatch.setattr(MpiExchange, "PIECE", 24)
    ex = MpiExchange(comm, np)
    me, N = comm.rank, comm.size
    parts = [np.arange(7 * me + 3 * j, dtype=np.int64) + 1000 * me + 100 * j for j in range(N)]
    got = ex.alltoall(parts)
    want = np.concatenate([np.arange(7 * r + 3 * me, dtype=np.int64) + 1000 * r + 100 * me for r in range(N)])
    np.testing.assert_array_equal(got, want)
    every = ex.allgather(np.full(me + 1, me, dtype=np.int32))
    np.testing.assert_array_equal(every, np.repeat(np.arange(N), np.arange(1, N + 1)))
    ors = ex.allreduce(np.array([1 << me, 1 << 40], dtype=np.uint64), "bor")
    assert ors.tolist() == [(1 << N) - 1, 1 << 40]


def test_rows_on_file_maps_the_dataset_or_reads_it(tmp_path, monkeypatch):
    """Rank 0's rows after a streamed write: a read-only map of the file's bytes; where the file
    system cannot map, the values read (the build does not fail after its file is in place)."""
    import h5py

    from distgrail.mpi import rowstream

    a = np.arange(100_000, dtype=np.uint32)
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f.create_dataset("dag/indices", data=a)
        f.create_dataset("dag/empty", data=a[:0])
    got = rowstream.rows_on_file(tmp_path / "x.h5")
    assert isinstance(got, np.memmap) and not got.flags.writeable
    np.testing.assert_array_equal(got, a)
    assert rowstream.rows_on_file(tmp_path / "x.h5", "dag/empty").size == 0

    def cannot(*args, **kw):
        raise OSError(19, "No such device")

    monkeypatch.setattr(rowstream.np, "memmap", cannot)
    got = rowstream.rows_on_file(tmp_path / "x.h5")
    assert type(got) is np.ndarray
    np.testing.assert_array_equal(got, a)


@pytest.mark.parametrize("K", [2, 3])
def test_spread_phases_4_and_5_exchange_once_per_rank_not_per_level(K):
    """The ranks sweep phases 4 and 5 in turn (a rank's rows are a range of levels): one
    broadcast per rank for the intervals and at most two per rank for the masks, however many
    levels the DAG has (a chain of 300 levels; an exchange per level before)."""
    n = 300
    src, dst = np.arange(n - 1), np.arange(1, n)

    def run(r, ex, s, d):
        compact, C, keys = partitioned_keys(np, s, d, n, ex, 0)
        pd = spread_dag(np, ex, n, compact, C, [keys])
        host = spread_parents(np, ex, pd, SEED)
        size = subtree_sizes_numpy(host, pd.level_ptr)
        post = post_order_ranks_numpy(host, size, pd.level_ptr, SEED, range(2))
        counted = Counted(ex)
        lo, hi = spread_intervals(np, counted, pd, post)
        phase4 = counted.exchanges
        out, inn = spread_masks(np, counted, pd, some_ids(pd.C))
        return pd.n_levels, phase4, counted.exchanges - phase4, lo, hi, out, inn

    got = Threads(K).run(run, src, dst)
    levels, phase4, phase5 = got[0][:3]
    assert levels == n
    assert phase4 <= 2 * K and phase5 <= 3 * K  # (a broadcast and an agreement a turn; phase 5 two broadcasts)
    for g in got:  # the same arrays on every rank
        assert g[3].shape == (2, n) and g[5].shape == (n, 2)
        for i in (3, 4, 5, 6):
            np.testing.assert_array_equal(g[i], got[0][i])


@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_peeled_keys_equal_the_sweeps_and_give_an_acyclic_graphs_levels(name, K, monkeypatch):
    """The peel from the sources before the sweeps (peeled_keys): the same SCCs and condensed
    edges as the sweeps alone on every graph; on an acyclic one (self-loops aside) the levels
    of the one-process condensation, with no trimming or colouring sweep (partitioned_reps is
    not called) and at most one allreduce a level (a wide level's counts) after the in-degrees'."""
    import distgrail.stages.partitioned_scc as pscc

    n, src, dst = CASES[name]
    reps = []
    real = pscc.partitioned_reps

    def counted_reps(*args, **kw):
        reps.append(1)
        return real(*args, **kw)

    def run(r, ex, s, d):
        want = partitioned_keys(np, s, d, n, ex, 0)
        counted = Counted(ex)
        got = pscc.peeled_keys(np, s, d, n, counted, 0)
        return want, got, counted.sweeps

    dag = condense(EdgeGraph(n=n, src=src, dst=dst))
    acyclic = dag.C == n > 0  # (no vertex: the sweeps, which have nothing to do)
    monkeypatch.setattr(pscc, "partitioned_reps", counted_reps)
    out = Threads(K).run(run, src, dst)
    assert len(reps) == K * (1 + (not acyclic))  # (partitioned_keys' own call on each rank, then the peel's)
    for (w_compact, w_C, w_keys), (compact, C, keys, levels), sweeps in out:
        assert C == w_C
        np.testing.assert_array_equal(compact, w_compact)
        np.testing.assert_array_equal(keys, w_keys)
        assert (levels is not None) == acyclic
        if acyclic:
            level, L = levels
            assert L == dag.n_levels
            np.testing.assert_array_equal(level, dag.level[dag.comp])
            assert 1 <= sweeps <= L


@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("block", [1, 2, None])
@pytest.mark.parametrize("name", ["deep chain", "reverse chain", "dense dag", "dag 0", "dag 3", "self loops", "giant"])
def test_peel_levels_in_blocks_equal_one_process(name, block, K, monkeypatch):
    """The peel's levels (csr_levels: one exchange of fixed-size blocks a level) against the
    one-process condensation's on acyclic graphs (-1 below a cycle otherwise: the giant SCC),
    with blocks of 1 and 2 heads (a level that does not fit goes again in larger blocks) and the
    default; with the default the exchanges are one allreduce and one or two a level (one on a
    chain, whose levels never outgrow the blocks)."""
    import distgrail.stages.partitioned_dag as pdag
    from distgrail.stages.partitioned_sweeps import ArraySweeps

    if block is not None:
        monkeypatch.setattr(pdag, "PEEL_BLOCK", block)
    n, src, dst = CASES[name]

    def run(r, ex, s, d):
        counted = Counted(ex)
        ptr, head = ArraySweeps(np).rows(s, d, n)
        return pdag.csr_levels(np, counted, n, ptr, head, partial=True), counted.exchanges

    dag = condense(EdgeGraph(n=n, src=src, dst=dst))
    acyclic = dag.C == n
    want, w_L = kahn_reference(n, src, dst)
    for (level, L), exchanges in Threads(K).run(run, src, dst):
        np.testing.assert_array_equal(level, want)
        assert L == w_L
        if acyclic:
            np.testing.assert_array_equal(level, dag.level[dag.comp])
            assert L == dag.n_levels
            if block is None:  # one exchange a level, two where a level outgrows its blocks
                assert L + 1 <= exchanges <= 2 * L + 1
                if "chain" in name:
                    assert exchanges == L + 1
        else:  # (the peel stops at the cycles: what it reached has no cycle above it)
            assert (level < 0).any() and (level >= 0).sum() < n


def kahn_reference(n, src, dst):
    """Kahn's longest-path levels by a plain loop over the edges but self-loops: -1 for the
    vertices no level reaches (on or below a cycle); and the number of levels."""
    out = [[] for _ in range(n)]
    indeg = [0] * n
    for u, v in zip(src.tolist(), dst.tolist()):
        if u != v:
            out[u].append(v)
            indeg[v] += 1
    level = [-1] * n
    front = [v for v in range(n) if indeg[v] == 0]
    lev = 0
    while front:
        for v in front:
            level[v] = lev
        nxt = []
        for u in front:
            for v in out[u]:
                indeg[v] -= 1
                if indeg[v] == 0:
                    nxt.append(v)
        front, lev = nxt, lev + 1
    return np.array(level, dtype=np.int32), max(lev, 1)


@pytest.mark.parametrize("K", [2, 3])
def test_peel_blocks_follow_the_levels_widths(K):
    """The peel's blocks follow the levels: a hub's 5,000 heads, then a chain of 400 levels of
    one head each. Each level's block holds twice the previous level's largest count (at least
    PEEL_BLOCK), so after the wide level the blocks shrink back: the bytes a rank sends stay
    within a few times the heads' own plus a small block a level (a block of the widest level's
    size every level would send 400 x 40 kB)."""
    import distgrail.stages.partitioned_dag as pdag
    from distgrail.stages.partitioned_sweeps import ArraySweeps, block_bytes

    hub, chain = 5000, 400
    src = np.concatenate([np.zeros(hub, np.int64), np.arange(1, chain)])
    dst = np.concatenate([np.arange(1, hub + 1), np.arange(2, chain + 1)])
    n = hub + 1

    def run(r, ex, s, d):
        counted = Counted(ex)
        ptr, head = ArraySweeps(np).rows(s, d, n)
        return pdag.csr_levels(np, counted, n, ptr, head), counted.exchanged_bytes

    want, w_L = kahn_reference(n, src, dst)
    for (level, L), sent in Threads(K).run(run, src, dst):
        np.testing.assert_array_equal(level, want)
        assert L == w_L == chain + 1
        small = (L + 1) * block_bytes(2 * pdag.PEEL_BLOCK, 8)
        assert sent <= 4 * 8 * (hub + chain) + small


@pytest.mark.gpu
@pytest.mark.parametrize("block", [1, 2, None])
@pytest.mark.parametrize("name", ["deep chain", "dense dag", "dag 3", "giant", "hub then chain"])
def test_peel_levels_in_blocks_on_cupy_equal_kahn(name, block, monkeypatch):
    """csr_levels with xp = CuPy (the block kernels: expand_block, block_counts, settle_blocks)
    over 3 simulated ranks against a plain Kahn loop, with blocks of 1 and 2 heads (every wide
    level sent again in larger blocks, or as counts per component) and the default floor, and a
    hub's wide level followed by a chain (the blocks shrink back after it)."""
    cp = pytest.importorskip("cupy")
    import distgrail.stages.partitioned_dag as pdag
    from distgrail.stages.partitioned_sweeps import sweeps_for

    if block is not None:
        monkeypatch.setattr(pdag, "PEEL_BLOCK", block)
    if name == "hub then chain":
        hub, chain = 3000, 300
        src = np.concatenate([np.zeros(hub, np.int64), np.arange(1, chain)])
        dst = np.concatenate([np.arange(1, hub + 1), np.arange(2, chain + 1)])
        n = hub + 1
    else:
        n, src, dst = CASES[name]

    def on_gpu(r, ex, s, d):
        with cp.cuda.Device(0):
            counted = Counted(OnDevice(cp, ex))
            ptr, head = sweeps_for(cp).rows(cp.asarray(s), cp.asarray(d), n)
            level, L = pdag.csr_levels(cp, counted, n, ptr, head, partial=True)
            return cp.asnumpy(level), L, counted.exchanges

    want, w_L = kahn_reference(n, src, dst)
    for level, L, exchanges in Threads(3).run(on_gpu, src, dst):
        np.testing.assert_array_equal(level, want)
        assert L == w_L and exchanges >= L


@pytest.mark.parametrize("K", [2, 3])
def test_spread_dag_from_the_peels_levels_equals_its_own_peel(K):
    """spread_dag given the peel's levels builds the same PartDAG as peeling again."""
    from distgrail.stages.partitioned_scc import peeled_keys

    n, src, dst = CASES["dag 3"]

    def run(r, ex, s, d):
        compact, C, keys, levels = peeled_keys(np, s, d, n, ex, 0)
        assert levels is not None
        a = spread_dag(np, ex, n, compact, C, [keys.copy()])
        b = spread_dag(np, ex, n, compact, C, [keys], levels)
        return a, b

    for a, b in Threads(K).run(run, src, dst):
        for f in ("comp", "level", "level_ptr", "bounds", "indptr", "indices", "erow", "level_off"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


def test_the_mask_twin_sweeps_a_word_at_a_time():
    """The array code's phase 5 on a rank's rows keeps temporaries of one level's edges, not of
    edges times words (a review measured 244.7 MB against 8.3 MB for a level of 10^6 edges at
    W = 16): a level of 200,000 edges, 16 words, peak traced allocation under 16 MB."""
    import tracemalloc

    from types import SimpleNamespace

    from distgrail.stages.partitioned_dag import _masks_rows

    rng = np.random.default_rng(0)
    C, m, W = 1000, 200_000, 16
    rows = np.sort(rng.integers(0, 500, m)).astype(np.int32)
    ch = rng.integers(500, C, m).astype(np.int32)
    pd = SimpleNamespace(r0=0, r1=500, level_ptr=np.array([0, 500, C]), n_levels=2,
                         level_edges_here=lambda lev: (rows, ch) if lev == 0 else (rows[:0], ch[:0]))
    mask = rng.integers(0, 2**63, (C, W), dtype=np.uint64)
    want = mask.copy()
    np.bitwise_or.at(want, rows, want[ch])
    tracemalloc.start()
    _masks_rows(np, pd, "out", mask)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_array_equal(mask, want)
    assert peak < 16 << 20, peak


@pytest.mark.parametrize("phase", ["_intervals_here", "_sweep_side"])
def test_a_failure_in_one_ranks_turn_ends_every_rank(phase, monkeypatch):
    """A rank that fails its turn of phase 4 or 5 (out of memory, a sweep's error flag) while the
    others wait for its broadcast: every rank raises, naming that rank and its error, instead of
    the others waiting for ever (the harness's barrier, cut to 10 s here, would break)."""
    import threading

    import distgrail.stages.partitioned_dag as pdag
    from distgrail.errors import DistGrailError

    real = getattr(pdag, phase)

    def fails_on_rank_1(xp, pd, *a):
        if pd.r0 > 0 and pd.r1 == pd.C:  # (the last of 3 ranks: its turn comes first in phase 4)
            raise MemoryError("out of memory in the sweep")
        return real(xp, pd, *a)

    monkeypatch.setattr(pdag, phase, fails_on_rank_1)
    n, src, dst = CASES["dag 3"]
    th = Threads(3)
    th.bar = threading.Barrier(3, timeout=10)

    def run(r, ex, s, d):
        try:
            spread_all(np, ex, s, d, n, some_ids)
        except DistGrailError as e:
            return str(e)
        return "finished"

    got = th.run(run, src, dst)
    assert all("rank 2" in g and "out of memory in the sweep" in g for g in got), got


def test_the_exchanges_peel_block_is_the_fewest_heads_of_a_block():
    """An exchange that names its ``peel_block`` (NCCL's: 2^16) sets the blocks' floor; Counted
    passes it on. A chain of 50 levels on 2 ranks: every block of the floor's size, one a level."""
    import distgrail.stages.partitioned_dag as pdag
    from distgrail.mpi.exchange import NcclExchange
    from distgrail.stages.partitioned_sweeps import ArraySweeps, block_bytes

    assert NcclExchange.peel_block == 1 << 16
    n = 50
    src, dst = np.arange(n - 1), np.arange(1, n)

    def run(r, ex, s, d):
        ex.peel_block = 1 << 10
        counted = Counted(ex)
        assert counted.peel_block == 1 << 10
        ptr, head = ArraySweeps(np).rows(s, d, n)
        return pdag.csr_levels(np, counted, n, ptr, head)[1], counted.exchanged_bytes

    for L, sent in Threads(2).run(run, src, dst):
        assert L == n and sent == L * block_bytes(1 << 10, 8)  # (L - 1 levels of heads, then an empty one)
