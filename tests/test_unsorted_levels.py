"""Indexes whose components are not numbered by level (root attribute ``components_by_level`` = 0,
what an update that keeps the component ids writes: levels raised in place, dead rows left by
merged components) answer exactly on every query path.

Each index here is a built one with its components renumbered by a random injective map and a
few dead rows added (copies of live rows' labels, empty DAG rows, no vertex mapping to them):
the same reachability, the same labels per component, only the ids differ. Its answers are
compared with BFS over the original edges (all pairs on small graphs, random pairs on larger
ones) through the NumPy prefilter and searches, the compiled prefilter (its near and far passes,
vector and scalar record tests) and search, :meth:`Index.query`, ``distgrail query`` and the GPU;
the prefilter's codes and the compiled search's rounds are the sorted index's. The reader refuses
unsorted levels without the attribute, and a DAG edge that does not go up the levels with it.
"""

from __future__ import annotations

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.errors import IndexFormatError
from distgrail.index import Index, open_index
from distgrail.io.generate import generate
from distgrail.io.graph import EdgeGraph
from distgrail.query import bidir_jit, prefilter_jit
from distgrail.query.bidir import bidirectional_search_numpy
from distgrail.query.prefilter import prefilter
from distgrail.query.search import guided_search_numpy
from distgrail.query.stats import UNDECIDED, SearchOptions
from conftest import closure


def _arr(x):
    return np.asarray(x, dtype=np.int64)


def _small_graphs():
    """{name: (n, src, dst)}: graphs small enough for every pair."""
    rng = np.random.default_rng(11)
    out = {"one vertex": (1, _arr([]), _arr([])), "one vertex with a self-loop": (1, _arr([0]), _arr([0])),
           "self-loops and duplicate edges": (7, _arr([0, 0, 0, 1, 1, 2, 2, 3, 4, 4, 5]),
                                              _arr([0, 1, 1, 1, 2, 3, 3, 3, 4, 5, 5])),
           "isolated vertices": (14, _arr([2, 3, 5, 9]), _arr([3, 2, 6, 6]))}
    n = 120
    chain_s, chain_d = list(range(n - 1)), list(range(1, n))
    short = rng.integers(0, n - 5, 15)
    out["deep chain"] = (n, _arr(chain_s + short.tolist()), _arr(chain_d + (short + rng.integers(2, 5, 15)).tolist()))
    u, v = np.triu_indices(45, 1)
    keep = rng.random(u.size) < 0.5
    out["dense dag"] = (45, _arr(u[keep]), _arr(v[keep]))
    ring = np.arange(90)
    out["one giant scc"] = (90, _arr(np.concatenate([ring, rng.integers(0, 90, 60)])),
                            _arr(np.concatenate([(ring + 1) % 90, rng.integers(0, 90, 60)])))
    for seed in range(3):
        r = np.random.default_rng(seed)
        nn = int(r.integers(30, 130))
        m = int(r.integers(nn, 3 * nn))
        out[f"random with cycles {seed}"] = (nn, _arr(r.integers(0, nn, m)), _arr(r.integers(0, nn, m)))
    return out


SMALL = _small_graphs()
#: (supports, dims): plain GRAIL; masks of one word (the prefilter's vector tests at d <= 5); masks
#: of three words (the tests one by one)
LABELS = [(0, 2), ("auto", 5), (130, 3)]


