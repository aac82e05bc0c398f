"""A ``.h5`` graph's large datasets are read in CRC blocks by a thread pool (``os.preadv`` into the
array, each block's CRC-32 as it lands), as the index reader reads its own: HDF5 read them in one
thread and the checksum was a second pass. The block size and the threshold are made small here so
that a test-sized file takes that path; what it reads, the CRC-32 it computes and its errors must
be those of the HDF5 read."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

import distgrail.indexfile.layout as layout
from distgrail.errors import GraphFormatError
from distgrail.io import binary
from distgrail.io.binary import read_binary_graph, read_condensation, write_binary_graph
from distgrail.io.graph import EdgeGraph
from distgrail.stages.condense import condense as condense_graph


def _graph(n=3000, m=40000, seed=7):
    rng = np.random.default_rng(seed)
    return EdgeGraph(n=n, src=rng.integers(0, n, m).astype(np.int32), dst=rng.integers(0, n, m).astype(np.int32))


@pytest.fixture
def blocks(small_crc_blocks):
    return small_crc_blocks


def _by_hdf5(path):
    with h5py.File(path, "r") as f:
        return f["csr/indptr"][()], f["csr/indices"][()]


@pytest.mark.parametrize("condense", [False, True])
def test_the_block_read_gives_the_hdf5_arrays_and_crc(tmp_path, blocks, condense):
    g = _graph()
    path = str(tmp_path / "g.h5")
    write_binary_graph(g, path, dag=condense_graph(g) if condense else None)
    indptr, indices = _by_hdf5(path)
    got = read_binary_graph(path)
    assert blocks[0] >= (indptr.nbytes + indices.nbytes) // 1000  # the blocks path was taken
    src = np.repeat(np.arange(g.n), np.diff(indptr))
    np.testing.assert_array_equal(got.src, src)
    np.testing.assert_array_equal(got.dst, indices)
    with h5py.File(path, "r") as f:
        assert binary._read_checked(f, ("csr/indptr", "csr/indices"), path)[1] == binary._crc_of((indptr, indices)) \
            == int(f.attrs["csr_crc32"])
    if condense:
        dag = read_condensation(path)
        ref = condense_graph(g)
        for k in ("comp", "indptr", "indices", "rindptr", "rindices", "level", "level_ptr"):
            np.testing.assert_array_equal(getattr(dag, k), getattr(ref, k), err_msg=k)


def test_a_flipped_bit_read_in_blocks_is_refused(tmp_path, blocks):
    path = str(tmp_path / "g.h5")
    write_binary_graph(_graph(), path)
    with h5py.File(path, "r") as f:
        off = f["csr/indices"].id.get_offset()
    with open(path, "r+b") as f:
        f.seek(off + 5000)
        b = f.read(1)
        f.seek(off + 5000)
        f.write(bytes([b[0] ^ 4]))
    with pytest.raises(GraphFormatError, match="csr_crc32"):
        read_binary_graph(path)
    assert blocks[0] > 0


def test_a_file_cut_inside_a_dataset_is_damaged(tmp_path, blocks):
    path = str(tmp_path / "g.h5")
    write_binary_graph(_graph(), path)
    os.truncate(path, os.path.getsize(path) - 3000)  # (HDF5 refuses it at the open: its end is recorded)
    with pytest.raises(GraphFormatError, match="damaged graph file") as e:
        read_binary_graph(path)
    assert path in str(e.value)


def test_a_block_the_file_ends_before_names_the_dataset(tmp_path, blocks, monkeypatch):
    """A block ``os.preadv`` finds past the end (the file cut after HDF5 opened it) is an error
    naming the dataset, never an array with a tail of zeros."""
    path = str(tmp_path / "g.h5")
    write_binary_graph(_graph(), path)
    with h5py.File(path, "r") as f:
        last = f["csr/indices"].id.get_offset() + f["csr/indices"].nbytes - 1  # the dataset's last byte
    real = layout.read_block
    monkeypatch.setattr(layout, "read_block", lambda fd, view, offset: -1 if offset + len(view) > last
                        else real(fd, view, offset))
    with pytest.raises(GraphFormatError, match="dataset 'csr/indices' ends past the end of the file") as e:
        read_binary_graph(path)
    assert path in str(e.value)


def test_no_descriptor_is_left_open(tmp_path, blocks):
    path = str(tmp_path / "g.h5")
    write_binary_graph(_graph(), path)
    fds = set(os.listdir("/proc/self/fd"))
    for _ in range(3):
        read_binary_graph(path)
    assert set(os.listdir("/proc/self/fd")) <= fds | {str(max(map(int, fds)) + 1)}


def test_the_files_csr_crc_from_blocks_equals_the_arrays(tmp_path, blocks):
    """A rank that reads a stored condensation but not the CSR takes the CSR's CRC-32 from the
    file's blocks, in parallel, nothing kept: the value the writer stored."""
    g = _graph(seed=3)
    path = str(tmp_path / "g.h5")
    write_binary_graph(g, path, dag=condense_graph(g))
    indptr, indices = _by_hdf5(path)
    with h5py.File(path, "r") as f:
        got = binary._file_csr_crc(f, path)
        assert got == binary._crc_of((indptr, indices)) == int(f.attrs["csr_crc32"])
    assert blocks[0] >= (indptr.nbytes + indices.nbytes) // 1000
    assert read_condensation(path) is not None  # (without the CSR's CRC given: from the file)


