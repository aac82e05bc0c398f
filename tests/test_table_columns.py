"""Edge tables and ``.npy`` pairs are read whole or refused (distgrail/io/tables.py, io/pairs.py):

* Parquet/Arrow tables: the source and target columns are the ones their names say, wherever they
  sit (``dst,src`` is target, source; ``src,weight,dst`` skips the weight); names that give no one
  (source, target) pair are refused naming the file and the columns; tables whose names are all
  unknown are read by position (the first two columns).
* An Arrow IPC stream must end with its end-of-stream marker: one cut at a batch boundary (pyarrow
  reads it as a shorter stream) is refused, and so are bytes after the marker.
* A ``.npy`` pairs file must hold one array and nothing after it (two ``np.save`` into one file
  handle would otherwise answer the first array's pairs only).
"""

from __future__ import annotations

import numpy as np
import pytest

from distgrail import cli
from distgrail.errors import GraphFormatError
from distgrail.io.pairs import npy_pairs_array, npy_rows, read_query_pairs
from distgrail.io.read import read_graph

pa = pytest.importorskip("pyarrow")
import pyarrow.feather as feather  # noqa: E402
import pyarrow.ipc as ipc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402


def edges(g) -> list:
    """The graph's edges, in file order."""
    return list(zip(np.asarray(g.src).tolist(), np.asarray(g.dst).tolist()))


def write(tmp_path, table, kind: str):
    path = tmp_path / f"g.{kind}"
    if kind == "parquet":
        pq.write_table(table, path)
    else:
        feather.write_feather(table, path)
    return path


def convert(tmp_path, path, capsys):
    """``distgrail convert path``: (exit status, stderr, the output's existence)."""
    out = tmp_path / "out.h5"
    capsys.readouterr()
    rc = cli.main(["convert", str(path), "-o", str(out), "--backend", "cpu", "--no-condense", "--quiet"])
    return rc, capsys.readouterr().err, out.exists()


# -- 1. columns by their names' roles ---------------------------------------------------------------
@pytest.mark.parametrize("kind", ["parquet", "feather"])
@pytest.mark.parametrize("cols", [
    ("dst", "src"), ("target", "source"), ("to", "from"), ("v", "u"), ("node2", "node1"),  # target first
    ("src", "weight", "dst"), ("weight", "dst", "time", "src"), ("id", "src", "dst"),  # apart, or not first
    ("SRC", "Dst"), ("src", "to"),  # any case; names of two conventions, one role each
])
def test_source_and_target_columns_by_their_names(tmp_path, kind, cols):
    src, dst = [1, 2, 0, 4], [0, 1, 3, 2]
    data = {c: [9, 9, 9, 9] for c in cols}
    low = [c.lower() for c in cols]
    for c, lc in zip(cols, low):
        if lc in ("dst", "target", "to", "v", "node2"):
            data[c] = dst
        elif lc in ("src", "source", "from", "u", "node1"):
            data[c] = src
    g = read_graph(write(tmp_path, pa.table(data), kind), "auto")
    assert edges(g) == list(zip(src, dst))


@pytest.mark.parametrize("kind", ["parquet", "feather"])
def test_reversed_columns_through_the_command_line(tmp_path, kind, capsys):
    """The review's file: ``dst,src`` holding 1 -> 0 was indexed as 0 -> 1, exit 0."""
    path = write(tmp_path, pa.table({"dst": [0], "src": [1]}), kind)
    rc, err, made = convert(tmp_path, path, capsys)
    assert rc == 0, err
    import h5py

    with h5py.File(tmp_path / "out.h5") as f:
        ptr, ix = f["csr/indptr"][:], f["csr/indices"][:]
    assert np.repeat(np.arange(len(ptr) - 1), np.diff(ptr)).tolist() == [1] and ix.tolist() == [0]


