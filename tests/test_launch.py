"""Whole MPI jobs started from a serial test: `mpiexec -n N python -m mpi4py -m distgrail ...`.

These are not pytest-mpi tests: they run in the serial suite and launch PyPI's MPICH `mpiexec`
themselves (with MPIEXEC_TIMEOUT, so a hang fails the test instead of blocking CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import distgrail
import distgrail.cli
import distgrail.io.generate
import distgrail.io.pairs
import distgrail.update
from conftest import index_bytes

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
pytestmark = pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")


def mpirun(n, *args, timeout=60, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))}
    env["MPIEXEC_TIMEOUT"] = str(timeout)
    t = time.perf_counter()
    r = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, "-m", "mpi4py", *args], env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=timeout + 30)
    r.seconds = time.perf_counter() - t
    return r


def _other_mpi_jobs() -> bool:
    """True when some MPI job of another process runs (its /dev/shm segments are not ours)."""
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"hydra_pmi_proxy" in cmd or b"mpiexec" in cmd.split(b"\0")[0]:
            return True
    return False


def shm_segments():
    """The /dev/shm names now, or None when another MPI job runs (its segments would be counted)."""
    if not os.path.isdir("/dev/shm") or _other_mpi_jobs():
        return None
    return set(os.listdir("/dev/shm"))


def assert_clean_exit_2(r, message, before):
    """Exit status 2 from every rank, the message printed once (rank 0), no MPI_Abort, and no
    /dev/shm segment left behind (MPICH leaves one per aborted job)."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("distgrail: error:") == 1, r.stderr
    assert f"distgrail: error: {message}" in r.stderr, r.stderr
    assert "MPI_Abort" not in r.stderr + r.stdout and "Traceback" not in r.stderr, r.stderr
    after = shm_segments()
    if before is not None and after is not None:  # no other MPI job ran meanwhile on this machine
        assert not after - before, after - before


@pytest.mark.parametrize("n", [2, 3])
def test_bad_graph_file_ends_every_rank_with_status_2_and_one_message(tmp_path, n):
    bad = tmp_path / "BAD.gra"
    bad.write_text("graph_for_greach\n3\n0: 1 #\n1: 7 #\n2: #\n")
    out = tmp_path / "out.h5"
    before = shm_segments()
    r = mpirun(n, "-m", "distgrail", "index", str(bad), "-o", str(out), "--backend", "cpu")
    assert_clean_exit_2(r, f"rank 0, reading the graph {bad}: {bad}:4: vertex id out of range 0..2, got '7'",
                        before)
    assert os.listdir(tmp_path) == ["BAD.gra"]


def test_bad_argument_under_3_ranks_is_printed_once(tmp_path):
    before = shm_segments()
    r = mpirun(3, "-m", "distgrail", "index", "bundled", "-o", str(tmp_path / "x.h5"), "--dims", "0",
               "--backend", "cpu")
    assert_clean_exit_2(r, "rank 0 (and on ranks 1, 2), checking the arguments: --dims must be an integer >= 1, "
                           "got 0", before)
    assert os.listdir(tmp_path) == []


def test_unwritable_output_ends_every_rank_with_status_2(tmp_path):
    before = shm_segments()
    out = tmp_path / "missing" / "x.h5"
    r = mpirun(2, "-m", "distgrail", "index", "bundled", "-o", str(out), "--backend", "cpu")
    assert_clean_exit_2(r, f"rank 0, checking the output path: {out}: cannot write the output: directory "
                           f"{out.parent} does not exist", before)
    assert os.listdir(tmp_path) == []
    r = mpirun(2, "-m", "distgrail", "info", str(tmp_path / "nope.h5"))  # a one-process command on rank 0
    assert_clean_exit_2(r, f"rank 0, running info: {tmp_path / 'nope.h5'}: no such index file", before)


def test_api_output_on_rank_0_only_under_mpiexec(tmp_path):
    """issue 12 item 4: `build_index(g, comm=comm, output="x.h5" if rank == 0 else None)` ends."""
    script = tmp_path / "api.py"
    out = tmp_path / "x.h5"
    script.write_text(
        "from mpi4py import MPI\n"
        "import distgrail\n"
        "comm = MPI.COMM_WORLD\n"
        f"idx = distgrail.build_index(distgrail.bundled_graph(), dims=3, backend='cpu', comm=comm, "
        f"output={str(out)!r} if comm.Get_rank() == 0 else None)\n"
        "comm.Barrier()\n"
        "print(f'done{comm.Get_rank()}:{idx.C}' if comm.Get_rank() == 0 else '', *(comm.gather(idx.C) or []), flush=True)\n")
    for n in (2, 3):
        out.unlink(missing_ok=True)
        r = mpirun(n, str(script), timeout=60)
        assert r.returncode == 0 and r.seconds < 60, r.stderr
        assert r.stdout.split() == ["done0:3617"] + ["3617"] * n, r.stdout  # every rank holds the Index
        ref = distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu")
        ref.save(tmp_path / "ref.h5")
        assert out.read_bytes() == (tmp_path / "ref.h5").read_bytes()


