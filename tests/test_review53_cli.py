"""Review 53 of the commands a user meets first: ``generate`` and ``convert`` (graph -> .h5) took
seconds to minutes with nothing on stderr, though the README says progress goes to stderr once a
run passes a second (a bar on a terminal, else a line a step), as ``index`` and ``update`` show it
(``generate layered -n 2000000``: 11 s, ``convert`` of its 17.9 M edges: 19 s, both silent)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
STEP = re.compile(r"^distgrail: step (\d+)/(\d+) ([a-z0-9_ -]+): \d+\.\d s$")
#: the command with no delay before progress shows, as a longer run would show it
NO_DELAY = ("import sys, distgrail.progress as p; p.Steps.DELAY = 0; from distgrail.cli import main; "
            "sys.exit(main(sys.argv[1:]))")


def _steps(tmp_path, *argv):
    """The step names a command writes into a log file (not a terminal), checked line by line."""
    log = tmp_path / "log"
    with open(log, "w") as f:
        r = subprocess.run([sys.executable, "-c", NO_DELAY, *map(str, argv)], stdout=subprocess.DEVNULL, stderr=f,
                           env=ENV, timeout=300)
    text = log.read_text()
    assert r.returncode == 0, text
    got = [STEP.match(ln) for ln in text.splitlines()]
    assert got and all(got), text
    assert [int(m.group(1)) for m in got] == list(range(1, len(got) + 1)), text
    assert {int(m.group(2)) for m in got} == {len(got)}, text
    return [m.group(3) for m in got]


@pytest.mark.parametrize("kind", ["paper", "scale-free", "layered"])
def test_generate_writes_its_steps_to_a_log_once_past_the_delay(tmp_path, kind):
    assert _steps(tmp_path, "generate", kind, "-n", "2000", "-o", tmp_path / "g.gra") == ["generate", "write"]


@pytest.mark.parametrize("extra,want", [([], ["read", "condense", "write"]), (["--no-condense"], ["read", "write"])])
def test_convert_writes_its_steps_to_a_log_once_past_the_delay(tmp_path, extra, want):
    g = tmp_path / "g.txt"
    g.write_text("0 1\n1 2\n2 0\n2 3\n")
    assert _steps(tmp_path, "convert", g, "-o", tmp_path / "g.h5", "--backend", "cpu", *extra) == want


def test_generate_and_convert_quiet_write_no_steps(tmp_path):
    g = tmp_path / "g.gra"
    for argv in (["generate", "paper", "-n", "2000", "-o", g, "--quiet"],
                 ["convert", g, "-o", tmp_path / "g.h5", "--backend", "cpu", "--quiet"]):
        r = subprocess.run([sys.executable, "-c", NO_DELAY, *map(str, argv)], capture_output=True, text=True,
                           env=ENV, timeout=300)
        assert r.returncode == 0 and r.stderr == "" and r.stdout == "", (argv, r.stderr, r.stdout)


@pytest.mark.parametrize("count", ["two", "0", "-1"])
def test_mpirun_wrapper_names_a_bad_np_from_the_environment(count):
    """``NP=two bash launch/mpirun.sh info x.h5`` said 'no GPU found (nvidia-smi -L) and no rank
    count given; pass -n RANKS': NP was given, and a GPU may well be there."""
    env = dict(ENV, PATH=os.environ["PATH"], PYTHON=sys.executable, NP=count)
    r = subprocess.run(["bash", os.path.join(ROOT, "launch", "mpirun.sh"), "info", "x.h5"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr == f"launch/mpirun.sh: NP needs a positive number, got '{count}'\n", r.stderr
