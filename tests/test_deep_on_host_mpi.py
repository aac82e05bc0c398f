"""A deep, narrow DAG built across MPI ranks on GPUs is labelled on the hosts
(:meth:`distgrail.mpi.placement.AcrossRanks.share_dag`, as one process does:
tests/test_deep_on_host.py): rank 0's DAG comes to its host, every rank runs the later entries
on the CPU backend, the index is the CPU path's. On the CPU with a stand-in GPU backend (the
switch, the rule decided together), and on GPUs the whole build. Run under ``mpiexec -n 2`` and
``-n 3``."""

from __future__ import annotations

import os

import numpy as np
import pytest

import distgrail
from distgrail.config import BuildConfig
from distgrail.io.read import as_graph
from distgrail.mpi.collectives import dims_split
from distgrail.mpi.placement import AcrossRanks
from distgrail.stages import deep
from distgrail.stages.condense import condense

pytestmark = pytest.mark.mpi


class _StandInGpu:
    """A backend that says it is a GPU, with host arrays: what the switch reads of it."""

    name, is_gpu = "gpu", True

    def to_host(self, a, out=None):
        return np.asarray(a)


def _place(comm, dims=3):
    cfg = BuildConfig(dims=dims)
    return AcrossRanks(comm, False, _StandInGpu(), cfg, False, dims_split(dims, comm.Get_size()))


def _chain_dag(comm, n):
    return condense(as_graph((np.arange(n - 1), np.arange(1, n)), n)) if comm.Get_rank() == 0 else None


def _named(comm):
    return (as_graph((np.arange(1), np.arange(1)), 2) if comm.Get_rank() == 0 else None)


def test_a_deep_dag_moves_every_rank_to_the_cpu_backend(comm, monkeypatch, capsys):
    pytest.importorskip("numba")
    monkeypatch.setattr(deep, "HOST_DEEP_LEVELS", 100)
    place = _place(comm)
    dag, _ = place.share_dag(_chain_dag(comm, 500), _named(comm))
    ok = (place.be.name == "cpu" and place.run.be is place.be and not place.nccl
          and dag.n_levels == 500 and isinstance(dag.indptr, np.ndarray) and isinstance(dag.indices, np.ndarray)
          and int(dag.indices.shape[0]) == 499)
    if comm.Get_rank() == 0:
        ok = ok and isinstance(dag.comp, np.ndarray) and "phases 1-5 on the hosts' compiled sweeps" in capsys.readouterr().err
    assert all(comm.allgather(ok))


def test_a_shallow_dag_stays_on_the_gpus(comm, monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.setattr(deep, "HOST_DEEP_LEVELS", 100)
    place = _place(comm)
    place.share_dag(_chain_dag(comm, 50), _named(comm))  # 50 levels: not deep
    assert all(comm.allgather(place.be.is_gpu and place.be.name == "gpu"))


def test_a_rank_without_the_compiled_sweeps_keeps_every_rank_on_the_gpus(comm, monkeypatch):
    """The hosts' sweeps must load on every rank (a rank without them would level the chain a
    Python iteration a level): one rank's no is every rank's."""
    pytest.importorskip("numba")
    monkeypatch.setattr(deep, "HOST_DEEP_LEVELS", 100)
    if comm.Get_rank() == comm.Get_size() - 1:
        monkeypatch.setattr(deep, "host_sweeps_compiled", lambda: False)
    place = _place(comm)
    place.share_dag(_chain_dag(comm, 500), _named(comm))
    assert all(comm.allgather(place.be.is_gpu))


@pytest.mark.gpu
@pytest.mark.parametrize("partition", ["off", "on"])
def test_on_gpus_a_deep_dag_gives_the_cpu_paths_index(comm, tmp_path, monkeypatch, partition):
    """A chain with forward edges past a lowered threshold, built by the ranks on their GPUs:
    phases 1-5 on the hosts, the index (merged) the one-process CPU file byte for byte."""
    pytest.importorskip("numba")
    from distgrail.gpu.backend import get_backend
    from distgrail.mpi.binding import bind_gpu

    monkeypatch.setattr(deep, "HOST_DEEP_LEVELS", 1000)
    be = get_backend("gpu", bind_gpu(comm, "gpu", share=True))
    n = 20000
    rng = np.random.default_rng(5)
    a = rng.integers(0, n, 2 * n)
    b = np.minimum(a + rng.integers(1, 50, a.size), n - 1)
    g = (np.r_[np.arange(n - 1), a], np.r_[np.arange(1, n), b])
    d = comm.bcast(str(tmp_path) if comm.Get_rank() == 0 else None, root=0)
    out = os.path.join(d, f"gpu-{partition}.h5")
    idx = distgrail.build_index(g, num_vertices=n, dims=5, seed=4, backend=be, comm=comm, output=out,
                                layout="single", partition=partition, full_index_on="root")
    ok = True
    if comm.Get_rank() == 0:
        cpu = os.path.join(d, "cpu.h5")
        distgrail.build_index(g, num_vertices=n, dims=5, seed=4, backend="cpu", output=cpu)
        with open(cpu, "rb") as x, open(out, "rb") as y:
            ok = (x.read() == y.read() and idx.meta["backend"] == "gpu" and idx.meta["phases_backend"] == "cpu"
                  and idx.meta["transport"] == "mpi")
    assert all(comm.allgather(ok))
