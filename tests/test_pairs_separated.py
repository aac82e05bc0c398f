"""Pairs files split at tabs or commas (session 37): a graph of node names may hold names with
blanks (``John Smith,Jane Doe``: docs/inputs.md rule 5), and a pairs file of ``u v`` lines could
not name them (``pairs`` refused them, ``query`` split them at the blank). Now a pairs file named
``.tsv`` is split at tabs and one named ``.csv`` at commas (by the name: a ``u v`` file's labels may
hold commas, so its content cannot tell), and ``pairs -o`` writes such files, which ``query`` reads
back. Every answer is checked against BFS over the graph's edges."""

from __future__ import annotations

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable
from distgrail.cli import main
from distgrail.errors import DistGrailError, GraphFormatError
from distgrail.io.pairs import read_query_pairs
from distgrail.io.samplepairs import write_pairs

#: how the refusal tests read a file: as node labels, or as ids below 10
NAMES_, IDS = {"labels": "str"}, {"n": 10}
NAMES = ["John Smith", "Jane Doe", "Bob Lee", "Al", "Mary Ann Lee", "Smith, John", "O'Brien"]


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    """A labelled index of names with blanks (and one with a comma: a tab-separated graph)."""
    d = tmp_path_factory.mktemp("named")
    rng = np.random.default_rng(37)
    edges = [(NAMES[a], NAMES[b]) for a, b in rng.integers(0, len(NAMES), (18, 2)).tolist()]
    graph = d / "g.tsv"
    graph.write_text("source\ttarget\n" + "".join(f"{a}\t{b}\n" for a, b in edges))
    idx = d / "g.h5"
    assert main(["index", str(graph), "-o", str(idx), "--backend", "cpu", "--quiet"]) == 0
    return idx, edges


def _bfs(edges, us, vs):
    names = sorted({x for e in edges for x in e} | set(us) | set(vs))
    at = {x: i for i, x in enumerate(names)}
    n = len(names)
    src = np.array([at[a] for a, _ in edges], np.int64)
    dst = np.array([at[b] for _, b in edges], np.int64)
    order = np.lexsort((dst, src))
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return bfs_reachable(indptr, dst[order], np.array([at[u] for u in us]), np.array([at[v] for v in vs]))


def _refused_at(path, text, line, message, **read):
    """``text`` written to ``path`` is refused by the pairs reader at ``line`` with ``message``."""
    path.write_bytes(text.encode())
    with pytest.raises(GraphFormatError, match=message) as e:
        read_query_pairs(path, **read)
    assert f"{path}:{line}:" in str(e.value)


def _answers(idx, pairs, tmp_path):
    out = tmp_path / "a.npy"
    assert main(["query", str(idx), str(pairs), "-o", str(out), "--backend", "cpu", "--quiet"]) == 0
    return np.load(out)


