"""Reading a ``.h5`` graph (distgrail.io.binary): the edges expanded from the CSR by
``entry_rows`` (the scatter-and-scan the GPU runs, here in NumPy, the twin) equal ``np.repeat``'s,
and the device branch of ``read_binary_graph`` (run here through a stand-in backend whose array
module is NumPy) gives the host read's graph and the host read's errors. The GPU runs it in
tests/test_binary_read_gpu.py."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import h5py
import numpy as np
import pytest

from distgrail.errors import GraphFormatError
from distgrail.io import binary
from distgrail.io.binary import entry_rows, read_binary_graph, write_binary_csr
from distgrail.io.graph import EdgeGraph


def csr_cases():
    """(name, indptr) of CSRs with empty rows first, last and between, one vertex, no vertex."""
    rng = np.random.default_rng(5)
    out = [("no vertex", [0]), ("one vertex, no edge", [0, 0]), ("one vertex, a self-loop", [0, 1]),
           ("empty first and last rows", [0, 0, 3, 3, 5, 5, 5]), ("one full row", [0, 0, 0, 4, 4])]
    for n in (10, 1000):
        deg = rng.integers(0, 5, n) * (rng.random(n) < 0.5)
        out.append((f"random {n}", np.r_[0, np.cumsum(deg)].tolist()))
    return out


@pytest.mark.parametrize("name,indptr", csr_cases(), ids=[c[0] for c in csr_cases()])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_entry_rows_is_repeat(name, indptr, dtype):
    ip = np.asarray(indptr, np.int64)
    want = np.repeat(np.arange(ip.size - 1, dtype=dtype), np.diff(ip))
    for limit in (2**31 - 1, 3):  # (scans in pieces of 3: what more than 2^31 edges take)
        got = entry_rows(np, ip, dtype, limit)
        assert got.dtype == want.dtype and np.array_equal(got, want), (name, limit, got, want)


def host_backend():
    """A stand-in GPU backend whose arrays are NumPy's: the device branch's steps, on the CPU."""
    return SimpleNamespace(is_gpu=True, xp=np, asarray=np.asarray, on_device=contextlib.nullcontext)


def write_csr(path, indptr, indices, n=None):
    ip = np.asarray(indptr, np.int64)
    write_binary_csr(path, ip.size - 1 if n is None else n, ip, np.asarray(indices, np.int32), name="g")


@pytest.mark.parametrize("name,indptr", csr_cases(), ids=[c[0] for c in csr_cases()])
def test_device_branch_reads_what_the_host_reads(tmp_path, monkeypatch, name, indptr):
    monkeypatch.setattr(binary, "_fits", lambda *a: True)
    ip = np.asarray(indptr, np.int64)
    n = ip.size - 1
    rng = np.random.default_rng(len(indptr))
    indices = np.concatenate([np.sort(rng.choice(n, int(k), replace=False)) for k in np.diff(ip)]) if n else []
    path = str(tmp_path / "g.h5")
    write_csr(path, ip, indices)
    host, dev = read_binary_graph(path), read_binary_graph(path, be=host_backend())
    assert isinstance(host, EdgeGraph) and dev.n == host.n == n and dev.digest == host.digest
    for k in ("src", "dst"):
        a, b = getattr(dev, k), getattr(host, k)
        assert a.dtype == b.dtype and np.array_equal(a, b), (k, a, b)
    assert dev.meta["format"] == "h5" and dev.meta["path"] == host.meta["path"]


def _damage(path, name, change):
    """A CSR edited in place, its ``csr_crc32`` dropped (a file of an earlier release): the
    structural checks must still catch it (tests/test_graph_file_crc.py checks the CRC)."""
    with h5py.File(path, "r+") as f:
        a = f[name][...]
        change(a)
        f[name][...] = a
        if "csr_crc32" in f.attrs:
            del f.attrs["csr_crc32"]


@pytest.mark.parametrize("damage,message", [
    (("csr/indptr", lambda a: a.__setitem__(2, 0)), "CSR arrays disagree with n and m"),
    (("csr/indptr", lambda a: a.__setitem__(0, 1)), "CSR arrays disagree with n and m"),
    (("csr/indptr", lambda a: a.__setitem__(0, -1)), "CSR arrays disagree with n and m"),
    (("csr/indices", lambda a: a.__setitem__(1, 9)), "successor ids outside 0..4"),
    (("csr/indices", lambda a: a.__setitem__(0, -1)), "successor ids outside 0..4"),
])
@pytest.mark.parametrize("device", [False, True])
def test_a_damaged_file_is_the_same_error_on_either_branch(tmp_path, monkeypatch, damage, message, device):
    monkeypatch.setattr(binary, "_fits", lambda *a: True)
    path = str(tmp_path / "g.h5")
    write_csr(path, [0, 2, 3, 3, 4, 5], [1, 2, 3, 4, 0])
    _damage(path, *damage)
    with pytest.raises(GraphFormatError, match=message) as e:
        read_binary_graph(path, be=host_backend() if device else None)
    assert path in str(e.value)


def test_out_of_memory_on_the_device_falls_back_to_the_host_read(tmp_path, monkeypatch):
    """The memory estimate fell short (the backend's out-of-memory error in the device branch):
    the host read, the same graph."""
    monkeypatch.setattr(binary, "_fits", lambda *a: True)
    path = str(tmp_path / "g.h5")
    write_csr(path, [0, 2, 3], [0, 1, 0])
    be = host_backend()

    def full(a):
        raise MemoryError("out of memory (a stand-in for CuPy's)")

    be.asarray = full
    g = read_binary_graph(path, be=be)
    assert isinstance(g.src, np.ndarray) and g.src.tolist() == [0, 0, 1] and g.dst.tolist() == [0, 1, 0]


def test_a_graph_that_does_not_fit_is_read_on_the_host(tmp_path, monkeypatch):
    """_fits says no (the GPU's free memory): the host read, NumPy arrays, whatever the backend."""
    monkeypatch.setattr(binary, "_fits", lambda *a: False)
    path = str(tmp_path / "g.h5")
    write_csr(path, [0, 2, 3], [0, 1, 0])
    calls = []
    be = host_backend()
    be.asarray = lambda a: calls.append(a) or a
    g = read_binary_graph(path, be=be)
    assert calls == [] and g.src.tolist() == [0, 0, 1] and g.dst.tolist() == [0, 1, 0]


@pytest.mark.parametrize("first", [1, -1])
def test_a_partitioned_read_refuses_a_csr_not_starting_at_0(tmp_path, first):
    """A rank's block of a ``.h5`` graph (``--partition on``): the same check as the whole read."""
    from distgrail.mpi.partition_read import _h5_block

    path = str(tmp_path / "g.h5")
    write_csr(path, [0, 2, 3, 3, 4, 5], [1, 2, 3, 4, 0])
    assert _h5_block(path, 1, 2)[0] == 5  # (whole: rank 1 of 2 reads its block)
    _damage(path, "csr/indptr", lambda a: a.__setitem__(0, first))
    for me in (0, 1):
        with pytest.raises(GraphFormatError, match="CSR arrays disagree with n and m"):
            _h5_block(path, me, 2)
