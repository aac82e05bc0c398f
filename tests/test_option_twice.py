"""An option that takes one value given twice is refused, not overridden: ``query --pair 0 4
--pair 4 0`` answered only ``4 0`` with exit 0 (review 54), and ``--server`` kept its last URL."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT


def _cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "distgrail", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    d = tmp_path_factory.mktemp("twice")
    (d / "g.txt").write_text("0 1\n1 2\n2 3\n3 4\n")
    assert _cli("index", "g.txt", "-o", "g.h5", "--backend", "cpu", "--quiet", cwd=d).returncode == 0
    return d


def test_pair_given_twice_is_refused(index):
    r = _cli("query", "g.h5", "--pair", "0", "4", "--pair", "4", "0", "--backend", "cpu", cwd=index)
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert "--pair given twice (0 4 and 4 0)" in r.stderr and "pairs file" in r.stderr and "Traceback" not in r.stderr
    r = _cli("query", "g.h5", "--pair", "4", "0", "--backend", "cpu", cwd=index)
    assert r.returncode == 0 and r.stdout == "4 0 unreachable\n", r.stdout


def test_server_given_twice_is_refused(index):
    r = _cli("query", "--server", "http://127.0.0.1:1", "--server", "http://127.0.0.1:2", "--pair", "0", "1",
             cwd=index)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "--server given twice (http://127.0.0.1:1 and http://127.0.0.1:2)" in r.stderr, r.stderr