@pytest.mark.parametrize("kind", ["parquet", "feather"])
@pytest.mark.parametrize("cols", [("src", "dst", "start", "end"), ("u", "v", "end"), ("src", "dst", "source", "target"),
                                  ("w", "source", "target", "source_id", "target_id")])
def test_a_source_name_right_before_a_target_name_is_the_pair(tmp_path, kind, cols):
    """Temporal edges (src,dst,start,end) and names beside ids: the first source name right
    before a target name (a review found src,dst,start,end refused, read before)."""
    first = cols.index(next(c for c, d in zip(cols, cols[1:]) if c in ("src", "u", "source") and d in ("dst", "v", "target")))
    data = {c: [9, 9] for c in cols}
    data[cols[first]], data[cols[first + 1]] = [0, 1], [1, 2]
    g = read_graph(write(tmp_path, pa.table(data), kind), "auto")
    assert edges(g) == [(0, 1), (1, 2)]


@pytest.mark.parametrize("kind", ["parquet", "feather"])
def test_unknown_names_are_read_by_position(tmp_path, kind):
    g = read_graph(write(tmp_path, pa.table({"a": [0, 1], "b": [1, 2], "w": [7, 7]}), kind), "auto")
    assert edges(g) == [(0, 1), (1, 2)]


@pytest.mark.parametrize("kind", ["parquet", "feather"])
@pytest.mark.parametrize("cols,said", [
    (("src", "weight"), "no column named as the target"),
    (("weight", "dst"), "no column named as the source"),
    (("a", "to", "b"), "no column named as the source"),
    (("weight", "source", "w2", "target", "src"), "2 columns named as the source ('source', 'src')"),
    (("u", "w", "v", "end"), "2 columns named as the target ('v', 'end')"),
])
def test_names_without_one_source_and_one_target_are_refused(tmp_path, kind, cols, said, capsys):
    path = write(tmp_path, pa.table({c: [0, 1] for c in cols}), kind)
    with pytest.raises(GraphFormatError) as e:
        read_graph(path, "auto")
    msg = str(e.value)
    assert str(path) in msg and said in msg and str(list(cols)) in msg, msg
    rc, err, made = convert(tmp_path, path, capsys)
    assert rc == 2 and str(path) in err and said in err and not made


# -- 1b. values the text readers refuse: the row and column named ---------------------------------
def _batched(kind, tmp_path, cols):
    """A table of two record batches (rows 1-2, then 3-4) with ``cols`` ({name: 4 values})."""
    t = pa.table(cols)
    path = tmp_path / f"b.{kind}"
    if kind == "parquet":
        pq.write_table(t, path, row_group_size=2)
    else:
        feather.write_feather(t, path, chunksize=2)
    return path


@pytest.mark.parametrize("kind", ["parquet", "feather"])
@pytest.mark.parametrize("cols,nv,said", [
    ({"src": [0, 1, 2, 3], "dst": [1, 2, 3, 7]}, 5, "row 4: column 'dst': vertex id out of range 0..4, got 7"),
    ({"src": [0, 1, 9, 3], "dst": [1, 2, 3, 1]}, 5, "row 3: column 'src': vertex id out of range 0..4, got 9"),
    ({"src": [0, 1, 2, 3], "dst": [1, 2, 2**61, 1]}, None, "row 3: column 'dst': vertex id too large ("),
    ({"src": ["a", "b", "c", "d"], "dst": ["b", "c", "", "a"]}, None, "row 3: column 'dst': empty node name"),
    ({"src": ["a", "b", "c", "d\te"], "dst": ["b", "c", "d", "a"]}, None,
     "row 4: column 'src': a control character in a node name, got 'd\\te'"),
    ({"src": ["a", "b\nc", "c", "d"], "dst": ["b", "c", "d", "a"]}, None, "row 2: column 'src': a control character"),
])
def test_values_the_text_readers_refuse_are_refused_by_row_and_column(tmp_path, kind, cols, nv, said, capsys):
    """An id past --num-vertices or past this machine, an empty name and a name holding a tab or a
    line end (which the text readers refuse and a pairs file cannot spell): refused with the file,
    the row (counted across batches) and the column, exit status 2 and no output."""
    path = _batched(kind, tmp_path, cols)
    with pytest.raises(GraphFormatError) as e:
        read_graph(path, "auto", num_vertices=nv)
    msg = str(e.value)
    assert str(path) in msg and said in msg, msg
    capsys.readouterr()
    out = tmp_path / "out.h5"
    rc = cli.main(["convert", str(path), "-o", str(out), "--backend", "cpu", "--no-condense", "--quiet"]
                  + (["--num-vertices", str(nv)] if nv else []))
    err = capsys.readouterr().err
    assert rc == 2 and said in err and not out.exists(), err


