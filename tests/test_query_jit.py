"""The compiled CPU search (numba) against the NumPy bidirectional search and plain BFS: the same
answers and the same round counts (per query and per batch), the ``SearchOptions.cpu_search`` wiring, the NumPy
fallback without numba, and that ``import distgrail`` does not import numba."""

import dataclasses
import doctest
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.query import answer
from distgrail.query.bidir import bidirectional_search_numpy
from distgrail.query.prefilter import prefilter
from distgrail.errors import QueryError
from distgrail.query.stats import UNDECIDED, QueryStats, SearchOptions
from test_query_grid import deep_graph
from test_query_steps import GRAPHS, indexed, pairs

bidir_jit = pytest.importorskip("distgrail.query.bidir_jit")


def giant_scc(n=600, seed=5):
    """One cycle through n vertices with random chords (one SCC), and a DAG tail on each side."""
    rng = np.random.default_rng(seed)
    ring = np.arange(n)
    src = [ring, rng.integers(0, n, 300), np.arange(n, n + 100), rng.integers(0, n, 60)]
    dst = [np.roll(ring, -1), rng.integers(0, n, 300), rng.integers(0, n, 100), rng.integers(n + 100, n + 200, 60)]
    return distgrail.as_graph((np.concatenate(src), np.concatenate(dst)), num_vertices=n + 200)


def no_edges(n):
    return distgrail.as_graph((np.zeros(0, np.int64), np.zeros(0, np.int64)), num_vertices=n)


EXTRA = {"giant-scc": giant_scc(), "deep": deep_graph(), "one-vertex": no_edges(1), "empty": no_edges(0)}
ALL = {**GRAPHS, **EXTRA}
_INDEX = {}


def labels(name, K):
    if (name, K) not in _INDEX:
        _INDEX[name, K] = indexed(ALL[name], K)
    return _INDEX[name, K]


def undecided(name, K, k=1500, seed=0):
    g = ALL[name]
    idx = labels(name, K)
    L = idx.labels("cpu")
    if g.m == 0:  # no reachable pairs to draw: random ones (none at all for the empty graph)
        s, t = np.random.default_rng(seed).integers(0, max(g.n, 1), (2, k if g.n else 0))
    else:
        s, t = pairs(g, k, seed=K + seed)
    cu, cv = L.comp[s], L.comp[t]
    _, code = prefilter(L, cu, cv)
    und = np.flatnonzero(code == UNDECIDED)
    return idx, L, s, t, und


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("K", [0, 1, 64, 200])
def test_compiled_equals_numpy_and_bfs(name, K):
    idx, L, s, t, und = undecided(name, K)
    cu, cv = L.comp[s[und]], L.comp[t[und]]
    ref, ref_rounds = bidirectional_search_numpy(L, cu, cv)
    found, rounds = bidir_jit.query_rounds(L, cu, cv, threads=2)
    np.testing.assert_array_equal(found, ref)
    assert int(rounds.max(initial=0)) == ref_rounds
    np.testing.assert_array_equal(found, bfs_reachable(*csr_of(ALL[name]), s[und], t[und]))
    if name in ("paper-dense", "layered", "deep", "scale-free", "cycles") and K <= 1:
        assert und.size > 20  # the search really ran here
    f2, r2 = bidir_jit.compiled_search(L, cu, cv)
    np.testing.assert_array_equal(f2, ref)
    assert r2 == ref_rounds


@pytest.mark.parametrize("name,K", [("paper-dense", 0), ("layered", 1), ("cycles", 64), ("deep", 0)])
def test_rounds_per_query(name, K):
    """Each query's own round count is what the NumPy search reports for that query alone."""
    _, L, s, t, und = undecided(name, K, seed=7)
    cu, cv = L.comp[s[und]], L.comp[t[und]]
    found, rounds = bidir_jit.query_rounds(L, cu, cv, threads=1)
    pick = np.random.default_rng(1).choice(und.size, min(60, und.size), replace=False)
    for i in pick:
        f, r = bidirectional_search_numpy(L, cu[i:i + 1], cv[i:i + 1])
        assert (bool(f[0]), r) == (bool(found[i]), int(rounds[i]))
    assert len(set(rounds.tolist())) > 1  # the rounds really differ between queries


