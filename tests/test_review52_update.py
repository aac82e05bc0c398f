"""Review 52 of ``distgrail update`` and the split index files: the finds, each a test that failed
before its fix (distgrail/cli_update.py, distgrail/update.py, distgrail/stages/insertion.py,
distgrail/indexfile/)."""

from __future__ import annotations

import os
import sys
import subprocess
import textwrap

import numpy as np
import pytest

import distgrail
from distgrail.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _index(tmp_path, n=30, name="i.h5", **kw):
    src, dst = np.arange(n - 1), np.arange(1, n)
    idx = distgrail.build_index((src, dst), num_vertices=n, backend="cpu", dims=2)
    path = tmp_path / name
    idx.save(str(path), **kw)
    return path


def _cli_in_child(args, cwd, timeout=60):
    """``distgrail ARGS`` in a child process (a hang is a timeout, not a stuck test run)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = textwrap.dedent(f"""
        import sys
        from distgrail.cli import main
        sys.exit(main({[str(a) for a in args]!r}))
    """)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_edges_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    """``update INDEX --add FIFO``: opened to sniff its format, a FIFO without a writer blocked
    for ever (``index`` and ``convert`` refuse it); now exit 2 naming it, nothing written."""
    path = _index(tmp_path)
    fifo = tmp_path / "e.txt"
    os.mkfifo(fifo)
    before = sorted(os.listdir(tmp_path))
    try:
        r = _cli_in_child(["update", path, "--add", fifo, "-o", tmp_path / "o.h5", "--backend", "cpu"], tmp_path,
                          timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("update blocked on the FIFO given as --add")
    assert r.returncode == 2 and f"{fifo}: is a FIFO" in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("in_place", [False, True])
def test_index_that_is_a_fifo_is_refused_not_waited_on(tmp_path, in_place):
    """``update FIFO.h5 --add EDGES``: h5py's read of its vertex count blocked for ever (``info``
    and ``convert`` refuse it); now exit 2 naming it."""
    fifo = tmp_path / "i.h5"
    os.mkfifo(fifo)
    edges = tmp_path / "e.txt"
    edges.write_text("0 1\n")
    before = sorted(os.listdir(tmp_path))
    args = ["update", fifo, "--add", edges, "--backend", "cpu"] + ([] if in_place else ["-o", tmp_path / "o.h5"])
    try:
        r = _cli_in_child(args, tmp_path, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("update blocked on the FIFO given as INDEX")
    assert r.returncode == 2 and f"{fifo}: is a FIFO" in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("count", [10, 2**40])
def test_damaged_vertex_count_is_told_as_a_damaged_index_not_a_bad_edges_file(tmp_path, capsys, count):
    """An index whose root attribute ``n_vertices`` was changed (its attributes' seal no longer
    matches): the edges were read against that count first, so the error blamed the edges file
    (``e.txt:1: vertex id out of range 0..9``, or ``e.txt: --num-vertices 1099511627776: ... GiB``,
    an option never given) where ``info`` says the index is damaged; now the index is named."""
    import h5py

    path = _index(tmp_path)
    with h5py.File(path, "r+") as f:
        f.attrs.modify("n_vertices", f.attrs["n_vertices"].dtype.type(count))
    edges = tmp_path / "e.txt"
    edges.write_text("20 3\n")
    out = tmp_path / "o.h5"
    rc = main(["update", str(path), "--add", str(edges), "-o", str(out), "--backend", "cpu", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{path}: damaged index" in err and "e.txt" not in err, err
    assert not out.exists()


def test_parquet_edges_of_node_names_are_told_as_names_not_as_an_option_never_given(tmp_path, capsys):
    """A Parquet table of node names as EDGES: the edges are read against the index's vertex count,
    so the table reader said ``--num-vertices applies to integer ids, not to node names`` (an
    option ``update`` has not); now as a text edge list of names: edges by node name, exit 2."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = _index(tmp_path)
    edges = tmp_path / "e.parquet"
    pq.write_table(pa.table({"src": ["a", "b"], "dst": ["c", "d"]}), str(edges))
    out = tmp_path / "o.h5"
    rc = main(["update", str(path), "--add", str(edges), "-o", str(out), "--backend", "cpu", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{edges}: edges by node name" in err and "--num-vertices" not in err, err
    assert not out.exists()
