"""``distgrail convert`` given an index, as a review found it: the graph-only options
(``--format``, ``--num-vertices``, ``--no-condense``, ``--backend``) were ignored without a word
(exit 0, the index written as if they were not there). They are refused, as the command line
refuses every option it would ignore; left at their defaults they are not.
"""

from __future__ import annotations

import os

import pytest

from distgrail.cli import main


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    d = tmp_path_factory.mktemp("convert_refusals")
    one = d / "c3.h5"
    assert main(["index", "bundled", "-o", str(one), "--backend", "cpu", "--dims", "2", "--quiet"]) == 0
    return one,


def _run(capsys, *argv):
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("layout", ["single", "split"])
@pytest.mark.parametrize("opts, named", [
    (["--num-vertices", "10"], ["--num-vertices"]),
    (["--format", "edgelist"], ["--format"]),
    (["--no-condense"], ["--no-condense"]),
    (["--backend", "cpu"], ["--backend"]),
    (["--no-condense", "--format", "h5", "--num-vertices", "5"], ["--format", "--num-vertices", "--no-condense"]),
])
def test_graph_options_with_an_index_are_refused(indexes, tmp_path, capsys, layout, opts, named):
    """Each graph-only option given with an index input: exit 2 naming it (all of them when
    several), before any work: no output written."""
    out = tmp_path / "out.h5"
    rc, err = _run(capsys, "convert", indexes[0], "--layout", layout, *opts, "-o", out)
    assert rc == 2, err
    assert all(o in err for o in named), err
    assert "index" in err, err
    assert not out.exists() and os.listdir(tmp_path) == []


def test_an_index_without_layout_and_a_graph_option_is_refused(indexes, tmp_path, capsys):
    """An index given without --layout but with --format: refused (exit 2), nothing written."""
    out = tmp_path / "out.h5"
    rc, err = _run(capsys, "convert", indexes[0], "--format", "h5", "-o", out)
    assert rc == 2 and not out.exists(), err


def test_graph_options_left_at_their_defaults_are_not_refused(indexes, tmp_path, capsys):
    """The defaults spelled out (--format auto, --backend auto) change nothing: the index converts."""
    out = tmp_path / "out.h5"
    rc, err = _run(capsys, "convert", indexes[0], "--layout", "single", "--format", "auto", "--backend", "auto",
                   "-o", out, "--quiet")
    assert rc == 0, err
    assert out.read_bytes() == indexes[0].read_bytes()


def test_a_graph_still_takes_the_graph_options(tmp_path, capsys):
    g = tmp_path / "g.txt"
    g.write_text("0 1\n1 2\n2 0\n")
    rc, err = _run(capsys, "convert", g, "--format", "edgelist", "--num-vertices", "5", "--no-condense",
                   "--backend", "cpu", "-o", tmp_path / "g.h5", "--quiet")
    assert rc == 0, err
