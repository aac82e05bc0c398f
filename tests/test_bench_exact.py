"""The exactness benchmark (distgrail/benchmarks/exact.py) on the CPU: its BFS agrees with
distgrail.bfs, it finds 0 wrong answers on a right index and reports a wrong one."""

from __future__ import annotations

import re

import numpy as np
import pytest

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


@pytest.mark.parametrize("block", [5, 1 << 27])
def test_reach_masks_are_bfs(tmp_path, block):
    """Every source's bit where BFS reaches, through two pieces of edges and small blocks (so
    several edges of a block share a target), 64 sources at once, duplicates among them."""
    g, _ = _graph(tmp_path)
    ip, ix = csr_of(g)
    half = g.m // 2
    pieces = [(g.src[:half], g.dst[:half]), (g.src[half:], g.dst[half:])]
    sources = np.r_[np.arange(0, 600, 10), 0, 17, 599, 17]
    mask, passes = exact.reach_masks(np, g.n, pieces, sources, block=block)
    every = np.arange(g.n)
    assert mask.dtype == np.uint64 and passes >= 2
    for j, s in enumerate(sources):
        want = bfs_reachable(ip, ix, np.full(g.n, s), every)
        np.testing.assert_array_equal((mask >> np.uint64(j)) & np.uint64(1) != 0, want)


def test_an_edge_list_is_read_in_ranges(tmp_path):
    """Byte ranges of a few hundred bytes: many pieces, together the file's edges in file order,
    and the same vertex count as one read."""
    from distgrail.gpu.backend import get_backend

    g, path = _graph(tmp_path)
    n, pieces = exact.read_edges(get_backend("cpu"), path, 300)
    assert len(pieces) > 10 and n == g.n
    src = np.concatenate([p[0] for p in pieces])
    dst = np.concatenate([p[1] for p in pieces])
    np.testing.assert_array_equal(src, g.src)
    np.testing.assert_array_equal(dst, g.dst)


def test_exact_benchmark_finds_no_wrong_answer_and_sees_one(tmp_path, capsys, monkeypatch):
    g, path = _graph(tmp_path)
    out = str(tmp_path / "g.h5")
    distgrail.build_index(path, dims=3, backend="cpu", output=out)
    assert exact.main([path, out, "--sources", "5", "--targets", "200", "--backend", "cpu"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"1,000 pairs .* wrong answers: 0", text) and "(1 piece(s))" in text, text
    # in byte ranges (many pieces), 70 sources: two groups of masks
    assert exact.main([path, out, "--sources", "70", "--targets", "50", "--backend", "cpu", "--range-gb", "1e-6"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"3,500 pairs .* wrong answers: 0", text) and "(1 piece(s))" not in text, text
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
