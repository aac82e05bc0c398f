"""distgrail/arrays.py, the helpers the NumPy/CuPy stages share: ``unique`` (sorted distinct values
by a sort, not NumPy 2.3+'s hashing), ``csr_positions`` (the entries of CSR rows, and each
entry's row), ``to_host`` and ``array_module``; on a GPU, the CuPy results equal NumPy's."""

from __future__ import annotations

import os
import numpy as np
import pytest

from distgrail.arrays import array_module, csr_positions, sorted_distinct, to_host, unique
from distgrail.segments import gather_rows


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint64, np.int8])
@pytest.mark.parametrize("size,high", [(0, 5), (1, 5), (2, 1), (1000, 7), (100_000, 1 << 30)])
def test_unique_equals_numpy_unique(dtype, size, high):
    rng = np.random.default_rng(size)
    a = rng.integers(0, min(high, np.iinfo(dtype).max), size).astype(dtype)
    got = unique(np, a)
    want = np.unique(a)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_sorted_distinct_sorts_in_place_and_drops_repeats():
    a = np.array([5, 1, 5, 3, 1, 9], dtype=np.int32)
    got = sorted_distinct(np, a)
    assert got.tolist() == [1, 3, 5, 9] and got.dtype == np.int32
    assert a.tolist() == [1, 1, 3, 5, 5, 9]  # sorted in place (no copy made)
    assert sorted_distinct(np, np.zeros(0, np.int64)).size == 0 and sorted_distinct(np, np.array([7])).tolist() == [7]


def test_unique_of_a_2d_array_is_flat_and_leaves_the_input_alone():
    a = np.array([[3, 1, 3], [2, 2, 9]], dtype=np.int64)
    before = a.copy()
    assert unique(np, a).tolist() == [1, 2, 3, 9]
    np.testing.assert_array_equal(a, before)


def test_csr_positions_and_rows_equal_the_repeats():
    rng = np.random.default_rng(0)
    deg = rng.integers(0, 6, 200)
    ptr = np.concatenate(([0], np.cumsum(deg))).astype(np.int64)
    idx = rng.integers(0, 1000, int(ptr[-1]))
    rows = rng.integers(0, 200, 150)
    pos, which = csr_positions(np, ptr, rows, which=True)
    vals, cnt = gather_rows(ptr, idx, rows)
    np.testing.assert_array_equal(idx[pos], vals)
    np.testing.assert_array_equal(which, np.repeat(np.arange(rows.size), cnt))
    np.testing.assert_array_equal(csr_positions(np, ptr, rows), pos)
    empty = csr_positions(np, ptr, rows[:0], which=True)
    assert empty[0].size == 0 and empty[1].size == 0


def test_to_host_and_array_module_on_numpy():
    a = np.arange(3)
    assert to_host(a) is a and array_module(a) is np and array_module(np.int64(1)) is np and array_module(2) is np


@pytest.mark.gpu
def test_cupy_unique_and_csr_positions_equal_numpy():
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(1)
    a = rng.integers(0, 1 << 40, 50_000)
    assert array_module(cp.asarray(a)) is cp
    np.testing.assert_array_equal(to_host(unique(cp, cp.asarray(a))), unique(np, a))
    ptr = np.concatenate(([0], np.cumsum(rng.integers(0, 5, 300)))).astype(np.int64)
    rows = rng.integers(0, 300, 100)
    p, w = csr_positions(cp, cp.asarray(ptr), cp.asarray(rows), which=True)
    p0, w0 = csr_positions(np, ptr, rows, which=True)
    np.testing.assert_array_equal(to_host(p), p0)
    np.testing.assert_array_equal(to_host(w), w0)


@pytest.mark.parametrize("n", [0, 1, 1000, (3 << 20) + 7])
def test_copy_parallel_matches_numpy(monkeypatch, n):
    from distgrail import arrays

    monkeypatch.setattr(arrays, "HOST_PIECE_BYTES", 1 << 16)  # several pieces from 64 KiB on
    rng = np.random.default_rng(n)
    src = rng.integers(-(1 << 40), 1 << 40, n)
    dst = np.zeros(n, np.int64)
    arrays.copy_parallel(dst, src)
    assert np.array_equal(dst, src)
    flags = np.zeros(n, np.uint8)
    arrays.copy_parallel(flags, src > 0)  # a cast, as in the answers' copy out of the pinned slot
    assert np.array_equal(flags.view(bool), src > 0)
    if n:
        assert arrays.max_parallel(src.view(np.uint64)) == src.view(np.uint64).max()
        assert arrays.max_parallel(src) == src.max()


