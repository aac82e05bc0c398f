"""A compiled build loop that numba fails to compile at its first call (a numba release that types
it differently, an unsupported dtype) costs one warning, never the build: the stage runs again from
its inputs on its NumPy code (:func:`distgrail.jit.restarts`) and gives the same numbers. Each
compiled call of the build side is planted with a ``TypingError``: the index (or the stage's
output) equals the one of the working loops, a "failed to compile" warning is issued, the module
is recorded as failed; an error of another kind from the same call is raised as it was.

For every call the baseline run first checks, through a counting spy, that the compiled path is
taken at these (lowered) thresholds, so a planted failure is really met."""

from __future__ import annotations

import threading

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from numba.core.errors import TypingError  # noqa: E402

from distgrail import build_index, jit  # noqa: E402
from distgrail.io.graph import EdgeGraph  # noqa: E402
from distgrail.stages import condense as condense_mod  # noqa: E402
from distgrail.stages import deep, deep_jit, insertion, insertion_jit, ranks, ranks_jit, scc_jit  # noqa: E402
from distgrail.stages.condense import condense  # noqa: E402

DAG_ARRAYS = ("comp", "indptr", "indices", "rindptr", "rindices", "level", "level_ptr")


@pytest.fixture(autouse=True)
def no_failed_modules(monkeypatch):
    """Every test starts with no module recorded as failed and leaves none behind."""
    monkeypatch.setattr(jit, "_FAILED", {})


def _plant(m, module, name, error=None, after=0):
    """``module.name`` replaced by a spy (its calls counted) that raises ``error`` from its
    ``after``-th call on (None: calls the real function)."""
    real = getattr(module, name)
    calls = []
    lock = threading.Lock()

    def planted(*args, **kwargs):
        with lock:
            calls.append(1)
            k = len(calls)
        if error is not None and k > after:
            raise error
        return real(*args, **kwargs)
    m.setattr(module, name, planted)
    return calls


def _check(monkeypatch, module, name, run, same, after=0):
    """(a) ``run()`` with ``module.name`` failing to compile equals it with the loop working
    (``same(got, want)``), (b) with one "failed to compile" warning and the module recorded,
    (c) a non-numba error of the same call is raised unchanged."""
    with monkeypatch.context() as m:
        calls = _plant(m, module, name)
        want = run()
    assert calls, f"{module.__name__}.{name} was not called: the compiled path was not taken"
    assert not jit._FAILED
    with monkeypatch.context() as m:
        _plant(m, module, name, TypingError("forced by the test"), after=after)
        with pytest.warns(RuntimeWarning, match="failed to compile") as said:
            got = run()
    same(got, want)
    assert sum("failed to compile" in str(w.message) for w in said) == 1, [str(w.message) for w in said]
    assert module.__name__ in jit._FAILED
    jit._FAILED.clear()
    with monkeypatch.context() as m:
        _plant(m, module, name, ZeroDivisionError("not numba's"), after=after)
        with pytest.raises(ZeroDivisionError, match="not numba's"):
            run()
    assert module.__name__ not in jit._FAILED


def _same_index(got, want):
    assert got.arrays.keys() == want.arrays.keys()
    for k, v in want.arrays.items():
        g = got.arrays[k]
        assert g.dtype == v.dtype and np.array_equal(g, v), k


def _same_dag(got, want):
    assert got.n == want.n
    for k in DAG_ARRAYS:
        g, v = getattr(got, k), getattr(want, k)
        assert g.dtype == v.dtype and np.array_equal(g, v), k


