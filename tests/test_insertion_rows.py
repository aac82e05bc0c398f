"""Edge insertions with the component ids kept (distgrail/stages/insertion_rows.py, the compiled
walks over an index's own arrays; distgrail/update_rows.py, the rows a change-only file stores):
the same values as the array sweep with ``renumber=False`` (distgrail/stages/insertion.py) array
for array, the changed rows it names covering every row that differs, the same update as
``insert_edges(keep_ids=True)`` through several updates in a row, and answers equal to BFS over
the graph plus every inserted edge on every kind of graph the guide names."""

from __future__ import annotations

import numpy as np
import pytest

import distgrail
from distgrail.index import Index
from distgrail.query.stats import SearchOptions
from distgrail.stages import insertion
from distgrail.stages.insertion_rows import LevelOverflow, sweep_rows
from distgrail.update import insert_edges
from distgrail.update_rows import apply_rows, insert_rows

from test_insertion import _all_pairs, _bfs, _zoo

pytest.importorskip("numba")


def _graphs():
    yield from _zoo()
    r = np.random.default_rng(5)
    for s in range(12):
        n = int(r.integers(2, 250))
        m = int(r.integers(0, 4 * n))
        src, dst = r.integers(0, n, m), r.integers(0, n, m)
        if s % 2:  # a DAG: the new edges close its first cycles
            src, dst = src[src < dst], dst[src < dst]
        yield f"random {s}", n, src, dst


def _sweep_arrays(idx):
    """The array sweep's arrays (int64 levels and intervals, (W, C) masks)."""
    a = idx.arrays
    iv = a["labels/intervals"]
    K = idx.supports
    return {"comp": a["vertex/component"], "indptr": a["dag/indptr"].astype(np.int64), "indices": a["dag/indices"],
            "level": a["dag/level"].astype(np.int64), "post0": a["labels/dt_post0"],
            "size": a["forest/subtree_size"], "parent": a["forest/parent"], "lo": iv[:, :, 0].astype(np.int64),
            "hi": iv[:, :, 1].astype(np.int64),
            "out": a["supports/out"].T.copy() if K else np.zeros((0, idx.C), np.uint64),
            "inn": a["supports/in"].T.copy() if K else np.zeros((0, idx.C), np.uint64),
            "ids": a["supports/ids"] if K else np.zeros(0, np.int64)}


def _stored(idx):
    """The compiled walks' arrays: copies in the stored types and layout (intervals as views)."""
    a = idx.arrays
    iv = np.array(a["labels/intervals"])
    K = idx.supports
    return {"comp": np.array(a["vertex/component"]), "indptr": a["dag/indptr"].astype(np.int64),
            "indices": np.array(a["dag/indices"]), "level": np.array(a["dag/level"]),
            "size": np.array(a["forest/subtree_size"]), "lo": iv[:, :, 0], "hi": iv[:, :, 1],
            "out": np.array(a["supports/out"]) if K else np.zeros((idx.C, 0), np.uint64),
            "inn": np.array(a["supports/in"]) if K else np.zeros((idx.C, 0), np.uint64),
            "ids": np.array(a["supports/ids"]) if K else np.zeros(0, np.int64)}


