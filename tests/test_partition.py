"""The partitioned build (issue 24): the sweeps of distgrail/stages/partitioned_scc.py over K
simulated ranks (threads exchanging through a fake allreduce) against SciPy's SCCs and
``condense``; under MPI, ``build_index(partition="on")`` against a one-process build, byte for
byte, and against BFS."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from distgrail.errors import DistGrailError
from distgrail.io.graph import EdgeGraph
from distgrail.stages.condense import condense
from distgrail.stages.partitioned_scc import Counted, combine_max, combine_or, condense_partitioned, partitioned_reps

ARRAYS = ("comp", "indptr", "indices", "rindptr", "rindices", "level", "level_ptr")
OPS = {"max": np.maximum, "min": np.minimum, "sum": np.add, "bor": np.bitwise_or}


class Threads:
    """K simulated ranks in one process: each a thread, exchanging through shared slots."""

    def __init__(self, K):
        self.K = K
        self.bar = threading.Barrier(K, timeout=120)  # ranks out of step fail instead of hanging
        self.slots = [None] * K
        self.calls = 0

    def _share(self, r, a):
        self.slots[r] = a
        self.bar.wait()
        got = list(self.slots)
        self.bar.wait()
        return got

    def rank(self, r):
        T = self

        class Ex:
            root = r == 0
            rank, size = r, T.K

            def allreduce(self, a, op):
                T.calls += r == 0
                got = T._share(r, np.array(a))
                out = got[0].copy()
                for b in got[1:]:
                    out = OPS[op](out, b)
                return out

            def gather(self, a):
                got = T._share(r, np.array(a))
                return np.concatenate(got) if r == 0 else None

            def bcast(self, a):
                return np.array(T._share(r, a)[0])

            def bcast_from(self, a, root):
                return np.array(T._share(r, None if a is None else np.array(a))[root])

            def counts(self, k):
                return [int(c) for c in T._share(r, int(k))]

            def agree(self, step, error):
                got = T._share(r, error)
                bad = [j for j, e in enumerate(got) if e is not None]
                if bad:
                    raise DistGrailError(f"rank {bad[0]}, {step}: {got[bad[0]]}")

            def allgather(self, a, counts=None):
                got = T._share(r, np.array(a))
                assert counts is None or counts == [g.size for g in got]
                return np.concatenate(got)

            def alltoall(self, parts):
                got = T._share(r, [np.array(p) for p in parts])
                return np.concatenate([got[j][r] for j in range(T.K)])

        return Ex()

    def run(self, fn, src, dst):
        """``fn(rank, ex, src_part, dst_part)`` on every rank, edges split K ways (contiguous)."""
        bounds = np.linspace(0, src.size, self.K + 1).astype(int)
        out, errors = [None] * self.K, []

        def one(r):
            try:
                out[r] = fn(r, self.rank(r), src[bounds[r]:bounds[r + 1]], dst[bounds[r]:bounds[r + 1]])
            except BaseException as e:  # noqa: BLE001 - reported by the test
                errors.append(e)
                self.bar.abort()

        ts = [threading.Thread(target=one, args=(r,)) for r in range(self.K)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise errors[0]
        return out


def _arr(x):
    return np.asarray(x, dtype=np.int64)


def graphs():
    rng = np.random.default_rng(5)
    out = {"empty": (0, _arr([]), _arr([])), "one vertex": (1, _arr([]), _arr([])),
           "self loops": (3, _arr([0, 1, 1, 2]), _arr([0, 1, 2, 2])),
           "duplicates": (4, _arr([0, 0, 1, 1, 2, 2]), _arr([1, 1, 0, 0, 3, 3])),
           "isolated": (10, _arr([2, 3]), _arr([3, 2])),
           "cycle": (7, _arr(range(7)), _arr([(i + 1) % 7 for i in range(7)]))}
    n = 300
    out["deep chain"] = (n, _arr(range(n - 1))[::-1], _arr(range(1, n))[::-1])
    out["reverse chain"] = (n, _arr(range(1, n)), _arr(range(n - 1)))
    s, d = [], []
    for c in range(60):  # chain of 3-cycles, linked forward
        a = 3 * c
        s += [a, a + 1, a + 2]
        d += [a + 1, a + 2, a]
        if c:
            s.append(a - 1)
            d.append(a)
    out["chain of cycles"] = (180, _arr(s), _arr(d))
    back = [(b, a) if b == a + 1 and b % 3 == 0 else (a, b) for a, b in zip(s, d)]  # links toward smaller ids
    out["chain of cycles backward"] = (180, _arr([a for a, _ in back]), _arr([b for _, b in back]))
    u, v = np.triu_indices(40, 1)
    out["dense dag"] = (40, _arr(v), _arr(u))
    out["giant"] = (200, _arr(rng.integers(0, 200, 2000)), _arr(rng.integers(0, 200, 2000)))
    for seed in range(4):
        r = np.random.default_rng(seed)
        nn = int(r.integers(20, 400))
        m = int(r.integers(0, 3 * nn))
        out[f"random {seed}"] = (nn, _arr(r.integers(0, nn, m)), _arr(r.integers(0, nn, m)))
    return out


GRAPHS = graphs()


def _scipy_reps(n, src, dst):
    """Smallest vertex of each vertex's SCC, by SciPy."""
    if n == 0:
        return np.zeros(0, np.int64)
    a = sp.csr_matrix((np.ones(src.size, bool), (src, dst)), shape=(n, n))
    _, lab = connected_components(a, directed=True, connection="strong")
    first = np.full(lab.max() + 1, n)
    np.minimum.at(first, lab, np.arange(n))
    return first[lab]


