"""MPI smoke tests (run by launch/test.sh under mpiexec -n 2 and -n 3)."""

import numpy as np
import pytest

import distgrail


@pytest.mark.mpi(min_size=2)
def test_every_rank_builds_the_same_labels():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=3, seed=5, backend="cpu")
    mine = np.ascontiguousarray(idx.intervals).tobytes()
    all_ = comm.allgather(mine)
    ok = all(x == all_[0] for x in all_)
    ok = comm.allreduce(ok, op=MPI.LAND)
    assert ok
