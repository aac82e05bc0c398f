"""Progress of the long single steps: `generate rmat` (edges generated, a line a tenth off a
terminal) and `pairs` (open, sample, write), the way `index` shows its steps; nothing for a run
under Steps.DELAY."""

from __future__ import annotations

import re
import subprocess
import sys

from distgrail.progress import Share, Steps
from conftest import ROOT

ENV_CMD = ("import sys, distgrail.progress as p; p.Steps.DELAY = 0; from distgrail.cli import main; "
           "sys.exit(main(sys.argv[1:]))")
TENTH = re.compile(r"^distgrail: generate rmat: (\d+)% \(([\d,]+) of ([\d,]+) edges\), \d+\.\d s$")


def _run(args, cwd):
    import os

    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", ENV_CMD, *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_share_writes_a_line_a_tenth_and_nothing_when_quick(monkeypatch, capsys):
    monkeypatch.setattr(Steps, "DELAY", 0.0)
    with Share(True, 1000, "generate rmat") as share:
        for _ in range(40):
            share.update(25)
    lines = capsys.readouterr().err.splitlines()
    got = [TENTH.match(ln) for ln in lines]
    assert all(got), lines
    assert [int(m.group(1)) for m in got] == list(range(10, 101, 10)), lines
    assert got[-1].group(2) == got[-1].group(3) == "1,000"
    monkeypatch.setattr(Steps, "DELAY", 3600.0)
    with Share(True, 1000, "generate rmat") as share:
        share.update(1000)
    with Share(False, 1000, "generate rmat") as share:
        share.update(1000)
    assert capsys.readouterr().err == ""


def test_generate_rmat_shows_the_edges_it_has_made(tmp_path):
    r = _run(["generate", "rmat", "--scale", "12", "-o", "r.txt"], tmp_path)
    assert r.returncode == 0, r.stderr
    got = [TENTH.match(ln) for ln in r.stderr.splitlines()]
    assert got and all(got), r.stderr
    assert got[-1].group(1) == "100" and got[-1].group(2) == got[-1].group(3) == f"{16 << 12:,}", r.stderr
    r = _run(["generate", "rmat", "--scale", "12", "-o", "r.h5"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "distgrail: generate rmat: step 1/2 sort into rows" in r.stderr, r.stderr
    assert "distgrail: generate rmat: step 2/2 write" in r.stderr and TENTH.match(r.stderr.splitlines()[0])
    r = _run(["generate", "rmat", "--scale", "12", "-o", "q.txt", "--quiet"], tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_pairs_shows_its_steps(tmp_path):
    assert _run(["generate", "rmat", "--scale", "10", "-o", "r.txt", "--quiet"], tmp_path).returncode == 0
    assert _run(["index", "r.txt", "-o", "r.h5", "--backend", "cpu", "--quiet"], tmp_path).returncode == 0
    r = _run(["pairs", "r.h5", "-n", "1000", "-o", "p.txt"], tmp_path)
    assert r.returncode == 0, r.stderr
    steps = re.findall(r"^distgrail pairs: step (\d)/3 (\w+): \d+\.\d s$", r.stderr, re.M)
    assert steps == [("1", "open"), ("2", "sample"), ("3", "write")], r.stderr
    assert len((tmp_path / "p.txt").read_text().splitlines()) == 1000
