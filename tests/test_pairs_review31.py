"""``distgrail pairs`` and the text writers after a fresh review (session 31): the seed checked as
``index``'s; ``--reachable`` drawing its sources among the vertices that reach another one (not
one BFS per vertex tried); labels the pairs reader would not read back refused; ``-o`` checked
(``-`` is stdout, extensions the reader knows, never the index or its part files); a count too
large for the machine refused up front; gzip headers naming the output, not its temporary
file; ``convert`` refusing a graph whose node names a ``.h5`` graph would drop."""

import gzip
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.cli import main
from distgrail.errors import DistGrailError
from distgrail.io import samplepairs
from distgrail.io.pairs import read_pairs
from distgrail.io.samplepairs import sample_pairs, write_pairs
from conftest import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def run(*args, **kw):
    return subprocess.run([sys.executable, "-m", "distgrail", *args], check=False, capture_output=True, env=ENV, **kw)


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundled") / "b.h5"
    assert main(["index", "bundled", "-o", str(out), "--dims", "2", "--quiet", "--backend", "cpu"]) == 0
    return out


# -- 6: gzip headers ---------------------------------------------------------------------------

def _gzip_name(path):
    data = Path(path).read_bytes()
    assert data[:2] == b"\x1f\x8b"
    flags, mtime = data[3], int.from_bytes(data[4:8], "little")
    name = data[10:data.index(b"\0", 10)].decode("latin-1") if flags & 8 else None
    return name, mtime, data


def test_gzip_outputs_name_the_output_not_the_temporary_file(bundled, tmp_path):
    from distgrail.io.writers import write_answers

    pairs = tmp_path / "p.txt.gz"
    assert main(["pairs", str(bundled), "-n", "30", "-o", str(pairs), "--quiet"]) == 0
    s, t = read_pairs(pairs)
    outs = {"p.txt.gz": pairs}
    for name in ("a.txt.gz", "a.tsv.gz", "a.csv.gz"):
        write_answers(np.ones(30, bool), tmp_path / name, s, t)
        outs[name] = tmp_path / name
    for name, p in outs.items():
        got, mtime, data = _gzip_name(p)
        assert got in (None, name[:-3]) and b"tmp-" not in data[:64] and mtime == 0, (name, got)
    first = pairs.read_bytes()
    assert main(["pairs", str(bundled), "-n", "30", "-o", str(pairs), "--quiet"]) == 0
    assert pairs.read_bytes() == first  # the same pairs, the same bytes
    assert gzip.decompress(first).count(b"\n") == 30