def test_copy_many_parallel_sends_every_piece_at_once(monkeypatch):
    """Two strided columns of a few pieces each: one submission to the host threads, every value
    copied; a zero-length copy beside them is fine."""
    from distgrail import arrays

    calls = []
    real = arrays._run_pieces
    monkeypatch.setattr(arrays, "_run_pieces", lambda fn, pieces: calls.append(len(pieces)) or real(fn, pieces))
    monkeypatch.setattr(arrays, "HOST_THREADS", 8)
    monkeypatch.setattr(arrays.cores, "usable", lambda: 8)
    pairs = np.random.default_rng(1).integers(0, 1 << 50, (1 << 16, 2))
    a, b = np.zeros(1 << 16, np.int64), np.zeros(1 << 16, np.int64)
    arrays.copy_many_parallel([(a, pairs[:, 0]), (b, pairs[:, 1]), (a[:0], pairs[:0, 0])], piece_bytes=1 << 17)
    assert np.array_equal(a, pairs[:, 0]) and np.array_equal(b, pairs[:, 1])
    assert calls == [4 + 4 + 1]  # 512 KiB per column in pieces of 128 KiB, and the empty copy


def test_copy_parallel_refuses_other_shapes():
    from distgrail.arrays import copy_parallel

    with pytest.raises(ValueError, match="1-D arrays of one length"):
        copy_parallel(np.zeros(3), np.zeros(4))


def test_parallel_pieces_cover_the_array(monkeypatch):
    from distgrail import arrays

    monkeypatch.setattr(arrays, "HOST_PIECE_BYTES", 8)
    monkeypatch.setattr(arrays.cores, "usable", lambda: 3)
    assert arrays._pieces(10, 8) == [(0, 3), (3, 6), (6, 10)]
    assert arrays._pieces(1, 8) == [(0, 1)]
    assert arrays._pieces(0, 8) == [(0, 0)]


def test_host_threads_work_in_a_forked_child(monkeypatch):
    """A child forked after the pool ran gets a pool of its own (the parent's threads are not in it)."""
    import os

    from distgrail import arrays

    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    monkeypatch.setattr(arrays, "HOST_PIECE_BYTES", 64)
    a = np.arange(10_000, dtype=np.int64)
    assert arrays.max_parallel(a) == 9999  # the pool exists in the parent
    pid = os.fork()
    if pid == 0:  # child: exit 0 only if the threaded copy works
        try:
            d = np.empty_like(a)
            arrays.copy_parallel(d, a)
            os._exit(0 if np.array_equal(d, a) else 1)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_failing_piece_is_raised_after_every_piece_ended(monkeypatch):
    from distgrail import arrays

    monkeypatch.setattr(arrays, "HOST_PIECE_BYTES", 8)
    seen = []

    def piece(i):
        seen.append(i)
        if i == 0:
            raise ValueError("piece 0")
        return i

    with pytest.raises(ValueError, match="piece 0"):
        arrays._run_pieces(piece, [(i,) for i in range(6)])
    assert sorted(seen) == list(range(6))


def test_prefault_beside_faults_the_pages_inside_a_fresh_array_only(monkeypatch, tmp_path):
    """One madvise per fresh array, over exactly the whole pages inside it (none outside), on a
    thread whose wait the caller holds; views, mappings and read-only arrays are left alone;
    the real call changes no value."""
    from distgrail import arrays

    page = os.sysconf("SC_PAGE_SIZE")
    calls = []
    monkeypatch.setattr(arrays, "_madvise_populate", lambda lo, length: calls.append((lo, length)))
    for n in (1 << 20, (3 << 20) + 17, 10 * page + 1):
        a = np.empty(n, np.uint8)
        calls.clear()
        arrays.prefault_beside(a)()
        assert len(calls) == 1
        lo, length = calls[0]
        start, end = a.ctypes.data, a.ctypes.data + a.nbytes
        assert lo % page == 0 and length % page == 0 and length > 0
        assert start <= lo and lo + length <= end  # inside the array
        assert lo - start < page and end - (lo + length) < page  # every whole page inside it
    big = np.empty(1 << 22, np.uint8)
    mapped = np.lib.format.open_memmap(tmp_path / "m.npy", mode="w+", dtype=np.uint8, shape=(1 << 22,))
    ro = np.empty(1 << 22, np.uint8)
    ro.flags.writeable = False
    calls.clear()
    for other in (big[::-1], big[page:], np.broadcast_to(np.zeros(1, np.int64), (1 << 20,)), mapped, ro,
                  np.empty(page // 2, np.uint8), np.empty(0)):
        arrays.prefault_beside(other)()
    assert calls == []
    monkeypatch.undo()
    for n in (1, 4095, 1 << 20, (3 << 20) + 17):
        a = np.arange(n, dtype=np.int64)
        before = a.copy()
        arrays.prefault_beside(a)()
        np.testing.assert_array_equal(a, before)
