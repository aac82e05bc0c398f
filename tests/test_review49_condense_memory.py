"""The GPU condensation checks the memory of every key sort before it runs, a sorted input's too.

condense_cuda checks a sorted input's smaller estimate (condense_bytes(sorted_input=True): 8 bytes
an edge) up front; the key sorts that come later -- the condensed CSR's keys (the edges between
components, as many as every edge of a nearly acyclic graph) and renumber's two sorts of the
condensed DAG's edges (every edge of an acyclic input: 20 bytes an edge) -- must each be checked
(CudaSteps.sort_check) once their count is known, or a graph too big for the GPU runs out of memory
part-way (oom_guard's BackendError: condense_on then switches to the CPU) instead of being refused
with GpuMemoryError. Runs on the emulated kernels of tests/test_condense.py (no GPU needed)."""

import numpy as np
import pytest

from distgrail.io.graph import EdgeGraph
from distgrail.stages.condense import DAG, condense, condense_bytes, dag_to_host
from test_condense import ARRAYS, GRAPHS, _Arr, assert_same_dag, fake_gpu  # noqa: F401 - the fixture


def _sorted_input(g):
    """The edges of ``g`` sorted and distinct (a ``.h5`` graph's CSR order), self-loops kept."""
    keys = np.unique((np.asarray(g.src, np.int64) << 32) | np.asarray(g.dst, np.int64))
    return (keys >> 32).astype(np.int32), (keys & 0xFFFFFFFF).astype(np.int32)


