"""Failures on one rank of a whole MPI job end the job, never a hang (review 33): an interrupt,
a signal to one rank of ``serve``, a graph one rank cannot open. Serial tests that launch PyPI's
MPICH ``mpiexec`` themselves (``python -m distgrail``, not ``-m mpi4py``: nothing turns an
exception into ``MPI_Abort`` for them), each with a deadline so that a hang fails the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
pytestmark = pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")


def mpi_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["MPIEXEC_TIMEOUT"] = "60"
    env.update(extra)
    return env


def wait_or_kill(p, seconds):
    """``(returncode, stdout, stderr)`` of ``p``; the job killed and the test failed after ``seconds``."""
    try:
        out, err = p.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"the job still ran after {seconds} s (a rank hung):\n{err}")
    return p.returncode, out, err


def test_sigint_to_mpiexec_while_rank0_writes_ends_the_job(tmp_path):
    """Ctrl-C (mpiexec passes SIGINT to the ranks) while rank 0 writes the index and rank 1 waits
    in a collective, where Python runs no signal handler: rank 0 removes its temporary file, prints
    the message once and ends the job (it used to return 2 and wait in MPI_Finalize, rank 1 forever)."""
    py = [sys.executable, "-m", "distgrail", "index", "bundled", "-o", str(tmp_path / "o.h5"), "--layout", "single",
          "--backend", "cpu", "--quiet"]
    p = subprocess.Popen([MPIEXEC, "-n", "1", "env", "DISTGRAIL_TEST_WRITE_PAUSE=60", *py, ":", "-n", "1", *py],
                         env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not any(".tmp-" in n for n in os.listdir(tmp_path)):
        assert p.poll() is None and time.time() < deadline, p.communicate()
        time.sleep(0.05)
    time.sleep(0.3)
    t = time.perf_counter()
    p.send_signal(signal.SIGINT)
    rc, _, err = wait_or_kill(p, 20)
    assert time.perf_counter() - t < 15
    assert rc == 2, err
    assert err.count("interrupted (SIGINT) while writing the output; nothing was written") == 1, err
    assert os.listdir(tmp_path) == []
