"""``--partition on`` with a ``.h5`` graph: each rank reads its block of CSR rows in CRC blocks by
threads (``os.preadv``, each block's CRC-32 as it lands) instead of HDF5's slice read, and rank 0
joins the ranks' CRC-32 pieces into the CSR's. The block size and threshold are made small so that
a test-sized file takes that path: the ranks' edges together must be the file's, each once, and a
flipped bit in any rank's block is refused on every rank."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import distgrail
from distgrail.gpu.backend import get_backend
from distgrail.io.binary import write_binary_graph
from distgrail.io.graph import EdgeGraph
from distgrail.mpi.partition_read import read_parts

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture
def blocks(small_crc_blocks):
    return small_crc_blocks


def _file(comm, tmp_path):
    path = comm.bcast(str(tmp_path / "g.h5") if comm.rank == 0 else None, root=0)
    if comm.rank == 0:
        rng = np.random.default_rng(11)
        n, m = 2000, 30000
        write_binary_graph(EdgeGraph(n=n, src=rng.integers(0, n, m).astype(np.int32),
                                     dst=rng.integers(0, n, m).astype(np.int32)), path)
    comm.Barrier()
    return path


def test_the_ranks_blocks_read_in_parallel_are_the_files_edges(comm, tmp_path, blocks):
    path = _file(comm, tmp_path)
    g = read_parts(comm, get_backend("cpu"), path, None, "auto")
    pairs = np.stack((np.asarray(g.src, np.int64), np.asarray(g.dst, np.int64)), axis=1)
    every = comm.allgather(pairs)
    with h5py.File(path, "r") as f:
        indptr, indices = f["csr/indptr"][()], f["csr/indices"][()]
    want = np.stack((np.repeat(np.arange(indptr.size - 1), np.diff(indptr)), indices), axis=1)
    np.testing.assert_array_equal(np.concatenate(every), want)  # in rank order, each edge once
    assert all(comm.allgather(blocks[0] > 0))  # every rank took the blocks path


def test_a_flipped_bit_in_the_last_ranks_block_is_refused_everywhere(comm, tmp_path, blocks):
    path = _file(comm, tmp_path)
    if comm.rank == 0:
        with h5py.File(path, "r") as f:
            ds = f["csr/indices"]
            at = ds.id.get_offset() + ds.nbytes - 500  # in the last rank's rows
        with open(path, "r+b") as fh:
            fh.seek(at)
            b = fh.read(1)
            fh.seek(at)
            fh.write(bytes([b[0] ^ 2]))
    comm.Barrier()
    with pytest.raises(distgrail.DistGrailError, match="csr/indptr and csr/indices changed"):
        distgrail.build_index(path, dims=2, comm=comm, partition="on", backend="cpu")


def test_an_edge_count_attribute_that_disagrees_is_refused_on_every_rank(comm, tmp_path):
    """The file's ``m`` attribute against the edges csr/indices holds, as one process checks it
    (a fuzzing reviewer: ``m`` set to 3 over 4 edges was refused by one process and indexed by
    ``--partition on``)."""
    path = _file(comm, tmp_path)
    if comm.rank == 0:
        with h5py.File(path, "r+") as f:
            f.attrs["m"] = np.int64(29999)
    comm.Barrier()
    with pytest.raises(distgrail.DistGrailError, match="corrupt graph file: attribute 'm' says 29,999 edges, csr/indices holds"):
        distgrail.build_index(path, dims=2, comm=comm, partition="on", backend="cpu")


def test_a_64_bit_id_past_n_is_refused_not_wrapped_on_every_rank(comm, tmp_path):
    """An id stored as int64 that is past n but wraps into range as int32 (2^32 + 3 -> 3): one
    process refuses it; each rank's block read checked its ids after the cast and indexed the
    wrapped id in silence (a file without its CRC attribute, as earlier releases wrote)."""
    path = _file(comm, tmp_path)
    if comm.rank == 0:
        with h5py.File(path, "r+") as f:
            for k in [k for k in f.attrs if "crc" in k]:
                del f.attrs[k]
            ix = f["csr/indices"][()].astype(np.int64)
            ix[-5] = 2**32 + 3  # in the last rank's rows
            del f["csr/indices"]
            f.create_dataset("csr/indices", data=ix)
    comm.Barrier()
    with pytest.raises(distgrail.DistGrailError, match="successor ids outside 0..1999"):
        distgrail.build_index(path, dims=2, comm=comm, partition="on", backend="cpu")
