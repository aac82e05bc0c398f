"""A split index replaced at its path: its parts go only when no other index file uses them, and
``info`` lists the parts a main file really maps, whatever its name (a fresh review's findings).

A copy of a split index's main file (``cp s.h5 before.h5``), or a hard link to it, in the same
directory maps the same part files: writing a new index over ``s.h5`` (``update``, ``convert``,
``index``) removed the replaced build's parts at once, and ``before.h5`` could no longer be read
(a part missing). They now go only when no index file in the directory carries that build (the
check :func:`distgrail.indexfile.write.remove_orphans` makes for a killed build's parts); a file
there that cannot be read (a copy still being written) might carry them: they stay. A main file
renamed away (``mv s.h5 keep.h5``) maps parts named after its old name: ``info`` listed none of
them, and replacing it left them behind for good.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import distgrail
from distgrail.cli import main
from distgrail.indexfile.layout import index_parts


def _build(path, layout="split") -> None:
    assert main(["index", "bundled", "-o", str(path), "--backend", "cpu", "--dims", "2", "--layout", layout,
                 "--quiet"]) == 0


def _answers(path):
    s, t = np.arange(0, 3617, 7), np.arange(3616, -1, -7)
    return distgrail.open_index(str(path)).reachable(s, t)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    path = tmp_path_factory.mktemp("ref") / "ref.h5"
    _build(path, "single")
    return _answers(path)


def _replace(how, path, tmp_path) -> None:
    """Write a new index over ``path`` (a split index) as ``how`` says."""
    other = tmp_path / "other" / "o.h5"
    if how.startswith("convert"):
        other.parent.mkdir(exist_ok=True)
        _build(other, "single")
    if how == "update":
        (tmp_path / "add.txt").write_text("5 17\n")
        assert main(["update", str(path), "--add", str(tmp_path / "add.txt"), "--backend", "cpu", "--quiet"]) == 0
    elif how == "convert split":
        assert main(["convert", str(other), "--layout", "split", "--parts", "3", "-o", str(path), "--quiet"]) == 0
    elif how == "convert single":
        assert main(["convert", str(other), "--layout", "single", "-o", str(path), "--quiet"]) == 0
    elif how in ("index split", "index single"):
        _build(path, how.split()[1])
    else:  # pragma: no cover
        raise AssertionError(how)


HOWS = ["update", "convert split", "convert single", "index split", "index single"]


@pytest.mark.parametrize("keeper", ["copy", "hard link"])
@pytest.mark.parametrize("how", HOWS)
def test_a_copy_or_link_of_the_main_file_keeps_its_parts(tmp_path, reference, how, keeper):
    s, before = tmp_path / "s.h5", tmp_path / "before.h5"
    _build(s)
    old = sorted(index_parts(s))
    (shutil.copy2 if keeper == "copy" else os.link)(s, before)
    assert main(["info", str(before), "--quiet"]) == 0
    _replace(how, s, tmp_path)
    assert all(os.path.isfile(p) for p in old), os.listdir(tmp_path)
    assert main(["info", str(before), "--quiet"]) == 0
    assert np.array_equal(_answers(before), reference)
    assert sorted(index_parts(before)) == old
    # once nothing carries that build, the next index written there removes its parts
    os.remove(before)
    _build(s)
    assert not any(os.path.exists(p) for p in old)
    assert sorted(os.listdir(tmp_path / "")) == sorted(["s.h5", *(os.path.basename(p) for p in index_parts(s))]
                                                       + (["add.txt"] if how == "update" else [])
                                                       + (["other"] if how.startswith("convert") else []))


@pytest.mark.parametrize("how", HOWS)
def test_with_nothing_else_using_them_the_replaced_parts_go_at_once(tmp_path, reference, how):
    s = tmp_path / "s.h5"
    _build(s)
    old = index_parts(s)
    (tmp_path / "notes.txt").write_text("not an index")
    _replace(how, s, tmp_path)
    assert not any(os.path.exists(p) for p in old)
    assert "notes.txt" in os.listdir(tmp_path)


def test_a_file_that_cannot_be_read_might_use_them_so_they_stay(tmp_path):
    """A copy being written (``cp`` not done yet): HDF5 cannot open it, and it may carry the build."""
    s = tmp_path / "s.h5"
    _build(s)
    old = index_parts(s)
    with open(s, "rb") as f:
        (tmp_path / "copying.h5").write_bytes(f.read(4096))
    _replace("update", s, tmp_path)
    assert all(os.path.isfile(p) for p in old)
    os.remove(tmp_path / "copying.h5")
    _replace("update", s, tmp_path)  # (the next write finds them unused)
    assert not any(os.path.exists(p) for p in old)


def test_a_renamed_main_file_lists_and_replaces_its_own_parts(tmp_path, reference, capsys):
    s, keep = tmp_path / "s.h5", tmp_path / "keep.h5"
    _build(s)
    old = sorted(index_parts(s))
    os.rename(s, keep)
    assert sorted(index_parts(keep)) == old  # mapped by the main file, named after s.h5
    capsys.readouterr()
    assert main(["info", str(keep), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["part_files"] == [os.path.basename(p) for p in old]
    assert info["size_bytes"] == os.path.getsize(keep) + sum(os.path.getsize(p) for p in old)
    assert main(["info", str(keep)]) == 0
    assert "s.h5." in capsys.readouterr().out
    _replace("update", keep, tmp_path)  # in place: the parts it replaced go, though not named after keep.h5
    assert not any(os.path.exists(p) for p in old)
    new = index_parts(keep)
    assert new and all(os.path.basename(p).startswith("keep.h5.") for p in new)
    assert sorted(os.listdir(tmp_path)) == sorted(["keep.h5", "add.txt", *(os.path.basename(p) for p in new)])


def test_a_renamed_away_index_keeps_its_parts_when_its_old_name_is_written(tmp_path, reference):
    s, keep = tmp_path / "s.h5", tmp_path / "keep.h5"
    _build(s)
    old = index_parts(s)
    os.rename(s, keep)
    _build(s)
    assert all(os.path.isfile(p) for p in old)
    assert np.array_equal(_answers(keep), reference) and np.array_equal(_answers(s), reference)


def test_index_parts_of_a_one_file_index_is_empty(tmp_path):
    one = tmp_path / "one.h5"
    _build(one, "single")
    assert index_parts(one) == []
