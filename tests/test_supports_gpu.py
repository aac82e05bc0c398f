"""Phase 5 on the GPU (kernels/supports.cu) against its NumPy twin, bit for bit, and the support
query steps on the GPU against the CPU backend."""

import numpy as np
import pytest

import distgrail
from distgrail.gpu.backend import get_backend
from distgrail.io.generate import generate
from distgrail.stages.condense import condense
from distgrail.stages.labeling import DeviceDAG
from distgrail.stages import supports as sup
from distgrail.stages.support_schedule import hub_rows_numpy
from distgrail.query.stats import SearchOptions
from distgrail.stages.supports import (choose_supports, choose_supports_cuda, choose_supports_numpy,
                                       support_masks_cuda, support_masks_numpy)
from test_query_steps import GRAPHS, indexed, pairs

pytestmark = pytest.mark.gpu

#: the CPU backend's forward search: same search rounds as the GPU
FORWARD = SearchOptions(cpu_search="forward")


def swept(d, ids, **kw):
    """((out, in), run record) of one GPU mask sweep."""
    pending = support_masks_cuda(get_backend("gpu"), d, ids, wait=False, **kw)
    return pending.result(), pending.run


def big_graphs():
    return {
        "paper-dense-20k": generate("paper", 20_000, 60, seed=1),  # large levels: grid launches
        "layered-deep": generate("layered", 30_000, 3, seed=2, levels=3000),  # small levels: one-block runs
        "chain": distgrail.as_graph((np.arange(9999), np.arange(1, 10000))),
        # hub rows both ways: 0 -> 1..20000 -> 20001, plus a cycle of 100 and isolated vertices
        "hubs": distgrail.as_graph((np.concatenate([np.zeros(20000, np.int64), np.arange(1, 20001),
                                                    np.arange(20002, 20102)]),
                                    np.concatenate([np.arange(1, 20001), np.full(20000, 20001),
                                                    np.r_[np.arange(20003, 20102), 20002]])), num_vertices=20200),
        "one-scc": distgrail.as_graph((np.arange(100), (np.arange(100) + 1) % 100)),
        "hubs-mixed": hubs_mixed(),
    }


def hubs_mixed(seed=0):
    """Hub rows on levels that also hold ordinary rows with edges (the row units cover the hubs and
    must skip them): 0 -> 8,000 children beside 99 small sources, a middle hub 5000 -> 4,999
    children, a sink with 9,400 parents, random forward edges and a cycle."""
    r = np.random.default_rng(seed)
    a = r.integers(100, 9000, 20000)
    src = [np.zeros(8000, np.int64), r.integers(1, 100, 600), a, np.full(4999, 5000), np.arange(100, 9500),
           r.integers(100, 10000, 300), np.arange(10100, 10200)]
    dst = [np.arange(100, 8100), r.integers(100, 10000, 600), np.minimum(a + r.integers(1, 1000, 20000), 9999),
           np.arange(5001, 10000), np.full(9400, 10000), r.integers(10001, 10100, 300),
           np.r_[np.arange(10101, 10200), 10100]]
    return distgrail.as_graph((np.concatenate(src), np.concatenate(dst)), num_vertices=10300)


@pytest.mark.parametrize("name", sorted(GRAPHS) + ["paper-dense-20k", "layered-deep", "chain", "hubs", "hubs-mixed"])
@pytest.mark.parametrize("K", [1, 64, 200])
def test_mask_sweeps_bit_for_bit(name, K):
    import cupy as cp

    g = GRAPHS[name] if name in GRAPHS else big_graphs()[name]
    dag = condense(g)
    ids = choose_supports(dag, K, seed=2)
    want = support_masks_numpy(dag, ids)
    got = support_masks_cuda(get_backend("gpu"), dag, ids)
    for w, gt in zip(want, got):
        assert isinstance(gt, cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(gt), w)
    if ids.size > 64:  # a block of whole words, from the labeling's device DAG
        dd = DeviceDAG(get_backend("gpu"), dag)
        blk = support_masks_cuda(get_backend("gpu"), dd, ids, block=(64, ids.size))
        for w, gt in zip(want, blk):
            np.testing.assert_array_equal(cp.asnumpy(gt), w[:, 1:])


