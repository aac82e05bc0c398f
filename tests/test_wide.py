"""Counts past 2^31 and knowing the limit before starting (issue 23), sizes checked before
allocating (issue 26 item 5), on the CPU: the width and piece choices with forced small limits,
the GPU condensation guard for 2^31 + 5 edges, the memory formula, the preflight refusal with a
fake free-memory figure, and ``index --dims 100000000`` refused within a second."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from distgrail.errors import BackendError, DistGrailError
from distgrail.gpu.memory import (GpuMemoryError, condense_gpu_problem, gpu_bytes_needed, gpu_fit_problem,
                                  max_in_pieces, offset_dtype, pieces, scan_in_pieces, select_in_pieces)
from distgrail.io.chunks import estimate_edges, plan_read
from distgrail.preflight import dims_problem, host_label_bytes, preflight_index

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- widths and pieces ------------------------------------------------------------------------------

def test_offset_width_follows_the_count_and_the_limit():
    assert offset_dtype(2**31 - 1) == np.int32 and offset_dtype(2**31) == np.int64
    assert offset_dtype(2**31 + 5) == np.int64
    assert offset_dtype(10, limit=9) == np.int64 and offset_dtype(9, limit=9) == np.int32


def test_pieces_cover_everything_once_and_respect_the_limit():
    for count, limit in ((0, 3), (1, 3), (9, 3), (10, 3), (2**31 + 5, 2**31 - 1)):
        p = pieces(count, limit)
        assert all(0 < hi - lo <= limit for lo, hi in p)
        assert [lo for lo, _ in p] == ([0] + [hi for _, hi in p[:-1]] if p else [])  # contiguous from 0
        assert sum(hi - lo for lo, hi in p) == count
    assert len(pieces(2**31 + 5)) == 2


@pytest.mark.parametrize("limit", [1, 2, 7, 64, 1000])
def test_scan_max_and_select_in_pieces_equal_the_whole(limit):
    rng = np.random.default_rng(limit)
    flags = rng.integers(0, 2, 777).astype(np.uint8)
    got = scan_in_pieces(np, flags, offset_dtype(flags.size, limit), limit)
    assert np.array_equal(got, np.cumsum(flags)) and got.dtype == offset_dtype(777, limit)
    a = rng.integers(0, 10**6, 777)
    assert max_in_pieces(np, a, limit) == a.max()
    mask = flags.astype(bool)
    assert np.array_equal(select_in_pieces(np, a, mask, limit), a[mask])


# -- the 2^31 guard of GPU condensation -------------------------------------------------------------

def test_gpu_condensation_takes_more_than_2_31_edges():
    """Today's code refused m >= 2^31 - 1 ("GPU condensation needs fewer than 2^31 - 1 vertices and
    edges"); now only vertex ids bound it, and the positions of 2^31 + 5 edges are int64."""
    m = 2**31 + 5
    assert condense_gpu_problem(1000, m) is None
    assert offset_dtype(m) == np.int64
    assert "2,147,483,647 vertices" in condense_gpu_problem(2**31 - 1, 10)
    assert condense_gpu_problem(2**31 - 2, m) is None
    assert condense_gpu_problem(11, 5, id_limit=10) and condense_gpu_problem(9, 10**12, id_limit=10) is None


class _Big:
    """Stands for a device edge array of 2^31 + 5 int32 ids (nothing allocated)."""

    size = 2**31 + 5
    dtype = np.dtype(np.int32)


def condense_on_host_cupy(monkeypatch, convert: bool = True) -> None:
    """CuPy, where ``condense_cuda`` looks for it (``gpu.sweep``, ``gpu.memory``), replaced by a
    stand-in whose device is the host: ``asarray`` converts (``convert``) or hands arrays through
    (a stand-in too big to convert)."""
    import distgrail.gpu.memory as memory
    import distgrail.gpu.sweep as gsweep

    class FakeCupy:
        int32 = np.int32

        class cuda:
            class Device:
                id = 0

                def __init__(self, *a):
                    pass

                def __enter__(self):
                    return self

                def __exit__(self, *a):
                    return False

        @staticmethod
        def asarray(a, dtype=None):
            return np.asarray(a, dtype=dtype) if convert else a

    monkeypatch.setattr(gsweep, "cupy", lambda: FakeCupy)
    monkeypatch.setattr(memory, "cupy", lambda: FakeCupy)


