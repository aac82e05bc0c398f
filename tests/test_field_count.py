"""When the first edge line of an integer edge list is of integers only, every later edge line of
integers only has as many fields (docs/inputs.md, rule 6). An adjacency list or a METIS file read
as an edge list lost edges with exit 0: ``0 1 2 3`` was read as the edge 0 -> 1, its other columns
ignored as weights. Such a file is refused at its first line of integers of another field count,
with file, line and value, by the CPU reader (plain, gzip, chunk after chunk), the GPU parser's
twin (whose kernels flag F_WIDTH only for a line of digit runs, or whose host scan counts a CSV's
commas) and a range of a file as a rank parses it. A line with any other field (a float weight,
NetworkX's attribute dict ``{'weight': 1.0}``, a word, an empty CSV field) is not held to the
count, nor is any line when the first edge line has such a field: NetworkX's ``write_edgelist``
output, Gephi tables with ``#`` or ``%`` in a later column, CSV lines of which only some end with a
comma, weighted and temporal edge lists all read (the first rule, of any field count, refused them).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

from distgrail.cli import main
from distgrail.constants import F_LINE, F_VALUE, F_WIDTH
from distgrail.errors import GraphFormatError
from distgrail.io import compressed, guards, text as texts
from distgrail.io.chunks import plan_read
from distgrail.io.parse import _Anomaly, _parse_file, NumpyDevice, file_width, parse_chunk_numpy, \
    read_graph_numpy, read_text_range
from distgrail.io.read import read_graph
from conftest import ROOT


def write(tmp_path, name, data: bytes, gz: bool = False):
    p = tmp_path / (name + (".gz" if gz else ""))
    p.write_bytes(gzip.compress(data) if gz else data)
    return str(p)


def refused_alike(p, line: int, fields: int, got: str, comma: bool = False, first: int = 1) -> str:
    """The CPU reader and the GPU parser's twin refuse ``p`` with the same one line, naming the
    line, the count the first edge line has, and the value."""
    what = "comma-separated integer fields" if comma else "integer fields"
    with pytest.raises(GraphFormatError) as cpu:
        read_graph(p)
    msg = str(cpu.value)
    assert msg.startswith(f"{p}:{line}: expected {fields} {what}, as on the first edge line (line {first}): "), msg
    assert msg.endswith(f", got {got}") and "\n" not in msg, msg
    for chunk in (64, None):
        with pytest.raises(GraphFormatError) as twin:
            read_graph_numpy(p, chunk_bytes=chunk)
        assert str(twin.value) == msg
    return msg


def edges(g):
    return list(zip(g.src.tolist(), g.dst.tolist()))


# -- refused: lines of other field counts -----------------------------------------------------------

@pytest.mark.parametrize("gz", [False, True])
def test_an_adjacency_list_is_refused(tmp_path, gz):
    p = write(tmp_path, "adj.txt", b"0 1 2 3\n1 2\n", gz)
    refused_alike(p, 2, 4, "'1 2'")
    p = write(tmp_path, "adj2.txt", b"# adjacency\n0 1\n1 2 3 0\n2 0\n", gz)  # (the first line had 2)
    refused_alike(p, 3, 2, "'1 2 3 0'", first=2)


@pytest.mark.parametrize("gz", [False, True])
def test_a_metis_file_is_refused(tmp_path, gz):
    """METIS: 'n m' then one line of neighbours (1-based) per vertex."""
    p = write(tmp_path, "g.metis", b"% METIS\n4 5\n2 3\n1 3 4\n1 2\n2\n", gz)
    refused_alike(p, 4, 2, "'1 3 4'", first=2)


def test_an_extra_column_on_one_line_is_refused(tmp_path):
    refused_alike(write(tmp_path, "w.txt", b"0 1\n0 1 5\n"), 2, 2, "'0 1 5'")
    refused_alike(write(tmp_path, "w2.txt", b"0 1 5\n0 1\n1 2 5\n"), 2, 3, "'0 1'")
    # a line of one field is the error it was (no edge), whatever the first line holds
    for data in (b"0 1 5\n3\n", b"0 1\n3\n"):
        with pytest.raises(GraphFormatError, match=r":2: expected 'u v' \(edge\), got '3'"):
            read_graph(write(tmp_path, "one.txt", data))


def test_a_csv_line_with_another_column_count_is_refused(tmp_path):
    p = write(tmp_path, "w.csv", b"src,dst,w\n0,1,2\n0,1,2,3\n")
    refused_alike(p, 3, 3, "'0,1,2,3'", comma=True, first=2)
    p = write(tmp_path, "short.csv", b"src,dst,w\n0,1,2\n1,2\n")
    refused_alike(p, 3, 3, "'1,2'", comma=True, first=2)
    # commas separate the fields of a comma-separated file: '2 3' is one field, not two ids (review 32)
    with pytest.raises(GraphFormatError, match=r"mixed.csv:2: an edge line without a comma .* got '2 3'"):
        read_graph(write(tmp_path, "mixed.csv", b"0,1\n2 3\n"))


def test_an_optional_integer_column_is_refused(tmp_path):
    """``0 1 5`` then ``1 2``: an adjacency list, or an integer weight some lines lack? Ambiguous:
    refused, the message says why."""
    msg = refused_alike(write(tmp_path, "opt.txt", b"0 1 5\n1 2\n"), 2, 3, "'1 2'")
    assert "an edge list's lines of integers hold the same columns (an adjacency list is no edge list)" in msg
    refused_alike(write(tmp_path, "opt.csv", b"0,1,5\n1,2\n"), 2, 3, "'1,2'", comma=True)
    refused_alike(write(tmp_path, "opt2.csv", b"0, 1 ,5\r\n1 ,2\r\n"), 2, 3, "'1 ,2'", comma=True)
    # after lines of other fields, the first line of integers of another count
    refused_alike(write(tmp_path, "late.txt", b"0 1 7\n1 2 0.5\n2 3 {}\n3 4 x\n4 5\n"), 5, 3, "'4 5'")
    refused_alike(write(tmp_path, "tail.txt", b"0 1 7\n1 2 3 # c\n2 3 #x\n"), 3, 3, "'2 3 #x'")


@pytest.mark.parametrize("gz", [False, True])
def test_a_width_change_after_the_first_chunk_is_caught(tmp_path, monkeypatch, gz):
    """Chunks of 64 bytes: the first edge line's count holds across them (the file is read in chunks)."""
    monkeypatch.setattr(texts, "CHUNK_BYTES", 64)
    monkeypatch.setattr(compressed, "CHUNK_BYTES", 64)
    lines = [b"%d %d 1" % (i, i + 1) for i in range(300)]
    lines[250] = b"250 251 1 7"
    p = write(tmp_path, "late.txt", b"# c\n" + b"\n".join(lines) + b"\n", gz)
    refused_alike(p, 252, 3, "'250 251 1 7'", first=2)
    lines = [b"%d,%d,%d" % (i, i + 1, i) for i in range(300)]
    lines[200] = b"200,201,1,2"
    p = write(tmp_path, "late.csv", b"src,dst,a\n" + b"\n".join(lines) + b"\n", gz)
    refused_alike(p, 202, 3, "'200,201,1,2'", comma=True, first=2)
    # a whole chunk of comments before the first edge line
    p = write(tmp_path, "comments.txt", b"# x\n" * 40 + b"0 1\n" * 40 + b"1 2 3\n", gz)
    refused_alike(p, 81, 2, "'1 2 3'", first=41)


