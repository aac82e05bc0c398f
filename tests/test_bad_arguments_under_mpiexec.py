"""A command line that does not parse on one rank ends the whole MPI job (session 37). With
``mpiexec``'s ``:`` form each rank may be given its own arguments; a rank whose arguments did not
parse printed nothing (rank 0 prints a command-line error, which every rank usually has alike) and
ended before MPI, while the others waited for it in MPI's set-up until the launcher's timeout.
Now it starts MPI and its refusal meets the others' first collective: rank 0 says it (``rank 1``)
and every rank ends with status 2, no ``MPI_Abort``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
pytestmark = pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), MPIEXEC_TIMEOUT="60")


def _run(*apps, cwd):
    cmd = [MPIEXEC]
    for k, args in enumerate(apps):
        cmd += ([":"] if k else []) + ["-n", "1", sys.executable, "-m", "distgrail", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=cwd, timeout=120)


def _said(stderr):
    """distgrail's lines in ``stderr``, less the job-start notice of stale MPICH segments removed
    (``mpi.shmclean``): an earlier test that killed ranks may leave some, and that line is not part
    of the refusal under test (CI saw it once)."""
    return [line for line in stderr.splitlines()
            if line.startswith("distgrail:") and "stale MPICH segment" not in line]


@pytest.mark.parametrize("bad", [1, 0])
def test_one_ranks_bad_arguments_end_the_job_with_its_error(tmp_path, bad):
    good = ["index", "bundled", "-o", "i.h5", "--backend", "cpu", "--quiet"]
    apps = [good, good]
    apps[bad] = [*good, "--bogus"]
    r = _run(*apps, cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    who = "distgrail: rank 1, error" if bad else "distgrail: error"
    assert f"{who}: unrecognized arguments: --bogus" in r.stderr, r.stderr
    assert len(_said(r.stderr)) == 1 and "Abort" not in r.stderr, r.stderr
    assert "TIMED OUT" not in r.stderr and not [p for p in os.listdir(tmp_path) if p.startswith("i.h5")]


def test_every_ranks_bad_arguments_say_it_once(tmp_path):
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "distgrail", "index", "bundled", "--bogus"],
                       capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("distgrail: error:") == 1 and "rank 1" not in r.stderr and "Abort" not in r.stderr, r.stderr


def test_one_ranks_missing_pairs_file_ends_the_job(tmp_path):
    """An error of the arguments found after parsing (``query`` without pairs) on one rank only."""
    assert subprocess.run([sys.executable, "-m", "distgrail", "index", "bundled", "-o", "i.h5", "--backend", "cpu",
                           "--quiet"], env=ENV, cwd=tmp_path).returncode == 0
    r = _run(["query", "i.h5", "bundled", "--backend", "cpu", "--quiet"], ["query", "i.h5", "--backend", "cpu"],
             cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "distgrail: rank 1, error: give a pairs file" in r.stderr and len(_said(r.stderr)) == 1, r.stderr