@pytest.mark.parametrize("K", [1, 2, 3, 5])
@pytest.mark.parametrize("gather", [0, 10**12, 7])
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_partitioned_reps_equal_scipy_sccs(name, gather, K):
    n, src, dst = GRAPHS[name]
    got = Threads(K).run(lambda r, ex, s, d: partitioned_reps(np, s, d, n, ex, gather), src, dst)
    want = _scipy_reps(n, src, dst)
    for r in range(K):
        np.testing.assert_array_equal(got[r], want, err_msg=f"{name} rank {r}")


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_the_roots_finish_on_the_cpu_equals_the_array_steps(name):
    """The root's SCCs of the gathered edges (the CPU backend: SciPy's strong components, linear)
    are the one-process array-code steps' (NumpySteps, a NumPy pass per level): each vertex's
    smallest member, int64."""
    from distgrail.stages.partitioned_scc import _root_reps
    from distgrail.stages.scc import NumpySteps, scc_reps

    n, src, dst = GRAPHS[name]
    got = _root_reps(np, src, dst, n)
    steps = NumpySteps()
    ptr, idx = steps.edge_csr(src.astype(np.int32), dst.astype(np.int32), n)
    rep, _, _ = scc_reps(steps, ptr, idx, n)
    want = np.arange(n) if rep is None else rep
    assert got.dtype == np.int64 and got.shape == (n,)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("gather", [0, 10**12])
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_partitioned_condensation_equals_condense(name, gather, K):
    n, src, dst = GRAPHS[name]
    got = Threads(K).run(lambda r, ex, s, d: condense_partitioned(np, s, d, n, ex, gather), src, dst)
    assert all(g is None for g in got[1:])
    want = condense(EdgeGraph(n=n, src=src.astype(np.int32), dst=dst.astype(np.int32)))
    assert got[0].n == want.n
    for k in ARRAYS:
        a, b = getattr(got[0], k), getattr(want, k)
        assert a.dtype == b.dtype, (name, k)
        np.testing.assert_array_equal(a, b, err_msg=f"{name} {k}")


def test_gather_threshold_decides_sweeps_and_bytes():
    """Forced to 0 the chain of cycles is peeled by sweeps (one allreduce each); forced huge one
    gather settles it: fewer sweeps, the edges' bytes gathered instead."""
    n, src, dst = GRAPHS["chain of cycles backward"]
    counts = {}
    for gather in (0, 10**12):
        got = Threads(2).run(lambda r, ex, s, d: (lambda c: (partitioned_reps(np, s, d, n, c, gather), c.stats()))(
            Counted(ex)), src, dst)
        counts[gather] = got[0][1]
        np.testing.assert_array_equal(got[0][0], _scipy_reps(n, src, dst))
    assert counts[0]["sweeps"] > 10 * counts[10**12]["sweeps"], counts
    assert counts[10**12]["gathered bytes"] > counts[0]["gathered bytes"], counts
    assert counts[0]["allreduce bytes"] >= counts[0]["sweeps"] * 8