def test_the_cli_exits_2_and_leaves_no_output(tmp_path, capsys):
    p = write(tmp_path, "adj.txt", b"0 1 2 3\n1 2\n")
    out = tmp_path / "o.h5"
    assert main(["index", p, "-o", str(out), "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"distgrail: error: {p}:2: expected 4 integer fields, as on the "
                                               f"first edge line (line 1)") and err[0].endswith("got '1 2'"), err
    assert sorted(os.listdir(tmp_path)) == ["adj.txt"]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "distgrail", "index", p, "-o", str(out)], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and f"{p}:2: expected 4 integer fields" in r.stderr, \
        r.stderr
    assert sorted(os.listdir(tmp_path)) == ["adj.txt"]


# -- read as before -----------------------------------------------------------------------------------

@pytest.mark.parametrize("gz", [False, True])
def test_weighted_temporal_and_snap_files_keep_reading(tmp_path, gz):
    cases = [
        (b"0 1 0.5\n1 2 0.25\n", [(0, 1), (1, 2)]),
        (b"0 1 0.5 1700000000\n1 2 0.25 1700000001\n", [(0, 1), (1, 2)]),
        (b"# Directed graph (each unordered pair of nodes is saved once)\n# Nodes: 3 Edges: 2\n"
         b"# FromNodeId\tToNodeId\n0\t1\n1\t2 \t\n", [(0, 1), (1, 2)]),
        (b"0 1\n1\t\t2\n", [(0, 1), (1, 2)]),  # (a first edge line without a tab: tabs are blanks, 2 fields)
        (b"0 1 # a comment tail is no field\n1 2\n2 0 %% nor is this\n\n# 5 6 7\n", [(0, 1), (1, 2), (2, 0)]),
        (b"0 1 #x y z\n1 2 %\n", [(0, 1), (1, 2)]),
        (b"0 1\r\n1 2\r\n", [(0, 1), (1, 2)]),
        (b"src dst\n0 1\n1 2", [(0, 1), (1, 2)]),
    ]
    for k, (data, want) in enumerate(cases):
        p = write(tmp_path, f"ok{k}.txt", data, gz)
        assert edges(read_graph(p)) == want, data
        got = read_graph_numpy(p, chunk_bytes=64)
        assert edges(got) == want and got.meta["parser"] == "numpy", data


