"""The CPU backend's compiled level sweeps for deep DAGs (distgrail.stages.deep): every array the
CPU build makes equals the per-level NumPy twins' (condensation, both parent rules, subtree
sizes, ranks, intervals, support masks, whole indexes), answers equal plain BFS, and a deep DAG
does not sweep its levels one Python iteration each."""

import numpy as np
import pytest

from distgrail import build_index
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.gpu.backend import get_backend
from distgrail.io.generate import generate
from distgrail.io.graph import EdgeGraph
from distgrail.stages import condense as condense_mod
from distgrail.stages import deep, forest, intervals, ranks, subtree, supports
from distgrail.stages.condense import condense
from distgrail.stages.labeling import build_forest, label_dimensions

SEED = 7
DAG_ARRAYS = ("comp", "indptr", "indices", "rindptr", "rindices", "level", "level_ptr")


def eg(n, src, dst):
    return EdgeGraph(n=n, src=np.asarray(src, dtype=np.int64), dst=np.asarray(dst, dtype=np.int64))


def chain(n):
    return eg(n, np.arange(n - 1), np.arange(1, n))


def chain_of_cycles(k, size=3):
    """k cycles of ``size`` vertices, cycle i's last vertex -> cycle i+1's first: k levels."""
    src, dst = [], []
    for i in range(k):
        b = i * size
        for j in range(size):
            src.append(b + j)
            dst.append(b + (j + 1) % size)
        if i + 1 < k:
            src.append(b + size - 1)
            dst.append(b + size)
    return eg(k * size, src, dst)


def dense_dag(n, p, seed):
    """Random DAG: each pair i < j an edge with probability p (reversed ids: the input order is not topological)."""
    rng = np.random.default_rng(seed)
    i, j = np.triu_indices(n, 1)
    keep = rng.random(i.size) < p
    return eg(n, n - 1 - i[keep], n - 1 - j[keep])


def messy(n):
    """A deep chain with self-loops, duplicate edges, shortcuts and two cycles, edges shuffled."""
    rng = np.random.default_rng(3)
    src = list(range(n - 1)) + [5, 5, 9, 9, 0, 40, 12, 30] + list(range(0, n - 3, 7))
    dst = list(range(1, n)) + [5, 6, 9, 9, 0, 20, 10, 31] + list(range(3, n, 7))
    order = rng.permutation(len(src))
    return eg(n, np.asarray(src)[order], np.asarray(dst)[order])


def layered(n, levels, seed=1):
    return generate("layered", n, 3, seed, levels)


GRAPHS = {
    "chain": lambda: chain(400),
    "cycles": lambda: chain_of_cycles(150),
    "layered": lambda: layered(600, 120),
    "dense": lambda: dense_dag(80, 0.3, 2),
    "messy": lambda: messy(300),
    "empty": lambda: eg(0, [], []),
    "one": lambda: eg(1, [], []),
    "one_loop": lambda: eg(1, [0, 0], [0, 0]),
    "isolated": lambda: eg(5, [], []),
}


@pytest.fixture
def compiled(monkeypatch):
    """Every DAG of at least one level counts as deep: the compiled sweeps run."""
    monkeypatch.setattr(deep, "DEEP_LEVELS", 0)


def _both(monkeypatch, fn):
    """``fn()`` with the per-level twins, then with the compiled sweeps."""
    monkeypatch.setattr(deep, "DEEP_LEVELS", 1 << 62)
    want = fn()
    monkeypatch.setattr(deep, "DEEP_LEVELS", 0)
    return want, fn()


def _stages(g, rule):
    """Every array of phases 0-5 on the CPU backend."""
    be = get_backend("cpu")
    dag = condense(g)
    f = build_forest(dag, SEED, rule, be)
    post0, iv = label_dimensions(dag, f, range(3), SEED, be)
    out = {k: getattr(dag, k) for k in DAG_ARRAYS}
    out.update(parent=f.parent, size=f.size, post0=post0, iv=iv)
    if dag.C:
        ids = supports.choose_supports(dag, min(130, dag.C), SEED)
        out["out"], out["in"] = supports.support_masks(be, dag, ids)
        if ids.size > 64:  # a block of the second word only, as an MPI rank computes it
            out["out_b"], out["in_b"] = supports.support_masks(be, dag, ids, block=(64, ids.size))
    return out


def _assert_same(want, got):
    assert want.keys() == got.keys()
    for k in want:
        w, g = np.asarray(want[k]), np.asarray(got[k])
        assert w.dtype == g.dtype and w.shape == g.shape, (k, w.dtype, g.dtype, w.shape, g.shape)
        assert np.array_equal(w, g), k


@pytest.mark.parametrize("rule", ["max-level", "dfs"])
@pytest.mark.parametrize("name", list(GRAPHS))
def test_compiled_sweeps_equal_the_twins(monkeypatch, name, rule):
    g = GRAPHS[name]()
    want, got = _both(monkeypatch, lambda: _stages(g, rule))
    _assert_same(want, got)


