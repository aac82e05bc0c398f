"""The grid-wide GPU search's launch planning (CPU), the frontier trace of its NumPy twin, and the
CPU backend's bidirectional search, all against BFS."""

import numpy as np
import pytest

from distgrail.bfs import bfs_reachable, csr_of
from distgrail.errors import BackendError
from distgrail.query import search
from distgrail.query.bidir import bidirectional_search_numpy, reverse_csr
from distgrail.query.grid import bitmap_words, plan_grid, run_groups
from distgrail.query.prefilter import prefilter
from distgrail.query.search import guided_search_numpy
from distgrail.query.stats import UNDECIDED, SearchOptions
from test_query_steps import GRAPHS, indexed, pairs


@pytest.mark.parametrize("C,nhard,budget", [(1, 1, 1), (10, 3, 1 << 20), (1_500_000, 19, 1 << 30),
                                            (1_500_000, 5000, 1 << 30), (2**31 - 2, 7, 1 << 30), (100, 10**6, 1 << 12)])
def test_plan_grid_bounds(C, nhard, budget):
    group, cap = plan_grid(C, nhard, budget)
    assert 1 <= group <= nhard
    assert cap >= 2 * C  # one query's whole search (both sides) always fits
    assert cap <= max(2 * C, 2 * nhard * C)
    if group > 1:  # more than one query only when the bitmaps, counters and lists fit the budget
        assert group * (8 * bitmap_words(C) + 65) + 16 * cap <= budget


