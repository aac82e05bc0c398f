"""The insertion sweep (distgrail/stages/insertion.py): an index updated by sweeping answers as
BFS over the graph plus the inserted edges, on every kind of graph (cycles, self-loops, repeated
edges, isolated vertices, one vertex, no edges, deep chains, dense DAGs, one giant SCC), through
several updates in a row, with every CPU search; it opens from a file (every check of the reader
passes); it answers as the relabelled index does; and the sweep's steps do what they say."""

from __future__ import annotations

import types

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.io.graph import EdgeGraph
from distgrail.query.stats import SearchOptions
from distgrail.update import insert_edges

SWEEP = 10 ** 9  # rebuild_above: always sweep


def _all_pairs(n):
    return np.repeat(np.arange(n), n), np.tile(np.arange(n), n)


def _bfs(n, S, T, qs, qt):
    ip, ix = csr_of(EdgeGraph(n, np.asarray(S, np.int64), np.asarray(T, np.int64)))
    return bfs_reachable(ip, ix, qs, qt)


def _zoo():
    """(name, n, src, dst): the graphs the guide names."""
    r = np.random.default_rng(0)
    chain = np.arange(199)
    dense_s, dense_t = np.triu_indices(40, 1)
    ring = np.arange(60)
    yield "empty", 5, np.zeros(0, int), np.zeros(0, int)
    yield "one vertex", 1, np.zeros(0, int), np.zeros(0, int)
    yield "self-loops and repeats", 30, np.r_[r.integers(0, 30, 40), np.arange(10), [3, 3, 3]], \
        np.r_[r.integers(0, 30, 40), np.arange(10), [4, 4, 4]]
    yield "isolated vertices", 80, r.integers(0, 20, 30), r.integers(0, 20, 30)
    yield "deep chain", 200, chain, chain + 1
    yield "dense DAG", 40, dense_s, dense_t
    yield "one giant SCC", 60, np.r_[ring, r.integers(0, 60, 30)], np.r_[(ring + 1) % 60, r.integers(0, 60, 30)]
    yield "random with cycles", 70, r.integers(0, 70, 150), r.integers(0, 70, 150)


@pytest.mark.parametrize("case", list(_zoo()), ids=lambda c: c[0])
@pytest.mark.parametrize("supports", [0, "auto", 70])
def test_sweeps_match_bfs_on_every_kind_of_graph(case, supports, tmp_path):
    name, n, src, dst = case
    idx = distgrail.build_index((src, dst), num_vertices=n, dims=2, supports=supports, backend="cpu")
    rng = np.random.default_rng(n)
    S, T = np.asarray(src), np.asarray(dst)
    for step, k in enumerate((3, 12, 40)):
        a, b = rng.integers(0, n, k), rng.integers(0, n, k)
        idx, rep = insert_edges(idx, a, b, backend="cpu", rebuild_above=SWEEP)
        assert rep.method in ("swept", "unchanged")
        S, T = np.r_[S, a], np.r_[T, b]
        if step == 1:  # through a file: every check of the reader holds for the swept arrays
            path = str(tmp_path / f"{step}.h5")
            idx.save(path)
            idx = distgrail.open_index(path)
        qs, qt = _all_pairs(n)
        want = _bfs(n, S, T, qs, qt)
        for how in ("forward", "bidirectional", "compiled"):
            got, _ = idx.query(qs, qt, backend="cpu", search=SearchOptions(cpu_search=how, compiled_min_pairs=0))
            assert np.array_equal(got, want), (name, step, how, int((got != want).sum()))


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_and_updates_match_bfs_and_the_relabelled_index(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 120))
    m = int(rng.integers(0, 3 * n))
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    if seed % 2:
        src, dst = src[src < dst], dst[src < dst]  # a DAG: the new edges close its first cycles
    idx = distgrail.build_index((src, dst), num_vertices=n, dims=1 + seed % 3, supports="auto", backend="cpu",
                                seed=seed)
    a, b = rng.integers(0, n, 25), rng.integers(0, n, 25)
    swept, r1 = insert_edges(idx, a, b, backend="cpu", rebuild_above=SWEEP)
    again, r2 = insert_edges(idx, a, b, backend="cpu", rebuild_above=0)
    assert r2.method == "relabelled" and r1.method == "swept" and r1.added == r2.added > 0
    assert r1.components_after == r2.components_after  # the same merges
    qs, qt = _all_pairs(n)
    want = _bfs(n, np.r_[src, a], np.r_[dst, b], qs, qt)
    assert np.array_equal(swept.query(qs, qt, backend="cpu")[0], want)
    assert np.array_equal(again.query(qs, qt, backend="cpu")[0], want)