@pytest.mark.parametrize("where", ["bind_gpu", "shared_labels"])
def test_uncaught_error_on_one_rank_aborts_the_job_instead_of_hanging(tmp_path, where):
    """A bug (not a DistGrailError, outside the guarded steps) on rank 1 while rank 0 waits in a
    collective: `python -m mpi4py` turns it into MPI_Abort, so the job ends at once."""
    script = tmp_path / "crash.py"
    script.write_text(
        "import sys\n"
        "from mpi4py import MPI\n"
        "import distgrail.mpi.binding, distgrail.mpi.hostpath\n"
        "from distgrail.cli import main\n"
        "if MPI.COMM_WORLD.Get_rank() == 1:\n"
        "    def crash(*a, **k):\n"
        "        raise ZeroDivisionError('bug on rank 1')\n"
        f"    setattr(distgrail.mpi.{'binding' if where == 'bind_gpu' else 'hostpath'}, {where!r}, crash)\n"
        f"sys.exit(main(['index', 'bundled', '-o', {str(tmp_path / 'out.h5')!r}, '--backend', 'cpu', '--quiet', "
        "'--layout', 'single']))\n")  # (the labels meet on rank 0 in shared memory: the one-file layout)
    r = mpirun(2, str(script), timeout=60)
    assert r.returncode != 0
    assert "ZeroDivisionError: bug on rank 1" in r.stderr
    assert r.seconds < 60
    assert not (tmp_path / "out.h5").exists()