def test_the_files_csr_crc_names_a_dataset_the_file_ends_before(tmp_path, blocks, monkeypatch):
    path = str(tmp_path / "g.h5")
    write_binary_graph(_graph(), path)
    monkeypatch.setattr(layout, "read_block", lambda fd, view, offset: -1)
    with h5py.File(path, "r") as f, pytest.raises(GraphFormatError, match="dataset 'csr/indptr' ends past"):
        binary._file_csr_crc(f, path)


def _without_crc(path):
    """As a file of an earlier release: no CSR checksum to catch wrong bytes."""
    with h5py.File(path, "r+") as f:
        del f.attrs["csr_crc32"]


def test_a_dataset_behind_an_external_link_is_read_from_the_linked_file(tmp_path, blocks):
    """A review's finding: the block reader opened the main file, while the dataset's offset is
    one in the file an HDF5 external link names; without a CRC that read another file's bytes
    as edges. The bytes now come from the file HDF5 has open for the dataset."""
    path = str(tmp_path / "g.h5")
    write_binary_graph(_graph(), path)
    indptr, indices = _by_hdf5(path)
    with h5py.File(tmp_path / "side.h5", "w") as s:
        s.create_dataset("pad", data=np.arange(5000, dtype=np.int64))
        s.create_dataset("indices", data=indices)
    with h5py.File(path, "r+") as f:
        del f["csr/indices"]
        f["csr/indices"] = h5py.ExternalLink("side.h5", "indices")
        f.create_dataset("junk", data=np.full(200000, 7, dtype=np.int32))
    _without_crc(path)
    got = read_binary_graph(path)
    np.testing.assert_array_equal(got.dst, indices)
    assert blocks[0] > 0
    from distgrail.mpi.partition_read import _h5_block

    np.testing.assert_array_equal(_h5_block(path, 0, 1)[3], indices)


