"""Ids asked of an index (or read against a graph) with no vertices: every message names the
range through :func:`distgrail.errors.id_range`, which says that there is none ("out of range:
the index has no vertices") where ``0..{n - 1}`` printed ``0..-1``; the messages of n > 0 are
unchanged. The CLI exits 2 with the message, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import distgrail
from distgrail.errors import GraphFormatError, QueryError, id_range
from conftest import ROOT


def test_id_range_names_the_range_and_says_when_there_is_none():
    assert id_range(100) == "out of range 0..99"  # (the messages of n > 0, byte for byte)
    assert id_range(1) == "out of range 0..0"
    assert id_range(5, 1) == "out of range 1..5"
    assert id_range(0) == "out of range: the graph has no vertices"
    assert id_range(0, 1, whose="the index") == "out of range: the index has no vertices"
    assert id_range(0, whose=None) == "out of range: there are no vertices"
    assert id_range(6, lead="") == "0..5" and id_range(0, lead="", whose="it") == "it has no vertices"
    assert id_range(3, lead="outside") == "outside 0..2"
    assert f"vertex id {id_range(0)}, got '3'" == "vertex id out of range: the graph has no vertices, got '3'"


def _cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "distgrail", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def _refused(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert "-1" not in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


@pytest.fixture(scope="module")
def empty(tmp_path_factory):
    """A folder holding ``e.h5``, the index of an empty edge list read with --num-vertices 0."""
    d = tmp_path_factory.mktemp("empty")
    (d / "empty.txt").write_text("")
    r = _cli("index", "empty.txt", "--num-vertices", "0", "-o", "e.h5", "--backend", "cpu", "--quiet", cwd=d)
    assert r.returncode == 0, r.stderr
    assert distgrail.open_index(d / "e.h5").n == 0
    return d


def test_cli_pair_on_an_empty_index_exits_2_saying_it_has_no_vertices(empty):
    _refused(_cli("query", "e.h5", "--pair", "0", "0", "--backend", "cpu", cwd=empty),
             "--pair 0 0: vertex id out of range: the index has no vertices, got '0'")


@pytest.mark.parametrize("name", ["p.txt", "p.npy"])
def test_cli_pairs_file_on_an_empty_index_exits_2_saying_there_are_no_vertices(empty, name):
    path = empty / name
    if name.endswith(".npy"):
        np.save(path, np.array([[0, 0]], dtype=np.int64))
        want = "p.npy[0, 0]: vertex id out of range: the index has no vertices, got 0"
    else:
        path.write_text("0 0\n")
        want = "p.txt:1: vertex id out of range: there are no vertices, got '0'"
    _refused(_cli("query", "e.h5", name, "-o", "a.txt", "--backend", "cpu", cwd=empty), want)
    assert not (empty / "a.txt").exists()


@pytest.mark.parametrize("name,text,want", [
    ("add.txt", "0 0\n", "add.txt:1: vertex id out of range: there are no vertices, got '0'"),
    ("add.gra", "1\n0: 0 #\n", "add.gra:2: vertex id out of range: the index has no vertices, got '0'"),
    ("add.mtx", "%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1 2\n",
     "add.mtx:3: vertex id out of range: the index has no vertices, got '1'"),
])
def test_cli_update_of_an_empty_index_exits_2_saying_it_has_no_vertices(empty, name, text, want):
    (empty / name).write_text(text)
    _refused(_cli("update", "e.h5", "--add", name, "-o", "e2.h5", "--backend", "cpu", cwd=empty), want)
    assert not (empty / "e2.h5").exists()


def _no_edges(n):
    return distgrail.as_graph((np.zeros(0, np.int64), np.zeros(0, np.int64)), num_vertices=n)


@pytest.mark.parametrize("ids", ["int64", "int32", "list", "uint64 past 2^63"])
def test_index_query_on_an_empty_index(empty, ids):
    """Index.query (from the file, and built in memory) and reachable: a QueryError that says
    the index has no vertices."""
    s = {"int64": np.zeros(1, np.int64), "int32": np.zeros(1, np.int32), "list": [0],
         "uint64 past 2^63": np.array([2**63 + 5], np.uint64)}[ids]
    got = "9223372036854775813" if ids.startswith("uint64") else "0"
    for idx in (distgrail.open_index(empty / "e.h5"), distgrail.build_index(_no_edges(0), backend="cpu")):
        assert idx.n == 0
        with pytest.raises(QueryError) as e:
            idx.query(s, np.zeros(1, np.int64), backend="cpu")
        assert str(e.value) == f"sources[0] out of range: the index has no vertices, got {got}"
    with pytest.raises(QueryError, match="out of range: the index has no vertices, got 0$"):
        idx.reachable(0, 0)
    answers, _ = idx.query(np.zeros(0, np.int64), np.zeros(0, np.int64), backend="cpu")  # no pair: no error
    assert answers.shape == (0,)


def test_server_wire_check_and_insert_edges_and_a_graph_on_no_vertices():
    from distgrail.server.wire import refuse_wrapping_ids
    from distgrail.update import insert_edges

    with pytest.raises(QueryError, match=r"^sources\[0\] out of range: the index has no vertices, got 9223372036854775813$"):
        refuse_wrapping_ids(np.array([2**63 + 5], np.uint64), np.zeros(1, np.int64), 0)
    idx = distgrail.build_index(_no_edges(0), backend="cpu")
    with pytest.raises(QueryError, match=r"sources\[0\] = 0 is not a vertex of the index \(it has no vertices\); "):
        insert_edges(idx, [0], [0], backend="cpu")
    with pytest.raises(GraphFormatError, match=r"sources\[0\] out of range: the graph has no vertices, got 0$"):
        distgrail.as_graph((np.zeros(1, np.int64), np.zeros(1, np.int64)), num_vertices=0)


def test_the_messages_of_n_above_0_are_unchanged():
    idx = distgrail.build_index(_no_edges(4), backend="cpu")
    with pytest.raises(QueryError, match=r"^targets\[0\] out of range 0\.\.3, got 4$"):
        idx.query([0], [4], backend="cpu")
