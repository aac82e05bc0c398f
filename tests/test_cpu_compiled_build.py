"""The CPU backend's compiled build steps for large graphs: strong components by Pearce's search
(distgrail.stages.scc_jit) and phase 3's sibling order by radix passes
(distgrail.stages.ranks_jit). With their size thresholds at 0, every DAG array equals the one of
SciPy's search (every dtype), every rank equals the NumPy twin's, whole indexes are the same
bytes, and answers equal plain BFS; each test also checks that the compiled code ran."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from distgrail import build_index
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.hashing import STREAM_DIM0, hash3, hash_base
from distgrail.io.generate import generate
from distgrail.stages import condense as condense_mod
from distgrail.stages import ranks
from distgrail.stages.condense import condense
from test_condense import GRAPHS, assert_same_dag, eg

scc_jit = pytest.importorskip("distgrail.stages.scc_jit", reason="numba is a dependency; it did not import")
ranks_jit = pytest.importorskip("distgrail.stages.ranks_jit", reason="numba is a dependency; it did not import")


@pytest.fixture
def compiled(monkeypatch):
    """Compiled steps at every size; counts the compiled searches that ran."""
    calls = []
    real = scc_jit.strong_components

    def counted(*a):
        calls.append(a[2].size)
        return real(*a)
    monkeypatch.setattr(condense_mod, "COMPILED_SCC_EDGES", 0)
    monkeypatch.setattr(ranks, "COMPILED_RANKS_COMPONENTS", 0)
    monkeypatch.setattr(scc_jit, "strong_components", counted)
    return calls


def scipy_dag(monkeypatch, g):
    with monkeypatch.context() as m:
        m.setattr(condense_mod, "COMPILED_SCC_EDGES", 1 << 62)
        return condense(g)


def partition_equal(a, b):
    """Two labellings give the same partition."""
    pairs = np.unique(np.stack([a.astype(np.int64), b.astype(np.int64)]), axis=1)
    return pairs.shape[1] == np.unique(a).size == np.unique(b).size


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("cap", [None, 0, 3])
def test_compiled_condensation_equals_scipys(monkeypatch, compiled, name, cap):
    """cap 0 / 3: more edges between components than the search keeps (the NumPy fallback)."""
    g = GRAPHS[name]
    want = scipy_dag(monkeypatch, g)
    real = condense_mod._strong_components
    monkeypatch.setattr(condense_mod, "_strong_components", lambda s, d, n: real(s, d, n, cap=cap))
    assert_same_dag(condense(g), want)
    cyclic = g.m and not ((g.src <= g.dst).all() or (g.src >= g.dst).all())
    assert len(compiled) == (1 if cyclic else 0)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_components_and_edges_between_them_equal_scipys(compiled, name):
    g = GRAPHS[name]
    if g.n == 0:
        return
    ncomp, labels, cu, cv, jit = condense_mod._strong_components(g.src, g.dst, g.n)
    a = csr_matrix((np.ones(g.m), (g.src, g.dst)), shape=(g.n, g.n))
    k, want = connected_components(a, directed=True, connection="strong")
    assert ncomp == k and labels.dtype == np.int32 and partition_equal(labels, want)
    assert labels.min() == 0 and labels.max() == ncomp - 1
    # every edge between components, each once per input edge, and every one goes down the numbering
    between = labels[g.src] != labels[g.dst]
    got = sorted(zip(cu.tolist(), cv.tolist()))
    assert got == sorted(zip(labels[g.src][between].tolist(), labels[g.dst][between].tolist()))
    assert (cu > cv).all() and jit is scc_jit
    # levels in one pass over the closing order equal Kahn's; the canonical order lexsort's
    ip, ix = condense_mod._csr(cu, cv, ncomp)
    lev = scc_jit.closing_levels(ip, ix)
    assert np.array_equal(lev, condense_mod._kahn_levels(ip, ix, ncomp))
    first = [np.flatnonzero(labels == c)[0] for c in range(ncomp)]
    assert np.array_equal(scc_jit.canonical_order(labels, lev, ncomp), np.lexsort((first, lev)))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=5 * n),
    st.sampled_from([None, 0, 1, 7]))))
def test_compiled_condensation_random(case):
    n, edges, cap = case
    g = eg(n, [e[0] for e in edges], [e[1] for e in edges])
    old = condense_mod.COMPILED_SCC_EDGES
    try:
        condense_mod.COMPILED_SCC_EDGES = 1 << 62
        want = condense(g)
        condense_mod.COMPILED_SCC_EDGES = 0
        real = condense_mod._strong_components
        condense_mod._strong_components = lambda s, d, k: real(s, d, k, cap=cap)
        assert_same_dag(condense(g), want)
    finally:
        condense_mod._strong_components = real
        condense_mod.COMPILED_SCC_EDGES = old


def test_deep_search_needs_no_recursion(compiled, monkeypatch):
    """A 300,000-vertex ring with a tail: the search goes 300,000 calls deep on its own stack."""
    n = 300_000
    src = np.concatenate((np.arange(n), np.arange(n, n + 1000)))
    dst = np.concatenate(((np.arange(n) + 1) % n, np.arange(n + 1, n + 1001) % (n + 1000)))
    g = eg(n + 1000, src, dst)
    d = condense(g)
    assert_same_dag(d, scipy_dag(monkeypatch, g))
    assert d.C == 1001 and compiled  # the ring and the tail's 1,000 vertices


def test_rows_of_groups_or_returns_the_input():
    src = np.array([0, 0, 2, 2, 2, 4], np.int32)
    dst = np.array([5, 1, 0, 3, 3, 2], np.int32)
    ptr = np.empty(6, np.int64)
    assert scc_jit.rows_of(src, dst, 5, ptr) is dst and ptr.tolist() == [0, 2, 2, 5, 5, 6]
    perm = np.array([5, 2, 0, 4, 1, 3])
    out = scc_jit.rows_of(src[perm], dst[perm], 5, ptr)
    assert ptr.tolist() == [0, 2, 2, 5, 5, 6]
    assert [sorted(out[ptr[r]:ptr[r + 1]].tolist()) for r in range(5)] == [[1, 5], [], [0, 3, 3], [], [2]]


@pytest.mark.parametrize("n,m", [(1, 5), (1024, 3000), (1025, 4000), (70_000, 300_000), (5000, 0)])
def test_rows_of_many_blocks_equals_a_stable_sort(n, m):
    """Past 1,024 rows the edges move block by block: the rows and their order equal a stable
    argsort's (a hub row included)."""
    rng = np.random.default_rng(n)
    src = rng.integers(0, n, m).astype(np.int32)
    src[: m // 5] = n - 1  # a hub: the last row, the last block
    src = src[rng.permutation(m)]
    dst = rng.integers(0, n, m).astype(np.int32)
    ptr = np.empty(n + 1, np.int64)
    out = scc_jit.rows_of(src, dst, n, ptr)
    order = np.argsort(src, kind="stable")
    want = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=want[1:])
    assert np.array_equal(ptr, want) and np.array_equal(out, dst[order])


