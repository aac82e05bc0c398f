"""Query pairs from ``.npy`` files (distgrail/io/pairs.py ``_npy_pairs``): the file is mapped,
each id column checked by one threaded maximum and copied out by threads; the pairs, the
expected answers and every refusal (first bad id in row order, with its row and column) are
those of reading the whole array."""

from __future__ import annotations

import numpy as np
import pytest

from distgrail.errors import GraphFormatError
from distgrail.io.pairs import read_query_pairs


@pytest.fixture(autouse=True)
def _small_pieces(monkeypatch):
    from distgrail import arrays

    monkeypatch.setattr(arrays, "HOST_PIECE_BYTES", 64)  # the threaded copies and maxima in several pieces


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint64, np.uint32, np.int16])
@pytest.mark.parametrize("order", ["C", "F"])
def test_pairs_read_as_stored(tmp_path, dtype, order):
    rng = np.random.default_rng(3)
    a = np.asarray(rng.integers(0, 100, (1001, 2)), dtype=dtype, order=order)
    path = tmp_path / "p.npy"
    np.save(path, a)
    q = read_query_pairs(path, n=100)
    assert q.sources.dtype == q.targets.dtype == np.int64 and q.expected is None
    assert np.array_equal(q.sources, a[:, 0]) and np.array_equal(q.targets, a[:, 1])
    assert q.sources.flags.c_contiguous and q.targets.flags.c_contiguous


def test_three_columns_carry_the_expected_answers(tmp_path):
    a = np.array([[0, 1, 1], [1, 0, 0], [2, 2, 1]], dtype=np.int64)
    np.save(tmp_path / "p.npy", a)
    q = read_query_pairs(tmp_path / "p.npy", n=3)
    assert q.expected.tolist() == [True, False, True] and q.sources.tolist() == [0, 1, 2]
    a[1, 2] = 7
    np.save(tmp_path / "p.npy", a)
    with pytest.raises(GraphFormatError, match=r"p\.npy\[1, 2\].*expected answer 0 or 1, got 7"):
        read_query_pairs(tmp_path / "p.npy", n=3)


@pytest.mark.parametrize("bad,where,shown", [((500, 1), "[500, 1]", "got 100"), ((7, 0), "[7, 0]", "got -1"),
                                             ((999, 0), "[999, 0]", "got 100")])
def test_the_first_bad_id_in_row_order_is_named(tmp_path, bad, where, shown):
    a = np.zeros((1000, 2), np.int64)
    a[bad] = -1 if shown == "got -1" else 100
    a[999, 1] = 100  # a later bad id: not the one named unless it is first
    np.save(tmp_path / "p.npy", a)
    with pytest.raises(GraphFormatError) as e:
        read_query_pairs(tmp_path / "p.npy", n=100)
    assert where in str(e.value) and "vertex id out of range 0..99" in str(e.value) and shown in str(e.value)


def test_without_a_vertex_count_only_wrapping_ids_are_refused(tmp_path):
    np.save(tmp_path / "p.npy", np.array([[-5, 3]], np.int64))  # signed: passed on (the index checks it)
    assert read_query_pairs(tmp_path / "p.npy").sources.tolist() == [-5]
    np.save(tmp_path / "p.npy", np.array([[0, 1], [2**64 - 1, 2]], np.uint64))
    with pytest.raises(GraphFormatError, match=r"sources\[1\] out of range .*got 18446744073709551615$"):
        read_query_pairs(tmp_path / "p.npy")


def test_empty_and_malformed_files(tmp_path):
    path = tmp_path / "p.npy"
    np.save(path, np.zeros((0, 2), np.int64))
    q = read_query_pairs(path, n=0)
    assert q.sources.size == q.targets.size == 0
    np.save(path, np.zeros((3, 4), np.int64))
    with pytest.raises(GraphFormatError, match=r"shape \(k, 2\).*got int64 \(3, 4\)"):
        read_query_pairs(path, n=5)
    np.save(path, np.zeros((3, 2), np.float64))
    with pytest.raises(GraphFormatError, match="got float64"):
        read_query_pairs(path, n=5)
    np.save(path, np.arange(2000, dtype=np.int64).reshape(1000, 2))
    path.write_bytes(path.read_bytes()[:4000])  # cut short: refused, never fewer pairs
    with pytest.raises(GraphFormatError, match="not a readable .npy array"):
        read_query_pairs(path, n=5000)


@pytest.mark.parametrize("dtype", [">i8", ">i4", ">u8"])
def test_big_endian_files(tmp_path, dtype):
    a = np.array([[1, 2], [3, 4], [0, 9]], dtype=dtype)
    np.save(tmp_path / "p.npy", a)
    q = read_query_pairs(tmp_path / "p.npy", n=10)
    assert q.sources.tolist() == [1, 3, 0] and q.targets.tolist() == [2, 4, 9]
    with pytest.raises(GraphFormatError, match=r"p\.npy\[2, 1\].*got 9"):
        read_query_pairs(tmp_path / "p.npy", n=9)