@pytest.mark.parametrize("gz", [False, True])
def test_csv_tables_with_empty_and_quoted_later_fields_keep_reading(tmp_path, gz):
    """Fields of a comma-separated line are its commas + 1: Gephi's empty label columns count, and
    commas inside a double-quoted field (RFC 4180) do not."""
    cases = [
        (b"Source,Target,Type,Id,Label,timeset,Weight\n0,1,Directed,0,,,1.0\n0,2,Directed,1,e1,lbl,1.0\n",
         [(0, 1), (0, 2)]),
        (b"Source,Target,Type,Id,Label,timeset,Weight\n0,1,Directed,0,,,1.0\n0,2,Directed,1,my label,,1.0\n"
         b'1,2,Directed,2,"a, b",,1.0\n2,0,Directed,3,"say ""hi"", %1",,1.0\n', [(0, 1), (0, 2), (1, 2), (2, 0)]),
        (b"src,dst,w\n0,1,2 # a,b,c\n# x,y,z,w\n1,2,3\n", [(0, 1), (1, 2)]),
        (b"0, 1, 5\n1, 2, 6\n", [(0, 1), (1, 2)]),
        (b"src,dst\n0 1\n1 2\n", [(0, 1), (1, 2)]),  # (a header's commas make a CSV: every line one 'field')
    ]
    for k, (data, want) in enumerate(cases):
        p = write(tmp_path, f"ok{k}.csv", data, gz)
        assert edges(read_graph(p)) == want, data
        got = read_graph_numpy(p, chunk_bytes=64)
        assert edges(got) == want and got.meta["parser"] == "numpy", data


