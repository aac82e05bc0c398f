"""Every edge line of an integer edge list has as many fields as its first edge line (docs/inputs.md,
rule 6). An adjacency list or a METIS file read as an edge list lost edges with exit 0: ``0 1 2 3``
was read as the edge 0 -> 1, its other columns ignored as weights. Now such a file is refused at
its first line of another field count, with file, line and value, by the CPU reader (plain, gzip,
chunk after chunk), the GPU parser's twin (whose kernels flag F_WIDTH, or whose host scan counts a
CSV's commas) and a range of a file as a rank parses it; weighted and temporal edge lists, whose
every line has the extra columns, and Gephi's edge tables (empty later fields) keep reading.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

from distgrail.cli import main
from distgrail.constants import F_LINE, F_WIDTH
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
    what = "comma-separated fields" if comma else "fields"
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
    # commas separate the fields of a comma-separated file: a blank-separated line has one field
    refused_alike(write(tmp_path, "mixed.csv", b"0,1\n2 3\n"), 2, 2, "'2 3'", comma=True)


@pytest.mark.parametrize("gz", [False, True])
def test_a_width_change_after_the_first_chunk_is_caught(tmp_path, monkeypatch, gz):
    """Chunks of 64 bytes: the first edge line's count holds across them (the file is read in chunks)."""
    monkeypatch.setattr(texts, "CHUNK_BYTES", 64)
    monkeypatch.setattr(compressed, "CHUNK_BYTES", 64)
    lines = [b"%d %d 1" % (i, i + 1) for i in range(300)]
    lines[250] = b"250 251 1 7"
    p = write(tmp_path, "late.txt", b"# c\n" + b"\n".join(lines) + b"\n", gz)
    refused_alike(p, 252, 3, "'250 251 1 7'", first=2)
    lines = [b"%d,%d,,x" % (i, i + 1) for i in range(300)]
    lines[200] = b"200,201,,x,y"
    p = write(tmp_path, "late.csv", b"src,dst,a,b\n" + b"\n".join(lines) + b"\n", gz)
    refused_alike(p, 202, 4, "'200,201,,x,y'", comma=True, first=2)
    # a whole chunk of comments before the first edge line
    p = write(tmp_path, "comments.txt", b"# x\n" * 40 + b"0 1\n" * 40 + b"1 2 3\n", gz)
    refused_alike(p, 81, 2, "'1 2 3'", first=41)


def test_the_cli_exits_2_and_leaves_no_output(tmp_path, capsys):
    p = write(tmp_path, "adj.txt", b"0 1 2 3\n1 2\n")
    out = tmp_path / "o.h5"
    assert main(["index", p, "-o", str(out), "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"distgrail: error: {p}:2: expected 4 fields, as on the first edge "
                                               f"line (line 1)") and err[0].endswith("got '1 2'"), err
    assert sorted(os.listdir(tmp_path)) == ["adj.txt"]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "distgrail", "index", p, "-o", str(out)], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and f"{p}:2: expected 4 fields" in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["adj.txt"]


# -- read as before -----------------------------------------------------------------------------------

