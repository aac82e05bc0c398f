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


# -- 7: convert of a graph with node names ---------------------------------------------------------

def test_convert_refuses_a_graph_with_node_names(tmp_path):
    g = tmp_path / "l.txt"
    g.write_text("src dst\nalice bob\nbob carol\n")
    out = tmp_path / "l.h5"
    r = run("convert", str(g), "-o", str(out), "--backend", "cpu")
    assert r.returncode == 2 and b"node labels" in r.stderr and b"Traceback" not in r.stderr, r.stderr
    assert b"index" in r.stderr and not out.exists() and sorted(os.listdir(tmp_path)) == ["l.txt"]
    from distgrail.io.binary import write_binary_graph
    from distgrail.io.writers import write_graph

    lab = distgrail.io.read.as_graph({"x": ["y"], "y": []})
    for write in (write_binary_graph, write_graph):
        with pytest.raises(DistGrailError, match="node labels"):
            write(lab, tmp_path / "x.h5")
    with pytest.raises(DistGrailError, match="node labels"):
        write_graph(lab, tmp_path / "x.gra")
    assert sorted(os.listdir(tmp_path)) == ["l.txt"]
    plain = tmp_path / "n.txt"
    plain.write_text("0 1\n1 2\n")
    assert run("convert", str(plain), "-o", str(tmp_path / "n.h5"), "--backend", "cpu").returncode == 0
