"""The compiled prefilter's session-48 paths, where tests/test_cpu_query_speed48.py does not go:
the far path (ids read in a pass of their own, verdicts written in place, a third pass
appending the pairs left) over many blocks and threads, where each block's pairs left must be
moved down in block order (that test has one block of ~3000 pairs, and test_query_jit's small
blocks take the near path, its component arrays being small); and a check that the records'
vector pass is the one answering where vector_lanes says the tests fit (its equality with the
NumPy prefilter holds for the scalar pass too, so equality alone does not show it ran)."""

import importlib

import numpy as np
import pytest

from distgrail.query.prefilter import prefilter
from distgrail.query.stats import INTERVAL, STEPS, UNDECIDED
from test_query_steps import GRAPHS, indexed, pairs

pytest.importorskip("numba")


def _jit():
    return importlib.import_module("distgrail.query.prefilter_jit")


@pytest.mark.parametrize("near", [True, False])
@pytest.mark.parametrize("dims,K", [(5, 64), (6, 64), (7, 0)])
def test_small_blocks_many_threads_every_path(dims, K, near, monkeypatch):
    jit = _jit()
    monkeypatch.setattr(jit, "NEAR_BYTES", 1 << 40 if near else 0)
    monkeypatch.setattr(jit, "BLOCK_PAIRS", 97)
    for name in ("cycles", "paper"):
        g = GRAPHS[name]
        L = indexed(g, K, dims=dims).labels("cpu")
        s, t = pairs(g, 2000, seed=dims + K + 1)
        s, t = s[:2000 - 13], t[:2000 - 13]  # (not a multiple of the block)
        cu, cv = L.comp[s], L.comp[t]
        ans, code = prefilter(L, cu, cv)
        want = np.bincount(code.astype(np.int64), minlength=len(STEPS) + 1)
        want_left = np.flatnonzero(code == UNDECIDED)
        assert want_left.size and want[INTERVAL]
        for ids, threads in ((np.int64, 3), (np.int32, 8), (np.int64, 1)):
            counts = np.zeros(len(STEPS) + 1, np.int64)
            got = jit.compiled_prefilter(L, s.astype(ids), t.astype(ids), threads=threads, counts=counts)
            for x, y in zip(got, (ans, code, cu, cv)):
                np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(counts, want)
            counts[:] = 0
            a2, left, lu, lv = jit.compiled_prefilter_left(L, s.astype(ids), t.astype(ids), threads=threads,
                                                           counts=counts)
            np.testing.assert_array_equal(a2, ans)
            np.testing.assert_array_equal(left, want_left)
            np.testing.assert_array_equal(lu, cu[want_left])
            np.testing.assert_array_equal(lv, cv[want_left])
            np.testing.assert_array_equal(counts, want)
        assert L.first.built == near


@pytest.mark.parametrize("dims,K", [(5, 64), (7, 0)])
def test_the_vector_pass_answers_where_the_tests_fit(dims, K, monkeypatch):
    """With the interval lanes taken out of ``lanes``, the pairs the interval filter decides are
    decided otherwise: the records' pass reads ``lanes`` (row_flags ran), where the scalar pass
    would not have changed."""
    jit = _jit()
    g = GRAPHS["paper"]
    L = indexed(g, K, dims=dims).labels("cpu")
    real = jit.vector_lanes(L.d, L.W)
    assert real >= 0
    s, t = pairs(g, 3000, seed=5)
    _, code = prefilter(L, L.comp[s], L.comp[t])
    assert np.any(code == INTERVAL)
    np.testing.assert_array_equal(jit.compiled_prefilter(L, s, t)[1], code)
    monkeypatch.setattr(jit, "vector_lanes", lambda d, W: real & ~0xFFFF)
    got = jit.compiled_prefilter(L, s, t)[1]
    assert not np.any(got == INTERVAL)
    np.testing.assert_array_equal(got[code != INTERVAL], code[code != INTERVAL])