def _random_dag(n=300, m=2000, back=0, seed=5):
    """Edges u -> v with u < v (acyclic), and ``back`` edges v -> u closing 2-cycles."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keep = lo != hi
    src, dst = lo[keep], hi[keep]
    src, dst = np.concatenate([src, dst[:back]]), np.concatenate([dst, src[:back]])
    return EdgeGraph(n=n, src=src, dst=dst)


CASES = {"dag": _random_dag(), "dag-one-2-cycle": _random_dag(back=1), "paper-dag": GRAPHS["paper-dag"],
         "giant-ring": GRAPHS["giant-ring"], "many-small-sccs": GRAPHS["many-small-sccs"],
         "scale-free-back-edges": GRAPHS["scale-free-back-edges"]}


def _run(monkeypatch, g, order, key_piece=None, limit=2**31 - 1):
    """_condense_steps of ``g``'s edges (``order``: sorted or shuffled) with the key sorts and the
    memory checks recorded in one list, in the order they happen."""
    from distgrail.stages.condense import _condense_steps
    from distgrail.stages.scc import CudaSteps

    src, dst = _sorted_input(g)
    if order == "shuffled":
        perm = np.random.default_rng(1).permutation(src.size)
        src, dst = src[perm], dst[perm]
    events = []
    real_sort = CudaSteps._sort
    monkeypatch.setattr(CudaSteps, "_sort", lambda self, keys, n: (events.append(("sort", int(keys.size))),
                                                                   real_sort(self, keys, n))[1])
    monkeypatch.setattr(CudaSteps, "key_piece", key_piece)
    steps = CudaSteps(limit)
    steps.sort_check = lambda n, m, held=0: events.append(("check", int(m), int(held)))
    d = _condense_steps(steps, src.view(_Arr), dst.view(_Arr), g.n)
    host = dag_to_host(DAG(n=d.n, **{k: np.asarray(getattr(d, k)) for k in ARRAYS}))
    assert_same_dag(host, condense(EdgeGraph(n=g.n, src=src, dst=dst)))
    return events, host


@pytest.mark.parametrize("key_piece", [None, 7])
@pytest.mark.parametrize("order", ["sorted", "shuffled"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_key_sort_is_checked_first(fake_gpu, monkeypatch, name, order, key_piece):
    """Before each key sort of ``s`` keys, a memory check of at least ``s`` keys: for a sorted
    input too, whose up-front estimate leaves every key sort out."""
    events, dag = _run(monkeypatch, CASES[name], order, key_piece)
    sorts = [e[1] for e in events if e[0] == "sort"]
    # (renumber's sorts at least, of a DAG with edges; the input's key sort, of shuffled edges)
    assert bool(sorts) == (dag.m > 0 or order == "shuffled"), name
    for i, e in enumerate(events):
        if e[0] == "sort":
            asked = [c[1] for c in events[:i] if c[0] == "check"]
            assert asked and max(asked) >= e[1], (name, order, events)


@pytest.mark.parametrize("name", ["dag", "paper-dag"])
def test_an_acyclic_sorted_input_checks_its_renumber(fake_gpu, monkeypatch, name):
    """An acyclic sorted input: no key is sorted before renumber, whose two sorts of every edge
    (keys, the sort's second buffer, the new column array: 20 bytes an edge) are checked with the
    DAG's sizes, nothing held yet."""
    g = CASES[name]
    events, dag = _run(monkeypatch, g, "sorted")
    checks = [e for e in events if e[0] == "check"]
    assert checks == [("check", dag.m, 0)], events
    # (the up-front estimate of such an input is less than renumber's need by 12 bytes an edge)
    assert condense_bytes(g.n, dag.m, sorted_input=True) + 12 * dag.m == condense_bytes(g.n, dag.m)


@pytest.mark.parametrize("key_piece", [None, 3])
def test_the_condensed_keys_are_checked_as_they_accumulate(fake_gpu, monkeypatch, key_piece):
    """A nearly acyclic sorted input (one 2-cycle): almost every edge joins two components, so the
    condensed CSR's kept keys are nearly as many as the edges; each piece's kept keys are checked
    with the count so far (what is kept is held: ``held`` 8 bytes a key), the last with all of them
    before the concatenation and sort."""
    g = CASES["dag-one-2-cycle"]
    events, dag = _run(monkeypatch, g, "sorted", key_piece)
    checks = [e for e in events if e[0] == "check"]
    sorts = [e[1] for e in events if e[0] == "sort"]
    kept = sorts[0]  # mapped_csr's sort: the kept keys
    assert kept >= dag.m > 0.9 * len(_sorted_input(g)[0])
    counts = [c[1] for c in checks]
    assert counts == sorted(counts) and counts[-1] == kept and all(c[2] == 8 * c[1] for c in checks), checks
    if key_piece:
        assert len(checks) > 1, checks
    # the first key sort comes after the last check with all the kept keys
    assert events.index(("sort", kept)) > events.index(checks[-1])


class _Device:
    """The fake CuPy's current device (condense_cuda runs in its context)."""

    id = 0

    def __init__(self, *a):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_condense_cuda_refuses_with_gpu_memory_error_past_the_sorted_estimate(fake_gpu, monkeypatch):
    """condense_cuda wires the checks to ensure_fits: a sorted acyclic input whose renumber does not
    fit (free memory between the sorted estimate and condense_bytes) is refused with
    GpuMemoryError (condense_on refuses, no switch to the CPU), not run out of memory."""
    from distgrail.gpu import memory
    from distgrail.stages import condense as condense_mod

    g = CASES["dag"]
    src, dst = _sorted_input(g)
    m = int(src.size)
    have = (condense_bytes(g.n, m, sorted_input=True) + condense_bytes(g.n, m)) // 2
    asked = []

    def fits(nbytes, what):
        asked.append(int(nbytes))
        if nbytes > have:
            raise memory.GpuMemoryError(f"{what} needs about {nbytes} bytes")

    monkeypatch.setattr(memory, "ensure_fits", fits)
    monkeypatch.setattr(memory, "oom_guard", lambda fn: fn)
    monkeypatch.setattr(memory, "condense_gpu_problem", lambda n, m: None)
    monkeypatch.setattr(fake_gpu.cuda, "Device", _Device, raising=False)
    with pytest.raises(memory.GpuMemoryError, match="condensation"):
        condense_mod.condense_cuda(src.view(_Arr), dst.view(_Arr), g.n)
    assert asked[0] == condense_bytes(g.n, m, sorted_input=True) and max(asked) > have


@pytest.mark.parametrize("name", ["dag-one-2-cycle", "many-small-sccs", "dag"])
def test_an_unsorted_input_is_checked_once_for_every_sort(fake_gpu, monkeypatch, name):
    """Shuffled edges: the input's key sort is checked with every edge, which covers each later
    sort (of at most as many keys), so none is checked again (no stricter refusal than before)."""
    events, dag = _run(monkeypatch, CASES[name], "shuffled")
    m = int(_sorted_input(CASES[name])[0].size)
    assert [e for e in events if e[0] == "check"] == [("check", m, 0)], events