@pytest.mark.parametrize("hint", [1, 10**6])
@pytest.mark.parametrize("changes", [1, 5, 400])
@pytest.mark.parametrize("K", [1, 2, 3])
def test_combine_sends_the_frontier_or_the_array_as_the_hint_says(K, changes, hint):
    """combine_max / combine_or give the elementwise MAX / OR of the ranks' arrays whichever way
    they go: a small last frontier (the hint, the same on every rank) sends ids (allgather, no
    allreduce), a large one the int32 array and the packed bitmap (allreduce only)."""
    n = 1000
    old = np.arange(n, dtype=np.int32)

    def one(r, ex, s, d):
        rng = np.random.default_rng(r)
        at = rng.choice(n, changes, replace=False)
        nxt = old.copy()
        nxt[at] += rng.integers(1, 50, changes, dtype=np.int32)
        flags = np.zeros(n, bool)
        nflags = flags.copy()
        nflags[at] = True
        c = Counted(ex)
        mx = combine_max(np, c, old, nxt.copy(), hint)
        orr = combine_or(np, c, flags, nflags.copy(), hint)
        return mx, orr, nxt, nflags, c.stats()

    got = Threads(K).run(one, np.zeros(K, np.int64), np.zeros(K, np.int64))
    want_max = np.maximum.reduce([g[2] for g in got])
    want_or = np.logical_or.reduce([g[3] for g in got])
    for mx, orr, _, _, st in got:
        np.testing.assert_array_equal(mx, want_max)
        np.testing.assert_array_equal(orr, want_or)
        assert orr.dtype == np.bool_
        want = ({"allreduce bytes": 0, "exchanged bytes": 16 * changes} if hint == 1 else
                {"allreduce bytes": 4 * n + -(-n // 8), "exchanged bytes": 0})
        assert {k: st[k] for k in want} == want, st
    for h in (1, 10**6):  # nothing changed anywhere: nothing changes, either way (a frontier of 0 ends the sweeps)
        same = Threads(K).run(lambda r, ex, s, d: (combine_max(np, ex, old, old.copy(), h),
                                                   combine_or(np, ex, old > n, old > n, h)), np.zeros(K), np.zeros(K))
        assert all(np.array_equal(a, old) and not b.any() for a, b in same)


def test_colour_sweeps_send_frontiers_not_whole_arrays():
    """A long cycle peeled by sweeps (no gather): about n colour sweeps and n reach sweeps, each
    frontier one vertex, so they go as id lists: the bytes sent stay far below one n-sized array
    per sweep (what the sweeps sent before: 4n bytes each, 4n^2 in all)."""
    n = 3000
    src, dst = _arr(range(n - 1)), _arr(range(1, n))
    src, dst = np.concatenate((src, [n - 1])), np.concatenate((dst, [0]))  # one giant cycle
    got = Threads(2).run(lambda r, ex, s, d: (lambda c: (partitioned_reps(np, s, d, n, c, 0), c.stats()))(
        Counted(ex)), src, dst)
    np.testing.assert_array_equal(got[0][0], np.zeros(n, np.int64))
    st = got[0][1]
    assert st["exchanged bytes"] >= 8 * n, st  # the frontiers: about 2n sweeps by allgather
    assert st["allreduce bytes"] + st["exchanged bytes"] < n * n / 8, st


# ---------------------------------------------------------------- under MPI: build_index(partition="on")

def _text(n, src, dst, with_n=True):
    return "".join(f"{a} {b}\n" for a, b in zip(src.tolist(), dst.tolist()))


def mpi_graphs():
    """(name, text, num_vertices): generated graphs as edge-list files."""
    g = graphs()
    out = []
    for name in ("cycle", "giant", "deep chain", "chain of cycles backward", "dense dag", "random 1", "random 3",
                 "isolated", "duplicates"):
        n, s, d = g[name]
        out.append((name.replace(" ", "_") + ".txt", _text(n, s, d), n))
    out.append(("fewer_edges_than_ranks.txt", "0 1\n", 5))  # empty ranks
    return out


from test_parse_mpi import shared_dir  # noqa: E402,F401 - the fixture: a directory every rank sees


SKIP_ATTRS = ("backend", "transport", "dims_split", "partition", "layout", "build_id", "parts",
              "blake3_of_attributes")  # (the last seals the placement's own attributes too)


def assert_same_index_file(a, b):
    """Every dataset equal (values and dtype) and every attribute but the placement's own."""
    import h5py

    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names, other = [], []
        fa.visititems(lambda k, v: names.append(k) if isinstance(v, h5py.Dataset) else None)
        fb.visititems(lambda k, v: other.append(k) if isinstance(v, h5py.Dataset) else None)
        assert sorted(names) == sorted(other)
        for k in names:
            assert fa[k].dtype == fb[k].dtype, k
            np.testing.assert_array_equal(fa[k][...], fb[k][...], err_msg=k)
        ka = {k for k in fa.attrs if k not in SKIP_ATTRS}
        assert ka == {k for k in fb.attrs if k not in SKIP_ATTRS}
        for k in ka:
            assert str(fa.attrs[k]) == str(fb.attrs[k]), k


def written_mpi_graphs(comm, shared_dir):
    """Collective: rank 0 writes :func:`mpi_graphs` into ``shared_dir``; ``(name, path, num_vertices)``."""
    items = mpi_graphs()
    if comm.rank == 0:
        for name, text, _ in items:
            with open(os.path.join(shared_dir, name), "w") as f:
                f.write(text)
    comm.Barrier()
    return [(name, os.path.join(shared_dir, name), nv) for name, _, nv in items]


def same_as_one_process_and_bfs(idx, path, nv, out, one, **kw):
    """The index file ``out`` equals a one-process build's (written to ``one``, same ``kw``) and
    ``idx`` answers 300 random pairs as BFS does."""
    import distgrail
    from distgrail.bfs import bfs_reachable, csr_of
    from distgrail.io.read import read_graph

    g = read_graph(path, num_vertices=nv)
    distgrail.build_index(path, dims=3, backend="cpu", output=one, num_vertices=nv, **kw)
    assert_same_index_file(out, one)
    rng = np.random.default_rng(3)
    u, v = rng.integers(0, g.n, 300), rng.integers(0, g.n, 300)
    ans, _ = idx.query(u, v)
    np.testing.assert_array_equal(ans, bfs_reachable(*csr_of(g), u, v), err_msg=path)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("gather", ["0", "1000000000"])
def test_partitioned_index_is_byte_identical_and_exact(shared_dir, gather, monkeypatch):
    from mpi4py import MPI

    import distgrail
    from distgrail.io.read import read_graph

    comm = MPI.COMM_WORLD
    monkeypatch.setenv("DISTGRAIL_PARTITION_GATHER", gather)
    for name, path, nv in written_mpi_graphs(comm, shared_dir):
        out = os.path.join(shared_dir, f"{name}.{gather}.part.h5")
        idx = distgrail.build_index(path, dims=3, comm=comm, partition="on", backend="cpu", output=out,
                                    num_vertices=nv)
        rep = idx.meta["partition"]
        assert len(rep) == comm.size
        g = read_graph(path, num_vertices=nv)
        assert sum(r["edges held"] for r in rep) == g.m, name
        assert all(r["edges read"] == r["edges held"] for r in rep), name  # parsed in ranges, not scattered
        if g.m >= 4 * comm.size:
            assert max(r["edges read"] for r in rep) < g.m, name  # no rank read every edge
        if gather == "0" and g.m:
            assert all(r["sweeps"] >= 2 for r in rep), (name, rep)
        if comm.rank == 0:
            same_as_one_process_and_bfs(idx, path, nv, out, os.path.join(shared_dir, f"{name}.{gather}.one.h5"))
        comm.Barrier()


@pytest.mark.mpi(min_size=2)
def test_partitioned_gra_and_h5_inputs_equal_one_process(shared_dir):
    """A .gra benchmark file (byte ranges, vertex lines summed) and its binary .h5 conversion
    without a stored condensation (CSR row blocks per rank)."""
    from mpi4py import MPI

    import distgrail
    from distgrail.io.binary import write_binary_graph
    from distgrail.io.read import read_graph
    from conftest import DATA_DIR

    comm = MPI.COMM_WORLD
    gra = os.path.join(DATA_DIR, "kegg_dag_uniq.gra")
    h5 = os.path.join(shared_dir, "kegg.h5")
    if comm.rank == 0:
        write_binary_graph(read_graph(gra), h5)
    comm.Barrier()
    for path in (gra, h5):
        out = os.path.join(shared_dir, os.path.basename(path) + ".part.h5")
        idx = distgrail.build_index(path, dims=2, comm=comm, partition="on", backend="cpu", output=out)
        rep = idx.meta["partition"]
        m = read_graph(path).m  # the .h5 CSR holds the distinct edges
        assert sum(r["edges held"] for r in rep) == m and max(r["edges read"] for r in rep) < m, rep
        if comm.rank == 0:
            one = os.path.join(shared_dir, os.path.basename(path) + ".one.h5")
            distgrail.build_index(path, dims=2, backend="cpu", output=one)
            assert_same_index_file(out, one)
        comm.Barrier()


@pytest.mark.mpi(min_size=2)
def test_partition_off_and_auto_on_cpu_read_on_rank_0(shared_dir):
    """off, and auto on the CPU backend, are AcrossRanks' build: no per-rank partition report."""
    from mpi4py import MPI

    import distgrail

    comm = MPI.COMM_WORLD
    for mode in ("off", "auto"):
        idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, comm=comm, partition=mode, backend="cpu")
        assert "partition" not in idx.meta, mode
    with pytest.raises(distgrail.DistGrailError, match="partition must be one of"):
        distgrail.build_index(distgrail.bundled_graph(), dims=2, comm=comm, partition="yes", backend="cpu")


# ---------------------------------------------------------------- the CLI under mpiexec (serial tests)

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
needs_mpiexec = pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")


def mpirun(n, *args, timeout=120, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))}
    env["MPIEXEC_TIMEOUT"] = str(timeout)
    env.update(env_extra or {})
    return subprocess.run([MPIEXEC, "-n", str(n), sys.executable, "-m", "mpi4py", "-m", "distgrail", *args],
                          env=env, capture_output=True, text=True, timeout=timeout + 30)


