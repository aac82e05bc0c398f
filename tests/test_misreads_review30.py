"""Silent misreads a review of the readers found (session 30), each refused now with file, line
and value, exit 2 and no output: a chunk of exactly two one-field lines read as one edge (the
line-shape check ran only from three tokens on); node names in CSV quotes split at their commas;
a UTF-8 byte order mark taken into the first node's name."""

from __future__ import annotations

import os

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
    path.write_bytes(b"a,x\nx,b\n")
    g = read_graph(str(path), "auto")
    assert g.n == 3 and g.src.tolist() == [0, 1] and g.dst.tolist() == [1, 2]
    assert g.meta["node_labels"].values.tolist() == ["a", "x", "b"]