def test_threads_blocks_and_calls_do_not_change_answers(monkeypatch):
    """Any thread count, block size and stamp clearing interval gives the same."""
    _, L, s, t, und = undecided("paper-dense", 0, k=3000, seed=3)
    cu, cv = L.comp[s[und]], L.comp[t[und]]
    found, rounds = bidir_jit.query_rounds(L, cu, cv, threads=1)
    monkeypatch.setattr(bidir_jit, "BLOCK_QUERIES", 7)
    for threads in (2, 3, 8):
        f, r = bidir_jit.query_rounds(L, cu, cv, threads=threads)
        np.testing.assert_array_equal(f, found)
        np.testing.assert_array_equal(r, rounds)
    assert cu.size > 2 * bidir_jit._EPOCHS  # the stamps were cleared and reused


def test_layout_and_fallbacks(monkeypatch):
    _, L, s, t, und = undecided("scale-free", 64)
    rec, level_ptr = bidir_jit._layout(L)
    assert bidir_jit._layout(L)[0] is rec and rec.ctypes.data % 64 == 0 and rec.shape[1] % 16 == 0
    np.testing.assert_array_equal(level_ptr[L.level], np.searchsorted(L.level, L.level))  # first id of each level
    np.testing.assert_array_equal(rec[:, 2:2 + 2 * L.d:2], L.lo.T)
    np.testing.assert_array_equal(rec[:, 2 + 2 * L.d:2 + 2 * L.d + 2 * L.W].view(np.uint64), L.out.T)
    cu, cv = L.comp[s[und]], L.comp[t[und]]
    want = bidirectional_search_numpy(L, cu, cv)
    monkeypatch.setattr(bidir_jit, "_MAX_C", L.C)  # too many components for the compiled search
    monkeypatch.setattr(bidir_jit, "query_rounds", None)
    f, r = bidir_jit.compiled_search(L, cu, cv)
    np.testing.assert_array_equal(f, want[0])
    assert r == want[1]
    shuffled = dataclasses.replace(L, level=L.level[::-1].copy())  # its own packed records, not L's
    assert bidir_jit._layout(shuffled)[1] is None  # (not numbered by level: the search reads the levels)