@needs_mpiexec
@pytest.mark.parametrize("ranks", [2, 3])
def test_cli_partition_on_under_mpiexec(tmp_path, ranks):
    import json

    import distgrail

    n, s, d = GRAPHS["giant"]
    p = tmp_path / "g.txt"
    p.write_text(_text(n, s, d))
    out, one = tmp_path / "p.h5", tmp_path / "one.h5"
    r = mpirun(ranks, "index", str(p), "-o", str(out), "--backend", "cpu", "--partition", "on", "--dims", "3",
               "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["ranks"] == ranks and "rank1 partition sweeps" in summary["seconds"]
    # the split layout (the default under MPI): every rank's own part's write, rank 0's too (it was
    # missing: only 'rank1 write_part' ...)
    assert {"write_part", "rank1 write_part"} <= set(summary["seconds"]), summary["seconds"]
    distgrail.build_index(str(p), dims=3, backend="cpu", output=one)
    assert_same_index_file(out, one)


@needs_mpiexec
@pytest.mark.parametrize("ranks", [2, 3])
def test_cli_bad_line_in_the_last_ranks_slice_ends_every_rank_with_status_2(tmp_path, ranks):
    lines = [f"{i} {i + 1}\n" for i in range(300)] + ["7 x9\n"]
    p = tmp_path / "bad.txt"
    p.write_text("".join(lines))
    out = tmp_path / "p.h5"
    r = mpirun(ranks, "index", str(p), "-o", str(out), "--backend", "cpu", "--partition", "on")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("distgrail: error:") == 1, r.stderr
    assert str(p) in r.stderr and "301" in r.stderr and "x9" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "MPI_Abort" not in r.stderr
    assert not out.exists() and os.listdir(tmp_path) == ["bad.txt"]


def test_partition_flag_in_help_and_bad_value_is_exit_2(capsys):
    from distgrail.cli import build_parser

    text = " ".join(build_parser()._subparsers._group_actions[0].choices["index"].format_help().split())
    assert "--partition {auto,on,off}" in text and "one process: off" in text
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["index", "g.txt", "-o", "x.h5", "--partition", "maybe"])
    assert e.value.code == 2


