"""launch/index_matrix.py on this tree: two one-rank cases of its matrix (the one-vertex and the
empty graph) give a digests.tsv of SHA-256 lines, the digests of the index files kept, and
``--compare`` sees a changed or missing digest (exit 1) and names what differs in the files."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "launch", "index_matrix.py")


def _tool(*args, timeout=60):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=timeout)


def _read(path):
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f]


def test_two_cases_digests_and_compare(tmp_path):
    listed = _tool("--list", "--quick", "--ranks", "1")
    assert listed.returncode == 0, listed.stderr
    names = listed.stdout.split()
    assert names and all(re.fullmatch(r"[a-z0-9_]+/d[1-5]-k(0|auto)-s\d+-(max-level|dfs)/r1[-a-z0-9]*", n) for n in names)
    picked = [next(n for n in names if n.startswith(g + "/")) for g in ("one_vertex", "empty")]

    out = tmp_path / "m"
    r = _tool("--tree", ROOT, "--out", str(out), "--ranks", "1", "--only", picked[0], "--only", picked[1])
    assert r.returncode == 0, r.stdout + r.stderr
    rows = _read(out / "digests.tsv")
    assert [n for n, _ in rows] == ["input/one_vertex.gra", "input/empty.txt"] + picked
    assert all(re.fullmatch(r"[0-9a-f]{64}", d) for _, d in rows), rows
    assert [line for line in r.stdout.splitlines() if not line.startswith("#")] == ["\t".join(x) for x in rows]
    digest = dict(rows)
    for name in picked:  # the digest is the file's SHA-256
        index = out / "indexes" / (name.replace("/", "~") + ".h5")
        assert hashlib.sha256(index.read_bytes()).hexdigest() == digest[name]
    assert digest[picked[0]] != digest[picked[1]]

    same = _tool("--compare", str(out / "digests.tsv"), str(out / "digests.tsv"))
    assert same.returncode == 0 and "0 differ" in same.stdout, same.stdout

    other = tmp_path / "b"
    (other / "indexes").mkdir(parents=True)
    changed = {picked[0]: digest[picked[1]]}  # as if the one-vertex index were the empty graph's
    (other / "digests.tsv").write_text("".join(f"{n}\t{changed.get(n, d)}\n" for n, d in rows[:-1]))  # the last gone
    shutil.copy(out / "indexes" / (picked[1].replace("/", "~") + ".h5"),
                other / "indexes" / (picked[0].replace("/", "~") + ".h5"))
    diff = _tool("--compare", str(out / "digests.tsv"), str(other / "digests.tsv"))
    assert diff.returncode == 1, diff.stdout + diff.stderr
    lines = [line.split("\t") for line in diff.stdout.splitlines() if line.startswith("DIFFER")]
    assert [x[1] for x in lines] == picked
    assert lines[0][2:4] == [digest[picked[0]], digest[picked[1]]] and lines[0][4].startswith("dataset /"), lines[0]
    assert lines[1][2:] == [digest[picked[1]], "(missing)"]
    assert "2 differ (1 only in A, 0 only in B;" in diff.stdout