@pytest.mark.parametrize("name", ["paper-dense-20k", "layered-deep", "chain", "hubs", "hubs-mixed", "one-scc"])
@pytest.mark.parametrize("mode,out_mode", [("push", "pull"), ("pull", "push")])
def test_one_side_alone_bit_for_bit(name, mode, out_mode):
    """One side swept alone (``sides``, an MPI rank's share of a word: distgrail.mpi.phase5): that
    side's masks bit for bit, the other (C, 0), and fewer units than both sides take."""
    import cupy as cp

    dag = condense(graph(name))
    ids = choose_supports(dag, 64, seed=3)
    want = support_masks_numpy(dag, ids)
    _, both = swept(dag, ids, mode=mode, out_mode=out_mode)
    for k, side in enumerate(sup.SIDES):
        got, run = swept(dag, ids, mode=mode, out_mode=out_mode, sides=(side,))
        np.testing.assert_array_equal(cp.asnumpy(got[k]), want[k])
        assert got[1 - k].shape == (dag.C, 0)
        assert run["units"] <= both["units"]


def device_dag(dag):
    """The DAG with every array on the GPU (as condense_cuda leaves it; level_ptr on the host)."""
    import dataclasses

    import cupy as cp

    return dataclasses.replace(dag, **{k: cp.asarray(getattr(dag, k)) for k in
                                       ("comp", "indptr", "indices", "rindptr", "rindices", "level")})


ALL = sorted(GRAPHS) + ["paper-dense-20k", "layered-deep", "chain", "hubs", "hubs-mixed", "one-scc"]


def graph(name):
    return GRAPHS[name] if name in GRAPHS else big_graphs()[name]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("mode,out_mode", [("push", "pull"), ("pull", "pull"), ("push", "push"), ("pull", "push")])
@pytest.mark.parametrize("schedule", ["tickets", "levels"])
def test_every_mode_and_schedule_bit_for_bit(name, mode, out_mode, schedule):
    import cupy as cp

    from distgrail.stages.support_schedule import support_schedule

    dag = condense(graph(name))
    ids = choose_supports(dag, 130, seed=3)
    want = support_masks_numpy(dag, ids)
    for d in (dag, device_dag(dag)):
        got, run = swept(d, ids, mode=mode, out_mode=out_mode, schedule=schedule)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(cp.asnumpy(g), w)
        many = dag.n_levels > 1
        assert run["pull"] == (mode == "pull" and many) and run["schedule"] == schedule
        assert run["push_out"] == (out_mode == "push" and many)
        if many and run["units"]:
            optr = dag.rindptr if out_mode == "push" else dag.indptr
            iptr = dag.indptr if mode == "push" else dag.rindptr
            nh = 1 if (mode == "push") != (out_mode == "push") else 2  # dg_support_hubs once per CSR read
            assert run["launches"] == nh + (3 if schedule == "tickets" else 2 + np.unique(
                support_schedule(dag.level_ptr, optr[dag.level_ptr], iptr[dag.level_ptr],
                                 mode == "push", push_out=out_mode == "push", max_group=sup.SWEEP_MAX_GROUP,
                                 out_hubs=hub_rows_numpy(optr), in_hubs=hub_rows_numpy(iptr))[:, 0]).size)
            assert run["syncs"] == (2 if schedule == "tickets" else 1)


@pytest.mark.parametrize("name", ALL)
def test_expand_kernel_equals_twin(name):
    """dg_support_expand turns the schedule's descriptors into the same units as expand_schedule."""
    import cupy as cp

    from distgrail.gpu.sweep import kernel
    from distgrail.stages.support_schedule import expand_schedule, schedule_descriptors

    dag = condense(graph(name))
    lp = dag.level_ptr
    for push, small, mg, he in ((True, 4096, 16, 10**9), (False, 0, 32, 10**9), (True, 50, 8, 10**9), (True, 0, 16, 2),
                                (False, 50, 8, 5)):  # he: hub rows above he edges (chunks of he)
        iptr = dag.indptr if push else dag.rindptr
        desc = schedule_descriptors(lp, dag.indptr[lp], iptr[lp], push, small=small, max_group=mg,
                                    out_hubs=hub_rows_numpy(dag.indptr, he), in_hubs=hub_rows_numpy(iptr, he),
                                    hub_edges=he)
        want = expand_schedule(desc)
        if want.shape[0] == 0:
            continue
        n = desc[:, 9]
        got = cp.full(want.shape, -1, dtype=cp.int32)
        kernel("supports", "dg_support_expand")((3,), (64,), (cp.asarray(desc), cp.asarray(np.cumsum(n) - n),
                                                             np.int32(desc.shape[0]), np.int64(want.shape[0]), got))
        np.testing.assert_array_equal(cp.asnumpy(got), want)


