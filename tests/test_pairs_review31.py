"""``distgrail pairs`` and the text writers after a fresh review (session 31): the seed checked as
``index``'s; ``--reachable`` drawing its sources among the vertices that reach another one (not
one BFS per vertex tried); labels the pairs reader would not read back refused; ``-o`` checked
(``-`` is stdout, extensions the reader knows, never the index or its part files); a count too
large for the machine refused up front; gzip headers naming the output, not its temporary
file; ``convert`` refusing a graph whose node names a ``.h5`` graph would drop."""

import gzip
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.cli import main
from distgrail.errors import DistGrailError
from distgrail.io import samplepairs
from distgrail.io.pairs import read_pairs
from distgrail.io.samplepairs import sample_pairs, write_pairs
from conftest import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def run(*args, **kw):
    return subprocess.run([sys.executable, "-m", "distgrail", *args], check=False, capture_output=True, env=ENV, **kw)


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundled") / "b.h5"
    assert main(["index", "bundled", "-o", str(out), "--dims", "2", "--quiet", "--backend", "cpu"]) == 0
    return out


# -- 1: the seed -------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", ["-1", str(2**64), str(2**90)])
def test_pairs_seed_out_of_range_is_refused(bundled, tmp_path, capsys, seed):
    out = tmp_path / "p.txt"
    assert main(["pairs", str(bundled), "-n", "10", "--seed", seed, "-o", str(out)]) == 2
    assert f"seed must be an integer in 0..2^64-1, got {seed}" in capsys.readouterr().err
    assert not out.exists()
    idx = distgrail.open_index(bundled)
    for bad in (int(seed), True, 1.5):
        with pytest.raises(DistGrailError, match="seed must be an integer in 0..2"):
            sample_pairs(idx, 3, "random", bad)


def test_pairs_largest_seed_is_taken(bundled, tmp_path):
    out = tmp_path / "p.txt"
    assert main(["pairs", str(bundled), "-n", "10", "--seed", str(2**64 - 1), "-o", str(out), "--quiet"]) == 0
    assert read_pairs(out)[0].size == 10


# -- 2: --reachable without one BFS per vertex ---------------------------------------------------

def _hub_graph(n, hubs):
    src = np.repeat(np.arange(hubs), n - hubs)
    dst = np.tile(np.arange(hubs, n), hubs)
    return src, dst


def test_reachable_pairs_of_a_hub_graph_take_one_bfs_per_hub(monkeypatch):
    """10 hubs -> every other vertex: only the hubs reach anything; the sources are drawn among
    them (10 BFS), where every vertex used to be tried with a BFS of its own (~n)."""
    n, hubs = 20_000, 10
    src, dst = _hub_graph(n, hubs)
    idx = distgrail.build_index((src, dst), dims=2, backend="cpu")
    calls = []
    real = samplepairs._bfs

    def counting(*a, **k):
        calls.append(a[2])
        return real(*a, **k)

    monkeypatch.setattr(samplepairs, "_bfs", counting)
    s, t = sample_pairs(idx, 500, "reachable", 7)
    assert len(calls) <= hubs, len(calls)
    assert s.size == t.size == 500 and (s != t).all() and set(s.tolist()) <= set(range(hubs))
    ip, ix = csr_of(distgrail.io.read.as_graph((src, dst)))
    assert bfs_reachable(ip, ix, s, t).all()
    s2, t2 = sample_pairs(idx, 500, "reachable", 7)
    assert np.array_equal(s, s2) and np.array_equal(t, t2)
    assert not np.array_equal(t, sample_pairs(idx, 500, "reachable", 8)[1])


def test_reachable_sources_stop_at_max_sources(monkeypatch):
    """A chain: every vertex but the last reaches another; at most MAX_SOURCES BFS, each a source."""
    n = 3000
    src, dst = np.arange(n - 1), np.arange(1, n)
    idx = distgrail.build_index((src, dst), dims=2, backend="cpu")
    monkeypatch.setattr(samplepairs, "MAX_SOURCES", 40)
    calls = []
    real = samplepairs._bfs
    monkeypatch.setattr(samplepairs, "_bfs", lambda *a, **k: calls.append(1) or real(*a, **k))
    s, t = sample_pairs(idx, 2000, "reachable", 1)
    assert len(calls) == 40 and np.unique(s).size <= 40 and (s < t).all() and (s != n - 1).all()


def test_reachable_pairs_inside_one_component_and_none_at_all():
    """A 2-cycle among isolated vertices: its two vertices are the only sources, each the other's
    target; a graph without an edge between distinct vertices has no reachable pair (exit 2)."""
    idx = distgrail.build_index((np.array([5, 6, 3]), np.array([6, 5, 3])), num_vertices=1000, dims=2, backend="cpu")
    s, t = sample_pairs(idx, 100, "reachable", 3)
    assert set(zip(s.tolist(), t.tolist())) == {(5, 6), (6, 5)}
    lone = distgrail.build_index((np.array([3]), np.array([3])), num_vertices=50, dims=2, backend="cpu")
    with pytest.raises(DistGrailError, match="no reachable pair"):
        sample_pairs(lone, 5, "reachable", 0)
    assert sample_pairs(lone, 0, "reachable", 0)[0].size == 0