@pytest.mark.parametrize("kind", ["parquet", "feather"])
def test_names_with_blanks_inside_are_kept_as_they_are(tmp_path, kind):
    """A blank inside a name (``John Smith``) is a name's own, as in comma- and tab-separated text;
    so are DEL and characters past ASCII, which the text readers take too."""
    path = _batched(kind, tmp_path, {"src": ["John Smith", "b", "c\x7f", "d\u2028"],
                                     "dst": ["b", "c\x7f", "d\u2028", "John Smith"]})
    g = read_graph(path, "auto")
    names = g.meta["node_labels"].values.tolist()
    assert names == ["John Smith", "b", "c\x7f", "d\u2028"] and g.n == 4 and g.m == 4


def test_a_null_among_a_dictionarys_values_is_an_empty_value(tmp_path):
    """A dictionary-encoded column whose dictionary holds a null: refused as that row's empty
    value (its indices have no null, so the check before the decode let it through as 'None')."""
    src = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 1]), pa.array(["a", None, "c"]))
    path = tmp_path / "d.feather"
    feather.write_feather(pa.table({"src": src, "dst": pa.array(["b", "c", "a", "a"])}), path)
    with pytest.raises(GraphFormatError, match="row 2: column 'src': empty value"):
        read_graph(path, "auto")


# -- 2. an Arrow IPC stream ends with its end-of-stream marker --------------------------------------
SCHEMA = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
BATCHES = [pa.record_batch([pa.array([0, 1]), pa.array([1, 2])], schema=SCHEMA),
           pa.record_batch([pa.array([2, 3]), pa.array([3, 4])], schema=SCHEMA)]


def stream_bytes(batches, legacy=False) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, SCHEMA, options=ipc.IpcWriteOptions(use_legacy_format=legacy)) as w:
        for b in batches:
            w.write_batch(b)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("legacy", [False, True])
def test_whole_streams_and_files_read_every_batch(tmp_path, legacy):
    data = stream_bytes(BATCHES, legacy)
    assert data.endswith(b"\x00\x00\x00\x00" if legacy else b"\xff\xff\xff\xff\x00\x00\x00\x00")
    (tmp_path / "s.arrow").write_bytes(data)
    assert edges(read_graph(tmp_path / "s.arrow", "auto")) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    with ipc.new_file(str(tmp_path / "f.arrow"), SCHEMA) as w:  # the IPC file format, footer and all
        for b in BATCHES:
            w.write_batch(b)
    assert edges(read_graph(tmp_path / "f.arrow", "auto")) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    (tmp_path / "e.arrow").write_bytes(stream_bytes([], legacy))  # a schema and the marker: no edges
    with pytest.raises(GraphFormatError, match="empty edge table"):
        read_graph(tmp_path / "e.arrow", "auto")


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("cut", ["first batch", "schema only"])
def test_stream_cut_at_a_batch_boundary_is_refused(tmp_path, legacy, cut, capsys):
    whole = stream_bytes(BATCHES, legacy)
    marker = 4 if legacy else 8
    data = stream_bytes(BATCHES[:1] if cut == "first batch" else [], legacy)[:-marker]
    assert whole.startswith(data)
    path = tmp_path / "cut.arrow"
    path.write_bytes(data)
    with pytest.raises(GraphFormatError, match="end-of-stream marker") as e:
        read_graph(path, "auto")
    assert str(path) in str(e.value) and "IPC file format" in str(e.value)
    rc, err, made = convert(tmp_path, path, capsys)
    assert rc == 2 and str(path) in err and "end-of-stream marker" in err and not made