@pytest.mark.parametrize("sep,name", [("\t", "q.tsv"), (",", "q.csv"), ("\t", "q.TSV")])
def test_labels_with_blanks_split_at_tabs_or_commas_match_bfs(named, tmp_path, sep, name):
    idx, edges = named
    names = [x for x in NAMES if sep != "," or "," not in x]
    us = [names[i % len(names)] for i in range(len(names) ** 2)]
    vs = [names[i // len(names)] for i in range(len(names) ** 2)]
    pairs = tmp_path / name
    pairs.write_text("# u v\n" + "".join(f" {u} {sep} {v} \n" for u, v in zip(us, vs)))  # (blanks around: cut)
    q = read_query_pairs(pairs, "str")
    assert q.sources.tolist() == us and q.targets.tolist() == vs
    np.testing.assert_array_equal(_answers(idx, pairs, tmp_path), _bfs(edges, us, vs))


def test_three_columns_split_at_commas(named, tmp_path):
    idx, edges = named
    us, vs = ["John Smith", "Bob Lee", "Al"], ["Jane Doe", "Mary Ann Lee", "Al"]
    want = _bfs(edges, us, vs)
    pairs = tmp_path / "q.csv"
    pairs.write_text("".join(f"{u},{v},{int(w)}\n" for u, v, w in zip(us, vs, want)))
    q = read_query_pairs(pairs, "str")
    assert q.expected.tolist() == want.tolist() and q.lines.tolist() == [1, 2, 3]
    assert main(["query", str(idx), str(pairs), "--backend", "cpu", "--quiet"]) == 0  # (3: answers differ)


@pytest.mark.parametrize("suffix", [".tsv", ".csv", ".tsv.gz"])
def test_pairs_writes_what_query_reads_back(named, tmp_path, suffix):
    idx, edges = named
    out = tmp_path / f"p{suffix}"
    if suffix == ".csv":  # a name with a comma cannot be written to a CSV
        assert main(["pairs", str(idx), "-n", "400", "--seed", "5", "-o", str(out), "--quiet"]) == 2
        assert not out.exists()
        return
    assert main(["pairs", str(idx), "-n", "400", "--seed", "5", "-o", str(out), "--quiet"]) == 0
    q = read_query_pairs(out, "str")
    assert len(q.sources) == 400 and set(q.sources.tolist()) <= set(NAMES)
    assert any(" " in x for x in q.sources.tolist())
    np.testing.assert_array_equal(_answers(idx, out, tmp_path), _bfs(edges, q.sources.tolist(), q.targets.tolist()))


def test_a_txt_pairs_file_still_refuses_a_blank_and_says_where_it_can_go(named, tmp_path, capsys):
    idx, _ = named
    out = tmp_path / "p.txt"
    assert main(["pairs", str(idx), "-n", "50", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds a blank" in err and ".tsv or .csv" in err and not out.exists()


@pytest.mark.parametrize("label,suffix,what", [("a,b", ".csv", "comma"), ('say "hi"', ".csv", "double quote"),
                                               ("tab\there", ".tsv", "tab"), (" lead", ".tsv", "starts or ends"),
                                               ("50%", ".tsv", "'%'"), ("", ".csv", "empty")])
def test_the_writers_refuse_what_their_reader_would_not_read_back(tmp_path, label, suffix, what):
    out = tmp_path / f"p{suffix}"
    with pytest.raises(DistGrailError, match="node label") as e:
        write_pairs(np.array(["ok", label]), np.array([label, "ok"]), out)
    assert what in str(e.value) and not out.exists()


@pytest.mark.parametrize("name,text,line,message,read", [
    ("q.csv", "a b,c d\ne f\n", 2, "split at commas: the file is named .csv", NAMES_),  # a CSV line without a comma
    ("q.tsv", "a b\tc d\ne f\n", 2, "split at tabs: the file is named .tsv", NAMES_),  # a .tsv line without a tab
    ("q.csv", "a,,b\n", 1, "empty node label", NAMES_),
    ("q.tsv", "\ta\tb\n", 1, "empty node label", NAMES_),
    ("q.csv", '"a",b\n', 1, "double quote", NAMES_),
    ("q.csv", "a,b\nc\x0bd,e\n", 2, "control or space character", NAMES_),
    ("q.tsv", "a\tb\tc\n", 1, "expected answer 0 or 1", NAMES_),
    ("q.txt", "John Smith\tBob Lee\n", 1, "name the file .tsv or .csv", NAMES_),
    # a review's findings: read as something else before
    ("q.txt", "a b\nc\rx\n", 2, "control or space character", NAMES_),  # (split at every space by bytes.split)
    ("q.txt", "c\x0bx\n", 1, "control or space character", NAMES_),
    ("q.csv", "John Smith\r,Jane Doe\n", 1, "control or space character", NAMES_),  # a stray \r: only \r\n ends a line
    ("q.tsv", "John Smith\r\tJane Doe\n", 1, "control or space character", NAMES_),
    ("q.txt", "x x#2\n", 1, "comment mark", NAMES_),  # a mark glued to a label cut it: (x, x)
    ("q.csv", "p q,x#2\n", 1, "comment mark", NAMES_),
    ("q.tsv", "p q\tx%2\n", 1, "comment mark", NAMES_),
    # ids split at commas or tabs, held to their fields
    ("q.csv", "1,2,,1\n", 1, "an empty field", IDS),  # (commas read as blanks: the pair (1, 2) expected 1)
    ("q.csv", "1,2,1\n3,4,,0\n", 2, "4 fields, the first pair line has 3", IDS),
    ("q.csv", "1,2,1,\n", 1, "an empty field", IDS),
    ("q.csv", "1 2\n3,4\n", 1, "a blank inside a field", IDS),
    ("q.tsv", "1\t\t2\n", 1, "an empty field", IDS),
    ("q.tsv", "\t1\t2\n", 1, "an empty field", IDS),
    ("q.tsv", "1\t2\n1 2\t1\n", 2, "a blank inside a field", IDS),
    ("q.tsv", "1\t2\t1\n3\t4\n", 2, "2 fields, the first pair line has 3", IDS),
])
def test_separated_pairs_files_are_refused_at_the_line(tmp_path, name, text, line, message, read):
    _refused_at(tmp_path / name, text, line, message, **read)


def test_a_u_v_files_labels_read_as_before(tmp_path):
    """A ``.txt`` file is split at blanks and tabs as before, its labels' commas kept: a comma on
    its first line does not make it a CSV."""
    p = tmp_path / "q.txt"
    p.write_text("a,b d\n c\t d\n")
    q = read_query_pairs(p, "str")
    assert q.sources.tolist() == ["a,b", "c"] and q.targets.tolist() == ["d", "d"]


def test_integer_labels_split_at_commas(tmp_path):
    idx = tmp_path / "i.h5"
    distgrail.build_index({-5: [7], 7: [12], 12: []}, output=str(idx), backend="cpu")
    p = tmp_path / "q.csv"
    p.write_text("-5,12\n12,-5\n")
    assert _answers(idx, p, tmp_path).tolist() == [True, False]


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".csv.gz"])
def test_id_pairs_written_separated_read_back_as_the_txt(tmp_path, suffix):
    idx = tmp_path / "b.h5"
    assert main(["index", "bundled", "-o", str(idx), "--dims", "2", "--quiet", "--backend", "cpu"]) == 0
    txt, sep = tmp_path / "p.txt", tmp_path / f"p{suffix}"
    for out in (txt, sep):
        assert main(["pairs", str(idx), "-n", "3000", "--seed", "9", "-o", str(out), "--quiet"]) == 0
    a, b = read_query_pairs(txt), read_query_pairs(sep)
    assert a.sources.tolist() == b.sources.tolist() and a.targets.tolist() == b.targets.tolist()
    np.testing.assert_array_equal(_answers(idx, txt, tmp_path), _answers(idx, sep, tmp_path))


@pytest.mark.parametrize("text,line,message", [("1,2\n3 4\n", 2, "a line of 1 field, the first pair line has 2"),
                                                ("1,2\n3,,4\n", 2, "empty source or target"),
                                                ("1,2,1\n3 4,0\n", 2, "2 fields, the first pair line has 3")])
def test_comma_separated_id_pairs_refused_at_the_line(tmp_path, text, line, message):
    p = tmp_path / "q.csv"
    p.write_text(text)
    with pytest.raises(GraphFormatError, match=message) as e:
        read_query_pairs(p, n=10)
    assert f"{p}:{line}:" in str(e.value)


# -- a review's findings (session 37) ----------------------------------------------------------

def test_tabs_around_a_csv_label_and_crlf_line_ends_are_cut(tmp_path):
    p = tmp_path / "q.csv"
    p.write_bytes(b"John Smith\t,Jane Doe\r\n a b ,c # x,,y\r\n")
    q = read_query_pairs(p, "str")
    assert q.sources.tolist() == ["John Smith", "a b"] and q.targets.tolist() == ["Jane Doe", "c"]


def test_a_tsv_writer_refuses_a_double_quote_its_reader_refuses(tmp_path):
    for suffix in (".tsv", ".TSV.GZ"):
        out = tmp_path / f"p{suffix}"
        with pytest.raises(DistGrailError, match="holds a double quote"):
            write_pairs(np.array(['12" pipe']), np.array(["x"]), out)
        assert not out.exists()


def test_separated_id_pairs_with_comments_blank_lines_and_crlf_read(tmp_path):
    p = tmp_path / "q.tsv"
    p.write_bytes(b"# u v answer\r\n1\t2\t1\r\n\r\n 3 \t 4\t0 # a\t\tb\r\n")
    q = read_query_pairs(p, n=10)
    assert q.sources.tolist() == [1, 3] and q.targets.tolist() == [2, 4] and q.expected.tolist() == [True, False]


@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz", ".csv.gz"])
def test_an_answers_file_reads_back_as_pairs_with_their_answers(named, tmp_path, suffix):
    """``query -o a.tsv`` writes the header ``u v reachable``: the file is a pairs file with expected
    answers for a later ``query`` (a regression check), its header skipped and the lines counted as
    written. Names with blanks and one named like a column ("u") read as the nodes they are."""
    idx, edges = named
    pairs = tmp_path / "p.tsv"
    assert main(["pairs", str(idx), "-n", "300", "--seed", "9", "-o", str(pairs), "--quiet"]) == 0
    out = tmp_path / f"a{suffix}"
    if suffix.startswith(".csv"):  # (a name with a comma cannot be written to a CSV: its rows without them)
        rows = [ln.split("\t") for ln in pairs.read_text().splitlines() if "," not in ln]
        pairs.write_text("".join(f"{u}\t{v}\n" for u, v in rows))
    assert main(["query", str(idx), str(pairs), "-o", str(out), "--backend", "cpu", "--quiet"]) == 0
    q = read_query_pairs(out, "str")
    want = _bfs(edges, q.sources.tolist(), q.targets.tolist())
    assert q.expected.tolist() == want.tolist() and q.lines[0] == 2 and len(q.sources) > 100
    assert main(["query", str(idx), str(out), "--backend", "cpu", "--quiet"]) == 0
    if suffix == ".tsv":  # one answer flipped: told at its line, exit status 3
        lines = out.read_text().splitlines()
        u, v, r = lines[4].split("\t")
        lines[4] = f"{u}\t{v}\t{1 - int(r)}"
        out.write_text("\n".join(lines) + "\n")
        assert main(["query", str(idx), str(out), "--backend", "cpu", "--quiet"]) == 3
        assert read_query_pairs(out, "str").lines.tolist()[3] == 5


@pytest.mark.parametrize("suffix", [".tsv", ".csv", ".txt"])
def test_an_answers_header_over_id_pairs_is_skipped_only_as_written(tmp_path, suffix):
    """Id pairs under the answers header (any separator, after comments) read with their line
    numbers; a header of other words is still refused at its line (no header is guessed)."""
    sep = {".tsv": "\t", ".csv": ",", ".txt": " "}[suffix]
    path = tmp_path / f"a{suffix}"
    path.write_text(f"# answers\n\nu{sep}v{sep}reachable\n0{sep}1{sep}1\n2{sep}3{sep}0\n")
    q = read_query_pairs(path, n=10)
    assert q.sources.tolist() == [0, 2] and q.targets.tolist() == [1, 3]
    assert q.expected.tolist() == [True, False] and q.lines.tolist() == [4, 5]
    path.write_text(f"u{sep}v{sep}reachable\n0{sep}1\n")  # (two columns under it: read as two columns)
    q = read_query_pairs(path, n=10)
    assert q.sources.tolist() == [0] and q.expected is None
    _refused_at(path, f"u{sep}v{sep}answer\n0{sep}1{sep}1\n", 1, "non-negative integer, got .u.", n=10)
    _refused_at(path, f"u{sep}v{sep}reachable\n0{sep}1{sep}2\n", 2, "answer 0 or 1", n=10)


@pytest.mark.parametrize("name", ["p.txt", "p.txt.gz", "p.tsv"])
@pytest.mark.parametrize("read", [IDS, NAMES_])
def test_binary_data_is_no_pairs_file(tmp_path, name, read):
    """An executable or any file with a NUL byte given as pairs is 'binary data', as the graph
    reader says (was: a carriage return inside line 1, or a label not in the graph)."""
    import gzip

    data = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    with pytest.raises(GraphFormatError, match="binary data, not a text pairs file: it starts with '.x7fELF"):
        read_query_pairs(path, **read)
