"""Questions without Python (issue 26 items 2, 3, 5): ``query --pair``, ``pairs``, answer files
people can read (TSV/CSV/Parquet), ``info --quiet``, an interrupted write."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.cli import main
from distgrail.io.answers import read_answer_rows
from distgrail.io.pairs import read_pairs
from conftest import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def run(*args, **kw):
    return subprocess.run([sys.executable, "-m", "distgrail", *args], capture_output=True, text=True, env=ENV, **kw)


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    d = tmp_path_factory.mktemp("bundled")
    out = d / "b.h5"
    assert main(["index", "bundled", "-o", str(out), "--dims", "3", "--quiet", "--backend", "cpu"]) == 0
    g = distgrail.read_graph(distgrail.bundled_graph())
    return out, csr_of(g)


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    d = tmp_path_factory.mktemp("named")
    (d / "g.txt").write_text("source target\nalice bob\nbob carol\ndave alice\nerin erin\n")  # (a header: auto reads names)
    out = d / "n.h5"
    assert main(["index", str(d / "g.txt"), "-o", str(out), "--quiet", "--backend", "cpu"]) == 0
    return out


def test_query_pair_prints_one_line(bundled, capsys):
    idx, (ip, ix) = bundled
    s, t = distgrail.bfs.positive_pairs(distgrail.read_graph(distgrail.bundled_graph()), 1, 5, 1)
    for u, v in ((int(s[0]), int(t[0])), (int(t[0]), int(s[0]))):
        assert main(["query", str(idx), "--pair", str(u), str(v), "--backend", "cpu"]) == 0
        want = "reachable" if bfs_reachable(ip, ix, [u], [v])[0] else "unreachable"
        assert capsys.readouterr().out == f"{u} {v} {want}\n"


def test_query_pair_with_labels_and_errors(named, capsys):
    assert main(["query", str(named), "--pair", "dave", "carol"]) == 0
    assert capsys.readouterr().out == "dave carol reachable\n"
    assert main(["query", str(named), "--pair", "carol", "dave"]) == 0
    assert capsys.readouterr().out == "carol dave unreachable\n"
    assert main(["query", str(named), "--pair", "carol", "zed"]) == 2
    assert "node 'zed' is not in the graph" in capsys.readouterr().err
    r = run("query", str(named))
    assert r.returncode == 2 and "give a pairs file, or one question with --pair U V" in r.stderr


def test_query_pair_bad_id_exit_2(bundled):
    r = run("query", str(bundled[0]), "--pair", "0", "x", "--backend", "cpu")
    assert r.returncode == 2 and "--pair V: this index takes vertex ids, got 'x'" in r.stderr
    r = run("query", str(bundled[0]), "--pair", "0", "99999", "--backend", "cpu")
    assert r.returncode == 2 and r.stdout == ""


def test_query_pair_reads_an_id_as_a_pairs_file_does(bundled, tmp_path, capsys):
    """``--pair`` reads an id as a pairs file does: 4,301 leading zeros before 1 is 1 (it was
    refused as "takes vertex ids": int() reads at most 4,300 digits), and an id of 30 digits is
    out of range, as is one past int64 on an index of integer labels ("not in the graph")."""
    idx = str(bundled[0])
    assert main(["query", idx, "--pair", "0", "1", "--backend", "cpu"]) == 0
    want = capsys.readouterr().out.split()[-1]
    zeros = "0" * 4301 + "1"
    assert main(["query", idx, "--pair", "0", zeros, "--backend", "cpu"]) == 0
    assert capsys.readouterr().out == f"0 {zeros} {want}\n"
    big = "9" * 30
    assert main(["query", idx, "--pair", "0", big, "--backend", "cpu"]) == 2
    assert f"vertex id out of range 0..{distgrail.open_index(idx).n - 1}, got '{big}'" in capsys.readouterr().err
    (tmp_path / "g.txt").write_text("5 7\n7 9\n")
    out = tmp_path / "i.h5"
    assert main(["index", str(tmp_path / "g.txt"), "-o", str(out), "--format", "labelled", "--quiet",
                 "--backend", "cpu"]) == 0
    assert main(["query", str(out), "--pair", "5", big, "--backend", "cpu"]) == 2
    assert f"node '{big}' is not in the graph" in capsys.readouterr().err
    assert main(["query", str(out), "--pair", "5", "0009", "--backend", "cpu"]) == 0
    assert capsys.readouterr().out == "5 0009 reachable\n"


@pytest.mark.parametrize("kind", ["random", "reachable"])
def test_pairs_are_seeded_and_read_back(bundled, tmp_path, kind):
    idx, (ip, ix) = bundled
    a, b, c = (tmp_path / f"{x}.txt" for x in "abc")
    for out, seed in ((a, 5), (b, 5), (c, 6)):
        assert main(["pairs", str(idx), "-n", "3000", f"--{kind}", "--seed", str(seed), "-o", str(out), "--quiet"]) == 0
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    s, t = read_pairs(a)
    assert s.size == 3000 and s.max() < 3617 and t.max() < 3617
    truth = bfs_reachable(ip, ix, s, t)
    if kind == "reachable":
        assert truth.all() and (s != t).all() and np.unique(s).size > 100
    else:
        assert 0 < truth.sum() < 3000 * 0.5
    r = run("query", str(idx), str(a), "-o", str(tmp_path / "ans.txt"), "--backend", "cpu", "--quiet")
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "ans.txt", dtype=int), truth)


def test_pairs_npy_is_int32_when_the_ids_fit(bundled, tmp_path):
    """``distgrail pairs -o p.npy`` writes int32 ids (the GPU query's staging copies int32 rows
    as they are: half the bytes of int64), read back by ``query`` to BFS's answers; values that
    do not fit int32 (labels past 2^31 - 1, negative ones) stay int64."""
    from distgrail.io.samplepairs import write_pairs

    idx, (ip, ix) = bundled
    out = tmp_path / "p.npy"
    assert main(["pairs", str(idx), "-n", "2000", "--seed", "3", "-o", str(out), "--quiet"]) == 0
    arr = np.load(out)
    assert arr.dtype == np.int32 and arr.shape == (2000, 2)
    r = run("query", str(idx), str(out), "-o", str(tmp_path / "a.npy"), "--backend", "cpu", "--quiet")
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), bfs_reachable(ip, ix, arr[:, 0], arr[:, 1]))
    for u, v, dtype in (([1, 2**31 - 1], [0, 5], np.int32), ([1, 2**31], [0, 5], np.int64),
                        ([1, 2], [-1, 5], np.int64), ([], [], np.int32)):
        write_pairs(np.array(u, np.int64), np.array(v, np.int64), tmp_path / "w.npy")
        got = np.load(tmp_path / "w.npy")
        assert got.dtype == dtype and np.array_equal(got.reshape(-1, 2), np.c_[u, v].astype(np.int64).reshape(-1, 2))


def test_pairs_of_a_labelled_index_are_labels(named, tmp_path):
    out = tmp_path / "p.txt.gz"
    assert main(["pairs", str(named), "-n", "50", "--reachable", "-o", str(out), "--quiet"]) == 0
    s, t = read_pairs(out, "str")
    assert set(s) <= {"alice", "bob", "dave"} and set(zip(s, t)) <= {
        ("alice", "bob"), ("alice", "carol"), ("bob", "carol"), ("dave", "alice"), ("dave", "bob"), ("dave", "carol")}
    r = run("pairs", str(named), "-n", "5", "-o", str(tmp_path / "p.npy"))
    assert r.returncode == 2 and "string node labels" in r.stderr and not (tmp_path / "p.npy").exists()


@pytest.mark.parametrize("ext", [".tsv", ".csv", ".tsv.gz", ".parquet"])
def test_answer_files_parse_back(bundled, tmp_path, ext):
    if ext == ".parquet":
        pytest.importorskip("pyarrow")
    idx, (ip, ix) = bundled
    pairs = tmp_path / "p.txt"
    assert main(["pairs", str(idx), "-n", "500", "-o", str(pairs), "--quiet"]) == 0
    out = tmp_path / f"a{ext}"
    assert main(["query", str(idx), str(pairs), "-o", str(out), "--quiet", "--backend", "cpu"]) == 0
    u, v, a = read_answer_rows(out)
    s, t = read_pairs(pairs)
    np.testing.assert_array_equal(u.astype(np.int64), s)
    np.testing.assert_array_equal(v.astype(np.int64), t)
    np.testing.assert_array_equal(a, bfs_reachable(ip, ix, s, t))
    if ext == ".csv":
        assert out.read_text().startswith("u,v,reachable\n")


def test_answer_rows_keep_labels(named, tmp_path):
    (tmp_path / "q.txt").write_text("dave carol\ncarol dave\n")
    out = tmp_path / "a.tsv"
    assert main(["query", str(named), str(tmp_path / "q.txt"), "-o", str(out), "--quiet"]) == 0
    assert out.read_text() == "u\tv\treachable\ndave\tcarol\t1\ncarol\tdave\t0\n"


def test_info_quiet_prints_nothing_but_errors(bundled, tmp_path):
    r = run("info", str(bundled[0]), "--quiet")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
    assert "print nothing" in run("info", "--help").stdout
    (tmp_path / "bad.h5").write_bytes(b"not an index")
    r = run("info", str(tmp_path / "bad.h5"), "--quiet")
    assert r.returncode == 2 and r.stdout == "" and "distgrail: error:" in r.stderr


@pytest.mark.parametrize("ignored,layout", [(False, "single"), (True, "single"), (False, "split")],
                         ids=["foreground", "background-job", "split"])
def test_sigint_during_the_index_write(tmp_path, ignored, layout):
    """SIGINT while the index is written (held open by the test hook): exit 2, 'interrupted', no
    output and no temporary file -- also when SIGINT was ignored at start, as for a shell's
    background job (which used to report 'its directory does not exist'); a split index's part
    being written is named by its index (it named the part: a reviewer, session 41)."""
    out = tmp_path / "i.h5"
    env = dict(ENV, DISTGRAIL_TEST_WRITE_PAUSE="60")
    pre = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored else None
    p = subprocess.Popen([sys.executable, "-m", "distgrail", "index", "bundled", "-o", str(out), "--backend", "cpu",
                          "--layout", layout, "--quiet"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=pre)
    deadline = time.time() + 120
    while not any(n.startswith(".i.h5.") and ".tmp-" in n for n in os.listdir(tmp_path)):
        assert p.poll() is None and time.time() < deadline, p.communicate()
        time.sleep(0.05)
    time.sleep(0.2)  # the file (laid out after phases 1-2) is written or held before its rename
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 2, err
    assert f"distgrail: error: {out}: interrupted (SIGINT) while writing the output; nothing was written" in err
    assert "does not exist" not in err and ".part" not in err
    assert os.listdir(tmp_path) == []