def test_condense_cuda_goes_ahead_with_2_31_plus_5_edges(monkeypatch):
    """condense_cuda with 2^31 + 5 edges reaches the condensation steps (kernels replaced by a
    recorder) with the memory check asked for 24 bytes per edge, instead of raising."""
    import distgrail.gpu.memory as memory
    from distgrail.stages import condense as condense_mod

    seen = {"nbytes": []}
    condense_on_host_cupy(monkeypatch, convert=False)
    monkeypatch.setattr(memory, "ensure_fits", lambda nbytes, what: seen["nbytes"].append(nbytes))

    def steps_run(steps, held, n):  # (the steps' own check where the edges turn out unsorted)
        seen.update(limit=steps.limit, n=n, held=len(held))
        steps.sort_check(n, int(held[0].size))
        return "dag"

    monkeypatch.setattr(condense_mod, "_condense_held", steps_run)
    assert condense_mod.condense_cuda(_Big(), _Big(), 1000) == "dag"
    assert seen["n"] == 1000 and seen["limit"] == 2**31 - 1 and seen["held"] == 2
    first, unsorted = seen["nbytes"]  # a sorted input's up front, the key sort's once the edges show it
    assert first == condense_mod.condense_bytes(1000, 2**31 + 5, sorted_input=True) >= 8 * (2**31 + 5)
    assert unsorted == condense_mod.condense_bytes(1000, 2**31 + 5) >= 24 * (2**31 + 5)
    with pytest.raises(BackendError, match="vertex ids in int32"):
        condense_mod.condense_cuda(_Big(), _Big(), 2**31)


# -- the memory formula -----------------------------------------------------------------------------

def test_gpu_bytes_needed_by_parts():
    mib = 1 << 20
    assert gpu_bytes_needed(0, 0, 5, 64) == 576 * mib
    # condensation dominates on edges: 8 (parsed) + 20 per edge, 24 + 2 GiB of bucket scratch past the int32 limit
    assert gpu_bytes_needed(0, 1000, 5, 64) - 576 * mib == 28 * 1000
    assert gpu_bytes_needed(0, 1000, 5, 64, wide_limit=999) - 576 * mib == 32 * 1000 + (2 << 30)
    # labels dominate on vertices: (101 + 8 d + max(16 d + 80, 32 d + 8 min(d, 8)) + 16 ceil(K/64)) per vertex
    assert gpu_bytes_needed(1000, 0, 5, 64) - 576 * mib == (101 + 40 + 200 + 16) * 1000
    assert gpu_bytes_needed(1000, 0, 1, 0) - 576 * mib == (101 + 8 + 96) * 1000
    assert gpu_bytes_needed(1000, 0, 5, 65) - gpu_bytes_needed(1000, 0, 5, 64) == 16 * 1000
    # the condensed DAG's sizes: never more than the upper bound
    assert gpu_bytes_needed(10**6, 10**7, 5, 64, C=10**5, m_dag=10**6) <= gpu_bytes_needed(10**6, 10**7, 5, 64)
    # R-MAT scale 26 / 27 on one H200, CuPy's pool peak (index --json): 31.9 / 78.6 GB, never above the formula
    assert 31.9 <= gpu_bytes_needed(2**26, 2**30, 5, 64, m_dag=0) / 1e9 < 31.9 * 1.15
    assert 78.6 <= gpu_bytes_needed(2**27, 2**31, 5, 64, m_dag=0) / 1e9 < 78.6 * 1.15


def test_refusal_names_need_have_and_the_ways_out():
    why = gpu_fit_problem(80 << 30, 40 << 30, "indexing r.txt on the GPU")
    assert "80.0 GiB" in why and "40.0 GiB" in why and "--backend cpu" in why
    assert "partitioned build across GPUs (MPI ranks, index --partition on)" in why
    assert gpu_fit_problem(1, 1, "x") is None