@pytest.mark.parametrize("name", ALL)
def test_hub_kernel_equals_twin(name):
    """dg_support_hubs (through plan_reads, the launcher's one wait) finds the rows of more than
    SWEEP_HUB_EDGES edges of each CSR, with their edge counts, as hub_rows_numpy does."""
    import cupy as cp

    from distgrail.gpu.sweep import kernel
    from distgrail.stages.support_schedule import plan_reads

    dag = condense(graph(name))
    lp = dag.level_ptr
    f = (cp.asarray(dag.indptr), cp.asarray(dag.indices))
    r = (cp.asarray(dag.rindptr), cp.asarray(dag.rindices))
    for o, i, nh in ((f, f, 1), (f, r, 2), (r, f, 2)):
        ends, hubs, launches = plan_reads(cp, kernel, cp.asarray(lp), o, i, dag.C, 7)
        assert launches == (nh if dag.C else 0)
        np.testing.assert_array_equal(ends, np.stack((cp.asnumpy(o[0])[lp], cp.asnumpy(i[0])[lp])))
        for got, side in zip(hubs, (o, i)):
            want = hub_rows_numpy(cp.asnumpy(side[0]))
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)
    if name == "hubs":  # 0 has 20,000 children, 20,001 as many parents: one hub on each CSR
        assert hub_rows_numpy(dag.indptr)[0].size == 1 and hub_rows_numpy(dag.rindptr)[0].size == 1


@pytest.mark.parametrize("name", ALL)
def test_default_pushes_and_auto_pulls_only_with_a_device_reverse_csr(name):
    import cupy as cp

    dag = condense(graph(name))
    ids = choose_supports(dag, 64, seed=0)
    want = support_masks_numpy(dag, ids)
    for d in (dag, device_dag(dag)):  # the default pushes in and pulls out: nothing more uploaded
        got, run = swept(d, ids)
        assert not run["pull"] and not run["push_out"]
        for w, g in zip(want, got):
            np.testing.assert_array_equal(cp.asnumpy(g), w)
    got, run = swept(dag, ids, mode="auto")  # host DAG: push
    assert not run["pull"]
    for w, g in zip(want, got):
        np.testing.assert_array_equal(cp.asnumpy(g), w)
    dd = device_dag(dag)
    got, run = swept(dd, ids, mode="auto")
    assert run["pull"] == (dag.n_levels > 1)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(cp.asnumpy(g), w)
    # the labeling's DeviceDAG over a device DAG pulls too
    got, run = swept(DeviceDAG(get_backend("gpu"), dd), ids, mode="auto")
    assert run["pull"] == (dag.n_levels > 1)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(cp.asnumpy(g), w)


@pytest.mark.parametrize("name", ALL)
def test_choice_on_the_gpu_equals_numpy(name):
    dag = condense(graph(name))
    dd = device_dag(dag)
    for K in (1, 3, 64, 257, dag.C):
        K = min(K, dag.C)
        for seed in (0, 11):
            want = choose_supports_numpy(dag, K, seed)
            np.testing.assert_array_equal(choose_supports_cuda(dd, K, seed), want)
            got = choose_supports(dd, K, seed)  # the public entry picks the GPU for a device DAG
            np.testing.assert_array_equal(got, want)
            assert got.dtype == choose_supports(dag, K, seed).dtype
    import dataclasses

    bare = dataclasses.replace(dd, rindptr=None, rindices=None)  # in-degrees counted on the GPU
    np.testing.assert_array_equal(choose_supports(bare, 64, 2), choose_supports(dag, 64, 2))