class OnDevice:
    """A simulated rank's exchange for CuPy arrays: through host memory, as MpiExchange does."""

    def __init__(self, cp, ex):
        self.cp, self.ex = cp, ex
        self.root, self.rank, self.size = ex.root, ex.rank, ex.size

    def allreduce(self, a, op):
        return self.cp.asarray(self.ex.allreduce(self.cp.asnumpy(a), op))

    def gather(self, a):
        got = self.ex.gather(self.cp.asnumpy(a))
        return None if got is None else self.cp.asarray(got)

    def bcast(self, a):
        return self.cp.asarray(self.ex.bcast(None if a is None else self.cp.asnumpy(a)))

    def bcast_from(self, a, root):
        return self.cp.asarray(self.ex.bcast_from(None if a is None else self.cp.asnumpy(a), root))

    def counts(self, k):
        return self.ex.counts(k)

    def agree(self, step, error):
        return self.ex.agree(step, error)

    def allgather(self, a, counts=None):
        return self.cp.asarray(self.ex.allgather(self.cp.asnumpy(a), counts))

    def alltoall(self, parts):
        return self.cp.asarray(self.ex.alltoall([self.cp.asnumpy(p) for p in parts]))


@pytest.mark.gpu
@pytest.mark.parametrize("gather", [0, 10**12])
@pytest.mark.parametrize("name", ["giant", "chain of cycles backward", "random 2", "dense dag", "empty"])
def test_partitioned_condensation_on_cupy_equals_condense(name, gather):
    """The same sweeps with xp = CuPy (cupyx.scatter_max / scatter_min, the root's CudaSteps), the
    exchange through host memory as MpiExchange does, over 3 simulated ranks."""
    cp = pytest.importorskip("cupy")
    from distgrail.stages.partitioned_scc import partitioned_condensed_edges

    n, src, dst = GRAPHS[name]
    T = Threads(3)

    def on_gpu(r, ex, s, d):
        with cp.cuda.Device(0):
            compact, C, cu, cv = partitioned_condensed_edges(cp, cp.asarray(s), cp.asarray(d), n, OnDevice(cp, ex),
                                                             gather)
            return cp.asnumpy(compact), C, None if cu is None else (cp.asnumpy(cu), cp.asnumpy(cv))

    got = T.run(on_gpu, src, dst)
    want = Threads(3).run(lambda r, ex, s, d: condense_partitioned(np, s, d, n, ex, gather), src, dst)[0]
    compact, C, (cu, cv) = got[0]
    assert C == want.C
    np.testing.assert_array_equal(want.comp, condense(EdgeGraph(n=C, src=cu, dst=cv)).comp[compact])