def test_answer_batch_uses_compiled_by_default(monkeypatch):
    assert SearchOptions().cpu_method(answer.have_numba()) == "compiled"
    calls = []
    real = bidir_jit.compiled_search

    def spy(L, cu, cv):
        calls.append(cu.size)
        return real(L, cu, cv)

    monkeypatch.setattr(bidir_jit, "compiled_search", spy)
    every = SearchOptions(compiled_min_pairs=0)
    for name, K in (("paper-dense", 0), ("scale-free", 64), ("giant-scc", 1)):
        idx = labels(name, K)
        s, t = pairs(ALL[name], 2000, seed=4)
        st = QueryStats()
        a = answer.answer_batch_numpy(idx.labels("cpu"), s, t, st, search=every)
        st2 = QueryStats()
        b = answer.answer_batch_numpy(idx.labels("cpu"), s, t, st2, search=SearchOptions(cpu_search="bidirectional"))
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, bfs_reachable(*csr_of(ALL[name]), s, t))
        assert st.steps == st2.steps and st.search_rounds == st2.search_rounds and st.reachable == st2.reachable
    assert len(calls) == 3 and calls[0] > 100
    few = calls[:]
    # fresh labels (no masks: most of 60 pairs are left to the search), the compiled search not run on them
    L = dataclasses.replace(labels("paper-dense", 0).labels("cpu"))
    s, t = pairs(ALL["paper-dense"], 60, seed=4)
    with monkeypatch.context() as m:  # (the NumPy prefilter, whether or not the compiled one is loaded by now:
        m.setattr(answer, "_cpu_prefilter", lambda k, search: None)  # after it, any pairs left take the compiled search)
        answer.answer_batch_numpy(L, s, t)  # fewer than 64 undecided: the NumPy search
    assert calls == few and not L.searched.built
    answer.answer_batch_numpy(L, s, t, search=every)  # asked for: the compiled search runs on L
    assert len(calls) == len(few) + 1 and 0 < calls[-1] < 64, calls
    answer.answer_batch_numpy(L, s, t)  # it has run on L: the compiled search, however few
    assert len(calls) == len(few) + 2
    with monkeypatch.context() as m:
        m.setattr(answer, "_cpu_prefilter", lambda k, search: None)
        answer.answer_batch_numpy(dataclasses.replace(L), s, t)  # other labels (their types may need a compile)
    assert len(calls) == len(few) + 2
    with pytest.raises(QueryError, match="cpu_search"):
        SearchOptions(cpu_search="bogus")
    for bad in ({"visit_budget": -2}, {"visit_budget": 1.5}, {"compiled_min_pairs": -1}, {"visit_budget": True}):
        with pytest.raises(QueryError, match=next(iter(bad))):
            SearchOptions(**bad)
    with pytest.raises(QueryError, match="SearchOptions"):
        idx.query(s, t, backend="cpu", search={"cpu_search": "forward"})


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("K", [0, 1, 64, 200])
def test_compiled_prefilter_equals_numpy(name, K, monkeypatch):
    """The compiled prefilter (component lookup fused in) gives the NumPy twin's answers, codes
    and component ids for every pair, int64 or int32 ids, one thread or several on small blocks;
    every step of the twin is met on some graph."""
    prefilter_jit = pytest.importorskip("distgrail.query.prefilter_jit")
    g = ALL[name]
    L = labels(name, K).labels("cpu")
    if g.n == 0:
        s = t = np.zeros(0, np.int64)
    else:
        s, t = pairs(g, 1500, seed=K + 3) if g.m else np.random.default_rng(K).integers(0, g.n, (2, 500))
    cu, cv = L.comp[s], L.comp[t]
    want_ans, want_code = prefilter(L, cu, cv)
    monkeypatch.setattr(prefilter_jit, "BLOCK_PAIRS", 97)
    rows = np.stack([s, t], axis=1)  # strided columns, as a mapped (k, 2) file's
    for ids, threads in ((np.int64, 1), (np.int32, 3), (np.int64, 8), ("rows", 2)):
        qs, qt = (rows[:, 0], rows[:, 1]) if ids == "rows" else (s.astype(ids), t.astype(ids))
        counts = np.full(9, 5, dtype=np.int64)  # (added into)
        ans, code, gu, gv = prefilter_jit.compiled_prefilter(L, qs, qt, threads=threads, counts=counts)
        np.testing.assert_array_equal(counts - 5, np.bincount(want_code.astype(np.int64), minlength=9))
        np.testing.assert_array_equal(ans, want_ans)
        np.testing.assert_array_equal(code, want_code)
        np.testing.assert_array_equal(gu, cu)
        np.testing.assert_array_equal(gv, cv)
        # what a batch takes: the same answers, and only the pairs left (code 0) with their ids
        counts[:] = 0
        ans2, left, lu, lv = prefilter_jit.compiled_prefilter_left(L, qs, qt, threads=threads, counts=counts)
        want_left = np.flatnonzero(want_code == UNDECIDED)
        np.testing.assert_array_equal(counts, np.bincount(want_code.astype(np.int64), minlength=9))
        np.testing.assert_array_equal(ans2, want_ans)
        np.testing.assert_array_equal(left, want_left)
        np.testing.assert_array_equal(lu, cu[want_left])
        np.testing.assert_array_equal(lv, cv[want_left])
        assert lu.dtype == L.comp.dtype and left.dtype == np.int64


