"""Review 55: README.md read by a newcomer, every command run as written; each test here failed
before the fix it names (README, --help or behaviour)."""

import os
import re

import pytest

from conftest import ROOT

README = os.path.join(ROOT, "README.md")


def _readme() -> str:
    with open(README, encoding="utf-8") as f:
        return f.read()


def _index_table_rows() -> list:
    text = _readme()
    start = text.index("## Index file (HDF5")
    rows, seen = [], False
    for ln in text[start:].splitlines():
        if ln.startswith("| `/"):
            rows.append(ln)
            seen = True
        elif seen and not ln.startswith("|"):
            break
    return rows


def test_readme_index_table_says_which_datasets_a_plain_grail_index_lacks(tmp_path):
    # `index --supports 0` (plain GRAIL) writes no /supports/ datasets, while the README's table
    # listed /supports/ids (K,) and the masks (C, W) unconditionally: h5py's f['supports/ids']
    # on such an index is a KeyError the table did not foretell
    import h5py

    import distgrail

    for k, name in ((0, "k0.h5"), ("auto", "k.h5")):
        distgrail.build_index(distgrail.bundled_graph(), dims=2, supports=k, backend="cpu",
                              output=str(tmp_path / name))

    def datasets(path):
        out = set()
        with h5py.File(path) as f:
            f.visititems(lambda n, o: out.add("/" + n) if isinstance(o, h5py.Dataset) else None)
        return out

    plain, default = datasets(tmp_path / "k0.h5"), datasets(tmp_path / "k.h5")
    rows = _index_table_rows()
    listed = {p for row in rows for p in re.findall(r"`(/[a-z_0-9/]+)`", row.split("|")[1])}
    assert default <= listed, f"the README's index table lacks {sorted(default - listed)}"
    for name in sorted(default - plain):
        group = name.rsplit("/", 1)[0] + "/"
        said = [row for row in rows if "K = 0" in row and (f"`{name}`" in row or f"`{group}`" in row)]
        assert said, f"an index built with --supports 0 has no {name}; the README's table does not say so"


def _help(command: str) -> str:
    from distgrail.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices[command]
    return " ".join(sub.format_help().split())


def test_convert_help_names_the_edge_tables_it_reads_and_counts(tmp_path, capsys):
    # 'distgrail convert e.parquet --num-vertices 10 -o g.h5' works (n = 10), but convert --help
    # said '--num-vertices: edge lists: number of vertices' and its graph '(.gra, edge list, .mtx,
    # .h5)', and a .mtx given --num-vertices was told it 'applies to edge lists only': index's
    # --help says 'edge lists and edge tables'
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from distgrail.cli import main

    text = _help("convert")
    assert "--num-vertices NUM_VERTICES edge lists and edge tables: number of vertices" in text
    assert ".parquet" in text.split("positional arguments:")[1].split("options:")[0]
    pq.write_table(pa.table({"src": [0, 1], "dst": [1, 2]}), str(tmp_path / "e.parquet"))
    assert main(["convert", str(tmp_path / "e.parquet"), "--num-vertices", "10", "-o", str(tmp_path / "g.h5"),
                 "--backend", "cpu", "--quiet"]) == 0
    (tmp_path / "g.mtx").write_text("%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2\n")
    capsys.readouterr()
    assert main(["convert", str(tmp_path / "g.mtx"), "--num-vertices", "10", "-o", str(tmp_path / "m.h5"),
                 "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "not 'mtx' files" in err and "Parquet/Arrow edge tables" in err, err
    assert not os.path.exists(tmp_path / "m.h5")


def test_a_graph_of_names_is_split_by_its_first_edge_line_not_by_a_tsv_name(tmp_path, capsys):
    # README said node names were split 'a CSV's at commas, a TSV's at tabs only', but a graph is
    # split by its first edge line, not its name: names.tsv holding 'a,b<tab>c' is comma-separated,
    # and was refused as 'control character in a node name' without saying why a tab was inside one
    from distgrail.cli import main

    assert "a TSV's at tabs only" not in _readme()
    assert "whatever the file's name" in _readme()
    path = tmp_path / "names.tsv"
    path.write_bytes(b"source\ttarget\na,b\tc\nc\td\n")
    assert main(["index", str(path), "-o", str(tmp_path / "n.h5"), "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "names.tsv:2: control character in a node name (the file is comma-separated" in err, err
    assert "'a,b\\tc'" in err
    assert sorted(os.listdir(tmp_path)) == ["names.tsv"]
    path.write_bytes(b"source\ttarget\nJohn Smith\tJane Doe\nJane Doe\tBob\n")  # tabs: names with blanks
    assert main(["index", str(path), "-o", str(tmp_path / "n.h5"), "--backend", "cpu", "--quiet"]) == 0


def test_readme_names_the_rank_options_one_process_lets_be(tmp_path, capsys):
    # README: 'an option that does not apply ... is refused, not ignored', yet one process runs
    # 'index --partition on', '--share-gpus' and 'serve --front root' as if not given (their --help:
    # 'one process: off', 'one process ignores it'); README now names them
    from distgrail.cli import main

    sentence = next(s for s in _readme().split(";") if "is refused, not ignored" in s)
    for opt in ("--partition", "--share-gpus", "serve --front"):
        assert f"`{opt}`" in sentence, f"README's 'refused, not ignored' does not except {opt}"
    assert "one process ignores it" in _help("serve")
    out = str(tmp_path / "k.h5")
    assert main(["index", "bundled", "-o", out, "--partition", "on", "--share-gpus", "--backend", "cpu",
                 "--quiet"]) == 0
    assert main(["query", out, "--pair", "2", "3", "--partition", "on", "--share-gpus", "--backend", "cpu"]) == 0
    assert capsys.readouterr().out.strip() == "2 3 reachable"