@pytest.mark.parametrize("case", list(_graphs()), ids=lambda c: c[0])
@pytest.mark.parametrize("supports", [0, "auto"])
def test_compiled_walks_give_the_array_sweeps_values_and_rows(case, supports):
    name, n, src, dst = case
    idx = distgrail.build_index((src, dst), num_vertices=n, dims=3, supports=supports, backend="cpu")
    C = idx.C
    if C < 2:
        pytest.skip("one component: no component edge to insert")
    rng = np.random.default_rng(n + 7)
    compared = 0
    for k in (1, 5, 30, 200):  # (pairs the index may already answer, and reversed ones: cycles)
        key = np.unique(rng.integers(0, C, k) * C + rng.integers(0, C, k))
        key = key[key // C != key % C]
        if not key.size:
            continue
        pa, pb = key // C, key % C
        want, info = insertion.sweep_insertions(np, _sweep_arrays(idx), pa.copy(), pb.copy(), renumber=False)
        got_arrays = _stored(idx)
        got = sweep_rows(got_arrays, pa, pb)
        assert np.array_equal(got_arrays["level"].astype(np.int64), want["level"]), (name, k)
        assert np.array_equal(got_arrays["lo"].astype(np.int64), want["lo"]), (name, k)
        assert np.array_equal(got_arrays["hi"].astype(np.int64), want["hi"]), (name, k)
        assert np.array_equal(got_arrays["out"], want["out"].T) and np.array_equal(got_arrays["inn"], want["inn"].T)
        ip, ix, nip, nix = got_arrays["indptr"], got_arrays["indices"], want["indptr"], want["indices"]
        written = got.dag_rows
        for c in range(C):  # every DAG row: as written again, or as stored
            r = np.searchsorted(written, c)
            if r < written.size and written[r] == c:
                mine = got.dag_idx[got.dag_ptr[r]:got.dag_ptr[r + 1]]
            else:
                mine = ix[ip[c]:ip[c + 1]]
            assert np.array_equal(mine, nix[nip[c]:nip[c + 1]]), (name, k, c)
        comp = got_arrays["comp"].copy()
        comp[got.comp_rows] = got.comp_values
        assert np.array_equal(comp, want["comp"]) and np.array_equal(np.asarray(got.ids), want["ids"]), (name, k)
        changed = info["changed"]
        for f in ("level", "lo", "out"):
            assert np.array_equal(got.rows[f], changed[f]), (name, k, f)
        assert np.array_equal(written, changed["dag"]) and np.array_equal(got.comp_rows, changed["comp"])
        assert got.info["components_merged"] == info["components_merged"]
        compared += 1
    assert compared


def _rows_differing(old, new, axis):
    o, w = np.moveaxis(np.asarray(old), axis, 0), np.moveaxis(np.asarray(new), axis, 0)
    return np.flatnonzero((o != w).reshape(o.shape[0], -1).any(axis=1))


@pytest.mark.parametrize("case", list(_graphs()), ids=lambda c: c[0])
@pytest.mark.parametrize("supports", [0, "auto"])
@pytest.mark.parametrize("sweep", ["walks", "arrays"])
def test_row_updates_match_bfs_and_the_kept_ids_update_in_a_row(case, supports, sweep):
    name, n, src, dst = case
    base = distgrail.build_index((src, dst), num_vertices=n, dims=2, supports=supports, backend="cpu")
    whole, rows_idx = base, Index(base.meta, {k: np.array(v) for k, v in base.arrays.items()})
    rng = np.random.default_rng(n + 3)
    S, T = np.asarray(src), np.asarray(dst)
    for k in (3, 12, 40):
        a, b = rng.integers(0, n, k), rng.integers(0, n, k)
        S, T = np.r_[S, a], np.r_[T, b]
        want, rep_w = insert_edges(whole, a, b, backend="cpu", rebuild_above=10 ** 9, keep_ids=True)
        before = {key: np.array(v) for key, v in rows_idx.arrays.items()}
        up, rep = insert_rows(rows_idx, a, b, rebuild_above=10 ** 9, sweep=sweep)
        assert rep.method == rep_w.method, (name, k)
        if rep.method == "unchanged":  # nothing reaches further: the labels stay, only the edges' record
            assert not up.rows and up.dag is None and rep.added == 0 == rep_w.added, (name, k)
            assert np.array_equal(up.whole["updates/edges"], want.arrays["updates/edges"])
            whole, rows_idx = want, Index(up.meta, apply_rows(before, up))
            continue
        assert rep.method == "swept"
        assert (rep.given, rep.same_component, rep.already_reachable, rep.added, rep.components_before,
                rep.components_after) == (rep_w.given, rep_w.same_component, rep_w.already_reachable, rep_w.added,
                                          rep_w.components_before, rep_w.components_after)
        arrays = apply_rows(before, up)
        for key, v in want.arrays.items():  # (the levels keep their stored type here)
            assert np.array_equal(np.asarray(arrays[key]), np.asarray(v)), (name, k, key)
            assert key == "dag/level" or np.asarray(arrays[key]).dtype == np.asarray(v).dtype, (name, key)
        for key, (r, _) in up.rows.items():  # every row that differs is named
            diff = _rows_differing(before[key], arrays[key], 1 if key == "labels/intervals" else 0)
            assert np.isin(diff, r).all(), (name, key)
        for key in ("n_components", "n_dag_edges", "n_levels", "components_by_level"):
            assert up.meta[key] == want.meta[key], (name, key)
        whole, rows_idx = want, Index(up.meta, arrays)
        qs, qt = _all_pairs(n)
        got, _ = rows_idx.query(qs, qt, backend="cpu",
                                search=SearchOptions(cpu_search="bidirectional", compiled_min_pairs=0))
        assert np.array_equal(got, _bfs(n, S, T, qs, qt)), (name, k)


@pytest.mark.parametrize("sweep", ["walks", "arrays"])
def test_a_second_update_names_the_union_of_both_updates_rows(sweep):
    g = np.random.default_rng(2)
    n = 300
    idx = distgrail.build_index((g.integers(0, n, 600), g.integers(0, n, 600)), num_vertices=n, dims=2,
                                supports="auto", backend="cpu")
    base = {k: np.array(v) for k, v in idx.arrays.items()}
    up1, _ = insert_rows(Index(idx.meta, {k: np.array(v) for k, v in base.items()}), g.integers(0, n, 20),
                         g.integers(0, n, 20), rebuild_above=10 ** 9, sweep=sweep)
    mid = apply_rows(base, up1)
    previous = {k: r for k, (r, _) in up1.rows.items()}
    previous["dag"] = up1.dag[0]
    up2, _ = insert_rows(Index(up1.meta, {k: np.array(v) for k, v in mid.items()}), g.integers(0, n, 20),
                         g.integers(0, n, 20), rebuild_above=10 ** 9, previous=previous, sweep=sweep)
    for k, (r, _) in up1.rows.items():
        assert np.isin(r, up2.rows[k][0]).all(), k
    assert np.isin(up1.dag[0], up2.dag[0]).all()
    # over the base, the second update's rows alone give what both updates give in turn
    want = apply_rows(mid, up2)
    got = apply_rows(base, up2)
    for k in want:
        assert np.array_equal(np.asarray(got[k]), np.asarray(want[k])), k


def test_a_level_past_its_stored_type_is_refused_for_the_whole_array_path():
    idx = distgrail.build_index((np.zeros(0, int), np.zeros(0, int)), num_vertices=2, dims=1, backend="cpu")
    a = _stored(idx)
    assert idx.C == 2
    a["level"] = np.array([255, 0], np.uint8)  # (as a file stores it, after long chains of earlier updates)
    with pytest.raises(LevelOverflow, match="passes 255"):
        sweep_rows(a, np.array([0]), np.array([1]))  # level 255 + 1 does not fit
    a = _stored(idx)
    a["level"] = np.array([254, 0], np.uint8)
    sweep_rows(a, np.array([0]), np.array([1]))
    assert a["level"].tolist() == [254, 255]


@pytest.mark.parametrize("threads", [1, 3, 4])
def test_rounds_over_threads_give_the_one_thread_sweeps_values(threads, monkeypatch):
    from distgrail import cores
    from distgrail.stages import insertion_rows

    cases = [c for c in _graphs() if c[0] in ("dense DAG", "one giant SCC", "random with cycles", "random 3", "random 4")]
    assert len(cases) == 5
    for name, n, src, dst in cases:
        idx = distgrail.build_index((src, dst), num_vertices=n, dims=3, supports="auto", backend="cpu")
        C = idx.C
        if C < 2:
            continue
        rng = np.random.default_rng(C)
        key = np.unique(rng.integers(0, C, 60) * C + rng.integers(0, C, 60))
        key = key[key // C != key % C]
        results = []
        for front in (1 << 30, 1):  # one thread only, then every round over the threads
            monkeypatch.setattr(insertion_rows, "PARALLEL_FRONT", front)
            monkeypatch.setattr(cores, "usable", lambda: threads)
            arrays = _stored(idx)
            got = sweep_rows(arrays, key // C, key % C)
            results.append((arrays, got))
        (a1, g1), (a2, g2) = results
        for k in ("level", "lo", "hi", "out", "inn"):
            assert np.array_equal(a1[k], a2[k]), (name, k)
        for k in g1.rows:
            assert np.array_equal(g1.rows[k], g2.rows[k]), (name, k)
        assert np.array_equal(g1.comp_rows, g2.comp_rows) and np.array_equal(g1.dag_idx, g2.dag_idx)


@pytest.mark.parametrize("C,m", [(1, 0), (10, 30), (1000, 5000), (5000, 200000)])
def test_the_reverse_csr_over_threads_is_scipys(C, m, monkeypatch):
    from scipy.sparse import csr_matrix

    from distgrail import cores
    from distgrail.stages import insertion_rows

    rng = np.random.default_rng(C)
    g = csr_matrix((np.ones(m, np.int8), (rng.integers(0, C, m), rng.integers(0, C, m))), shape=(C, C))
    g.sum_duplicates()
    g.sort_indices()
    ip, ix = g.indptr.astype(np.int64), g.indices.astype(np.uint32)
    monkeypatch.setattr(cores, "usable", lambda: 3)
    monkeypatch.setattr(insertion_rows, "PARALLEL_REVERSE_EDGES", 1 << 60)
    want = insertion_rows.reverse_of(ip, ix, C)
    monkeypatch.setattr(insertion_rows, "PARALLEL_REVERSE_EDGES", 0)
    got = insertion_rows.reverse_of(ip, ix, C)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and got[1].dtype == np.uint32
    assert int(want[0][-1]) == g.nnz