def test_four_ranks_give_the_one_process_index_and_answers(tmp_path):
    one, four = tmp_path / "one.h5", tmp_path / "four.h5"
    ref = distgrail.build_index(distgrail.bundled_graph(), dims=5, seed=3, backend="cpu")
    ref.save(one)
    r = mpirun(4, "-m", "distgrail", "index", "bundled", "-o", str(four), "--dims", "5", "--seed", "3",
               "--backend", "cpu", "--quiet")
    assert r.returncode == 0, r.stderr
    names = sorted(os.listdir(tmp_path))
    assert names[0] == "four.h5" and names[-1] == "one.h5" and len(names) == 6
    assert [n.rsplit(".", 1)[1] for n in names[1:5]] == [f"part{i}" for i in range(4)]
    assert one.read_bytes() == index_bytes(four)  # the default layout under MPI is split: merged, the same bytes
    ans = tmp_path / "answers.npy"
    r = mpirun(4, "-m", "distgrail", "query", str(four), "bundled", "-o", str(ans), "--backend", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    want, _ = ref.query(s, t, backend="cpu")
    assert np.array_equal(np.load(ans), want)
    assert '"ranks": 4' in r.stdout and f'"reachable": {distgrail.BUNDLED_REACHABLE}' in r.stdout


def test_query_with_a_missing_pairs_file_fails_every_rank(tmp_path):
    idx = tmp_path / "kegg.h5"
    distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu", output=idx)
    before = shm_segments()
    r = mpirun(2, "-m", "distgrail", "query", str(idx), str(tmp_path / "nope.txt"), "--backend", "cpu")
    assert_clean_exit_2(r, f"rank 0, reading the pairs {tmp_path / 'nope.txt'}: ", before)
    assert "no such pairs file" in r.stderr


def test_distributed_code_path_with_one_rank():
    """The placement across ranks and query_sharded on a one-rank communicator equal the plain path."""
    from mpi4py import MPI

    from distgrail.build import walk
    from distgrail.mpi.placement import AcrossRanks

    ref = distgrail.build_index(distgrail.bundled_graph(), dims=3, seed=9, backend="cpu")
    from distgrail.config import BuildConfig

    with AcrossRanks.open(MPI.COMM_SELF, BuildConfig(dims=3, seed=9, backend="cpu")) as place:
        idx = walk(place, distgrail.bundled_graph())
    assert idx.meta["transport"] == "mpi"
    for k in ref.arrays:
        assert ref.arrays[k].dtype == idx.arrays[k].dtype and ref.arrays[k].tobytes() == idx.arrays[k].tobytes(), k
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    from distgrail.mpi.query import query_sharded

    got, stats = query_sharded(idx, s, t, "cpu", MPI.COMM_SELF)
    want, ref_stats = ref.query(s, t, backend="cpu")
    assert np.array_equal(got, want) and stats.steps == ref_stats.steps and stats.ranks == 1


def test_docstring_examples_of_the_distributed_module():
    import doctest

    from distgrail.mpi import binding, collectives

    for mod in (binding, collectives):
        assert doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0


def test_one_process_commands_run_once_under_mpi(tmp_path):
    out = tmp_path / "g.gra"
    r = mpirun(2, "-m", "distgrail", "generate", "paper", "-n", "50", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("50 vertices") == 1 and out.exists()
    idx = tmp_path / "g.h5"
    distgrail.build_index(str(out), dims=2, backend="cpu", output=idx)
    r = mpirun(2, "-m", "distgrail", "info", str(idx))
    assert r.returncode == 0 and r.stdout.count("n_components") == 1, r.stdout + r.stderr


def test_launcher_and_mpi_not_talking_is_a_clear_error(tmp_path):
    """srun --mpi=none starts N tasks that each see a world of one rank; each would write the
    index alone. The CLI says so and exits 2 (here: srun's variables without srun)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))}
    env.update(SLURM_PROCID="1", SLURM_STEP_NUM_TASKS="2")
    out = tmp_path / "x.h5"
    r = subprocess.run([sys.executable, "-m", "mpi4py", "-m", "distgrail", "index", "bundled", "-o", str(out),
                        "--backend", "cpu"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert ("distgrail: error: Slurm srun started 2 tasks, but MPI sees a world of 1 rank: the launcher and the "
            "MPI library do not talk (with PyPI's MPICH use srun --mpi=pmi2") in r.stderr
    assert "MPI_Abort" not in r.stderr and not out.exists()


def test_launcher_detection():
    from distgrail.mpi.launcher import detect, rank_size, under_launcher

    assert detect({}) is None and rank_size({}) == (0, 1) and not under_launcher({})
    cases = {"Open MPI": {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"},
             "MPICH/Hydra PMI": {"PMI_RANK": "2", "PMI_SIZE": "4"},
             "MVAPICH2": {"MV2_COMM_WORLD_RANK": "2", "MV2_COMM_WORLD_SIZE": "4"},
             "Slurm srun": {"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4"}}
    for name, env in cases.items():
        assert detect(env) == (name, 2, 4) and rank_size(env) == (2, 4) and under_launcher(env), name
    assert detect({"PMIX_RANK": "3"}) == ("PMIx", 3, None) and under_launcher({"PMIX_RANK": "3"})
    assert not under_launcher({"PMI_RANK": "0", "PMI_SIZE": "1"})  # a singleton
    assert detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"}) is None  # the batch script
    assert under_launcher({"HYDRA_CONTROL_FD": "9"})
    r = subprocess.run([sys.executable, "-m", "distgrail.mpi.launcher"], capture_output=True, text=True,
                       env={**os.environ, "PMI_RANK": "1", "PMI_SIZE": "3"}, timeout=60)
    assert r.stdout.split() == ["1", "3", "MPICH/Hydra_PMI"], r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "distgrail.mpi.launcher", "--rank"], capture_output=True, text=True,
                       env={**os.environ, "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3"}, timeout=60)
    assert r.stdout.strip() == "2"


@pytest.mark.parametrize("n", [2, 3])
def test_npy_pairs_are_read_by_every_rank_its_own_rows(tmp_path, n):
    """``query`` of a (k, 2) ``.npy`` under MPI: each rank reads and answers its own rows (no pair
    goes through rank 0), the answers equal one process's; a bad id in the last rank's rows ends
    every rank with status 2, the message naming that rank and the row in the whole file, and no
    answers file; a table output (it needs the pairs) takes rank 0's read as before."""
    idx = tmp_path / "kegg.h5"
    ref = distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu", output=idx)
    rng = np.random.default_rng(n)
    pairs = rng.integers(0, ref.n, (1001, 2))
    np.save(tmp_path / "p.npy", pairs)
    want, _ = ref.query(pairs[:, 0], pairs[:, 1], backend="cpu")
    ans = tmp_path / "a.npy"
    r = mpirun(n, "-m", "distgrail", "query", str(idx), str(tmp_path / "p.npy"), "-o", str(ans), "--backend", "cpu",
               "--json")
    assert r.returncode == 0, r.stderr
    assert np.array_equal(np.load(ans), want) and '"partition": "whole, rows read by each rank"' in r.stdout
    r = mpirun(n, "-m", "distgrail", "query", str(idx), str(tmp_path / "p.npy"), "-o", str(tmp_path / "a.tsv"),
               "--backend", "cpu", "--json")
    assert r.returncode == 0 and '"partition": "whole"' in r.stdout, r.stderr
    pairs[1000, 1] = ref.n + 7  # the last row: the last rank's
    np.save(tmp_path / "bad.npy", pairs)
    before = shm_segments()
    r = mpirun(n, "-m", "distgrail", "query", str(idx), str(tmp_path / "bad.npy"), "-o", str(tmp_path / "b.npy"),
               "--backend", "cpu")
    lo = 1001 - 1001 // n
    assert_clean_exit_2(r, f"rank {n - 1}, reading rows {lo}..1000 of {tmp_path / 'bad.npy'}: ", before)
    assert f"bad.npy[1000, 1]: vertex id out of range 0..{ref.n - 1}, got {ref.n + 7}" in r.stderr
    assert not os.path.exists(tmp_path / "b.npy")


def test_a_fifo_named_npy_is_refused_under_mpi_not_waited_on(tmp_path):
    """A FIFO is never opened (it could block every rank forever): refused on rank 0 with status 2,
    as one process refuses it; likewise a missing .npy."""
    idx = tmp_path / "kegg.h5"
    distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu", output=idx)
    fifo = tmp_path / "p.npy"
    os.mkfifo(fifo)
    r = mpirun(2, "-m", "distgrail", "query", str(idx), str(fifo), "-o", str(tmp_path / "a.npy"), "--backend", "cpu",
               timeout=60)
    assert_clean_exit_2(r, f"rank 0, reading the pairs {fifo}: ", None)
    assert "FIFO" in r.stderr and not os.path.exists(tmp_path / "a.npy")
    r = mpirun(2, "-m", "distgrail", "query", str(idx), str(tmp_path / "none.npy"), "--backend", "cpu", timeout=60)
    assert_clean_exit_2(r, f"rank 0, reading the pairs {tmp_path / 'none.npy'}: ", None)
    assert "no such pairs file" in r.stderr


@pytest.mark.parametrize("n", [2, 3])
def test_answers_that_differ_end_every_rank_with_status_3_without_an_abort(tmp_path, n):
    """``query`` with expected answers (a third column), one of them wrong: status 3 from every
    rank, the answers still written, MPI ended cleanly (no MPI_Abort, no /dev/shm segment left);
    the same with every answer right is status 0. (A review found 3 ending in MPI_Abort.)"""
    g = distgrail.io.generate.generate("scale-free", 3000, 3, seed=1)
    idx = distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=2, backend="cpu")
    path = tmp_path / "g.h5"
    idx.save(str(path))
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, g.n, (100_000, 2))
    want = idx.query(pairs[:, 0], pairs[:, 1], backend="cpu")[0].astype(np.int64)
    np.save(tmp_path / "right.npy", np.c_[pairs, want])
    want[50_000] ^= 1
    np.save(tmp_path / "wrong.npy", np.c_[pairs, want])
    for name, status in (("wrong", 3), ("right", 0)):
        out = tmp_path / f"{name}.txt"
        before = shm_segments()
        r = mpirun(n, "-m", "distgrail", "query", str(path), str(tmp_path / f"{name}.npy"), "-o", str(out),
                   "--backend", "cpu", "--quiet")
        assert r.returncode == status, (r.returncode, r.stderr)
        assert "MPI_Abort" not in r.stderr + r.stdout and "Traceback" not in r.stderr, r.stderr
        assert np.loadtxt(out, dtype=np.int64).shape[0] == 100_000
        assert (r.stderr.count("answers differ") == 1) == (status == 3), r.stderr
        after = shm_segments()
        if before is not None and after is not None:
            assert not after - before, after - before


