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