#: what NetworkX's ``write_edgelist(G, path)`` writes by default (``data=True``: each edge's attribute
#: dict, blanks inside it) for a graph of mixed attributes, and with ``delimiter=","``
NX_TEXT = b"0 1 {}\n1 2 {'weight': 1.0}\n2 3 {'label': 'x y', 'w': 2}\n"
NX_CSV = b"0,1,{}\n1,2,{'weight': 1.0}\n2,3,{'label': 'x y', 'w': 2}\n"
NX_EDGES = [(0, 1), (1, 2), (2, 3)]


def reads_alike(p, want, chunks=(64, None)):
    """The CPU reader and the GPU parser's twin read ``p`` as ``want``, the twin with its kernels."""
    assert edges(read_graph(p)) == want, p
    for chunk in chunks:
        got = read_graph_numpy(p, chunk_bytes=chunk)
        assert edges(got) == want and got.meta["parser"] == "numpy", (p, chunk)


@pytest.mark.parametrize("gz", [False, True])
def test_networkx_write_edgelist_with_its_default_data_reads(tmp_path, gz):
    """``write_edgelist``'s default output (attribute dicts of other token counts per line) and its
    ``delimiter=","`` variant: refused by the first rule (line 2, ``expected 3 fields``), read now."""
    reads_alike(write(tmp_path, "nx.txt", NX_TEXT, gz), NX_EDGES)
    reads_alike(write(tmp_path, "nx.csv", NX_CSV, gz), NX_EDGES)
    several = b"0 1 {}\n1 2 {'weight': 0.5, 'color': 'red', 'note': 'a b c'}\n2 0 {'weight': 2}\n"
    reads_alike(write(tmp_path, "nx2.txt", several, gz), [(0, 1), (1, 2), (2, 0)])
    # the first line holds integers only, the next ones are held to its count only when they do too
    reads_alike(write(tmp_path, "nx3.txt", b"0 1 7\n1 2 {'weight': 1.0}\n2 3 {}\n", gz), NX_EDGES)


def test_networkx_dicts_of_several_keys_on_the_first_line_read(tmp_path):
    """A first line whose dict holds a comma makes the file comma-separated (rule 4): its fields
    are ``0 1 {'weight': 0.5`` and `` 'color': 'red'}``, no integers, so no line is held to a count."""
    several = b"0 1 {'weight': 0.5, 'color': 'red'}\n1 2 {}\n2 0 {'weight': 2}\n"
    reads_alike(write(tmp_path, "nx4.txt", several), [(0, 1), (1, 2), (2, 0)])


def test_networkx_written_files_read(tmp_path):
    """The same, written by NetworkX itself (its text is the one the test above reads)."""
    nx = pytest.importorskip("networkx")
    g = nx.DiGraph()
    g.add_edge(0, 1)
    g.add_edge(1, 2, weight=1.0)
    g.add_edge(2, 3, label="x y", w=2)
    for name, kw, want in (("g.txt", {}, NX_TEXT), ("g.csv", {"delimiter": ","}, NX_CSV)):
        p = str(tmp_path / name)
        nx.write_edgelist(g, p, **kw)
        with open(p, "rb") as f:
            assert f.read() == want
        reads_alike(p, NX_EDGES)
    out = tmp_path / "g.h5"
    assert main(["index", str(tmp_path / "g.txt"), "-o", str(out), "--backend", "cpu", "--quiet"]) == 0
    assert out.exists()


@pytest.mark.parametrize("gz", [False, True])
def test_comment_marks_inside_later_csv_columns_read(tmp_path, gz):
    """A ``#`` or ``%`` in a later CSV column cuts its line short (the rest is a comment): such a
    line has a field no integer (``Directed``) and is not held to a count; its first two fields
    are read as before. Refused by the first rule (``expected 5 comma-separated fields``)."""
    gephi = b"Source,Target,Type,Id,Label,Weight\n0,1,Directed,0,#python,1.0\n1,2,Directed,1,foo,1.0\n"
    reads_alike(write(tmp_path, "gephi.csv", gephi, gz), [(0, 1), (1, 2)])
    url = b"Source,Target,Label,Weight\n0,1,New%20York,1.0\n1,2,Paris,2.0\n2,0,a%2Cb,3\n"
    reads_alike(write(tmp_path, "url.csv", url, gz), [(0, 1), (1, 2), (2, 0)])
    tag = b"0,1,x,#tag\n1,2,y,z\n2,3,%\n"  # (the last line: '2,3,' once cut, an empty field)
    reads_alike(write(tmp_path, "tag.csv", tag, gz), [(0, 1), (1, 2), (2, 3)])


