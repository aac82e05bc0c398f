"""The bucket-sorted CSR of ``generate rmat -o X.h5`` (:func:`distgrail.io.rmat.csr_of_keys`) on
the cases tests/test_rmat.py leaves out: 64-bit ids (graphs of 2^31 - 1 vertices or more: the
indices then fill the keys' memory 8 bytes for 8), every edge from one source (one bucket, one
thread sorts it all), every source in the last bucket of a vertex count past a power of two,
and more threads than edges. Against the one-sort twin (``jit=False``)."""

from __future__ import annotations

import numpy as np
import pytest

import distgrail.io.graph as graph
from distgrail.io.rmat import csr_of_keys


def _same(n, s, d, threads):
    keys = (np.asarray(s, dtype=np.uint64) << np.uint64(32)) | np.asarray(d, dtype=np.uint64)
    got = csr_of_keys(n, keys.copy(), threads)
    want = csr_of_keys(n, keys.copy(), threads, jit=False)
    assert got[0].dtype == want[0].dtype == np.int64 and got[1].dtype == want[1].dtype
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    return got


def test_64_bit_ids(monkeypatch):
    monkeypatch.setattr(graph, "id_dtype", lambda n: np.int64)  # (as for n >= 2^31 - 1: an indptr of 16 GB here)
    rng = np.random.default_rng(5)
    n = 5000
    indptr, indices = _same(n, rng.integers(0, n, 30_000), rng.integers(0, n, 30_000), 3)
    assert indices.dtype == np.int64 and indices.base is not None


@pytest.mark.parametrize("n", [1, 3, 4097])
@pytest.mark.parametrize("threads", [1, 5])
def test_every_edge_from_one_source(n, threads):
    rng = np.random.default_rng(n)
    d = rng.integers(0, n, 20_000)
    indptr, indices = _same(n, np.full(d.size, n - 1), d, threads)
    assert int(indptr[-1]) == np.unique(d).size == int(indptr[n] - indptr[n - 1])


def test_sources_in_the_last_bucket_past_a_power_of_two():
    rng = np.random.default_rng(2)
    n = 4099  # 13 bits: buckets of 2 sources, 4096..4098 in the last two
    _same(n, rng.integers(4096, n, 10_000), rng.integers(0, n, 10_000), 4)


def test_more_threads_than_edges():
    indptr, indices = _same(10, [3, 3, 0], [3, 3, 9], 16)
    assert indptr.tolist() == [0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2] and indices.tolist() == [9, 3]
