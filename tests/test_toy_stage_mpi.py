"""The toy stage of tests/test_toy_stage.py across MPI ranks: computed once on rank 0 and shared,
the index byte for byte that of one process; on a DAG spread over the ranks a stage that does
not take one is every rank's clear error. Run under ``mpiexec -n 2`` and ``-n 3``."""

from __future__ import annotations

import numpy as np
import pytest

import distgrail
from distgrail.stages import phases
from toy.forest_children import DATASET, STAGE

pytestmark = pytest.mark.mpi


@pytest.fixture
def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _same_everywhere(comm, ok, what):
    oks = comm.allgather(bool(ok))
    assert all(oks), f"{what}: {oks}"


@pytest.mark.parametrize("full_index_on", ["all", "root"])
def test_toy_stage_across_ranks_is_the_one_process_index(comm, monkeypatch, tmp_path, full_index_on):
    monkeypatch.setattr(phases, "EXTRA_STAGES", (STAGE,))
    here = comm.Get_rank() == 0
    out = comm.bcast(str(tmp_path / "toy.h5") if here else None, root=0)
    g = distgrail.bundled_graph()
    idx = distgrail.build_index(g, dims=4, seed=3, backend="cpu", comm=comm, output=out if here else None,
                                full_index_on=full_index_on, partition="off")
    ref = distgrail.build_index(g, dims=4, seed=3, backend="cpu")
    if full_index_on == "all" or here:
        same = set(idx.arrays) == set(ref.arrays) and all(
            np.asarray(idx.arrays[k]).tobytes() == np.asarray(ref.arrays[k]).tobytes() for k in ref.arrays)
        _same_everywhere(comm, same, "the index across ranks")
    else:
        _same_everywhere(comm, idx is None, "ranks > 0 return None")
    if here:
        f = distgrail.open_index(out)
        parent = f.arrays["forest/parent"]
        want = np.bincount(parent[parent >= 0], minlength=len(parent))
        assert np.array_equal(f.arrays[DATASET], want)
    comm.Barrier()


def test_a_stage_without_a_spread_form_is_refused_on_a_spread_dag(comm, monkeypatch, tmp_path):
    from distgrail.mpi.errors import RankError

    monkeypatch.setattr(phases, "EXTRA_STAGES", (STAGE,))
    monkeypatch.setenv("DISTGRAIL_PARTITION_DAG", "ranks")
    with pytest.raises(RankError, match="does not run on a DAG spread over the ranks"):
        distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu", comm=comm, partition="on")
    comm.Barrier()


def test_toy_stage_with_the_dag_gathered_to_rank_0(comm, monkeypatch):
    monkeypatch.setattr(phases, "EXTRA_STAGES", (STAGE,))
    monkeypatch.setenv("DISTGRAIL_PARTITION_DAG", "root")
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu", comm=comm, partition="on")
    ref = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    _same_everywhere(comm, np.array_equal(idx.arrays[DATASET], ref.arrays[DATASET]), "the toy dataset")