def test_a_long_cycle_through_several_new_edges_is_merged():
    """Four chains joined into one ring by four new edges, none of which closes a cycle alone."""
    src = np.concatenate([np.arange(i * 10, i * 10 + 9) for i in range(4)])
    idx = distgrail.build_index((src, src + 1), num_vertices=45, dims=2, backend="cpu")
    a, b = np.array([9, 19, 29, 39]), np.array([10, 20, 30, 0])
    new, rep = insert_edges(idx, a, b, backend="cpu", rebuild_above=SWEEP)
    assert rep.sweep["merged_groups"] == 1 and rep.sweep["components_merged"] == 39
    assert new.C == rep.components_after == 6  # the ring and 5 isolated vertices
    comp = new.arrays["vertex/component"]
    assert len(set(comp[:40].tolist())) == 1
    qs, qt = _all_pairs(45)
    assert np.array_equal(new.query(qs, qt, backend="cpu")[0],
                          _bfs(45, np.r_[src, a], np.r_[src + 1, b], qs, qt))


def test_levels_are_raised_and_the_components_numbered_by_them_again():
    """0 -> 1 -> 2 and 3 -> 4: the edge 2 -> 3 raises 3 and 4 above 2; levels sorted by id."""
    idx = distgrail.build_index((np.array([0, 1, 3]), np.array([1, 2, 4])), num_vertices=5, dims=1, backend="cpu")
    new, rep = insert_edges(idx, [2], [3], backend="cpu", rebuild_above=SWEEP)
    assert rep.sweep["renumbered"] and rep.sweep["components_merged"] == 0
    level = new.arrays["dag/level"].astype(int)
    comp = new.arrays["vertex/component"]
    assert (np.diff(level) >= 0).all() and level[comp].tolist() == [0, 1, 2, 3, 4]
    assert new.meta["n_levels"] == 5 and new.reachable(0, 4) and not new.reachable(4, 0)


def test_an_edge_that_keeps_the_levels_sorted_renumbers_nothing():
    idx = distgrail.build_index((np.array([0, 2]), np.array([1, 3])), num_vertices=4, dims=1, backend="cpu")
    new, rep = insert_edges(idx, [0], [3], backend="cpu", rebuild_above=SWEEP)
    assert rep.method == "swept" and not rep.sweep["renumbered"]
    assert new.arrays["vertex/component"].tolist() == idx.arrays["vertex/component"].tolist()
    assert new.reachable(0, 3) and not new.reachable(2, 1)


def test_the_sweep_stops_where_nothing_changes():
    """A new edge into a long chain's head whose labels the tail already holds touches no row
    beyond the tail: the work follows what changes, not the graph."""
    n = 2000
    idx = distgrail.build_index((np.arange(n - 2), np.arange(1, n - 1)), num_vertices=n, dims=2, backend="cpu")
    new, rep = insert_edges(idx, [n - 1], [n - 2], backend="cpu", rebuild_above=SWEEP)  # a new source
    assert rep.sweep["up_rows"] <= 1 and rep.sweep["down_rows"] <= 1
    assert new.reachable(n - 1, n - 2) and not new.reachable(n - 1, 0)


def test_rebuild_above_chooses_the_relabelling_and_says_so():
    idx = distgrail.build_index((np.array([0]), np.array([1])), num_vertices=4, dims=1, backend="cpu")
    new, rep = insert_edges(idx, [1, 2], [2, 3], backend="cpu", rebuild_above=1)
    assert rep.method == "relabelled" and "more new DAG edges than --rebuild-above" in rep.summary()
    assert new.reachable(0, 3)