def _deep_graph(n=400, seed=3, back=True):
    """A chain with forward edges (hundreds of levels) and, with ``back``, a few edges back up it
    (cycles), int32 ids."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, n, 600), rng.integers(0, n, 600)
    fwd = a < b
    src, dst = [np.arange(n - 1), a[fwd]], [np.arange(1, n), b[fwd]]
    if back:
        src.append(np.array([150, 300, 90]))
        dst.append(np.array([140, 260, 10]))
    return EdgeGraph(n=n, src=np.concatenate(src).astype(np.int32), dst=np.concatenate(dst).astype(np.int32))


# -- the deep sweeps (deep_jit): condensation's levels, phases 1 (dfs), 2, 3, 4, 5 ----------------

DEEP_CALLS = [("kahn_rest", "max-level"), ("subtree_sizes", "max-level"), ("add_parent_starts", "max-level"),
              ("intervals_bottom_up", "max-level"), ("or_children_bottom_up", "max-level"),
              ("or_parents_top_down", "max-level"), ("path_counts", "dfs"), ("dfs_parents", "dfs")]


@pytest.mark.parametrize("name,rule", DEEP_CALLS)
def test_a_deep_sweep_that_fails_to_compile_builds_the_same_index(monkeypatch, name, rule):
    monkeypatch.setattr(deep, "DEEP_LEVELS", 16)
    g = _deep_graph()

    def run():
        return build_index(g, backend="cpu", dims=3, seed=7, supports=16, parent_rule=rule)
    _check(monkeypatch, deep_jit, name, run, _same_index)


# -- phase 3's sibling order (ranks_jit), warmed before its threads; and the deep sums beside it ---

@pytest.mark.parametrize("name,after", [("parent_buckets", 0), ("sibling_offsets_into", 0),
                                        ("sibling_offsets_into", 1), ("add_parent_starts", 0)])
def test_the_compiled_sibling_order_that_fails_to_compile_gives_the_same_ranks(monkeypatch, name, after):
    """``after`` 1: the warm-up call compiles, a dimension's call (on a thread) fails. The deep
    sums run compiled too: a failure of one module leaves the other one's loops in use."""
    monkeypatch.setattr(ranks, "COMPILED_RANKS_COMPONENTS", 0)
    monkeypatch.setattr(deep, "DEEP_LEVELS", 16)
    dag = condense(_deep_graph())
    from distgrail.stages.forest import parents_max_level
    from distgrail.stages.subtree import subtree_sizes_numpy

    parent = parents_max_level(dag, 7)
    size = subtree_sizes_numpy(parent, dag.level_ptr)
    dims = [0, 1, 2, 3]
    want = ranks.post_order_ranks_numpy(parent, size, dag.level_ptr, 7, dims)
    module = deep_jit if name == "add_parent_starts" else ranks_jit

    def run():
        return ranks.post_order_ranks_cpu(parent, size, dag.level_ptr, 7, dims)

    def same(got, compiled):
        assert np.array_equal(got, compiled) and np.array_equal(got, want)
    _check(monkeypatch, module, name, run, same, after=after)


def test_the_compiled_sibling_order_failing_builds_the_same_index(monkeypatch):
    monkeypatch.setattr(ranks, "COMPILED_RANKS_COMPONENTS", 0)
    g = _deep_graph()

    def run():
        return build_index(g, backend="cpu", dims=4, seed=2, supports=8)
    _check(monkeypatch, ranks_jit, "sibling_offsets_into", run, _same_index)


# -- condensation's compiled strong components (scc_jit): a failure in any step restarts it -------

SCC_CALLS = ["ids_within", "rows_of", "strong_components", "closing_levels", "canonical_order",
             "renumbered_transpose"]


@pytest.mark.parametrize("name", SCC_CALLS)
def test_a_compiled_condensation_step_that_fails_to_compile_gives_scipys_dag(monkeypatch, name):
    """A later step (closing_levels, canonical_order, renumbered_transpose) fails after the
    compiled search wrote its labels: the condensation starts again from the edges on SciPy's
    search, the same DAG."""
    g = _deep_graph(back=True)
    with monkeypatch.context() as m:
        m.setattr(condense_mod, "COMPILED_SCC_EDGES", 1 << 62)
        scipys = condense(g)
    monkeypatch.setattr(condense_mod, "COMPILED_SCC_EDGES", 0)

    def same(got, want):
        _same_dag(got, want)
        _same_dag(got, scipys)
    _check(monkeypatch, scc_jit, name, lambda: condense(g), same)


def test_a_transpose_that_fails_after_the_other_wrote_its_arrays_restarts(monkeypatch):
    """renumbered_transpose runs twice (a direction a thread): the first call writes its arrays,
    the second fails; those arrays are dropped with the rest, the DAG is SciPy's."""
    g = _deep_graph(back=True)
    with monkeypatch.context() as m:
        m.setattr(condense_mod, "COMPILED_SCC_EDGES", 1 << 62)
        scipys = condense(g)
    monkeypatch.setattr(condense_mod, "COMPILED_SCC_EDGES", 0)
    _check(monkeypatch, scc_jit, "renumbered_transpose", lambda: condense(g),
           lambda got, want: (_same_dag(got, want), _same_dag(got, scipys)), after=1)


@pytest.mark.parametrize("name", ["strong_components", "canonical_order"])
def test_a_compiled_condensation_failing_builds_the_same_index(monkeypatch, name):
    monkeypatch.setattr(condense_mod, "COMPILED_SCC_EDGES", 0)
    g = _deep_graph(back=True)

    def run():
        return build_index(g, backend="cpu", dims=3, seed=5, supports=16)
    _check(monkeypatch, scc_jit, name, run, _same_index)