@pytest.mark.parametrize("gz", [False, True])
def test_csv_lines_of_which_only_some_end_with_a_comma_read(tmp_path, gz):
    """``1,2,`` has an empty third field, no integer: not held to ``0,1``'s count (refused by the
    first rule, ``expected 2 comma-separated fields``)."""
    reads_alike(write(tmp_path, "tc.csv", b"0,1\n1,2,\n", gz), [(0, 1), (1, 2)])
    reads_alike(write(tmp_path, "tc2.csv", b"0,1,\n1,2\n2,3,,\n", gz), [(0, 1), (1, 2), (2, 3)])


@pytest.mark.parametrize("gz", [False, True])
def test_integer_columns_and_float_weights_read(tmp_path, gz):
    """KONECT's ``u v w t`` (integers, the same count on every line) reads; float weights read
    whatever count each line has, since such a first line holds nothing to a count."""
    reads_alike(write(tmp_path, "out.konect", b"% asym unweighted\n% 3 3 3\n0 1 1 1700000000\n1 2 1 1700000001\n"
                                              b"2 0 3 1700000002\n", gz), [(0, 1), (1, 2), (2, 0)])
    reads_alike(write(tmp_path, "w.txt", b"0 1 0.5\n1 2 0.25 1700000000\n2 3\n3 4 1 2 3\n", gz),
                [(0, 1), (1, 2), (2, 3), (3, 4)])
    reads_alike(write(tmp_path, "w.csv", b"src,dst,w\n0,1,0.5\n1,2\n2,3,1,2\n", gz), [(0, 1), (1, 2), (2, 3)])


@pytest.mark.parametrize("gz", [False, True])
def test_lines_of_other_fields_after_the_first_chunk_read(tmp_path, monkeypatch, gz):
    """Chunks of 64 bytes: a first line of a float weight frees every line of the count, chunk
    after chunk; after a first line of integers, a late line of another count with a field no
    integer reads, one of integers only is refused (test above)."""
    monkeypatch.setattr(texts, "CHUNK_BYTES", 64)
    monkeypatch.setattr(compressed, "CHUNK_BYTES", 64)
    lines = [b"%d %d 0.5" % (i, i + 1) for i in range(300)]
    lines[250] = b"250 251 1 7"
    lines[260] = b"260 261"
    reads_alike(write(tmp_path, "float.txt", b"\n".join(lines) + b"\n", gz), [(i, i + 1) for i in range(300)])
    lines = [b"%d %d 1" % (i, i + 1) for i in range(300)]
    lines[250] = b"250 251 {'weight': 1.0}"
    reads_alike(write(tmp_path, "int.txt", b"\n".join(lines) + b"\n", gz), [(i, i + 1) for i in range(300)])
    lines = [b"%d,%d,,x" % (i, i + 1) for i in range(300)]
    lines[200] = b"200,201,,x,y"
    lines[210] = b"210,211"
    reads_alike(write(tmp_path, "late.csv", b"src,dst,a,b\n" + b"\n".join(lines) + b"\n", gz),
                [(i, i + 1) for i in range(300)])


