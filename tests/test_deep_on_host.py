"""A deep, narrow DAG on a GPU backend is condensed (:class:`~distgrail.stages.scc.NarrowPeel`) and
labelled (:func:`distgrail.stages.deep.labels_on_host`, :meth:`OneProcess.share_dag`) on the host
by the compiled loops: the GPU trims and sweeps a level at a time (a 10 M-level chain: 41.6 s of
phases and 10.2 s of trimming on one H200 against 5.5 s and 1.7 s on its host; docs/benchmarks.md,
session 46). The rules, the switch (on the CPU, with a stand-in GPU backend), and on a GPU the
same index as the CPU path's."""

from __future__ import annotations

import numpy as np
import pytest

import distgrail
from distgrail.config import BuildConfig
from distgrail.gpu.backend import get_backend
from distgrail.placement import OneProcess
from distgrail.stages import deep
from distgrail.stages.deep import HOST_DEEP_LEVELS, HOST_LEVEL_WIDTH, labels_on_host
from distgrail.stages.scc import CudaSteps, NarrowPeel
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
    monkeypatch.setattr(deep, "host_sweeps_compiled", lambda: False)
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
    monkeypatch.setattr(deep, "HOST_DEEP_LEVELS", 100)
    dag = condense(_chain(500))
    place = OneProcess(_StandInGpu(), BuildConfig(dims=2))
    got, _ = place.share_dag(dag, None)
    assert place.be.name == "cpu" and not place.be.is_gpu and place.run.be is place.be
    assert got.n_levels == 500 and isinstance(got.indptr, np.ndarray)
    assert "phases 1-5 on the host's compiled sweeps" in capsys.readouterr().err
    shallow = OneProcess(_StandInGpu(), BuildConfig(dims=2))
    shallow.share_dag(condense(_chain(50)), None)  # 50 levels: not deep
    assert shallow.be.is_gpu


def _steps_on_numpy():
    """CudaSteps' hand-over rule on NumPy arrays (it counts the decided vertices, nothing else)."""
    s = CudaSteps.__new__(CudaSteps)
    s.xp = np
    return s