def test_bytes_after_the_end_of_stream_marker_are_refused(tmp_path, capsys):
    path = tmp_path / "two.arrow"
    path.write_bytes(stream_bytes(BATCHES[:1]) + stream_bytes(BATCHES[1:]))  # two streams, one file
    with pytest.raises(GraphFormatError, match=r"bytes after the Arrow IPC stream's end-of-stream marker") as e:
        read_graph(path, "auto")
    assert str(path) in str(e.value)
    rc, err, made = convert(tmp_path, path, capsys)
    assert rc == 2 and str(path) in err and not made


# -- 3. a .npy pairs file holds one array, nothing after it -----------------------------------------
def appended(path):
    with open(path, "wb") as f:
        np.save(f, np.array([[0, 5]], np.int64))
        np.save(f, np.array([[5, 0], [1, 2]], np.int64))


@pytest.mark.parametrize("tail", ["second array", "16 bytes"])
def test_npy_pairs_with_data_after_the_array_are_refused(tmp_path, tail):
    path = tmp_path / "p.npy"
    if tail == "second array":
        appended(path)
    else:
        np.save(path, np.array([[0, 5], [5, 0]], np.int64))
        with open(path, "ab") as f:
            f.write(b"\0" * 16)
    for read in (lambda: read_query_pairs(path, n=10), lambda: read_query_pairs(path, n=10, mapped=True),
                 lambda: npy_pairs_array(path)):
        with pytest.raises(GraphFormatError, match="bytes after the int64") as e:
            read()
        assert str(path) in str(e.value)
    assert npy_rows(path) == 0  # (the count from the header: none for a file the read refuses)


def test_npy_pairs_with_data_after_the_array_through_the_command_line(tmp_path, capsys):
    g = tmp_path / "chain.txt"
    g.write_text("".join(f"{i} {i + 1}\n" for i in range(9)))
    idx, out = tmp_path / "i.h5", tmp_path / "a.txt"
    assert cli.main(["index", str(g), "-o", str(idx), "--backend", "cpu", "--quiet"]) == 0
    path = tmp_path / "p.npy"
    appended(path)
    capsys.readouterr()
    rc = cli.main(["query", str(idx), str(path), "-o", str(out), "--backend", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and str(path) in err and "bytes after the int64 (1, 2) array" in err and not out.exists()
    np.save(path, np.array([[0, 5], [5, 0], [1, 2]], np.int64))  # the same pairs, one array: answered
    assert cli.main(["query", str(idx), str(path), "-o", str(out), "--backend", "cpu"]) == 0
    assert out.read_text().split() == ["1", "0", "1"]


def test_whole_npy_pairs_still_read(tmp_path):
    for a in (np.zeros((0, 2), np.int64), np.array([[0, 5, 1]], np.int32),
              np.asfortranarray(np.array([[0, 5], [5, 0], [1, 2]], ">i8"))):
        np.save(tmp_path / "p.npy", a)
        q = read_query_pairs(tmp_path / "p.npy", n=10)
        assert q.sources.tolist() == a[:, 0].tolist() and q.targets.tolist() == a[:, 1].tolist()
        assert npy_rows(tmp_path / "p.npy") == len(a)


def test_npy_timedelta_pairs_are_refused(tmp_path):
    """``np.timedelta64`` is a ``np.integer`` subtype: pairs of durations are not vertex ids."""
    np.save(tmp_path / "p.npy", np.array([[0, 5]], "m8[s]"))
    with pytest.raises(GraphFormatError, match="expected an integer array"):
        read_query_pairs(tmp_path / "p.npy", n=10)
