"""A split index's main file replaced by an output that is no index (a review's finding, session 31):
``distgrail generate ... -o s.h5`` (a graph, binary or text), ``query -o``, ``pairs -o`` and the
API writers put the new file in place and left the replaced index's part files beside it for good
(no later write knew their build). Every output written through
:class:`distgrail.io.atomic.atomic_path` now removes them once in place, by the rule an index
written there follows (:func:`distgrail.indexfile.layout.remove_parts`): not while another index
file in the directory carries that build (a copy of the replaced main file, a hard link to it).
A link at the output's name is replaced, not the index it points to: that index keeps its parts.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from distgrail.cli import main
from distgrail.indexfile.layout import index_parts


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A split index (``s.h5`` and its parts) and a one-file index to query, in a directory apart."""
    d = tmp_path_factory.mktemp("built")
    assert main(["index", "bundled", "-o", str(d / "s.h5"), "--backend", "cpu", "--dims", "2", "--layout", "split",
                 "--quiet"]) == 0
    assert index_parts(d / "s.h5")
    assert main(["index", "bundled", "-o", str(d / "one.h5"), "--backend", "cpu", "--dims", "2", "--quiet"]) == 0
    return d


def _split(built, where, name="s.h5") -> tuple:
    """The split index copied into ``where`` (its parts beside it), its main file renamed to
    ``name`` (it still maps the parts named after ``s.h5``); (main file, parts)."""
    for p in [built / "s.h5", *index_parts(built / "s.h5")]:
        shutil.copy2(p, where / os.path.basename(p))
    if name != "s.h5":
        os.rename(where / "s.h5", where / name)
    parts = index_parts(where / name)
    assert parts and all(os.path.isfile(p) for p in parts)
    return where / name, parts


def _generate(out, *how):
    assert main(["generate", *how, "-o", str(out), "--quiet"]) == 0


def _named(how) -> str:
    """The split index's main file named as the graph ``how`` writes must be (generate refuses a
    --format its output's extension contradicts)."""
    fmt = how[how.index("--format") + 1] if "--format" in how else "h5"
    return {"edgelist": "s.txt", "gra": "s.gra"}.get(fmt, "s.h5")


#: writers of a graph file, by the command that runs them
GRAPHS = {
    "h5 (io.binary)": ("paper", "-n", "60"),
    "rmat h5 (io.rmat, io.binary)": ("rmat", "--scale", "5", "--threads", "2"),
    "rmat edge list (io.rmat)": ("rmat", "--scale", "5", "--threads", "2", "--format", "edgelist"),
    "gra (io.writers.write_csr)": ("paper", "-n", "60", "--format", "gra"),
    "edge list (io.writers.write_csr)": ("layered", "-n", "60", "--format", "edgelist"),
}


@pytest.mark.parametrize("how", list(GRAPHS))
def test_a_generated_graph_over_a_split_index_removes_its_parts(built, tmp_path, how):
    main_file, parts = _split(built, tmp_path, _named(GRAPHS[how]))
    _generate(main_file, *GRAPHS[how])
    assert not any(os.path.exists(p) for p in parts)
    assert sorted(os.listdir(tmp_path)) == [_named(GRAPHS[how])]


@pytest.mark.parametrize("how", ["h5 (io.binary)", "edge list (io.writers.write_csr)"])
def test_a_generated_graph_keeps_the_parts_a_copy_or_link_uses(built, tmp_path, how):
    main_file, parts = _split(built, tmp_path, _named(GRAPHS[how]))
    shutil.copy2(main_file, tmp_path / "copy.h5")
    os.link(main_file, tmp_path / "linked.h5")
    _generate(main_file, *GRAPHS[how])
    assert all(os.path.isfile(p) for p in parts)
    assert main(["info", str(tmp_path / "copy.h5"), "--quiet"]) == 0
    os.remove(tmp_path / "copy.h5")
    _generate(main_file, *GRAPHS[how])  # (the hard link still carries the build)
    assert all(os.path.isfile(p) for p in parts)
    assert main(["info", str(tmp_path / "linked.h5"), "--quiet"]) == 0


def test_a_symbolic_link_replaced_leaves_the_index_it_names_whole(built, tmp_path):
    main_file, parts = _split(built, tmp_path)
    os.symlink("s.h5", tmp_path / "link.h5")
    _generate(tmp_path / "link.h5", *GRAPHS["h5 (io.binary)"])
    assert not os.path.islink(tmp_path / "link.h5")
    assert all(os.path.isfile(p) for p in parts)
    assert main(["info", str(main_file), "--quiet"]) == 0


