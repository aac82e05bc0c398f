"""Large index datasets read in parallel blocks (distgrail/indexfile/read.py): the same arrays as
HDF5 reads, every block's CRC-32 checked, a truncated file or a damaged block refused."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

import distgrail
import distgrail.indexfile.read as ixread
from distgrail.errors import IndexFormatError
from distgrail.indexfile import layout
from distgrail.io.generate import generate


@pytest.fixture
def index_file(tmp_path):
    g = generate("scale-free", 3000, 4, seed=2)
    path = str(tmp_path / "g.h5")
    distgrail.build_index((g.src, g.dst), dims=4, backend="cpu", output=path)
    return path


def _by_hdf5(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda k, v: out.__setitem__(k, v[()]) if isinstance(v, h5py.Dataset) else None)
    return out


def test_every_dataset_read_in_blocks_equals_hdf5(index_file, monkeypatch):
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(layout, "CRC_BLOCK", 64)  # unused when reading; blocks come from the file
    calls = []
    real = ixread.parallel_read
    monkeypatch.setattr(ixread, "parallel_read", lambda *a: (calls.append(a[3]), real(*a))[1])
    _, arrays = ixread.read_index_file(index_file)
    want = _by_hdf5(index_file)
    assert set(arrays) == set(want)
    assert set(calls) == {k for k, v in want.items() if v.size}  # every non-empty dataset went in blocks
    for k, v in want.items():
        assert arrays[k].dtype == v.dtype and arrays[k].shape == v.shape
        np.testing.assert_array_equal(arrays[k], v)


def _data_range(path, name):
    with h5py.File(path, "r") as f:
        ds = f[name]
        return int(ds.id.get_offset()), int(ds.nbytes)


def test_a_damaged_block_is_a_checksum_error(index_file, monkeypatch):
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1)
    off, size = _data_range(index_file, "labels/intervals")
    with open(index_file, "r+b") as f:
        f.seek(off + size // 2)
        b = f.read(1)
        f.seek(off + size // 2)
        f.write(bytes([b[0] ^ 0x01]))
    with pytest.raises(IndexFormatError, match=r"dataset /labels/intervals .*CRC-32 mismatch"):
        ixread.read_index_file(index_file)


def test_a_block_past_the_end_of_the_file_is_refused(index_file, tmp_path):
    """HDF5 refuses a file shorter than its superblock says; should a dataset's data still end
    early (its offset damaged), the block read comes up short and the dataset is named."""
    from concurrent.futures import ThreadPoolExecutor

    off, size = _data_range(index_file, "labels/intervals")
    cut = str(tmp_path / "cut.bin")
    with open(index_file, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(off + size // 2))
    fd = os.open(cut, os.O_RDONLY)
    try:
        with h5py.File(index_file, "r") as f, ThreadPoolExecutor(4) as pool:
            arr, futs = ixread.parallel_read(index_file, fd, f["labels/intervals"], "labels/intervals",
                                                  max(1, size // 7), pool)
            values = [x.result() for x in futs]
    finally:
        os.close(fd)
    assert len(values) >= 7 and values[0] >= 0 and values[-1] == -1
    with pytest.raises(IndexFormatError, match=r"dataset /labels/intervals cannot be read \(the file ends"):
        ixread.check_block_reads(index_file, "labels/intervals", values)
    ixread.check_block_reads(index_file, "labels/intervals", values[:1])  # a full read passes


def test_which_datasets_go_in_blocks(index_file, monkeypatch):
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1)
    with h5py.File(index_file, "r") as f:
        ds = f["labels/intervals"]
        block = ds.attrs["crc32_block"]
        assert layout.can_read_in_blocks(ds, block)
        assert not layout.can_read_in_blocks(ds, 0) and not layout.can_read_in_blocks(ds, True)
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1 << 40)
    with h5py.File(index_file, "r") as f:
        assert not layout.can_read_in_blocks(f["labels/intervals"], block)
    # a chunked (fletcher32) dataset, as earlier releases wrote, is HDF5's to read
    other = os.path.join(os.path.dirname(index_file), "chunked.h5")
    with h5py.File(other, "w") as f:
        f.create_dataset("x", data=np.arange(1000, dtype=np.int32), chunks=(100,), fletcher32=True)
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1)
    with h5py.File(other, "r") as f:
        assert not layout.can_read_in_blocks(f["x"], 64)


@pytest.mark.parametrize("where", ["vertex/component", "dag/indptr", "dag/level", "labels/intervals"])
def test_value_checks_in_pieces_find_what_one_pass_finds(index_file, monkeypatch, where):
    """The range and order checks over pieces (a thread pool) catch a bad value in a later piece."""
    monkeypatch.setattr(ixread, "PIECE", 7)
    meta, arrays = ixread.read_index_file(index_file)  # passes in pieces
    a = {k: v.copy() for k, v in arrays.items()}
    flat = a[where].reshape(-1)
    k = flat.size - 2
    if where == "dag/indptr":
        flat[k] = flat[k + 1] + 1  # not non-decreasing, late in the array
    elif where == "dag/level":
        flat[k] = flat[k + 1] + 1
    elif where == "labels/intervals":
        pairs = flat.reshape(-1, 2)
        p = int(np.flatnonzero(pairs[:, 0] < pairs[:, 1])[-1])  # the last pair with min < max
        pairs[p] = pairs[p][::-1].copy()  # min > max, in a late piece (values still in range)
    else:
        flat[k] = meta["n_components"]  # component id out of range
    with pytest.raises(IndexFormatError, match=f"dataset /{where}"):
        ixread.check_index(index_file, meta, a)


def _read_with_stats(index_file, monkeypatch):
    """(meta, arrays, stats) of ``index_file`` read in blocks, the stats check_index was given."""
    seen = {}
    real = ixread.check_index
    monkeypatch.setattr(ixread, "check_index",
                        lambda p, m, a, values=True, stats=None: (seen.update(stats or {}), real(p, m, a, values, stats))[1])
    meta, arrays = ixread.read_index_file(index_file)
    return meta, arrays, seen


def test_block_statistics_are_the_arrays_own(tmp_path, monkeypatch):
    """Each block's least and greatest value (and, for intervals, whether a pair is out of order),
    taken as the block is read, over the whole array equal a pass over it; blocks of 64 bytes."""
    g = generate("scale-free", 3000, 4, seed=2)
    path = str(tmp_path / "g.h5")
    monkeypatch.setattr(layout, "CRC_BLOCK", 64)  # many blocks a dataset
    distgrail.build_index((g.src, g.dst), dims=4, backend="cpu", output=path)
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1)
    meta, arrays, stats = _read_with_stats(path, monkeypatch)
    assert set(stats) == {k for k in ixread.RANGED if arrays[k].size}
    for k, got in stats.items():
        a = arrays[k]
        assert len(got) == -(-a.nbytes // 64) > 1 and all(g is not None for g in got)
        lo, hi, unordered = ixread._whole(stats, arrays)[k]
        assert (lo, hi) == (int(a.min()), int(a.max()))
        assert unordered == (k == "labels/intervals" and bool((a[..., 0] > a[..., 1]).any()))


@pytest.mark.parametrize("where", ["vertex/component", "labels/intervals"])
def test_a_bad_value_is_found_from_the_block_statistics(index_file, monkeypatch, where):
    """A value out of range (or an interval with min > max) in the file's bytes is refused by the
    statistics its block gave as it was read; ``check_index`` trusts them instead of passing over
    the array again (given the array without the bad value, it still refuses)."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1)
    meta, clean = ixread.read_index_file(index_file)
    off, size = _data_range(index_file, where)
    a = clean[where].copy()
    flat = a.reshape(-1)
    if where == "labels/intervals":
        p = int(np.flatnonzero(flat.reshape(-1, 2)[:, 0] < flat.reshape(-1, 2)[:, 1])[-1])
        flat.reshape(-1, 2)[p] = flat.reshape(-1, 2)[p][::-1].copy()
    else:
        flat[-1] = meta["n_components"]
    with open(index_file, "r+b") as f:
        f.seek(off)
        f.write(a.tobytes())
    fd = os.open(index_file, os.O_RDONLY)
    try:
        with h5py.File(index_file, "r") as f, ThreadPoolExecutor(4) as pool:
            stats = {}
            got, futs = ixread.parallel_read(index_file, fd, f[where], where, 64, pool, stats)
            [x.result() for x in futs]
    finally:
        os.close(fd)
    np.testing.assert_array_equal(got, a)
    with pytest.raises(IndexFormatError, match=f"dataset /{where}"):
        ixread.check_index(index_file, meta, clean, stats=stats)  # (stats name the bad bytes; the arrays do not)
    with pytest.raises(IndexFormatError, match=f"dataset /{where}"):
        ixread.read_index_file(index_file)  # (the CRC-32 first: the bytes changed)
    ixread.check_index(index_file, meta, clean)  # the clean arrays pass over themselves


