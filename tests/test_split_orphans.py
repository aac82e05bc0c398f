"""What a killed split build leaves beside its output, removed by the next index written there.

A split index's parts are written under temporary names (``.<index>.<build>.part<r>.tmp-PID``)
and renamed into place before the main file is written. A build killed outright (SIGKILL, a node
lost) in between leaves those files: no main file carries their build, and the next build, whose
parts carry a new build tag, used to leave them for good. The builds here are killed for real
(a process that SIGKILLs itself at that point); then an index is written to the same path.
Only files of that output's part naming whose root attributes say they are parts of it go, and
only when no index file in the directory carries their build: the parts of an index renamed away
in the same directory, another output's leftovers and anything not a distgrail part stay.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import distgrail
from distgrail.cli import main
from distgrail.indexfile.layout import index_parts
from distgrail.indexfile.split import write_split_index

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: a split write of the bundled graph's index in 3 parts that SIGKILLs itself at ``when``
KILLED = """
import os, signal, distgrail
from distgrail.indexfile import split, write
idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
when = {when!r}
if when == "parts in place":  # every part renamed into place, the main file not begun
    write.write_index_file = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
else:  # part 1 being written: parts 0 and 1 are temporaries
    real = split.PartFile.put
    def put(self, *a):
        real(self, *a)
        if self.path.endswith(".part1"):
            os.kill(os.getpid(), signal.SIGKILL)
    split.PartFile.put = put
split.write_split_index({path!r}, idx.meta, idx.arrays, parts=3)
"""


def _killed_build(path, when) -> list:
    """Run a split write of ``path`` killed at ``when``; the names it left."""
    r = subprocess.run([sys.executable, "-c", KILLED.format(when=when, path=path)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == -signal.SIGKILL, r.stderr
    return sorted(os.listdir(os.path.dirname(path)))


def _reference():
    return distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")


def _answers_match(path) -> bool:
    s, t = np.arange(0, 3617, 3), np.arange(3616, -1, -3)[: len(range(0, 3617, 3))]
    return bool(np.array_equal(distgrail.open_index(path).reachable(s, t), _reference().reachable(s, t)))


@pytest.mark.parametrize("when", ["parts in place", "part being written"])
@pytest.mark.parametrize("layout", ["split", "single"])
def test_a_killed_split_builds_leftovers_go_with_the_next_build(tmp_path, when, layout):
    path = str(tmp_path / "idx.h5")
    left = _killed_build(path, when)
    marker = [n for n in left if n.startswith(".idx.h5.") and ".pending-" in n]  # (the write's marker)
    assert len(marker) == 1, left
    left = [n for n in left if n not in marker]
    if when == "parts in place":
        assert len(left) == 3 and all(n.startswith("idx.h5.") and ".part" in n for n in left), left
    else:
        assert len(left) == 2 and all(n.startswith(".idx.h5.") and ".tmp-" in n for n in left), left
    assert main(["index", distgrail.bundled_graph(), "-o", path, "--backend", "cpu", "--dims", "2", "--layout",
                 layout, "--quiet"]) == 0
    kept = sorted(os.path.basename(p) for p in index_parts(path))
    assert sorted(os.listdir(tmp_path)) == sorted(["idx.h5", *kept])  # nothing of the killed build
    assert len(kept) == (1 if layout == "split" else 0)
    assert _answers_match(path)


def test_what_is_not_a_killed_builds_leftover_stays(tmp_path):
    path = str(tmp_path / "idx.h5")
    idx = _reference()
    # an earlier split index of this name, renamed away in the same directory: its parts are its own
    write_split_index(path, idx.meta, idx.arrays, parts=2)
    os.rename(path, tmp_path / "renamed.h5")
    # another output's killed build
    other = _killed_build(str(tmp_path / "other.h5"), "parts in place")
    # names of this output's part scheme that are not its parts
    (tmp_path / "idx.h5.0123abcd.part0").write_text("my notes")
    write_split_index(tmp_path / "copy.h5", idx.meta, idx.arrays, parts=1)
    os.rename(index_parts(tmp_path / "copy.h5")[0], tmp_path / "idx.h5.89abcdef.part0")  # copy.h5's, renamed
    os.remove(tmp_path / "copy.h5")
    # a part temporary of a process that still runs (a build going on)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / f".idx.h5.fedcba98.part0.tmp-{alive.pid}").write_bytes(b"being written")
        before = sorted(os.listdir(tmp_path))
        killed = _killed_build(path, "parts in place")  # the one thing to go
        dead = sorted(set(killed) - set(before))
        assert len(dead) == 4 and len([n for n in dead if ".pending-" in n]) == 1  # 3 parts, the write's marker
        write_split_index(path, idx.meta, idx.arrays, parts=2)
        now = sorted(os.listdir(tmp_path))
        assert not set(dead) & set(now)
        assert set(before) <= set(now) and len(now) == len(before) + 3  # + the new index and its 2 parts
    finally:
        alive.kill()
        alive.wait()
    assert _answers_match(path) and _answers_match(tmp_path / "renamed.h5")
    assert set(other) <= set(now)


def test_leftovers_stay_while_another_process_writes_the_index(tmp_path):
    """A live process's temporary of the main file: a build of the same name is going on, whose
    parts may already be in place (not carried by any file yet): none is taken for a leftover."""
    path = str(tmp_path / "idx.h5")
    left = _killed_build(path, "parts in place")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / f".idx.h5.tmp-{alive.pid}").write_bytes(b"another build's main file")
        _reference().save(path)
        assert {n for n in left if ".pending-" not in n} <= set(os.listdir(tmp_path))  # (its marker: dead)
    finally:
        alive.kill()
        alive.wait()
    os.remove(tmp_path / f".idx.h5.tmp-{alive.pid}")
    _reference().save(path)  # (the process is gone: its temporary would be removed as stale too)
    assert os.listdir(tmp_path) == ["idx.h5"]


@pytest.mark.parametrize("over", ["nothing", "a split index"])
def test_a_fifo_named_like_a_part_does_not_block_a_writer(tmp_path, over):
    """The writers look at every file named like a part of their output once it is in place (a
    killed build's leftovers, the replaced index's parts): a FIFO there blocked that look for ever,
    the new index in place and the old main file left as a temporary (a reviewer, session 41). It
    is no part: left alone, the write ends. Run in a child with a time limit."""
    graph = tmp_path / "g.txt"
    graph.write_text("0 1\n1 2\n2 0\n3 4\n")
    out = tmp_path / "x.h5"
    if over == "a split index":
        assert main(["index", str(graph), "-o", str(out), "--backend", "cpu", "--quiet"]) == 0
        assert main(["convert", str(out), "--layout", "split", "--parts", "2", "-o", str(tmp_path / "s.h5"),
                     "--quiet"]) == 0
        out = tmp_path / "s.h5"
        fifo = index_parts(str(out))[1]
        os.remove(fifo)
    else:
        fifo = str(tmp_path / "x.h5.deadbeef.part0")
    os.mkfifo(fifo)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-m", "distgrail", "index", str(graph), "-o", str(out), "--backend", "cpu",
                        "--quiet"], env=dict(os.environ, PYTHONPATH=root), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert distgrail.open_index(out).reachable(0, 2) and os.path.exists(fifo)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]