def test_other_readers_keep_their_own_rules(tmp_path):
    """Matrix Market entries hold the fields their header says (tests/test_mtx_fields.py), pairs
    files are held by their own rule, and ``--format labelled`` reads lines of any length."""
    p = write(tmp_path, "m.mtx", b"%%MatrixMarket matrix coordinate integer general\n3 3 2\n1 2 5\n2 3 7\n")
    assert edges(read_graph(p)) == [(0, 1), (1, 2)]
    p = write(tmp_path, "m2.mtx", b"%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n2 3 7\n")
    with pytest.raises(GraphFormatError, match=r"m2.mtx:4: Matrix Market 'pattern' entries are 'row col', got 3"):
        read_graph(p)
    p = write(tmp_path, "l.txt", b"a b c\nb c\n")
    assert read_graph(p, "labelled").m == 2
    p = write(tmp_path, "g.gra", b"graph_for_greach\n3\n0: 1 2 #\n1: 2 #\n2: #\n")
    assert read_graph(p).m == 3 and read_graph_numpy(p, chunk_bytes=64).m == 3


# -- the twin, the kernels' flag and the ranks' width ----------------------------------------------------

def test_the_twin_flags_lines_of_another_width():
    def flags(data, width):
        return int(parse_chunk_numpy(data, "edgelist", width=width)["flags"][0])

    assert flags(b"0 1\n2 3 4\n", 2) == F_WIDTH
    assert flags(b"0 1\n2 3 4\n", 0) == 0  # (0: not checked, as for .gra)
    assert flags(b"0 1 # x y\n2 3 #z\n4 5 %\n\n# 1 2 3\n", 2) == 0  # comment tails and lines are no fields
    assert flags(b"0 1 #x\n", 3) == F_WIDTH and flags(b"0 1 #x y\n", 2) == 0 and flags(b"0 1 %\n", 2) == 0
    assert flags(b"0 1#x y\n", 2) == F_VALUE  # (a comment mark glued to an id: guards.glued_mark)
    assert flags(b"0\t\t1\n", 2) == 0 and flags(b"0 1\n3\n", 2) == F_LINE | F_WIDTH
    # only a line whose tokens are all digit runs is held to the width
    assert [flags(x, 2) for x in (b"0 1 0.5\n", b"0 1 {}\n", b"0 1 7x\n", b"0 1 {'w': 1}\n", b"0 1 7#x\n",
                                  b"0 1 7%\n", b"0 1 7\r\n", b"0 1 -7\n")] == [0, 0, 0, 0, F_WIDTH, F_WIDTH, F_WIDTH, 0]
    assert flags(b"x 1 2\n", 2) == F_VALUE and flags(b"0 99999999999 2\n", 2) == F_VALUE | F_WIDTH
    r = parse_chunk_numpy(b"0 1 9\n1 2\n", "edgelist", width=3)  # the line is still converted
    assert r["flags"][0] == F_WIDTH and r["line_u"].tolist()[:2] == [0, 1] and r["line_v"].tolist()[:2] == [1, 2]


def test_the_twin_counts_fields_as_the_cpu_reader():
    """Random lines of blanks, digits, comment marks and other bytes: the twin flags F_WIDTH
    exactly when a line of integers only (:func:`guards.line_integer`) has fields
    (:func:`guards.line_fields`) other than ``width``."""
    rng = np.random.default_rng(5)
    alphabet = np.frombuffer(b"0011 \t\t  #%x,.\n\n", np.uint8)
    for _ in range(600):
        data = alphabet[rng.integers(0, alphabet.size, int(rng.integers(1, 60)))].tobytes()
        counts = {guards.line_fields(ln, False) for ln in data.split(b"\n") if guards.line_integer(ln, False)} - {0}
        for width in (1, 2, 3):
            got = bool(parse_chunk_numpy(data, "edgelist", width=width)["flags"][0] & F_WIDTH)
            assert got == bool(counts - {width}), (data, width, counts)