# -- estimating the edges before parsing ------------------------------------------------------------

def _edge_list(path, n, m, seed=0):
    rng = np.random.default_rng(seed)
    u, v = rng.integers(0, n, m), rng.integers(0, n, m)
    path.write_text("# comment\n" + "".join(f"{a} {b}\n" for a, b in zip(u, v)))
    return int(max(u.max(), v.max())) + 1


def test_estimate_is_close_below_and_finds_a_lower_bound_of_n(tmp_path):
    p = tmp_path / "e.txt"
    top = _edge_list(p, 100000, 200000)
    m, n = estimate_edges(plan_read(p), window=1 << 14)
    assert 0.9 * 200000 <= m <= 1.02 * 200000
    assert 1 <= n <= top
    # a file whose ids grow (sorted): the sparsest window counts, so the estimate stays low
    q = tmp_path / "s.txt"
    q.write_text("".join(f"{i} {i + 1}\n" for i in range(0, 300000, 3)))
    m, _ = estimate_edges(plan_read(q), window=1 << 14)
    assert m <= 100000


def test_estimate_reads_headers_when_they_say(tmp_path):
    mtx = tmp_path / "g.mtx"
    mtx.write_text("%%MatrixMarket matrix coordinate pattern general\n5 5 3\n1 2\n2 3\n3 4\n")
    assert estimate_edges(plan_read(mtx)) == (3, 5)
    gra = tmp_path / "g.gra"
    gra.write_text("graph_for_greach\n4\n0: 1 2 3 #\n1: 2 #\n2: #\n3: #\n")
    m, n = estimate_edges(plan_read(gra))
    assert (m, n) == (4, 4)


# -- the preflight -----------------------------------------------------------------------------------

def test_preflight_refuses_what_the_free_gpu_memory_cannot_hold(tmp_path):
    p = tmp_path / "e.txt"
    _edge_list(p, 50000, 100000)
    got = preflight_index(str(p), dims=5, gpu_have=1 << 40)
    need = got["gpu_need"]
    assert need == gpu_bytes_needed(got["n"], got["m"], 5, 64, m_dag=0, held_edges=False)  # (one process: handed over)
    with pytest.raises(GpuMemoryError) as e:
        preflight_index(str(p), dims=5, gpu_have=need - 1)
    msg = str(e.value)
    assert "e.txt" in msg and "--backend cpu" in msg and "GiB" in msg and "--partition on" in msg
    # --backend cpu chosen: no GPU check at all
    assert preflight_index(str(p), dims=5, backend="cpu")["gpu_need"] is None


def test_preflight_checks_dims_and_host_memory_first(tmp_path):
    p = tmp_path / "e.txt"
    p.write_text("0 1\n1 2\n")
    with pytest.raises(DistGrailError, match="--dims 100000000: at most 1024"):
        preflight_index(str(p), dims=100000000)
    assert dims_problem(1024) is None and dims_problem(0) and dims_problem(True)
    with pytest.raises(DistGrailError, match="host memory"):
        preflight_index(str(p), dims=1000, host_have=host_label_bytes(3, 1000, 64) - 1, backend="cpu")
    assert host_label_bytes(3, 1000, 64) == 3 * (16 * 1000 + 16)


