"""Queries from many threads on one index at once (issue 27): the labels are read-only and built
once, derived data (reverse CSR, packed records) once, and each batch has its own scratch, so
every answer of every thread equals plain BFS (distgrail/bfs.py) whatever the interleaving."""

import dataclasses
import threading

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of, positive_pairs
from distgrail.index import Index
from distgrail.io.generate import generate
from distgrail.query.bidir import reverse_csr
from distgrail.query.stats import Labels, SearchOptions
from conftest import graph_path, load_pairs

THREADS = 8
#: batch sizes each thread runs (rotated per thread): single pairs, batches under and over the
#: compiled search's 64 undecided pairs, and the whole pool (hundreds of searched pairs)
SIZES = (1, 5, 63, 200, 1500, None)

CPU_OPTIONS = (SearchOptions(), SearchOptions(cpu_search="bidirectional"), SearchOptions(cpu_search="forward"),
               SearchOptions(compiled_min_pairs=0))
#: GPU: the default budget, every searched pair to the grid-wide search, a budget of 0 edges and
#: one no query reaches
GPU_OPTIONS = (SearchOptions(), SearchOptions(visit_budget=-1), SearchOptions(visit_budget=0),
               SearchOptions(visit_budget=1 << 30))


@dataclasses.dataclass
class Case:
    graph: object
    build: dict
    s: np.ndarray
    t: np.ndarray
    truth: np.ndarray


def _real():
    """ba10k2d from tests/data (K = 64 supports by default) and 20,000 of its query pairs."""
    g = distgrail.read_graph(graph_path("ba10k2d"))
    s, t = load_pairs("ba10k2d")
    s, t = s[:20_000], t[:20_000]
    return Case(g, {"dims": 3}, s, t, bfs_reachable(*csr_of(g), s, t))


def _dense():
    """A dense paper DAG (2,000 vertices, mean degree 20) without support masks, d = 2: about
    four in ten random pairs reach the search."""
    g = generate("paper", 2000, 20, seed=5)
    rng = np.random.default_rng(3)
    s, t = rng.integers(0, g.n, (2, 1600))
    ps, pt = positive_pairs(g, 400, 40, seed=4)
    s, t = np.concatenate([s, ps]), np.concatenate([t, pt])
    return Case(g, {"dims": 2, "supports": 0}, s, t, bfs_reachable(*csr_of(g), s, t))


_CASES = {}


def case(name) -> Case:
    if name not in _CASES:
        _CASES[name] = {"real": _real, "dense": _dense}[name]()
    return _CASES[name]


def hammer(idx, c: Case, backend, options):
    """THREADS threads, released together, each answering batches of every size (pairs drawn
    from the case's pool) with its own search options; returns (searched pairs per thread, the
    Labels object each thread saw). Raises the first failure of any thread."""
    start = threading.Barrier(THREADS)
    errors, searched, seen = [], [0] * THREADS, [None] * THREADS

    def worker(i):
        try:
            rng = np.random.default_rng(100 + i)
            options = options_list[i % len(options_list)]
            start.wait()
            for j in range(len(SIZES)):
                k = SIZES[(i + j) % len(SIZES)] or c.s.size
                pick = rng.permutation(c.s.size)[:k] if k == c.s.size else rng.integers(0, c.s.size, k)
                ans, st = idx.query(c.s[pick], c.t[pick], backend=backend, search=options)
                bad = np.flatnonzero(ans != c.truth[pick])
                if bad.size:
                    q = pick[bad[0]]
                    raise AssertionError(f"thread {i}, batch of {k}, {options}: ({c.s[q]}, {c.t[q]}) answered "
                                         f"{bool(ans[bad[0]])}, BFS says {bool(c.truth[q])} ({bad.size} wrong)")
                if st.queries != k or st.reachable != int(c.truth[pick].sum()):
                    raise AssertionError(f"thread {i}: stats {st.queries} / {st.reachable} for {k} pairs")
                searched[i] += st.searched
            seen[i] = idx.labels(backend)
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)

    options_list = options
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=600)
    assert not any(th.is_alive() for th in threads), "a query thread hung"
    if errors:
        raise errors[0]
    return searched, seen


