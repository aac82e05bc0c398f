"""The compiled prefilter's records' pass tallies three steps' counts in one int64, 21 bits
each (``_COUNT``): a block of 2^21 pairs or more would carry one step's count into the next
one's bits. ``BLOCK_PAIRS`` is a module constant that sessions retune (2^12, 2^14 and 2^16 were
measured; tests set 97): a block that large must be refused, not counted wrong (the answers
stay right, so nothing else would notice: the step counts are QueryStats.steps)."""

import importlib

import numpy as np
import pytest

from distgrail.query.prefilter import prefilter
from distgrail.query.stats import STEPS, Labels

pytest.importorskip("numba")


def _labels():
    # two components, 0 below 1 by level; 0's out-mask meets 1's in-mask: every pair (0, 1) is
    # decided by the support-positive step, in the records' vector pass (d = 1, W = 1)
    masks = np.ones((1, 2), np.uint64)
    return Labels(comp=np.array([0, 1], np.uint32), indptr=None, indices=None, C=2, d=1, W=1,
                  level=np.array([0, 1], np.uint8), lo=np.array([[0, 0]], np.uint32),
                  hi=np.array([[1, 1]], np.uint32), start0=np.array([0, 0], np.uint32),
                  post0=np.array([0, 1], np.uint32), out=masks, inn=masks)


def test_a_block_too_large_for_the_tally_is_refused_or_counted_right(monkeypatch):
    jit = importlib.import_module("distgrail.query.prefilter_jit")
    assert jit.vector_lanes(1, 1) >= 0
    L = _labels()
    k = 1 << 21
    s, t = np.zeros(k, np.int32), np.ones(k, np.int32)
    _, code = prefilter(L, L.comp[s], L.comp[t])
    want = np.bincount(code.astype(np.int64), minlength=len(STEPS) + 1)
    monkeypatch.setattr(jit, "BLOCK_PAIRS", k)
    counts = np.zeros(len(STEPS) + 1, np.int64)
    try:
        ans, _, _, _ = jit.compiled_prefilter_left(L, s, t, threads=1, counts=counts)
    except ValueError as e:
        assert "BLOCK_PAIRS" in str(e)
        return
    assert ans.all()
    np.testing.assert_array_equal(counts, want)


def test_the_block_size_in_use_fits_the_tally():
    jit = importlib.import_module("distgrail.query.prefilter_jit")
    assert 0 < jit.BLOCK_PAIRS < 1 << 21
