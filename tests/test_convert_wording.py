"""``distgrail convert`` given an index, its wording as a review found it: an output name of the
wrong extension was "unknown extension ... for the graph file ... (the binary graph is an HDF5
file)" although the input was an index; and a split index missing a part told ``convert`` (the
very command that had just failed on it) that ``convert --layout single`` merges the parts.
"""

from __future__ import annotations

import os

import pytest

from distgrail.cli import main
from distgrail.indexfile.layout import index_parts


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    d = tmp_path_factory.mktemp("convert_wording")
    one, split = d / "c3.h5", d / "s.h5"
    assert main(["index", "bundled", "-o", str(one), "--backend", "cpu", "--dims", "2", "--quiet"]) == 0
    assert main(["convert", str(one), "--layout", "split", "--parts", "3", "-o", str(split), "--quiet"]) == 0
    return one, split


def _run(capsys, *argv):
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err


def test_an_index_output_of_the_wrong_extension_is_called_an_index_file(indexes, tmp_path, capsys):
    """-o c3.h5.<b>.part1 for an index input: 'for the index file', not the graph file."""
    rc, err = _run(capsys, "convert", indexes[0], "--layout", "single", "-o", tmp_path / "c3.h5.abc.part1")
    assert rc == 2, err
    assert "unknown extension '.part1' for the index file" in err and "graph" not in err, err
    rc, err = _run(capsys, "convert", indexes[0], "-o", tmp_path / "c3.h5.abc.part1")  # (an index, no --layout)
    assert rc == 2 and "graph" not in err, err


def test_a_graph_output_of_the_wrong_extension_is_still_called_a_graph_file(tmp_path, capsys):
    g = tmp_path / "g.txt"
    g.write_text("0 1\n")
    rc, err = _run(capsys, "convert", g, "-o", tmp_path / "g.part1")
    assert rc == 2 and "unknown extension '.part1' for the graph file" in err, err


def test_a_missing_part_is_not_answered_with_convert(indexes, tmp_path, capsys):
    """A split index missing a part: convert names the part and says to restore it or build the
    index again, not that 'convert --layout single' merges the parts (it cannot, and has just
    failed)."""
    import shutil

    split = indexes[1]
    d = tmp_path / "copy"
    d.mkdir()
    for p in [split, *index_parts(split)]:
        shutil.copy(p, d / os.path.basename(p))
    gone = os.path.basename(index_parts(split)[1])
    os.remove(d / gone)
    rc, err = _run(capsys, "convert", d / "s.h5", "--layout", "single", "-o", tmp_path / "one.h5")
    assert rc == 2, err
    assert gone in err and "missing" in err, err
    assert "merges" not in err and "--layout single" not in err, err
    assert "distgrail index" in err and "restore" in err, err
    assert not (tmp_path / "one.h5").exists()
