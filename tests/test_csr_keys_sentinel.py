"""The dropped edge's key (``SENTINEL``) is kernels/condense.cu's ``DG_SENTINEL``, and
:func:`~distgrail.gpu.memory.drop_in_pieces` (CudaSteps.mapped_csr's selection of the keys
between components, on NumPy here) equals one whole selection for any piece size."""

import os
import re

import numpy as np
import pytest

from conftest import ROOT
from distgrail.gpu.memory import drop_in_pieces
from distgrail.stages.csr_keys import SENTINEL


def test_sentinel_is_the_kernels():
    src = open(os.path.join(ROOT, "kernels", "condense.cu")).read()
    m = re.search(r"#define DG_SENTINEL 0x([0-9A-Fa-f]+)ULL", src)
    assert m and int(m.group(1), 16) == SENTINEL == 2**64 - 1


@pytest.mark.parametrize("limit", [1, 3, 7, 2**31 - 1])
def test_drop_in_pieces_is_one_selection(limit):
    rng = np.random.default_rng(limit)
    s = np.uint64(SENTINEL)
    for size, share in ((0, 0.5), (1, 1.0), (25, 0.0), (40, 0.9), (41, 0.3)):
        a = rng.integers(0, 2**40, size).astype(np.uint64)
        a[rng.random(size) < share] = s
        got = drop_in_pieces(np, a, s, limit)
        assert got.dtype == np.uint64 and np.array_equal(got, a[a != s])
        kept = int(np.count_nonzero(a != s))
        same = drop_in_pieces(np, a, s, limit, most=kept - 1) if kept else None
        assert kept == 0 or same is a  # more would stay than asked: the input itself
        assert np.array_equal(drop_in_pieces(np, a, s, limit, most=kept), a[a != s])


@pytest.mark.parametrize("limit", [1, 4, 2**31 - 1])
def test_a_sorted_csrs_self_loops_dropped_without_a_sort(limit):
    """CudaSteps._without_self_loops (the GPU's way for a sorted, distinct edge list with
    self-loops: a .h5 graph), run on NumPy arrays: the twin's CSR, which sorts keys."""
    from types import SimpleNamespace

    from distgrail.stages.csr_keys import keys_csr_numpy
    from distgrail.stages.scc import CudaSteps

    rng = np.random.default_rng(limit)
    n = 40
    keys = np.unique(rng.integers(0, n, 300) * n + rng.integers(0, n, 300))
    keys = np.union1d(keys, np.array([0, 5 * n + 5, (n - 1) * n + n - 1]))  # self-loops: first, inside, last row
    src, dst = (keys // n).astype(np.int32), (keys % n).astype(np.int32)
    assert (src == dst).sum() >= 3
    ptr = np.searchsorted(src, np.arange(n + 1)).astype(np.int64)
    steps = SimpleNamespace(xp=np, limit=limit)
    pair = [src, dst]
    got = CudaSteps._without_self_loops(steps, ptr, pair, n)
    assert pair == []  # (handed over: the pair is emptied)
    want = keys_csr_numpy(src, dst, n)  # (the twin sorts in one piece; small limits refuse its rows)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and got[1].dtype == want[1].dtype