def test_condense_stage_refuses_instead_of_switching_to_the_cpu(monkeypatch, capsys):
    """After parsing, a graph too big for the GPU is an error (GpuMemoryError); vertex ids past
    int32 still go to the CPU path with a notice."""
    import distgrail.stages.phases as phases
    from distgrail.io.graph import EdgeGraph

    class Be:
        is_gpu, device = True, 0

        @staticmethod
        def on_device():
            import contextlib

            return contextlib.nullcontext()

        class xp:
            class cuda:
                class Device:
                    def __init__(self, *a):
                        pass

                    def __enter__(self):
                        return self

                    def __exit__(self, *a):
                        return False

        asarray = staticmethod(lambda a, dt=None: a)

    g = EdgeGraph(n=3, src=np.array([0, 1], np.int32), dst=np.array([1, 2], np.int32))

    def too_big(*a, **kw):
        raise GpuMemoryError("condensation needs about 9.00 GiB of GPU memory, but only 1.00 GiB ...")

    monkeypatch.setattr(phases, "condense_cuda_of", too_big)
    with pytest.raises(GpuMemoryError, match="needs about 9.00 GiB"):
        phases.condense_on(Be, g)

    def wide_ids(*a, **kw):
        raise BackendError(condense_gpu_problem(2**31, 1))

    monkeypatch.setattr(phases, "condense_cuda_of", wide_ids)
    assert phases.condense_on(Be, g).C == 3
    assert "condensing on the CPU" in capsys.readouterr().err


def test_index_with_dims_100000000_exits_2_within_a_second(tmp_path):
    (tmp_path / "s.txt").write_text("0 1\n1 2\n")
    t = time.perf_counter()
    preflight_error = None
    try:
        preflight_index(str(tmp_path / "s.txt"), dims=100000000)
    except DistGrailError as e:
        preflight_error = str(e)
    assert preflight_error and time.perf_counter() - t < 1.0
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "distgrail", "index", "s.txt", "-o", "x.h5", "--dims", "100000000"],
                       capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT},
                       timeout=60)
    assert r.returncode == 2, r.stderr
    assert "distgrail: error: --dims 100000000: at most 1024 label dimensions" in r.stderr
    assert "Traceback" not in r.stderr
    assert time.perf_counter() - t < 20  # the interpreter's start included; the check itself is instant
    assert sorted(os.listdir(tmp_path)) == ["s.txt"]


# -- parsing: reductions and selections over the edges in pieces ------------------------------------

def test_finish_edges_in_pieces_equals_the_whole(tmp_path):
    from distgrail.io.parse import chunk_fits, finish_edges

    p = tmp_path / "e.txt"
    p.write_text("0 1\n")
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, 1000, 101).astype(np.int32), rng.integers(0, 1000, 101).astype(np.int32)
    n, s, d = finish_edges(plan_read(p), np, src, dst, 0, True, limit=7)
    assert n == max(src.max(), dst.max()) + 1 and s is src and d is dst
    mtx = tmp_path / "g.mtx"
    mtx.write_text("%%MatrixMarket matrix coordinate pattern symmetric\n1000 1000 101\n")
    src[::10] = dst[::10]  # some diagonal entries: not mirrored
    want = finish_edges(plan_read(mtx), np, src, dst, 0, True)
    got = finish_edges(plan_read(mtx), np, src, dst, 0, True, limit=7)
    assert got[0] == want[0] and all(np.array_equal(a, b) for a, b in zip(got[1:], want[1:]))
    assert got[1].size == 101 + int((src != dst).sum())
    assert chunk_fits(2**31 - 1024) and not chunk_fits(2**31 - 1)  # whole 1024-byte tiles below 2^31


@pytest.mark.gpu
def test_gpu_preflight_reads_the_free_memory(tmp_path):
    """On a GPU: the preflight compares with the real free memory (a small file fits), and the
    condensation's forced small limit is exercised by tests/test_condense_gpu.py."""
    p = tmp_path / "e.txt"
    _edge_list(p, 1000, 5000)
    got = preflight_index(str(p), dims=5, backend="gpu")
    # (one process reads the file onto the GPU and hands the parsed edges to the condensation)
    assert got["gpu_need"] == gpu_bytes_needed(got["n"], got["m"], 5, 64, m_dag=0, held_edges=False)
    assert got["gpu_need"] < gpu_bytes_needed(got["n"], got["m"], 5, 64, m_dag=0)  # (the edges' 8 bytes not counted twice)
    from distgrail.gpu.memory import available_gpu_bytes

    have = available_gpu_bytes()[0]
    with pytest.raises(GpuMemoryError, match="--backend cpu"):
        preflight_index(str(p), dims=1024, supports=1 << 20, backend="gpu", gpu_have=have // 1000)
