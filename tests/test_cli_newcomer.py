"""What a new user tripped on at the command line (issue 44, items 4-8), run as they ran it
(``python -m distgrail`` in a subprocess): ``info | head``, ``info``'s key column, a bad pair named
by file and line, progress written to a log file, outputs with an unknown extension, and pairs
files with a third column of expected answers (the GRAIL benchmark's ``u v answer``)."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import distgrail
from distgrail.io.pairs import read_pairs
from conftest import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


def run(*args, cwd=None, **kw):
    return subprocess.run([sys.executable, "-m", "distgrail", *map(str, args)], capture_output=True, text=True,
                          env=ENV, cwd=cwd, timeout=300, **kw)


@pytest.fixture(scope="module")
def kegg(tmp_path_factory):
    """(index path, pairs, their answers) of the bundled graph."""
    path = tmp_path_factory.mktemp("kegg") / "kegg.h5"
    assert run("index", "bundled", "-o", path, "--dims", "3", "--quiet", "--backend", "cpu").returncode == 0
    s, t = read_pairs(distgrail.bundled_pairs())
    answers = distgrail.open_index(path).query(s, t, backend="cpu")[0]
    return path, s, t, answers


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    d = tmp_path_factory.mktemp("named")
    (d / "g.txt").write_text("source target\nalice bob\nbob carol\ndave alice\nerin erin\n")  # (a header: auto reads names)
    assert run("index", d / "g.txt", "-o", d / "n.h5", "--quiet", "--backend", "cpu").returncode == 0
    return d / "n.h5"


def one_error(r, message):
    """Exit status 2 and exactly the line ``distgrail: error: MESSAGE`` on stderr."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr == f"distgrail: error: {message}\n", r.stderr


# -- item 4: info | head, and info's key column -------------------------------------------------
@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_info_into_a_pipe_closed_early_ends_quietly_with_status_141(kegg, extra):
    p = subprocess.Popen([sys.executable, "-m", "distgrail", "info", str(kegg[0]), *extra], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=ENV)
    p.stdout.close()  # the reader is gone before anything is written (head -1 after its line)
    err = p.stderr.read().decode()
    assert p.wait(60) == 141 and err == "", err  # 128 + SIGPIPE, what the shell shows for `yes | head`
    r = subprocess.run(["bash", "-c", f"set -o pipefail; {sys.executable} -m distgrail info {kegg[0]} "
                                      f"{' '.join(extra)} | head -1"], capture_output=True, text=True, env=ENV)
    assert r.returncode in (0, 141) and r.stderr == "" and len(r.stdout.splitlines()) == 1, r


def test_info_key_column_is_as_wide_as_the_longest_key(kegg):
    r = run("info", kegg[0])
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if not ln.startswith("  /")]
    keys = [ln.split()[0] for ln in rows]
    width = max(map(len, keys)) + 2
    assert "source_digest_algorithm" in keys
    for ln, k in zip(rows, keys):
        assert ln[:width].rstrip() == k and ln[width - 2:width] == "  " and ln[width] != " ", ln
    assert re.search(r"^source_digest_algorithm +blake3$", r.stdout, re.M), r.stdout
    sets = [ln for ln in r.stdout.splitlines() if ln.startswith("  /")]
    assert sets and len({len(re.match(r"  /\S+ +", ln).group(0)) for ln in sets}) == 1, sets


# -- item 5: a bad pair names its file and line, --pair its option --------------------------------
def test_bad_pair_in_a_pairs_file_names_file_line_and_value(kegg, tmp_path):
    body = "0 1\n# a comment\n\n2 99999\n"
    p = tmp_path / "p.txt"
    p.write_text(body)
    one_error(run("query", kegg[0], p, "--backend", "cpu"), f"{p}:4: vertex id out of range 0..3616, got '99999'")
    z = tmp_path / "p.txt.gz"
    z.write_bytes(gzip.compress(body.encode()))
    one_error(run("query", kegg[0], z, "--backend", "cpu"), f"{z}:4: vertex id out of range 0..3616, got '99999'")
    a = tmp_path / "p.npy"
    np.save(a, np.array([[0, 1], [2, 99999]]))
    one_error(run("query", kegg[0], a, "--backend", "cpu"), f"{a}[1, 1]: vertex id out of range 0..3616, got 99999")


