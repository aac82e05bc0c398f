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
import pytest

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


# -- --parts with a one-file layout ---------------------------------------------------------------

@pytest.fixture(scope="module")
def single(tmp_path_factory):
    p = tmp_path_factory.mktemp("single") / "one.h5"
    assert main(["index", "bundled", "-o", str(p), "--backend", "cpu", "--dims", "2", "--quiet"]) == 0
    return p


def test_parts_with_layout_single_is_refused(single, tmp_path, capsys):
    out = tmp_path / "o.h5"
    capsys.readouterr()
    assert main(["convert", str(single), "--layout", "single", "--parts", "3", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--parts" in err and "--layout single" in err and not out.exists()
    assert main(["convert", str(_edges(tmp_path)), "--parts", "3", "-o", str(out), "--backend", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "--parts" in err and "--layout split" in err and not out.exists()
    # update refuses it too; index has no --parts (one part per rank)
    (tmp_path / "add.txt").write_text("5 17\n")
    assert main(["update", str(single), "--add", str(tmp_path / "add.txt"), "--layout", "single", "--parts", "3",
                 "-o", str(out), "--backend", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "--parts" in err and "--layout single" in err and not out.exists()
    with pytest.raises(SystemExit) as e:
        main(["index", "bundled", "-o", str(out), "--parts", "3"])
    assert e.value.code == 2
    # still taken where it means something
    assert main(["convert", str(single), "--layout", "split", "--parts", "3", "-o", str(out), "--quiet"]) == 0
    assert len(index_parts(out)) == 3
    assert main(["convert", str(single), "--layout", "single", "-o", str(tmp_path / "s.h5"), "--quiet"]) == 0
    assert main(["convert", str(single), "--layout", "split", "-o", str(tmp_path / "d.h5"), "--quiet"]) == 0
    assert len(index_parts(tmp_path / "d.h5")) == 2  # (the default)


# -- what --layout is given that is no index ------------------------------------------------------

def test_convert_layout_names_a_missing_file_a_directory_and_a_damaged_index(single, tmp_path, capsys):
    out = str(tmp_path / "o.h5")
    capsys.readouterr()
    assert main(["convert", str(tmp_path / "nothere.h5"), "--layout", "single", "-o", out]) == 2
    assert f"{tmp_path / 'nothere.h5'}: no such index file" in capsys.readouterr().err
    (tmp_path / "dir").mkdir()
    assert main(["convert", str(tmp_path / "dir"), "--layout", "single", "-o", out]) == 2
    assert f"{tmp_path / 'dir'}: is a directory, not an index file" in capsys.readouterr().err
    with open(single, "rb") as f:
        (tmp_path / "trunc.h5").write_bytes(f.read(3000))
    assert main(["convert", str(tmp_path / "trunc.h5"), "--layout", "split", "-o", out]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'trunc.h5'}: damaged index" in err and "truncated" in err, err
    assert "not a distgrail index" not in err
    assert not os.path.exists(out)
    (tmp_path / "plain.txt").write_text("0 1\n")  # what is no index at all still says so
    assert main(["convert", str(tmp_path / "plain.txt"), "--layout", "single", "-o", out]) == 2
    assert "not a distgrail index" in capsys.readouterr().err


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