@pytest.mark.parametrize("seed,dim", [(0, 0), (7, 3), (2**40 + 5, 1)])
def test_compiled_keys_equal_the_hash(seed, dim):
    from distgrail.constants import GOLDEN, MIX1, MIX2

    C = 5000
    got = ranks_jit._keys(C, np.uint64(hash_base(seed, STREAM_DIM0 + dim)), np.uint64(GOLDEN), np.uint64(MIX1),
                          np.uint64(MIX2))
    assert np.array_equal(got, hash3(seed, STREAM_DIM0 + dim, np.arange(C)))


def test_radix_order_equals_a_stable_argsort():
    rng = np.random.default_rng(4)
    for key in (rng.integers(0, 2**63, 10_000, dtype=np.uint64) * np.uint64(2) + np.uint64(1),
                rng.integers(0, 5, 3000).astype(np.uint64) << np.uint64(56),  # ties: input order kept
                np.zeros(0, np.uint64), np.array([2**64 - 1, 0, 2**63], np.uint64)):
        want = np.argsort(key, kind="stable")
        assert np.array_equal(ranks_jit._radix_order(key.copy()), want)


def forests():
    """(parent, size, level_ptr): forests numbered by level, parents one level up, the roots
    at level 0 (as a DAG's forest: a component below level 0 has a DAG parent)."""
    rng = np.random.default_rng(11)
    out = []
    for C, L, roots, fan in [(0, 1, 0, 0), (1, 1, 0, 0), (500, 1, 0, 0), (3000, 6, 0.2, 0),
                             (4000, 3, 0.5, 1), (2000, 200, 0.05, 0)]:
        level = np.sort(np.where(rng.random(C) < roots, 0, rng.integers(0, L, C)))
        lp = np.searchsorted(level, np.arange(int(level.max(initial=0)) + 2)).astype(np.int64)
        parent = np.full(C, -1, np.int32)
        for v in range(C):
            lv = level[v]
            if lv:  # every component below level 0 has a parent (a DAG parent); p_root: more level-0 roots
                parent[v] = lp[lv - 1] if fan else rng.integers(lp[lv - 1], lp[lv])  # fan: one parent of many
        size = np.ones(C, np.int64)
        for v in range(C - 1, -1, -1):
            if parent[v] >= 0:
                size[parent[v]] += size[v]
        out.append((parent, size, lp))
    return out


