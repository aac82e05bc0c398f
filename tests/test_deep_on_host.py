"""A deep, narrow condensed DAG on a GPU backend is labelled on the host by the compiled sweeps
(:func:`distgrail.placement.labels_on_host`, :meth:`OneProcess.share_dag`): the GPU sweeps a level
at a time, a few launches a level (a 10 M-level chain: 41.6 s of phases on one H200 against 5.5 s
on its host; docs/benchmarks.md, session 46). The rule, the switch (on the CPU, with a stand-in
GPU backend), and on a GPU the same index as the CPU path's."""

from __future__ import annotations

import numpy as np
import pytest

import distgrail
from distgrail import placement
from distgrail.config import BuildConfig
from distgrail.gpu.backend import get_backend
from distgrail.placement import HOST_DEEP_LEVELS, HOST_LEVEL_WIDTH, OneProcess, labels_on_host
from distgrail.stages.condense import condense
from distgrail.io.read import as_graph


def test_the_rule_takes_deep_narrow_dags_only():
    pytest.importorskip("numba")
    L = HOST_DEEP_LEVELS + 1
    assert labels_on_host(L, L - 1, L)  # a chain
    assert labels_on_host(4 * L, 12 * L, L)  # 16 components and edges a level
    assert not labels_on_host(L, HOST_LEVEL_WIDTH * L, L)  # wide enough for the GPU
    assert not labels_on_host(10 * HOST_DEEP_LEVELS, 10 * HOST_DEEP_LEVELS, HOST_DEEP_LEVELS)  # not deep
    assert not labels_on_host(1_500_000, 150_000_000, 1_933)  # dag11


def test_without_the_compiled_sweeps_the_gpu_keeps_them(monkeypatch):
    import distgrail.stages.deep as deep

    monkeypatch.setattr(deep, "compiled_sweeps", lambda levels: None)
    L = HOST_DEEP_LEVELS + 1
    assert not labels_on_host(L, L - 1, L)


class _StandInGpu:
    """A backend that says it is a GPU, with host arrays: what :meth:`OneProcess.share_dag` reads."""

    name, is_gpu = "gpu", True

    def to_host(self, a, out=None):
        return np.asarray(a)


def _chain(n):
    return as_graph((np.arange(n - 1), np.arange(1, n)), n)


def test_a_deep_dag_moves_the_rest_of_the_build_to_the_cpu_backend(monkeypatch, capsys):
    pytest.importorskip("numba")
    monkeypatch.setattr(placement, "HOST_DEEP_LEVELS", 100)
    dag = condense(_chain(500))
    place = OneProcess(_StandInGpu(), BuildConfig(dims=2))
    got, _ = place.share_dag(dag, None)
    assert place.be.name == "cpu" and not place.be.is_gpu and place.run.be is place.be
    assert got.n_levels == 500 and isinstance(got.indptr, np.ndarray)
    assert "phases 1-5 on the host's compiled sweeps" in capsys.readouterr().err
    shallow = OneProcess(_StandInGpu(), BuildConfig(dims=2))
    shallow.share_dag(condense(_chain(50)), None)  # 50 levels: not deep
    assert shallow.be.is_gpu


def test_the_cpu_build_reports_one_backend():
    idx = distgrail.build_index((np.arange(9), np.arange(1, 10)), dims=2, backend="cpu")
    assert idx.meta["backend"] == "cpu" and "phases_backend" not in idx.meta


@pytest.mark.gpu
@pytest.mark.parametrize("extra", [0, 3])
def test_on_a_gpu_the_deep_dag_gives_the_cpu_paths_index(monkeypatch, tmp_path, extra):
    """A chain (plus random forward edges) past a lowered threshold: phases 1-5 on the host, the
    index file byte-identical to the CPU path's; answers equal BFS."""
    get_backend("gpu")
    monkeypatch.setattr(placement, "HOST_DEEP_LEVELS", 1000)
    n = 20000
    rng = np.random.default_rng(3)
    a = rng.integers(0, n, extra * n)
    b = np.minimum(a + rng.integers(1, 50, a.size), n - 1)
    src, dst = np.r_[np.arange(n - 1), a], np.r_[np.arange(1, n), b]
    gpu = distgrail.build_index((src, dst), num_vertices=n, dims=3, backend="gpu", output=str(tmp_path / "g.h5"))
    cpu = distgrail.build_index((src, dst), num_vertices=n, dims=3, backend="cpu", output=str(tmp_path / "c.h5"))
    assert gpu.meta["phases_backend"] == "cpu" and gpu.meta["backend"] == "gpu"
    assert (tmp_path / "g.h5").read_bytes() == (tmp_path / "c.h5").read_bytes()
    qs, qt = rng.integers(0, n, 5000), rng.integers(0, n, 5000)
    assert np.array_equal(gpu.query(qs, qt, backend="gpu")[0], qs <= qt)  # a chain: u reaches v iff u <= v
