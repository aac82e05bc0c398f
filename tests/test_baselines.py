"""The baselines benchmark's own parts (distgrail.benchmarks.baselines): the files it writes for
O'Reach and GRAIL, the condensation it hands them, its checks, and the ring buffer that
launch/build_baselines.sh writes where Boost is missing. The baselines themselves are the
authors' programs, not in this repository: their run is recorded in docs/benchmarks.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import distgrail
from conftest import ROOT
from distgrail.benchmarks import baselines as bl
from distgrail.io.graph import EdgeGraph


def _csr(n, edges):
    indptr = np.zeros(n + 1, dtype=np.int64)
    for u, _ in edges:
        indptr[u + 1] += 1
    indptr = np.cumsum(indptr)
    indices = np.array([v for _, v in sorted(edges)], dtype=np.int64)
    return indptr, indices


@pytest.mark.parametrize("values", [[0], [7, 10, 99, 100, 101], [2**40 + 3, 0, 5], list(range(1, 1200, 37))])
def test_decimal_text_writes_every_number_and_suffix(values):
    suffix = [i % len(bl.SUFFIXES) for i in range(len(values))]
    want = b"".join(str(v).encode() + bl.SUFFIXES[s] for v, s in zip(values, suffix))
    assert bl.decimal_text(values, suffix) == want


def test_decimal_text_of_nothing_and_of_bare_suffixes():
    assert bl.decimal_text([], []) == b""
    assert bl.decimal_text([-1, 3, -1], [bl.HASH, bl.SPACE, bl.NEWLINE]) == b"#\n3 \n"


def test_the_gra_text_reads_back_as_the_same_dag(tmp_path):
    # rows with and without targets, the last vertex without any, a vertex with ten-digit ids' neighbours
    edges = [(0, 1), (0, 3), (1, 3), (2, 0), (2, 1), (2, 3), (4, 3)]
    indptr, indices = _csr(6, edges)
    text = bl.gra_text(indptr, indices)
    assert text.splitlines()[:3] == [b"graph_for_greach", b"6", b"0: 1 3 #"]
    assert text.splitlines()[3:] == [b"1: 3 #", b"2: 0 1 3 #", b"3: #", b"4: 3 #", b"5: #"]
    path = tmp_path / "g.gra"
    path.write_bytes(text)
    g = distgrail.read_graph(str(path))
    assert g.n == 6 and sorted(zip(g.src.tolist(), g.dst.tolist())) == edges


def test_the_metis_text_is_one_based_one_line_per_vertex():
    indptr, indices = _csr(4, [(0, 2), (0, 3), (2, 3)])
    lines = bl.metis_text(indptr, indices).split(b"\n")
    assert lines == [b"4 3", b"3 4", b"", b"4", b"", b""]  # (the file ends with the last line's newline)


def test_pairs_text_with_and_without_the_final_newline():
    assert bl.pairs_text([1, 20], [3, 0], [1, 0]) == b"1 3 1\n20 0 0\n"
    assert bl.pairs_text([1, 20], [3, 0], [1, 0], final_newline=False) == b"1 3 1\n20 0 0"


def test_the_condensation_is_scipys_and_matches_distgrails():
    # a cycle 0-1-2, a self-loop, a duplicate edge, a chain out of the cycle, an isolated vertex
    src = np.array([0, 1, 2, 2, 3, 3, 4, 4], dtype=np.int64)
    dst = np.array([1, 2, 0, 3, 3, 4, 5, 5], dtype=np.int64)
    g = EdgeGraph(7, src, dst)
    comp, indptr, indices = bl.condensation(g)
    assert comp[0] == comp[1] == comp[2] and len(set(comp.tolist())) == 5
    assert len(indptr) - 1 == distgrail.build_index(g, dims=2, backend="cpu").C
    pairs = {(int(comp[u]), int(comp[v])) for u, v in [(2, 3), (3, 4), (4, 5)]}
    got = {(u, int(v)) for u in range(len(indptr) - 1) for v in indices[indptr[u]:indptr[u + 1]]}
    assert got == pairs  # no self-loop, no repeat, every edge between components


def test_a_run_without_baselines_checks_distgrail_against_bfs(capsys):
    assert bl.main(["paper:3000,4", "--pairs", "3000", "--check-pairs", "300", "--backend", "cpu", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    row = [line for line in out.splitlines() if line.startswith("| paper 3,000")]
    assert len(row) == 1 and row[0].endswith("| ok |"), out
    bfs = row[0].split(" | ")[-3]  # plain BFS's column: scaled milliseconds and the ratio to distgrail's
    assert bfs.startswith("~") and bfs.endswith("x)"), row


def test_a_wrong_answer_is_caught_and_exits_1(monkeypatch, capsys):
    real = bl.run_ours

    def flipped(*a, **kw):
        r = real(*a, **kw)
        r["answers"] = r["answers"].copy()
        r["answers"][0] = not r["answers"][0]
        return r

    monkeypatch.setattr(bl, "run_ours", flipped)
    assert bl.main(["paper:2000,4", "--pairs", "500", "--check-pairs", "50", "--backend", "cpu", "--repeat", "1"]) == 1
    assert "1 of the first 50 answers differ from a BFS" in capsys.readouterr().err


def test_a_baseline_that_is_not_a_program_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        bl.main(["paper:100,2", "--oreach", str(tmp_path / "nope")])
    assert e.value.code == 2 and "not an executable file" in capsys.readouterr().err


@pytest.mark.parametrize("text, what", [
    ("init took 12.5 ms\n## number of successful queries: 7\n   total for queries (\u00b5s): 1500\n", "oreach"),
    ("#construction time:3.8 (ms)\nSuccess Rate 9/10\n#total query running time:5.099 (ms)\n", "grail"),
])
def test_the_baselines_outputs_are_read(tmp_path, text, what):
    prog = tmp_path / what
    prog.write_text(f"#!/bin/sh\ncat <<'EOF'\n{text}EOF\n")  # prints what the real program prints
    prog.chmod(0o755)
    indptr, indices = _csr(3, [(0, 1)])
    s, t = np.array([0, 1]), np.array([1, 2])
    if what == "oreach":
        got = bl.run_oreach(str(prog), indptr, indices, s, t, str(tmp_path))
        assert got == {"build_ms": 12.5, "query_ms": 1.5, "reachable": 7}
    else:
        got = bl.run_grail(str(prog), indptr, indices, s, t, np.array([True, False]), str(tmp_path))
        assert got == {"build_ms": 3.8, "query_ms": 5.099, "agree": 9, "pairs": 10}
        assert (tmp_path / "pairs.test").read_bytes() == b"0 1 1\n1 2 0"


def test_a_baseline_that_prints_no_result_is_an_error(tmp_path):
    prog = tmp_path / "grail"
    prog.write_text("#!/bin/sh\necho 'BAD FILE FORMAT!'\n")
    prog.chmod(0o755)
    with pytest.raises(RuntimeError, match="no success rate"):
        bl.run_grail(str(prog), *_csr(2, [(0, 1)]), np.array([0]), np.array([1]), np.array([True]), str(tmp_path))


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this machine")
def test_the_ring_buffer_written_for_oreach(tmp_path):
    r = subprocess.run(["bash", os.path.join(ROOT, "launch", "build_baselines.sh"), "--shim", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (tmp_path / "t.cpp").write_text(r"""
