"""The counts distgrail's edge-list writer states on the first line are held to.

Before this file's commit `distgrail generate layered -n 60 --degree 1 -o x.txt` wrote
``# distgrail edge list: 60 vertices, 50 edges`` and `index x.txt` read it as 59 vertices (the
last one isolated: no edge line shows it), and an R-MAT text (no such line) lost its trailing
isolated vertices too; a generated file cut short was read as the edges left. Now the stated
vertex count is the graph's (unless ``--num-vertices`` says), and a file whose edge lines are not
as many as stated is refused, on the CPU reader and the GPU parser's path (its NumPy twin here).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from distgrail.errors import GraphFormatError
from distgrail.io.dialect import sniff
from distgrail.io.parse import read_graph_numpy
from distgrail.io.read import read_graph
from conftest import ROOT


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "distgrail", *args], capture_output=True, text=True, env=env)


READERS = [pytest.param(lambda p, **k: read_graph(str(p), **k), id="cpu"),
           pytest.param(lambda p, **k: read_graph_numpy(str(p), **k), id="gpu-twin")]


def _write(tmp_path, text, name="g.txt"):
    p = tmp_path / name
    p.write_bytes(text)
    return p


@pytest.mark.parametrize("read", READERS)
def test_stated_vertices_keep_trailing_isolated_ones(tmp_path, read):
    p = _write(tmp_path, b"# distgrail edge list: 10 vertices, 3 edges\n0 1\n1 2\n2 3\n")
    g = read(p)
    assert g.n == 10 and g.m == 3
    assert read(p, num_vertices=12).n == 12  # the option given wins


@pytest.mark.parametrize("read", READERS)
@pytest.mark.parametrize("body, what", [(b"0 1\n1 2\n", "truncated file? "), (b"0 1\n1 2\n2 3\n3 4\n", "")])
def test_other_edge_count_refused(tmp_path, read, body, what):
    p = _write(tmp_path, b"# distgrail edge list: 10 vertices, 3 edges\n" + body)
    with pytest.raises(GraphFormatError, match="says 3 edges but the file holds") as e:
        read(p)
    assert str(e.value).startswith(f"{p}:1: {what}")


@pytest.mark.parametrize("read", READERS)
@pytest.mark.parametrize("stated", [10**12, 10**30])
def test_a_stated_count_too_large_is_refused_as_the_first_lines(tmp_path, read, stated):
    """A first line stating more vertices than the machine holds (or past 2^63) is refused at
    line 1 as what that line says (it was told as "--num-vertices N", which nobody gave)."""
    p = _write(tmp_path, b"# distgrail edge list: %d vertices, 2 edges\n0 1\n1 2\n" % stated)
    with pytest.raises(GraphFormatError, match="its first line, written by distgrail, states a graph too large") as e:
        read(p)
    assert str(e.value).startswith(f"{p}:1: ") and "--num-vertices" not in str(e.value)


@pytest.mark.parametrize("read", READERS)
def test_id_past_stated_vertices_refused(tmp_path, read):
    p = _write(tmp_path, b"# distgrail edge list: 3 vertices, 2 edges\n0 1\n1 7\n")
    with pytest.raises(GraphFormatError, match="7"):
        read(p)


def test_only_the_exact_first_line_counts():
    assert sniff(b"# distgrail edge list: 5 vertices, 2 edges\n0 1\n1 2\n").vertices == 5
    assert sniff(b"# distgrail edge list: 5 vertices, 2 edges\r\n0 1\r\n1 2\r\n").edges == 2
    for head in (b"# distgrail edge list: 5 vertices\n0 1\n", b"0 1\n# distgrail edge list: 5 vertices, 1 edges\n",
                 b" # distgrail edge list: 5 vertices, 1 edges\n0 1\n", b"# my edge list: 5 vertices, 1 edges\n0 1\n"):
        d = sniff(head)
        assert d.vertices is None and d.edges is None, head


@pytest.mark.parametrize("kind, args, n", [("layered", ["-n", "60", "--degree", "1", "--seed", "2"], 60),
                                           ("rmat", ["--scale", "12"], 4096)])
def test_generated_text_indexes_every_vertex(tmp_path, kind, args, n):
    txt, h5 = tmp_path / "g.txt", tmp_path / "g.h5"
    r = _cli("generate", kind, *args, "-o", str(txt), "--quiet")
    assert r.returncode == 0, r.stderr
    assert txt.read_bytes().startswith(b"# distgrail edge list: %d vertices, " % n)
    r = _cli("index", str(txt), "-o", str(h5), "--backend", "cpu", "--quiet")
    assert r.returncode == 0, r.stderr
    r = _cli("query", str(h5), "--pair", str(n - 1), str(n - 1))
    assert r.returncode == 0 and r.stdout.strip() == f"{n - 1} {n - 1} reachable", (r.stdout, r.stderr)
    cut = tmp_path / "cut.txt"
    cut.write_bytes(txt.read_bytes()[:-30])
    r = _cli("index", str(cut), "-o", str(tmp_path / "c.h5"), "--backend", "cpu")
    assert r.returncode == 2 and "cut.txt:1: truncated file?" in r.stderr
    assert not (tmp_path / "c.h5").exists()


def test_rmat_text_and_h5_same_vertices(tmp_path):
    from distgrail.io.read import read_graph as rg

    for ext in ("txt", "h5"):
        assert _cli("generate", "rmat", "--scale", "10", "--seed", "1", "-o", str(tmp_path / f"r.{ext}"),
                    "--quiet").returncode == 0
    a, b = rg(str(tmp_path / "r.txt")), rg(str(tmp_path / "r.h5"))
    assert a.n == b.n == 1024
    ea = np.unique(np.stack([np.asarray(a.src, np.int64), np.asarray(a.dst, np.int64)]), axis=1)
    eb = np.unique(np.stack([np.asarray(b.src, np.int64), np.asarray(b.dst, np.int64)]), axis=1)
    assert np.array_equal(ea, eb)
