"""The query-throughput benchmark's sharded row under MPI (CPU): rank 0 gets the rows, its
answers equal one process's (the benchmark checks them), mpi_seconds kept."""

from __future__ import annotations

import pytest

import distgrail

pytestmark = pytest.mark.mpi(min_size=2)


def test_sharded_rows(tmp_path_factory):
    from mpi4py import MPI

    from distgrail.benchmarks import query_floor

    comm = MPI.COMM_WORLD
    path = None
    if comm.Get_rank() == 0:
        path = str(tmp_path_factory.mktemp("qfm") / "kegg.h5")
        distgrail.build_index(distgrail.bundled_graph(), dims=2, seed=1, backend="cpu", output=path)
    path = comm.bcast(path, root=0)
    rows = query_floor.run(path, [5000, 70000], 1, "cpu", 2, comm)
    if comm.Get_rank() == 0:
        assert [(r["ranks"], r["batch"], r["step"]) for r in rows] == [(comm.Get_size(), 5000, "sharded"),
                                                                      (comm.Get_size(), 70000, "sharded")]
        assert all(r["seconds"] > 0 and set(r["mpi_seconds"]) == {"prepare", "scatter", "answer", "gather"}
                   for r in rows)
    else:
        assert rows == []