def test_plan_grid_dag11():
    group, cap = plan_grid(1_500_000, 19)
    assert (group, cap) == (19, (1 << 30) // 2 // 16)  # half the budget in lists; 19 queries: one group
    assert plan_grid(1_500_000, 5) == (5, 5 * 2 * 1_500_000)  # lists no longer than 5 queries can need
    g2, c2 = plan_grid(1_500_000, 100_000)
    assert c2 == (1 << 30) // 2 // 16 and g2 == ((1 << 30) - c2 * 16) // (8 * bitmap_words(1_500_000) + 65)
    with pytest.raises(ValueError):
        plan_grid(0, 1)


def test_run_groups_splits_until_it_fits():
    limit = 3  # a fake GPU on which groups of more than 3 queries overflow
    calls = []

    def run(s, m):
        calls.append((s, m))
        return m <= limit

    sizes = run_groups(20, 8, run)
    assert sum(sizes) == 20 and max(sizes) <= limit
    covered = sorted(s for s, m in calls if m <= limit)
    assert covered == sorted(set(covered)) and calls[0] == (0, 8) and calls[1] == (0, 4)
    assert run_groups(0, 8, run) == []
    with pytest.raises(BackendError):
        run_groups(2, 2, lambda s, m: False)


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("K", [0, 64])
def test_bidirectional_equals_forward_and_bfs(name, K, monkeypatch):
    g = GRAPHS[name]
    idx = indexed(g, K)
    L = idx.labels("cpu")
    s, t = pairs(g, 1500, seed=K + 5)
    cu, cv = L.comp[s], L.comp[t]
    _, code = prefilter(L, cu, cv)
    und = np.flatnonzero(code == UNDECIDED)
    fwd, _ = guided_search_numpy(L, cu[und], cv[und])
    bid, rounds = bidirectional_search_numpy(L, cu[und], cv[und])
    np.testing.assert_array_equal(bid, fwd)
    assert (rounds > 0) == (und.size > 0)
    truth = bfs_reachable(*csr_of(g), s, t)
    np.testing.assert_array_equal(idx.query(s, t, backend="cpu")[0], truth)
    a, st = idx.query(s, t, backend="cpu", search=SearchOptions(cpu_search="forward"))
    np.testing.assert_array_equal(a, truth)
    monkeypatch.setattr("distgrail.query.bidir.CHUNK_QUERIES", 7)  # many chunks, bitmaps reused
    np.testing.assert_array_equal(bidirectional_search_numpy(L, cu[und], cv[und])[0], fwd)


@pytest.mark.parametrize("name", ["paper-dense", "cycles", "deep"])
def test_bidirectional_frontier_trace(name, monkeypatch):
    """The bidirectional twin's per-round frontier sizes (the GPU grid-wide search's trace): a sum
    over queries, so any chunking gives the same list; one entry per round, the last one 0."""
    from distgrail.query import bidir

    g = deep_graph() if name == "deep" else GRAPHS[name]
    L = indexed(g, 0).labels("cpu")
    s, t = pairs(g, 1500, seed=4)
    cu, cv = L.comp[s], L.comp[t]
    _, code = prefilter(L, cu, cv)
    und = np.flatnonzero(code == UNDECIDED)
    assert und.size > 0
    sizes = []
    found, rounds = bidirectional_search_numpy(L, cu[und], cv[und], sizes)
    assert rounds >= 1 and len(sizes) == rounds and sizes[-1] == 0 and min(sizes) >= 0
    monkeypatch.setattr(bidir, "CHUNK_QUERIES", 13)
    again = []
    found2, rounds2 = bidirectional_search_numpy(L, cu[und], cv[und], again)
    assert again == sizes and rounds2 == rounds
    np.testing.assert_array_equal(found2, found)
    np.testing.assert_array_equal(found, bfs_reachable(*csr_of(g), s[und], t[und]))


def test_reverse_csr():
    g = GRAPHS["paper-dense"]
    L = indexed(g, 0).labels("cpu")
    ip, ix, outdeg = reverse_csr(L)
    assert reverse_csr(L)[0] is ip  # cached
    np.testing.assert_array_equal(outdeg, np.diff(L.indptr))
    fwd = set(zip(np.repeat(np.arange(L.C), np.diff(L.indptr)).tolist(), L.indices.tolist()))
    bwd = set(zip(ix.tolist(), np.repeat(np.arange(L.C), np.diff(ip)).tolist()))
    assert fwd == bwd and len(ix) == len(L.indices)


@pytest.mark.parametrize("name", ["paper-dense", "cycles", "chain"])
def test_frontier_trace(name, monkeypatch):
    """The twin's per-round frontier sizes: a sum over queries, so any chunking gives the same list;
    the last round empties the frontier and the list is as long as the round count."""
    g = GRAPHS[name]
    L = indexed(g, 1).labels("cpu")
    s, t = pairs(g, 1500, seed=2)
    cu, cv = L.comp[s], L.comp[t]
    _, code = prefilter(L, cu, cv)
    und = np.flatnonzero(code == UNDECIDED)
    sizes = []
    found, rounds = guided_search_numpy(L, cu[und], cv[und], sizes)
    assert len(sizes) == rounds and (rounds == 0 or sizes[-1] == 0)
    assert all(k >= 0 for k in sizes)
    monkeypatch.setattr(search, "CHUNK_QUERIES", 13)
    again = []
    found2, rounds2 = guided_search_numpy(L, cu[und], cv[und], again)
    assert again == sizes and rounds2 == rounds
    np.testing.assert_array_equal(found2, found)


def deep_graph():
    """A deep layered DAG (many levels, few vertices each): long searches, many rounds."""
    from distgrail.io.generate import generate

    return generate("layered", 6000, 3, seed=9, levels=300)


def test_deep_rounds():
    g = deep_graph()
    idx = indexed(g, 1)
    L = idx.labels("cpu")
    s, t = pairs(g, 2000, seed=3)
    cu, cv = L.comp[s], L.comp[t]
    _, code = prefilter(L, cu, cv)
    und = np.flatnonzero(code == UNDECIDED)
    sizes = []
    found, rounds = guided_search_numpy(L, cu[und], cv[und], sizes)
    assert rounds >= 5 and len(sizes) == rounds and sizes[-1] == 0
    truth = bfs_reachable(*csr_of(g), s[und], t[und])
    np.testing.assert_array_equal(found, truth)
    np.testing.assert_array_equal(bidirectional_search_numpy(L, cu[und], cv[und])[0], truth)


def test_benchmark_cpu_row(capsys):
    """``queries --cpu`` runs without a GPU: K = 0 (no masks) beside K = 64, both searches agree."""
    from distgrail.benchmarks import queries

    assert queries.parse_graph("1e6,20") == (1_000_000, 20.0)
    assert queries.main(["--cpu", "--cpu-graph", "3000,8", "--cpu-pairs", "3000", "--cpu-forward", "800",
                         "--supports", "64"]) == 0
    out = capsys.readouterr().out
    rows = [ln.split() for ln in out.splitlines() if ln.split() and ln.split()[0] in ("0", "64")]
    assert [r[0] for r in rows] == ["0", "64"]
    assert int(rows[0][9]) == 0 and int(rows[1][9]) > 0  # sup+ column: K = 0 decides nothing by masks
