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
import distgrail.io.pairs

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


def test_bad_graph_file_fails_the_job_with_file_line_and_rank(tmp_path):
    bad = tmp_path / "BAD.gra"
    bad.write_text("graph_for_greach\n3\n0: 1 #\n1: 7 #\n2: #\n")
    out = tmp_path / "out.h5"
    r = mpirun(2, "-m", "distgrail", "index", str(bad), "-o", str(out), "--backend", "cpu")
    assert r.returncode != 0
    assert f"distgrail: error: rank 0, reading the graph {bad}: {bad}:4: vertex id out of range 0..2, got '7'" \
        in r.stderr
    assert r.stderr.count("distgrail: error:") == 1, r.stderr  # printed once, not once per rank
    assert os.listdir(tmp_path) == ["BAD.gra"]


@pytest.mark.parametrize("where", ["bind_gpu", "_shared_labels"])
def test_uncaught_error_on_one_rank_aborts_the_job_instead_of_hanging(tmp_path, where):
    """A bug (not a DistGrailError, outside the guarded steps) on rank 1 while rank 0 waits in a
    collective: `python -m mpi4py` turns it into MPI_Abort, so the job ends at once."""
    script = tmp_path / "crash.py"
    script.write_text(
        "import sys\n"
        "from mpi4py import MPI\n"
        "import distgrail.mpi.binding, distgrail.mpi.build\n"
        "from distgrail.cli import main\n"
        "if MPI.COMM_WORLD.Get_rank() == 1:\n"
        "    def crash(*a, **k):\n"
        "        raise ZeroDivisionError('bug on rank 1')\n"
        f"    setattr(distgrail.mpi.{'binding' if where == 'bind_gpu' else 'build'}, {where!r}, crash)\n"
        f"sys.exit(main(['index', 'bundled', '-o', {str(tmp_path / 'out.h5')!r}, '--backend', 'cpu', '--quiet']))\n")
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
    assert one.read_bytes() == four.read_bytes()
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
    r = mpirun(2, "-m", "distgrail", "query", str(idx), str(tmp_path / "nope.txt"), "--backend", "cpu")
    assert r.returncode != 0
    assert "rank 0, reading the pairs" in r.stderr and "no such pairs file" in r.stderr


def test_distributed_code_path_with_one_rank():
    """build_index_distributed and query_sharded on a one-rank communicator equal the plain path."""
    from mpi4py import MPI

    from distgrail.mpi.build import build_index_distributed

    ref = distgrail.build_index(distgrail.bundled_graph(), dims=3, seed=9, backend="cpu")
    idx = build_index_distributed(distgrail.bundled_graph(), dims=3, seed=9, backend="cpu", comm=MPI.COMM_SELF)
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
