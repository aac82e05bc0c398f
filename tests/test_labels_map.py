"""Issue 12 item 1: graphs with their own node labels are queried by those labels, through the
API and the CLI, after a round trip through the index file; ids 0..n-1 keep their ids."""

import os
import subprocess
import sys

import numpy as np
import pytest

import distgrail
from distgrail import GraphFormatError, QueryError
from conftest import ROOT, closure


def test_integer_ids_0_to_n_minus_1_keep_their_ids():
    idx = distgrail.build_index({1: [0]}, dims=2, backend="cpu")  # nodes in the order 1, 0
    assert idx.node_labels is None
    assert idx.reachable(1, 0) is True and idx.reachable(0, 1) is False


def test_string_labels_round_trip(tmp_path):
    idx = distgrail.build_index({"a": ["b"], "c": ["a"], "lonely": []}, dims=2, backend="cpu",
                                output=tmp_path / "s.h5")
    back = distgrail.open_index(tmp_path / "s.h5")
    for i in (idx, back):
        assert i.node_labels.kind == "str" and i.n == 4
        assert i.reachable("c", "b") is True and i.reachable("b", "c") is False
        assert i.reachable(["c", "a", "lonely"], ["b", "c", "a"]).tolist() == [True, False, False]
        with pytest.raises(QueryError, match=r"targets\[1\]: node 'zz' is not in the graph"):
            i.reachable(["a", "a"], ["b", "zz"])
        with pytest.raises(QueryError, match="takes the graph's string node labels"):
            i.reachable(0, 1)


def test_integer_labels_not_0_to_n_minus_1(tmp_path):
    idx = distgrail.build_index({10: [20], 20: [-5], 7: []}, dims=2, backend="cpu", output=tmp_path / "i.h5")
    back = distgrail.open_index(tmp_path / "i.h5")
    assert back.node_labels.kind == "int" and back.n == 4
    assert back.reachable(10, -5) is True and back.reachable(-5, 10) is False and back.reachable(7, 20) is False
    with pytest.raises(QueryError, match=r"sources\[0\]: node 0 is not in the graph"):
        back.reachable(0, 10)
    assert idx.reachable([10, 20], [-5, 10]).tolist() == [True, False]


def test_random_labelled_graphs_match_bfs():
    rng = np.random.default_rng(5)
    for trial in range(12):
        n = int(rng.integers(1, 40))
        m = int(rng.integers(0, 3 * n))
        src, dst = rng.integers(0, n, m), rng.integers(0, n, m)  # cycles, self-loops, repeats
        names = [f"v{x}-{trial}" for x in rng.permutation(10 * n)[:n]]
        adj = {names[v]: [] for v in rng.permutation(n)}
        for a, b in zip(src, dst):
            adj[names[a]].append(names[b])
        idx = distgrail.build_index(adj, dims=3, backend="cpu")
        truth = closure(n, src, dst)
        u, v = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        got = idx.reachable(np.array(names)[u.ravel()], np.array(names)[v.ravel()])
        np.testing.assert_array_equal(got, truth.ravel())
        arr = np.array([(names[a], names[b]) for a, b in zip(src, dst)], dtype=str).reshape(-1, 2)
        if m:  # the same graph as an (m, 2) array of string labels (isolated nodes are not in it)
            idx2 = distgrail.build_index(arr, dims=2, backend="cpu")
            k = np.flatnonzero(np.isin(np.array(names)[u.ravel()], arr) & np.isin(np.array(names)[v.ravel()], arr))
            np.testing.assert_array_equal(idx2.reachable(np.array(names)[u.ravel()[k]], np.array(names)[v.ravel()[k]]),
                                          truth.ravel()[k])


def test_mixed_or_odd_labels_refused():
    with pytest.raises(GraphFormatError, match="all integers or all strings"):
        distgrail.build_index({"a": [1]}, dims=1, backend="cpu")
    with pytest.raises(GraphFormatError, match="all integers or all strings"):
        distgrail.build_index({(0, 1): [2.5]}, dims=1, backend="cpu")


def test_cli_query_takes_labels(tmp_path):
    distgrail.build_index({"alpha": ["beta"], "beta": ["gamma"], "delta": []}, dims=2, backend="cpu",
                          output=tmp_path / "l.h5")
    (tmp_path / "p.txt").write_text("# labels\nalpha gamma\ngamma alpha\ndelta beta\n")
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, "-m", "distgrail", "query", "l.h5", "p.txt", "-o", "a.txt", "--backend",
                        "cpu", "--quiet"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a.txt").read_text() == "1\n0\n0\n"
    (tmp_path / "q.txt").write_text("alpha omega\n")
    r = subprocess.run([sys.executable, "-m", "distgrail", "query", "l.h5", "q.txt", "-o", "b.txt", "--backend",
                        "cpu"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "q.txt:1: node 'omega' is not in the graph" in r.stderr
    assert not (tmp_path / "b.txt").exists()


def test_networkx_labels():
    nx = pytest.importorskip("networkx", reason="networkx is not installed (not a dependency); the dict and "
                                                "string-array tests above cover the same path")
    idx = distgrail.build_index(nx.DiGraph([(1, 0)]), dims=2, backend="cpu")
    assert idx.reachable(1, 0) is True and idx.reachable(0, 1) is False
    g = nx.DiGraph([("x", "y"), ("y", "z")])
    g.add_node("w")
    idx = distgrail.build_index(g, dims=2, backend="cpu")
    assert idx.reachable("x", "z") is True and idx.reachable("z", "x") is False and idx.reachable("w", "x") is False
    g = nx.gnp_random_graph(60, 0.05, seed=3, directed=True)
    g = nx.relabel_nodes(g, {v: 1000 + 7 * v for v in g})
    idx = distgrail.build_index(g, dims=3, backend="cpu")
    for u in list(g)[:20]:
        desc = nx.descendants(g, u) | {u}
        assert [idx.reachable(u, v) for v in g] == [v in desc for v in g]
