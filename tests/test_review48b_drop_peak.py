"""drop_in_pieces (CudaSteps.mapped_csr's drop of the sentinel keys before the condensed CSR's
sort) must not hold its result twice: with one piece it wrote ``a[a != value]`` (a whole second
copy of the result) into the preallocated array, so beside the keys it held the mask, that copy
and the array (with CuPy also the mask's int32 scan). Where close to half the keys stay (the
``most`` threshold), mapped_csr's peak was then about 25 bytes an edge against the old whole
sort's 20 (keys, the sort's second buffer, the old CSR's column array): above
stages.condense.condense_bytes' estimate. Measured on NumPy by tracemalloc (NumPy's buffers are
traced)."""

import tracemalloc

import numpy as np
import pytest

from distgrail.gpu import memory
from distgrail.gpu.memory import drop_in_pieces
from distgrail.stages.csr_keys import SENTINEL


def _peak_beyond(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn()
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("limit", [2**31 - 1, 3 << 14])
def test_drop_holds_its_result_once(monkeypatch, limit):
    monkeypatch.setattr(memory, "SELECT_CHUNK_MIN", 1 << 10)
    m = 1 << 17
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2**40, m).astype(np.uint64)
    a[rng.random(m) < 0.5] = np.uint64(SENTINEL)  # about half stay: mapped_csr's threshold
    s = np.uint64(SENTINEL)
    got, peak = _peak_beyond(lambda: drop_in_pieces(np, a, s, limit, most=m // 2))
    assert np.array_equal(got, a[a != s])
    # the result, and the working memory of one chunk (about a sixteenth of the keys)
    assert peak <= got.nbytes + a.nbytes // 16 * 2 + (64 << 10), (peak, got.nbytes)
