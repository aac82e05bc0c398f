"""The exactness benchmark (distgrail/benchmarks/exact.py) on the CPU: its BFS agrees with
distgrail.bfs, it finds 0 wrong answers on a right index and reports a wrong one."""

from __future__ import annotations

import re

import numpy as np

import distgrail
from distgrail.benchmarks import exact
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.io.generate import generate
from distgrail.io.writers import write_graph


def _graph(tmp_path):
    g = generate("scale-free", 600, 3, seed=4)
    path = str(tmp_path / "g.txt")
    write_graph(g, path)
    return g, path


def test_pull_bfs_is_bfs(tmp_path):
    g, _ = _graph(tmp_path)
    from distgrail.gpu.backend import get_backend
    import copy

    indptr, dst = exact.graph_csr(get_backend("cpu"), copy.copy(g))
    ip, ix = csr_of(g)
    every = np.arange(g.n)
    for s in (0, 17, 599):
        reached, sweeps = exact.bfs_reached(np, indptr, dst, s, block=5)
        want = bfs_reachable(ip, ix, np.full(g.n, s), every)
        np.testing.assert_array_equal(reached, want)
        assert sweeps >= 1


def test_exact_benchmark_finds_no_wrong_answer_and_sees_one(tmp_path, capsys, monkeypatch):
    g, path = _graph(tmp_path)
    out = str(tmp_path / "g.h5")
    distgrail.build_index(path, dims=3, backend="cpu", output=out)
    assert exact.main([path, out, "--sources", "5", "--targets", "200", "--backend", "cpu"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"1,000 pairs .* wrong answers: 0", text), text
    # an index that answers one pair wrongly is caught
    real = distgrail.Index.query

    def lying(self, s, t, **kw):
        ans, st = real(self, s, t, **kw)
        ans = ans.copy()
        ans[3] = not ans[3]
        return ans, st

    monkeypatch.setattr(distgrail.Index, "query", lying)
    assert exact.main([path, out, "--sources", "5", "--targets", "200", "--backend", "cpu"]) == 1
    assert "wrong answers: 1" in capsys.readouterr().out
