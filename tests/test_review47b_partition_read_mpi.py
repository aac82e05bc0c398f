"""Review of the partitioned ``.h5`` read (:func:`distgrail.mpi.partition_read._h5_block`): row
pointers stored as unsigned 64-bit integers (another tool's file) whose value at a rank's
boundary row does not fit a signed one. Bisection lands on such a value (it is past every
block's first edge); the rank whose block ends there must refuse the file as a corrupt graph,
as one process does (its whole array cast and checked), not fail on the cast with an
OverflowError, and no rank may take the value, cast, as its first edge. Run under ``mpiexec -n
2`` and ``-n 3``."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import distgrail
from distgrail.errors import GraphFormatError
from distgrail.io.binary import read_binary_graph, write_binary_graph
from distgrail.io.graph import EdgeGraph
from distgrail.mpi.partition_read import _h5_block

pytestmark = pytest.mark.mpi

HUGE = 2**64 - 1


def _file(comm, tmp_path):
    """A graph of 4 vertices and 6 edges whose interior row pointers are all ``HUGE`` (uint64)."""
    path = comm.bcast(str(tmp_path / "u64.h5") if comm.rank == 0 else None, root=0)
    if comm.rank == 0:
        src, dst = np.array([0, 0, 1, 1, 2, 3], np.int32), np.array([1, 2, 2, 3, 3, 0], np.int32)
        write_binary_graph(EdgeGraph(n=4, src=src, dst=dst), path)
        with h5py.File(path, "r+") as f:
            m = int(f["csr/indices"].shape[0])
            del f["csr/indptr"]
            f["csr/indptr"] = np.array([0, HUGE, HUGE, HUGE, m], np.uint64)
            f.attrs.pop("csr_crc32", None)  # (another tool's file: no CRC to catch it)
    comm.Barrier()
    return path


def test_one_process_refuses_it_as_a_corrupt_graph(comm, tmp_path):
    path = _file(comm, tmp_path)
    with pytest.raises(GraphFormatError, match="CSR arrays disagree with n and m"):
        read_binary_graph(path)


def test_each_rank_refuses_a_pointer_past_int64_or_takes_none_of_it(comm, tmp_path):
    """Every rank's block, in turn: a GraphFormatError where its rows reach the huge pointers,
    never another error, and never a first edge outside 0..m."""
    path = _file(comm, tmp_path)
    size = comm.Get_size()
    for me in range(size):
        try:
            _h5_block(path, me, size)
        except GraphFormatError as e:
            assert "CSR arrays disagree with n and m" in str(e)
        else:
            raise AssertionError(f"rank {me} of {size} took a block of the damaged pointers")


def test_the_partitioned_build_refuses_it_on_every_rank(comm, tmp_path):
    path = _file(comm, tmp_path)
    with pytest.raises(distgrail.DistGrailError, match="CSR arrays disagree with n and m"):
        distgrail.build_index(path, dims=2, comm=comm, partition="on", backend="cpu")


def test_one_ranks_failed_upload_of_its_edges_is_every_ranks_error(comm, tmp_path):
    """The upload of a rank's edges (a GPU backend with 64-bit ids: out of memory) is shared:
    every rank raises, none waits in the next collective."""
    from distgrail.gpu.backend import get_backend
    from distgrail.mpi.errors import RankError
    from distgrail.mpi.partition_read import read_parts

    path = comm.bcast(str(tmp_path / "up.h5") if comm.rank == 0 else None, root=0)
    if comm.rank == 0:
        from distgrail.io.binary import write_binary_graph
        from distgrail.io.graph import EdgeGraph

        write_binary_graph(EdgeGraph(n=50, src=np.arange(49, dtype=np.int32), dst=np.arange(1, 50, dtype=np.int32)), path)
    comm.Barrier()
    class _Refusing:  # (the last rank's backend: its upload fails)
        is_gpu, name = False, "cpu"

        def asarray(self, a, dtype=None):
            raise MemoryError("out of memory uploading the edges")

    be = _Refusing() if comm.rank == comm.size - 1 else get_backend("cpu")
    with pytest.raises(RankError, match="out of memory uploading the edges"):
        read_parts(comm, be, path, None, "auto")