def permuted(meta: dict, arrays: dict, seed: int, dead: int = 3, attribute: bool = True):
    """``(meta, arrays)`` of the same index with its components renumbered: old component ``c``
    becomes ``P[c]``, ``P`` a random injective map into ``C + dead`` ids (``dead`` at most
    ``n - C``: the rows of components merged by updates, never more than the vertices); the ids no component
    takes are dead rows (each a copy of a random live row's level, forest and labels, an empty DAG
    row, no vertex mapping to it, no edge reaching it). ``attribute``: ``components_by_level = 0``
    in the meta."""
    rng = np.random.default_rng(seed)
    C = int(meta["n_components"])
    Cn = C + min(dead, int(meta["n_vertices"]) - C)  # (merged components leave their rows: never more than n)
    P = rng.permutation(Cn)[:C].astype(np.int64)
    inv = np.full(Cn, -1, np.int64)
    inv[P] = np.arange(C)
    alive = inv >= 0
    src = np.where(alive, inv, rng.integers(0, max(C, 1), Cn))  # the old row each new row copies
    a = dict(arrays)
    a["vertex/component"] = P[arrays["vertex/component"].astype(np.int64)]
    ip = arrays["dag/indptr"].astype(np.int64)
    ix = arrays["dag/indices"].astype(np.int64)
    deg = np.where(alive, np.diff(ip)[src], 0)
    nip = np.zeros(Cn + 1, np.int64)
    np.cumsum(deg, out=nip[1:])
    rows = np.flatnonzero(alive)
    take = np.repeat(ip[inv[rows]] - nip[rows], deg[rows]) + np.arange(int(nip[-1]))
    row_of = np.repeat(rows, deg[rows])
    a["dag/indptr"] = nip
    a["dag/indices"] = P[ix[take]][np.lexsort((rng.random(take.size), row_of))]  # each row's children shuffled
    for k in ("dag/level", "forest/subtree_size", "labels/dt_post0"):
        a[k] = arrays[k][src]
    parent = arrays["forest/parent"].astype(np.int64)[src]
    a["forest/parent"] = np.where(parent >= 0, P[np.maximum(parent, 0)], -1)
    a["labels/intervals"] = arrays["labels/intervals"][:, src, :]
    if "supports/ids" in arrays:
        a["supports/ids"] = P[arrays["supports/ids"].astype(np.int64)]
        a["supports/out"] = arrays["supports/out"][src]
        a["supports/in"] = arrays["supports/in"][src]
    m = dict(meta)
    m["n_components"] = Cn
    if attribute:
        m["components_by_level"] = 0
    return m, a


def _build(n, src, dst, supports=0, dims=3):
    g = EdgeGraph(n, _arr(src), _arr(dst))
    return g, distgrail.build_index(g, dims=dims, backend="cpu", supports=supports, seed=2)


def _written(idx, tmp_path, seed=1, dead=3, name="u.h5"):
    """The permuted index written with ``components_by_level = 0`` and opened again."""
    path = tmp_path / name
    Index(*permuted(idx.meta, idx.arrays, seed, dead)).save(path)
    return open_index(path)


def _all_pairs(n):
    return np.repeat(np.arange(n), n).astype(np.int64), np.tile(np.arange(n), n).astype(np.int64)


def _numpy_way(L, s, t, search):
    cu, cv = L.comp[s].astype(np.int64), L.comp[t].astype(np.int64)
    ans, code = prefilter(L, cu, cv)
    und = np.flatnonzero(code == UNDECIDED)
    found, rounds = search(L, cu[und], cv[und])
    ans[und] = found
    return ans, code


def _compiled_way(L, s, t, monkeypatch, near: bool):
    monkeypatch.setattr(prefilter_jit, "NEAR_BYTES", 1 << 40 if near else 0)
    ans, code, cu, cv = prefilter_jit.compiled_prefilter(L, s, t, threads=2)
    und = np.flatnonzero(code == UNDECIDED)
    found, rounds = bidir_jit.query_rounds(L, cu[und], cv[und], threads=2)
    ans = ans.copy()
    ans[und] = found
    return ans, code, rounds


