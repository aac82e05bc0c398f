"""Fast graph I/O (issue 7): fast/general parser agreement, chunk-size independence, the binary
graph file with its stored condensation, writers, and block-size-independent generators."""

import importlib

import h5py
import numpy as np
import pytest

import distgrail
from distgrail import GraphFormatError, read_graph
from distgrail.io import edgelist, gra
from distgrail.io import text as readers
from distgrail.io.binary import read_binary_graph, read_condensation, write_binary_graph
from distgrail.cli import main
from distgrail.stages.condense import condense
from distgrail.io.generate import KINDS, generate, generate_csr
from distgrail.io.graph import EdgeGraph
from distgrail.io.writers import format_ints, write_graph

DAG_FIELDS = ("comp", "indptr", "indices", "rindptr", "rindices", "level", "level_ptr")


def edges(g):
    return sorted(zip(g.src.tolist(), g.dst.tolist()))


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(p)


@pytest.fixture
def no_fast(monkeypatch):
    """Force the general (byte-exact) path everywhere."""
    monkeypatch.setattr(gra, "_gra_chunk_fast", lambda *a: None)
    monkeypatch.setattr(edgelist, "_pairs_chunk_fast", lambda *a: None)


# -- parsers -----------------------------------------------------------------------------
@pytest.mark.parametrize("chunk", [7, 64, 1000, 1 << 20])
def test_gra_and_edgelist_chunk_size_does_not_change_result(tmp_path, monkeypatch, chunk):
    g0 = generate("paper", 700, 5, seed=3)
    pg, pe = str(tmp_path / "g.gra"), str(tmp_path / "g.txt")
    write_graph(g0, pg)
    write_graph(g0, pe)
    monkeypatch.setattr(readers, "CHUNK_BYTES", chunk)
    for p in (pg, pe):
        g = read_graph(p)
        assert g.n == 700 and edges(g) == edges(g0)
        assert g.src.dtype == g.dst.dtype == np.int32


@pytest.mark.parametrize("text", [
    "graph_for_greach\n4\n0: 1 2 #\n1:3 #\n2: #\n3: #\n",
    "4\r\n0:\t1  2 #\r\n\r\n1 : 3#\r\n3: #\r\n2: #",  # tabs, CRLF, blank lines, no final newline
    "graph_for_greach\n3\n2: 0 #\n0: 1 1 #\n1: #\n",  # lines out of order, repeated successor
])
def test_gra_fast_and_general_paths_agree(tmp_path, monkeypatch, text):
    p = write(tmp_path, "a.gra", text)
    fast = read_graph(p)
    monkeypatch.setattr(gra, "_gra_chunk_fast", lambda *a: None)
    slow = read_graph(p)
    assert fast.n == slow.n and edges(fast) == edges(slow)


@pytest.mark.parametrize("text", [
    "0 1\n1 2\n",
    "# header\n0 1 1\n\n1\t2 2  % note\n  2 0\t1\r\n3 3 0.5\n",  # comments, tabs, weights, blank lines
    "5 6",
])
def test_edgelist_fast_and_general_paths_agree(tmp_path, monkeypatch, text):
    p = write(tmp_path, "a.txt", text)
    fast = read_graph(p)
    monkeypatch.setattr(edgelist, "_pairs_chunk_fast", lambda *a: None)
    slow = read_graph(p)
    assert fast.n == slow.n and edges(fast) == edges(slow)


def test_many_comments_take_the_general_path(tmp_path, monkeypatch):
    monkeypatch.setattr(edgelist, "MAX_FAST_COMMENTS", 2)
    g = read_graph(write(tmp_path, "a.txt", "".join(f"{i} {i + 1} # c\n" for i in range(10))))
    assert edges(g) == [(i, i + 1) for i in range(10)]


