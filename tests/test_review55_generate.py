"""Review 55 of ``distgrail generate`` (distgrail/io/generate.py, rmat.py, writers.py, the command
line): the defects found, each pinned."""

from __future__ import annotations

import numpy as np
import pytest

from distgrail.io import rmat


class _Refused(Exception):
    pass


def test_h5_sort_starts_no_more_threads_than_its_keys_fill(monkeypatch):
    """``generate rmat --scale 12 --threads 100000 -o r.h5``: the bucket sort cut its 65,536 keys
    into 65,536 slices, each with a row of 4,096 bucket counts and places (gigabytes, where
    --threads 2 takes megabytes), and started that many threads. Slices now hold at least a few
    keys a bucket; the CSR is the same for any thread count."""
    sizes = []
    real = rmat.ThreadPoolExecutor

    def pool(workers, **kw):
        sizes.append(workers)
        if workers > 64:
            raise _Refused(f"{workers} threads for {m} keys")
        return real(workers, **kw)

    monkeypatch.setattr(rmat, "ThreadPoolExecutor", pool)
    rng = np.random.default_rng(1)
    n, m = 1 << 12, 1 << 16
    keys = (rng.integers(0, n, m).astype(np.uint64) << np.uint64(32)) | rng.integers(0, n, m).astype(np.uint64)
    want = rmat.csr_of_keys(n, keys.copy(), 2, jit=False)
    got = rmat.csr_of_keys(n, keys.copy(), 100_000)
    assert sizes and max(sizes) <= 64
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    # slices still split a graph worth it (the threads the user gave, up to the bound)
    sizes.clear()
    rmat.csr_of_keys(n, keys.copy(), 3)
    assert sizes == [3]