def test_ranks_holding_two_updates_of_one_index_are_refused(tmp_path):
    """Two updates of one base with as many components and DAG edges (``1 -> 2`` and ``2 -> 1``
    into a DAG where neither is implied): the same counts and digest; the ranks must not shard a
    batch over them (its answers would match neither index)."""
    g = distgrail.io.generate.generate("layered", 400, 3, seed=2)
    base = distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=2, backend="cpu")
    one, _ = distgrail.update.insert_edges(base, [1], [2], backend="cpu")
    two, _ = distgrail.update.insert_edges(base, [2], [1], backend="cpu")
    assert (one.C, one.meta["n_dag_edges"]) == (two.C, two.meta["n_dag_edges"])
    one.save(str(tmp_path / "one.h5"))
    two.save(str(tmp_path / "two.h5"))
    script = tmp_path / "q.py"
    script.write_text(f"""
import sys, numpy as np, distgrail
from mpi4py import MPI
comm = MPI.COMM_WORLD
idx = distgrail.open_index({str(tmp_path / 'one.h5')!r} if comm.Get_rank() == 0 else {str(tmp_path / 'two.h5')!r})
try:
    idx.query(np.array([1, 2]), np.array([2, 1]), backend="cpu", comm=comm)
except distgrail.errors.DistGrailError as e:
    open(f"{str(tmp_path)}/refused{{comm.Get_rank()}}", "w").write(str(e))
""")
    r = mpirun(2, str(script))
    assert r.returncode == 0, (r.stdout, r.stderr)
    got = [(tmp_path / f"refused{k}").read_text() for k in (0, 1)]
    assert got[0] == got[1], got
    assert "every rank must query the same index" in got[0] and "inserted edges" in got[0], got