def test_reachable_pairs_of_the_bundled_graph_are_reachable(bundled):
    idx = distgrail.open_index(bundled)
    s, t = sample_pairs(idx, 5000, "reachable", 11)
    ip, ix = csr_of(distgrail.read_graph(distgrail.bundled_graph()))
    assert bfs_reachable(ip, ix, s, t).all() and (s != t).all() and np.unique(s).size > 100


# -- 3: labels the pairs file cannot hold --------------------------------------------------------

@pytest.mark.parametrize("label", ["new york", "#x", "a#b", "50%", "tab\there", "cr\r", "lf\nx", "nbsp\u00a0x",
                                   "", "unit\x1fsep", "vt\x0b"])
def test_write_pairs_refuses_labels_the_reader_would_not_read(tmp_path, label):
    out = tmp_path / "p.txt"
    u = np.array(["ok", label, "fine"])
    v = np.array(["fine", "ok", "ok"])
    with pytest.raises(DistGrailError, match="node label") as e:
        write_pairs(u, v, out)
    assert repr(label) in str(e.value)
    assert not out.exists() and os.listdir(tmp_path) == []


def test_labels_that_read_back_are_written(tmp_path):
    labels = np.array(["café", "日本", "a-b", "x.y", "1", "-3", "q'uote", 'dq"'])
    out = tmp_path / "p.txt.gz"
    write_pairs(labels, labels[::-1], out)
    s, t = read_pairs(out, "str")
    assert s.tolist() == labels.tolist() and t.tolist() == labels[::-1].tolist()


def test_pairs_of_an_index_with_a_blank_in_a_label_exit_2(tmp_path):
    idx = tmp_path / "lab.h5"
    distgrail.build_index({"new york": ["#x"], "#x": []}, output=str(idx), backend="cpu")
    out = tmp_path / "p.txt"
    r = run("pairs", str(idx), "-n", "3", "--reachable", "-o", str(out))
    assert r.returncode == 2, r.stderr
    assert b"node label '#x' holds '#'" in r.stderr and b"Traceback" not in r.stderr and not out.exists()
    with pytest.raises(DistGrailError, match="node label 'new york' holds a blank"):
        write_pairs(np.array(["new york"]), np.array(["x"]), out)


# -- 4: the output path --------------------------------------------------------------------------