def _check_every_path(idx, J, s, t, want, monkeypatch):
    """``J`` (the permuted index) answers ``want`` on every CPU path, with ``idx``'s codes and
    compiled rounds."""
    L, L0 = J.labels("cpu"), idx.labels("cpu")
    for name, search in (("bidirectional", bidirectional_search_numpy), ("forward", guided_search_numpy)):
        got, code = _numpy_way(L, s, t, search)
        np.testing.assert_array_equal(got, want, err_msg=f"NumPy prefilter and {name} search")
        np.testing.assert_array_equal(code, _numpy_way(L0, s, t, search)[1], err_msg="codes")
    for near in (True, False):
        got, code, rounds = _compiled_way(L, s, t, monkeypatch, near)
        np.testing.assert_array_equal(got, want, err_msg=f"compiled prefilter ({'near' if near else 'far'}) and search")
        _, code0, rounds0 = _compiled_way(L0, s, t, monkeypatch, near)
        np.testing.assert_array_equal(code, code0, err_msg="compiled codes")
        np.testing.assert_array_equal(rounds, rounds0, err_msg="compiled rounds")
    monkeypatch.undo()
    for opts in (SearchOptions(cpu_search="compiled", compiled_min_pairs=0), SearchOptions(cpu_search="bidirectional")):
        got, st = J.query(s, t, backend="cpu", search=opts)
        np.testing.assert_array_equal(got, want, err_msg=f"Index.query {opts.cpu_search}")
        assert st.reachable == int(want.sum())


def _unsorted(J) -> bool:
    level = J.arrays["dag/level"]
    return bool(np.any(level[1:] < level[:-1]))


@pytest.mark.parametrize("supports,dims", LABELS)
@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_renumbered_index_answers_every_pair_as_bfs(name, supports, dims, tmp_path, monkeypatch):
    n, src, dst = SMALL[name]
    g, idx = _build(n, src, dst, supports, dims)
    J = _written(idx, tmp_path)
    assert J.meta["components_by_level"] == 0 and J.C == idx.C + min(3, n - idx.C)
    if idx.C > 2:  # (levels of one value, or two components, may come out sorted: the id-ordered search then)
        assert _unsorted(J) == (bidir_jit._layout(J.labels("cpu"))[1] is None)
    s, t = _all_pairs(n)
    want = closure(n, src, dst)[s, t]
    _check_every_path(idx, J, s, t, want, monkeypatch)


@pytest.mark.parametrize("kind,n,deg", [("paper", 3000, 4), ("scale-free", 2500, 3), ("layered", 3000, 3)])
def test_a_renumbered_larger_index_answers_random_pairs_as_bfs(kind, n, deg, tmp_path, monkeypatch):
    g = generate(kind, n, deg, seed=4)
    idx = distgrail.build_index(g, dims=4, backend="cpu", supports="auto", seed=1)
    J = _written(idx, tmp_path, seed=7, dead=40)
    assert _unsorted(J) and bidir_jit._layout(J.labels("cpu"))[1] is None
    rng = np.random.default_rng(3)
    s, t = rng.integers(0, g.n, 6000), rng.integers(0, g.n, 6000)
    want = bfs_reachable(*csr_of(g), s, t)
    _check_every_path(idx, J, s, t, want, monkeypatch)


def test_the_query_command_answers_a_renumbered_index_as_bfs(tmp_path):
    from distgrail.cli import main

    g = generate("paper", 800, 4, seed=6)
    idx = distgrail.build_index(g, dims=3, backend="cpu", supports="auto")
    Index(*permuted(idx.meta, idx.arrays, 5, 10)).save(tmp_path / "u.h5")
    rng = np.random.default_rng(8)
    pairs = np.stack([rng.integers(0, g.n, 5000), rng.integers(0, g.n, 5000)], 1).astype(np.int64)
    np.save(tmp_path / "p.npy", pairs)
    want = bfs_reachable(*csr_of(g), pairs[:, 0], pairs[:, 1])
    assert main(["query", str(tmp_path / "u.h5"), str(tmp_path / "p.npy"), "-o", str(tmp_path / "a.npy"),
                 "--backend", "cpu", "--quiet"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), want)
    assert main(["info", str(tmp_path / "u.h5"), "--quiet"]) == 0


def _chain_index():
    n = 30
    return _build(n, np.arange(n - 1), np.arange(1, n), supports=0, dims=2)


def test_unsorted_levels_without_the_attribute_are_refused(tmp_path):
    _, idx = _chain_index()
    Index(*permuted(idx.meta, idx.arrays, 3, attribute=False)).save(tmp_path / "u.h5")
    with pytest.raises(IndexFormatError, match="dataset /dag/level is not sorted up to n_levels - 1 = 29"):
        open_index(tmp_path / "u.h5")


