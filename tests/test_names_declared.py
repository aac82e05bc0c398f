"""Node names are read only where the user asked for them (distgrail/io/dialect.py, io/formats,
io/tables.py): a file is read whole or refused, never a guess at a format it does not declare.

* ``--format auto`` reads a text edge list as node names only after a header whose first two
  fields are a source then a target name (``source target``, ``src,dst``, ``from to``, ...). Any
  two-word text without one (a Python script, a word list, ``alice bob``) was indexed as a
  labelled graph, exit 0 (``import os`` -> edge import -> os); it is refused at its first edge line
  with what to do. ``--format labelled`` reads such a file as before.
* ``head`` and ``tail`` mean opposite ends in graph theory (tail -> head) and in knowledge graphs
  (``head,relation,tail``): a Parquet/Arrow table with them was read tail -> head, every edge
  reversed, exit 0; a text header ``tail,head`` was read by position. Both are refused unless a
  source name right before a target name picks the edge columns (``src,dst,head``).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

import distgrail
from distgrail.cli import main
from distgrail.errors import GraphFormatError
from distgrail.io.chunks import plan_read
from distgrail.io.dialect import sniff
from distgrail.io.parse import read_graph_numpy
from distgrail.io.read import read_graph
from conftest import ROOT

HINT = "(pass --format labelled to read a graph of node names, or give the file a header line such as 'source target')"
AMBIGUOUS = "'head' and 'tail' mean opposite ends in graph theory"


def cli(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "distgrail", *map(str, args)], capture_output=True, text=True,
                          env=env)


def names_of(g) -> list:
    """The graph's edges as (name, name), in file order."""
    vals = g.meta["node_labels"].values.tolist()
    return [(vals[u], vals[v]) for u, v in zip(g.src.tolist(), g.dst.tolist())]


# -- 1. node names without a header declaring them: refused by auto, read when asked ---------------
def test_a_python_file_is_refused_by_auto_and_read_when_asked(tmp_path):
    p = tmp_path / "words.txt"
    p.write_text("import os\nimport sys\n")
    out = tmp_path / "out.h5"
    r = cli("index", p, "-o", out, "--backend", "cpu", "--quiet")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.strip() == f"distgrail: error: {p}:1: node names, not integer ids: 'import os' {HINT}"
    assert sorted(os.listdir(tmp_path)) == ["words.txt"]  # no index, no temporary file
    with pytest.raises(GraphFormatError, match=r"words.txt:1: node names, not integer ids: 'import os'"):
        read_graph(p)
    with pytest.raises(GraphFormatError, match=r"words.txt:1: node names, not integer ids"):  # the GPU path's plan
        read_graph_numpy(p)
    r = cli("index", p, "-o", out, "--backend", "cpu", "--quiet", "--format", "labelled")
    assert r.returncode == 0, r.stderr
    g = read_graph(p, fmt="labelled")
    assert g.m == 2 and names_of(g) == [("import", "os"), ("import", "sys")]
    (tmp_path / "q.txt").write_text("import sys\nos sys\n")
    r = cli("query", out, tmp_path / "q.txt", "-o", "-", "--backend", "cpu", "--quiet")
    assert r.returncode == 0 and r.stdout.split() == ["1", "0"], r.stderr
    # graphs in memory are no files: their labels are what they are
    assert distgrail.build_index({"a": ["b"]}, dims=2, backend="cpu").reachable("a", "b")
    assert distgrail.build_index(np.array([["import", "os"]]), dims=2, backend="cpu").reachable("import", "os")


