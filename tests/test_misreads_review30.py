"""Silent misreads a review of the readers found (session 30), each refused now with file, line
and value, exit 2 and no output: a chunk of exactly two one-field lines read as one edge (the
line-shape check ran only from three tokens on); node names in CSV quotes split at their commas;
a UTF-8 byte order mark taken into the first node's name."""

from __future__ import annotations

import os

import distgrail.io.generate  # noqa: F401 - (used as distgrail.io.generate)

import numpy as np
import pytest

from distgrail.cli import main
from distgrail.io.parse import read_graph_numpy
from distgrail.io.read import read_graph
from distgrail.errors import GraphFormatError

LINE = b"0 1\n"


@pytest.mark.parametrize("name,data,where,got", [
    ("onecol.txt", b"0\n1\n", 1, "'0'"),
    ("onecol_tail.txt", LINE * ((4 << 20) // len(LINE)) + b"7\n8\n", (4 << 20) // len(LINE) + 1, "'7'"),
    ("quoted.csv", b'"a,x","b"\n"b","a,x"\n', 1, "'\"a,x\",\"b\"'"),
    ("quoted_ids.csv", b'"0","1"\n"1","2"\n', 1, "'\"0\",\"1\"'"),
    ("bom.txt", b"\xef\xbb\xbfa b\nb a\n", 1, "'\\ufeffa b'"),
])
def test_refused_with_file_line_and_value(tmp_path, capsys, name, data, where, got):
    path = tmp_path / name
    path.write_bytes(data)
    out = tmp_path / "out.h5"
    assert main(["convert", str(path), "-o", str(out), "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{where}: " in err and got in err, err
    assert sorted(os.listdir(tmp_path)) == [name]
    with pytest.raises(GraphFormatError, match=f":{where}: "):
        read_graph(str(path), "auto")
    with pytest.raises(GraphFormatError, match=f":{where}: "):  # the GPU path's twin: the same refusal
        read_graph_numpy(str(path), "auto")


def test_labelled_names_without_quotes_or_a_mark_still_read(tmp_path):
    path = tmp_path / "ok.csv"
    path.write_bytes(b"source,target\na,x\nx,b\n")  # (names declared by the header: auto reads them)
    g = read_graph(str(path), "auto")
    assert g.n == 3 and g.src.tolist() == [0, 1] and g.dst.tolist() == [1, 2]
    assert g.meta["node_labels"].values.tolist() == ["a", "x", "b"]


def _h5_graph(tmp_path, name, edit):
    import h5py

    src = tmp_path / "chain.txt"
    src.write_bytes(b"0 1\n1 2\n")
    out = tmp_path / name
    assert main(["convert", str(src), "-o", str(out), "--backend", "cpu", "--quiet", "--no-condense"]) == 0
    with h5py.File(out, "r+") as f:
        edit(f)
    return out


def _replace(f, key, data):
    del f[key]
    f.create_dataset(key, data=data)


@pytest.mark.parametrize("name,edit,message", [
    ("float_indices.h5", lambda f: _replace(f, "csr/indices", __import__("numpy").array([1.7, 2.9])),
     "dataset 'csr/indices' must be a 1-D array of integers, got float64"),
    ("bool_indices.h5", lambda f: _replace(f, "csr/indices", __import__("numpy").array([True, True])),
     "dataset 'csr/indices' must be a 1-D array of integers, got bool"),
    ("indices_2d.h5", lambda f: _replace(f, "csr/indices", __import__("numpy").array([[1], [2]], "i4")),
     "dataset 'csr/indices' must be a 1-D array of integers, got int32 of shape (2, 1)"),
    ("float_indptr.h5", lambda f: _replace(f, "csr/indptr", __import__("numpy").array([0., 1., 2., 2.])),
     "dataset 'csr/indptr' must be a 1-D array of integers"),
    ("n_float.h5", lambda f: f.attrs.__setitem__("n", 3.9), "attribute 'n' must be an integer, got 3.9"),
    ("n_text.h5", lambda f: f.attrs.__setitem__("n", "three"), "attribute 'n' must be an integer, got 'three'"),
    ("no_n.h5", lambda f: f.attrs.__delitem__("n"), "attribute 'n' (the vertex count) missing"),
    ("m_wrong.h5", lambda f: f.attrs.__setitem__("m", 99), "attribute 'm' says 99 edges, csr/indices holds 2"),
    ("version_float.h5", lambda f: f.attrs.__setitem__("format_version", 2.5),
     "attribute 'format_version' must be an integer, got 2.5"),
])
def test_an_h5_graph_of_wrong_types_is_refused_not_cast(tmp_path, capsys, name, edit, message):
    """The ``.h5`` graph's datasets and attributes are checked, not cast (3.9 vertices were 3,
    float ids truncated, bool ids read as 0/1; a missing ``n`` was a traceback, exit 1)."""
    path = _h5_graph(tmp_path, name, edit)
    out = tmp_path / "idx.h5"
    assert main(["index", str(path), "-o", str(out), "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: corrupt graph file: {message}" in err and "Traceback" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("name,data,message", [
    ("sup.gra", "graph_for_greach\n³\n0: 1 #\n1: 2 #\n2: #\n".encode(), "must be a non-negative integer, got '³'"),
    ("arabic.gra", "graph_for_greach\n٣\n0: 1 #\n1: 2 #\n2: #\n".encode(), "must be a non-negative integer, got '٣'"),
    ("sup.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 ¹\n1 2\n".encode(),
     "expected size line 'rows cols entries', got '3 3 ¹'"),
])
def test_counts_are_ascii_digits(tmp_path, capsys, name, data, message):
    """A count in non-ASCII digits: refused with its line (was a traceback, exit 1, or read as 3)."""
    path = tmp_path / name
    path.write_bytes(data)
    assert main(["convert", str(path), "-o", str(tmp_path / "o.h5"), "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: " in err and message in err and "Traceback" not in err, err


def test_label_pairs_are_split_and_read_as_the_graph_is(tmp_path, capsys):
    """Integer labels are ASCII digits (``int`` took '1_0' as 10, '+10', '٣'); labels split at
    blanks and tabs only (a no-break space or U+2028 split a name)."""
    ints, names = tmp_path / "ints.txt", tmp_path / "names.txt"
    ints.write_bytes(b"10 40\n40 70\n")
    names.write_bytes(b"a d\nd b\n")
    for g in (ints, names):
        assert main(["index", str(g), "-o", str(g) + ".h5", "--format", "labelled", "--backend", "cpu",
                     "--quiet"]) == 0
    capsys.readouterr()
    for idx, text, bad in ((ints, "1_0 4_0\n", "this index takes integer node labels"),
                           (ints, "+10 40\n", "this index takes integer node labels"),
                           (ints, "١٠ 40\n", "this index takes integer node labels"),
                           (names, "a\u00a0d b\n", "a control or space character other than a blank or tab"),
                           (names, "a\u2028d b\n", "a control or space character other than a blank or tab")):
        p = tmp_path / "pairs.txt"
        p.write_bytes(text.encode())
        assert main(["query", str(idx) + ".h5", str(p), "--backend", "cpu", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert f"{p}:1: {bad}" in err, (text, err)
    p = tmp_path / "good.txt"
    p.write_bytes(b"10 70\n70\t10\n")
    out = tmp_path / "a.txt"
    assert main(["query", str(ints) + ".h5", str(p), "-o", str(out), "--backend", "cpu", "--quiet"]) == 0
    assert out.read_text().split() == ["1", "0"]  # (10 reaches 70, 70 does not reach 10)


@pytest.mark.parametrize("name,data,line,message", [
    ("reversed.csv", b"dst,src\n1,0\n2,1\n", 1, "column 1 'dst' as the edges' target"),
    ("weight_between.csv", b"src,weight,dst\n0,5,1\n", 1, "column 3 'dst' as the edges' target"),
    ("reversed.txt", b"# two edges\ntarget source\n1 0\n2 1\n", 2, "column 1 'target' as the edges' target"),
])
def test_a_header_naming_the_columns_in_another_order_is_refused(tmp_path, capsys, name, data, line, message):
    """Text edge lists are read by position: a header that names them otherwise (``dst,src``: every
    edge reversed) is refused, by the CPU reader and the GPU path's twin alike."""
    path = tmp_path / name
    path.write_bytes(data)
    assert main(["convert", str(path), "-o", str(tmp_path / "o.h5"), "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}: the header names {message}" in err and "put the columns in that order" in err, err
    assert sorted(os.listdir(tmp_path)) == [name]
    with pytest.raises(GraphFormatError, match="the header names"):
        read_graph_numpy(str(path), "auto")


def test_headers_in_the_order_read_still_read(tmp_path):
    for data in (b"src,dst,weight\n0,1,5\n1,2,7\n", b"From To\n0 1\n1 2\n", b"u v\n0 1\n1 2\n",
                 b"source,target,start,end\n0,1,5,6\n1,2,7,8\n", b"src dst source_id target_id\n0 1 5 6\n1 2 7 8\n"):
        path = tmp_path / "g.txt"
        path.write_bytes(data)
        g = read_graph(str(path), "auto")
        assert g.src.tolist() == [0, 1] and g.dst.tolist() == [1, 2], data


@pytest.mark.parametrize("name,data,line", [
    ("empty.csv", b"0,1,3\n2,,4\n", 2),
    ("empty_header.csv", b"src,dst,weight\n0,1,3\n2,,4\n", 3),
    ("leading.csv", b"0,1\n,2\n", 2),
    ("no_target.csv", b"0,1\n1,\n", 2),
])
def test_an_empty_csv_field_is_refused(tmp_path, capsys, name, data, line):
    """Commas are read as blanks: an empty source or target field shifted the columns after it
    (``2,,4`` was the edge 2 -> 4). Refused by the CPU reader, through a compressed stream, and by
    the GPU path. Empty fields after the second are kept (Gephi's tables have them)."""
    import gzip

    for path, raw in ((tmp_path / name, data), (tmp_path / (name + ".gz"), gzip.compress(data))):
        path.write_bytes(raw)
        assert main(["convert", str(path), "-o", str(tmp_path / "o.h5"), "--backend", "cpu", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert f"{path}:{line}: an empty source or target field" in err, err
        with pytest.raises(GraphFormatError, match=f":{line}: an empty source or target field"):
            read_graph_numpy(str(path), "auto", chunk_bytes=64)
    path = tmp_path / "comment.csv"
    path.write_bytes(b"0,1 # a,,b\n1,2\n")
    assert read_graph(str(path), "auto").m == 2  # (in a comment: no field)
    path = tmp_path / "gephi.csv"
    path.write_bytes(b"Source,Target,Type,Id,Label,timeset,Weight\n0,1,Directed,0,,,1.0\n1,2,Directed,1,,,1.0\n"
                     b"2,3,,,,,\n")
    g = read_graph(str(path), "auto")
    assert g.src.tolist() == [0, 1, 2] and g.dst.tolist() == [1, 2, 3]
    assert read_graph_numpy(str(path), "auto", chunk_bytes=64).dst.tolist() == [1, 2, 3]


def test_the_compiled_empty_field_scan_equals_its_numpy_twin(monkeypatch):
    from distgrail.io import guards
    from distgrail.io.fields_jit import first_empty_field

    rng = np.random.default_rng(30)
    alphabet = np.frombuffer(b",,,01 \t\n\n\r#%", np.uint8)
    for _ in range(3000):
        data = alphabet[rng.integers(0, alphabet.size, int(rng.integers(0, 40)))].tobytes()
        assert first_empty_field(np.frombuffer(data, np.uint8)) == guards.empty_field_numpy(data), data
    monkeypatch.setattr(guards, "JIT_MIN_BYTES", 0)  # (the reader's call, compiled whatever the size)
    assert guards.empty_field(b"0,1\n2,,4\n") == 5 and guards.empty_field(b"0,1,,\n") == -1


def test_a_damaged_block_of_a_split_index_names_its_part_file(tmp_path):
    """A flipped byte in a part's rows: the checksum error names the part file (the README says
    so; it named the dataset alone)."""
    import distgrail
    from distgrail.errors import IndexFormatError
    from distgrail.indexfile import layout
    from distgrail.indexfile.layout import index_parts

    g = distgrail.io.generate.generate("scale-free", 20_000, 3, seed=6)
    path = str(tmp_path / "s.h5")
    distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=3, backend="cpu").save(path, layout="split", parts=3)
    part = sorted(index_parts(path))[1]
    raw = bytearray(open(part, "rb").read())
    raw[len(raw) - 200] ^= 0xFF  # (the last dataset's rows end the file)
    open(part, "wb").write(bytes(raw))
    with pytest.raises(IndexFormatError, match=r"CRC-32 mismatch, block \d+ of \d+, in (the|one of the) part "
                                               r"files? [^)]*" + os.path.basename(part).replace(".", r"\.")):
        distgrail.open_index(path)
    assert layout.CRC_BLOCK  # (a block of the whole dataset may span parts: then they are all named)


def test_a_damaged_block_inside_one_part_names_that_part_alone(tmp_path, monkeypatch):
    import distgrail
    from distgrail.errors import IndexFormatError
    from distgrail.indexfile import layout
    from distgrail.indexfile.layout import index_parts

    monkeypatch.setattr(layout, "CRC_BLOCK", 4096)  # (blocks far smaller than a part's rows)
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1 << 10)
    g = distgrail.io.generate.generate("scale-free", 20_000, 3, seed=6)
    path = str(tmp_path / "s.h5")
    distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=3, backend="cpu").save(path, layout="split", parts=3)
    part = sorted(index_parts(path))[1]
    raw = bytearray(open(part, "rb").read())
    raw[len(raw) - 200] ^= 0xFF
    open(part, "wb").write(bytes(raw))
    with pytest.raises(IndexFormatError, match=r"CRC-32 mismatch, block \d+ of \d+, in the part file " +
                       os.path.basename(part).replace(".", r"\.") + r"\)"):
        distgrail.open_index(path)


@pytest.mark.parametrize("data,line,what", [
    (b"// x\n// y\n0 1\n1 2\n", 1, "node names, not integer ids: '// x'"),
    (b"src dst\nalice bob\nbob 42\n", 3, "node names and integer ids mixed \\('42'\\)")])
def test_names_and_integer_ids_mixed_are_refused_unless_labelled_is_asked(tmp_path, data, line, what):
    """``//`` comments had become names beside the ids: words on the first edge line without a header
    declaring names are refused by ``auto``; names a header declares with a later integer among them
    make the file ambiguous; ``--format labelled`` still reads it."""
    p = tmp_path / "g.txt"
    p.write_bytes(data)
    with pytest.raises(GraphFormatError, match=f"g.txt:{line}: {what}"):
        read_graph(str(p), "auto")
    if data.startswith(b"//"):  # (asked for: names, the // lines among them)
        assert read_graph(str(p), "labelled").m == 4


def test_a_matrix_market_banner_after_the_first_line_is_refused(tmp_path):
    """Not named .mtx and a blank first line: it was read as an edge list (its size line an edge,
    its 1-based ids taken as 0-based)."""
    p = tmp_path / "m.txt"
    p.write_bytes(b"\n%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n2 3\n")
    _both_refuse(p, "m.txt:2: a Matrix Market banner after the first line")
    p.write_bytes(b"%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n2 3\n")
    assert read_graph(str(p), "auto").src.tolist() == [0, 1]


@pytest.mark.parametrize("fmt", ["auto", "labelled"])
def test_a_header_whose_names_are_nodes_too_is_refused(tmp_path, fmt):
    """``u v`` then ``v w``, ``w u``: the first line looks like a header and was skipped (the
    edge u -> v lost), also under ``--format labelled``; now refused as ambiguous."""
    p = tmp_path / "g.txt"
    p.write_bytes(b"u v\nv w\nw u\n")
    with pytest.raises(GraphFormatError, match="g.txt:1: the first line 'u v' was read as a header, but 'u' is also"):
        read_graph(str(p), fmt)
    p.write_bytes(b"src dst\nalice bob\nbob carol\n")
    assert read_graph(str(p), fmt).m == 2


def test_a_header_whose_first_column_has_no_name_is_refused(tmp_path):
    """pandas' to_csv writes its index as a first column with no name (``,src,dst``): it was
    read as the sources (the file's 1 -> 2 read as 0 -> 1)."""
    p = tmp_path / "pd.csv"
    p.write_bytes(b",src,dst\n0,1,2\n1,2,3\n")
    _both_refuse(p, "pd.csv:1: the header's first column has no name")


def _both_refuse(path, match):
    """The CPU reader and the GPU path's twin refuse ``path`` with the same message."""
    for read in (read_graph, read_graph_numpy):
        with pytest.raises(GraphFormatError, match=match):
            read(str(path), "auto")


@pytest.mark.parametrize("name,data,labelled", [("ids.txt", b"\xef\xbb\xbf0 1\n1 2\n", False),
                                                 ("ids.csv", b"\xef\xbb\xbf0,1\n1,2\n", False),
                                                 ("names.csv", b"\xef\xbb\xbfa,b\nb,c\n", True)])
def test_a_byte_order_mark_is_said_as_such_for_ids_too(tmp_path, capsys, name, data, labelled):
    """A graph of integer ids starting with a UTF-8 byte order mark was refused as a bad id
    ('\\ufeff0'); now, as a graph of names is, by the mark, with the file, line 1 and the line."""
    path = tmp_path / name
    path.write_bytes(data)
    args = ["index", str(path), "-o", str(tmp_path / "out.h5"), "--backend", "cpu", "--quiet"]
    assert main(args + (["--format", "labelled"] if labelled else [])) == 2
    err = capsys.readouterr().err
    assert f"{path}:1: the file starts with a UTF-8 byte order mark" in err and "\\ufeff" in err, err
    assert sorted(os.listdir(tmp_path)) == [name]


@pytest.mark.parametrize("name,data", [("p.txt", b"\xef\xbb\xbfa c\n"), ("p.tsv", b"\xef\xbb\xbfa\tc\n"),
                                       ("q.txt", b"\xef\xbb\xbf0 2\n"), ("q.csv", b"\xef\xbb\xbf0,2\n")])
def test_a_pairs_file_with_a_byte_order_mark_is_refused_by_the_mark(tmp_path, capsys, name, data):
    """A pairs file starting with a byte order mark: its first label read as '\\ufeffa', 'not in
    the graph'; now refused by the mark (labels and ids, text and gzip)."""
    import gzip

    g = tmp_path / ("g.txt" if name.startswith("p") else "gi.txt")
    g.write_bytes(b"a b\nb c\n" if name.startswith("p") else b"0 1\n1 2\n")
    idx = tmp_path / "g.h5"
    fmt = ["--format", "labelled"] if name.startswith("p") else []
    assert main(["index", str(g), "-o", str(idx), "--dims", "2", "--backend", "cpu", "--quiet"] + fmt) == 0
    for path, blob in ((tmp_path / name, data), (tmp_path / (name + ".gz"), gzip.compress(data))):
        path.write_bytes(blob)
        assert main(["query", str(idx), str(path), "--backend", "cpu", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert f"{path}:1: the file starts with a UTF-8 byte order mark" in err, err


@pytest.mark.parametrize("name,data", [
    ("g.gra", b"\xef\xbb\xbfgraph_for_greach\n3\n0: 1 #\n1: 2 #\n2: #\n"),
    ("m.mtx", b"\xef\xbb\xbf%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1 2\n")])
def test_a_byte_order_mark_in_gra_or_matrix_market_is_said_as_such(tmp_path, capsys, name, data):
    """.gra and Matrix Market files with a byte order mark: the header line was taken for the
    vertex count ('\\ufeffgraph_for_greach'), or the banner not found; now refused by the mark,
    plain and gzip-compressed, the CPU twin too, no output left."""
    import gzip

    for path, blob in ((tmp_path / name, data), (tmp_path / (name + ".gz"), gzip.compress(data))):
        path.write_bytes(blob)
        assert main(["index", str(path), "-o", str(tmp_path / "out.h5"), "--backend", "cpu", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert f"{path}:1: the file starts with a UTF-8 byte order mark" in err and "\\ufeff" in err, err
        with pytest.raises(GraphFormatError, match="byte order mark"):
            read_graph_numpy(str(path), "auto")
        path.unlink()
    assert os.listdir(tmp_path) == []
