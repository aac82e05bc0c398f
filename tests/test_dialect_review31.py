"""What a review of the edge-list dialect found (session 31), each read whole or refused now with
file, line and value:

2. CSV header names in double quotes (R's ``write.csv``) skipped the header checks (``"to","from"``
   read 0 -> 1); R's unnamed row-names column (``"","from","to"``) is told as an index column;
3. CSV header names holding a blank (``Source Node,Target Node``) were split at it, and a column
   that does not exist was named in the refusal;
5. a header whose first two columns are not the source then the target (Hetionet's ``source
   metaedge target``) was told to add a header.
"""

from __future__ import annotations

import os
import subprocess
import sys

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
