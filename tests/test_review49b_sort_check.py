"""The key sort's memory check of edges handed to the GPU condensation counts them as memory that
comes back: the unsorted input's keys are made while the edges are still there (16 bytes an edge),
then the edges go before the sort. Without that credit the check asks for the whole condensation's
memory beside the parsed edges (8 bytes an edge more than gpu_bytes_needed(held_edges=False), which
the preflight checked), and a graph the preflight let through -- R-MAT 28's text on one GPU -- is
refused after its parse. Edges the caller keeps (condense_cuda, edge_csr) get no credit. Runs on
the emulated kernels of tests/test_condense.py."""

import numpy as np
import pytest

from test_condense import GRAPHS, _Arr, fake_gpu  # noqa: F401 (the fixture)
from test_wide import condense_on_host_cupy


def _unsorted(g):
    keys = np.unique((np.asarray(g.src, np.int64) << 32) | np.asarray(g.dst, np.int64))[::-1]
    return (keys >> 32).astype(np.int32).view(_Arr), (keys & 0xFFFFFFFF).astype(np.int32).view(_Arr)


@pytest.mark.usefixtures("fake_gpu")
@pytest.mark.parametrize("handed", [True, False])
def test_the_input_key_sort_check_credits_handed_edges(handed):
    from distgrail.stages.scc import CudaSteps

    g = GRAPHS["scale-free-back-edges"]
    src, dst = _unsorted(g)
    m = int(src.size)
    checks = []
    steps = CudaSteps()
    steps.handed = handed
    steps.sort_check = lambda n, k, held=0: checks.append((k, held))
    steps.edge_csr_of([src, dst], g.n)
    assert checks[0] == (m, 8 * m if handed else 0)
    checks.clear()
    steps = CudaSteps()
    steps.handed = True
    steps.sort_check = lambda n, k, held=0: checks.append((k, held))
    steps._all_checked = False
    steps.edge_csr(src, dst, g.n)  # (the caller keeps its edges: nothing comes back)
    assert checks[0] == (m, 0)


def test_condense_cuda_of_tells_the_steps_whether_the_edges_were_handed(monkeypatch):
    import distgrail.gpu.memory as memory
    from distgrail.stages import condense as condense_mod

    seen = []
    condense_on_host_cupy(monkeypatch)
    monkeypatch.setattr(memory, "ensure_fits", lambda nbytes, what: None)
    monkeypatch.setattr(condense_mod, "_condense_held", lambda steps, held, n: seen.append(steps.handed) or "dag")
    e = np.arange(5, dtype=np.int32)
    assert condense_mod.condense_cuda_of([e, e + 1], 6) == "dag"
    assert condense_mod.condense_cuda_of([e, e + 1], 6, kept=True) == "dag"
    assert condense_mod.condense_cuda(e, e + 1, 6) == "dag"
    assert seen == [True, False, False]
