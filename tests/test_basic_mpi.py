"""MPI smoke test (run by launch/test.sh under mpiexec -n 2 and -n 3): the API with ``comm``."""

import numpy as np
import pytest

import distgrail
import distgrail.io.pairs


@pytest.mark.mpi(min_size=2)
def test_build_index_with_comm_equals_the_one_process_index_on_every_rank():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    ref = distgrail.build_index(distgrail.bundled_graph(), dims=3, seed=5, backend="cpu")
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=3, seed=5, backend="cpu", comm=comm)
    same = sorted(ref.arrays) == sorted(idx.arrays) and all(
        np.asarray(ref.arrays[k]).dtype == np.asarray(idx.arrays[k]).dtype
        and np.asarray(ref.arrays[k]).tobytes() == np.asarray(idx.arrays[k]).tobytes() for k in ref.arrays)
    # the dimensions really were split: the same build with one dimension per rank took part
    every = comm.allgather((same, idx.timings.get("gather_labels") is not None))
    assert all(a and b for a, b in every), every
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs()) if comm.Get_rank() == 0 else (None, None)
    got, stats = idx.query(s, t, backend="cpu", comm=comm)
    assert int(got.sum()) == distgrail.BUNDLED_REACHABLE and stats.ranks == comm.Get_size()
