"""A split index of many parts written under the usual soft limit of open files: the writer holds
every part file open until all are written (two descriptors each: its HDF5 file and its block
writes), so ``convert --layout split --parts 1024`` and ``update`` of a 1024-part index failed
at part ~1019 under ``ulimit -Sn 1024`` ("Too many open files") although ``--parts`` allows
1024. The writer now raises the soft limit toward the hard one for the write, as the reader does
(restored after), and a hard limit too low is refused before any file is written: exit 2, the
limit and the ways out named, nothing left in the directory.

Each case runs in a child process whose limit it lowers (``resource.setrlimit``), so the test
process keeps its own; a small graph and 100 parts under a soft limit of 64 stand in for 1024
parts under 1024.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from distgrail.cli import main
from distgrail.indexfile.layout import index_parts

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX limits of open files")

PARTS = 100
SOFT = 64

#: run in a child: set the limit of open files (soft, hard: None keeps the hard one), run the
#: command line, print the exit status and the soft limit after it as JSON on the last line
CHILD = r"""
import json, resource, sys
soft, hard = json.loads(sys.argv[1])
h = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, h if hard is None else hard))
from distgrail.cli import main
rc = main(sys.argv[2:])
print(json.dumps({"rc": rc, "soft_after": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))
"""


def _child(limits, *argv):
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(limits), *map(str, argv)], capture_output=True,
                       text=True, timeout=300, check=False)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0 and lines, (r.returncode, r.stdout, r.stderr)
    return json.loads(lines[-1]), r.stderr


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    d = tmp_path_factory.mktemp("open_limit")
    path = d / "one.h5"
    assert main(["index", "bundled", "-o", str(path), "--backend", "cpu", "--dims", "2", "--quiet"]) == 0
    return path


def _hard_room():
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 4 * PARTS:
        pytest.skip(f"the hard limit of open files ({hard}) is below what {PARTS} parts need")


def test_many_parts_are_written_under_a_low_soft_limit(single, tmp_path):
    """convert --layout split --parts 100 under a soft limit of 64: written whole (it failed with
    'Too many open files'), the limit back to 64 afterwards; the split index then reads back as
    the single one, and converts back to the same file."""
    _hard_room()
    out = tmp_path / "many.h5"
    got, err = _child([SOFT, None], "convert", single, "--layout", "split", "--parts", PARTS, "-o", out, "--quiet")
    assert got == {"rc": 0, "soft_after": SOFT}, err
    assert len(index_parts(out)) == PARTS
    back = tmp_path / "back.h5"
    got, err = _child([SOFT, None], "convert", out, "--layout", "single", "-o", back, "--quiet")
    assert got == {"rc": 0, "soft_after": SOFT}, err
    assert back.read_bytes() == single.read_bytes()


def test_an_update_of_many_parts_keeps_its_layout_under_a_low_soft_limit(single, tmp_path):
    """update of a 100-part index (it keeps its layout: 100 parts written again) under a soft
    limit of 64: written, the limit restored."""
    _hard_room()
    many = tmp_path / "many.h5"
    assert main(["convert", str(single), "--layout", "split", "--parts", str(PARTS), "-o", str(many), "--quiet"]) == 0
    edges = tmp_path / "add.txt"
    edges.write_text("0 5\n7 9\n")
    new = tmp_path / "new.h5"
    got, err = _child([SOFT, None], "update", many, "--add", edges, "-o", new, "--backend", "cpu", "--json")
    assert got == {"rc": 0, "soft_after": SOFT}, err
    assert len(index_parts(new)) == PARTS


def test_a_hard_limit_too_low_is_refused_before_any_file(single, tmp_path):
    """A hard limit that cannot hold the parts: refused up front (exit 2) naming the limit, the
    parts, and the ways out (fewer --parts, ulimit -n); no part, temporary or marker left."""
    d = tmp_path / "out"
    d.mkdir()
    got, err = _child([SOFT, SOFT], "convert", single, "--layout", "split", "--parts", PARTS, "-o", d / "many.h5")
    assert got["rc"] == 2, err
    assert "many.h5" in err and f"{PARTS} part files" in err and f"{SOFT}" in err, err
    assert "--parts" in err and "ulimit -n" in err, err
    assert "Too many open files" not in err, err
    assert os.listdir(d) == []
    got, err = _child([SOFT, SOFT], "convert", single, "--layout", "split", "--parts", 8, "-o", d / "few.h5")
    assert got["rc"] == 0, err  # (parts that fit under that hard limit are written as before)
    assert len(index_parts(d / "few.h5")) == 8
