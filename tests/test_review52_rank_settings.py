"""Review 52: settings that one rank reads differently, under ``mpiexec -n 2`` and ``-n 3``.

- ``DISTGRAIL_MEMORY`` (or a node's own smaller memory) below what the graph needs on one rank of an
  ``index --partition on``: that rank alone took the one-rank reader's path while the others went
  on with the partitioned read, and the job hung (mpi/partition_read.py, ``_combine``).
- ``DISTGRAIL_SHM`` malformed on rank 0 for a query batch of 65,536 pairs or more: rank 0 raised
  outside a shared step while the others waited in a broadcast; the job ended after 10 s by
  ``MPI_Abort``, its line without the rank, leaving an MPICH segment in /dev/shm (mpi/query.py).

Serial tests that launch PyPI's MPICH ``mpiexec`` themselves (``:`` form: each rank its own
environment), each with a deadline so that a hang fails the test."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
pytestmark = pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_",
                                                                     "DISTGRAIL_"))}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["MPIEXEC_TIMEOUT"] = "60"
    return env


def _serial(*args, cwd):
    subprocess.run([sys.executable, "-m", "distgrail", *args, "--quiet"], env=_env(), cwd=cwd, check=True,
                   timeout=120)


def _job(ranks, args, cwd, odd=None, rank=None):
    """Run ``distgrail args`` on ``ranks`` ranks, ``odd`` (``NAME=VALUE``) in rank ``rank``'s environment
    only. Returns ``(returncode, stderr)``; a job still running after 90 s fails the test."""
    cmd = [MPIEXEC]
    for r in range(ranks):
        cmd += ([":"] if r else []) + ["-n", "1"] + (["env", odd] if r == rank else [])
        cmd += [sys.executable, "-m", "distgrail", *args]
    p = subprocess.Popen(cmd, env=_env(), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        pytest.fail(f"the job still ran after 90 s (a rank hung):\n{err}")
    return p.returncode, err


def _said(err):
    return [line for line in err.splitlines() if line.startswith("distgrail:") and "stale MPICH segment" not in line]


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("where", ["last", "root"])
def test_memory_of_one_rank_too_small_for_a_partitioned_read_does_not_hang(tmp_path, ranks, where):
    _serial("generate", "paper", "-n", "3000", "--degree", "5", "--seed", "1", "-o", "g.gra", cwd=tmp_path)
    rank = 0 if where == "root" else ranks - 1
    code, err = _job(ranks, ["index", "g.gra", "-o", "g.h5", "--backend", "cpu", "--quiet", "--partition", "on"],
                     tmp_path, "DISTGRAIL_MEMORY=1e5", rank)  # 1e5 bytes: at most 1,562 vertices
    if rank == 0:  # rank 0's reader refuses the graph, naming the file and line, on every rank
        assert code == 2, (code, err)
        said = _said(err)
        assert len(said) == 1 and "g.gra:2: vertex count 3000" in said[0] and "Abort" not in err, err
        assert sorted(os.listdir(tmp_path)) == ["g.gra"], os.listdir(tmp_path)
    else:  # rank 0 reads the whole graph, as without --partition (rank 0's memory decides there too)
        assert code == 0, (code, err)
        _serial("index", "g.gra", "-o", "one.h5", "--backend", "cpu", "--layout", "single", cwd=tmp_path)
        _serial("pairs", "one.h5", "-n", "500", "--random", "--seed", "3", "-o", "p.txt", cwd=tmp_path)
        for name in ("g.h5", "one.h5"):
            _serial("query", name, "p.txt", "-o", f"{name}.txt", "--backend", "cpu", cwd=tmp_path)
        assert (tmp_path / "g.h5.txt").read_bytes() == (tmp_path / "one.h5.txt").read_bytes()


@pytest.mark.parametrize("ranks", [2, 3])
def test_malformed_shm_setting_on_rank_0_is_every_ranks_error(tmp_path, ranks):
    _serial("generate", "paper", "-n", "300", "--degree", "3", "--seed", "1", "-o", "g.gra", cwd=tmp_path)
    _serial("index", "g.gra", "-o", "g.h5", "--backend", "cpu", "--layout", "single", cwd=tmp_path)
    _serial("pairs", "g.h5", "-n", "70000", "--random", "--seed", "2", "-o", "p.txt", cwd=tmp_path)  # >= 65,536
    code, err = _job(ranks, ["query", "g.h5", "p.txt", "-o", "a.txt", "--backend", "cpu", "--quiet"], tmp_path,
                     "DISTGRAIL_SHM=bogus", 0)
    assert code == 2, (code, err)
    said = _said(err)
    assert len(said) == 1 and said[0].startswith("distgrail: error: rank 0, reading DISTGRAIL_SHM: ") \
        and "got 'bogus'" in said[0], err
    assert "Abort" not in err, err  # (no MPI_Abort: it left an mpich_shm_* segment in /dev/shm)
    assert sorted(os.listdir(tmp_path)) == ["g.gra", "g.h5", "p.txt"], os.listdir(tmp_path)