def test_a_rank_range_takes_the_files_first_edge_line(tmp_path):
    """A rank's range starts anywhere in the body: the lines of the second range agree with each
    other, not with the file's first edge line, and are refused."""
    data = b"src dst w\n0 1 5\n1 2 5\n2 3\n3 4\n"
    p = write(tmp_path, "r.txt", data)
    plan = plan_read(p)
    cut = data.index(b"2 3\n")
    assert file_width(plan) == 3
    assert read_text_range(p, plan, plan.body, cut).anomaly is None
    assert "did not accept" in read_text_range(p, plan, cut, plan.size).anomaly
    with pytest.raises(_Anomaly):
        _parse_file(plan, NumpyDevice(), 1024)
    data = b"src,dst,w\n0,1,5\n1,2,5\n2,3\n3,4\n"
    p = write(tmp_path, "r.csv", data)
    plan = plan_read(p)
    assert file_width(plan) == 3 and "did not accept" in read_text_range(p, plan, data.index(b"2,3"), plan.size).anomaly
    with pytest.raises(GraphFormatError, match=r"r.csv:4: expected 3 comma-separated integer fields"):
        read_graph(p)
    # a first line with a field no integer: -1, no range is held to a count
    for name, data in (("f.txt", b"0 1 0.5\n1 2 0.5\n2 3 4 5\n3 4\n"), ("f.csv", b"0,1,x\n1,2,y\n2,3,4,5\n3,4\n")):
        p = write(tmp_path, name, data)
        plan = plan_read(p)
        assert file_width(plan) == -1
        cut = data.index(b"\n2") + 1
        one = read_text_range(p, plan, plan.body, cut)
        two = read_text_range(p, plan, cut, plan.size)
        assert one.anomaly is None and two.anomaly is None
        assert list(zip(two.src.tolist(), two.dst.tolist())) == [(2, 3), (3, 4)]


# -- the counts themselves ---------------------------------------------------------------------------------

def test_line_fields():
    assert [guards.line_fields(x, False) for x in (b"0 1", b" 0\t\t1 ", b"0 1 2 3", b"#", b"", b"0 1#2 3")] == \
        [2, 2, 4, 0, 0, 2]
    assert [guards.line_fields(x, True) for x in (b"0,1", b"0,1,Directed,0,,,1.0", b'0,1,"a,b"', b'0,1,"a""b,c"',
                                                  b'0,1,x "y,z"', b"0,1 # ,,", b'0,1,"#,",2', b" , ")] == \
        [2, 7, 3, 3, 4, 2, 4, 0]
    assert guards.first_edge_fields(b"# a b c\n\n  \n0 1 2\n3 4\n", False) == (12, 3, True)
    assert guards.first_edge_fields(b"# a\n", True) == (-1, 0, False)
    assert guards.first_edge_width(b"0,1,,\n", True) == (0, -1) and guards.first_edge_width(b" 0 , 1\n", True) == (0, 2)
    assert guards.comma_width(b"0,1,4,5\n# x\n1,2,3,4\n1,2\n", 0) == (20, 4, 0)
    assert guards.comma_width(b"0,1,,\n# x\n1,2,3,4\n1,2\n", 0) == (-1, -1, 0)  # (an empty field: no count)
    assert guards.comma_width(b"1,2,,\n1,2,x\n1,2\n", 4) == (12, 4, 0)
    assert guards.comma_width(b"1,2\n", -1) == (-1, -1, -1)
    assert guards.comma_width(b"1,2\n", 4) == (0, 4, 0) and guards.comma_width(b"\n# x,y\n", 0) == (-1, 0, -1)
    assert [guards.line_integer(x, False) for x in (b"0 1 2 3", b" 0\t1 ", b"0 1 0.5", b"0 1 {}", b"0 1 7#x y",
                                                    b"#")] == [True, True, False, False, True, False]
    assert [guards.line_integer(x, True) for x in (b"0,1", b" 0 , 1 \r", b"0,1,", b"0,,1", b"0,1 2", b'0,1,"2"',
                                                   b"0,1,Directed,0,#python,1.0", b"0,1,2#,x")] == \
        [True, True, False, False, False, False, False, True]