def test_build_on_a_gpu_condensed_dag_equals_cpu():
    from distgrail.stages.supports import build_supports, start_supports

    dag = condense(big_graphs()["paper-dense-20k"])
    ids_c, out_c, in_c = build_supports(dag, 64, 5, get_backend("cpu"))
    started = start_supports(device_dag(dag), 64, 5, get_backend("gpu"))
    ids_g, out_g, in_g = started.result()
    np.testing.assert_array_equal(ids_g, ids_c)
    np.testing.assert_array_equal(out_g, out_c)
    np.testing.assert_array_equal(in_g, in_c)
    run = started.masks.run
    assert not run["pull"] and run["launches"] == 4 and run["syncs"] == 2  # seed, hubs, expand, sweep


@pytest.mark.parametrize("name", ["paper-dense-20k", "layered-deep", "hubs"])
def test_phase5_beside_phases_1_to_4_is_exact(name):
    """As build.py runs it: phase 5 started on its own stream, phases 1-4 on the current one in
    between, masks read after: the same bytes as the CPU twin, and the sweep had not been waited
    for when start_supports returned (its error flag is read by result())."""
    from distgrail.stages.labeling import build_forest, label_dimensions
    from distgrail.stages.supports import build_supports, start_supports

    dag = condense(big_graphs()[name])
    dd = device_dag(dag)
    be = get_backend("gpu")
    started = start_supports(dd, 200, 3, be)
    assert isinstance(started.masks, sup.PendingMasks) and started.masks.stream is not None
    assert started.masks.stream.ptr != be.xp.cuda.get_current_stream().ptr
    forest = build_forest(dd, 3, "max-level", be)
    label_dimensions(dd, forest, range(3), 3, be, {})
    ids_g, out_g, in_g = started.result()
    ids_c, out_c, in_c = build_supports(dag, 200, 3, get_backend("cpu"))
    np.testing.assert_array_equal(ids_g, ids_c)
    np.testing.assert_array_equal(out_g, out_c)
    np.testing.assert_array_equal(in_g, in_c)


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("K", [0, 1, 64, 200])
def test_support_steps_same_as_cpu(name, K):
    g = GRAPHS[name]
    idx = indexed(g, K, dims=4)
    s, t = pairs(g, 5000, seed=K)
    a_cpu, st_cpu = idx.query(s, t, backend="cpu", search=FORWARD)
    a_gpu, st_gpu = idx.query(s, t, backend="gpu")
    np.testing.assert_array_equal(a_gpu, a_cpu)
    assert st_gpu.steps == st_cpu.steps
    assert st_gpu.reachable == st_cpu.reachable
    if st_gpu.grid_searched == 0:  # pairs handed to the grid-wide search count bidirectional rounds
        assert st_gpu.search_rounds == st_cpu.search_rounds


def test_gpu_labels_are_compact():
    import cupy as cp

    idx = indexed(GRAPHS["paper"], 64, dims=5)
    L = idx.labels("gpu")
    assert L.comp.dtype == cp.int32 and L.indices.dtype == cp.int32 and L.indptr.dtype == cp.int64
    assert L.rec.dtype == cp.int32 and L.rec.shape == (idx.C, 20)
    assert L.level is None and L.lo is None and L.out is None



def test_build_runs_phase5_beside_phases_3_4_and_equals_cpu():
    """build_index on the GPU starts phase 5 after phases 1-2 (only when K > 0) and the index
    equals the CPU backend's."""
    g = big_graphs()["paper-dense-20k"]
    gpu = distgrail.build_index(g, dims=3, backend="gpu", supports=64)
    cpu = distgrail.build_index(g, dims=3, backend="cpu", supports=64)
    keys = list(gpu.timings)
    assert keys.index("phases 1-2") < keys.index("phase 5 start") < keys.index("phases 3-4") < keys.index("phase 5")
    assert "phase 5 start" not in distgrail.build_index(g, dims=3, backend="gpu", supports=0).timings
    assert gpu.supports == cpu.supports == 64
    for name in ("supports/ids", "supports/out", "supports/in"):
        np.testing.assert_array_equal(gpu.arrays[name], cpu.arrays[name])
    np.testing.assert_array_equal(gpu.intervals, cpu.intervals)