def test_write_graph_of_an_edge_graph_removes_the_parts(built, tmp_path):
    from distgrail.io.read import read_graph
    from distgrail.io.writers import write_graph

    (tmp_path / "in").mkdir()
    g = tmp_path / "in" / "g.txt"
    g.write_text("0 1\n1 2\n2 0\n0 1\n")
    main_file, parts = _split(built, tmp_path, "keep.txt")  # (a main file renamed: it maps s.h5's parts)
    write_graph(read_graph(str(g)), main_file)
    assert not any(os.path.exists(p) for p in parts)
    assert main_file.read_text().splitlines()[1:] == ["0 1", "1 2", "2 0", "0 1"]


#: answer files (io.writers.write_answers; the rows and .gz via io.answers)
ANSWERS = ["a.txt", "a.answers", "a.txt.gz", "a.npy", "a.tsv", "a.csv.gz", "a.parquet"]


@pytest.mark.parametrize("name", ANSWERS)
def test_answers_over_a_renamed_split_index_remove_its_parts(built, tmp_path, name):
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    main_file, parts = _split(built, tmp_path, name)
    assert main(["query", str(built / "one.h5"), "bundled", "-o", str(main_file), "--backend", "cpu",
                 "--quiet"]) == 0
    assert not any(os.path.exists(p) for p in parts)
    assert sorted(os.listdir(tmp_path)) == [name]


def test_answers_of_the_api_remove_the_parts_but_not_those_a_copy_uses(built, tmp_path):
    from distgrail.io.writers import write_answers

    main_file, parts = _split(built, tmp_path, "a.txt")
    shutil.copy2(main_file, tmp_path / "copy.h5")
    write_answers(np.array([True, False]), main_file)
    assert all(os.path.isfile(p) for p in parts)
    os.remove(tmp_path / "copy.h5")
    _, parts = _split(built, tmp_path, "b.tsv")
    write_answers(np.array([True, False]), tmp_path / "b.tsv", np.array([1, 2]), np.array([3, 4]))
    assert not any(os.path.exists(p) for p in parts)


@pytest.mark.parametrize("name", ["p.txt", "p.pairs.gz", "p.npy"])
def test_pairs_over_a_renamed_split_index_remove_its_parts(built, tmp_path, name):
    main_file, parts = _split(built, tmp_path, name)
    assert main(["pairs", str(built / "one.h5"), "-n", "10", "-o", str(main_file), "--quiet"]) == 0
    assert not any(os.path.exists(p) for p in parts)
    assert sorted(os.listdir(tmp_path)) == [name]


def test_an_output_over_a_plain_file_or_a_one_file_index_removes_nothing(built, tmp_path):
    _, parts = _split(built, tmp_path)
    shutil.copy2(built / "one.h5", tmp_path / "one.h5")
    (tmp_path / "s.h5.0000abcd.part0").write_bytes(b"not a part")  # (named like one, no HDF5)
    _generate(tmp_path / "one.h5", *GRAPHS["h5 (io.binary)"])
    (tmp_path / "t.txt").write_text("text\n")
    _generate(tmp_path / "t.txt", *GRAPHS["edge list (io.writers.write_csr)"])
    assert all(os.path.isfile(p) for p in parts)
    assert (tmp_path / "s.h5.0000abcd.part0").read_bytes() == b"not a part"
    assert main(["info", str(tmp_path / "s.h5"), "--quiet"]) == 0


def test_a_link_in_another_directory_reads_the_index_it_names(built, tmp_path, capsys):
    """A link to a split main file from another directory (``other/latest.h5 -> ../builds/s.h5``,
    a review's finding, session 33): its parts lie beside the target, and info, query, convert
    read them there (they looked beside the link: "part missing", exit 2); a graph written over
    the link replaces the link and leaves the index and its parts whole."""
    (tmp_path / "builds").mkdir()
    (tmp_path / "other").mkdir()
    main_file, parts = _split(built, tmp_path / "builds")
    link = tmp_path / "other" / "latest.h5"
    os.symlink(os.path.join("..", "builds", "s.h5"), link)
    assert sorted(index_parts(link)) == sorted(parts)
    assert main(["info", str(link), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["query", str(link), "--pair", "2", "3", "--backend", "cpu"]) == 0
    got = capsys.readouterr().out
    assert main(["query", str(built / "one.h5"), "--pair", "2", "3", "--backend", "cpu"]) == 0
    assert got and got == capsys.readouterr().out
    merged = tmp_path / "merged.h5"
    assert main(["convert", str(link), "--layout", "single", "-o", str(merged), "--quiet"]) == 0
    import distgrail

    a, b = distgrail.open_index(str(merged)), distgrail.open_index(str(main_file))
    u = np.arange(0, a.n, 7)
    v = u[::-1].copy()
    np.testing.assert_array_equal(a.query(u, v, backend="cpu")[0], b.query(u, v, backend="cpu")[0])
    _generate(link, *GRAPHS["h5 (io.binary)"])
    assert not os.path.islink(link)
    assert all(os.path.isfile(p) for p in parts)
    assert main(["info", str(main_file), "--quiet"]) == 0
