"""Phase 5 on the GPU (kernels/supports.cu) against its NumPy twin, bit for bit, and the support
query steps on the GPU against the CPU backend."""

import numpy as np
import pytest

import distgrail
from distgrail.gpu.backend import get_backend
from distgrail.io.generate import generate
from distgrail.stages.condense import condense
from distgrail.stages.labeling import DeviceDAG
from distgrail.stages.supports import choose_supports, support_masks_cuda, support_masks_numpy
from test_query_steps import GRAPHS, indexed, pairs

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def forward_twin(monkeypatch):  # the CPU backend's forward search: same search rounds as the GPU
    monkeypatch.setattr("distgrail.query.answer.CPU_SEARCH", "forward")


def big_graphs():
    return {
        "paper-dense-20k": generate("paper", 20_000, 60, seed=1),  # large levels: grid launches
        "layered-deep": generate("layered", 30_000, 3, seed=2, levels=3000),  # small levels: one-block runs
        "chain": distgrail.as_graph((np.arange(9999), np.arange(1, 10000))),
    }


@pytest.mark.parametrize("name", sorted(GRAPHS) + ["paper-dense-20k", "layered-deep", "chain"])
@pytest.mark.parametrize("K", [1, 64, 200])
def test_mask_sweeps_bit_for_bit(name, K):
    import cupy as cp

    g = GRAPHS[name] if name in GRAPHS else big_graphs()[name]
    dag = condense(g)
    ids = choose_supports(dag, K, seed=2)
    want = support_masks_numpy(dag, ids)
    got = support_masks_cuda(dag, ids)
    for w, gt in zip(want, got):
        assert isinstance(gt, cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(gt), w)
    if ids.size > 64:  # a block of whole words, from the labeling's device DAG
        dd = DeviceDAG(get_backend("gpu"), dag)
        blk = support_masks_cuda(dd, ids, block=(64, ids.size))
        for w, gt in zip(want, blk):
            np.testing.assert_array_equal(cp.asnumpy(gt), w[:, 1:])


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("K", [0, 1, 64, 200])
def test_support_steps_same_as_cpu(name, K):
    g = GRAPHS[name]
    idx = indexed(g, K, dims=4)
    s, t = pairs(g, 5000, seed=K)
    a_cpu, st_cpu = idx.query(s, t, backend="cpu")
    a_gpu, st_gpu = idx.query(s, t, backend="gpu")
    np.testing.assert_array_equal(a_gpu, a_cpu)
    assert st_gpu.steps == st_cpu.steps
    assert st_gpu.reachable == st_cpu.reachable and st_gpu.search_rounds == st_cpu.search_rounds


def test_gpu_labels_are_compact():
    import cupy as cp

    idx = indexed(GRAPHS["paper"], 64, dims=5)
    L = idx.labels("gpu")
    assert L.comp.dtype == cp.int32 and L.indices.dtype == cp.int32 and L.indptr.dtype == cp.int64
    assert L.rec.dtype == cp.int32 and L.rec.shape == (idx.C, 20)
    assert L.level is None and L.lo is None and L.out is None