def test_a_file_replaced_while_it_is_read_gives_the_opened_files_edges(tmp_path, blocks, monkeypatch):
    """A review's finding: the graph file replaced (an atomic rename) after HDF5 opened it, and
    the blocks read from what the path named then: the new file's edges under the old one's n,
    name and digest."""
    n, m = 3000, 40000
    files = {}
    for seed, name in ((1, "g.h5"), (2, "new.h5")):
        e = np.random.default_rng(seed).choice(n * n, m, replace=False)  # (both files of one size)
        files[name] = str(tmp_path / name)
        write_binary_graph(EdgeGraph(n=n, src=(e // n).astype(np.int32), dst=(e % n).astype(np.int32)), files[name])
        _without_crc(files[name])
    old = _by_hdf5(files["g.h5"])[1]
    real = binary.vertex_count

    def replaced(f, path):
        os.replace(files["new.h5"], files["g.h5"])
        return real(f, path)

    monkeypatch.setattr(binary, "vertex_count", replaced)
    np.testing.assert_array_equal(read_binary_graph(files["g.h5"]).dst, old)


def test_the_first_failing_block_stops_the_rest(tmp_path, blocks, monkeypatch):
    """An error on one block (EIO, Ctrl-C) is raised at once, the blocks still queued not read."""
    path = str(tmp_path / "g.h5")
    write_binary_graph(_graph(m=400000), path)
    calls = [0]

    def failing(fd, view, offset):
        calls[0] += 1
        if calls[0] == 1:
            raise OSError(5, "Input/output error")
        import time

        time.sleep(0.002)
        return 0

    monkeypatch.setattr(layout, "read_block", failing)
    with pytest.raises(GraphFormatError, match="cannot read dataset 'csr/indptr' .*storage error: Input/output"):
        with h5py.File(path, "r") as f:
            binary._read_checked(f, ("csr/indptr", "csr/indices"), path)
    assert calls[0] < (1_600_000 // 1000) // 2  # (of ~1,600 blocks, most never read)
    calls[0] = 0
    write_binary_graph(_graph(m=400000), path, dag=condense_graph(_graph(m=400000)))
    with pytest.raises(GraphFormatError, match="storage error") as e:  # (a stored condensation: was a bare OSError)
        read_condensation(path)
    assert path in str(e.value)


@pytest.mark.gpu
@pytest.mark.parametrize("size", [1, 2, 3])
def test_a_ranks_block_read_onto_the_gpu_equals_the_host_read(tmp_path, size):
    """``--partition on``'s block read of a ``.h5`` graph on a GPU backend (ids checked, sources
    made on the device: partition_read._rows_on_device) gives every rank the host read's edges,
    bit for bit; a rank's rows start past row 0 (the sources offset by its first row); and an id
    past n is refused there too."""
    cp = pytest.importorskip("cupy")
    from distgrail.gpu.backend import get_backend
    from distgrail.mpi.partition_read import _h5_block

    g = _graph()
    g.src[:100] = 0  # a heavy first row, and empty rows
    g.src[100:200] = g.n - 1
    path = tmp_path / "g.h5"
    write_binary_graph(g, path)
    be = get_backend("gpu")
    for me in range(size):
        host = _h5_block(str(path), me, size)
        dev = _h5_block(str(path), me, size, be)
        assert isinstance(dev[2], cp.ndarray) and dev[2].dtype == np.int32 and dev[3].dtype == np.int32
        np.testing.assert_array_equal(cp.asnumpy(dev[2]), host[2])
        np.testing.assert_array_equal(cp.asnumpy(dev[3]), host[3])
        assert dev[:2] == host[:2]
    with h5py.File(path, "r+") as f:
        for k in [k for k in f.attrs if "crc" in k]:
            del f.attrs[k]
        ix = f["csr/indices"][()].astype(np.int64)
        ix[-1] = 2**32 + 3
        del f["csr/indices"]
        f.create_dataset("csr/indices", data=ix)
    with pytest.raises(GraphFormatError, match="successor ids outside"):
        _h5_block(str(path), size - 1, size, be)


@pytest.mark.parametrize("stored", ["<u8", ">u8", ">i8", "<u4"])
def test_row_offsets_stored_unsigned_or_big_endian_read_as_the_int64_ones(tmp_path, stored):
    """``csr/indptr`` stored as uint64 (same bytes, same CRC) crashed one process in ``np.repeat``
    (no cast from uint64 to int64; exit 1), while --partition on read it right: now the offsets are
    checked, then taken as int64, and the edges are the file's."""
    g = _graph(n=300, m=2000)
    path = tmp_path / "g.h5"
    write_binary_graph(g, path)
    want = read_binary_graph(path)
    with h5py.File(path, "a") as f:
        ip = f["csr/indptr"][()]
        del f["csr/indptr"]
        f.create_dataset("csr/indptr", data=ip.astype(stored))
        for k in [k for k in f.attrs if "crc" in k]:
            del f.attrs[k]
    got = read_binary_graph(path)
    np.testing.assert_array_equal(np.asarray(got.src), np.asarray(want.src))
    np.testing.assert_array_equal(np.asarray(got.dst), np.asarray(want.dst))