def test_every_push_has_its_cuda_twin():
    """The GPU's pushes (kernels/insertion.cu) are named by the ufunc they stand for; each exists
    with the operand types the launcher passes (int64 levels and intervals, uint64 masks)."""
    import re

    from distgrail.gpu.kernels import kernel_source
    from distgrail.stages.insertion import PUSH_KERNELS

    src = kernel_source("insertion")
    assert set(PUSH_KERNELS) == {"maximum", "minimum", "bitwise_or"}
    for op, name in PUSH_KERNELS.items():
        t = "u64" if op == "bitwise_or" else "i64"
        assert re.search(rf'extern "C" __global__ void {name}\({t}\* a, const i64\* to, const {t}\* val, i64 n\)',
                         src), name


def test_the_numpy_pushes_keep_the_best_of_repeated_targets():
    from distgrail.stages.insertion import _scatter

    a = np.array([5, 5, 5], np.int64)
    _scatter(np, "maximum", a, np.array([0, 0, 2, 2]), np.array([7, 9, 1, 3]))
    _scatter(np, "minimum", a, np.array([1, 1]), np.array([4, 2]))
    assert a.tolist() == [9, 2, 5]
    m = np.zeros(2, np.uint64)
    _scatter(np, "bitwise_or", m, np.array([1, 1, 1]), np.array([1, 4, 1 << 63], np.uint64))
    assert m.tolist() == [0, 5 + (1 << 63)]


def test_consume_lands_the_arrays_in_the_inputs_memory_and_answers_the_same(tmp_path):
    """``consume=True`` (what ``distgrail update`` passes): the swept arrays come back into the
    input index's own arrays where they fit, with the same values as without it."""
    from distgrail.io.generate import generate

    g = generate("scale-free", 400, 2, seed=9)
    path = str(tmp_path / "b.h5")
    distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=2, supports="auto", backend="cpu").save(path)
    rng = np.random.default_rng(4)
    a, b = rng.integers(0, g.n, 60), rng.integers(0, g.n, 60)
    want, r1 = insert_edges(distgrail.open_index(path), a, b, backend="cpu", rebuild_above=SWEEP)
    spent = distgrail.open_index(path)
    mem = {k: v.ctypes.data for k, v in spent.arrays.items()}
    got, r2 = insert_edges(spent, a, b, backend="cpu", rebuild_above=SWEEP, consume=True)
    assert r1.sweep == r2.sweep and r1.method == "swept"
    for k, v in want.arrays.items():
        assert got.arrays[k].dtype == v.dtype and np.array_equal(got.arrays[k], v), k
    assert got.arrays["labels/intervals"].ctypes.data == mem["labels/intervals"]  # landed in place
    qs, qt = _all_pairs(g.n)
    assert np.array_equal(got.query(qs, qt, backend="cpu")[0], _bfs(g.n, np.r_[g.src, a], np.r_[g.dst, b], qs, qt))


def test_repeated_dag_entries_after_a_merge_stay_exact():
    """0 -> 1..300; the insertions close 1..300 into one cycle, so 0's row holds its
    representative 300 times (rows not rewritten keep one entry per merged member); a second
    update closes 0 into it too, through those 300 repeats (more than an int8 count holds)."""
    n = 302
    src, dst = np.zeros(300, np.int64), np.arange(1, 301)
    idx = distgrail.build_index((src, dst), num_vertices=n, dims=2, backend="cpu")
    ring_a, ring_b = np.arange(1, 301), np.r_[np.arange(2, 301), 1]
    one, r1 = insert_edges(idx, ring_a, ring_b, backend="cpu", rebuild_above=SWEEP)
    assert r1.sweep["components_merged"] == 299 and one.arrays["dag/indices"].size == 300
    two, r2 = insert_edges(one, [150], [0], backend="cpu", rebuild_above=SWEEP)
    assert r2.sweep["merged_groups"] == 1 and two.C == 2  # {0..300} and the isolated 301
    qs, qt = _all_pairs(n)
    S, T = np.r_[src, ring_a, 150], np.r_[dst, ring_b, 0]
    assert np.array_equal(two.query(qs, qt, backend="cpu")[0], _bfs(n, S, T, qs, qt))


