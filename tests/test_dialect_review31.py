"""What a review of the edge-list dialect found (session 31), each read whole or refused now with
file, line and value:

1. node names holding a blank in a CSV or TSV (``John Smith,Jane Doe``) were split at the blank
   (John -> Smith, exit 0): a comma-separated labelled file is split at commas only, a
   tab-separated one (a tab in its first edge line) at tabs only; blanks around a name are cut;
2. CSV header names in double quotes (R's ``write.csv``) skipped the header checks (``"to","from"``
   read 0 -> 1); R's unnamed row-names column (``"","from","to"``) is told as an index column;
3. CSV header names holding a blank (``Source Node,Target Node``) were split at it, and a column
   that does not exist was named in the refusal;
4. a labelled CSV's fields were counted as blank-separated tokens, so an empty later field (Gephi's
   empty Label) made a line "shorter": commas + 1 are counted, as in an integer CSV;
5. a header whose first two columns are not the source then the target (Hetionet's ``source
   metaedge target``) was told to add a header.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from distgrail.errors import GraphFormatError
from distgrail.io.dialect import sniff
from distgrail.io.parse import read_graph_numpy
from distgrail.io.read import read_graph


def cli(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "distgrail", *map(str, args)], capture_output=True, text=True,
                          env=env)


def edges(g) -> list:
    labels = g.meta.get("node_labels")
    name = (lambda i: labels.values[i].item()) if labels is not None else int
    return [(name(int(u)), name(int(v))) for u, v in zip(g.src.tolist(), g.dst.tolist())]


def read_both(path, fmt="auto"):
    """The CPU reader's graph, and the same from the GPU path's NumPy twin (node names: the host reader)."""
    g = read_graph(str(path), fmt)
    t = read_graph_numpy(str(path), fmt)
    assert edges(t) == edges(g) and t.n == g.n
    return g


def refused_by_both(path, match, fmt="auto"):
    msgs = []
    for read in (read_graph, read_graph_numpy):
        with pytest.raises(GraphFormatError, match=match) as e:
            read(str(path), fmt)
        msgs.append(str(e.value))
        assert "\n" not in msgs[-1] and msgs[-1].startswith(str(path))
    assert msgs[0] == msgs[1]
    return msgs[0]


# -- 1. names with a blank inside ------------------------------------------------------------------
@pytest.mark.parametrize("name,data,want", [
    ("f.csv", b"source,target\nJohn Smith,Jane Doe\nJane Doe,Bob Lee\n",
     [("John Smith", "Jane Doe"), ("Jane Doe", "Bob Lee")]),
    ("w.csv", b"source,target,km\nNew York,Los Angeles,3944\nLos Angeles,San Diego,180\n",
     [("New York", "Los Angeles"), ("Los Angeles", "San Diego")]),
    ("t.tsv", b"source\ttarget\nJohn Smith\tJane Doe\nJane Doe\tBob Lee\n",
     [("John Smith", "Jane Doe"), ("Jane Doe", "Bob Lee")]),
    ("sp.tsv", b"source target\nJohn Smith\tJane Doe\n", [("John Smith", "Jane Doe")]),  # (the header: any blanks)
    ("around.csv", b"source, target\n alice , bob\r\nbob,\tcarol # c, d\n",  # blanks around a name are cut
     [("alice", "bob"), ("bob", "carol")]),
    ("tabs.tsv", b"src\tdst\nalice\tbob\t\t1\nbob \t carol\t1\n", [("alice", "bob"), ("bob", "carol")]),
])
def test_names_with_blanks_are_whole_names(tmp_path, name, data, want):
    p = tmp_path / name
    p.write_bytes(data)
    assert edges(read_both(p)) == want


def test_names_with_blanks_index_and_query_by_name(tmp_path):
    p = tmp_path / "f.csv"
    p.write_bytes(b"source,target\nJohn Smith,Jane Doe\nJane Doe,Bob Lee\n")
    out = tmp_path / "f.h5"
    r = cli("index", p, "-o", out, "--backend", "cpu", "--quiet")
    assert r.returncode == 0, r.stderr
    r = cli("query", out, "--pair", "John Smith", "Bob Lee", "--backend", "cpu", "--quiet")
    assert r.returncode == 0 and r.stdout.strip() == "John Smith Bob Lee reachable", (r.stdout, r.stderr)
    r = cli("query", out, "--pair", "John", "Smith", "--backend", "cpu", "--quiet")
    assert r.returncode == 2 and "node 'John' is not in the graph" in r.stderr, r.stderr


@pytest.mark.parametrize("data", [
    b"John Smith,Jane Doe\nJane Doe,Bob Lee\n",  # --format labelled, no header
    b"source,target\nJohn Smith,Jane Doe,x,y\nJane Doe,Bob Lee\n",  # (lines of any length)
])
def test_format_labelled_splits_a_csv_at_commas(tmp_path, data):
    p = tmp_path / "g.csv"
    p.write_bytes(data)
    assert edges(read_graph(str(p), "labelled")) == [("John Smith", "Jane Doe"), ("Jane Doe", "Bob Lee")]


@pytest.mark.parametrize("name,data,line,what", [
    ("nocomma.csv", b"source,target\nalice,bob\ncarol dave\n", 3, "expected two node names"),
    ("notab.tsv", b"source target\nalice\tbob\ncarol dave\n", 3, "expected two node names"),
    ("blankname.csv", b"source,target,w\nalice,bob,1\nbob, ,x\n", 3, "an empty node name"),
    ("tabinside.csv", b"source,target\nalice,bob\nbob\tx,carol\n", 3, "control character"),
    ("width.tsv", b"source\ttarget\nalice\tbob\nbob\tcarol\tx\n", 3, "its first edge line has 2 fields, this one 3"),
    ("int.csv", b"source,target\nalice,bob\nbob,7\n", 3, "node names and integer ids mixed"),
    ("quote.csv", b"source,target\nalice,bob\n\"bob\",carol\n", 3, "a quoted field"),
])
def test_a_line_of_another_shape_is_refused(tmp_path, name, data, line, what):
    p = tmp_path / name
    p.write_bytes(data)
    msg = refused_by_both(p, what)
    assert msg.startswith(f"{p}:{line}: "), msg


def test_the_separator_is_said_when_a_line_has_one_field(tmp_path):
    p = tmp_path / "g.tsv"
    p.write_bytes(b"source\ttarget\nalice\tbob\ncarol dave\n")
    assert "split at tabs only" in refused_by_both(p, "expected two node names")
    p = tmp_path / "g.csv"
    p.write_bytes(b"source,target\nalice,bob\ncarol dave\n")
    assert "split at commas only" in refused_by_both(p, "expected two node names")


def test_names_split_at_commas_across_chunks(tmp_path, monkeypatch):
    import distgrail.io.text as text_mod

    monkeypatch.setattr(text_mod, "CHUNK_BYTES", 64)
    rng = np.random.default_rng(31)
    words = ["Ann Lee", "Bo", "Cy Doe Jr", "Dee", "E F"]
    pairs = [(words[rng.integers(0, 5)], words[rng.integers(0, 5)]) for _ in range(200)]
    p = tmp_path / "g.csv"
    p.write_text("source,target,w\n" + "".join(f"{u}, {v},{k % 3 or ''}\n" for k, (u, v) in enumerate(pairs)))
    assert edges(read_graph(str(p))) == pairs
    p = tmp_path / "g.tsv"
    p.write_text("source\ttarget\n" + "".join(f"{u}\t{v}\n" for u, v in pairs))
    assert edges(read_graph(str(p))) == pairs


@pytest.mark.parametrize("data", [b"0 1\n2 7 \t1.5 x -3\n", b"\t0 0\t4.5\n1 2\t3\n", b" 36 1\tx\n0 1\tx\n",
                                  b"src,dst\n0 1,2\n"])
def test_lines_of_ids_with_tabs_and_blanks_are_no_names(tmp_path, data):
    """Ids separated by blanks beside a tab or a comma stay ids (the first two tab- or comma-separated
    fields, '2 7' and '1.5 x -3', hold no name: the line's first token is a number)."""
    d = sniff(data, complete=True)
    assert not d.undeclared and not d.labelled
    p = tmp_path / "g.txt"
    p.write_bytes(data)
    try:
        g = read_graph(str(p))
    except GraphFormatError as e:
        assert "node names" not in str(e)
        refused_by_both(p, None)
        return
    assert edges(read_both(p)) == edges(g)


@pytest.mark.parametrize("data,want", [(b"source,target\nRoute 66,Main St\n", [("Route 66", "Main St")]),
                                       (b"source\ttarget\nBlock 7\t12 Main St\n", [("Block 7", "12 Main St")])])
def test_names_holding_a_number_word(tmp_path, data, want):
    p = tmp_path / "g.csv"
    p.write_bytes(data)
    assert edges(read_both(p)) == want


# -- 2. quoted CSV header names --------------------------------------------------------------------
@pytest.mark.parametrize("header,what", [
    ('"to","from"', "the header names column 1 'to' as the edges' target"),
    ('"dst","src"', "the header names column 1 'dst' as the edges' target"),
    ('"head","tail"', "ambiguous edge column names"),
    ('"Target Node","Source Node"', "the header names column 1 'target node' as the edges' target"),
])
def test_quoted_header_names_are_checked(tmp_path, header, what):
    p = tmp_path / "q.csv"
    p.write_text(f"{header}\n0,1\n1,2\n")
    assert refused_by_both(p, what).startswith(f"{p}:1: ")


@pytest.mark.parametrize("data", [b'"src","dst"\n0,1\n1,2\n', b'"source", "target"\n0,1\n1,2\n',
                                  b'"Source Node","Target Node","Weight"\n0,1,1\n1,2,1\n'])
def test_quoted_header_names_in_order_are_a_header(tmp_path, data):
    p = tmp_path / "q.csv"
    p.write_bytes(data)
    assert edges(read_both(p)) == [(0, 1), (1, 2)]


def test_quoted_header_declares_names(tmp_path):
    p = tmp_path / "q.csv"
    p.write_bytes(b'"source","target"\nalice,bob\n')
    assert edges(read_both(p)) == [("alice", "bob")]


@pytest.mark.parametrize("data", [b'"","from","to"\n"1",0,1\n"2",1,2\n', b'"","from","to"\n"1","a","b"\n',
                                  b',src,dst\n0,a,b\n', b' ,src,dst\n0,1,2\n'])
def test_r_row_names_are_told_as_an_index_column(tmp_path, data):
    p = tmp_path / "r.csv"
    p.write_bytes(data)
    msg = refused_by_both(p, "the header's first column has no name")
    assert msg.startswith(f"{p}:1: ") and "row.names=FALSE" in msg and "index=False" in msg


def test_a_quoted_number_line_is_no_header(tmp_path):
    """``"1","2"`` then ``3,4``: an edge line (its quotes refused), not a header skipped (the edge
    1 -> 2 was lost, exit 0)."""
    p = tmp_path / "n.csv"
    p.write_bytes(b'"1","2"\n3,4\n')
    assert refused_by_both(p, None).startswith(f"{p}:1: ")
    assert sniff(b'"1","2"\n3,4\n', complete=True).body == 0


# -- 3. header names with a blank ------------------------------------------------------------------
@pytest.mark.parametrize("header", ["Source Node,Target Node,Weight", "From Node,To Node", "source id,target id",
                                    "src ip,dst ip", "Source Node\tTarget Node", "node a,node b"])
def test_header_names_with_blanks_are_read_by_position(tmp_path, header):
    p = tmp_path / "h.csv"
    extra = ",1" if header.count(",") == 2 else ""
    sep = "\t" if "\t" in header else ","
    p.write_text(f"# made by hand\n{header}\n0{sep}1{extra}\n1{sep}2{extra}\n")
    assert edges(read_both(p)) == [(0, 1), (1, 2)]
    d = sniff(p.read_bytes(), complete=True)
    assert d.header_line == 2 and d.body == len(f"# made by hand\n{header}\n")
    p.write_text(f"# made by hand\n{header}\n0{sep}1{extra}\n1{sep}x{extra}\n")  # line numbers stay right
    assert refused_by_both(p, None).startswith(f"{p}:4: ")


@pytest.mark.parametrize("header,column,role", [
    ("Target Node,Source Node", 1, "target"), ("To Node,From Node", 1, "target"),
    ("node,Source Node", 2, "source"), ("dst ip,src ip,weight", 1, "target"),
])
def test_header_names_with_blanks_in_another_order_are_refused(tmp_path, header, column, role):
    p = tmp_path / "h.csv"
    extra = ",1" if header.count(",") == 2 else ""
    p.write_text(f"{header}\n0,1{extra}\n")
    msg = refused_by_both(p, f"the header names column {column} .* as the edges' {role}")
    assert msg.startswith(f"{p}:1: ")


def test_header_names_with_blanks_and_node_names_say_what_to_do(tmp_path):
    p = tmp_path / "h.csv"
    p.write_text("Source Node,Target Node\nalice,bob\n")
    msg = refused_by_both(p, "node names")
    assert msg.startswith(f"{p}:2: ") and "'Source Node,Target Node'" in msg and "--format labelled" in msg
    assert edges(read_graph(str(p), "labelled")) == [("alice", "bob")]  # (the header is skipped)


# -- 4. fields of a labelled CSV: commas + 1 -------------------------------------------------------
@pytest.mark.parametrize("data,want", [
    (b"Source,Target,Type,Id,Label,Weight\nalice,bob,Directed,0,,1.0\nbob,carol,Directed,1,friend,1.0\n",
     [("alice", "bob"), ("bob", "carol")]),  # Gephi: an empty Label
    (b"source,target,weight\nalice,bob,\nbob,carol,2\n", [("alice", "bob"), ("bob", "carol")]),
    (b'source,target,note\nalice,bob,"x, y"\nbob,carol,z\n', [("alice", "bob"), ("bob", "carol")]),
    (b"source,target,a,b\nalice,bob,,\nbob,carol,1 2,3\n", [("alice", "bob"), ("bob", "carol")]),
])
def test_labelled_csv_counts_commas(tmp_path, data, want):
    p = tmp_path / "g.csv"
    p.write_bytes(data)
    assert edges(read_both(p)) == want


def test_labelled_csv_of_another_width_is_refused(tmp_path):
    p = tmp_path / "g.csv"
    p.write_bytes(b"source,target,w\nalice,bob,1\nbob,carol\n")
    msg = refused_by_both(p, "its first edge line has 3 fields, this one 2")
    assert msg.startswith(f"{p}:3: ")


# -- 5. a header whose first two columns are not the source then the target ------------------------
@pytest.mark.parametrize("data", [b"source\tmetaedge\ttarget\nalice\tx\tbob\n",
                                  b"source\tmetaedge\ttarget\n0\tx\t1\n",
                                  b"source metaedge target\nGene::1 GiG Gene::2\n"])
def test_a_header_of_other_first_columns_says_so(tmp_path, data):
    p = tmp_path / "het.tsv"
    p.write_bytes(data)
    msg = refused_by_both(p, "the header names column 3 'target' as the edges' target")
    assert msg.startswith(f"{p}:1: ") and "header line such as" not in msg
    assert "source and target columns first" in msg


def test_a_header_of_other_names_over_ids_is_read_by_position(tmp_path):
    """A first line of column names distgrail does not know over integer ids stays a header."""
    p = tmp_path / "g.csv"
    p.write_bytes(b"node,neighbour\n0,1\n")
    assert edges(read_both(p)) == [(0, 1)]


# -- the rules above against the reference reader of the grammar -----------------------------------
HEADS = [["source", "target"], ['"source"', '"target"'], ['"to"', '"from"'], ["Source Node", "Target Node"],
         ["Target Node", "Source Node"], ["src ip", "dst ip", "w"], ['""', "from", "to"], ["source", "metaedge", "target"],
         ["node", "neighbour"], [], [], ["from node", "to node"], ["Source", "Target", "Label", "Weight"], ["u", "v"]]
HEADS += [["source", "target"], ["src", "dst"], ['"from"', '"to"'], ["Source", "Target", "Weight"]] * 3
NAMES = ["John Smith", "Jane Doe", "alice", "bob", "New York", "a b c", "x", "Route 66", "7", '"q"', " ", "0", "1"]
SEPS31 = [",", ", ", " ,", "\t", " \t", "\t\t", " ", ","]
EXTRA = ["", "1", "x y", '"a, b"', "1.5", ""]


def fuzz31(rng) -> bytes:
    sep = SEPS31[rng.integers(0, len(SEPS31))]
    head = HEADS[rng.integers(0, len(HEADS))]
    width = int(rng.choice([2, 2, 3, 4]))
    ids = rng.random() < 0.25
    out = [sep.join(head)] if head else []
    for _ in range(int(rng.integers(1, 6))):
        if rng.random() < 0.08:
            out.append("# c, d\tx")
            continue
        pick = (lambda: str(rng.integers(0, 5))) if ids else (lambda: NAMES[rng.integers(0, 9 if rng.random() < 0.9
                                                                                      else len(NAMES))])
        row = [pick(), pick()] + [EXTRA[rng.integers(0, len(EXTRA))] for _ in range(width - 2)]
        if rng.random() < 0.05:
            row = row[:-1] if len(row) > 2 else row + ["z"]
        out.append(sep.join(row))
    b = bytearray(("\n".join(out) + "\n").encode())
    for _ in range(int(rng.random() < 0.4)):
        k = int(rng.integers(0, len(b) + 1))
        b.insert(k, int(rng.choice(list(b" \t,\"#ab01\n"))))
    return bytes(b)


def test_fuzz_names_headers_and_separators_against_the_reference(tmp_path):
    """600 generated files of names with blanks, CSV and TSV, quoted and worded headers, empty
    and quoted later fields: the CPU reader refuses exactly when the reference reader of the
    grammar does (the GPU path's twin with the same line), and otherwise gives its edges."""
    from grammar_reference import reference
    from distgrail.dtypes import max_vertices

    rng = np.random.default_rng(31)
    counts = {"names": 0, "ids": 0, "refused": 0}
    for i in range(600):
        data = fuzz31(rng)
        p = tmp_path / f"g{i}.txt"
        p.write_bytes(data)
        want = reference(data, max_vertices())
        try:
            g = read_graph(str(p))
        except GraphFormatError as e:
            assert want is None, (data, str(e), want)
            with pytest.raises(GraphFormatError) as twin:
                read_graph_numpy(str(p))
            assert str(twin.value) == str(e), data
            counts["refused"] += 1
            continue
        assert want is not None, (data, "read as", edges(g))
        n, pairs, names = want
        assert g.n == n and [tuple(map(str, e)) for e in edges(g)] == [tuple(map(str, e)) for e in pairs], data
        assert edges(read_graph_numpy(str(p))) == edges(g), data
        counts["names" if names else "ids"] += 1
    assert min(counts.values()) > 40, counts
