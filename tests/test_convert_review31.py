"""``distgrail convert`` as a fresh review found it (session 31): a graph file written over a split
index left its parts behind; ``--parts`` with a one-file layout was dropped without a word; a
missing file, a directory and a truncated index given with ``--layout`` were all "not a distgrail
index"; the summary's ``m`` counted repeated edges the written file merges.
"""

from __future__ import annotations

import json
import os
import shutil

import h5py
import numpy as np

from distgrail.cli import main
from distgrail.indexfile.layout import index_parts


def _split(path) -> list:
    assert main(["index", "bundled", "-o", str(path), "--backend", "cpu", "--dims", "2", "--layout", "split",
                 "--quiet"]) == 0
    parts = index_parts(path)
    assert parts
    return parts


def _edges(tmp_path):
    """An edge list with repeated edges: 12 lines, 8 distinct edges."""
    p = tmp_path / "g.txt"
    p.write_text("0 1\n1 2\n2 0\n0 1\n3 4\n4 5\n0 1\n5 6\n6 7\n1 2\n7 3\n3 4\n")
    return p


# -- a graph file written over a split index -----------------------------------------------------

def test_a_graph_written_over_a_split_index_removes_its_parts(tmp_path):
    t = tmp_path / "t.h5"
    parts = _split(t)
    assert main(["convert", str(_edges(tmp_path)), "-o", str(t), "--backend", "cpu", "--quiet"]) == 0
    assert not any(os.path.exists(p) for p in parts)
    assert sorted(os.listdir(tmp_path)) == ["g.txt", "t.h5"]
    with h5py.File(t, "r") as f:
        assert f.attrs["format"] != b"distgrail-index"


def test_a_graph_written_over_a_split_index_keeps_the_parts_a_copy_uses(tmp_path):
    t, copy = tmp_path / "t.h5", tmp_path / "copy.h5"
    parts = _split(t)
    shutil.copy2(t, copy)
    assert main(["convert", str(_edges(tmp_path)), "-o", str(t), "--backend", "cpu", "--quiet"]) == 0
    assert all(os.path.isfile(p) for p in parts)
    assert main(["info", str(copy), "--quiet"]) == 0


# -- the summary's edge count ------------------------------------------------------------------------

def test_convert_reports_the_edges_the_file_holds(tmp_path, capsys):
    g, out = _edges(tmp_path), tmp_path / "g.h5"
    capsys.readouterr()
    assert main(["convert", str(g), "-o", str(out), "--backend", "cpu", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    with h5py.File(out, "r") as f:
        m = int(f.attrs["m"])
        assert m == f["csr/indices"].shape[0]
    assert m == 8 and got["m"] == 8 and got["edges_read"] == 12
    assert main(["convert", str(g), "-o", str(out), "--backend", "cpu"]) == 0
    line = capsys.readouterr().out
    assert "8 edges" in line and "12 read" in line and "12 edges" not in line, line
    # no repeats: the same number, nothing more said
    (tmp_path / "d.txt").write_text("0 1\n1 2\n")
    assert main(["convert", str(tmp_path / "d.txt"), "-o", str(out), "--backend", "cpu", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["m"] == got["edges_read"] == 2
    assert main(["convert", str(tmp_path / "d.txt"), "-o", str(out), "--backend", "cpu"]) == 0
    assert "read" not in capsys.readouterr().out.split("edges")[1].split("condensation")[0]
    assert np.isfinite(got["write_seconds"])