@pytest.mark.parametrize("name,data,line,shown", [
    ("pairs.txt", b"alice bob\nbob carol\n", 1, "'alice bob'"),
    ("pairs.csv", b"alice,bob\nbob,carol\n", 1, "'alice,bob'"),
    ("late.tsv", b"# people\n\n% who follows whom\nalice\tbob\n", 4, "'alice\\tbob'"),
    ("pairs.txt.gz", gzip.compress(b"# c\nalice bob\n"), 2, "'alice bob'"),  # (the line of the text inflated)
    ("kv.txt", b"colour blue\nsize 3\n", 1, "'colour blue'"),  # a key-value file
    ("script.py", b"#!/usr/bin/env python\n\nimport os\n", 3, "'import os'"),
])
def test_names_without_a_header_are_refused_with_what_to_do(tmp_path, name, data, line, shown):
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(GraphFormatError) as e:
        read_graph(p)
    assert str(e.value) == f"{p}:{line}: node names, not integer ids: {shown} {HINT}"
    with pytest.raises(GraphFormatError) as twin:
        plan_read(str(p))
    assert str(twin.value) == str(e.value)
    if name != "kv.txt":  # (asked for: read; the key-value file's '3' is a name then)
        assert read_graph(p, fmt="labelled").meta["node_labels"] is not None


@pytest.mark.parametrize("header", ["source target", "src dst", "from\tto", "Source,Target", "node1 node2",
                                   "src,dst,weight"])
def test_a_header_naming_source_and_target_declares_names(tmp_path, header):
    sep = "," if "," in header else "\t" if "\t" in header else " "
    extra = sep + "1" if header.count(",") == 2 else ""
    p = tmp_path / "g.txt"
    p.write_text(f"{header}\n" + "".join(f"{u}{sep}{v}{extra}\n" for u, v in
                                         [("alice", "bob"), ("bob", "carol"), ("dave", "alice")]))
    g = read_graph(p)
    assert names_of(g) == [("alice", "bob"), ("bob", "carol"), ("dave", "alice")]
    p.write_text("".join(p.read_text().splitlines(keepends=True)[1:]))  # the same lines, no header
    with pytest.raises(GraphFormatError, match=r"g.txt:1: node names, not integer ids: 'alice"):
        read_graph(p)