def test_the_log_records_the_filters_decided_share_before_and_after():
    """A swept update measures, on 100,000 random pairs, the share the filters decide before and
    after: equal to what the prefilter of each index decides on those pairs."""
    from distgrail.io.generate import generate
    from distgrail.query.prefilter import prefilter
    from distgrail.update import LOG, SAMPLE_PAIRS, SAMPLE_SEED

    g = generate("scale-free", 3000, 3, seed=1)
    idx = distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=2, supports="auto", backend="cpu")
    rng = np.random.default_rng(2)
    new, rep = insert_edges(idx, rng.integers(0, g.n, 300), rng.integers(0, g.n, 300), backend="cpu",
                            rebuild_above=SWEEP)
    sample = np.random.default_rng(SAMPLE_SEED)
    u, v = sample.integers(0, g.n, SAMPLE_PAIRS), sample.integers(0, g.n, SAMPLE_PAIRS)

    def ppm(index):
        L = index.labels("cpu")
        _, code = prefilter(L, L.comp[u].astype(np.int64), L.comp[v].astype(np.int64))
        return int(np.count_nonzero(code)) * 1_000_000 // SAMPLE_PAIRS

    assert new.arrays[LOG][0, 7:].tolist() == [ppm(idx), ppm(new)] == list(rep.sweep["decided_ppm"])
    assert ppm(idx) > ppm(new) > 0  # wider labels decide fewer pairs


class _FakeCupy:
    """NumPy under another name, with what the push launcher asks of CuPy: the launcher's GPU
    branch runs on the CPU, its kernels replaced by fakes doing what kernels/insertion.cu does."""

    class cuda:
        class Device:
            id = 0

        @staticmethod
        def get_current_stream():
            return types.SimpleNamespace(synchronize=lambda: None)

    def __getattr__(self, name):
        return getattr(np, name)