#include <boost/circular_buffer.hpp>
#include <cstdio>
int main() {
    boost::circular_buffer<int> q(3);
    int bad = 0;
    for (int round = 0; round < 5; ++round) {  // wraps around the storage several times
        q.clear();
        for (int i = 0; i < 3; ++i) q.push_back(10 * round + i);
        bad += q.size() != 3;
        for (int i = 0; i < 2; ++i) { bad += q.front() != 10 * round + i; q.pop_front(); }
        q.push_back(-round);
        bad += q.front() != 10 * round + 2; q.pop_front();
        bad += q.front() != -round; q.pop_front();
        bad += !q.empty();
    }
    q.push_back(1); q.push_back(2); q.push_back(3); q.push_back(4);  // full: the oldest goes
    bad += q.front() != 2 || q.size() != 3;
    std::printf("%d\n", bad);
    return bad != 0;
}
""")
    c = subprocess.run(["g++", "-std=c++14", "-I", str(tmp_path / "include"), str(tmp_path / "t.cpp"), "-o",
                        str(tmp_path / "t")], capture_output=True, text=True)
    assert c.returncode == 0, c.stderr
    run = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout == "0\n", run.stdout


def test_grail_is_left_out_of_a_dag_with_too_wide_a_vertex_and_the_table_says_so(capsys):
    true = shutil.which("true")
    assert bl.main(["paper:2000,6", "--grail", true, "--grail-max-row", "3", "--pairs", "200", "--check-pairs", "20",
                    "--backend", "cpu", "--repeat", "1", "--builds", "1"]) == 0
    out = capsys.readouterr()
    row = [line for line in out.out.splitlines() if line.startswith("| paper 2,000")][0]
    assert "| ok (GRAIL left out: a DAG vertex has " in row and "quadratic in a line's length" in out.err


def _fake(tmp_path, name, body):
    """A stand-in for a baseline program: a shell script (the real ones are not in this repository)."""
    prog = tmp_path / name
    prog.write_text("#!/bin/sh\n" + body)
    prog.chmod(0o755)
    return prog


def _bench(*args):
    return bl.main([*args, "--backend", "cpu", "--repeat", "1", "--builds", "1"])


def test_oreach_is_left_out_of_a_condensation_without_edges_and_a_failure_keeps_the_rows_before(tmp_path, capsys):
    dead = _fake(tmp_path, "oreach", "echo 'O Reach went wrong' >&2\nexit 3\n")
    lone = tmp_path / "lone.gra"
    lone.write_text("graph_for_greach\n3\n0: #\n1: #\n2: #\n")
    out, work = tmp_path / "rows.json", tmp_path / "work"
    work.mkdir()
    assert _bench(str(lone), "paper:500,3", "--oreach", str(dead), "--pairs", "100", "--check-pairs", "10",
                  "--json", str(out), "--workdir", str(work)) == 2
    got = capsys.readouterr()
    assert "| ok (O'Reach left out: the condensation has no edges" in got.out
    assert "error: O'Reach (" in got.err and "exited 3" in got.err and "O Reach went wrong" in got.err
    assert [r["graph"] for r in json.loads(out.read_text())] == ["lone.gra"]
    assert not list(work.iterdir())  # the baselines' files went with their temporary folder


def test_oreach_is_checked_pair_by_pair(tmp_path, capsys):
    # it prints a summary per query file: all pairs, those distgrail answers reachable, the others;
    # here it claims one of the "unreachable" ones reachable, with the right total
    fake = _fake(tmp_path, "oreach", """