def test_a_narrow_trim_hands_over_once_its_rounds_cost_more_than_the_hosts_condensation():
    pytest.importorskip("numba")
    s, n, since = _steps_on_numpy(), 1_000_000, []
    rep = np.full(n, -1, np.int32)
    rep[:500] = 0
    assert s._hand_over(rep, 500, 2 * n, since) == 1000 and since == [500, 500]  # the first check records
    rep[:1000] = 0  # 500 rounds decided 500 vertices: narrow
    assert s._hand_over(rep, 1000, 2 * n, since) == 2000  # the rounds cost less than the host's 2 M: ask again later
    rep[:300_000] = 0
    with pytest.raises(NarrowPeel, match="after 300,000 rounds of trimming on the GPU, the last 299,000 decided 299,000"):
        s._hand_over(rep, 300_000, 2 * n, since)  # 10 x 300,000 >= 2 M
    wide, rep[:] = [], -1
    rep[:40_000] = 0
    assert s._hand_over(rep, 1000, n // 100, wide) == 2000
    rep[:80_000] = 0  # 40 vertices a round: wide, however many rounds it took; asked again later
    assert s._hand_over(rep, 2000, n // 100, wide) == 4000
    small = np.full(n, -1, np.int32)
    small[:64] = 0
    mark = []
    assert s._hand_over(small, 64, 10 ** 10, mark) == 128
    small[:128] = 0
    assert s._hand_over(small, 128, 10 ** 10, mark) == 256  # a long chain in a big graph stays on the GPU


def test_sources_decided_at_once_do_not_make_a_long_chain_after_them_look_wide():
    """A graph's isolated vertices and sources are decided in the first round: counted over all
    rounds they made the chain behind them wide, and the peel was never asked again (a chain of
    10 M behind 3 M sources: 10 M rounds on the GPU). The width is that of the latest rounds."""
    pytest.importorskip("numba")
    s, n, since = _steps_on_numpy(), 13_000_000, []
    size = n + 10_000_000  # (vertices plus edges)
    rep = np.full(n, -1, np.int32)
    rep[:3_000_000 + 65_536] = 0  # 3 M at once, then one a round
    assert s._hand_over(rep, 65_536, size, since) == 131_072  # (46 a round over all rounds: wide before)
    for r in (131_072, 262_144, 524_288, 1_048_576, 2_097_152):
        rep[:3_000_000 + r] = 0
        assert s._hand_over(rep, r, size, since) == 2 * r  # narrow, but cheaper than the host so far
    rep[:3_000_000 + 4_194_304] = 0
    with pytest.raises(NarrowPeel, match="the last 2,097,152 decided 2,097,152"):
        s._hand_over(rep, 4_194_304, size, since)  # 10 x 4.2 M >= 23 M


def test_without_the_hosts_compiled_sweeps_a_narrow_trim_stays_on_the_gpu(monkeypatch):
    """numba missing, turned off or failed: the host would level a chain a Python iteration a
    level (30x slower than the GPU's trim), so the trim is never handed over."""
    monkeypatch.setattr(deep, "host_sweeps_compiled", lambda: False)
    s, n = _steps_on_numpy(), 1_000_000
    rep = np.full(n, -1, np.int32)
    since = [1000, 1000]
    rep[:300_000] = 0
    assert s._hand_over(rep, 300_000, 2 * n, since) is None  # (raised NarrowPeel with them: above)


def test_the_probe_of_the_hosts_sweeps_neither_warns_nor_records(monkeypatch):
    """NUMBA_DISABLE_JIT: the probe says no without a warning (no NumPy sweep runs because of it),
    and a later real load still warns."""
    numba = pytest.importorskip("numba")
    import warnings

    from distgrail import jit

    monkeypatch.setattr(numba.config, "DISABLE_JIT", True)
    monkeypatch.setattr(jit, "_FAILED", {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not deep.host_sweeps_compiled()
    assert not jit._FAILED
    with pytest.warns(RuntimeWarning, match="level sweeps unavailable"):
        assert deep.compiled_sweeps(deep.DEEP_LEVELS + 1) is None


def test_a_narrow_peel_is_a_backend_error_the_condensation_falls_back_on():
    from distgrail.errors import BackendError

    e = NarrowPeel(70_000, 70_001)
    assert isinstance(e, BackendError) and (e.rounds, e.decided, e.latest) == (70_000, 70_001, 70_000)


def test_the_cpu_build_reports_one_backend():
    idx = distgrail.build_index((np.arange(9), np.arange(1, 10)), dims=2, backend="cpu")
    assert idx.meta["backend"] == "cpu" and "phases_backend" not in idx.meta


@pytest.mark.gpu
@pytest.mark.parametrize("extra", [0, 3])
def test_on_a_gpu_the_deep_dag_gives_the_cpu_paths_index(monkeypatch, tmp_path, capsys, extra):
    """A chain (plus random forward edges) past a lowered threshold: phases 1-5 on the host, the
    index file byte-identical to the CPU path's; answers equal BFS."""
    get_backend("gpu")
    monkeypatch.setattr(deep, "HOST_DEEP_LEVELS", 1000)
    n = 20000
    rng = np.random.default_rng(3)
    a = rng.integers(0, n, extra * n)
    b = np.minimum(a + rng.integers(1, 50, a.size), n - 1)
    src, dst = np.r_[np.arange(n - 1), a], np.r_[np.arange(1, n), b]
    gpu = distgrail.build_index((src, dst), num_vertices=n, dims=3, backend="gpu", output=str(tmp_path / "g.h5"))
    cpu = distgrail.build_index((src, dst), num_vertices=n, dims=3, backend="cpu", output=str(tmp_path / "c.h5"))
    assert gpu.meta["phases_backend"] == "cpu" and gpu.meta["backend"] == "gpu"
    assert "a deep, narrow graph" in capsys.readouterr().err  # (condensed on the host too: 20,000 rounds)
    assert (tmp_path / "g.h5").read_bytes() == (tmp_path / "c.h5").read_bytes()
    qs, qt = rng.integers(0, n, 5000), rng.integers(0, n, 5000)
    assert np.array_equal(gpu.query(qs, qt, backend="gpu")[0], qs <= qt)  # a chain: u reaches v iff u <= v


@pytest.mark.gpu
def test_on_a_gpu_a_long_chain_in_a_big_graph_is_condensed_there(monkeypatch, capsys):
    """A chain of 5,000 vertices of its own into a random graph of 2 M edges, the check lowered to
    1,000 rounds: the trim peels the chain a vertex a round (narrow), but its rounds cost less
    than the host's condensation of the whole graph: it stays on the GPU (no notice), and the
    index is the CPU path's."""
    get_backend("gpu")
    monkeypatch.setattr(deep, "HOST_DEEP_LEVELS", 1000)
    rng = np.random.default_rng(4)
    r, k = 200_000, 5000
    chain = np.arange(r, r + k)
    src = np.r_[chain, rng.integers(0, r, 2_000_000)]
    dst = np.r_[chain[1:], 0, rng.integers(0, r, 2_000_000)]  # (the chain's end into the random part)
    n = r + k
    gpu = distgrail.build_index((src, dst), num_vertices=n, dims=2, backend="gpu")
    assert gpu.meta["n_levels"] >= k
    # (the levels' peel over the 5,018 components is narrow too, but weighed against the host's
    # condensation of the whole graph, not of those components)
    assert "condensing on the CPU" not in capsys.readouterr().err
    cpu = distgrail.build_index((src, dst), num_vertices=n, dims=2, backend="cpu")
    for name, want in cpu.arrays.items():
        assert np.array_equal(gpu.arrays[name], want), name


@pytest.mark.gpu
def test_on_a_gpu_a_chain_behind_many_isolated_vertices_is_condensed_on_the_host(monkeypatch, capsys):
    """100,000 isolated vertices decided in the first round made the chain after them look wide
    (never handed over); the latest rounds' width sees it narrow: the host condenses it, the
    index is the CPU path's."""
    pytest.importorskip("numba")
    get_backend("gpu")
    monkeypatch.setattr(deep, "HOST_DEEP_LEVELS", 1000)
    k, n = 20000, 120000
    src, dst = np.arange(k - 1), np.arange(1, k)
    gpu = distgrail.build_index((src, dst), num_vertices=n, dims=2, backend="gpu")
    assert "condensing on the CPU: a deep, narrow graph" in capsys.readouterr().err
    cpu = distgrail.build_index((src, dst), num_vertices=n, dims=2, backend="cpu")
    for name, want in cpu.arrays.items():
        assert np.array_equal(gpu.arrays[name], want), name


@pytest.mark.gpu
def test_on_a_gpu_a_chain_finished_on_the_partitioned_root_goes_to_scipy(monkeypatch, capsys):
    """A partitioned build whose capped sweeps gather a long chain to the root
    (:func:`distgrail.stages.partitioned_scc._root_reps`): its CUDA trimming hands over as the
    one-process condensation does, to SciPy's strong components on the host; the same
    representatives."""
    pytest.importorskip("numba")
    cp = pytest.importorskip("cupy")
    from distgrail.stages import partitioned_scc

    get_backend("gpu")
    monkeypatch.setattr(deep, "HOST_DEEP_LEVELS", 1000)
    k = 20000
    s = cp.concatenate((cp.arange(k - 1, dtype=cp.int64), cp.asarray([k - 1], cp.int64)))
    d = cp.concatenate((cp.arange(1, k, dtype=cp.int64), cp.asarray([k - 100], cp.int64)))  # a cycle at the end
    got = partitioned_scc._root_reps(cp, s, d, k)
    assert "condensing on the CPU: a deep, narrow graph" in capsys.readouterr().err
    want = partitioned_scc._root_reps_scipy(cp.asnumpy(s), cp.asnumpy(d), k)
    assert np.array_equal(cp.asnumpy(got), want) and int(want[-1]) == k - 100


def test_the_partitioned_roots_narrow_peel_falls_back_to_scipy(monkeypatch, capsys):
    """:func:`distgrail.stages.partitioned_scc._root_reps` on a GPU (stand-ins here: NumPy as the
    device module, CUDA steps that raise :class:`NarrowPeel`): the notice, and SciPy's smallest
    members as int64, as the CUDA path returns them."""
    import types

    from distgrail.stages import partitioned_scc, scc

    class _Steps:
        def __init__(self, limit=2**31 - 1, narrow_rounds=None):
            assert narrow_rounds == deep.HOST_DEEP_LEVELS

        def edge_csr(self, s, d, k):
            return np.zeros(k + 1, np.int64), d

    def narrow(*a, **k):
        raise NarrowPeel(70_000, 70_000)

    monkeypatch.setattr(partitioned_scc, "_is_cupy", lambda xp: True)
    monkeypatch.setattr(scc, "CudaSteps", _Steps)
    monkeypatch.setattr(scc, "scc_reps", narrow)
    xp = types.SimpleNamespace(int32=np.int32, int64=np.int64, asnumpy=np.asarray, asarray=np.asarray)
    k = 300
    s, d = np.r_[np.arange(k - 1), k - 1], np.r_[np.arange(1, k), k - 10]  # a cycle at the end
    got = partitioned_scc._root_reps(xp, s, d, k)
    assert "condensing on the CPU: a deep, narrow graph" in capsys.readouterr().err
    assert got.dtype == np.int64 and got[:k - 10].tolist() == list(range(k - 10)) and set(got[k - 10:]) == {k - 10}


@pytest.mark.gpu
def test_on_a_gpu_a_narrow_text_file_is_read_again_for_the_host(monkeypatch, tmp_path, capsys):
    """A chain behind isolated vertices, read from a text file onto the GPU: its edges go to the
    condensation (the graph keeps none), whose narrow peel hands the graph to the host, which
    reads the file again; the index is the CPU path's."""
    pytest.importorskip("numba")
    get_backend("gpu")
    monkeypatch.setattr(deep, "HOST_DEEP_LEVELS", 1000)
    k, n = 20000, 120000
    path = tmp_path / "chain.txt"
    path.write_text("".join(f"{i} {i + 1}\n" for i in range(k - 1)))
    gpu = distgrail.build_index(str(path), num_vertices=n, dims=2, backend="gpu")
    err = capsys.readouterr().err
    assert "condensing on the CPU: a deep, narrow graph" in err and "reading chain.txt again on the host" in err
    cpu = distgrail.build_index(str(path), num_vertices=n, dims=2, backend="cpu")
    for name, want in cpu.arrays.items():
        assert np.array_equal(gpu.arrays[name], want), name