@pytest.mark.parametrize("kind", ["txt", "h5"])
def test_a_partitioned_build_reads_rank_0s_graph_whatever_the_others_pass(tmp_path, kind):
    """``build_index(graph, comm=, partition="on")``: rank 0's file is read (the others may pass
    None, as with ``partition="off"``, or even another file: it read each rank's own before, a
    TypeError ending in MPI_Abort, or a silently wrong index). The index equals one process's."""
    g = distgrail.io.generate.generate("scale-free", 3000, 3, seed=4)
    path = tmp_path / f"g.{kind}"
    if kind == "txt":
        path.write_text("".join(f"{u} {v}\n" for u, v in zip(g.src.tolist(), g.dst.tolist())))
    else:
        assert distgrail.cli.main(["generate", "scale-free", "-n", "3000", "--degree", "3", "--seed", "4", "-o",
                                   str(path), "--quiet"]) == 0
    other = tmp_path / "other.txt"
    other.write_text("".join(f"{v} {u}\n" for u, v in zip(g.src.tolist(), g.dst.tolist())))  # reversed edges
    one = tmp_path / "one.h5"
    distgrail.build_index(str(path), dims=3, backend="cpu", output=str(one))
    script = tmp_path / "b.py"
    script.write_text(f"""
import distgrail
from mpi4py import MPI
comm = MPI.COMM_WORLD
r = comm.Get_rank()
given = {str(path)!r} if r == 0 else (None if r == 1 else {str(other)!r})
distgrail.build_index(given, dims=3, backend="cpu", comm=comm, partition="on",
                      output={str(tmp_path / 'ranks.h5')!r} if r == 0 else None)
""")
    r = mpirun(3, str(script), timeout=120)
    assert r.returncode == 0, r.stderr
    a, b = distgrail.open_index(str(one)), distgrail.open_index(str(tmp_path / "ranks.h5"))
    for k in a.arrays:
        assert np.array_equal(a.arrays[k], b.arrays[k]), k


def test_a_bug_on_one_rank_ends_every_rank_with_status_1_and_its_traceback(tmp_path):
    """An exception distgrail does not raise on purpose (a bug), on rank 1 only: status 1 from
    every rank as in one process, the failing rank's traceback and one 'internal error' line, no
    MPI_Abort (it was status 2 and a one-liner, as for bad input)."""
    g = tmp_path / "g.txt"
    g.write_text("".join(f"{i} {(i * 7 + 1) % 500}\n" for i in range(2000)))
    script = tmp_path / "bug.py"
    script.write_text("""
import os, sys
from mpi4py import MPI
import distgrail.stages.phases as ph
real = ph.labels
def labels(*a, **k):
    if MPI.COMM_WORLD.Get_rank() == 1:
        raise ZeroDivisionError("planted")
    return real(*a, **k)
ph.labels = labels
from distgrail.cli import main
sys.exit(main(sys.argv[1:]))
""")
    out = tmp_path / "g.h5"
    before = shm_segments()
    r = mpirun(2, str(script), "index", str(g), "-o", str(out), "--backend", "cpu", "--dims", "4", "--quiet")
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.count("distgrail: internal error: rank 1, ") == 1 and "ZeroDivisionError: planted" in r.stderr
    assert "Traceback" in r.stderr and "MPI_Abort" not in r.stderr, r.stderr
    assert not out.exists()
    after = shm_segments()
    if before is not None and after is not None:
        assert not after - before, after - before