@pytest.mark.parametrize("case", range(6))
@pytest.mark.parametrize("threads", [1, 3])
def test_compiled_ranks_equal_the_twin(monkeypatch, case, threads):
    parent, size, lp = forests()[case]
    monkeypatch.setattr(ranks, "COMPILED_RANKS_COMPONENTS", 0)
    monkeypatch.setattr(ranks, "_RANKS_THREADS", threads)
    ran = []
    real = ranks_jit.sibling_offsets_into
    monkeypatch.setattr(ranks_jit, "sibling_offsets_into", lambda *a: ran.append(a[1] is parent) or real(*a))
    got = ranks.post_order_ranks_cpu(parent, size, lp, 5, [0, 2, 4])
    want = ranks.post_order_ranks_numpy(parent, size, lp, 5, [0, 2, 4])
    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert sum(ran) == 3  # once a dimension (and once on one component, before the threads)
    # post-order ranks of each dimension: a permutation of 0..C-1
    assert all(np.array_equal(np.sort(r), np.arange(parent.size)) for r in got)


def test_the_ranks_depend_on_the_seed_and_dimension(monkeypatch):
    """The comparison above can fail: another seed or dimension orders the siblings otherwise."""
    parent, size, lp = forests()[3]
    monkeypatch.setattr(ranks, "COMPILED_RANKS_COMPONENTS", 0)
    a = ranks.post_order_ranks_cpu(parent, size, lp, 5, [0, 1])
    assert not np.array_equal(a[0], a[1])
    assert not np.array_equal(a[0], ranks.post_order_ranks_numpy(parent, size, lp, 6, [0])[0])


@pytest.mark.parametrize("kind,n,deg", [("scale-free", 3000, 4), ("paper", 2000, 5)])
def test_whole_index_same_and_answers_equal_bfs(monkeypatch, compiled, tmp_path, kind, n, deg):
    g = generate(kind, n, deg, 9)
    rng = np.random.default_rng(1)
    u, v = rng.integers(0, g.n, 300), rng.integers(0, g.n, 300)  # random edges: cycles
    g = eg(g.n, np.concatenate((g.src, u)), np.concatenate((g.dst, v)))
    with monkeypatch.context() as m:
        m.setattr(condense_mod, "COMPILED_SCC_EDGES", 1 << 62)
        m.setattr(ranks, "COMPILED_RANKS_COMPONENTS", 1 << 62)
        want = build_index(g, dims=3, backend="cpu")
    got = build_index(g, dims=3, backend="cpu")
    assert compiled
    want.save(tmp_path / "a.h5")
    got.save(tmp_path / "b.h5")
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()
    ptr, idx = csr_of(g)
    qs, qt = rng.integers(0, g.n, 3000), rng.integers(0, g.n, 3000)
    answers, _ = got.query(qs, qt)
    assert np.array_equal(answers, bfs_reachable(ptr, idx, qs, qt))


@pytest.mark.parametrize("src,dst", [([0, 5], [1, 0]), ([0, 1], [1, -1]), ([0, 1], [7, 0])])
@pytest.mark.parametrize("threshold", [0, 1 << 62])
def test_ids_outside_the_graph_are_refused_not_read(monkeypatch, src, dst, threshold):
    """The compiled search reads its arrays unchecked: an EdgeGraph naming a vertex >= n (given
    to the API as is) is a ValueError, not a crash; SciPy's path says the same."""
    monkeypatch.setattr(condense_mod, "COMPILED_SCC_EDGES", threshold)
    with pytest.raises(ValueError, match="outside the graph's vertices 0..2"):
        condense_mod._strong_components(np.array(src, np.int32), np.array(dst, np.int32), 3)


def test_an_error_in_one_dimension_drops_the_ones_not_started(monkeypatch):
    """Phase 3 on threads: an error (or Ctrl-C) does not wait for every queued dimension."""
    import time

    parent, size, lp = forests()[3]
    monkeypatch.setattr(ranks, "COMPILED_RANKS_COMPONENTS", 0)
    monkeypatch.setattr(ranks, "_RANKS_THREADS", 2)
    started = []
    real = ranks_jit.sibling_offsets_into

    def slow(*a):
        if a[1] is parent:
            started.append(1)
            if len(started) == 1:
                raise KeyboardInterrupt
            time.sleep(1.0)
        return real(*a)
    monkeypatch.setattr(ranks_jit, "sibling_offsets_into", slow)
    t = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        ranks.post_order_ranks_cpu(parent, size, lp, 5, list(range(12)))
    assert time.perf_counter() - t < 3.0 and len(started) < 12  # (waiting for all: ~5.5 s)


def test_phase_3_threads_stay_within_cores_and_free_memory(monkeypatch):
    import os

    from distgrail import cores

    monkeypatch.setattr(cores, "usable", lambda: 16)
    assert ranks._threads(1000, 5) == 5 and ranks._threads(1000, 20) == ranks._RANKS_THREADS
    pages = {"SC_AVPHYS_PAGES": 1000, "SC_PAGE_SIZE": 4096}  # 4 MB free
    monkeypatch.setattr(os, "sysconf", lambda name: pages[name])
    assert ranks._threads(4096 * 1000 // (2 * 56 * 3), 5) == 3  # room for three
    assert ranks._threads(10**9, 5) == 1  # never none