def test_pairs_to_stdout(bundled, tmp_path):
    r = run("pairs", str(bundled), "-n", "20", "--seed", "4", "-o", "-", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "-").exists()
    out = tmp_path / "p.txt"
    assert main(["pairs", str(bundled), "-n", "20", "--seed", "4", "-o", str(out), "--quiet"]) == 0
    assert r.stdout == out.read_bytes() and b"20 random pairs" in r.stderr
    r = run("pairs", str(bundled), "-n", "20", "--seed", "4", "-o", "-", "--json", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == out.read_bytes() and b'"pairs": 20' in r.stderr


@pytest.mark.parametrize("name", ["p.parquet", "p.bz2", "p.txt.zst", "p.h5", "p.tsv.zst", "p"])
def test_pairs_output_names_it_cannot_write_are_refused(bundled, tmp_path, capsys, name):
    out = tmp_path / name
    assert main(["pairs", str(bundled), "-n", "5", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "pairs file" in err and ".npy" in err and ".txt" in err, err
    assert os.listdir(tmp_path) == []
    with pytest.raises(DistGrailError, match="pairs file"):
        write_pairs(np.array([1]), np.array([2]), out)


@pytest.mark.parametrize("name", ["p.txt", "p.TXT", "p.pairs", "p.txt.gz", "p.pairs.gz", "p.TXT.GZ", "p.npy", "p.NPY",
                                  "p.csv", "p.tsv", "p.CSV.gz"])
def test_pairs_output_names_query_reads_back(bundled, tmp_path, name):
    out = tmp_path / name
    assert main(["pairs", str(bundled), "-n", "50", "--seed", "2", "-o", str(out), "--quiet"]) == 0
    r = run("query", str(bundled), str(out), "--backend", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    assert b'"queries": 50' in r.stdout or b'"pairs": 50' in r.stdout, r.stdout


def test_pairs_never_overwrites_the_index_or_its_part_files(tmp_path):
    split = tmp_path / "s.h5"
    assert main(["index", "bundled", "-o", str(split), "--quiet", "--backend", "cpu", "--layout", "split"]) == 0
    from distgrail.indexfile.layout import index_parts

    parts = index_parts(split)
    assert parts
    before = {p: Path(p).read_bytes() for p in parts}
    for p in parts:
        r = run("pairs", str(split), "-n", "5", "-o", p)  # (its name says it is no pairs file)
        assert r.returncode == 2 and b"unknown extension '.part" in r.stderr, r.stderr
        for name in ("hard.txt", "hard.npy"):  # the same file under a pairs file's name
            os.link(p, tmp_path / name)
            r = run("pairs", str(split), "-n", "5", "-o", str(tmp_path / name))
            assert r.returncode == 2 and b"would overwrite the index" in r.stderr and b"part file" in r.stderr, r.stderr
            os.remove(tmp_path / name)
    os.link(split, tmp_path / "main.txt")
    r = run("pairs", str(split), "-n", "5", "-o", str(tmp_path / "main.txt"))
    assert r.returncode == 2 and b"would overwrite the index" in r.stderr, r.stderr
    assert {p: Path(p).read_bytes() for p in parts} == before
    assert run("info", str(split), "--quiet").returncode == 0


# -- 5: a count the machine cannot hold ------------------------------------------------------------

def test_pairs_count_too_large_for_the_machine(bundled, tmp_path, capsys):
    out = tmp_path / "p.txt"
    for kind in ("--random", "--reachable"):
        assert main(["pairs", str(bundled), "-n", "1000000000000", kind, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert "-n 1,000,000,000,000" in err and "GiB" in err and "out of memory" not in err, err
    assert not out.exists()


def test_pairs_count_checked_against_distgrail_memory(bundled, tmp_path, monkeypatch):
    monkeypatch.setenv("DISTGRAIL_MEMORY", str(10 << 20))
    idx = distgrail.open_index(bundled)
    with pytest.raises(DistGrailError, match="-n 10,000,000"):
        sample_pairs(idx, 10_000_000, "random", 0)
    assert sample_pairs(idx, 10_000, "random", 0)[0].size == 10_000


# -- 6: gzip headers ---------------------------------------------------------------------------

def _gzip_name(path):
    data = Path(path).read_bytes()
    assert data[:2] == b"\x1f\x8b"
    flags, mtime = data[3], int.from_bytes(data[4:8], "little")
    name = data[10:data.index(b"\0", 10)].decode("latin-1") if flags & 8 else None
    return name, mtime, data


def test_gzip_outputs_name_the_output_not_the_temporary_file(bundled, tmp_path):
    from distgrail.io.writers import write_answers

    pairs = tmp_path / "p.txt.gz"
    assert main(["pairs", str(bundled), "-n", "30", "-o", str(pairs), "--quiet"]) == 0
    s, t = read_pairs(pairs)
    outs = {"p.txt.gz": pairs}
    for name in ("a.txt.gz", "a.tsv.gz", "a.csv.gz"):
        write_answers(np.ones(30, bool), tmp_path / name, s, t)
        outs[name] = tmp_path / name
    for name, p in outs.items():
        got, mtime, data = _gzip_name(p)
        assert got in (None, name[:-3]) and b"tmp-" not in data[:64] and mtime == 0, (name, got)
    first = pairs.read_bytes()
    assert main(["pairs", str(bundled), "-n", "30", "-o", str(pairs), "--quiet"]) == 0
    assert pairs.read_bytes() == first  # the same pairs, the same bytes
    assert gzip.decompress(first).count(b"\n") == 30


# -- 7: convert of a graph with node names ---------------------------------------------------------

def test_convert_refuses_a_graph_with_node_names(tmp_path):
    g = tmp_path / "l.txt"
    g.write_text("src dst\nalice bob\nbob carol\n")
    out = tmp_path / "l.h5"
    r = run("convert", str(g), "-o", str(out), "--backend", "cpu")
    assert r.returncode == 2 and b"node labels" in r.stderr and b"Traceback" not in r.stderr, r.stderr
    assert b"index" in r.stderr and not out.exists() and sorted(os.listdir(tmp_path)) == ["l.txt"]
    from distgrail.io.binary import write_binary_graph
    from distgrail.io.writers import write_graph

    lab = distgrail.io.read.as_graph({"x": ["y"], "y": []})
    for write in (write_binary_graph, write_graph):
        with pytest.raises(DistGrailError, match="node labels"):
            write(lab, tmp_path / "x.h5")
    with pytest.raises(DistGrailError, match="node labels"):
        write_graph(lab, tmp_path / "x.gra")
    assert sorted(os.listdir(tmp_path)) == ["l.txt"]
    plain = tmp_path / "n.txt"
    plain.write_text("0 1\n1 2\n")
    assert run("convert", str(plain), "-o", str(tmp_path / "n.h5"), "--backend", "cpu").returncode == 0
