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


def _graph_files(tmp_path):
    import numpy as np

    from distgrail.io.binary import write_binary_graph
    from distgrail.io.graph import from_arrays

    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 2000, 6000), rng.integers(0, 2000, 6000)
    txt = tmp_path / "g.txt"
    txt.write_text("".join(f"{a} {b}\n" for a, b in zip(src, dst)))
    h5 = tmp_path / "g.h5"
    write_binary_graph(from_arrays(src, dst, 2000, "g"), h5)
    return txt, h5


@pytest.mark.parametrize("ext, fault, reason", [("txt", "missing", "no such file"), ("txt", "dir", "a directory"),
                                                 ("h5", "missing", "no such file")])
def test_partition_on_with_a_graph_one_rank_cannot_open_is_exit_2_naming_it(tmp_path, ext, fault, reason):
    """``--partition on``: every rank reads the graph; one that cannot open it (here: rank 1's
    ``os.open`` of it fails, as on a machine without that file system) is a one-line error naming
    the file and the rank, exit 2 on every rank, nothing written. It was an internal error with a
    traceback (FileNotFoundError, IsADirectoryError), status 1, or for .h5 'not an HDF5 file'."""
    txt, h5 = _graph_files(tmp_path)
    graph = txt if ext == "txt" else h5
    out = tmp_path / "out" / "o.h5"
    out.parent.mkdir()
    script = tmp_path / "run.py"
    script.write_text(
        "import os, sys\n"
        "from mpi4py import MPI\n"
        "from distgrail.cli import main\n"
        "if MPI.COMM_WORLD.Get_rank() == 1:\n"
        "    real = os.open\n"
        "    def fake(path, *a, **k):\n"
        f"        if os.fspath(path) == {str(graph)!r}:\n"
        f"            if {fault == 'dir'}:\n"
        f"                return real({str(tmp_path)!r}, os.O_RDONLY)\n"
        "            raise FileNotFoundError(2, 'No such file or directory', path)\n"
        "        return real(path, *a, **k)\n"
        "    os.open = fake\n"
        f"sys.exit(main(['index', {str(graph)!r}, '-o', {str(out)!r}, '--backend', 'cpu', '--partition', 'on', "
        "'--quiet']))\n")
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(script)], env=mpi_env(), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert f"{graph}: {reason} on rank 1 (with --partition on every rank reads the graph)" in r.stderr, r.stderr
    assert r.stderr.count("distgrail: error:") == 1 and "Traceback" not in r.stderr, r.stderr
    assert os.listdir(out.parent) == []


@pytest.mark.parametrize("partition", ["off", "on"])
def test_ranks_holding_different_indexes_is_one_message_exit_2_without_abort(tmp_path, partition):
    """``query`` where rank 1 opens another index than rank 0: the refusal goes through the shared
    step as ``serve``'s does: printed once (with the step), exit 2 on every rank, MPI ended
    cleanly. It was printed by each rank without a 'rank r,' and, under ``python -m mpi4py``,
    ended in MPI_Abort (MPICH then leaves a /dev/shm segment)."""
    import distgrail

    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    distgrail.build_index(distgrail.bundled_graph(), dims=2, seed=1, backend="cpu", output=a)
    distgrail.build_index(distgrail.bundled_graph(), dims=3, seed=2, backend="cpu", output=b)
    args = ["bundled", "--backend", "cpu", "--quiet", "--partition", partition]
    r = subprocess.run([MPIEXEC, "-n", "1", sys.executable, "-m", "mpi4py", "-m", "distgrail", "query", str(a), *args,
                        ":", "-n", "1", sys.executable, "-m", "mpi4py", "-m", "distgrail", "query", str(b), *args],
                       env=mpi_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("distgrail: error:") == 1, r.stderr
    assert "comparing the index of every rank: every rank must query the same index, but ranks [1]" in r.stderr
    assert "MPI_Abort" not in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("args, message", [
    (["query", "x.h5"], "distgrail: error: give a pairs file, or one question with --pair U V\n"),
    (["query", "x.h5", "p.txt", "--bogus"], "distgrail: error: unrecognized arguments: --bogus (see 'distgrail --help')\n"),
])
def test_an_argument_error_under_mpiexec_is_printed_once_and_every_rank_exits_2(tmp_path, args, message):
    r = subprocess.run([MPIEXEC, "-n", "3", sys.executable, "-m", "distgrail", *args], env=mpi_env(), cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr == message, r.stderr
