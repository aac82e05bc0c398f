"""The CPU batch's compiled path (session 47): the pairs a compiled prefilter leaves to the
search take the compiled search however few they are, with the same answers, step counts and
rounds as the NumPy prefilter and search; the compiled prefilter's counts, added in its passes,
equal the NumPy twin's codes counted, at every mask width."""

import dataclasses
import importlib

import numpy as np
import pytest

from distgrail import jit
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.query import answer
from distgrail.query.prefilter import prefilter
from distgrail.query.stats import UNDECIDED, QueryStats, SearchOptions
from test_query_steps import GRAPHS, indexed, pairs

pytest.importorskip("numba")


def _module(name):  # (as loaded now: another test may have dropped it from sys.modules and imported it again)
    return importlib.import_module(f"distgrail.query.{name}")


def _few_left(L, g, want=(1, 63), tries=200):
    """A batch of at least 64 pairs of ``g`` that the prefilter leaves ``want`` pairs to search."""
    for seed in range(tries):
        s, t = pairs(g, 200, seed=seed)
        left = int(np.count_nonzero(prefilter(L, L.comp[s], L.comp[t])[1] == UNDECIDED))
        if want[0] <= left <= want[1]:
            return s, t
    pytest.skip("no batch with few pairs left to the search")


@pytest.mark.parametrize("name", sorted(n for n, g in GRAPHS.items() if g.m))
def test_few_pairs_left_take_the_compiled_search_with_the_same_answers(name, monkeypatch):
    g = GRAPHS[name]
    idx = indexed(g, 64)
    L = dataclasses.replace(idx.labels("cpu"))  # fresh labels: the compiled search never ran on them
    s, t = _few_left(L, g)
    monkeypatch.setattr(jit, "_FAILED", {})  # (a test of the fallback without numba may have marked it failed)
    bidir_jit = _module("bidir_jit")
    calls = []
    real = bidir_jit.compiled_search
    monkeypatch.setattr(bidir_jit, "compiled_search", lambda L, cu, cv: calls.append(cu.size) or real(L, cu, cv))
    st = QueryStats()
    got = answer.answer_batch_numpy(L, s, t, st, search=SearchOptions(cpu_search="compiled"))
    st2 = QueryStats()
    want = answer.answer_batch_numpy(dataclasses.replace(L), s, t, st2, search=SearchOptions(cpu_search="bidirectional"))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, bfs_reachable(*csr_of(g), s, t))
    assert st.steps == st2.steps and st.search_rounds == st2.search_rounds and st.reachable == st2.reachable
    assert len(calls) == 1 and 0 < calls[0] < 64 and L.searched.built


@pytest.mark.parametrize("K", [0, 1, 64, 128, 200])
def test_counts_added_in_the_passes_equal_the_codes(K):
    for name in sorted(GRAPHS):
        g = GRAPHS[name]
        if not g.m:
            continue
        L = indexed(g, K).labels("cpu")
        s, t = pairs(g, 3000, seed=K)
        ans, code = prefilter(L, L.comp[s], L.comp[t])
        want = np.bincount(code.astype(np.int64), minlength=9)
        for full in (False, True):
            counts = np.zeros(9, np.int64)
            prefilter_jit = _module("prefilter_jit")
            run = prefilter_jit.compiled_prefilter if full else prefilter_jit.compiled_prefilter_left
            got = run(L, s, t, threads=2, counts=counts)
            np.testing.assert_array_equal(counts, want)
            np.testing.assert_array_equal(got[0], ans)
            if full:
                np.testing.assert_array_equal(got[1], code)
            else:
                np.testing.assert_array_equal(got[1], np.flatnonzero(code == UNDECIDED))
