"""GPU labeling (kernels/forest.cu, subtree.cu, ranks.cu, intervals.cu) against the NumPy twins,
bit for bit, phase by phase.

Every phase is fed the CPU's inputs, so a mismatch names the phase that differs; a second pass
chains the GPU phases end to end. Skipped without a usable GPU (conftest says why).
"""

import numpy as np
import pytest

import distgrail
from distgrail.gpu.backend import get_backend
from distgrail.stages.condense import condense
from distgrail.errors import BackendError
from distgrail.stages.forest import parents
from distgrail.io.generate import generate
from distgrail.io.read import as_graph
from distgrail.stages.intervals import descendant_intervals
from distgrail.stages.labeling import DeviceDAG
from distgrail.stages.ranks import post_order_ranks
from distgrail.stages.subtree import subtree_sizes
from conftest import EXPECTED, graph_path

pytestmark = pytest.mark.gpu


def _same(name, a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, f"{name}: dtype {a.dtype} (gpu) != {b.dtype} (cpu)"
    assert a.shape == b.shape, f"{name}: shape {a.shape} (gpu) != {b.shape} (cpu)"
    if not np.array_equal(a, b):
        bad = np.flatnonzero((a != b).ravel())
        raise AssertionError(f"{name}: {bad.size} of {a.size} entries differ, first at flat index {bad[0]}: "
                             f"gpu {a.ravel()[bad[0]]} cpu {b.ravel()[bad[0]]}")


def check_phases(dag, rule="max-level", seed=0, dims=(0, 1, 2)):
    cpu, gpu = get_backend("cpu"), get_backend("gpu")
    dims = list(dims)
    cdag, gdag = DeviceDAG(cpu, dag), DeviceDAG(gpu, dag)
    lp = dag.level_ptr
    p = parents(cpu, cdag, seed, rule)
    _same(f"phase 1 ({rule}) parents", gpu.to_host(parents(gpu, gdag, seed, rule)), p)
    s = subtree_sizes(cpu, p, lp)
    _same("phase 2 sizes", gpu.to_host(subtree_sizes(gpu, gpu.asarray(p), lp)), s)
    post = post_order_ranks(cpu, p, s, lp, seed, dims)
    _same("phase 3 ranks", gpu.to_host(post_order_ranks(gpu, gpu.asarray(p), gpu.asarray(s), lp, seed, dims)), post)
    lo, hi = descendant_intervals(cpu, dag.indptr, dag.indices, lp, post)
    glo, ghi = descendant_intervals(gpu, gdag.indptr, gdag.indices, lp, gpu.asarray(post))
    _same("phase 4 lo", gpu.to_host(glo), lo)
    _same("phase 4 hi", gpu.to_host(ghi), hi)
    # chained end to end on the GPU
    gp = parents(gpu, gdag, seed, rule)
    gs = subtree_sizes(gpu, gp, lp)
    gpost = post_order_ranks(gpu, gp, gs, lp, seed, dims)
    glo, ghi = descendant_intervals(gpu, gdag.indptr, gdag.indices, lp, gpost)
    _same("chained lo", gpu.to_host(glo), lo)
    _same("chained hi", gpu.to_host(ghi), hi)


@pytest.mark.parametrize("rule", ["max-level", "dfs"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_graphs_all_phases(name, rule, data_dir):
    dag = condense(distgrail.read_graph(graph_path(name)))
    check_phases(dag, rule, seed=0, dims=range(5))
    check_phases(dag, rule, seed=2**64 - 7, dims=[3, 9])


GENERATED = [
    ("paper", 3000, 5, None),
    ("paper", 2000, 50, None),
    ("paper", 60000, 20, None),     # mixed: big middle levels, runs of small ones at both ends
    ("scale-free", 30000, 4, None),
    ("scale-free", 20000, 1, None),
    ("layered", 40000, 4, 8000),    # deep: every level small, one block walks them all
    ("layered", 200000, 6, 12),     # wide levels: grid launches with merge-path splits
    ("layered", 60000, 5, 300),
]


@pytest.mark.parametrize("rule", ["max-level", "dfs"])
@pytest.mark.parametrize("kind,n,deg,levels", GENERATED)
def test_generated_shapes(kind, n, deg, levels, rule):
    g = generate(kind, n, deg, 7, levels=levels)
    check_phases(condense(g), rule, seed=11, dims=range(3))


def _edges(src, dst, n=None):
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    return as_graph((src, dst), n)


def _hub_graph(k=9000):
    # vertex 0 -> 1..k -> hub k+1 -> k+2..2k+1: in- and out-degree far above HUB, in one level each
    a = np.arange(1, k + 1)
    hub = k + 1
    src = np.concatenate((np.zeros(k, np.int64), a, np.full(k, hub), a[: k // 2]))
    dst = np.concatenate((a, np.full(k, hub), hub + a, hub + a[: k // 2]))
    return _edges(src, dst)


SPECIAL = {
    "one-vertex": lambda: _edges([], [], 1),
    "isolated": lambda: _edges([0, 5], [1, 6], 12),
    "self-loops": lambda: _edges([0, 0, 1, 1, 2], [0, 1, 1, 2, 2]),
    "cycles": lambda: _edges([0, 1, 2, 2, 3, 4, 5, 6, 6], [1, 2, 0, 3, 4, 3, 6, 5, 0]),
    "duplicates": lambda: _edges([0, 0, 0, 1, 1], [1, 1, 2, 2, 2]),
    "hubs": _hub_graph,
    "chain": lambda: _edges(np.arange(20000), np.arange(1, 20001)),
    "star-roots": lambda: _edges(np.arange(1, 30001), np.zeros(30000, np.int64)),
}


@pytest.mark.parametrize("rule", ["max-level", "dfs"])
@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_special_graphs(name, rule):
    dag = condense(SPECIAL[name]())
    check_phases(dag, rule, seed=5, dims=range(2))


@pytest.mark.parametrize("hub", [2, 8])
def test_phase1_hub_launches_beside_the_row_kernels(monkeypatch, hub):
    """Phase 1's max-level rule with the host listing every row of more than ``hub`` edges while
    the kernels' own cut stays DG_HUB: the hub launches sweep rows the row kernels also sweep
    (the same max and min again), so the parents equal the twin's unless a hub launch writes a
    wrong candidate; many rows, round-robin over the teams of warps."""
    from distgrail.stages import forest as forest_mod

    monkeypatch.setattr(forest_mod, "HUB", hub)
    dag = condense(generate("scale-free", 30000, 12, 4))
    assert int((np.diff(dag.indptr) > hub).sum()) > 100
    check_phases(dag, "max-level", seed=3, dims=range(2))


@pytest.mark.parametrize("rule", ["max-level", "dfs"])
def test_phase1_hub_rows_only_by_the_hub_launches(monkeypatch, rule):
    """The kernels compiled with DG_HUB = 4 (a fresh module cache): every row of more than 4 edges
    is skipped by the row kernels and swept only by the hub launches (max-level: thousands of rows
    round-robin over the teams of warps; dfs: a block per hub), so an entry they miss changes a
    parent."""
    from distgrail import constants
    from distgrail.gpu import kernels as gk
    from distgrail.stages import forest as forest_mod

    monkeypatch.setattr(constants, "HUB", 4)
    monkeypatch.setattr(forest_mod, "HUB", 4)
    monkeypatch.setattr(gk, "_CACHE", {})
    assert "#define DG_HUB (4)" in gk.defines_header()
    dag = condense(generate("scale-free", 30000, 12, 4))
    assert int((np.diff(dag.indptr) > 4).sum()) > 1000 and int((np.diff(dag.rindptr) > 4).sum()) > 100
    check_phases(dag, rule, seed=3, dims=range(2))


def test_many_dims_in_groups_of_eight():
    dag = condense(generate("paper", 3000, 8, 3))
    check_phases(dag, "max-level", seed=1, dims=range(19))


@pytest.mark.parametrize("rule", ["max-level", "dfs"])
def test_build_index_parity(rule):
    g = generate("scale-free", 20000, 3, 2)
    a = distgrail.build_index(g, dims=4, seed=9, parent_rule=rule, backend="gpu")
    b = distgrail.build_index(g, dims=4, seed=9, parent_rule=rule, backend="cpu")
    assert a.meta["backend"] == "gpu" and b.meta["backend"] == "cpu"
    assert sorted(a.arrays) == sorted(b.arrays)
    for key in a.arrays:
        _same(key, a.arrays[key], b.arrays[key])


def test_build_index_parity_real_graph(data_dir):
    g = distgrail.read_graph(graph_path("human_dag_uniq"))
    a = distgrail.build_index(g, dims=5, backend="gpu")
    b = distgrail.build_index(g, dims=5, backend="cpu")
    for key in b.arrays:
        _same(key, a.arrays[key], b.arrays[key])


def test_too_large_graph_names_the_estimate():
    from distgrail.gpu.memory import ensure_fits
    from distgrail.stages.forest import parents_bytes

    need = parents_bytes(10**11, 10**13, "dfs")
    with pytest.raises(BackendError, match=r"needs about [0-9.]+ GiB"):
        ensure_fits(need, "phase 1 of a test DAG")


def test_sibling_keys_on_the_device_are_hash3():
    from distgrail.stages.ranks import sibling_keys, sibling_keys_cuda

    for seed, dim, C in [(0, 0, 1), (2**64 - 1, 7, 100_000), (11, 3, 4097)]:
        _same(f"sibling keys seed {seed} dim {dim}", sibling_keys_cuda(C, seed, dim).get(), sibling_keys(C, seed, dim))


def test_sibling_order_on_integer_keys_cpu_vs_gpu():
    # keys equal as float64 but distinct as integers: both sides must order them as integers
    import cupy as cp

    from distgrail.stages.ranks import offsets_in_key_order, offsets_in_key_order_cuda

    rng = np.random.default_rng(4)
    for C in (5, 1000, 300_000):
        parent = np.where(rng.random(C) < 0.05, -1, rng.integers(0, max(C // 50, 1), C)).astype(np.int64)
        size = rng.integers(1, 1000, C).astype(np.int64)
        key = np.uint64(2**64 - 2**24) + rng.permutation(C).astype(np.uint64) * np.uint64(7)
        want = offsets_in_key_order(parent, size, key)
        got = offsets_in_key_order_cuda(cp.asarray(parent), cp.asarray(size), cp.asarray(key))
        _same(f"sibling offsets C={C}", got.get(), want)


def test_many_siblings_ranks_cpu_vs_gpu():
    # one root with 200k children and a second level under some of them: phase 3 sorts big groups
    n = 200_001
    src = np.concatenate((np.zeros(n - 1, np.int64), np.arange(1, 1001)))
    dst = np.concatenate((np.arange(1, n), np.arange(n, n + 1000)))
    dag = condense(_edges(src, dst))
    check_phases(dag, "max-level", seed=2**63 + 5, dims=range(3))


def test_launchers_run_on_the_backends_device():
    import cupy as cp

    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs: a launcher must run on be.device while another device is current")
    g = generate("paper", 3000, 5, 3)
    want = distgrail.build_index(g, dims=3, backend="cpu")
    before = cp.cuda.Device().id
    try:
        be1 = get_backend("gpu", device=1)
        with cp.cuda.Device(0):
            got = distgrail.build_index(g, dims=3, backend=be1)
    finally:
        cp.cuda.Device(before).use()  # get_backend made device 1 current
    for key in want.arrays:
        _same(key, got.arrays[key], want.arrays[key])
