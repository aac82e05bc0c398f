"""``--partition auto`` for speed (issue 42): with 2+ ranks a plain text graph one GPU holds is
partitioned, and its SCC sweeps stop after ``DISTGRAIL_PARTITION_ROUNDS`` exchanges, the alive
edges then finishing on the root. The rounds limit must never change an SCC (against SciPy, over
simulated ranks), must bound the exchanges of a deep graph, and ``wants_partition`` must pick
that mode only where it is meant to."""

from __future__ import annotations

import contextlib
import gzip
import os

import numpy as np
import pytest

from distgrail.io.binary import write_binary_graph
from distgrail.io.graph import EdgeGraph
from distgrail.io.read import read_graph
from distgrail.mpi import partition as part
from distgrail.stages.condense import condense
from distgrail.stages.partitioned_scc import Counted, condense_partitioned, partitioned_reps
from test_parse_mpi import shared_dir  # noqa: F401 - the fixture: a directory every rank sees
from test_partition import ARRAYS, GRAPHS, OnDevice, Threads, _scipy_reps, same_as_one_process_and_bfs, \
    written_mpi_graphs


@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("rounds", [0, 1, 2, 3, 5, 17])
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_reps_under_a_rounds_limit_equal_scipy_sccs(name, rounds, K):
    """Whatever sweep the limit cuts (trim, colour, claim), the SCCs are SciPy's on every rank."""
    n, src, dst = GRAPHS[name]
    got = Threads(K).run(lambda r, ex, s, d: partitioned_reps(np, s, d, n, ex, 0, rounds), src, dst)
    want = _scipy_reps(n, src, dst)
    for r in range(K):
        np.testing.assert_array_equal(got[r], want, err_msg=f"{name} rounds {rounds} rank {r}")


@pytest.mark.parametrize("rounds", [0, 4])
@pytest.mark.parametrize("name", ["chain of cycles", "deep chain", "giant", "dense dag", "random 3"])
def test_condensation_under_a_rounds_limit_equals_condense(name, rounds):
    n, src, dst = GRAPHS[name]
    got = Threads(3).run(lambda r, ex, s, d: condense_partitioned(np, s, d, n, ex, 0, rounds), src, dst)
    want = condense(EdgeGraph(n=n, src=src.astype(np.int32), dst=dst.astype(np.int32)))
    for k in ARRAYS:
        np.testing.assert_array_equal(getattr(got[0], k), getattr(want, k), err_msg=f"{name} {k}")