def test_the_compiled_comma_scan_equals_its_numpy_twin():
    from distgrail.io.fields_jit import comma_width

    rng = np.random.default_rng(6)
    alphabet = np.frombuffer(b',,,,0011 \t\n\n\r#%""x', np.uint8)
    for _ in range(4000):
        data = alphabet[rng.integers(0, alphabet.size, int(rng.integers(0, 50)))].tobytes()
        for width in (-1, 0, 2, 3):
            got = tuple(int(x) for x in comma_width(np.frombuffer(data, np.uint8), width))
            assert got == guards.comma_width_numpy(data, width), (data, width)
    many = b'0,1,2\n' + b'0,1,"a,b"\n' * (guards.SPECIAL_JIT + 1) + b"1,2\n"  # (many quotes: the compiled pass)
    assert guards.comma_width(many, 0) == (len(many) - 4, 3, 0) == guards.comma_width_numpy(many, 0)
    # many lines of other counts to walk: the compiled pass, the same answer
    walk = b"0,1\n" + b"1,2,\n" * (guards.SPECIAL_JIT + 1) + b"1,2,3\n"
    assert guards.comma_width_numpy(walk, 0, walk=guards.SPECIAL_JIT) is None
    assert guards.comma_width(walk, 0) == (len(walk) - 6, 2, 0) == guards.comma_width_numpy(walk, 0)


def rule6_text(rng) -> bytes:
    """A small file for rule 6: lines of integer ids and further columns, integers or not, of
    mixed counts, blank- or comma-separated, with comments, a header and CRLF now and then."""
    comma = rng.random() < 0.5
    sep = "," if comma else rng.choice([" ", "\t", " \t"])
    extras = ["7", "12", "0.5", "{}", "{'weight': 1.0}", "x y", "", "#c", "%20", "-3", " 8 "]
    extras += ['"a,b"'] if comma else []  # (a quote in a blank-separated file is refused by another rule)
    base = int(rng.integers(2, 5))
    out = ["src" + sep + "dst"] if rng.random() < 0.2 else []
    for _ in range(int(rng.integers(1, 10))):
        if rng.random() < 0.1:
            out.append("# note" if rng.random() < 0.5 else "")
            continue
        k = base if rng.random() < 0.6 else int(rng.integers(2, 6))
        toks = [str(rng.integers(0, 9)) for _ in range(2)]
        toks += [str(rng.integers(0, 9)) if rng.random() < 0.6 else extras[rng.integers(0, len(extras))]
                 for _ in range(k - 2)]
        if not comma:
            toks = [t for t in toks if t.strip()]
        out.append(sep.join(toks))
    end = "\r\n" if rng.random() < 0.2 else "\n"
    return (end.join(out) + end).encode()


def test_rule6_readers_against_the_reference_grammar(tmp_path):
    """400 files of mixed columns: the CPU reader and the twin (chunks of 64 bytes, so a line's
    count is held across chunks) refuse exactly what tests/grammar_reference.py refuses, with one
    line naming the file, and otherwise read its edges."""
    from grammar_reference import reference
    from distgrail.dtypes import max_vertices

    rng = np.random.default_rng(66)
    counts = {"ok": 0, "refused": 0, "width": 0}
    for i in range(400):
        data = rule6_text(rng)
        p = write(tmp_path, f"r{i}.{'csv' if b',' in data else 'txt'}", data)
        want = reference(data, max_vertices())
        try:
            g = read_graph(p)
        except GraphFormatError as e:
            assert want is None, (data, str(e))
            counts["refused"] += 1
            counts["width"] += "integer fields, as on the first edge line" in str(e)
            with pytest.raises(GraphFormatError) as twin:
                read_graph_numpy(p, chunk_bytes=64)
            assert str(twin.value) == str(e)
            continue
        assert want is not None and edges(g) == want[1], (data, edges(g), want)
        assert edges(read_graph_numpy(p, chunk_bytes=64)) == want[1], data
        counts["ok"] += 1
    assert counts["ok"] > 100 and counts["width"] > 50, counts