@pytest.mark.parametrize("chunk", [9, 1 << 20])
def test_error_line_numbers_across_chunks(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(readers, "CHUNK_BYTES", chunk)
    lines = [f"{i} {i + 1}" for i in range(300)]
    lines[211] = "211 x"
    with pytest.raises(GraphFormatError, match=r"e.txt:212: .*got 'x'"):
        read_graph(write(tmp_path, "e.txt", "\n".join(lines) + "\n"))
    body = [f"{i}: {i + 1} #" for i in range(299)] + ["299: #"]
    body[150] = "150: 151"
    with pytest.raises(GraphFormatError, match=r"g.gra:153: vertex line does not end with '#'"):
        read_graph(write(tmp_path, "g.gra", "graph_for_greach\n300\n" + "\n".join(body) + "\n"))


def test_digest_matches_file(tmp_path):
    import blake3

    p = write(tmp_path, "a.txt", "0 1\n" * 1000)
    assert read_graph(p).digest == "blake3:" + blake3.blake3(open(p, "rb").read()).hexdigest()


def test_large_ids_stay_int64(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTGRAIL_MEMORY", str(1 << 40))  # a machine that can hold 3e9 vertices
    g = read_graph(write(tmp_path, "a.txt", "0 3000000000\n"))
    assert g.n == 3000000001 and g.dst.dtype == np.int64 and g.dst[0] == 3000000000


def test_huge_id_refused_before_allocating(tmp_path, monkeypatch):
    """Issue 12 item 5: an id the machine cannot index is an error naming file, line and value."""
    import time

    monkeypatch.setenv("DISTGRAIL_MEMORY", str(16 << 30))
    p = write(tmp_path, "a.txt", "0 1\n1 3000000000\n")
    t = time.perf_counter()
    with pytest.raises(GraphFormatError, match=r"a.txt:2: vertex id too large \(3,000,000,001 vertices need at "
                                               r"least 178.8 GiB, this machine has 16.0 GiB.*got '3000000000'"):
        read_graph(p)
    assert time.perf_counter() - t < 1.0
    for text, msg in (("graph_for_greach\n9000000000\n0: #\n", r"a.gra:2: vertex count 9000000000: .* need"),
                      ("%%MatrixMarket matrix coordinate pattern general\n9000000000 9000000000 1\n1 1\n",
                       r"a.mtx:2: 9,000,000,000 vertices need")):
        name = "a.gra" if text.startswith("graph") else "a.mtx"
        with pytest.raises(GraphFormatError, match=msg):
            read_graph(write(tmp_path, name, text))
    with pytest.raises(GraphFormatError, match="--num-vertices 9000000000: 9,000,000,000 vertices need"):
        read_graph(write(tmp_path, "b.txt", "0 1\n"), num_vertices=9_000_000_000)
    with pytest.raises(GraphFormatError, match="graph too large: 9,000,000,000 vertices"):
        distgrail.as_graph((np.array([0]), np.array([1])), num_vertices=9_000_000_000)


# -- writers -----------------------------------------------------------------------------
def test_format_ints():
    vals = np.array([0, 5, 10, 999, 1000, 1000000, 7, 2**40])
    out = format_ints(vals, np.array([0, 1, 0, 1, 0, 1, 0, 1]), [b" ", b" #\n"])
    assert out == b"0 5 #\n10 999 #\n1000 1000000 #\n7 1099511627776 #\n"
    with pytest.raises(ValueError):
        format_ints(np.array([-1]), np.array([0]), [b" "])


def test_gra_writer_empty_rows_and_roundtrip(tmp_path):
    g = EdgeGraph(n=5, src=np.array([3, 0, 0, 3], np.int32), dst=np.array([4, 2, 1, 4], np.int32))
    p = tmp_path / "a.gra"
    write_graph(g, p)
    assert p.read_text() == "graph_for_greach\n5\n0: 1 2 #\n1: #\n2: #\n3: 4 #\n4: #\n"


# -- binary graph file -------------------------------------------------------------------
def test_binary_roundtrip_with_condensation(tmp_path):
    g = EdgeGraph(n=6, src=np.array([0, 1, 2, 2, 3, 5], np.int32), dst=np.array([1, 2, 0, 3, 4, 5], np.int32))
    dag = condense(g)
    p = str(tmp_path / "g.h5")
    write_binary_graph(g, p, dag=dag)
    back = read_binary_graph(p)
    assert back.n == 6 and edges(back) == sorted(set(edges(g)))
    stored = read_condensation(p)
    for k in DAG_FIELDS:
        np.testing.assert_array_equal(getattr(stored, k), getattr(dag, k))
        assert getattr(stored, k).dtype == getattr(dag, k).dtype
    # condense() reuses the stored condensation instead of recomputing it
    again = condense(back)
    assert again.meta.get("stored") is True
    for k in DAG_FIELDS:
        np.testing.assert_array_equal(getattr(again, k), getattr(dag, k))
    with h5py.File(p) as f:
        assert f["csr/indices"].chunks is None and f["csr/indptr"].chunks is None  # contiguous


def test_binary_version_and_foreign_files(tmp_path):
    p = str(tmp_path / "g.h5")
    write_binary_graph(generate("paper", 50, 3, seed=1), p)
    assert read_condensation(p) is None
    with h5py.File(p, "a") as f:
        f.attrs["format_version"] = 99
    with pytest.raises(GraphFormatError, match="format_version 99 is not supported.*reads versions 1, 2"):
        read_graph(p)
    q = str(tmp_path / "other.h5")
    with h5py.File(q, "w") as f:
        f.attrs["format"] = "something-else"
    with pytest.raises(GraphFormatError, match="not a distgrail graph file"):
        read_graph(q)
    r = write(tmp_path, "text.h5", "0 1\n")
    with pytest.raises(GraphFormatError, match="not an HDF5 file"):
        read_graph(r)


def test_binary_version_1_still_read(tmp_path):
    p = str(tmp_path / "v1.h5")
    with h5py.File(p, "w") as f:
        f.attrs["format"] = "distgrail-graph"
        f.attrs["format_version"] = 1
        f.attrs["n"] = 3
        f.attrs["m"] = 2
        f.create_dataset("csr/indptr", data=np.array([0, 1, 2, 2], np.int64))
        f.create_dataset("csr/indices", data=np.array([1, 2], np.uint8))
    g = read_graph(p)
    assert edges(g) == [(0, 1), (1, 2)] and g.dst.dtype == np.int32


def test_convert_stores_condensation_and_index_reuses_it(tmp_path):
    src = tmp_path / "g.gra"
    g0 = EdgeGraph(n=300, src=np.r_[np.arange(299), [250, 120]].astype(np.int32),
                   dst=np.r_[np.arange(1, 300), [100, 20]].astype(np.int32))
    write_graph(g0, src)
    h5 = tmp_path / "g.h5"
    assert main(["convert", str(src), "-o", str(h5), "--quiet"]) == 0
    with h5py.File(h5) as f:
        assert f["condensation"].attrs["n_components"] == condense(g0).C
    a = distgrail.build_index(str(src), dims=2, backend="cpu")
    b = distgrail.build_index(str(h5), dims=2, backend="cpu")
    for k in a.arrays:
        np.testing.assert_array_equal(a.arrays[k], b.arrays[k])
    assert main(["convert", str(src), "-o", str(tmp_path / "n.h5"), "--no-condense", "--quiet"]) == 0
    with h5py.File(tmp_path / "n.h5") as f:
        assert "condensation" not in f


# -- generators --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_generator_does_not_depend_on_block_size(kind):
    a = generate_csr(kind, 2000, 8, seed=11, levels=50)
    for block in (1, 97, 5000):
        b = generate_csr(kind, 2000, 8, seed=11, levels=50, block_edges=block)
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.indices, b.indices)
    c = generate_csr(kind, 2000, 8, seed=12, levels=50)
    assert not (c.indices.size == a.indices.size and np.array_equal(c.indices, a.indices))


def test_paper_generator_shape():
    g = generate_csr("paper", 400, 60, seed=2)  # maxdeg 120: rows near the end take all they can
    deg = np.diff(g.indptr)
    assert deg.max() <= 120
    for r in range(400):
        s = g.indices[g.indptr[r] : g.indptr[r + 1]]
        assert (np.diff(s) > 0).all() and (s > r).all()
    big = generate_csr("paper", 20000, 10, seed=1)
    assert abs(big.m / 20000 - 10) < 0.3  # average out-degree maxdeg / 2


def test_generate_cli_writes_identical_graphs(tmp_path):
    outs = {}
    for ext in ("gra", "txt", "h5"):
        p = tmp_path / f"g.{ext}"
        assert main(["generate", "layered", "-n", "900", "--degree", "4", "--levels", "300", "-o", str(p),
                     "--quiet"]) == 0
        outs[ext] = edges(read_graph(str(p)))
    assert outs["gra"] == outs["txt"] == outs["h5"]
    assert condense(read_graph(str(tmp_path / "g.h5"))).n_levels == 300


def test_io_benchmark_module_imports():
    assert hasattr(importlib.import_module("distgrail.benchmarks.io"), "main")


@pytest.mark.parametrize("one_core", [False, True])
def test_digest_on_one_core_and_several(tmp_path, monkeypatch, one_core):
    import blake3

    text = "# head\n" + "".join(f"{i} {i + 1}\n" for i in range(500)) + "% tail comment"
    p = write(tmp_path, "a.txt", text)
    if one_core:
        monkeypatch.setattr(readers.os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(readers, "CHUNK_BYTES", 100)
    assert read_graph(p).digest == "blake3:" + blake3.blake3(text.encode()).hexdigest()
    m = write(tmp_path, "a.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2\n")
    assert read_graph(m).digest == "blake3:" + blake3.blake3(open(m, "rb").read()).hexdigest()


@pytest.mark.parametrize("case", ["random", "selfloops", "empty", "one", "isolated", "sorted"])
def test_edge_csr_xp_equals_edge_graph_csr(case):
    """The device CSR of convert (edge_csr_xp, run here with NumPy) gives edge_graph_csr's numbers."""
    from distgrail.io.graph import EdgeGraph, edge_csr_xp, edge_graph_csr

    rng = np.random.default_rng(len(case))
    n = {"one": 1, "empty": 5, "isolated": 1000}.get(case, 300)
    m = {"empty": 0, "one": 3}.get(case, 3000)
    src = rng.integers(0, n if case != "isolated" else 50, m).astype(np.int32)
    dst = rng.integers(0, n if case != "isolated" else 50, m).astype(np.int32)
    if case == "selfloops":
        dst[::3] = src[::3]
    if case == "sorted":
        key = np.unique(src.astype(np.int64) * n + dst)
        src, dst = (key // n).astype(np.int32), (key % n).astype(np.int32)
    want = edge_graph_csr(EdgeGraph(n, src, dst))
    got = edge_csr_xp(np, src, dst, n)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and np.array_equal(a, b)
