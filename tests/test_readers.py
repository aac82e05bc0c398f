"""Graph input: every format, every error case with file:line and the value."""


import numpy as np
import pytest
import scipy.sparse as sp

import distgrail
import distgrail.io.generate
import distgrail.io.writers
from distgrail import GraphFormatError, read_graph
from distgrail.io.read import as_graph


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(p)


def edges(g):
    return sorted(zip(g.src.tolist(), g.dst.tolist()))


# -- .gra --------------------------------------------------------------------------------
def test_gra_with_and_without_header(tmp_path):
    body = "3\n0: 1 2 2 #\n1: #\n2: 0 #\n"
    a = read_graph(write(tmp_path, "a.gra", "graph_for_greach\n" + body))
    b = read_graph(write(tmp_path, "b.gra", body))
    assert a.n == b.n == 3
    assert edges(a) == edges(b) == [(0, 1), (0, 2), (0, 2), (2, 0)]


def test_gra_lines_in_any_order_crlf_and_blank_lines(tmp_path):
    g = read_graph(write(tmp_path, "a.gra", "graph_for_greach\r\n2\r\n1: 0 #\r\n\r\n0: #\r\n"))
    assert edges(g) == [(1, 0)]


@pytest.mark.parametrize("text,line,needle", [
    ("graph_for_greach\n3\n0: 1 #\n1: 7 #\n2: #\n", 4, "out of range 0..2, got '7'"),
    ("graph_for_greach\n3\n0: 1 #\n1: -2 #\n2: #\n", 4, "negative vertex id, got '-2'"),
    ("graph_for_greach\n3\n0: 1 #\n1: 1.5 #\n2: #\n", 4, "non-negative integer, got '1.5'"),
    ("graph_for_greach\n3\n0: 1 #\n1: x #\n2: #\n", 4, "got 'x'"),
    ("graph_for_greach\n3\n0: 1 #\n1: 2 #\n2: 0", 5, "does not end with '#'"),
    ("graph_for_greach\n3\n0: 1 #\n1: 2 #\n", 4, "truncated file? vertex count says 3 but the file lists 2"),
    ("graph_for_greach\n2\n0: 1 #\n1: #\n2: #\n", 5, "vertex id out of range 0..1, got '2:'"),
    ("graph_for_greach\n2\n0: 1 #\n1: #\n1: #\n", 5, "vertex count says 2 but the file lists 3"),
    ("graph_for_greach\nabc\n0: #\n", 2, "vertex count must be a non-negative integer, got 'abc'"),
    ("graph_for_greach\n2\n0: 1 # 1\n1: #\n", 3, "expected '<id>: <successors> #'"),
    ("graph_for_greach\n2\n0 1: #\n1: #\n", 3, "expected '<id>: <successors> #'"),
    ("graph_for_greach\n2\n0 1 #\n1: #\n", 3, "expected '<id>: <successors> #'"),
])
def test_gra_errors(tmp_path, text, line, needle):
    p = write(tmp_path, "bad.gra", text)
    with pytest.raises(GraphFormatError) as e:
        read_graph(p)
    assert f"bad.gra:{line}: " in str(e.value), str(e.value)
    assert needle in str(e.value)
    assert e.value.line == line


def test_gra_duplicate_vertex_line(tmp_path):
    with pytest.raises(GraphFormatError, match="vertex 1 is listed 0 times|listed 2 times"):
        read_graph(write(tmp_path, "d.gra", "graph_for_greach\n2\n0: 1 #\n0: #\n"))


def test_gra_empty_file(tmp_path):
    with pytest.raises(GraphFormatError, match="empty file"):
        read_graph(write(tmp_path, "e.gra", ""))


def test_gra_big_chunks_agree_with_small(tmp_path, monkeypatch):
    # parse across many chunk boundaries: same graph, same error lines
    g0 = distgrail.io.generate.paper_dag(3000, 6, seed=2)
    p = str(tmp_path / "g.gra")
    distgrail.io.writers.write_graph(g0, p)
    from distgrail.io import text as readers

    big = read_graph(p)
    monkeypatch.setattr(readers, "CHUNK_BYTES", 1000)
    small = read_graph(p)
    assert edges(big) == edges(small) == edges(g0)
    text = open(p).read().splitlines()
    text[2500] = text[2500].replace(":", ": 99999", 1)
    open(p, "w").write("\n".join(text) + "\n")
    with pytest.raises(GraphFormatError, match=r"g.gra:2501: vertex id out of range 0..2999, got '99999'"):
        read_graph(p)


# -- edge lists --------------------------------------------------------------------------
def test_edgelist_snap_style(tmp_path):
    text = "# Directed graph\n# FromNodeId\tToNodeId\n0\t1 1\n1\t2\t2 % trailing comment\n\n2 0 1\n2 0 1\n3 3 0.5\n"
    g = read_graph(write(tmp_path, "g.txt", text))
    assert g.n == 4
    assert edges(g) == [(0, 1), (1, 2), (2, 0), (2, 0), (3, 3)]


