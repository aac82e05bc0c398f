"""The parsed edges handed to the GPU condensation (EdgeGraph.hand_over_edges,
stages.phases.condense_on, CudaSteps.edge_csr_of): the graph keeps none of them, the condensation
lets go of each once done with it, and a fallback to the CPU reads the file again. CPU tests: a
stub GPU backend and the condensation's launchers on NumPy with emulated kernels."""

import contextlib
import weakref

import numpy as np
import pytest

from distgrail.errors import BackendError, DistGrailError
from distgrail.io.graph import EdgeGraph
from distgrail.io.read import as_graph
from distgrail.stages import phases
from distgrail.stages.condense import condense
from distgrail.stages.scc import NarrowPeel
from test_condense import GRAPHS, _Arr, assert_same_dag, fake_gpu  # noqa: F401 (the fixture)


class _Dev:
    """A device array as condense_on sees it: not a NumPy array."""

    def __init__(self, a):
        self.a = np.asarray(a)
        self.size, self.shape, self.dtype = self.a.size, self.a.shape, self.a.dtype


class _StubGpu:
    is_gpu = True
    name = "gpu"

    @contextlib.contextmanager
    def on_device(self):
        yield

    def asarray(self, a, dtype=None):
        return a

    def to_host(self, a):
        return a.a if isinstance(a, _Dev) else np.asarray(a)


def _file_graph(tmp_path, name="many-small-sccs"):
    g0 = GRAPHS[name]
    path = tmp_path / "g.txt"
    path.write_text("".join(f"{u} {v}\n" for u, v in zip(g0.src.tolist(), g0.dst.tolist())))
    g = as_graph(str(path), g0.n)
    g.cancel_digest()
    g.src, g.dst = _Dev(g.src), _Dev(g.dst)  # (as the GPU reader leaves them)
    g.meta["read_again"] = (str(path), g0.n, "auto")
    return g, path


def test_a_graph_hands_over_its_edges_and_keeps_its_edge_count():
    g = EdgeGraph(n=4, src=np.array([0, 1, 2]), dst=np.array([1, 2, 3]))
    src, dst = g.src, g.dst
    held = g.hand_over_edges()
    assert held[0] is src and held[1] is dst and g.src is None and g.dst is None and g.m == 3


def test_edges_read_onto_the_gpu_go_to_the_condensation_and_the_graph_keeps_none(tmp_path, monkeypatch):
    g, _ = _file_graph(tmp_path)
    m = g.m
    seen = []

    def take(held, n, be, **kw):
        seen.append(len(held))
        src, dst = (a.a for a in held)
        held.clear()  # (as condense_cuda_of does)
        return condense(EdgeGraph(n=n, src=src, dst=dst))

    monkeypatch.setattr(phases, "condense_cuda_of", take)
    dag = phases.condense_on(_StubGpu(), g)
    assert seen == [2] and g.src is None and g.m == m
    assert_same_dag(dag, condense(GRAPHS["many-small-sccs"]))


@pytest.mark.parametrize("where", ["after taking them", "before taking them"])
def test_a_fallback_after_the_hand_over_reads_the_file_again(tmp_path, monkeypatch, capsys, where):
    """A narrow peel (any BackendError) after the condensation took the edges: the file is read
    again on the host and condensed there (the CPU path's DAG); before it took them, the graph
    gets them back without a read."""
    g, _ = _file_graph(tmp_path)

    def fail(held, n, be, **kw):
        if where == "after taking them":
            held.clear()
        raise NarrowPeel(70_000, 7)

    monkeypatch.setattr(phases, "condense_cuda_of", fail)
    reads = []
    real = phases._read_again
    monkeypatch.setattr(phases, "_read_again", lambda g, again: (reads.append(again), real(g, again))[1])
    dag = phases.condense_on(_StubGpu(), g)
    assert_same_dag(dag, condense(GRAPHS["many-small-sccs"]))
    err = capsys.readouterr().err
    assert "condensing on the CPU: a deep, narrow graph" in err
    assert (len(reads) == 1 and "reading g.txt again on the host" in err) == (where == "after taking them")
    assert isinstance(g.src, np.ndarray) and g.m == GRAPHS["many-small-sccs"].m


def test_a_file_changed_before_it_is_read_again_is_refused(tmp_path, monkeypatch):
    g, path = _file_graph(tmp_path)
    monkeypatch.setattr(phases, "condense_cuda_of", lambda held, n, be, **kw: (held.clear(), (_ for _ in ()).throw(
        BackendError("out of memory")))[0])
    path.write_text("0 1\n")
    with pytest.raises(DistGrailError, match="changed while it was indexed"):
        phases.condense_on(_StubGpu(), g)


def test_host_edges_stay_the_graphs(monkeypatch):
    """In-memory edges (no file to read again): the condensation gets its own device copies."""
    g0 = GRAPHS["giant-ring"]
    g = EdgeGraph(n=g0.n, src=np.asarray(g0.src), dst=np.asarray(g0.dst))
    src = g.src
    monkeypatch.setattr(phases, "condense_cuda_of", lambda held, n, be, **kw: (
        held.clear(), (_ for _ in ()).throw(NarrowPeel(9, 9)))[0])
    assert_same_dag(phases.condense_on(_StubGpu(), g), condense(g0))
    assert g.src is src