def test_compiled_prefilter_inputs_meet_every_step():
    """The graphs and pairs of the test above take every prefilter step and leave some pairs to
    the search, so that its equality covers each step's code."""
    from distgrail.query.stats import INTERVAL, LEVEL, SAME, SUPPORT_NEG, SUPPORT_POS, TREE

    seen = set()
    for name in sorted(ALL):
        g = ALL[name]
        for K in (0, 1, 64, 200):
            if g.n and g.m:
                L = labels(name, K).labels("cpu")
                s, t = pairs(g, 1500, seed=K + 3)
                seen.update(np.unique(prefilter(L, L.comp[s], L.comp[t])[1]).tolist())
    assert {SAME, LEVEL, SUPPORT_POS, SUPPORT_NEG, INTERVAL, TREE, UNDECIDED} <= seen


def test_answer_batch_uses_the_compiled_prefilter(monkeypatch):
    """The CPU batch runs the compiled prefilter where the compiled search runs and the batch has
    at least ``compiled_min_pairs`` pairs; with "auto", only once the process's batches have
    brought ``COMPILED_PREFILTER_FIRST`` pairs (its load would cost a process of a few small
    batches more than it saves), any batch once loaded; the NumPy one otherwise; the same
    answers and stats."""
    prefilter_jit = pytest.importorskip("distgrail.query.prefilter_jit")
    calls = []
    real = prefilter_jit.compiled_prefilter_left
    monkeypatch.setattr(prefilter_jit, "compiled_prefilter_left",
                        lambda L, s, t, **kw: calls.append(s.size) or real(L, s, t, **kw))
    idx = labels("scale-free", 64)
    s, t = pairs(ALL["scale-free"], 2000, seed=5)
    k = s.size
    loaded = [False]
    monkeypatch.setattr(answer, "_prefilter_loaded", lambda: loaded[0])
    runs = {}
    for key, opts, first, before, is_loaded, compiled in (
            ("auto, a small first batch", SearchOptions(), 10 ** 9, 0, False, False),
            ("auto, a first batch of FIRST pairs", SearchOptions(), k, 0, False, True),
            ("auto, the batch that brings FIRST pairs", SearchOptions(), 5 * k, 4 * k, False, True),
            ("auto, one pair short of it", SearchOptions(), 5 * k + 1, 4 * k, False, False),
            ("auto, loaded", SearchOptions(), 10 ** 9, 0, True, True),
            ("compiled asked for", SearchOptions(cpu_search="compiled"), 10 ** 9, 0, False, True),
            ("numpy search", SearchOptions(cpu_search="bidirectional"), 0, 0, True, False),
            ("fewer than compiled_min_pairs", SearchOptions(compiled_min_pairs=k + 1), 0, 0, True, False)):
        monkeypatch.setattr(answer, "COMPILED_PREFILTER_FIRST", first)
        monkeypatch.setattr(answer, "_NUMPY_PAIRS", [before])
        loaded[0] = is_loaded
        calls.clear()
        st = QueryStats()
        a = answer.answer_batch_numpy(idx.labels("cpu"), s, t, st, search=opts)
        assert calls == ([k] if compiled else []), key
        assert answer._NUMPY_PAIRS[0] == before + (k if key.startswith("auto") and not compiled else 0), key
        runs[key] = (a, st.steps, st.reachable)
    want = runs["numpy search"]
    for key, got in runs.items():
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1:] == want[1:], key
    monkeypatch.undo()
    real(idx.labels("cpu"), s, t)
    assert answer._prefilter_loaded()


def test_prefilter_loaded_while_another_thread_imports_it(monkeypatch):
    """A module another thread is still importing (in ``sys.modules``, its kernel not yet
    defined) is not loaded, and asking does not raise."""
    import types

    monkeypatch.setitem(sys.modules, "distgrail.query.prefilter_jit", types.ModuleType("distgrail.query.prefilter_jit"))
    assert answer._prefilter_loaded() is False
    monkeypatch.delitem(sys.modules, "distgrail.query.prefilter_jit")
    assert answer._prefilter_loaded() is False


