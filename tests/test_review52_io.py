"""What a review of the readers found (session 52): a graph file refused or misread that the rules
(docs/inputs.md) read, or the other way round.

- A chunk of only comments or blank lines (4 MiB of them: a file's commented-out block) crashed
  the reader of node names split at commas or tabs with an IndexError (a traceback, exit 1), and
  made the integer reader refuse a valid file with "internal parse mismatch" (NumPy's
  ``fromstring`` reads a blank buffer as one 0).
- A control character inside a node name of a file split at blanks (``a\\x01b c``) was kept in the
  name; the CSV and TSV readers refuse it, as the grammar says.
- ``dst_node,src_node`` (and ``destination,...``, ``tgt,...``) was read with the first column as the
  source: the names were not known, so nothing said the columns were reversed.
- A Parquet or Arrow table of columns ``Target Node, Source Node`` was read by position, the
  targets taken for sources (the text reader refuses that header).
- A Zstandard file that starts with a skippable frame (metadata, which ``zstd -d`` skips) was
  refused as binary data.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from distgrail.cli import main
from distgrail.errors import GraphFormatError
from distgrail.io.parse import read_graph_numpy
from distgrail.io.read import read_graph

#: more than two 4 MiB chunks of comments: one chunk holds nothing else
COMMENTS = b"# a commented-out block of the file\n" * ((9 << 20) // 36)


def _edges(g):
    labels = g.meta.get("node_labels")
    name = (lambda i: labels.values.tolist()[i]) if labels is not None else int
    return [(name(int(u)), name(int(v))) for u, v in zip(np.asarray(g.src), np.asarray(g.dst))]


@pytest.mark.parametrize("name,data,fmt,want", [
    ("names.tsv", b"source\ttarget\nalice\tbob\n" + COMMENTS + b"carol\tdave\n", "auto",
     [("alice", "bob"), ("carol", "dave")]),
    ("names.csv", b"source,target\nalice,bob\n" + COMMENTS + b"carol,dave\n", "auto",
     [("alice", "bob"), ("carol", "dave")]),
    ("blank_lines.tsv", b"alice\tbob\n" + b"\n" * (9 << 20) + b"carol\tdave\n", "labelled",
     [("alice", "bob"), ("carol", "dave")]),
    ("ids.tsv", b"0\t1\n" + COMMENTS + b"1\t2\n", "auto", [(0, 1), (1, 2)]),
    ("ids.csv", b"src,dst\n0,1\n" + COMMENTS + b"1,2\n", "auto", [(0, 1), (1, 2)]),
    ("ids.txt", b"0 1\n" + COMMENTS + b"1 2\n", "auto", [(0, 1), (1, 2)]),
    ("ids.mtx", b"%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n" + COMMENTS.replace(b"#", b"%")
     + b"2 3\n", "auto", [(0, 1), (1, 2)]),
])
def test_a_chunk_of_only_comments_reads(tmp_path, name, data, fmt, want):
    path = tmp_path / name
    path.write_bytes(data)
    assert _edges(read_graph(str(path), fmt)) == want


def test_a_chunk_of_only_comments_indexes_from_the_cli(tmp_path, capsys):
    path = tmp_path / "names.csv"
    path.write_bytes(b"source,target\nalice,bob\n" + COMMENTS + b"carol,dave\n")
    out = tmp_path / "out.h5"
    assert main(["index", str(path), "-o", str(out), "--backend", "cpu", "--quiet"]) == 0, capsys.readouterr().err
    assert out.exists()


@pytest.mark.parametrize("data,fmt,line,got", [
    (b"source target\na\x01b c\nd e\n", "auto", 2, "'a\\x01b c'"),
    (b"source target\nalice bob\ncarol dave\x1f\n", "auto", 3, "'carol dave\\x1f'"),
    (b"a\x1fb c\nd e\n", "labelled", 1, "'a\\x1fb c'"),
    (b"a b\r\nc\x0bd e\r\n", "labelled", 2, "'c\\x0bd e'"),
])
def test_a_control_character_in_a_name_split_at_blanks_is_refused(tmp_path, capsys, data, fmt, line, got):
    path = tmp_path / "names.txt"
    path.write_bytes(data)
    with pytest.raises(GraphFormatError, match=f"names.txt:{line}: control character in a node name") as e:
        read_graph(str(path), fmt)
    assert got in str(e.value)
    out = tmp_path / "out.h5"
    assert main(["index", str(path), "-o", str(out), "--format", fmt, "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"names.txt:{line}: control character" in err and "Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == ["names.txt"]


def test_a_control_character_after_the_names_is_another_column(tmp_path):
    path = tmp_path / "names.txt"
    path.write_bytes(b"a b \x01\nc d # \x02\n")
    assert _edges(read_graph(str(path), "labelled")) == [("a", "b"), ("c", "d")]


@pytest.mark.parametrize("header,column", [
    (b"dst_node,src_node", "dst_node"),
    (b"dst_node src_node", "dst_node"),
    (b"destination,origin", "destination"),
    (b"dest,x", "dest"),
    (b"tgt,src", "tgt"),
    (b"Destination IP,Source IP", "destination ip"),
])
def test_a_header_naming_the_target_first_is_refused(tmp_path, capsys, header, column):
    path = tmp_path / "g.csv"
    path.write_bytes(header + b"\n0,1\n1,2\n" if b"," in header else header + b"\n0 1\n1 2\n")
    with pytest.raises(GraphFormatError, match=f"g.csv:1: the header names column 1 '{column}' as the edges' target"):
        read_graph(str(path))
    with pytest.raises(GraphFormatError, match="g.csv:1: the header names column 1"):
        read_graph_numpy(str(path))
    out = tmp_path / "out.h5"
    assert main(["index", str(path), "-o", str(out), "--backend", "cpu", "--quiet"]) == 2
    assert sorted(os.listdir(tmp_path)) == ["g.csv"]


@pytest.mark.parametrize("data,want", [
    (b"src_node,dst_node\n0,1\n1,2\n", [(0, 1), (1, 2)]),
    (b"src_node,dst_node\nalice,bob\n", [("alice", "bob")]),
    (b"src,tgt\n0,1\n", [(0, 1)]),
    (b"Source IP,Destination IP\n0,1\n", [(0, 1)]),
])
def test_a_header_naming_the_source_first_reads(tmp_path, data, want):
    path = tmp_path / "g.csv"
    path.write_bytes(data)
    assert _edges(read_graph(str(path))) == want


def _table(tmp_path, columns, kind):
    pa = pytest.importorskip("pyarrow")
    from test_table_columns import write

    return write(tmp_path, pa.table({c: np.array(v) for c, v in zip(columns, ([0, 1], [1, 2]))}), kind)


@pytest.mark.parametrize("kind", ["parquet", "feather"])
@pytest.mark.parametrize("columns", [["Target Node", "Source Node"], ["x", "Source Node"], ["dst ip", "src ip"]])
def test_a_table_whose_first_column_is_named_the_target_is_refused(tmp_path, capsys, kind, columns):
    path = _table(tmp_path, columns, kind)
    with pytest.raises(GraphFormatError, match="is named as the edges'"):
        read_graph(str(path))
    out = tmp_path / "out.h5"
    assert main(["index", str(path), "-o", str(out), "--backend", "cpu", "--quiet"]) == 2
    assert "is named as the edges'" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == [path.name]


@pytest.mark.parametrize("columns,want", [
    (["dst_node", "src_node"], [(1, 0), (2, 1)]),  # (by their roles: the second column holds the sources)
    (["Source Node", "Target Node"], [(0, 1), (1, 2)]),
    (["a", "b"], [(0, 1), (1, 2)]),
])
def test_a_table_read_by_its_column_names(tmp_path, columns, want):
    assert _edges(read_graph(str(_table(tmp_path, columns, "parquet")))) == want


SKIPPABLE = b"\x50\x2a\x4d\x18\x04\x00\x00\x00meta"


@pytest.mark.parametrize("name", ["g.txt.zst", "g.txt"])
def test_zstd_starting_with_a_skippable_frame_reads(tmp_path, name):
    zstandard = pytest.importorskip("zstandard")
    frame = zstandard.ZstdCompressor().compress(b"0 1\n1 2\n")
    path = tmp_path / name
    path.write_bytes(SKIPPABLE + frame + SKIPPABLE + zstandard.ZstdCompressor().compress(b"2 3\n"))
    want = [(0, 1), (1, 2), (2, 3)]
    assert _edges(read_graph(str(path))) == want
    assert _edges(read_graph_numpy(str(path))) == want


def test_zstd_of_a_skippable_frame_cut_short_is_refused(tmp_path):
    path = tmp_path / "g.txt.zst"
    path.write_bytes(SKIPPABLE[:6])
    with pytest.raises(GraphFormatError, match="not a readable Zstandard file, truncated or damaged"):
        read_graph(str(path))


@pytest.mark.parametrize("kind", ["parquet", "feather"])
@pytest.mark.parametrize("second", [[1, 2], [1.5, 2.5]])
def test_a_table_of_names_beside_numbers_is_refused(tmp_path, kind, second):
    """One column of node names and one of numbers: the integers are not taken as names ('1' is
    vertex 1 or the node named 1?), as a text edge list of names and ids mixed is refused."""
    pa = pytest.importorskip("pyarrow")
    from test_table_columns import write

    path = write(tmp_path, pa.table({"src": ["alice", "bob"], "dst": np.array(second)}), kind)
    with pytest.raises(GraphFormatError, match="ambiguous") as e:
        read_graph(str(path))
    assert "src" in str(e.value) and str(path) in str(e.value)
    both = write(tmp_path, pa.table({"src": ["alice", "bob"], "dst": ["1", "2"]}), kind)
    assert read_graph(str(both)).n == 4  # (names both: read)


@pytest.mark.parametrize("first", ["graph_for_greachX", "graph_for_greach 5", "graph_for_greach_v2"])
def test_a_gra_banner_with_more_on_its_line_is_refused(tmp_path, first):
    """The ``.gra`` banner is the line ``graph_for_greach``: a line that only starts with it is not
    read as the banner with the rest ignored."""
    path = tmp_path / "g.gra"
    path.write_text(f"{first}\n2\n0: 1 #\n1: #\n")
    with pytest.raises(GraphFormatError) as e:
        read_graph(str(path))
    assert str(path) in str(e.value)
    path.write_text("graph_for_greach\n2\n0: 1 #\n1: #\n")
    assert _edges(read_graph(str(path))) == [(0, 1)]


def test_a_matrix_market_banner_is_one_word(tmp_path):
    """``%%MatrixMarketX ...`` is no Matrix Market banner (``%%MatrixMarket``, any case, is)."""
    path = tmp_path / "g.mtx"
    path.write_text("%%MatrixMarketX matrix coordinate pattern general\n2 2 1\n1 2\n")
    with pytest.raises(GraphFormatError) as e:
        read_graph(str(path), fmt="mtx")
    assert "MatrixMarket" in str(e.value)
    path.write_text("%%matrixmarket matrix coordinate pattern general\n2 2 1\n1 2\n")
    assert _edges(read_graph(str(path))) == [(0, 1)]