@pytest.mark.parametrize("name", ["real", "dense"])
def test_eight_threads_on_one_cpu_index(name, data_dir):
    c = case(name)
    idx = distgrail.build_index(c.graph, backend="cpu", **c.build)  # fresh: labels and derived data raced too
    searched, seen = hammer(idx, c, "cpu", CPU_OPTIONS)
    assert all(x > 0 for x in searched), f"some thread never reached the search: {searched}"
    assert all(L is seen[0] for L in seen), "threads got different labels of one backend"
    assert seen[0].reverse.built  # the bidirectional searches shared one reverse CSR


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["real", "dense"])
def test_eight_threads_on_one_gpu_index(name, data_dir):
    from distgrail.gpu.backend import get_backend

    c = case(name)
    idx = distgrail.build_index(c.graph, backend="cpu", **c.build)
    searched, seen = hammer(idx, c, "gpu", GPU_OPTIONS)
    assert all(x > 0 for x in searched), f"some thread never reached the search: {searched}"
    assert all(L is seen[0] for L in seen)
    pool = idx._state(get_backend("gpu"))[1]
    assert 1 <= len(pool.idle()) <= THREADS  # every batch gave its scratch back; no more than ran at once


def test_labels_are_read_only(data_dir):
    idx = distgrail.build_index(graph_path("kegg_dag_uniq"), dims=3, backend="cpu")
    L = idx.labels("cpu")
    arrays = {f.name: getattr(L, f.name) for f in dataclasses.fields(L)
              if isinstance(getattr(L, f.name), np.ndarray)}
    assert {"comp", "indptr", "indices", "level", "lo", "hi", "start0", "post0", "out", "inn"} <= set(arrays)
    for name, a in arrays.items():
        assert not a.flags.writeable, name
        with pytest.raises(ValueError, match="read-only"):
            a[(0,) * a.ndim] = 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        L.C = 5
    assert not hasattr(L, "cache")
    # views of the index's arrays, not copies, and the index's own arrays keep their flags
    assert np.shares_memory(L.comp, idx.arrays["vertex/component"])
    assert idx.arrays["vertex/component"].flags.writeable
    # derived data is read-only too, and built once
    for a in reverse_csr(L):
        assert not a.flags.writeable
    assert reverse_csr(L)[0] is reverse_csr(L)[0]
    bidir_jit = pytest.importorskip("distgrail.query.bidir_jit")
    for a in bidir_jit._layout(L):
        assert not a.flags.writeable
    # a Labels made from writeable arrays is read-only as well; the caller's arrays are untouched
    z = np.zeros(3, np.int32)
    mine = Labels(comp=z, indptr=np.zeros(2, np.int64), indices=np.zeros(0, np.int32), C=1, d=0)
    assert not mine.comp.flags.writeable and z.flags.writeable


def test_labels_built_once_when_threads_ask_together(monkeypatch, data_dir):
    idx = distgrail.build_index(graph_path("kegg_dag_uniq"), dims=2, backend="cpu")
    calls = []
    real = Index._make_labels
    gate = threading.Event()

    def slow(self, be):
        calls.append(threading.get_ident())
        gate.wait(2)  # hold the first caller until the others have asked
        return real(self, be)

    monkeypatch.setattr(Index, "_make_labels", slow)
    got = [None] * THREADS
    start = threading.Barrier(THREADS)

    def ask(i):
        start.wait()
        got[i] = idx.labels("cpu")

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(THREADS)]
    for th in threads:
        th.start()
    threading.Timer(0.3, gate.set).start()
    for th in threads:
        th.join(timeout=60)
    assert len(calls) == 1, f"labels built {len(calls)} times"
    assert all(L is got[0] for L in got) and got[0] is not None


@pytest.mark.gpu
def test_gpu_query_runs_on_the_backends_device(data_dir):
    """The labels, scratch and kernels live on ``be.device`` even when another device is current."""
    import cupy as cp

    from distgrail.gpu.backend import get_backend

    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    before = cp.cuda.Device().id
    be1 = get_backend("gpu", device=1)
    try:
        cp.cuda.Device(0).use()  # the current device is not the backend's
        c = case("real")
        idx = distgrail.build_index(c.graph, backend="cpu", **c.build)
        ans, _ = idx.query(c.s, c.t, backend=be1)
        np.testing.assert_array_equal(ans, c.truth)
        L = idx.labels(be1)
        assert L.rec.device.id == 1 and L.comp.device.id == 1
        (scratch,) = idx._state(be1)[1].idle()
        assert scratch.visited.device.id == 1 and scratch.counters.device.id == 1
        assert cp.cuda.Device().id == 0
    finally:
        cp.cuda.Device(before).use()


def test_no_module_level_query_switches():
    """Search choices are per call (SearchOptions), the phase-5 run record is per sweep
    (PendingMasks.run): the module-level switches they replaced are gone."""
    from distgrail.query import answer
    from distgrail.stages import supports

    for module, names in ((answer, ("CPU_SEARCH", "SEARCH_BUDGET", "COMPILED_MIN_PAIRS", "_context")),
                          (supports, ("last_run",))):
        left = [n for n in names if hasattr(module, n)]
        assert not left, f"{module.__name__} still has {left}"
    assert "cache" not in {f.name for f in dataclasses.fields(Labels)}