def test_bad_pair_option_names_the_option_and_its_value(kegg, named):
    one_error(run("query", kegg[0], "--pair", "2", "99999", "--backend", "cpu"),
              "--pair 2 99999: vertex id out of range 0..3616, got '99999'")
    one_error(run("query", kegg[0], "--pair", "99999", "2", "--backend", "cpu"),
              "--pair 99999 2: vertex id out of range 0..3616, got '99999'")
    one_error(run("query", named, "--pair", "carol", "zed"), "--pair carol zed: node 'zed' is not in the graph")


def test_unknown_label_in_a_pairs_file_names_file_and_line(named, tmp_path):
    p = tmp_path / "p.txt"
    p.write_text("alice bob\n\nzed carol\n")
    one_error(run("query", named, p), f"{p}:3: node 'zed' is not in the graph")


# -- item 6: progress into a file: one line per step, none skipped ------------------------------
STEP = re.compile(r"^distgrail: step (\d+)/(\d+) ([a-z0-9_ -]+): \d+\.\d s$")


def test_progress_into_a_log_file_is_one_clean_line_per_step(tmp_path):
    assert run("generate", "paper", "-n", "300000", "--degree", "5", "-o", tmp_path / "g.gra", "--quiet").returncode == 0
    # the steps show once a run passes Steps.DELAY (1 s), which a fast machine's build of this graph
    # does not: the command runs with no delay, as a longer build would
    cmd = ("import sys, distgrail.progress as p; p.Steps.DELAY = 0; from distgrail.cli import main; "
           "sys.exit(main(sys.argv[1:]))")
    with open(tmp_path / "log", "w") as log:  # not a terminal
        r = subprocess.run([sys.executable, "-c", cmd, "index", str(tmp_path / "g.gra"), "-o",
                            str(tmp_path / "g.h5"), "--backend", "cpu"], stdout=subprocess.DEVNULL, stderr=log,
                           env=ENV, timeout=300)
    assert r.returncode == 0
    text = (tmp_path / "log").read_text()
    assert "\r" not in text and " ," not in text, repr(text)
    lines = text.splitlines()
    assert lines, "a build past the delay writes its steps"
    got = [STEP.match(ln) for ln in lines]
    assert all(got), lines
    done = [int(m.group(1)) for m in got]
    assert done == list(range(1, len(lines) + 1)) and {int(m.group(2)) for m in got} == {len(lines)}, lines
    assert [m.group(3) for m in got][:2] == ["read", "condense"] and got[-1].group(3) == "write", lines


def test_steps_off_a_terminal_count_only_the_steps_that_run(monkeypatch, capsys):
    from distgrail.build import STEPS
    from distgrail.placement import OneProcess
    from distgrail.progress import Steps

    monkeypatch.setattr(Steps, "DELAY", 0.0)
    with Steps(True, total=STEPS, silent=OneProcess.idle_steps) as steps:
        steps.skip("phase 5 start", "phase 5")  # K = 0
        for name in STEPS:
            if name not in ("phase 5 start", "phase 5"):
                with steps.stage(name):
                    pass
    err = capsys.readouterr().err.splitlines()
    want = [n for n in STEPS if n not in OneProcess.idle_steps and n not in ("phase 5 start", "phase 5")]
    assert [STEP.match(ln).groups()[:3] for ln in err] == [(str(i), str(len(want)), n) for i, n in enumerate(want, 1)]
    monkeypatch.setattr(Steps, "DELAY", 3600.0)  # a quick run prints nothing
    with Steps(True, total=3) as steps, steps.stage("read"):
        pass
    assert capsys.readouterr().err == ""


