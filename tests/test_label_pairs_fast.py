"""A clean pairs file of node labels is read without a loop per line
(:func:`distgrail.io.label_pairs.clean_label_pairs`), every other one by the loop that says what is
wrong (:func:`distgrail.io.pairs._label_lines`). On generated files, with every separator, kind and
tricky byte: whatever the fast path takes it reads as the loop does (labels, expected answers,
lines), and it takes nothing the loop refuses."""

from __future__ import annotations

import os

import numpy as np
import pytest

from distgrail.errors import GraphFormatError
from distgrail.io.label_pairs import clean_label_pairs
from distgrail.io.pairs import _label_lines, read_query_pairs

LABELS = ["a", "bob", "John Smith", "x,y", 'q"r', "-5", "12", "007", "+3", "1_0", "é", "日本", "nb\u00a0sp", "",
          "0", "1", "9223372036854775808", "9" * 4400, "a#b", "c%", "t\tu", "v\rw", "z\x0b", "nul\x00"]
SEPS = {b" ": [" ", "\t", "  ", " \t "], b"\t": ["\t", " \t ", "\t\t", " "], b",": [",", " , ", ",\t", " "]}
ENDS = ["\n", "\r\n", "\r", " \n", "\t\n"]
EXTRA = ["# a comment\n", "  % another\n", "\n", "   \n", "\t\n", "x #tail\n", "0 1 # c\n"]
#: labels a clean file of each separator and kind may hold
CLEAN = {("str", b" "): ["a", "bob", "é", "日本", "-5", "x,y", 'q"r'], ("str", b"\t"): ["a", "John Smith", "x,y", "é"],
         ("str", b","): ["a", "John Smith", "é", "日本"], ("int", b" "): ["-5", "12", "007", "0", "1"]}
CLEAN[("int", b"\t")] = CLEAN[("int", b",")] = CLEAN[("int", b" ")]


def _file(rng, sep: bytes, kind: str, clean: bool) -> bytes:
    width = int(rng.choice([2, 3]))
    pool = CLEAN[(kind, sep)] if clean else LABELS
    out = []
    for _ in range(int(rng.integers(1, 12))):
        if rng.random() < 0.15:
            out.append(str(rng.choice(EXTRA[:4] if clean else EXTRA)))
            continue
        k = width + (int(rng.integers(-1, 2)) if rng.random() < 0.1 and not clean else 0)
        fields = [str(rng.choice(pool)) for _ in range(k)]
        if k == 3 and (clean or rng.random() < 0.9):
            fields[2] = str(rng.choice(["0", "1"]))
        seps = SEPS[sep][:1] if clean and rng.random() < 0.7 else SEPS[sep]
        line = fields[0]
        for f in fields[1:]:
            line += str(rng.choice(seps)) + f
        out.append(line + str(rng.choice(ENDS[:2] if clean else ENDS)))
    text = "".join(out)
    if not clean and rng.random() < 0.2:  # (no line end after the last line: a field may end the file)
        text = text.rstrip("\n") + str(rng.choice(["", " ", "\t", ","]))
    return text.encode("utf-8") if clean or rng.random() < 0.97 else text.encode("utf-8")[:-2] + b"\xff\n"


def _loop(data, sep, kind):
    try:
        return _label_lines("p", data, sep, kind)
    except GraphFormatError:
        return None


@pytest.mark.parametrize("sep", [b" ", b"\t", b","])
@pytest.mark.parametrize("kind", ["str", "int"])
def test_the_fast_path_reads_as_the_loop_and_takes_nothing_it_refuses(sep, kind):
    rng = np.random.default_rng(sep[0] * 7 + len(kind))  # (fixed: str hashes change per process)
    took = agreed = 0
    for trial in range(1500):
        data = _file(rng, sep, kind, clean=trial % 2 == 0)
        fast, loop = clean_label_pairs(data, sep, kind), _loop(data, sep, kind)
        if fast is None:
            continue
        took += 1
        assert loop is not None, data  # (the loop refuses it: the fast path must not take it)
        us, vs, es, lines = fast
        lu, lv, le, ll = loop
        assert list(us) == list(lu) and list(vs) == list(lv), data
        assert (es is None) == (le is None) and (es is None or es.tolist() == le.tolist()), data
        assert list(lines) == list(ll), data
        agreed += 1
    assert took >= 100 and agreed == took  # (the fast path takes the clean files)


def test_a_large_clean_file_takes_the_fast_path(tmp_path, monkeypatch):
    import distgrail.io.pairs as pairs

    monkeypatch.setattr(pairs, "_label_lines", lambda *a: pytest.fail("the loop read a clean file"))
    p = tmp_path / "q.tsv"
    p.write_text("# u v\n" + "".join(f"user {i}\tuser {i * 7 % 1000} \r\n" for i in range(1000)))
    q = read_query_pairs(p, "str")
    assert q.sources.tolist() == [f"user {i}" for i in range(1000)] and q.lines.tolist() == list(range(2, 1002))
    assert q.targets.tolist() == [f"user {i * 7 % 1000}" for i in range(1000)] and q.expected is None


@pytest.mark.parametrize("data,sep,kind", [(b"a\t", b"\t", "str"), (b"a\tb\nc\t", b"\t", "str"), (b"a,", b",", "str"),
                                           (b"a,b\r\nc,", b",", "str"), (b"1 " + b"9" * 4301 + b"\n", b" ", "int")])
