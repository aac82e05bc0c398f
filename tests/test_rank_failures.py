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


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    import distgrail

    path = tmp_path_factory.mktemp("rankfail") / "i.h5"
    distgrail.build_index(distgrail.bundled_graph(), backend="cpu", output=path)
    return path


@pytest.mark.parametrize("n, rank, sig", [(2, 1, signal.SIGTERM), (3, 2, signal.SIGINT)])
def test_a_signal_to_a_rank_other_than_0_stops_the_whole_server(small_index, n, rank, sig):
    """SIGTERM/SIGINT to rank r > 0 of ``serve`` stops every rank as one to rank 0 does (status 0,
    'stopping (SIGTERM on rank r)' once); rank r used to note it and serve on, the job never ending."""
    pytest.importorskip("aiohttp")
    import distgrail

    p = subprocess.Popen([MPIEXEC, "-n", str(n), sys.executable, "-m", "distgrail", "serve", str(small_index), "--port",
                          "0", "--backend", "cpu"], env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    lines, deadline = [], time.time() + 60
    try:
        while not any(x.startswith("distgrail: serving") for x in lines):
            line = p.stderr.readline()
            assert line and time.time() < deadline, "".join(lines)
            lines.append(line)
        url = lines[-1].split(" on ", 1)[1].split()[0]
        pids = [r["pid"] for r in distgrail.connect(url).health()["rank_processes"]]
        os.kill(pids[rank], sig)
        rc, _, err = wait_or_kill(p, 20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = "".join(lines) + err
    assert rc == 0, err
    assert err.count(f"stopping ({signal.Signals(sig).name} on rank {rank})") == 1, err