def test_an_edge_not_going_up_the_levels_is_refused_with_the_attribute(tmp_path):
    _, idx = _chain_index()
    meta, a = permuted(idx.meta, idx.arrays, 3)
    comp = a["vertex/component"]
    level = a["dag/level"].copy()
    level[comp[5]] = level[comp[4]]  # (the edge 4 -> 5 now stays on one level)
    a["dag/level"] = level
    Index(meta, a).save(tmp_path / "u.h5")
    with pytest.raises(IndexFormatError, match="dataset /dag/indices holds an edge that does not go down the levels"):
        open_index(tmp_path / "u.h5")


@pytest.mark.parametrize("value,said", [(2, "attribute 'components_by_level' must be 0 or 1, got 2"),
                                        (0, "dataset /dag/level has no component at level n_levels - 1 = 30")])
def test_a_bad_attribute_or_no_top_level_is_refused(value, said, tmp_path):
    _, idx = _chain_index()
    meta, a = permuted(idx.meta, idx.arrays, 3)
    meta["components_by_level"] = value
    if value == 0:
        meta["n_levels"] = 31  # (no component has level 30)
    Index(meta, a).save(tmp_path / "u.h5")
    with pytest.raises(IndexFormatError, match=said):
        open_index(tmp_path / "u.h5")


def test_a_sorted_index_keeps_its_file_and_its_id_ordered_search(tmp_path):
    """An index built as always carries no attribute (its bytes as before) and takes the
    id-ordered search; the same index saved with ``components_by_level = 0`` opens and answers
    alike (its levels are still sorted: the id-ordered search too)."""
    import h5py

    g, idx = _build(*SMALL["random with cycles 1"])
    idx.save(tmp_path / "s.h5")
    with h5py.File(tmp_path / "s.h5", "r") as f:
        assert "components_by_level" not in f.attrs
    J = open_index(tmp_path / "s.h5")
    assert "components_by_level" not in J.meta and bidir_jit._layout(J.labels("cpu"))[1] is not None
    Index({**idx.meta, "components_by_level": 0}, idx.arrays).save(tmp_path / "z.h5")
    Z = open_index(tmp_path / "z.h5")
    s, t = _all_pairs(g.n)
    np.testing.assert_array_equal(Z.query(s, t, backend="cpu")[0], J.query(s, t, backend="cpu")[0])


# -- the GPU query path (run on a GPU machine; skipped here without CuPy) --------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_renumbered_index_answers_every_pair_as_bfs_on_the_gpu(name, tmp_path):
    n, src, dst = SMALL[name]
    for supports, dims in LABELS:
        _, idx = _build(n, src, dst, supports, dims)
        J = _written(idx, tmp_path, name=f"u{dims}.h5")
        s, t = _all_pairs(n)
        want = closure(n, src, dst)[s, t]
        for opts in (None, SearchOptions(visit_budget=-1), SearchOptions(visit_budget=0)):
            got, st = J.query(s, t, backend="gpu", search=opts)
            np.testing.assert_array_equal(got, want, err_msg=f"{name}, K={supports}, d={dims}, {opts}")
            _, st0 = idx.query(s, t, backend="gpu", search=opts)
            assert st.steps == st0.steps


@pytest.mark.gpu
@pytest.mark.parametrize("kind,n,deg", [("paper", 20000, 8), ("scale-free", 20000, 4)])
def test_a_renumbered_larger_index_answers_random_pairs_as_bfs_on_the_gpu(kind, n, deg, tmp_path):
    g = generate(kind, n, deg, seed=4)
    idx = distgrail.build_index(g, dims=5, backend="cpu", supports="auto", seed=1)
    J = _written(idx, tmp_path, seed=7, dead=100)
    rng = np.random.default_rng(3)
    s, t = rng.integers(0, g.n, 20000), rng.integers(0, g.n, 20000)
    want = bfs_reachable(*csr_of(g), s, t)
    for opts in (None, SearchOptions(visit_budget=-1)):
        got, _ = J.query(s, t, backend="gpu", search=opts)
        np.testing.assert_array_equal(got, want, err_msg=f"{kind}, {opts}")
