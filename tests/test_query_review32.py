"""What a review of the query side found (session 32): a uint64 label past int64 answered for the
label it wraps to (API and server); after the client split a batch, the server's ``sources[k]``
named a pair of the chunk, not of the batch (and ``query --server`` the wrong line)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import distgrail
import distgrail.io.pairs
from distgrail.errors import QueryError
from test_server import MPIEXEC, Server, _env, needs_mpiexec

#: integer labels, one of them -5 (2^64 - 5 as uint64 wraps to it) and one past 2^32
INT_GRAPH = {-5: [7], 7: [2**62], 2**62: [], 0: [-5], 1: [0], 2: [1], 3: [2]}


def _cli(*args, cwd, **kw):
    return subprocess.run([sys.executable, "-m", "distgrail", *args], capture_output=True, text=True, cwd=cwd,
                          env=_env(), timeout=120, **kw)


def _refused(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


# -- 1. a label past int64 -------------------------------------------------------------------
def test_a_uint64_label_past_int64_is_not_in_the_graph():
    idx = distgrail.build_index(INT_GRAPH, backend="cpu")
    assert idx.reachable(-5, 7) is True
    with pytest.raises(QueryError, match=r"^sources\[0\]: node 18446744073709551611 is not in the graph$"):
        idx.reachable(2**64 - 5, 7)
    with pytest.raises(QueryError, match=r"^targets\[1\]: node 18446744073709551611 is not in the graph$"):
        idx.query(np.array([7, 7], np.uint64), np.array([2**62, 2**64 - 5], np.uint64))
    got, _ = idx.query(np.array([7, 0], np.uint64), np.array([2**62, 7], np.uint64), backend="cpu")
    assert got.tolist() == [True, True]


@pytest.fixture(scope="module")
def int_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("intlabels")
    path = d / "ints.h5"
    distgrail.build_index(INT_GRAPH, backend="cpu").save(path)
    srv = Server(path, "--max-pairs", "2")
    yield str(path), srv
    assert srv.stop() == 0, srv.lines


def test_the_server_refuses_a_uint64_label_past_int64(int_server):
    _, srv = int_server
    c = distgrail.connect(srv.url)
    assert c.label_kind == "int" and c.reachable(-5, 7) is True
    with pytest.raises(QueryError, match=r"^sources\[0\]: node 18446744073709551611 is not in the graph$"):
        c.reachable(2**64 - 5, 7)
    with pytest.raises(QueryError, match=r"^targets\[2\]: node 18446744073709551611 is not in the graph$"):
        c.query(np.array([7, 0, 7]), np.array([2**62, 7, 2**64 - 5], np.uint64))
    # both columns uint64: sent as they are, the server's Index.query names it (in the batch, not the chunk)
    with pytest.raises(QueryError, match=r"^sources\[2\]: node 18446744073709551611 is not in the graph$"):
        c.query(np.array([7, 0, 2**64 - 5], np.uint64), np.array([2**62, 7, 7], np.uint64))
    # Python ints past 64 bits (an object array), and ones that fit
    with pytest.raises(QueryError, match=rf"^targets\[1\]: node {2**64} is not in the graph$"):
        c.query([7, 7], [2**62, 2**64])
    with pytest.raises(QueryError, match=rf"^sources\[0\]: node {-2**63 - 1} is not in the graph$"):
        c.reachable(-2**63 - 1, 7)
    got, _ = c.query(np.array([7, -5], dtype=object), np.array([2**62, 7], dtype=object))
    assert got.tolist() == [True, True]


# -- 2. a split batch's errors name the pair in the batch ------------------------------------
def test_a_split_batch_names_the_bad_pair_by_its_place_in_the_batch(int_server):
    _, srv = int_server  # (--max-pairs 2: the batch goes in requests of two pairs)
    c = distgrail.connect(srv.url)
    with pytest.raises(QueryError, match=r"^sources\[4\]: node 99 is not in the graph$"):
        c.query([0, 1, 2, 3, 99], [0, 0, 0, 0, 0])
    with pytest.raises(QueryError, match=r"^targets\[3\]: node 98 is not in the graph$"):
        c.query([0, 1, 2, 3, 1], [0, 0, 0, 98, 0])


def test_query_server_names_the_line_of_a_pair_in_a_later_request(int_server, tmp_path):
    _, srv = int_server
    pairs = tmp_path / "p.txt"
    pairs.write_text("0 -5\n1 0\n# c\n2 1\n3 99\n")
    r = _cli("query", "--server", srv.url, str(pairs), "-o", "a.tsv", cwd=tmp_path)
    _refused(r, f"{pairs}:5: node 99 is not in the graph")
    assert not (tmp_path / "a.tsv").exists()


def test_a_split_batch_of_ids_names_the_bad_id_by_its_place_in_the_batch(tmp_path):
    path = tmp_path / "ids.h5"
    distgrail.build_index((np.arange(9), np.arange(1, 10)), backend="cpu").save(path)
    srv = Server(path, "--max-pairs", "3")
    try:
        c = distgrail.connect(srv.url)
        with pytest.raises(QueryError, match=r"^sources\[7\] out of range 0\.\.9, got 10$"):
            c.query(np.r_[np.zeros(7, int), 10], np.zeros(8, int))
        # an id past int64 beside a signed column: named by the client, in the batch
        with pytest.raises(QueryError, match=r"^targets\[4\] out of range 0\.\.9, got 18446744073709551615$"):
            c.query(np.zeros(5, int), np.r_[np.zeros(4, np.uint64), np.uint64(2**64 - 1)])
    finally:
        assert srv.stop() == 0, srv.lines


# -- 3. an integer label past 64 bits in a pairs file ----------------------------------------
@pytest.mark.parametrize("line", ["0 99999999999999999999", "-99999999999999999999 7", "0 9223372036854775808",
                                  "0 -9223372036854775809"])
def test_a_pairs_label_past_int64_is_not_in_the_graph(int_server, tmp_path, line):
    path, srv = int_server
    pairs = tmp_path / "p.txt"
    pairs.write_text(f"0 -5\n{line}\n")
    wide = next(x for x in line.split() if not -2**63 <= int(x) < 2**63)
    for where in ((path,), ("--server", srv.url)):
        r = _cli("query", *where, str(pairs), "-o", "a.tsv", cwd=tmp_path)
        _refused(r, f"{pairs}:2: node {wide} is not in the graph")
        assert not (tmp_path / "a.tsv").exists()
    with pytest.raises(distgrail.GraphFormatError, match=f":2: node {wide} is not in the graph"):
        distgrail.io.pairs.read_pairs(pairs, "int")


# -- 4. CSV answers quoted; TSV refuses what it cannot hold ----------------------------------
#: string labels with a comma, a quote, a leading blank (no quoting needed) and nothing odd
ODD = {"a,b": ["d"], "d": ['q"r'], 'q"r': [], " s": ["a,b"]}


def test_csv_answers_quote_commas_and_quotes_and_read_back(tmp_path):
    import csv

    from distgrail.io.answers import read_answer_rows
    from distgrail.io.writers import write_answers

    idx = distgrail.build_index(ODD, backend="cpu")
    s, t = np.array(["a,b", 'q"r', " s", "d"]), np.array(["d", "a,b", 'q"r', "d"])
    answers, _ = idx.query(s, t, backend="cpu")
    for name in ("a.csv", "a.CSV.gz"):
        out = tmp_path / name
        write_answers(answers, out, s, t)
        u, v, r = read_answer_rows(out)
        assert u.tolist() == s.tolist() and v.tolist() == t.tolist() and r.tolist() == answers.tolist()
    text = (tmp_path / "a.csv").read_text()
    assert text.splitlines()[:3] == ["u,v,reachable", '"a,b",d,1', '"q""r","a,b",0']
    with open(tmp_path / "a.csv", newline="") as f:  # what any CSV reader reads
        assert [row[:2] for row in csv.reader(f)][1:] == [[a, b] for a, b in zip(s.tolist(), t.tolist())]
    # a line break in a label: quoted too, and read back
    write_answers(np.array([True, False]), tmp_path / "b.csv", np.array(["x\ny", "p\rq"]), np.array(["z", "w"]))
    u, v, r = read_answer_rows(tmp_path / "b.csv")
    assert u.tolist() == ["x\ny", "p\rq"] and v.tolist() == ["z", "w"] and r.tolist() == [True, False]


def test_query_cli_writes_a_csv_that_reads_back_with_labels_holding_commas(tmp_path):
    from distgrail.io.answers import read_answer_rows

    distgrail.build_index(ODD, backend="cpu").save(tmp_path / "odd.h5")
    (tmp_path / "p.txt").write_text('a,b d\nq"r a,b\n')
    r = _cli("query", "odd.h5", "p.txt", "-o", "a.csv", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    u, v, _ = read_answer_rows(tmp_path / "a.csv")
    assert u.tolist() == ["a,b", 'q"r'] and v.tolist() == ["d", "a,b"]
    assert all(len(row.split(",")) == 3 for row in (tmp_path / "a.csv").read_text().replace('"a,b"', "x").split("\n")[:-1])


@pytest.mark.parametrize("label", ["a\tb", "a\nb", "a\rb"])
def test_tsv_answers_refuse_a_label_holding_a_tab_or_a_line_break(tmp_path, label):
    from distgrail.errors import OutputError
    from distgrail.io.writers import write_answers

    for name in ("a.tsv", "a.tsv.gz"):
        with pytest.raises(OutputError, match=r"holds a tab or a line break.*\.csv"):
            write_answers(np.array([True]), tmp_path / name, np.array([label]), np.array(["x"]))
    assert os.listdir(tmp_path) == []


def test_read_answer_rows_names_a_row_that_is_not_three_fields(tmp_path):
    from distgrail.io.answers import read_answer_rows

    (tmp_path / "a.csv").write_text('u,v,reachable\n"x\ny",b,1\nc,d\n')
    with pytest.raises(distgrail.GraphFormatError, match=r"a\.csv:4: expected a row 'u,v,reachable'"):
        read_answer_rows(tmp_path / "a.csv")


# -- 5. the separator from the file's own name ------------------------------------------------
@pytest.mark.parametrize("name, sep", [("my.csv.dir/a.tsv", "\t"), ("my.csv.dir/a.tsv.gz", "\t"),
                                       ("my.tsv.dir/a.csv", ","), ("x.csv.d/A.CSV.GZ", ","),
                                       ("a.csv.tsv", "\t")])
def test_the_separator_is_told_by_the_files_own_extension(tmp_path, name, sep):
    import gzip

    from distgrail.io.answers import read_answer_rows

    out = tmp_path / name
    out.parent.mkdir(exist_ok=True)
    distgrail.build_index(ODD, backend="cpu").save(tmp_path / "odd.h5")
    (tmp_path / "p.txt").write_text("d q\"r\n")
    r = _cli("query", "odd.h5", "p.txt", "-o", name, "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    raw = (gzip.open if name.lower().endswith(".gz") else open)(out, "rt").read()
    assert raw.splitlines()[0] == sep.join(("u", "v", "reachable")), raw
    u, v, got = read_answer_rows(out)
    assert u.tolist() == ["d"] and v.tolist() == ['q"r'] and got.tolist() == [True]


# -- 6. a .npy of labels refused with its file, row and column -------------------------------
def test_an_npy_of_labels_names_the_file_row_and_column(int_server, tmp_path):
    path, srv = int_server
    np.save(tmp_path / "lii.npy", np.array([[0, -5], [0, 99]]))
    np.save(tmp_path / "liu.npy", np.array([[0, 2**64 - 5]], np.uint64))
    np.save(tmp_path / "ok.npy", np.array([[0, -5], [-5, 0]]))
    for where in ((path,), ("--server", srv.url)):
        _refused(_cli("query", *where, "lii.npy", "-o", "a.txt", cwd=tmp_path),
                 "lii.npy[1, 1]: node 99 is not in the graph")
        _refused(_cli("query", *where, "liu.npy", "-o", "a.txt", cwd=tmp_path),
                 "liu.npy[0, 1]: node 18446744073709551611 is not in the graph")
        r = _cli("query", *where, "ok.npy", "-o", "a.txt", "--quiet", cwd=tmp_path)
        assert r.returncode == 0 and (tmp_path / "a.txt").read_text() == "1\n0\n", r.stderr
        os.remove(tmp_path / "a.txt")
    idx = distgrail.open_index(path)
    with pytest.raises(distgrail.GraphFormatError, match=r"lii\.npy\[1, 1\]: node 99 is not in the graph"):
        distgrail.io.pairs.read_pairs_for(tmp_path / "lii.npy", idx)
    strs = tmp_path / "s.h5"
    distgrail.build_index(ODD, backend="cpu").save(strs)
    _refused(_cli("query", "s.h5", "ok.npy", "-o", "a.txt", cwd=tmp_path),
             "ok.npy: this index takes the graph's string node labels")
    assert sorted(os.listdir(tmp_path)) == ["lii.npy", "liu.npy", "ok.npy", "s.h5"]


# -- 7. --pair takes what a pairs file takes -------------------------------------------------
@pytest.fixture(scope="module")
def two_indexes(tmp_path_factory):
    d = tmp_path_factory.mktemp("pair")
    distgrail.build_index((np.arange(11), np.arange(1, 12)), backend="cpu").save(d / "ids.h5")
    distgrail.build_index(INT_GRAPH, backend="cpu").save(d / "ints.h5")
    return d


@pytest.mark.parametrize("index, u, v, message", [
    ("ids.h5", "1_0", "2", "--pair U: this index takes vertex ids, got '1_0'"),
    ("ids.h5", "\u0663", "2", "--pair U: this index takes vertex ids, got '\u0663'"),
    ("ids.h5", "+7", "2", "--pair U: this index takes vertex ids, got '+7'"),
    ("ids.h5", "-1", "2", "--pair -1 2: vertex id out of range 0..11, got '-1'"),
    ("ints.h5", "+7", "0", "--pair U: this index takes integer node labels, got '+7'"),
    ("ints.h5", "7", "4_611_686_018_427_387_904", "--pair V: this index takes integer node labels"),
    ("ints.h5", "-5", "\u0667", "--pair V: this index takes integer node labels, got '\u0667'"),
])
def test_pair_refuses_what_a_pairs_file_refuses(two_indexes, index, u, v, message):
    r = _cli("query", index, "--pair", u, v, cwd=two_indexes)
    _refused(r, message)
    (two_indexes / "p.txt").write_text(f"{u} {v}\n")
    _refused(_cli("query", index, "p.txt", cwd=two_indexes), "p.txt:1:")


@pytest.mark.parametrize("index, u, v, said", [("ids.h5", "07", "10", "07 10 reachable"),
                                               ("ids.h5", "10", "2", "10 2 unreachable"),
                                               ("ints.h5", "-5", "4611686018427387904",
                                                "-5 4611686018427387904 reachable")])
def test_pair_answers_what_a_pairs_file_takes(two_indexes, index, u, v, said):
    r = _cli("query", index, "--pair", u, v, cwd=two_indexes)
    assert r.returncode == 0 and r.stdout.strip() == said, (r.stdout, r.stderr)


# -- 8. Index.query(comm=...) refuses a bad batch with a QueryError on every rank -------------
@pytest.mark.mpi(min_size=2)
def test_query_with_comm_raises_a_query_error_on_every_rank():
    from mpi4py import MPI

    from distgrail.mpi.errors import QueryRankError, RankError

    comm = MPI.COMM_WORLD
    me = comm.Get_rank()
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    lab = distgrail.build_index(INT_GRAPH, backend="cpu")
    n = idx.n
    cases = [(idx, [0, n], [1, 2], rf"sources\[1\] out of range 0\.\.{n - 1}, got {n}"),
             (idx, [0], [1, 2], "sources and targets must be 1-D of equal length"),
             (lab, [0, 99], [-5, 7], r"sources\[1\]: node 99 is not in the graph"),
             (lab, np.array([7], np.uint64), np.array([2**64 - 5], np.uint64),
              r"targets\[0\]: node 18446744073709551611 is not in the graph")]
    seen = []
    for index, s, t, message in cases:
        try:
            index.query(np.asarray(s) if me == 0 else None, np.asarray(t) if me == 0 else None, backend="cpu",
                        comm=comm)
            seen.append("no error")
        except QueryError as e:  # as in one process
            import re

            seen.append((type(e) is QueryRankError and isinstance(e, RankError) and e.rank == 0
                         and e.comm_rank == me and bool(re.search(message, str(e)))) or str(e))
    every = comm.allgather(seen)
    assert all(x is True for rank in every for x in rank), every
    # the ranks are still in step: a good batch after the bad ones
    got, _ = idx.query([0, 1] if me == 0 else None, [1, 2] if me == 0 else None, backend="cpu", comm=comm)
    assert got.tolist() == idx.query([0, 1], [1, 2], backend="cpu")[0].tolist()


@pytest.mark.mpi(min_size=2)
def test_an_error_other_than_a_query_error_stays_a_plain_rank_error():
    from mpi4py import MPI

    from distgrail.mpi.errors import QueryRankError, RankError, run_shared

    comm = MPI.COMM_WORLD
    last = comm.Get_size() - 1

    def fail():
        if comm.Get_rank() == last:
            raise distgrail.GraphFormatError("planted", path="x.txt", line=3)

    with pytest.raises(RankError) as e:
        run_shared(comm, "reading", fail)
    assert not isinstance(e.value, (QueryError, QueryRankError)) and not e.value.bug
    assert str(e.value) == f"rank {last}, reading: x.txt:3: planted"


@needs_mpiexec
def test_query_with_comm_under_mpiexec_is_a_query_error_on_both_ranks(tmp_path):
    """A script under ``mpiexec -n 2`` (not pytest's): ``except QueryError`` catches the bad batch on both."""
    pytest.importorskip("mpi4py")
    distgrail.build_index(INT_GRAPH, backend="cpu").save(tmp_path / "ints.h5")
    (tmp_path / "p.py").write_text(
        "import sys, numpy as np, distgrail\nfrom mpi4py import MPI\n"
        "from distgrail.errors import QueryError\ncomm = MPI.COMM_WORLD\n"
        "idx = distgrail.open_index('ints.h5')\n"
        "try:\n    idx.query([0, 99] if comm.rank == 0 else None, [0, 0] if comm.rank == 0 else None,"
        " backend='cpu', comm=comm)\n"
        "except QueryError as e:\n    open(f'r{comm.rank}.txt', 'w').write(f'{comm.rank} QueryError {e}')\n")
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "p.py"], capture_output=True, text=True, cwd=tmp_path,
                       env=_env(), timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    lines = [(tmp_path / f"r{k}.txt").read_text() if (tmp_path / f"r{k}.txt").exists() else "" for k in (0, 1)]
    assert lines == [f"{k} QueryError rank 0, checking the query pairs: sources[1]: node 99 is not in the graph"
                     for k in (0, 1)], (r.stdout, r.stderr)  # (a file per rank: the ranks' stdout interleaves)


def test_python_int_labels_past_64_bits_are_not_in_the_graph():
    idx = distgrail.build_index(INT_GRAPH, backend="cpu")
    for big in (2**64 + 5, -2**63 - 1, 2**70):
        with pytest.raises(QueryError, match=rf"^sources\[0\]: node {big} is not in the graph$"):
            idx.reachable(big, 7)
    with pytest.raises(QueryError, match=rf"^targets\[1\]: node {2**64} is not in the graph$"):
        idx.query([7, 7], [2**62, 2**64])
    got, _ = idx.query(np.array([7, -5], dtype=object), np.array([2**62, 7], dtype=object), backend="cpu")
    assert got.tolist() == [True, True]
