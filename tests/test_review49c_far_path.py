"""The id check of the compiled prefilter's far path (component arrays above NEAR_BYTES: the
block's largest id taken in a pass of its own before any read), which an index small enough for
a test never takes by itself: NEAR_BYTES lowered so it does. Bad ids are refused with
``Index.check_pairs``' exact QueryError, good ones answered as the NumPy prefilter answers them."""

from __future__ import annotations

import numpy as np
import pytest

import distgrail
from distgrail.errors import QueryError
from distgrail.query import prefilter_jit
from distgrail.query.prefilter_jit import BLOCK_PAIRS
from distgrail.query.stats import SearchOptions

COMPILED = SearchOptions(cpu_search="compiled", compiled_min_pairs=1)
NUMPY = SearchOptions(cpu_search="bidirectional")


@pytest.fixture(scope="module")
def idx():
    rng = np.random.default_rng(3)
    n, m = 2000, 6000
    src = rng.integers(0, n, m)
    dst = np.where(rng.random(m) < 0.85, np.minimum(src + rng.integers(1, 30, m), n - 1), rng.integers(0, n, m))
    return distgrail.build_index((src, dst), dims=3, backend="cpu")


def test_this_index_takes_the_near_path_unless_lowered(idx):
    """The near path is what the other tests of the id check exercise on an index this small."""
    comp = np.asarray(idx.labels("cpu").comp)
    assert 2 * comp.nbytes <= prefilter_jit.NEAR_BYTES


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_far_path_refuses_a_bad_id_with_check_pairs_error(idx, dtype, monkeypatch):
    """Far path: a bad id in the first or a later block, either column (strided columns of one
    array, as a mapped file gives, and copies): exactly check_pairs' error; good ids: the NumPy
    prefilter's answers. An id of n is tried first: unchecked, it reads past the component array
    without a crash, so a missing check fails here rather than ending the process."""
    monkeypatch.setattr(prefilter_jit, "NEAR_BYTES", 0)
    rng = np.random.default_rng(6)
    k = 2 * BLOCK_PAIRS + 321
    good = rng.integers(0, idx.n, (k, 2)).astype(dtype)
    want = idx.query(good[:, 0].copy(), good[:, 1].copy(), backend="cpu", search=NUMPY)[0]
    np.testing.assert_array_equal(idx.query(good[:, 0], good[:, 1], backend="cpu", search=COMPILED)[0], want)
    for bad in (idx.n, idx.n + 7, 2**31 - 1, -1, -2**31):
        for col, what in ((0, "sources"), (1, "targets")):
            for at in (0, BLOCK_PAIRS + 11, k - 1):
                p = good.copy()
                p[at, col] = bad
                for s, t in ((p[:, 0], p[:, 1]), (p[:, 0].copy(), p[:, 1].copy())):
                    with pytest.raises(QueryError) as e:
                        idx.query(s, t, backend="cpu", search=COMPILED)
                    assert str(e.value) == f"{what}[{at}] out of range 0..{idx.n - 1}, got {bad}"
                    with pytest.raises(QueryError) as c:
                        idx.check_pairs(s, t, narrow=True)
                    assert str(c.value) == str(e.value)