yes=$(wc -l < "$(echo "$@" | tr ' ' '\\n' | grep -m1 'yes.query.txt' | sed 's/--queries=//')")
echo "init took 1.5 ms"
echo "## number of successful queries: $yes"
echo "   total for queries (us): 100"
echo "## number of successful queries: $((yes - 1))"
echo "## number of successful queries: 1"
""")
    assert _bench("paper:800,4", "--oreach", str(fake), "--pairs", "400", "--check-pairs", "10") == 1
    err = capsys.readouterr().err
    assert "pairs distgrail answers reachable reachable" in err and "answers unreachable reachable" in err


def test_a_baseline_killed_or_too_slow_is_named(tmp_path, capsys):
    crash = _fake(tmp_path, "grail", "kill -SEGV $$\n")
    assert _bench("paper:300,3", "--grail", str(crash), "--pairs", "50", "--check-pairs", "0") == 2
    assert "was killed by SIGSEGV" in capsys.readouterr().err
    slow = _fake(tmp_path, "slow", "sleep 30\n")
    assert _bench("paper:300,3", "--grail", str(slow), "--timeout", "0.5", "--pairs", "50", "--check-pairs", "0") == 0
    assert "| ok (GRAIL timed out after 0.5 s) |" in capsys.readouterr().out


def test_a_relative_baseline_path_runs_from_the_work_folder(tmp_path, monkeypatch, capsys):
    _fake(tmp_path, "oreach", "echo 'init took 1 ms'; for f in 1 2 3; do echo '## number of successful queries: 0'; "
                              "done; echo '   total for queries (us): 5'\n")
    monkeypatch.chdir(tmp_path)
    _bench("paper:300,3", "--oreach", "oreach", "--pairs", "50", "--check-pairs", "0")
    assert "No such file" not in capsys.readouterr().err  # (its answers are wrong: the path is what is tested)


@pytest.mark.parametrize("args, message", [
    (["--check-pairs", "-1"], "--check-pairs must be 0 or more"),
    (["--builds", "0"], "--builds must be 1 or more"),
    (["--timeout", "0"], "--timeout must be more than 0"),
    (["--workdir", "/nonexistent/dir"], "no such folder"),
])
def test_bad_options_are_refused(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        bl.main(["paper:100,2", *args])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_a_missing_graph_file_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        bl.main([str(tmp_path / "none.txt")])
    assert e.value.code == 2 and "none.txt: no such graph file" in capsys.readouterr().err