# -- item 7: outputs with an extension nothing is written as -----------------------------------
@pytest.mark.parametrize("args, out, what", [
    (("query", "{idx}", "bundled"), "answers.xlsx", "answers"),
    (("query", "{idx}", "bundled"), "answers", "answers"),
    (("index", "bundled"), "out.txt", "index"),
    (("convert", "bundled"), "graph.txt", "graph"),
])
def test_output_with_an_unknown_extension_is_refused_before_any_work(kegg, tmp_path, args, out, what):
    r = run(*[a.format(idx=kegg[0]) for a in args], "-o", out, "--backend", "cpu", cwd=tmp_path)
    ext = os.path.splitext(out)[1]
    found = f"unknown extension {ext!r}" if ext else "no extension"
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"distgrail: error: {out}: {found} for the {what} file: name it "), r.stderr
    for known in ((".txt", ".answers", ".npy", ".tsv", ".csv", ".parquet") if what == "answers" else (".h5", ".hdf5")):
        assert known in r.stderr
    assert os.listdir(tmp_path) == []


def test_answers_by_every_known_extension(kegg, tmp_path):
    _, s, t, answers = kegg
    want = "".join(f"{int(a)}\n" for a in answers)
    for out in ("a.txt", "a.answers", "a.TXT", "a.txt.gz", "a.npy", "b.NPY", "a.tsv.gz"):
        r = run("query", kegg[0], "bundled", "-o", out, "--backend", "cpu", "--quiet", cwd=tmp_path)
        assert r.returncode == 0, (out, r.stderr)
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "a.answers").read_text() == want
    assert gzip.decompress((tmp_path / "a.txt.gz").read_bytes()).decode() == want
    assert np.array_equal(np.load(tmp_path / "a.npy"), answers)
    assert np.array_equal(np.load(tmp_path / "b.NPY"), answers)  # (the extension in any case, as accepted)
    assert run("index", "bundled", "-o", "k.hdf5", "--quiet", "--backend", "cpu", cwd=tmp_path).returncode == 0


# -- item 8: pairs files 'u v answer' -------------------------------------------------------------
def _with_answers(path, s, t, expected, header="# u v answer\n"):
    body = header + "".join(f"{u} {v} {int(e)}\n" for u, v, e in zip(s.tolist(), t.tolist(), expected.tolist()))
    path.write_bytes(gzip.compress(body.encode()) if str(path).endswith(".gz") else body.encode())
    return path