def test_without_numba_falls_back_to_numpy(monkeypatch):
    """numba hidden: the NumPy search and prefilter, one warning each, the same answers and counts.
    The failed loads are recorded in a ``jit._FAILED`` of the test's own, dropped with the hidden
    numba at its end (recorded in the process's one, they would turn the compiled code off for
    every later test: ``jit.load`` remembers a failed load for the process's life)."""
    from distgrail import jit

    monkeypatch.setattr(jit, "_FAILED", {})
    idx = labels("paper-dense", 64)
    s, t = pairs(ALL["paper-dense"], 1500, seed=9)
    want, st = idx.query(s, t, backend="cpu")
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError
    monkeypatch.delitem(sys.modules, "distgrail.query.bidir_jit")
    monkeypatch.delitem(sys.modules, "distgrail.query.prefilter_jit", raising=False)
    assert not answer.have_numba()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got, st2 = idx.query(s, t, backend="cpu")  # "auto" without numba: the NumPy search, silently
        asked, st3 = idx.query(s, t, backend="cpu", search=SearchOptions(cpu_search="compiled"))
    assert [str(x.message) for x in w if "NumPy search" in str(x.message)] == [
        "compiled CPU search unavailable (import of numba halted; None in sys.modules); using the NumPy search"]
    assert [str(x.message) for x in w if "NumPy prefilter" in str(x.message)] == [  # ("compiled" asked for)
        "compiled CPU prefilter unavailable (import of numba halted; None in sys.modules); using the NumPy prefilter"]
    for a, x in ((got, st2), (asked, st3)):
        np.testing.assert_array_equal(a, want)
        assert x.steps == st.steps and x.search_rounds == st.search_rounds
    assert set(jit._FAILED) == {"distgrail.query.bidir_jit", "distgrail.query.prefilter_jit"}  # (the test's own)