@pytest.mark.usefixtures("fake_gpu")
@pytest.mark.parametrize("name", ["self-loops-and-duplicates", "giant-scc-with-tails", "scale-free-back-edges"])
@pytest.mark.parametrize("order", ["sorted", "unsorted"])
def test_the_steps_let_go_of_the_handed_edges_before_the_sort_and_the_search(monkeypatch, name, order):
    """CudaSteps.edge_csr_of: once the keys are made (unsorted) or the self-loops' rows known
    (sorted: src; dst with the selection), no reference to the handed arrays is left, so their
    memory is back for the key sort and the strong components' search; the CSR is the twin's."""
    from distgrail.stages.scc import CudaSteps, NumpySteps

    g = GRAPHS[name]
    keys = np.unique((np.asarray(g.src, np.int64) << 32) | np.asarray(g.dst, np.int64))
    if order == "unsorted":
        keys = keys[::-1]
    src, dst = (keys >> 32).astype(np.int32).view(_Arr), (keys & 0xFFFFFFFF).astype(np.int32).view(_Arr)
    alive = [weakref.ref(src), weakref.ref(dst)]
    held = [src, dst]
    del src, dst
    at_sort = []
    real = CudaSteps._sorted_keys_csr
    monkeypatch.setattr(CudaSteps, "_sorted_keys_csr", lambda self, k, n, d: (
        at_sort.append([r() is None for r in alive]), real(self, k, n, d))[1])
    ptr, idx = CudaSteps().edge_csr_of(held, g.n)
    assert held == []
    if order == "unsorted":
        assert at_sort and at_sort[0] == [True, True]  # (both freed before the first sort)
    want = NumpySteps().edge_csr(*((keys >> 32).astype(np.int32), (keys & 0xFFFFFFFF).astype(np.int32)), g.n)
    assert np.array_equal(np.asarray(ptr), want[0]) and np.array_equal(np.asarray(idx), want[1])
    loops = bool((keys >> 32 == keys & 0xFFFFFFFF).any())
    if order == "sorted" and loops:
        del idx
        assert alive[0]() is None and alive[1]() is None  # (the selection is a new array: the input is gone)


def test_handed_edges_lower_the_one_process_estimate():
    """gpu_bytes_needed with the edges handed over: the condensation's term alone (16 bytes an
    edge at the hand-over's moment), not the parsed edges on top. A text graph of 2^32 edges and
    2^28 vertices (R-MAT 28) fits a GPU of 139 GiB so; held, it did not."""
    from distgrail.gpu.memory import WIDE_EXTRA, gpu_bytes_needed

    n, m = 2**28, 2**32
    held, handed = gpu_bytes_needed(n, m, 5, 64, m_dag=0), gpu_bytes_needed(n, m, 5, 64, m_dag=0, held_edges=False)
    assert held - handed == 8 * m
    assert handed == (576 << 20) + 24 * m + WIDE_EXTRA + 64 * n
    assert handed < 139 * 2**30 < held
    assert gpu_bytes_needed(10, 1000, 5, 64, m_dag=0, held_edges=False) == (576 << 20) + max(16 * 1000, 20 * 1000 + 640)


def test_the_preflight_counts_the_edges_handed_over(tmp_path):
    from distgrail.gpu.memory import GpuMemoryError, gpu_bytes_needed
    from distgrail.preflight import preflight_index

    path = tmp_path / "g.txt"
    path.write_text("".join(f"{i} {i + 1}\n" for i in range(5000)))
    est = preflight_index(str(path), gpu_have=1 << 50)
    n, m = est["n"], est["m"]
    handed = gpu_bytes_needed(n, m, 5, 64, m_dag=0, held_edges=False)
    assert est["gpu_need"] == handed < gpu_bytes_needed(n, m, 5, 64, m_dag=0)
    preflight_index(str(path), gpu_have=handed)
    with pytest.raises(GpuMemoryError):
        preflight_index(str(path), gpu_have=handed - 1)


def test_a_file_changed_with_the_same_counts_before_it_is_read_again_is_refused(tmp_path, monkeypatch):
    """The file rewritten between the GPU read and the host's read again with as many vertices
    and edges (every edge reversed, same bytes): refused, not condensed as another graph. What
    read_on records of the file (size, modification time, inode) is what the read again checks."""
    import os

    from distgrail.io import read as read_mod

    g0 = GRAPHS["many-small-sccs"]
    path = tmp_path / "g.txt"
    path.write_text("".join(f"{u} {v}\n" for u, v in zip(g0.src.tolist(), g0.dst.tolist())))
    monkeypatch.setattr("distgrail.io.parse.read_graph_cuda", lambda p, fmt, nv, be, notify=None, **kw: None)
    monkeypatch.setattr(read_mod, "read_graph", _on_device(read_mod.read_graph))
    g = phases.read_on(_StubGpu(), str(path), g0.n)
    g.cancel_digest()
    assert g.meta["read_again"][:3] == (str(path), g0.n, "auto")
    monkeypatch.setattr(phases, "condense_cuda_of", lambda held, n, be, **kw: (held.clear(), (_ for _ in ()).throw(
        BackendError("out of memory")))[0])
    st = os.stat(path)
    path.write_text("".join(f"{v} {u}\n" for u, v in zip(g0.src.tolist(), g0.dst.tolist())))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(DistGrailError, match="changed while it was indexed"):
        phases.condense_on(_StubGpu(), g)


def _on_device(read_graph):
    """read_graph whose edges come back as device arrays when a device is given (as a .h5 graph's do)."""
    def read(*a, device=None, **kw):
        g = read_graph(*a, **kw)
        if device is not None:
            g.src, g.dst = _Dev(g.src), _Dev(g.dst)
        return g

    return read