def test_a_declared_labelled_index_answers_queries_by_name(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("source target\nalice bob\nbob carol\n")
    out = tmp_path / "i.h5"
    assert main(["index", str(p), "-o", str(out), "--backend", "cpu", "--quiet"]) == 0
    (tmp_path / "q.txt").write_text("alice carol\ncarol alice\nbob carol\n")  # pairs: names, no header
    r = cli("query", out, tmp_path / "q.txt", "-o", "-", "--backend", "cpu", "--quiet")
    assert r.returncode == 0 and r.stdout.split() == ["1", "0", "1"], r.stderr
    idx = distgrail.open_index(str(out))
    assert idx.reachable("alice", "carol") and not idx.reachable("carol", "alice")
    p.write_text("alice bob\nbob carol\n")  # the same edges without the header: refused
    assert main(["index", str(p), "-o", str(tmp_path / "j.h5"), "--backend", "cpu", "--quiet"]) == 2
    assert not (tmp_path / "j.h5").exists()


def test_sniff_says_declared_and_undeclared_names(tmp_path):
    d = sniff(b"source target\nalice bob\n", complete=True)
    assert d.labelled and not d.undeclared and d.body == 14
    d = sniff(b"# x\nalice bob\n", complete=True)
    assert not d.labelled and d.undeclared_line == 2 and "node names, not integer ids" in d.undeclared
    for text in (b"0 1\n", b"src dst\n0 1\n", b"weight w\n0 1\n", b"0 x\n"):  # ids, or one bad id: no names
        assert not sniff(text, complete=True).undeclared and not sniff(text, complete=True).labelled
    assert "byte order mark" in sniff(b"\xef\xbb\xbfsource target\na b\n", complete=True).undeclared
    assert "CSV quoting is not read" in sniff(b'"a","b"\n"b","c"\n', complete=True).undeclared
    assert sniff(b'"source","target"\n"a","b"\n', complete=True).labelled  # (quoted column names: a header;
    quoted = tmp_path / "quoted.csv"  # the names' quotes: refused by the reader, at their line)
    quoted.write_bytes(b'"source","target"\n"a","b"\n')
    with pytest.raises(GraphFormatError, match=r"quoted.csv:2: a quoted field: CSV quoting is not read"):
        read_graph(quoted)
    p = tmp_path / "blob.txt"  # binary data whose first line looks like two words: the binary check says so
    p.write_bytes(b"\x89PNG data\n\x00\x01\x02")
    with pytest.raises(GraphFormatError, match="binary data, not a text graph file"):
        read_graph(p)


def test_update_refuses_names_declared_or_not(tmp_path, capsys):
    base = tmp_path / "g.txt"
    base.write_text("0 1\n1 2\n")
    index = tmp_path / "g.h5"
    assert main(["index", str(base), "-o", str(index), "--backend", "cpu", "--quiet"]) == 0
    edges = tmp_path / "new.txt"
    edges.write_text("alice bob\n")
    capsys.readouterr()
    assert main(["update", str(index), "--add", str(edges), "-o", str(tmp_path / "u.h5")]) == 2
    err = capsys.readouterr().err  # (not "pass --format labelled", which update refuses too)
    assert f"{edges}:1: edges by node name, not integer ids: 'alice bob'; 'update' takes the index's vertex ids" in err \
        and "--format labelled" not in err
    edges.write_text("src dst\nalice bob\n")
    assert main(["update", str(index), "--add", str(edges), "-o", str(tmp_path / "u.h5")]) == 2
    assert "edges by node name" in capsys.readouterr().err
    assert not (tmp_path / "u.h5").exists()


def test_names_files_against_the_reference_grammar(tmp_path):
    """300 generated files of names, with or without a header (declaring or not), comments and
    lines of another shape: ``auto`` refuses exactly when the reference reader does, and otherwise
    gives its edges."""
    from grammar_reference import reference
    from distgrail.dtypes import max_vertices

    rng = np.random.default_rng(8)
    heads = ["source target", "src,dst", "from to", "u v", "dst src", "a b", "x y", "head tail", "tail head",
             "head,relation,tail", "src head", "", "", "caller callee"]
    words = ["alice", "bob", "carol", "import", "os", "sys", "x1", "-", "a.b"]
    counts = {"read": 0, "refused": 0}
    for i in range(300):
        sep = [" ", ",", "\t"][rng.integers(0, 3)]
        lines = [heads[rng.integers(0, len(heads))].replace(",", sep)]
        width = int(rng.choice([2, 2, 3]))
        for _ in range(int(rng.integers(1, 6))):
            if rng.random() < 0.1:
                lines.append("# c")
            w = width + (1 if rng.random() < 0.05 else 0)
            lines.append(sep.join(words[rng.integers(0, len(words))] for _ in range(w)))
        data = ("\n".join(ln for ln in lines if ln) + "\n").encode()
        p = tmp_path / f"n{i}.txt"
        p.write_bytes(data)
        want = reference(data, max_vertices())
        try:
            g = read_graph(p)
        except GraphFormatError as e:
            assert want is None, (data, str(e))
            counts["refused"] += 1
            continue
        assert want is not None, (data, "read as", names_of(g))
        assert want[2] and names_of(g) == want[1], data
        counts["read"] += 1
    assert counts["read"] > 30 and counts["refused"] > 100, counts


# -- 2. head and tail: opposite meanings, refused as edge columns ----------------------------------
@pytest.mark.parametrize("header,rows", [
    ("head,relation,tail", "Q1,P31,Q5\nQ5,P279,Q2\n"),  # a knowledge graph's triples: head -> tail
    ("head,relation,tail", "0,7,1\n1,7,2\n"),
    ("tail,head", "0,1\n"),  # graph theory's arc: read by position before, tail -> head
    ("head tail", "alice bob\n"),
    ("src head", "0 1\n"),
    ("tail,dst", "0,1\n"),
])
@pytest.mark.parametrize("fmt", ["auto", "labelled"])
def test_a_text_header_of_head_and_tail_is_refused(tmp_path, header, rows, fmt):
    p = tmp_path / "kg.csv"
    p.write_text(f"{header}\n{rows}")
    with pytest.raises(GraphFormatError) as e:
        read_graph(p, fmt=fmt)
    msg = str(e.value)
    assert msg.startswith(f"{p}:1: ambiguous edge column names (") and AMBIGUOUS in msg, msg
    assert "rename the edge columns, e.g. to source,target" in msg and msg.endswith(f"got {header!r}"), msg
    r = cli("index", p, "-o", tmp_path / "kg.h5", "--backend", "cpu", "--quiet", "--format", fmt)
    assert r.returncode == 2 and r.stderr.strip() == f"distgrail: error: {msg}"
    assert sorted(os.listdir(tmp_path)) == ["kg.csv"]


def test_a_source_then_target_header_may_name_later_columns_head_or_tail(tmp_path):
    p = tmp_path / "g.csv"
    p.write_text("src,dst,head\n0,1,5\n1,2,5\n")
    g = read_graph(p)
    assert g.src.tolist() == [0, 1] and g.dst.tolist() == [1, 2]
    p.write_text("tail,head,weight\n0,1,5\n1,2,5\n")  # head/tail as the edge columns: refused
    with pytest.raises(GraphFormatError, match="g.csv:1: ambiguous edge column names"):
        read_graph(p)


def _tables(tmp_path, cols: dict):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    t = pa.table(cols)
    pq.write_table(t, tmp_path / "g.parquet")
    feather.write_feather(t, tmp_path / "g.feather")
    return [tmp_path / "g.parquet", tmp_path / "g.feather"]


@pytest.mark.parametrize("cols", [
    {"head": ["Q1", "Q5"], "relation": ["P31", "P279"], "tail": ["Q5", "Q2"]},  # read tail -> head before
    {"head": [0, 1], "relation": [7, 7], "tail": [1, 2]},
    {"tail": [0, 1], "head": [1, 2]},
    {"head": [0, 1], "tail": [1, 2], "weight": [1.0, 1.0]},
    {"src": [0, 1], "head": [1, 2]},
    {"src": [0, 1], "weight": [1, 1], "dst": [1, 2], "tail": [3, 3]},  # roles apart: head/tail refused too
])
def test_a_table_with_head_or_tail_columns_is_refused(tmp_path, cols):
    for p in _tables(tmp_path, cols):
        with pytest.raises(GraphFormatError) as e:
            read_graph(p)
        msg = str(e.value)
        assert msg.startswith(f"{p}: ambiguous edge column names (") and AMBIGUOUS in msg, msg
        assert f"among columns {list(cols)}" in msg and "e.g. to source,target" in msg, msg
        assert main(["index", str(p), "-o", str(tmp_path / "x.h5"), "--backend", "cpu", "--quiet"]) == 2
        assert not (tmp_path / "x.h5").exists()


@pytest.mark.parametrize("cols", [
    {"src": [0, 1], "dst": [1, 2]},
    {"src": ["a", "b"], "dst": ["b", "c"], "head": ["x", "y"]},  # a source name right before a target name
    {"tail": [9, 9], "source": [0, 1], "target": [1, 2]},
])
def test_tables_whose_source_and_target_are_named_still_read(tmp_path, cols):
    for p in _tables(tmp_path, cols):
        g = read_graph(p)
        if "src" in cols and isinstance(cols["src"][0], str):
            assert names_of(g) == [("a", "b"), ("b", "c")]
        else:
            assert g.src.tolist() == [0, 1] and g.dst.tolist() == [1, 2]
    renamed = {{"src": "Tail", "source": "Tail", "dst": "HEAD", "target": "HEAD"}.get(k, k): v for k, v in cols.items()}
    for p in _tables(tmp_path, renamed):  # the same edges under head/tail: refused, whatever the case
        with pytest.raises(GraphFormatError, match="ambiguous edge column names"):
            read_graph(p)