def test_the_push_launcher_plans_its_grid_and_computes_as_the_numpy_sweep(monkeypatch):
    """Every push the GPU branch launches: 256 threads a block, at most 2^16 blocks, int64 targets,
    int64 values (uint64 for the masks) on a contiguous row; with the fake kernels doing the
    kernels' arithmetic, the whole sweep gives the NumPy sweep's arrays."""
    import distgrail.gpu.kernels as kernels
    from distgrail.io.generate import generate
    from distgrail.stages import insertion

    launches = []
    ops = {"dg_push_max": np.maximum, "dg_push_min": np.minimum, "dg_push_or": np.bitwise_or}

    def get_function(name):
        def launch(grid, block, args):
            a, to, val, n = args
            launches.append((name, grid, block, a.dtype, to.dtype, val.dtype, int(n)))
            assert a.flags.c_contiguous and to.size == val.size == int(n)
            ops[name].at(a, to, val)
        return launch

    monkeypatch.setattr(kernels, "load_module", lambda name, dev: types.SimpleNamespace(get_function=get_function))
    g = generate("scale-free", 2000, 3, seed=4)
    idx = distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=2, supports="auto", backend="cpu")
    rng = np.random.default_rng(8)
    ea, eb = rng.integers(0, g.n, 400), rng.integers(0, g.n, 400)
    comp = idx.arrays["vertex/component"].astype(np.int64)
    key = np.unique(comp[ea] * idx.C + comp[eb])
    key = key[key // idx.C != key % idx.C]
    pa, pb = key // idx.C, key % idx.C

    def arrays():
        a = idx.arrays
        iv = a["labels/intervals"]
        return {"comp": a["vertex/component"], "indptr": a["dag/indptr"].astype(np.int64), "indices": a["dag/indices"],
                "level": a["dag/level"].astype(np.int64), "post0": a["labels/dt_post0"],
                "size": a["forest/subtree_size"], "parent": a["forest/parent"], "lo": iv[:, :, 0].astype(np.int64),
                "hi": iv[:, :, 1].astype(np.int64), "out": a["supports/out"].T.copy(), "inn": a["supports/in"].T.copy(),
                "ids": a["supports/ids"]}

    want, info_np = insertion.sweep_insertions(np, arrays(), pa, pb)
    got, info_gpu = insertion.sweep_insertions(_FakeCupy(), arrays(), pa, pb)
    assert launches and {name for name, *_ in launches} == {"dg_push_max", "dg_push_min", "dg_push_or"}
    for name, grid, block, a, to, val, n in launches:
        assert block == (insertion.PUSH_THREADS,) and grid == (min(insertion.PUSH_BLOCKS, -(-n // 256)),)
        assert to == np.int64 and a == val == (np.uint64 if name == "dg_push_or" else np.int64)
    for k, v in want.items():
        assert np.array_equal(got[k], v) and got[k].dtype == v.dtype, k
    info_np.pop("seconds"), info_gpu.pop("seconds")
    assert info_np == info_gpu


def test_the_sweep_names_the_arrays_it_lacks():
    from distgrail.errors import DistGrailError
    from distgrail.stages.insertion import sweep_insertions

    with pytest.raises(DistGrailError, match="the arrays lack indices, level"):
        sweep_insertions(np, {"comp": np.zeros(1, np.int64), "indptr": np.zeros(2, np.int64)},
                         np.zeros(0, np.int64), np.zeros(0, np.int64))


@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_renumbering_gives_the_numpy_arrays(seed, monkeypatch):
    """The CPU renumbering's compiled gather of the intervals (``insertion_jit``, from
    ``COMPILED_GATHER_COMPONENTS`` components) gives the NumPy passes' arrays, byte for byte, with
    merges (ranks compacted) and without; the index answers as BFS does."""
    pytest.importorskip("numba")
    from distgrail.stages import insertion

    rng = np.random.default_rng(seed)
    n = 300
    src, dst = rng.integers(0, n, 700), rng.integers(0, n, 700)
    if seed % 2:  # a chain and edges down it: a DAG, whose new edges back up the chain close cycles
        src, dst = np.r_[np.arange(n - 1), src[src < dst]], np.r_[np.arange(1, n), dst[src < dst]]
    idx = distgrail.build_index((src, dst), num_vertices=n, dims=3, supports="auto", backend="cpu", seed=seed)
    a, b = rng.integers(0, n, 40), rng.integers(0, n, 40)
    seen = []
    real = insertion._renumber
    monkeypatch.setattr(insertion, "_renumber", lambda *args: seen.append(args[3].size) or real(*args))
    got = {}
    for at in (10 ** 9, 0):
        monkeypatch.setattr(insertion, "COMPILED_GATHER_COMPONENTS", at)
        got[at], report = insert_edges(idx, a, b, backend="cpu", rebuild_above=SWEEP)
        assert report.method == "swept"
    assert insertion._compiled_gather(np, idx.C) is not None
    for name, arr in got[10 ** 9].arrays.items():
        other = got[0].arrays[name]
        assert arr.dtype == other.dtype and np.array_equal(arr, other), name
    qs, qt = _all_pairs(n)
    assert np.array_equal(got[0].query(qs, qt, backend="cpu")[0], _bfs(n, np.r_[src, a], np.r_[dst, b], qs, qt))
    assert seen and all(k == seen[0] for k in seen)
    if seed % 2:
        assert seen[0] > 0, "the new edges of a DAG close cycles: merged components dropped, ranks compacted"


def test_rows_gathered_maps_and_gathers_every_row():
    jit = pytest.importorskip("distgrail.stages.insertion_jit")
    rng = np.random.default_rng(1)
    v = rng.integers(0, 50, (4, 30)).astype(np.int64)
    order = rng.permutation(30)[:25]
    f = rng.integers(0, 1000, 50).astype(np.int64)
    for threads in (1, 3):
        np.testing.assert_array_equal(jit.rows_gathered(v, order, f, threads), f[v[:, order]])
        np.testing.assert_array_equal(jit.rows_gathered(v, order, None, threads), v[:, order])
    assert jit.rows_gathered(v[:0], order, f, 2).shape == (0, 25)
    assert jit.rows_gathered(v, order[:0], f, 2).shape == (4, 0)