def test_crc32_is_zlibs():
    """The checksum the index files store, from ISA-L or zlib, is zlib's CRC-32 (with a start value)."""
    import zlib

    data = np.random.default_rng(3).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    assert layout.crc32(data) == zlib.crc32(data)
    assert layout.crc32(memoryview(data)[7:70001], 99) == zlib.crc32(memoryview(data)[7:70001], 99)


def test_an_index_replaced_after_hdf5_opened_it_is_read_from_the_opened_file(index_file, tmp_path, monkeypatch):
    """The blocks come from the file HDF5 opened (a copy of its descriptor), not from what the
    path names once the header is read: an index replaced meanwhile (``update -o`` the same name)
    was refused as damaged, its header read from one file and its blocks from the other."""
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1)
    g = generate("scale-free", 3000, 4, seed=5)
    other = str(tmp_path / "other.h5")
    distgrail.build_index((g.src, g.dst), dims=4, backend="cpu", output=other)
    want = _by_hdf5(index_file)
    real = ixread._descriptor

    def replaced_first(f, path):
        os.replace(other, path)
        return real(f, path)

    monkeypatch.setattr(ixread, "_descriptor", replaced_first)
    _, arrays = ixread.read_index_file(index_file)
    for k, v in want.items():
        np.testing.assert_array_equal(arrays[k], v)


def test_a_dataset_behind_an_external_link_is_read_by_hdf5(index_file, tmp_path, monkeypatch):
    """A large dataset an external link puts in another file: its offset is one in that file, so
    HDF5 reads it (the blocks of the index file's own bytes at that offset failed its checksum)."""
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1)
    want = _by_hdf5(index_file)
    side = str(tmp_path / "side.h5")
    with h5py.File(index_file, "r+") as f, h5py.File(side, "w") as s:
        ds = f["labels/intervals"]
        s.create_dataset("pad", data=np.arange(9000))
        s.create_dataset("intervals", data=ds[()])
        for k, v in ds.attrs.items():
            s["intervals"].attrs[k] = v
        del f["labels/intervals"]
        f["labels/intervals"] = h5py.ExternalLink("side.h5", "intervals")
    _, arrays = ixread.read_index_file(index_file)
    np.testing.assert_array_equal(arrays["labels/intervals"], want["labels/intervals"])
