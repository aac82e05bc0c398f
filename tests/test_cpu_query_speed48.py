"""The compiled CPU prefilter's paths of session 48: the records' tests made without a branch on
the first 16 lanes of two rows (``row_flags``, where ``vector_lanes`` says they fit) and the
scalar tests (longer rows), the level filter fused with the component lookup (component arrays
near: ``first``, each component's first of its level) and in a pass of its own (far): the same
answers, codes, counts, pairs left and component ids as the NumPy prefilter, every way."""

import importlib

import numpy as np
import pytest
from numba import njit

from distgrail.query.prefilter import prefilter
from distgrail.query.stats import LEVEL, SAME, STEPS, UNDECIDED
from test_query_steps import GRAPHS, indexed, pairs

pytest.importorskip("numba")


def _jit():  # (as loaded now: another test may have dropped it from sys.modules and imported it again)
    return importlib.import_module("distgrail.query.prefilter_jit")


def _flags_by_hand(rec, a, b, d, W):
    """The flags row_flags gives, from the records' columns one test at a time."""
    ra, rb = rec[a].astype(np.int64), rec[b].astype(np.int64)
    B = 2 + 2 * d
    f = 0
    if W:
        words_a, words_b = rec[a].view(np.uint64), rec[b].view(np.uint64)
        M = B // 2
        oa, ia, ob, ib = (int(x) for x in (words_a[M], words_a[M + 1], words_b[M], words_b[M + 1]))
        f |= 1 if oa & ib else 0
        f |= 2 if (ia & ~ib) | (ob & ~oa) else 0
    if any(ra[k] > rb[k] or rb[k + 1] > ra[k + 1] for k in range(2, B, 2)):
        f |= 4
    if ra[0] <= rb[1] <= ra[1]:
        f |= 8
    return f


@pytest.mark.parametrize("d,W", [(1, 0), (1, 1), (3, 1), (5, 0), (5, 1), (7, 0)])
def test_row_flags_are_the_tests_one_by_one(d, W):
    jit = _jit()
    lanes = jit.vector_lanes(d, W)
    assert lanes >= 0

    @njit
    def flags(rec, a, b, lanes):
        out = np.empty(a.size, np.int64)
        for i in range(a.size):
            out[i] = jit.row_flags(rec, a[i], b[i], lanes)
        return out

    rng = np.random.default_rng(d * 10 + W)
    C = 300
    # values around the ends of uint32 (unsigned compares), and small ones that often tie
    rec = np.where(rng.random((C, 16)) < 0.5, rng.integers(0, 6, (C, 16)),
                   rng.integers(0, 2**32, (C, 16))).astype(np.uint32)
    rec[rng.random((C, 16)) < 0.1] = 0xFFFFFFFF
    # masks: sparse bits, so that every flag is seen set and clear
    B = 2 + 2 * d
    if W:
        rec[:, B:B + 4] = 0
        for j in range(B, B + 4):
            rec[:, j] = (rng.random(C) < 0.3).astype(np.uint32) << rng.integers(0, 32, C).astype(np.uint32)
    a = rng.integers(0, C, 5000).astype(np.uint32)
    b = rng.integers(0, C, 5000).astype(np.uint32)
    got = flags(rec, a, b, lanes)
    want = np.array([_flags_by_hand(rec, x, y, d, W) for x, y in zip(a, b)])
    np.testing.assert_array_equal(got, want)
    for bit in (1, 2, 4, 8) if W else (4, 8):
        assert np.any(want & bit) and np.any(~want & bit)


def test_vector_lanes_fit_the_first_16_lanes():
    jit = _jit()
    for d in range(1, 10):
        for W in range(4):
            lanes = jit.vector_lanes(d, W)
            fits = 2 + 2 * d + 4 * W <= 16 and W <= 1
            assert (lanes >= 0) == fits, (d, W)
            if fits:
                assert lanes & 0xFFFF == ((1 << (2 + 2 * d)) - 1) & ~3
                assert lanes >> 16 == (((1 << 2 * W) - 1) << (2 + 2 * d))


@pytest.mark.parametrize("near", [True, False])
@pytest.mark.parametrize("dims,K", [(1, 0), (5, 64), (5, 0), (7, 0), (6, 64), (8, 0), (3, 128), (2, 65)])
def test_every_path_gives_the_numpy_prefilter(dims, K, near, monkeypatch):
    jit = _jit()
    monkeypatch.setattr(jit, "NEAR_BYTES", 1 << 40 if near else 0)
    vector = jit.vector_lanes(dims, -(-K // 64)) >= 0
    for name in sorted(GRAPHS):
        g = GRAPHS[name]
        if not g.m:
            continue
        L = indexed(g, K, dims=dims).labels("cpu")
        assert L.d == dims and (jit.vector_lanes(L.d, L.W) >= 0) == vector
        s, t = pairs(g, 3000, seed=dims + K)
        cu, cv = L.comp[s], L.comp[t]
        ans, code = prefilter(L, cu, cv)
        want = np.bincount(code.astype(np.int64), minlength=len(STEPS) + 1)
        for ids in (np.int64, np.int32):
            counts = np.zeros(len(STEPS) + 1, np.int64)
            got = jit.compiled_prefilter(L, s.astype(ids), t.astype(ids), threads=2, counts=counts)
            np.testing.assert_array_equal(got[0], ans)
            np.testing.assert_array_equal(got[1], code)
            np.testing.assert_array_equal(got[2], cu)
            np.testing.assert_array_equal(got[3], cv)
            np.testing.assert_array_equal(counts, want)
            counts[:] = 0
            a2, left, lu, lv = jit.compiled_prefilter_left(L, s.astype(ids), t.astype(ids), threads=2, counts=counts)
            np.testing.assert_array_equal(a2, ans)
            np.testing.assert_array_equal(left, np.flatnonzero(code == UNDECIDED))
            np.testing.assert_array_equal(lu, cu[left])
            np.testing.assert_array_equal(lv, cv[left])
            np.testing.assert_array_equal(counts, want)
        assert L.first.built == near  # (far: the first components of the levels are never made)
        if near:
            first = jit._first_of_level(L)
            level = np.asarray(L.level)
            np.testing.assert_array_equal(level[first], level)  # each the first of its level:
            assert np.all((first == 0) | (level[np.maximum(first.astype(np.int64) - 1, 0)] < level))
            undecided = (code != SAME) & (code != LEVEL)
            np.testing.assert_array_equal(cu < first[cv], undecided)