def test_import_distgrail_does_not_import_numba():
    code = ("import sys, numpy as np, distgrail; from distgrail.query import answer; "
            "assert sys.modules.get('numba') is None, 'numba imported by import distgrail'; "
            "idx = distgrail.build_index(distgrail.bundled_graph(), dims=2); "
            "idx.query(np.array([2]), np.array([3]), backend='cpu'); "
            "assert sys.modules.get('numba') is None, 'numba imported for one pair'; "
            "print(answer.SearchOptions().cpu_method(answer.have_numba()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["compiled"]
    hide = "import sys; sys.modules['numba'] = None; " + code
    out = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["bidirectional"]  # without numba: the NumPy search, no crash


def test_search_threads():
    assert doctest.testmod(bidir_jit, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0
    assert bidir_jit.search_threads({"NUMBA_NUM_THREADS": "5", "MPI_LOCALNRANKS": "4"}, set(range(16)), 16) == 5
    assert bidir_jit.search_threads({"MPI_LOCALNRANKS": "4"}, set(range(16)), 16) == 4
    assert bidir_jit.search_threads({"SLURM_NTASKS_PER_NODE": "64"}, set(range(16)), 16) == 1
    assert bidir_jit.search_threads({"NUMBA_NUM_THREADS": "x"}, set(range(6)), 6) == 6
    assert bidir_jit.search_threads() >= 1


def test_cpu_labels_of_a_built_index_hold_the_files_level_type(tmp_path):
    """An index just built holds int32 levels and component ids; its CPU query state reads the
    levels in the type the file stores (the prefilter reads one level per pair at random) and the
    ids as unsigned (no negative-index wrap in the compiled loops), and answers as the file does."""
    g = ALL["deep"]
    built = distgrail.build_index(g, dims=3)
    built.save(tmp_path / "d.h5")
    opened = distgrail.open_index(tmp_path / "d.h5")
    assert built.arrays["dag/level"].dtype.itemsize > 1, "the test needs a built index with wide levels"
    L, Lf = built.labels("cpu"), opened.labels("cpu")
    assert L.level.dtype == Lf.level.dtype == opened.arrays["dag/level"].dtype, (L.level.dtype, Lf.level.dtype)
    assert built.arrays["vertex/component"].dtype.kind == "i" and L.comp.dtype.kind == "u", L.comp.dtype
    np.testing.assert_array_equal(L.comp, built.arrays["vertex/component"])
    np.testing.assert_array_equal(L.level, built.arrays["dag/level"])
    s, t = pairs(g, 3000, seed=9)
    want = bfs_reachable(*csr_of(g), s, t)
    np.testing.assert_array_equal(built.query(s, t, backend="cpu")[0], want)
    np.testing.assert_array_equal(opened.query(s, t, backend="cpu")[0], want)


def test_compiled_prefilter_refuses_a_counts_array_too_short():
    """The compiled blocks write a count per code without a bounds check: too short an array is
    refused before any block runs."""
    prefilter_jit = pytest.importorskip("distgrail.query.prefilter_jit")
    L = labels("deep", 64).labels("cpu")
    s = np.arange(10)
    for bad in (np.zeros(4, np.int64), np.zeros((9, 1), np.int64), np.zeros(9, np.int32)):
        with pytest.raises(ValueError, match="counts must be int64"):
            prefilter_jit.compiled_prefilter(L, s, s, counts=bad)


def test_prefetch_widens_an_unsigned_row_as_unsigned():
    """``prefetch(rows, i)`` with a uint16 row id of 32,768 or more addresses that row (zero-extended),
    not a row before the array (sign-extended): the IR of a call shows ``zext``."""
    prefilter_jit = pytest.importorskip("distgrail.query.prefilter_jit")
    import numba

    @numba.njit
    def touch(rows, i):
        prefilter_jit.prefetch(rows, i)
        return rows[i, 0]

    rows = np.arange(70000 * 2, dtype=np.uint32).reshape(70000, 2)
    assert touch(rows, np.uint16(40000)) == 80000
    ir = "\n".join(touch.inspect_llvm().values())
    assert "zext i16" in ir and "sext i16" not in ir


def test_prepare_cpu_makes_what_the_first_compiled_batch_would(monkeypatch):
    """``prepare_cpu`` (the CLI's thread beside the read of the pairs) packs the records exactly
    when the batch would take the compiled prefilter, by ``_cpu_prefilter``'s rule, and counts no
    pairs doing so; the batch then reuses the records."""
    pytest.importorskip("distgrail.query.prefilter_jit")
    from distgrail import jit
    from distgrail.query.stats import Labels

    monkeypatch.setattr(jit, "_FAILED", {})  # (what this test records stays its own)
    loaded = [False]
    monkeypatch.setattr(answer, "_prefilter_loaded", lambda: loaded[0])
    monkeypatch.setattr(answer, "COMPILED_PREFILTER_FIRST", 1000)
    monkeypatch.setattr(answer, "_NUMPY_PAIRS", [0])
    for k, opts, is_loaded, want in ((999, SearchOptions(), False, False), (1000, SearchOptions(), False, True),
                                     (100, SearchOptions(), True, True), (100, SearchOptions(compiled_min_pairs=101), True, False),
                                     (10, SearchOptions(), True, False),  # (under compiled_min_pairs, 64)
                                     (10 ** 6, SearchOptions(cpu_search="bidirectional"), True, False),
                                     (100, SearchOptions(cpu_search="compiled"), False, True)):
        loaded[0] = is_loaded
        L = labels("deep", 64).labels("cpu")
        L = Labels(**{f.name: getattr(L, f.name) for f in dataclasses.fields(Labels) if f.init})  # fresh Once fields
        assert not L.packed.built
        assert answer.prepare_cpu(L, k, opts) is want, (k, opts)
        assert L.packed.built is want
        assert answer._NUMPY_PAIRS[0] == 0
        assert (answer._cpu_prefilter(k, opts) is not None) is want, (k, opts)
        answer._NUMPY_PAIRS[0] = 0


def test_a_prepared_process_takes_the_compiled_prefilter_for_any_batch():
    """``prepare_cpu`` loads the compiled prefilter's code too: when its count of pairs was an
    estimate too high (the CLI's, from the file size), the batch still takes the path prepared for
    it. In a fresh process (the rule looks at what this process has loaded)."""
    pytest.importorskip("numba")
    code = (
        "import numpy as np, distgrail\n"
        "from distgrail.query import answer\n"
        "from distgrail.query.stats import SearchOptions\n"
        "idx = distgrail.build_index((np.arange(99), np.arange(1, 100)), dims=2)\n"
        "L = idx._state(distgrail.gpu.backend.get_backend('cpu'))[0]\n"
        "answer.COMPILED_PREFILTER_FIRST = 1000\n"
        "assert answer._cpu_prefilter(100, SearchOptions()) is None  # (counts 100 NumPy pairs)\n"
        "assert answer.prepare_cpu(L, 1000)\n"
        "assert answer._cpu_prefilter(100, SearchOptions()) is not None\n"
        "print('ok')\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(distgrail.__file__)))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=root))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize("where", ["prefilter_jit.compiled_prefilter_left", "bidir_jit.compiled_search"])
def test_a_compile_failure_at_the_first_call_takes_the_numpy_steps(where, monkeypatch):
    """numba compiles a loop at its first call for some argument types, after the module
    imported: a failure there (a numba or LLVM version the loop does not compile on) is one
    warning, the NumPy steps' answers and counts, and the module recorded as failed; any other
    error is raised as it was."""
    numba_errors = pytest.importorskip("numba.core.errors")
    from distgrail import jit

    module_name, fn = where.split(".")
    module = pytest.importorskip(f"distgrail.query.{module_name}")
    monkeypatch.setattr(jit, "_FAILED", {})
    idx = labels("paper-dense", 64)
    s, t = pairs(ALL["paper-dense"], 1500, seed=9)
    want, st = idx.query(s, t, backend="cpu", search=SearchOptions(cpu_search="bidirectional"))
    opts = SearchOptions(cpu_search="compiled", compiled_min_pairs=0)

    def broken(*args, **kw):
        raise numba_errors.TypingError("planted: no implementation of llvm.prefetch here")

    monkeypatch.setattr(module, fn, broken)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got, st2 = idx.query(s, t, backend="cpu", search=opts)
    np.testing.assert_array_equal(got, want)
    assert st2.steps == st.steps and st2.searched == st.searched
    said = [str(x.message) for x in w if "failed to compile" in str(x.message)]
    assert len(said) == 1 and "planted" in said[0], said
    assert f"distgrail.query.{module_name}" in jit._FAILED

    def other(*args, **kw):
        raise ZeroDivisionError("not numba's")

    monkeypatch.setattr(jit, "_FAILED", {})
    monkeypatch.setattr(module, fn, other)
    with pytest.raises(ZeroDivisionError):
        idx.query(s, t, backend="cpu", search=opts)


def test_the_pairs_left_cost_no_copy_of_them():
    """``compiled_prefilter_left`` with every pair left to the search (no supports, one dimension)
    holds the answers and the pairs left once (1 + 8 + 2 x 4 bytes a pair at its peak, and the
    threads' scratch), not a second gathered copy and its index (41 bytes a pair before)."""
    import tracemalloc

    prefilter_jit = pytest.importorskip("distgrail.query.prefilter_jit")
    rng = np.random.default_rng(3)
    n = 300
    g = distgrail.as_graph((rng.integers(0, n, 700), rng.integers(0, n, 700)), num_vertices=n)
    L = indexed(g, 0, dims=1).labels("cpu")
    s, t = rng.integers(0, n, 20000), rng.integers(0, n, 20000)
    undecided = np.flatnonzero(prefilter(L, L.comp[s], L.comp[t])[1] == UNDECIDED)
    k = 1_000_000
    qs, qt = np.resize(s[undecided], k), np.resize(t[undecided], k)
    prefilter_jit.compiled_prefilter_left(L, qs[:10], qt[:10])  # (compiled or loaded first)
    tracemalloc.start()
    try:
        _, left, lu, lv = prefilter_jit.compiled_prefilter_left(L, qs, qt, threads=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert left.size == k and lu.dtype.itemsize == 4
    np.testing.assert_array_equal(left, np.arange(k))
    np.testing.assert_array_equal(lu, L.comp[qs])
    assert peak / k < 25, peak / k