def test_gpu_memory_limit_parses_units_and_refuses_nonsense(monkeypatch):
    import distgrail
    from distgrail.gpu.memory import gpu_memory_limit

    monkeypatch.setenv("DISTGRAIL_GPU_MEMORY_LIMIT", "512M")
    assert gpu_memory_limit() == 512 << 20
    for bad in ("lots", "-3G", "0"):
        with pytest.raises(distgrail.DistGrailError, match="DISTGRAIL_GPU_MEMORY_LIMIT must be a number of bytes"):
            gpu_memory_limit(bad)


def test_more_components_than_int64_keys_hold_are_refused():
    from distgrail.errors import DistGrailError
    from distgrail.stages.partitioned_scc import MAX_KEYED_COMPONENTS, condensed_keys

    assert MAX_KEYED_COMPONENTS ** 2 <= 2**63 - 1 < (MAX_KEYED_COMPONENTS + 1) ** 2

    import distgrail.stages.partitioned_scc as ps

    real = ps.MAX_KEYED_COMPONENTS
    try:
        ps.MAX_KEYED_COMPONENTS = 5
        with pytest.raises(DistGrailError, match="6 strongly connected components.*at most 5 components"):
            condensed_keys(np, _arr([0, 1]), _arr([1, 2]), np.arange(6, dtype=np.int32))  # 6 singletons
        assert condensed_keys(np, _arr([0, 1]), _arr([1, 2]), np.array([0, 0, 2, 3, 4, 5], np.int32))[1] == 5
    finally:
        ps.MAX_KEYED_COMPONENTS = real
