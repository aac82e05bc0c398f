"""``cli.quick_exit`` (``python -m distgrail``'s end): stdout and stderr flushed, the status kept,
no interpreter teardown (an atexit handler does not run), MPI finalized under a launcher; with
``DISTGRAIL_FAST_EXIT=off`` Python's own exit; a real command's output and JSON complete."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

SCRIPT = ("import atexit, sys\n"
          "atexit.register(lambda: print('TEARDOWN', flush=True))\n"
          "from distgrail.cli import quick_exit\n"
          "sys.stdout.write('out' * 50000)\n"
          "sys.stderr.write('err')\n"
          "quick_exit(int(sys.argv[1]))\n")


def _run(status, **env):
    return subprocess.run([sys.executable, "-c", SCRIPT, str(status)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


@pytest.mark.parametrize("status", [0, 3])
def test_the_status_and_every_byte_written_no_teardown(status):
    r = _run(status)
    assert r.returncode == status and r.stdout == "out" * 50000 and r.stderr == "err"  # (no TEARDOWN)
    r = _run(status, DISTGRAIL_FAST_EXIT="off")
    assert r.returncode == status and r.stdout == "out" * 50000 + "TEARDOWN\n"


def test_a_command_through_python_m_distgrail_writes_its_output_whole(tmp_path):
    out = tmp_path / "k.h5"
    r = subprocess.run([sys.executable, "-m", "distgrail", "index", "bundled", "-o", str(out), "--backend", "cpu",
                        "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["index"] == str(out)  # (the JSON whole: it parses)
    import distgrail

    assert distgrail.open_index(str(out)).n > 0 and os.listdir(tmp_path) == ["k.h5"]


@pytest.mark.skipif(shutil.which("mpiexec", path=os.path.dirname(sys.executable)) is None,
                    reason="no mpiexec beside this Python")
def test_under_mpiexec_every_rank_finalizes_and_runs_the_c_exit_handlers():
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    code = ("import ctypes, os\n"
            "from mpi4py import MPI\n"
            "hook = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p)(lambda s, a: os.write(1, b'c-atexit\\n') and None)\n"
            "ctypes.CDLL(None).on_exit(hook, None)\n"  # (MPICH ends its PMI session in such a handler)
            "real = MPI.Finalize\n"
            "MPI.Finalize = lambda: (print('finalized', flush=True), real())\n"
            "from distgrail.cli import quick_exit\n"
            "c = MPI.COMM_WORLD\n"
            "print('rank', c.allreduce(1), flush=False)\n"
            "quick_exit(0)\n")
    r = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "mpi4py", "-c", code], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("finalized") == 2 and r.stdout.count("rank") == 2, r.stdout  # (lines may interleave)
    assert r.stdout.count("c-atexit") == 2, r.stdout  # the C library's exit handlers ran on every rank