def test_what_a_review_found_the_fast_path_took_goes_to_the_loop(data, sep, kind):
    """An empty last field with no line end after it (``c<tab>`` at the file's end) was read as the
    label ''; an integer label of more than 4,300 digits raised int()'s ValueError: both the
    loop's, which refuses them."""
    assert clean_label_pairs(data, sep, kind) is None
    assert _loop(data, sep, kind) is None


def test_an_integer_label_of_many_digits_is_no_node_or_its_value():
    """int() refuses more than 4,300 digits: a label of 4,301 nines was refused as 'this index
    takes integer node labels'; now it is a node no graph has (past int64), and one of 5,000
    leading zeros is its value, as '007' is 7 (both by the loop: the fast path leaves them)."""
    with pytest.raises(GraphFormatError, match=r"node '9999.* is not in the graph"):
        _label_lines("p", b"1 " + b"9" * 4301 + b"\n", b" ", "int")
    with pytest.raises(GraphFormatError, match="node 99999999999999999999 is not in the graph"):
        _label_lines("p", b"99999999999999999999 1\n", b" ", "int")
    data = b"1,0" + b"0" * 5000 + b"1\n-0" + b"0" * 5000 + b"2,-0\n"
    assert clean_label_pairs(data, b",", "int") is None
    assert _loop(data, b",", "int")[:2] == ([1, -2], [1, 0])


@pytest.mark.parametrize("name", ["p.txt", "p.csv", "p.npy"])
def test_labels_read_against_an_index_come_with_their_ids(tmp_path, name, monkeypatch):
    """A pairs file of node labels read for an index (read_pairs_for) carries the labels' vertex
    ids, looked up once with the check (the query command answers them without a second lookup):
    the ids Index.check_pairs gives, and the same answers as Index.query of the labels."""
    import distgrail
    from distgrail.gpu.backend import get_backend
    from distgrail.io.pairs import read_pairs_for
    from distgrail.nodelabels import NodeLabels

    rng = np.random.default_rng(3)
    nodes = [int(x) for x in rng.choice(10**9, 300, replace=False)]
    edges = [(nodes[i], nodes[j]) for i, j in rng.integers(0, 300, (900, 2)) if i != j]
    idx = distgrail.build_index({u: [v for a, v in edges if a == u] for u in nodes}, dims=2)
    assert idx.node_labels is not None and idx.node_labels.kind == "int"
    pick = rng.choice(nodes, (500, 2))
    p = tmp_path / name
    if name.endswith(".npy"):
        np.save(p, pick.astype(np.int64))
    else:
        sep = "," if name.endswith(".csv") else " "
        p.write_text("".join(f"{a}{sep}{b}\n" for a, b in pick.tolist()))
    looked = []
    real = NodeLabels.lookup
    monkeypatch.setattr(NodeLabels, "lookup", lambda self, v: looked.append(1) or real(self, v))
    q = read_pairs_for(str(p), idx)
    assert len(looked) == 1 and q.ids is not None
    s, t = idx.check_pairs(q.sources, q.targets)
    np.testing.assert_array_equal(q.ids[0], s)
    np.testing.assert_array_equal(q.ids[1], t)
    want, _ = idx.query(q.sources, q.targets, backend="cpu")
    got, _ = idx._query_local(*q.ids, get_backend("cpu"))
    np.testing.assert_array_equal(got, want)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("partition", ["off", "on"])
def test_label_pairs_under_mpi_are_looked_up_once(tmp_path_factory, monkeypatch, partition):
    """``distgrail query`` of a labelled index under MPI: the ids rank 0's read looked up go to
    the sharded answer, the index whole on every rank or its DAG spread (``--partition on``), with
    no second lookup of the labels, and the answers are one process's."""
    from mpi4py import MPI

    import distgrail
    from distgrail.cli import main
    from distgrail.nodelabels import NodeLabels

    comm = MPI.COMM_WORLD
    d = comm.bcast(str(tmp_path_factory.mktemp("lab")) if comm.Get_rank() == 0 else None, root=0)
    g, p, idx, out = (os.path.join(d, x) for x in ("g.txt", "p.txt", "g.h5", "a.npy"))
    rng = np.random.default_rng(5)
    if comm.Get_rank() == 0:
        with open(g, "w") as f:
            f.write("".join(f"n{a} n{b}\n" for a, b in rng.integers(0, 400, (2000, 2)).tolist()))
        assert main(["index", g, "--format", "labelled", "-o", idx, "--dims", "2", "--backend", "cpu", "--quiet",
                     "--no-mpi"]) == 0
        names = distgrail.open_index(idx).node_labels.values.tolist()
        with open(p, "w") as f:
            f.write("".join(f"{names[a]} {names[b]}\n" for a, b in rng.integers(0, len(names), (3000, 2)).tolist()))
    comm.Barrier()
    looked = []
    monkeypatch.setattr(NodeLabels, "to_ids", lambda self, v, what: looked.append(what) or [])
    assert main(["query", idx, p, "-o", out, "--backend", "cpu", "--quiet", "--partition", partition]) == 0
    assert looked == []
    monkeypatch.undo()
    if comm.Get_rank() == 0:
        one = distgrail.open_index(idx)
        q = [ln.split() for ln in open(p).read().splitlines()]
        want, _ = one.query(np.array([a for a, _ in q]), np.array([b for _, b in q]), backend="cpu")
        np.testing.assert_array_equal(np.load(out), want)
