"""Compressed answers and pairs files tell their codec by one rule, the writers' and the readers'
(a review's finding, session 31): ``query -o A.TSV.GZ`` wrote gzip (the writer took ``.gz`` in any
case) that :func:`~distgrail.io.answers.read_answer_rows` read as text, a gzip pairs file named
``P.TXT.GZ`` was read as text (a "carriage return" error on its bytes), and ``pairs -o P.TXT.GZ``
was refused. :func:`distgrail.io.answers.compression_of` now decides for all of them, by the name's
ending in any case (``.gz``, ``.GZ``, ``.Gz``). gzip is the only codec these files are written in:
``.bz2`` and ``.zst`` names are refused, in any case, before anything is written.
"""

from __future__ import annotations

import gzip
import os

import numpy as np
import pytest

from distgrail.cli import main
from distgrail.io.answers import compression_of, read_answer_rows, uncompressed_name, write_text_chunks
from distgrail.io.pairs import read_pairs, read_query_pairs
from distgrail.io.samplepairs import write_pairs
from distgrail.io.writers import write_answers

GZ = b"\x1f\x8b"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """An index of the bundled graph, its pairs as text, and the answers as plain text."""
    d = tmp_path_factory.mktemp("built")
    idx = d / "k.h5"
    assert main(["index", "bundled", "-o", str(idx), "--backend", "cpu", "--dims", "2", "--quiet"]) == 0
    assert main(["pairs", str(idx), "-n", "200", "--seed", "3", "--reachable", "-o", str(d / "p.txt"), "--quiet"]) == 0
    assert main(["query", str(idx), str(d / "p.txt"), "-o", str(d / "a.txt"), "--backend", "cpu", "--quiet"]) == 0
    return idx, d / "p.txt", (d / "a.txt").read_bytes()


@pytest.mark.parametrize("name,codec", [("a.txt.gz", "gz"), ("A.TXT.GZ", "gz"), ("a.txt.Gz", "gz"), ("x.gZ", "gz"),
                                        ("a.txt", None), ("a.gz.txt", None), ("agz", None), ("a.tsv", None)])
def test_one_rule_tells_the_codec_by_the_name_in_any_case(name, codec):
    assert compression_of(name) == codec
    assert uncompressed_name(name) == (name[:-3] if codec else name)


@pytest.mark.parametrize("name", ["A.TXT.GZ", "a.txt.Gz", "a.txt.gz"])
def test_line_answers_with_gz_in_any_case_are_gzip(built, tmp_path, name):
    idx, pairs, plain = built
    out = tmp_path / name
    assert main(["query", str(idx), str(pairs), "-o", str(out), "--backend", "cpu", "--quiet"]) == 0
    raw = out.read_bytes()
    assert raw[:2] == GZ and gzip.decompress(raw) == plain
    assert raw[10:10 + len(name) - 2] == name[:-3].encode() + b"\0"  # (its header's name: what gunzip -N gives)
    assert os.listdir(tmp_path) == [name]


@pytest.mark.parametrize("name", ["A.TSV.GZ", "b.csv.Gz", "c.tsv.gz", "d.CSV"])
def test_answer_rows_are_read_back_as_written(built, tmp_path, name):
    idx, pairs, plain = built
    out = tmp_path / name
    assert main(["query", str(idx), str(pairs), "-o", str(out), "--backend", "cpu", "--quiet"]) == 0
    assert (out.read_bytes()[:2] == GZ) == (compression_of(name) == "gz")
    u, v, reachable = read_answer_rows(out)
    s, t = read_pairs(pairs)
    assert u.tolist() == [str(x) for x in s.tolist()] and v.tolist() == [str(x) for x in t.tolist()]
    assert reachable.astype(int).tolist() == [int(x) for x in plain.split()]


def test_answers_of_the_api_follow_the_same_rule(tmp_path):
    a = np.array([True, False, True])
    for name in ("X.TXT.GZ", "y.answers.Gz", "z.txt"):
        write_answers(a, tmp_path / name)
        raw = (tmp_path / name).read_bytes()
        text = gzip.decompress(raw) if compression_of(name) else raw
        assert (raw[:2] == GZ) == bool(compression_of(name)) and text == b"1\n0\n1\n"
    write_answers(a, tmp_path / "R.CSV.GZ", np.array([1, 2, 3]), np.array([4, 5, 6]))
    u, v, r = read_answer_rows(tmp_path / "R.CSV.GZ")
    assert u.tolist() == ["1", "2", "3"] and v.tolist() == ["4", "5", "6"] and r.tolist() == a.tolist()


@pytest.mark.parametrize("name", ["P.TXT.GZ", "p.pairs.Gz", "p.txt.gz"])
def test_pairs_with_gz_in_any_case_are_written_and_read_back_as_gzip(built, tmp_path, name):
    idx, pairs, plain = built
    out = tmp_path / name
    assert main(["pairs", str(idx), "-n", "200", "--seed", "3", "--reachable", "-o", str(out), "--quiet"]) == 0
    raw = out.read_bytes()
    assert raw[:2] == GZ and gzip.decompress(raw) == pairs.read_bytes()
    s, t = read_pairs(out)
    s0, t0 = read_pairs(pairs)
    assert np.array_equal(s, s0) and np.array_equal(t, t0)
    answers = tmp_path / "a.txt"
    assert main(["query", str(idx), str(out), "-o", str(answers), "--backend", "cpu", "--quiet"]) == 0
    assert answers.read_bytes() == plain


def test_a_gzip_pairs_file_named_in_upper_case_is_read_as_gzip(built, tmp_path):
    _, pairs, _ = built
    for name in ("Q.TXT.GZ", "q.pairs.gZ"):
        (tmp_path / name).write_bytes(gzip.compress(pairs.read_bytes()))
        q = read_query_pairs(tmp_path / name)
        assert np.array_equal(q.sources, read_pairs(pairs)[0])
    write_pairs(np.array([1, 2]), np.array([3, 4]), tmp_path / "W.PAIRS.GZ")
    assert gzip.decompress((tmp_path / "W.PAIRS.GZ").read_bytes()) == b"1 3\n2 4\n"
    assert [x.tolist() for x in read_pairs(tmp_path / "W.PAIRS.GZ")] == [[1, 2], [3, 4]]


def test_a_plain_file_named_gz_is_refused_not_read_as_text(tmp_path):
    p = tmp_path / "P.TXT.GZ"
    p.write_text("1 2\n")
    with pytest.raises(Exception, match="gzip"):
        read_pairs(p)
    write_text_chunks(tmp_path / "plain.txt", [b"1 2\n"])
    assert (tmp_path / "plain.txt").read_bytes() == b"1 2\n"


@pytest.mark.parametrize("name", ["a.txt.bz2", "a.txt.zst", "A.TXT.BZ2", "a.tsv.Zst", "a.txt.xz"])
def test_answers_in_other_codecs_are_refused(built, tmp_path, capsys, name):
    idx, pairs, _ = built
    capsys.readouterr()
    assert main(["query", str(idx), str(pairs), "-o", str(tmp_path / name), "--backend", "cpu"]) == 2
    assert "answers file" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["p.txt.bz2", "p.pairs.zst", "P.TXT.BZ2", "p.txt.xz"])
def test_pairs_in_other_codecs_are_refused(built, tmp_path, capsys, name):
    idx, _, _ = built
    capsys.readouterr()
    assert main(["pairs", str(idx), "-n", "5", "-o", str(tmp_path / name)]) == 2
    assert "pairs file" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