def test_expected_answers_that_agree_exit_0(kegg, tmp_path):
    idx, s, t, answers = kegg
    for p in (_with_answers(tmp_path / "q.txt", s, t, answers), _with_answers(tmp_path / "q.txt.gz", s, t, answers)):
        r = run("query", idx, p, "--backend", "cpu", "-o", tmp_path / "a.txt")
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert "expected     100,000 pairs carry an expected answer (third column): 0 differ" in r.stdout
        assert (tmp_path / "a.txt").read_text().split().count("1") == distgrail.BUNDLED_REACHABLE
    np.save(tmp_path / "q.npy", np.stack([s, t, answers.astype(np.int64)], axis=1))
    r = run("query", idx, tmp_path / "q.npy", "--backend", "cpu", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["expected"] == {"pairs": 100000, "differ": 0, "first": []}


def test_expected_answers_that_differ_are_counted_listed_and_exit_3(kegg, tmp_path):
    idx, s, t, answers = kegg
    wrong = [3, 10, 5000, 70000, 80000, 99999]
    expected = answers.copy()
    expected[wrong] ^= True
    p = _with_answers(tmp_path / "q.txt", s, t, expected)  # line 1 is the header: pair k on line k + 2
    r = run("query", idx, p, "--backend", "cpu")
    assert r.returncode == 3, r.stderr
    assert r.stderr == f"distgrail: 6 of 100,000 answers differ from the expected answers in {p} (first: {p}:5)\n"
    assert "100,000 pairs carry an expected answer (third column): 6 differ (exit status 3)" in r.stdout
    for k in wrong[:5]:
        said = "reachable" if answers[k] else "unreachable"
        assert f"\n  {p}:{k + 2}: {s[k]} {t[k]} {said}, the file says {int(expected[k])}\n" in r.stdout
    assert f"{p}:{wrong[5] + 2}" not in r.stdout  # the first five only
    r = run("query", idx, p, "--backend", "cpu", "--json", "--quiet")
    got = json.loads(r.stdout)["expected"]
    assert r.returncode == 3 and got["pairs"] == 100000 and got["differ"] == 6
    assert got["first"][0] == {"where": f"{p}:5", "u": int(s[3]), "v": int(t[3]), "answer": bool(answers[3]),
                               "expected": bool(expected[3])}
    r = run("query", idx, "--help")
    assert "exit status is 3" in " ".join(r.stdout.split())


def test_expected_answers_with_labels_and_malformed_third_columns(kegg, named, tmp_path):
    p = tmp_path / "q.txt"
    p.write_text("dave carol 1\ncarol dave 1\n")
    r = run("query", named, p, "--json")
    assert r.returncode == 3 and json.loads(r.stdout)["expected"]["first"] == [
        {"where": f"{p}:2", "u": "carol", "v": "dave", "answer": False, "expected": True}]
    for body, message in (("0 1 1\n2 3\n", "expected three columns 'u v answer' (query pair and expected answer, "
                                           "as on the first pair line), got '2 3'"),
                          ("0 1 1\n2 3 2\n", "expected answer 0 or 1 in the third column, got '2'"),
                          ("0 1 1\n2 99999 0\n", "vertex id out of range 0..3616, got '99999'"),
                          ("0 1\n2 3 1\n", "expected two columns 'u v' (query pair), got '2 3 1'")):
        p.write_text(body)
        one_error(run("query", kegg[0], p, "--backend", "cpu"), f"{p}:2: {message}")


@pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")
def test_expected_answers_under_mpiexec_every_rank_ends_with_3(kegg, tmp_path):
    idx, s, t, answers = kegg
    expected = answers.copy()
    expected[7] ^= True
    p = _with_answers(tmp_path / "q.txt", s, t, expected, header="")
    env = {k: v for k, v in ENV.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))}
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", "-m", "distgrail", "query", str(idx),
                        str(p), "--backend", "cpu", "--json"], capture_output=True, text=True, timeout=120,
                       env=dict(env, MPIEXEC_TIMEOUT="90"))
    assert r.returncode == 3, r.stderr
    got = json.loads(r.stdout[:r.stdout.rindex("}") + 1])["expected"]
    assert got["differ"] == 1 and got["first"][0]["where"] == f"{p}:8"
    assert r.stderr.count("answers differ from the expected answers") == 1, r.stderr


@pytest.mark.parametrize("argv", [("index", "bundled", "-o", "k.h5"), ("query", "{idx}", "bundled")])
def test_a_file_named_bundled_here_is_not_shadowed_in_silence(tmp_path, argv):
    """``bundled`` with a file of that name in the working directory: an error saying both paths
    (exit 2, no output), not the bundled graph or pairs read in the file's place; ``./bundled``
    reads the file."""
    (tmp_path / "bundled").write_text("0 1\n1 2\n")
    idx = tmp_path / "i.h5"
    assert run("index", "./bundled", "-o", idx, "--quiet", "--backend", "cpu", cwd=tmp_path).returncode == 0
    r = run(*[a.replace("{idx}", str(idx)) for a in argv], "--backend", "cpu", "--quiet", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "./bundled for that file" in r.stderr and str(tmp_path / "bundled") in r.stderr
    assert not (tmp_path / "k.h5").exists()
    want = distgrail.bundled_graph() if argv[0] == "index" else distgrail.bundled_pairs()
    assert want in r.stderr