def test_the_twins_differ_from_a_broken_sweep(monkeypatch, compiled):
    """The comparison above can fail: a compiled pass that skips the last row does not match."""
    dag = condense(layered(300, 60))
    post = np.arange(3 * dag.C, dtype=np.int64).reshape(3, dag.C)[:, ::-1].copy()
    want = intervals.descendant_intervals_numpy(dag.indptr, dag.indices, dag.level_ptr, post)
    lp = dag.level_ptr.copy()
    lp[-2] -= 1 + int(np.diff(dag.level_ptr)[-2])  # the last non-leaf level left out
    got = intervals.descendant_intervals_cpu(dag.indptr, dag.indices, lp, post)
    assert not np.array_equal(want[0], got[0]) or not np.array_equal(want[1], got[1])


def test_stage_functions_equal_their_twins_on_a_deep_layered_dag(compiled):
    g = layered(3000, 700, seed=5)
    dag = condense(g)
    assert dag.n_levels == 700
    parent = forest.parents_max_level(dag, SEED)
    size = subtree.subtree_sizes_cpu(parent, dag.level_ptr)
    np.testing.assert_array_equal(size, subtree.subtree_sizes_numpy(parent, dag.level_ptr))
    post = ranks.post_order_ranks_cpu(parent, size, dag.level_ptr, SEED, [0, 4])
    np.testing.assert_array_equal(post, ranks.post_order_ranks_numpy(parent, size, dag.level_ptr, SEED, [0, 4]))
    for k in (1, 4):  # one dimension: post.T is contiguous, its copy must not alias post
        p = post[:k].copy()
        keep = p.copy()
        got = intervals.descendant_intervals_cpu(dag.indptr, dag.indices, dag.level_ptr, p)
        want = intervals.descendant_intervals_numpy(dag.indptr, dag.indices, dag.level_ptr, keep)
        np.testing.assert_array_equal(p, keep)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and a.flags.c_contiguous
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(forest.parents_dfs_cpu(dag, SEED), forest.parents_dfs(dag, SEED))


def test_kahn_levels_equal_on_deep_and_shallow(monkeypatch):
    for g in (chain(3000), layered(5000, 1500, seed=2), dense_dag(120, 0.2, 4)):
        dag0 = condense(g)
        monkeypatch.setattr(deep, "DEEP_LEVELS", 10)  # hand over to the compiled loop part way
        dag1 = condense(g)
        monkeypatch.undo()
        for k in DAG_ARRAYS:
            a, b = getattr(dag0, k), getattr(dag1, k)
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("supports_k", [0, 64])
@pytest.mark.parametrize("name", ["chain", "cycles", "messy", "dense", "layered"])
def test_whole_index_equal_and_answers_equal_bfs(monkeypatch, name, supports_k):
    g = GRAPHS[name]()
    want, idx = _both(monkeypatch, lambda: build_index(g, backend="cpu", dims=3, seed=SEED, supports=supports_k))
    assert want.arrays.keys() == idx.arrays.keys()
    for k, a in want.arrays.items():
        b = idx.arrays[k]
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype, k
            np.testing.assert_array_equal(a, b, err_msg=k)
    n = g.n
    rng = np.random.default_rng(11)
    s = rng.integers(0, n, 3000)
    t = rng.integers(0, n, 3000)
    ip, ix = csr_of(g)
    np.testing.assert_array_equal(idx.query(s, t, backend="cpu")[0], bfs_reachable(ip, ix, s, t))


def test_a_deep_chain_does_not_sweep_level_by_level(monkeypatch, tmp_path):
    """With the default threshold, a 5,000-level chain builds without the per-level twins of
    phases 2-5 and with at most DEEP_LEVELS NumPy iterations of the level assignment."""
    calls = []
    real = condense_mod.gather_rows

    def counted(*a):
        calls.append(1)
        return real(*a)

    def refuse(*a, **k):
        raise AssertionError("a per-level twin ran on a deep DAG")

    monkeypatch.setattr(condense_mod, "gather_rows", counted)
    for mod, name in ((subtree, "subtree_sizes_numpy"), (ranks, "post_order_ranks_numpy"),
                      (intervals, "descendant_intervals_numpy"), (supports, "support_masks_numpy"),
                      (forest, "parents_dfs")):
        monkeypatch.setattr(mod, name, refuse)
    n = 5000
    for rule in ("max-level", "dfs"):
        calls.clear()
        idx = build_index(chain(n), backend="cpu", dims=2, seed=SEED, supports=64, parent_rule=rule)
        assert len(calls) <= deep.DEEP_LEVELS < n
        s = np.array([0, 10, 4999, 2500, 2501])
        t = np.array([4999, 9, 0, 2501, 2500])
        np.testing.assert_array_equal(idx.query(s, t, backend="cpu")[0], s <= t)


def test_shallow_dags_keep_the_twins(monkeypatch):
    """Below the threshold the CPU build runs the twins (and never imports numba for them)."""
    ran = []
    for mod, name in ((subtree, "subtree_sizes_numpy"), (ranks, "post_order_ranks_numpy"),
                      (intervals, "descendant_intervals_numpy"), (supports, "support_masks_numpy")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _real=real, _name=name, **k: ran.append(_name) or _real(*a, **k))
    idx = build_index(dense_dag(60, 0.2, 1), backend="cpu", dims=2, seed=SEED, supports=64)
    assert idx.n == 60
    assert sorted(ran) == sorted(["subtree_sizes_numpy", "post_order_ranks_numpy", "descendant_intervals_numpy",
                                  "support_masks_numpy"])