@pytest.mark.parametrize("planted", [None, "ids_within"])
def test_an_edge_end_outside_the_graph_is_still_a_value_error(monkeypatch, planted):
    """The compiled search's range check refuses it; where that check fails to compile, SciPy's
    path (after the restart) refuses it the same way."""
    monkeypatch.setattr(condense_mod, "COMPILED_SCC_EDGES", 0)
    bad = EdgeGraph(n=3, src=np.array([0, 1, 2], np.int32), dst=np.array([1, 0, 7], np.int32))
    if planted:
        _plant(monkeypatch, scc_jit, planted, TypingError("forced by the test"))
        with pytest.warns(RuntimeWarning, match="failed to compile"), \
                pytest.raises(ValueError, match="outside the graph's vertices 0..2"):
            condense(bad)
    else:
        with pytest.raises(ValueError, match="outside the graph's vertices 0..2"):
            condense(bad)


# -- an update's renumbering (insertion_jit) -----------------------------------------------------

def test_the_compiled_gather_of_an_update_that_fails_to_compile_gives_the_same_arrays(monkeypatch):
    from distgrail.update import insert_edges

    monkeypatch.setattr(insertion, "COMPILED_GATHER_COMPONENTS", 0)
    rng = np.random.default_rng(1)
    n = 300
    src, dst = rng.integers(0, n, 700), rng.integers(0, n, 700)
    src, dst = np.r_[np.arange(n - 1), src[src < dst]], np.r_[np.arange(1, n), dst[src < dst]]
    idx = build_index((src, dst), num_vertices=n, dims=3, supports=16, backend="cpu", seed=1)
    a, b = rng.integers(0, n, 40), rng.integers(0, n, 40)

    def run():
        got, report = insert_edges(idx, a, b, backend="cpu", rebuild_above=10 ** 9)
        assert report.method == "swept"
        return got
    _check(monkeypatch, insertion_jit, "rows_gathered", run, _same_index)


# -- the text readers' compiled scans and numbers (io/fields_jit) --------------------------------

def _write_inputs(tmp_path):
    rng = np.random.default_rng(4)
    n = 500
    src, dst = rng.integers(0, n, 3000), rng.integers(0, n, 3000)
    paths = {}
    for kind, sep, head in (("txt", " ", ""), ("csv", ",", "src,dst\n"), ("tsv", " \t", "")):
        p = tmp_path / f"g.{kind}"
        p.write_text(head + "".join(f"{u}{sep}{v}\n" for u, v in zip(src.tolist(), dst.tolist())))
        paths[kind] = str(p)
    return paths


FIELD_CALLS = [("numbers_at", "txt"), ("first_empty_field", "csv"), ("comma_width", "csv"),
               ("first_empty_tab_field", "tsv")]


@pytest.mark.parametrize("name,kind", FIELD_CALLS)
def test_a_text_scan_that_fails_to_compile_reads_the_same_graph(monkeypatch, tmp_path, name, kind):
    from distgrail.io import fields_jit, guards, text
    from distgrail.io.read import read_graph

    for mod, const in ((text, "COMPILED_NUMBERS_BYTES"), (guards, "JIT_MIN_BYTES")):
        monkeypatch.setattr(mod, const, 0)
    path = _write_inputs(tmp_path)[kind]

    def same(got, want):
        assert got.n == want.n
        assert np.array_equal(got.src, want.src) and np.array_equal(got.dst, want.dst)
    _check(monkeypatch, fields_jit, name, lambda: read_graph(path), same)


@pytest.mark.parametrize("name,scan,data", [
    ("first_empty_field", "empty_field", b"0,1\n2,,4\n"),
    ("first_empty_tab_field", "empty_tab_field", b"0\t1\n2\t\t4\n"),
    ("comma_width", "comma_width", b"0,1\n2,3,4\n")])
def test_a_scan_that_fails_to_compile_finds_the_same_offset(monkeypatch, name, scan, data):
    from distgrail.io import fields_jit, guards

    monkeypatch.setattr(guards, "JIT_MIN_BYTES", 0)
    monkeypatch.setattr(guards, "SPECIAL_JIT", -1)
    args = (data, 0) if scan == "comma_width" else (data,)
    _check(monkeypatch, fields_jit, name, lambda: getattr(guards, scan)(*args),
           lambda got, want: (got == want) or pytest.fail(f"{got} != {want}"))


# -- the helper itself ---------------------------------------------------------------------------

def test_restarts_raises_a_second_failure_of_the_same_module():
    """A stage that keeps calling a module already failed (it did not take its NumPy code) is
    not run forever: the second CompileFailed of that module is raised."""
    runs = []

    @jit.restarts
    def stage():
        """Fails to compile every time."""
        runs.append(1)
        raise jit.CompileFailed("distgrail.some_jit")
    with pytest.raises(jit.CompileFailed):
        stage()
    assert len(runs) == 2


def test_guard_passes_other_attributes_and_none():
    assert jit.guard(None, "x") is None
    g = jit.guard(deep_jit, "level sweeps")
    assert g.__name__ == deep_jit.__name__
    assert g.subtree_sizes.__name__ == "subtree_sizes"