@pytest.mark.parametrize("dtype", ["<i8", "<u8", "<i4", ">i8"])
def test_rows_of_a_shard_equal_the_stored_ones(tmp_path, dtype):
    """``read_npy_rows`` (each MPI rank's shard): native 64-bit columns come back as int64 views of
    the mapped file (no copy), native int32 ones as int32 views (the GPU staging widens them),
    other byte orders as int64 copies; the values equal the stored rows either way, and a bad id
    in the shard is named by its row in the whole file."""
    from distgrail.io.pairs import read_npy_rows

    rng = np.random.default_rng(3)
    pairs = rng.integers(0, 1000, (5000, 2)).astype(dtype)
    np.save(tmp_path / "p.npy", pairs)
    s, t = read_npy_rows(tmp_path / "p.npy", 1000, 1200, 3400)
    assert s.dtype == t.dtype == (np.int32 if dtype == "<i4" else np.int64)
    np.testing.assert_array_equal(s, pairs[1200:3400, 0].astype(np.int64))
    np.testing.assert_array_equal(t, pairs[1200:3400, 1].astype(np.int64))
    native = dtype in ("<i8", "<u8", "<i4")
    assert (s.base is not None and not s.flags.c_contiguous) == native  # a strided view of the rows
    pairs[3000, 1] = 1000
    np.save(tmp_path / "bad.npy", pairs)
    with pytest.raises(GraphFormatError, match=r"bad.npy\[3000, 1\]: vertex id out of range 0..999, got 1000"):
        read_npy_rows(tmp_path / "bad.npy", 1000, 1200, 3400)


def test_mapped_pairs_are_the_files_columns(tmp_path):
    """``mapped=True`` (one-process ``query``): int64 ids checked against n stay read-only views
    of the mapped file, int32 ones int32 views; without n (nothing checked) or for other widths
    they are copied; the
    expected answers of a (k, 3) file come out the same either way; a bad id is still refused."""
    rng = np.random.default_rng(4)
    a = np.c_[rng.integers(0, 50, (300, 2)), rng.integers(0, 2, 300)].astype(np.int64)
    np.save(tmp_path / "p.npy", a)
    q = read_query_pairs(tmp_path / "p.npy", n=50, mapped=True)
    assert not q.sources.flags.writeable and not q.sources.flags.c_contiguous
    assert np.array_equal(q.sources, a[:, 0]) and np.array_equal(q.targets, a[:, 1])
    assert np.array_equal(q.expected, a[:, 2].astype(bool))
    assert read_query_pairs(tmp_path / "p.npy", mapped=True).sources.flags.c_contiguous  # no n: copied
    np.save(tmp_path / "p32.npy", a.astype(np.int32))
    q32 = read_query_pairs(tmp_path / "p32.npy", n=50, mapped=True)  # int32 views: widened by the GPU staging
    assert q32.sources.dtype == np.int32 and not q32.sources.flags.c_contiguous
    assert np.array_equal(q32.sources, a[:, 0]) and np.array_equal(q32.targets, a[:, 1])
    np.save(tmp_path / "p16.npy", a.astype(np.int16))
    assert read_query_pairs(tmp_path / "p16.npy", n=50, mapped=True).sources.flags.c_contiguous  # other widths: copied
    with pytest.raises(GraphFormatError, match=r"p.npy\[\d+, \d\]: vertex id out of range 0..9, got"):
        read_query_pairs(tmp_path / "p.npy", n=10, mapped=True)


def test_query_of_mapped_columns_checks_both_in_one_pass(tmp_path):
    """``Index.query`` of the two columns of one (k, 2) array: answers as from copies, and a bad
    id in either column still refused with its array and position."""
    import distgrail
    from distgrail.errors import QueryError

    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    rng = np.random.default_rng(9)
    pairs = rng.integers(0, idx.n, (4000, 2))
    want = idx.query(pairs[:, 0].copy(), pairs[:, 1].copy(), backend="cpu")[0]
    assert np.array_equal(idx.query(pairs[:, 0], pairs[:, 1], backend="cpu")[0], want)
    for col, what in ((0, "sources"), (1, "targets")):
        bad = pairs.copy()
        bad[1234, col] = -3 if col else idx.n
        with pytest.raises(QueryError, match=rf"{what}\[1234\] out of range"):
            idx.query(bad[:, 0], bad[:, 1], backend="cpu")


@pytest.mark.parametrize("kind", ["int64", "int32", "uint64", "three", "fortran", "big-endian", "text", "broken"])
def test_staging_layout_is_the_one_the_mapped_read_gives(tmp_path, kind):
    """``mapped_as_rows`` (the layout the GPU staging is page-locked for before the pairs are read)
    says rows exactly when the mapped read gives the two columns of one (k, 2) array, which is
    what the staging then finds (``arrays.interleaved_rows``)."""
    from distgrail.arrays import interleaved_rows
    from distgrail.io.pairs import mapped_as_rows

    a = np.random.default_rng(2).integers(0, 50, (200, 2))
    path = tmp_path / ("p.txt" if kind == "text" else "p.npy")
    if kind == "text":
        np.savetxt(path, a, fmt="%d")
    elif kind == "broken":
        path.write_bytes(b"\x93NUMPY not really")
    else:
        arr = {"int64": a, "int32": a.astype(np.int32), "uint64": a.astype(np.uint64),
               "three": np.c_[a, a[:, :1] % 2], "fortran": np.asfortranarray(a),
               "big-endian": a.astype(">i8")}[kind]
        np.save(path, arr)
    rows = mapped_as_rows(path)
    assert rows == (kind in ("int64", "uint64", "int32"))
    if kind == "broken":
        with pytest.raises(GraphFormatError):
            read_query_pairs(path, n=50, mapped=True)
        return
    q = read_query_pairs(path, n=50, mapped=True)
    assert (interleaved_rows(q.sources, q.targets) is not None) == rows


def test_a_file_named_npy_that_is_not_one_is_refused_without_numpys_pickle_advice(tmp_path):
    """np.load takes a file without NumPy's magic for a pickle and advises loading it unsafely
    (``allow_pickle=``): the reader names the file and what it starts with instead."""
    from distgrail.io.pairs import read_query_pairs

    path = tmp_path / "p.npy"
    path.write_bytes(b"0 1\n2 3\n")
    with pytest.raises(GraphFormatError, match="not a .npy array: it starts with '0 1") as e:
        read_query_pairs(path, n=10)
    assert "pickle" not in str(e.value) and str(path) in str(e.value)