@pytest.mark.parametrize("gz", [False, True])
def test_weighted_temporal_and_snap_files_keep_reading(tmp_path, gz):
    cases = [
        (b"0 1 0.5\n1 2 0.25\n", [(0, 1), (1, 2)]),
        (b"0 1 0.5 1700000000\n1 2 0.25 1700000001\n", [(0, 1), (1, 2)]),
        (b"# Directed graph (each unordered pair of nodes is saved once)\n# Nodes: 3 Edges: 2\n"
         b"# FromNodeId\tToNodeId\n0\t1\n1\t\t2\n", [(0, 1), (1, 2)]),  # (tabs are blanks: 2 fields)
        (b"0 1 # a comment tail is no field\n1 2\n2 0 %% nor is this\n\n# 5 6 7\n", [(0, 1), (1, 2), (2, 0)]),
        (b"0 1#x y z\n1 2 %\n", [(0, 1), (1, 2)]),
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


def test_other_readers_keep_their_own_rules(tmp_path):
    """Matrix Market entries are checked by the size line, pairs files by their own rule, and
    ``--format labelled`` reads lines of any length."""
    p = write(tmp_path, "m.mtx", b"%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n2 3 7\n")
    assert edges(read_graph(p)) == [(0, 1), (1, 2)]
    p = write(tmp_path, "l.txt", b"a b c\nb c\n")
    assert read_graph(p, "labelled").m == 2
    p = write(tmp_path, "g.gra", b"graph_for_greach\n3\n0: 1 2 #\n1: 2 #\n2: #\n")
    assert read_graph(p).m == 3 and read_graph_numpy(p, chunk_bytes=64).m == 3


# -- the twin, the kernels' flag and the ranks' width ----------------------------------------------------

def test_the_twin_flags_lines_of_another_width():
    def flags(data, width):
        return int(parse_chunk_numpy(data, "edgelist", width=width)["flags"][0])

    assert flags(b"0 1\n2 3 4\n", 2) == F_WIDTH
    assert flags(b"0 1\n2 3 4\n", 0) == 0  # (0: not checked, as for .gra and Matrix Market)
    assert flags(b"0 1 # x y\n2 3#z\n4 5 %\n\n# 1 2 3\n", 2) == 0  # comment tails and lines are no fields
    assert flags(b"0 1 #x\n", 3) == F_WIDTH and flags(b"0 1#x y\n", 2) == 0 and flags(b"0 1 %\n", 2) == 0
    assert flags(b"0\t\t1\n", 2) == 0 and flags(b"0 1\n3\n", 2) == F_LINE | F_WIDTH
    r = parse_chunk_numpy(b"0 1 9\n1 2\n", "edgelist", width=3)  # the line is still converted
    assert r["flags"][0] == F_WIDTH and r["line_u"].tolist()[:2] == [0, 1] and r["line_v"].tolist()[:2] == [1, 2]


def test_the_twin_counts_fields_as_the_cpu_reader():
    """Random lines of blanks, digits, comment marks and other bytes: the twin flags F_WIDTH
    exactly when a line has fields (:func:`guards.line_fields`) other than ``width``."""
    rng = np.random.default_rng(5)
    alphabet = np.frombuffer(b"01 \t\t#%x,\n\n", np.uint8)
    for _ in range(400):
        data = alphabet[rng.integers(0, alphabet.size, int(rng.integers(1, 60)))].tobytes()
        counts = {guards.line_fields(ln, False) for ln in data.split(b"\n")} - {0}
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
    with pytest.raises(GraphFormatError, match=r"r.csv:4: expected 3 comma-separated fields"):
        read_graph(p)


# -- the counts themselves ---------------------------------------------------------------------------------

def test_line_fields():
    assert [guards.line_fields(x, False) for x in (b"0 1", b" 0\t\t1 ", b"0 1 2 3", b"#", b"", b"0 1#2 3")] == \
        [2, 2, 4, 0, 0, 2]
    assert [guards.line_fields(x, True) for x in (b"0,1", b"0,1,Directed,0,,,1.0", b'0,1,"a,b"', b'0,1,"a""b,c"',
                                                  b'0,1,x "y,z"', b"0,1 # ,,", b'0,1,"#,",2', b" , ")] == \
        [2, 7, 3, 3, 4, 2, 4, 0]
    assert guards.first_edge_fields(b"# a b c\n\n  \n0 1 2\n3 4\n", False) == (12, 3)
    assert guards.first_edge_fields(b"# a\n", True) == (-1, 0)
    assert guards.comma_width(b"0,1,,\n# x\n1,2,3,4\n1,2\n", 0) == (18, 4, 0)
    assert guards.comma_width(b"1,2\n", 4) == (0, 4, 0) and guards.comma_width(b"\n# x,y\n", 0) == (-1, 0, -1)


def test_the_compiled_comma_scan_equals_its_numpy_twin():
    from distgrail.io.fields_jit import comma_width

    rng = np.random.default_rng(6)
    alphabet = np.frombuffer(b',,,01 \t\n\n\r#%""x', np.uint8)
    for _ in range(3000):
        data = alphabet[rng.integers(0, alphabet.size, int(rng.integers(0, 50)))].tobytes()
        for width in (0, 2, 3):
            got = tuple(int(x) for x in comma_width(np.frombuffer(data, np.uint8), width))
            assert got == guards.comma_width_numpy(data, width), (data, width)
    many = b'0,1,"a,b"\n' * (guards.SPECIAL_JIT + 1) + b"1,2\n"  # (many quotes: the compiled pass)
    assert guards.comma_width(many, 0) == (len(many) - 4, 3, 0) == guards.comma_width_numpy(many, 0)