def _layered(levels: int, width: int):
    """A DAG of ``levels`` levels of ``width`` vertices, each vertex an edge to two of the next
    level: one colour sweep per level, the trim removing too few vertices a round to go on."""
    v = np.arange(levels * width - width)
    s = np.concatenate((v, v))
    d = np.concatenate((v + width, (v // width + 1) * width + (v + 1) % width))
    return levels * width, s.astype(np.int64), d.astype(np.int64)


def test_a_rounds_limit_bounds_the_exchanges_of_a_deep_dag():
    """600 levels: unlimited, hundreds of exchanges and nothing gathered; limited to 8, at most
    a few more than 8 (the count of alive edges, the gather, the broadcast) and the edges
    gathered to the root instead; the same SCCs either way."""
    n, src, dst = _layered(600, 70)
    stats = {}
    for rounds in (None, 8):
        got = Threads(2).run(lambda r, ex, s, d: (lambda c: (partitioned_reps(np, s, d, n, c, 0, rounds), c.stats()))(
            Counted(ex)), src, dst)
        np.testing.assert_array_equal(got[0][0], _scipy_reps(n, src, dst))
        stats[rounds] = got[0][1]
    assert stats[None]["sweeps"] > 300, stats
    assert stats[None]["gathered bytes"] == 0, stats
    assert stats[8]["sweeps"] <= 8 + 2, stats
    assert stats[8]["gathered bytes"] > 0, stats


@pytest.mark.gpu
@pytest.mark.parametrize("rounds", [0, 3])
@pytest.mark.parametrize("name", ["giant", "chain of cycles backward", "deep chain", "dense dag"])
def test_rounds_limit_on_cupy_gives_the_same_sccs(name, rounds):
    """The limited sweeps with xp = CuPy (the root's CudaSteps finishing) over 3 simulated ranks."""
    cp = pytest.importorskip("cupy")
    n, src, dst = GRAPHS[name]

    def on_gpu(r, ex, s, d):
        with cp.cuda.Device(0):
            return cp.asnumpy(partitioned_reps(cp, cp.asarray(s), cp.asarray(d), n, OnDevice(cp, ex), 0, rounds))

    got = Threads(3).run(on_gpu, src, dst)
    for r in range(3):
        np.testing.assert_array_equal(got[r], _scipy_reps(n, src, dst), err_msg=f"{name} rank {r}")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("rounds", [None, 0, 3])
def test_rounds_limit_over_mpi_ranks_gives_the_same_sccs(rounds):
    """Real ranks, the host exchange: a deep DAG and a chain of cycles, each rank a block of edges."""
    from mpi4py import MPI

    from distgrail.mpi.exchange import MpiExchange

    comm = MPI.COMM_WORLD
    for n, src, dst in (_layered(40, 9), GRAPHS["chain of cycles backward"], GRAPHS["giant"]):
        lo, hi = src.size * comm.rank // comm.size, src.size * (comm.rank + 1) // comm.size
        c = Counted(MpiExchange(comm, np))
        got = partitioned_reps(np, src[lo:hi], dst[lo:hi], n, c, 0, rounds)
        np.testing.assert_array_equal(got, _scipy_reps(n, src, dst))
        if rounds is not None:
            assert c.sweeps <= rounds + 2, (rounds, c.stats())


def test_the_rounds_limit_bounds_every_exchange_of_the_colour_sweeps():
    """One cycle of 2,000 vertices: trimming removes nothing and the colour travels one vertex a
    sweep (its exchanges mostly allgathers of the frontier, not allreduces): unlimited, thousands
    of exchanges; limited, at most the limit and a few more (the count of alive edges, the gather,
    the broadcast); SciPy's SCC either way."""
    n = 2000
    src, dst = np.arange(n), (np.arange(n) + 1) % n
    want = _scipy_reps(n, src, dst)
    for rounds in (None, 8, 64):
        got = Threads(2).run(lambda r, ex, s, d: (lambda c: (partitioned_reps(np, s, d, n, c, 0, rounds), c.stats()))(
            Counted(ex)), src, dst)
        np.testing.assert_array_equal(got[0][0], want)
        if rounds is None:
            assert got[0][1]["exchanges"] > 1000, got[0][1]
        else:
            assert got[0][1]["exchanges"] <= rounds + 4, (rounds, got[0][1])


@pytest.mark.mpi(min_size=2)
def test_a_rank_0_that_could_not_finish_drops_the_rounds_limit(shared_dir, monkeypatch):  # noqa: F811
    """The speed branch is chosen on the preflight's estimates; after the read rank 0 checks the
    exact sizes, and where it could not take every edge the sweeps run unlimited (many sweeps, no
    gather of every edge); the index is one process's either way."""
    from mpi4py import MPI

    import distgrail

    comm = MPI.COMM_WORLD
    monkeypatch.setenv("DISTGRAIL_PARTITION_GATHER", "0")
    monkeypatch.setattr(part, "wants_partition", lambda *a, **k: (True, 0))
    sweeps = {}
    for fits in (True, False):
        monkeypatch.setattr(part, "_root_can_finish", lambda *a, _f=fits: _f)
        for name, path, nv in written_mpi_graphs(comm, shared_dir):
            if name != "deep_chain.txt":
                continue
            out = os.path.join(shared_dir, f"{name}.{fits}.h5")
            idx = distgrail.build_index(path, dims=3, comm=comm, partition="auto", backend="cpu", output=out,
                                        num_vertices=nv)
            sweeps[fits] = max(r["sweeps"] for r in idx.meta["partition"])
            if comm.rank == 0:
                same_as_one_process_and_bfs(idx, path, nv, out, os.path.join(shared_dir, f"{name}.{fits}.one.h5"))
            comm.Barrier()
    assert sweeps[True] <= 2 < sweeps[False], sweeps


def test_root_can_finish_counts_exact_sizes(monkeypatch):
    assert part._root_can_finish(FakeCpu(), 10, 100, 2, 50)
    assert not part._root_can_finish(FakeCpu(), 10, part.SPEED_EDGES + 1, 2, 50)
    monkeypatch.setattr(part, "_free_bytes", lambda be: part.root_finish_bytes(10**6, 10**7, 2) - 8 * 5 * 10**6)
    assert part._root_can_finish(FakeGpu(), 10**6, 10**7, 2, 5 * 10**6)
    assert not part._root_can_finish(FakeGpu(), 10**6, 10**7 + 1000, 2, 5 * 10**6)


# ------------------------------------------------------------------ wants_partition's choice

class FakeGpu:
    """A GPU backend as ``wants_partition`` sees one: is_gpu and a device context."""

    is_gpu = True

    @contextlib.contextmanager
    def on_device(self):
        yield


class FakeCpu(FakeGpu):
    is_gpu = False


@pytest.fixture
def gpu_of(monkeypatch):
    """Sets the fake GPU's free bytes and the whole build's need (the real estimate is the
    preflight's, tested elsewhere)."""
    import distgrail.gpu.memory as memory

    def set_(have, whole):
        monkeypatch.setattr(memory, "available_gpu_bytes", lambda share=1: (have, have, 0))
        monkeypatch.setattr(memory, "gpu_bytes_needed", lambda *a, **k: whole)
    return set_


def _edges(tmp_path, name="g.txt"):
    p = tmp_path / name
    p.write_text("".join(f"{i} {(i * 7 + 1) % 50}\n" for i in range(200)))
    return str(p)


def test_auto_partitions_a_text_graph_one_gpu_holds_with_a_rounds_limit(tmp_path, gpu_of, monkeypatch):
    gpu_of(have=10**12, whole=10**6)
    g = _edges(tmp_path)
    args = ("auto", FakeGpu(), g, "auto", None, 4, "auto")
    assert part.wants_partition(*args, 2, True) == (True, 64)
    monkeypatch.setenv("DISTGRAIL_PARTITION_ROUNDS", "7")
    assert part.wants_partition(*args, 3, True) == (True, 7)
    assert part.wants_partition(*args, 1, True) == (False, None)  # one rank: nothing to split
    assert part.wants_partition("auto", FakeCpu(), g, "auto", None, 4, "auto", 2, True) == (False, None)
    assert part.wants_partition("off", FakeGpu(), g, "auto", None, 4, "auto", 2, True) == (False, None)
    assert part.wants_partition("on", FakeGpu(), g, "auto", None, 4, "auto", 2) == (True, None)


def test_auto_for_speed_needs_own_gpus_room_on_every_rank_and_a_root_that_can_finish(tmp_path, gpu_of, monkeypatch):
    """Ranks sharing a GPU (or exchanging through the host) gain nothing; a rank whose GPU has less
    free memory than its share, or a rank 0 that could not take every edge when the rounds run
    out, or more edges than one sort on rank 0 takes: partition off, as before."""
    g = _edges(tmp_path)
    args = ("auto", FakeGpu(), g, "auto", None, 4, "auto", 2)
    gpu_of(have=10**12, whole=10**6)
    assert part.wants_partition(*args, True) == (True, 64)
    assert part.wants_partition(*args, False) == (False, None)
    assert part.wants_partition(*args, True, 10**12) == (True, 64)
    assert part.wants_partition(*args, True, 100 << 20) == (False, None)  # another rank's GPU nearly full
    gpu_of(have=part.root_finish_bytes(200, 200, 2) - 1, whole=10**6)
    assert part.wants_partition(*args, True) == (False, None)
    gpu_of(have=part.root_finish_bytes(200, 200, 2) + (1 << 20), whole=10**6)
    assert part.wants_partition(*args, True) == (True, 64)
    monkeypatch.setattr(part, "SPEED_EDGES", 199)
    assert part.wants_partition(*args, True) == (False, None)


def test_root_finish_bytes_count_every_edge_on_rank_0():
    n, m = 10**6, 10**8
    base = part.root_finish_bytes(n, 0, 4)
    assert part.root_finish_bytes(n, m, 4) - base == 48 * m + 8 * (m // 4) + part.sweep_bytes(n, m // 4) - \
        part.sweep_bytes(n, 0)
    assert part.root_finish_bytes(n, m, 2) > part.root_finish_bytes(n, m, 4)


def test_auto_keeps_a_stream_or_an_h5_graph_on_rank_0_when_one_gpu_holds_it(tmp_path, gpu_of):
    """A compressed file has no byte ranges and a .h5 graph is read in row blocks whose DAG
    paths (the paper DAG: 2,501 levels) lost with partitioning: both stay off while one GPU
    holds them; either is partitioned, without a rounds limit, when none does."""
    gz = tmp_path / "g.txt.gz"
    gz.write_bytes(gzip.compress(open(_edges(tmp_path), "rb").read()))
    h5 = str(tmp_path / "g.h5")
    write_binary_graph(read_graph(_edges(tmp_path)), h5)
    for g in (str(gz), h5):
        gpu_of(have=10**12, whole=10**6)
        assert part.wants_partition("auto", FakeGpu(), g, "auto", None, 4, "auto", 2, True) == (False, None), g
        gpu_of(have=10**9, whole=10**12)
        assert part.wants_partition("auto", FakeGpu(), g, "auto", None, 4, "auto", 2) == (True, None), g


def test_auto_partitions_without_a_limit_when_no_gpu_holds_the_graph(tmp_path, gpu_of):
    g = _edges(tmp_path)
    gpu_of(have=10**9, whole=10**12)
    assert part.wants_partition("auto", FakeGpu(), g, "auto", None, 4, "auto", 2) == (True, None)
    gpu_of(have=1000, whole=10**12)  # nor a share: refused later, not partitioned
    assert part.wants_partition("auto", FakeGpu(), g, "auto", None, 4, "auto", 2) == (False, None)


@pytest.mark.gpu
@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("rounds", ["64", "0"])
def test_auto_on_own_gpus_partitions_plain_text_and_builds_the_one_process_index(shared_dir, rounds, monkeypatch):  # noqa: F811
    """Under mpirun with a GPU per rank: auto partitions each text graph (the per-rank report is
    there), with the rounds spent at once (0) too, and every index is one process's byte for
    byte and answers as BFS does. Ranks sharing a GPU: auto stays off (no report)."""
    cp = pytest.importorskip("cupy")
    from mpi4py import MPI

    import distgrail
    from distgrail.mpi.binding import bind_gpu, ranks_on_this_gpu

    comm = MPI.COMM_WORLD
    own = cp.cuda.runtime.getDeviceCount() >= comm.size
    bind_gpu(comm, "gpu", share=not own)  # (ranks sharing a GPU: bound here, as --share-gpus does; kept by the build)
    sharing = ranks_on_this_gpu()  # (its fit checks count this share of the GPU's free memory)
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)  # (the ranks of this node)
    assert sharing == 1 if own else (cp.cuda.runtime.getDeviceCount() > 1 or sharing == local.size), sharing
    local.Free()
    monkeypatch.setenv("DISTGRAIL_PARTITION_ROUNDS", rounds)
    for name, path, nv in written_mpi_graphs(comm, shared_dir):
        out = os.path.join(shared_dir, f"{name}.auto{rounds}.h5")
        idx = distgrail.build_index(path, dims=3, comm=comm, partition="auto", backend="gpu", output=out,
                                    num_vertices=nv)
        assert ("partition" in idx.meta) == own, (name, own)
        if comm.rank == 0:
            same_as_one_process_and_bfs(idx, path, nv, out, os.path.join(shared_dir, f"{name}.auto{rounds}.one.h5"))
        comm.Barrier()


def _counted_reps(n, src, dst, narrow, K=2):
    return Threads(K).run(lambda r, ex, s, d: (lambda c: (partitioned_reps(np, s, d, n, c, 0, None, narrow=narrow),
                                                          c.stats()))(Counted(ex)), src, dst)


@pytest.mark.parametrize("shape", ["chain", "cycle", "layered"])
def test_without_a_rounds_limit_sweeps_that_crawl_go_to_the_root(shape):
    """No rounds limit (``--partition on``): a chain trims two vertices an exchange, a layered DAG
    a level's edges, and a cycle's colour moves one hop an exchange, so they ran an exchange per
    link or level (a 10 M chain: millions).
    The narrow rule asks at 64 exchanges whether the root may take the alive edges; yes: they go
    there, a few exchanges later; SciPy's SCCs either way."""
    n = 3000
    src, dst = np.arange(n - 1), np.arange(1, n)
    if shape == "cycle":
        src, dst = np.arange(n), (np.arange(n) + 1) % n
    if shape == "layered":  # 70 vertices a level: 140 alive edges gone an exchange, 600 levels
        n, src, dst = _layered(600, 70)
    asked = []
    got = _counted_reps(n, src, dst, lambda left: asked.append(left) or True)
    np.testing.assert_array_equal(got[0][0], _scipy_reps(n, src, dst))
    assert got[0][1]["exchanges"] <= 64 + 4 and got[0][1]["gathered bytes"] > 0, got[0][1]
    assert len(asked) == 2 and asked[0] == asked[1] and asked[0] > src.size // 2  # every rank asked once, alike


def test_a_root_that_cannot_take_them_keeps_the_sweeps_going_asked_at_each_doubling():
    n = 3000
    src, dst = np.arange(n - 1), np.arange(1, n)
    asked = []
    got = _counted_reps(n, src, dst, lambda left: asked.append(left) or False, K=1)
    np.testing.assert_array_equal(got[0][0], _scipy_reps(n, src, dst))
    assert got[0][1]["exchanges"] > 1000 and got[0][1]["gathered bytes"] == 0, got[0][1]
    assert 5 <= len(asked) <= 7 and asked == sorted(asked, reverse=True)  # at 64, 128, ..., 2048 exchanges


def test_sweeps_that_end_in_a_few_dozen_exchanges_never_ask():
    name = "giant" if "giant" in GRAPHS else sorted(GRAPHS)[0]
    n, src, dst = GRAPHS[name]
    asked = []
    got = _counted_reps(n, src, dst, lambda left: asked.append(left) or True)
    np.testing.assert_array_equal(got[0][0], _scipy_reps(n, src, dst))
    assert got[0][1]["exchanges"] < 64 and asked == [], (got[0][1], asked)


@pytest.mark.mpi(min_size=2)
def test_partition_on_hands_a_long_chain_to_rank_0_after_a_few_dozen_exchanges(shared_dir, monkeypatch):  # noqa: F811
    """``--partition on`` (no rounds limit), a chain of 3,000 vertices, nothing gathered by size:
    the sweeps crawl (two vertices an exchange) and rank 0 can take the edges, so they go there
    at the narrow rule's check; the index is one process's."""
    from mpi4py import MPI

    import distgrail

    comm = MPI.COMM_WORLD
    monkeypatch.setenv("DISTGRAIL_PARTITION_GATHER", "0")
    path = os.path.join(shared_dir, "chain3k.txt")
    if comm.rank == 0:
        with open(path, "w") as f:
            f.write("".join(f"{i} {i + 1}\n" for i in range(2999)))
    comm.Barrier()
    out = os.path.join(shared_dir, "chain3k.h5")
    idx = distgrail.build_index(path, dims=3, comm=comm, partition="on", backend="cpu", output=out)
    sweeps = max(r["sweeps"] for r in idx.meta["partition"])
    assert sweeps <= 64 + 4, idx.meta["partition"]
    if comm.rank == 0:
        same_as_one_process_and_bfs(idx, path, None, out, os.path.join(shared_dir, "chain3k.one.h5"))
    comm.Barrier()
