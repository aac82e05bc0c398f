"""A ``.h5`` graph read onto the GPU (distgrail.io.binary.read_binary_graph with a GPU backend):
``entry_rows`` on CuPy against ``np.repeat`` and its NumPy twin, bit for bit; the device read
against the host read; an index built from a ``.h5`` graph on the GPU against the CPU path's.
Skipped without a usable GPU (conftest says why)."""

from __future__ import annotations

import numpy as np
import pytest

import distgrail
from distgrail.io.binary import entry_rows, read_binary_graph, write_binary_graph
from test_binary_read import csr_cases, write_csr

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu():
    return distgrail.get_backend("gpu")


@pytest.mark.parametrize("name,indptr", csr_cases(), ids=[c[0] for c in csr_cases()])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_entry_rows_on_the_gpu_is_the_twin(gpu, name, indptr, dtype):
    ip = np.asarray(indptr, np.int64)
    want = np.repeat(np.arange(ip.size - 1, dtype=dtype), np.diff(ip))
    for limit in (2**31 - 1, 7):  # (a small limit: the scan in pieces that past 2^31 edges take)
        with gpu.on_device():
            got = gpu.to_host(entry_rows(gpu.xp, gpu.asarray(ip), dtype, limit))
        twin = entry_rows(np, ip, dtype, limit)
        assert got.dtype == twin.dtype == want.dtype and np.array_equal(got, twin) and np.array_equal(got, want), name


def test_the_device_read_is_the_host_read(gpu, tmp_path):
    rng = np.random.default_rng(3)
    n = 5000
    deg = rng.integers(0, 9, n) * (rng.random(n) < 0.7)
    ip = np.r_[0, np.cumsum(deg)].astype(np.int64)
    indices = np.concatenate([np.sort(rng.choice(n, int(k), replace=False)) for k in deg])
    path = str(tmp_path / "g.h5")
    write_csr(path, ip, indices)
    host, dev = read_binary_graph(path), read_binary_graph(path, be=gpu)
    assert not isinstance(dev.src, np.ndarray) and not isinstance(dev.dst, np.ndarray)  # on the device
    for k in ("src", "dst"):
        a, b = gpu.to_host(getattr(dev, k)), getattr(host, k)
        assert a.dtype == b.dtype and np.array_equal(a, b), k


def test_an_index_from_a_h5_graph_on_the_gpu_is_the_cpu_one(gpu, tmp_path):
    rng = np.random.default_rng(9)
    src, dst = rng.integers(0, 3000, 20000), rng.integers(0, 3000, 20000)
    g = distgrail.as_graph((np.r_[src, np.arange(2999)], np.r_[dst, np.arange(1, 3000)]))  # cycles and a chain
    path = str(tmp_path / "g.h5")
    write_binary_graph(g, path)
    a = distgrail.build_index(path, dims=4, seed=1, backend="gpu")
    b = distgrail.build_index(path, dims=4, seed=1, backend="cpu")
    assert set(a.arrays) == set(b.arrays)
    for k in b.arrays:
        x, y = np.asarray(a.arrays[k]), np.asarray(b.arrays[k])
        assert x.dtype == y.dtype and np.array_equal(x, y), k
