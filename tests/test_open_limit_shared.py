"""The soft limit of open files raised for split parts is shared by the reads and writes of one
process (:class:`~distgrail.indexfile.read_split.OpenLimit`): one that fits only under another's
raise keeps it raised until it is done too, and a raise is never undone by a stale read; a write
where the system refuses the raise (no hard limit) is refused with the limit it has, not a
TypeError. Each case runs in a child process whose limit it lowers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX limits of open files")

CHILD = r"""
import json, resource
from distgrail.indexfile.read_split import OpenLimit
soft0, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
now = lambda: resource.getrlimit(resource.RLIMIT_NOFILE)[0]
reader, writer = OpenLimit(), OpenLimit()
out = {}
out["reader_fits"], _ = reader.room(150)     # raised to 150 (at least twice 64)
out["after_reader"] = now()
out["writer_fits"], _ = writer.room(120)     # fits under the reader's raise only
reader.done()
out["after_reader_done"] = now()             # the writer still needs it
writer.done()
out["after_both_done"] = now()               # the user's again
print(json.dumps(out))
"""


def test_a_user_that_fits_only_under_anothers_raise_keeps_it_raised():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["reader_fits"] and out["writer_fits"]
    assert out["after_reader"] >= 150
    assert out["after_reader_done"] == out["after_reader"]  # (was put back to 64 under the writer)
    assert out["after_both_done"] == 64


def test_a_refused_raise_without_a_hard_limit_is_an_output_error(monkeypatch, tmp_path):
    from distgrail.errors import OutputError
    from distgrail.indexfile import read_split, split

    monkeypatch.setattr(read_split.OpenLimit, "room", lambda self, need, least=None: (False, None))
    monkeypatch.setattr(split, "_soft_limit", lambda: 256)
    with pytest.raises(OutputError, match=r"limit of open files \(256; the system refused to raise it\)"):
        split.open_limit(tmp_path / "x.h5", 1024)
