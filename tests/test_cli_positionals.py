"""A subcommand's optional positionals after its options: ``distgrail query INDEX --backend cpu
PAIRS`` is the same command as ``query INDEX PAIRS --backend cpu`` (argparse alone filled the
positionals from their first run and called PAIRS "unrecognized"); an unknown option, or one
positional too many, stays the one-line error."""

from __future__ import annotations

import pytest

import distgrail
from distgrail.cli import build_parser, main


@pytest.fixture(scope="module")
def index_and_pairs(tmp_path_factory):
    d = tmp_path_factory.mktemp("late")
    idx = d / "k.h5"
    distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu", output=str(idx))
    pairs = d / "p.txt"
    pairs.write_text("0 1\n2 3\n5 5\n")
    return str(idx), str(pairs)


@pytest.mark.parametrize("order", ["pairs last", "pairs between", "options first"])
def test_the_pairs_file_after_options_is_the_same_query(index_and_pairs, tmp_path, order):
    idx, pairs = index_and_pairs
    out = tmp_path / f"{order}.txt"
    argv = {"pairs last": ["query", idx, "--backend", "cpu", "--quiet", pairs, "-o", str(out)],
            "pairs between": ["query", idx, pairs, "--backend", "cpu", "--quiet", "-o", str(out)],
            "options first": ["query", "--backend", "cpu", "--quiet", "-o", str(out), idx, pairs]}[order]
    assert main(argv) == 0
    want = distgrail.open_index(idx).query([0, 2, 5], [1, 3, 5], backend="cpu")[0]
    assert [int(x) for x in out.read_text().split()] == [int(x) for x in want]


def test_the_parser_places_a_late_positional_and_nothing_else():
    p = build_parser()
    got = p.parse_args(["query", "i.h5", "--backend", "cpu", "p.txt"])
    assert (got.index, got.pairs, got.backend) == ("i.h5", "p.txt", "cpu")
    got = p.parse_args(["query", "i.h5", "--backend", "cpu", "-"])  # stdin, a positional
    assert got.pairs == "-"
    got = p.parse_args(["query", "i.h5", "--backend", "cpu", "--", "-p.txt"])  # after "--", a positional
    assert (got.index, got.pairs) == ("i.h5", "-p.txt")


@pytest.mark.parametrize("argv, unrecognized", [
    (["query", "i.h5", "--backend", "cpu", "p.txt", "more.txt"], "more.txt"),
    (["query", "i.h5", "--bogus", "p.txt"], "--bogus p.txt"),
    (["query", "i.h5", "p.txt", "--bogus"], "--bogus"),
    (["index", "g.txt", "--dims", "3", "h.txt", "-o", "x.h5"], "h.txt"),
    (["info", "i.h5", "--json", "other.h5"], "other.h5"),
])
def test_extra_arguments_stay_one_error_line(capsys, argv, unrecognized):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err == \
        f"distgrail: error: unrecognized arguments: {unrecognized} (see 'distgrail --help')\n"
