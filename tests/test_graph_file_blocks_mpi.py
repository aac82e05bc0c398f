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


def _chain_file(comm, tmp_path, name="chain.h5"):
    """A chain 0 -> 1 -> ... -> 7 written with its condensation (distgrail convert)."""
    from distgrail.io.binary import write_binary_graph
    from distgrail.stages.condense import condense

    path = comm.bcast(str(tmp_path / name) if comm.rank == 0 else None, root=0)
    if comm.rank == 0:
        g = EdgeGraph(n=8, src=np.arange(7, dtype=np.int32), dst=np.arange(1, 8, dtype=np.int32))
        write_binary_graph(g, path, dag=condense(g))
    comm.Barrier()
    return path


@pytest.mark.parametrize("edit", ["tie attribute gone", "both attributes gone", "empty group"])
def test_a_stored_condensation_not_tied_to_its_csr_is_condensed_again_by_every_rank(comm, tmp_path, edit,
                                                                                     monkeypatch):
    """A stored condensation without its CRC attributes (an earlier release's file) is condensed
    again: under --partition on rank 0 condensed its own block of edges alone and indexed that
    (a chain of 8 read as 3 DAG edges on 2 ranks, 0 -> 7 unreachable, exit 0; a fuzzing reviewer)."""
    path = _chain_file(comm, tmp_path)
    if comm.rank == 0:
        with h5py.File(path, "a") as f:
            g = f["condensation"]
            if edit == "empty group":
                del f["condensation"]
                f.create_group("condensation")
            else:
                for k in (["csr_crc32"] if edit == "tie attribute gone" else ["csr_crc32", "crc32"]):
                    del g.attrs[k]
    comm.Barrier()
    for mode in ("auto", "ranks"):
        monkeypatch.setenv("DISTGRAIL_PARTITION_DAG", mode)
        idx = distgrail.build_index(path, dims=2, comm=comm, partition="on", backend="cpu")
        assert idx.C == 8 and idx.meta["n_dag_edges"] == 7, (mode, idx.C, idx.meta["n_dag_edges"])
        assert bool(idx.reachable(0, 7)) and not bool(idx.reachable(7, 0))


def test_a_tied_stored_condensation_is_still_taken(comm, tmp_path, monkeypatch):
    """The stored condensation, tied to its CSR, is what rank 0 takes: no rank runs the
    partitioned sweeps."""
    from distgrail.stages import partitioned_scc

    path = _chain_file(comm, tmp_path, "tied.h5")

    def no_sweeps(*a, **k):
        raise AssertionError("the partitioned sweeps ran on a file with a tied condensation")

    monkeypatch.setattr(partitioned_scc, "partitioned_keys", no_sweeps)
    monkeypatch.setattr(partitioned_scc, "peeled_keys", no_sweeps)
    idx = distgrail.build_index(path, dims=2, comm=comm, partition="on", backend="cpu")
    assert idx.C == 8 and idx.meta["n_dag_edges"] == 7


def test_a_damaged_chunk_is_a_damaged_file_on_every_rank_not_a_crash(comm, tmp_path):
    """A gzip chunk of csr/indices with a flipped byte: HDF5 fails to read it; one process says
    'damaged graph file', the ranks' block read raised OSError as an internal error (exit 1)."""
    path = comm.bcast(str(tmp_path / "bad.h5") if comm.rank == 0 else None, root=0)
    if comm.rank == 0:
        rng = np.random.default_rng(5)
        n, m = 500, 4000
        write_binary_graph(EdgeGraph(n=n, src=np.sort(rng.integers(0, n, m)).astype(np.int32),
                                     dst=rng.integers(0, n, m).astype(np.int32)), path)
        with h5py.File(path, "a") as f:
            ix = f["csr/indices"][()]
            del f["csr/indices"]
            f.create_dataset("csr/indices", data=ix, chunks=(64,), compression="gzip")
            off = f["csr/indices"].id.get_chunk_info(f["csr/indices"].id.get_num_chunks() - 1).byte_offset
            for k in [k for k in f.attrs if "crc" in k]:
                del f.attrs[k]
        b = bytearray(open(path, "rb").read())
        b[off + 2] ^= 0xFF
        open(path, "wb").write(bytes(b))
    comm.Barrier()
    with pytest.raises(distgrail.DistGrailError, match="damaged graph file: HDF5 cannot read it"):
        distgrail.build_index(path, dims=2, comm=comm, partition="on", backend="cpu")


def test_offsets_out_of_order_in_the_last_ranks_rows_are_refused_on_every_rank(comm, tmp_path):
    """Each rank reads and checks only its own rows' offsets: a decrease among the last rank's
    rows (its CRC dropped, as a file of an earlier release) is every rank's error."""
    path = _file(comm, tmp_path)
    if comm.rank == 0:
        with h5py.File(path, "r+") as f:
            a = f["csr/indptr"][...]
            a[-3] = a[-4] - 1
            f["csr/indptr"][...] = a
            del f.attrs["csr_crc32"]
    comm.Barrier()
    with pytest.raises(distgrail.DistGrailError, match="CSR arrays disagree with n and m"):
        distgrail.build_index(path, dims=2, comm=comm, partition="on", backend="cpu")