def test_edgelist_num_vertices(tmp_path):
    p = write(tmp_path, "g.txt", "0 1\n")
    assert read_graph(p, num_vertices=10).n == 10
    with pytest.raises(GraphFormatError, match=r"g.txt:1: vertex id out of range 0..0, got '1'"):
        read_graph(p, num_vertices=1)
    # a format that states its own vertex count: refused, not ignored (a binary graph too)
    h5 = str(tmp_path / "g.h5")
    distgrail.io.writers.write_graph(read_graph(p), h5)
    for path, fmt in ((write(tmp_path, "g.gra", "graph_for_greach\n2\n0: 1 #\n1: #\n"), "gra"), (h5, "h5")):
        assert read_graph(path).n == 2
        with pytest.raises(GraphFormatError, match=rf"--num-vertices applies to edge lists only, not '{fmt}'"):
            read_graph(path, num_vertices=10)


@pytest.mark.parametrize("text,line,needle", [
    ("0 1\n5\n", 2, "expected 'u v' (edge), got '5'"),
    ("0 1\n1 -4\n", 2, "negative vertex id, got '-4'"),
    ("0 1\n1 2.0\n", 2, "got '2.0'"),
    ("0 1\n1 b\n", 2, "got 'b'"),
    ("0 1\n1 99999999999999999999999\n", 2, "too large"),
])
def test_edgelist_errors(tmp_path, text, line, needle):
    with pytest.raises(GraphFormatError) as e:
        read_graph(write(tmp_path, "bad.txt", text))
    assert f"bad.txt:{line}: " in str(e.value) and needle in str(e.value), str(e.value)


# -- Matrix Market -----------------------------------------------------------------------
def test_mtx_pattern_and_symmetric(tmp_path):
    g = read_graph(write(tmp_path, "a.mtx", "%%MatrixMarket matrix coordinate pattern general\n% c\n3 3 2\n1 2\n2 3\n"))
    assert edges(g) == [(0, 1), (1, 2)]
    g = read_graph(write(tmp_path, "b.mtx", "%%MatrixMarket matrix coordinate real symmetric\n3 3 2\n2 1 1.5e0\n3 3 -2\n"))
    assert edges(g) == [(0, 1), (1, 0), (2, 2)]


@pytest.mark.parametrize("text,line,needle", [
    ("%%MatrixMarket matrix coordinate pattern general\n3 4 1\n1 2\n", 2, "must be square, got 3 x 4"),
    ("%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n", 3, "size line says 2 entries but the file has 1"),
    ("%%MatrixMarket matrix coordinate pattern general\n3 3 1\n0 2\n", 3, "out of range 1..3, got '0'"),
    ("%%MatrixMarket matrix array real general\n3 3\n", 1, "only 'matrix coordinate'"),
    ("%%MatrixMarket matrix coordinate pattern general\n", 2, "size line"),
])
def test_mtx_errors(tmp_path, text, line, needle):
    with pytest.raises(GraphFormatError) as e:
        read_graph(write(tmp_path, "bad.mtx", text))
    assert f"bad.mtx:{line}: " in str(e.value) and needle in str(e.value), str(e.value)


def test_unknown_format_and_missing_file(tmp_path):
    with pytest.raises(GraphFormatError, match="format must be one of"):
        read_graph(write(tmp_path, "a.txt", "0 1\n"), fmt="csv")
    with pytest.raises(GraphFormatError, match="no such file"):
        read_graph(str(tmp_path / "missing.gra"))


# -- in memory ---------------------------------------------------------------------------
def test_in_memory_inputs():
    src, dst = np.array([0, 1, 1]), np.array([1, 2, 2])
    a = as_graph((src, dst))
    b = as_graph(np.stack([src, dst], axis=1))
    c = as_graph(sp.coo_matrix((np.ones(3), (src, dst)), shape=(4, 4)))
    assert (a.n, b.n, c.n) == (3, 3, 4)
    assert edges(a) == edges(b) == [(0, 1), (1, 2), (1, 2)]
    assert edges(c) == [(0, 1), (1, 2), (1, 2)]


def test_in_memory_errors():
    with pytest.raises(GraphFormatError, match=r"targets\[1\] out of range 0..2, got 5"):
        as_graph((np.array([0, 1]), np.array([1, 5])), num_vertices=3)
    with pytest.raises(GraphFormatError, match=r"sources\[0\] out of range 0..2, got -1"):
        as_graph((np.array([-1]), np.array([1])), num_vertices=3)
    with pytest.raises(GraphFormatError, match="integer vertex ids, got 1.5"):
        as_graph((np.array([0.0, 1.5]), np.array([1.0, 2.0])))
    with pytest.raises(GraphFormatError, match="square"):
        as_graph(sp.coo_matrix((2, 3)))
    with pytest.raises(GraphFormatError, match="graph must be"):
        as_graph("not a file".split())


def test_networkx_if_installed():
    nx = pytest.importorskip("networkx", reason="networkx is optional; its reader is tested where installed")
    g = nx.DiGraph([("a", "b"), ("b", "c")])
    idx = distgrail.build_index(g, dims=2, backend="cpu")  # string nodes: the index takes the labels
    assert idx.reachable("a", "c") and not idx.reachable("c", "a")
