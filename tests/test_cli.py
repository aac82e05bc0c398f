"""The command line end to end, and its failure behaviour (clear error, exit != 0, no partial file)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import distgrail
from distgrail.cli import main
from conftest import EXPECTED, graph_path, ROOT


def run(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "distgrail", *args], capture_output=True, text=True, env=env)


def test_index_query_info_on_bundled(tmp_path, capsys):
    out = tmp_path / "k.h5"
    assert main(["index", "bundled", "-o", str(out), "--dims", "3", "--quiet"]) == 0
    assert main(["query", str(out), "bundled", "-o", str(tmp_path / "a.txt"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["reachable"] == distgrail.BUNDLED_REACHABLE
    assert sum(summary["steps"].values()) == summary["queries"] == 100000
    lines = (tmp_path / "a.txt").read_text().split()
    assert len(lines) == 100000 and lines.count("1") == distgrail.BUNDLED_REACHABLE
    assert main(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["dims"] == 3 and info["n_vertices"] == 3617 and info["format_version"] == 2
    assert info["datasets"]["labels/intervals"][0] == [3, 3617, 2]


@pytest.mark.parametrize("name", ["nasa_dag_uniq", "ba10k2d"])
def test_cli_on_shared_graphs_gives_readme_counts(tmp_path, name, data_dir):
    idx = tmp_path / "i.h5"
    r = run("index", graph_path(name), "-o", str(idx), "--backend", "cpu")
    assert r.returncode == 0, r.stderr
    r = run("query", str(idx), graph_path(name) + ".q100k.pairs.gz", "-o", str(tmp_path / "a.npy"), "--json",
            "--backend", "cpu")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["reachable"] == EXPECTED[name]
    assert int(np.load(tmp_path / "a.npy").sum()) == EXPECTED[name]


def test_bad_graph_clear_error_no_partial_file(tmp_path):
    bad = tmp_path / "bad.gra"
    bad.write_text("graph_for_greach\n3\n0: 1 #\n1: 9 #\n2: #\n")
    out = tmp_path / "out.h5"
    r = run("index", str(bad), "-o", str(out))
    assert r.returncode == 2
    assert f"{bad}:4: vertex id out of range 0..2, got '9'" in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".out.h5")]


def test_failure_while_writing_leaves_no_file(tmp_path, monkeypatch):
    import distgrail.indexfile as f

    def boom(*a, **k):
        raise RuntimeError("disk full")

    out = tmp_path / "x.h5"
    monkeypatch.setattr(f.np, "ascontiguousarray", boom)
    with pytest.raises(RuntimeError):
        distgrail.build_index(distgrail.bundled_graph(), dims=1, backend="cpu", output=out)
    assert os.listdir(tmp_path) == []


def test_query_errors(tmp_path):
    idx = tmp_path / "k.h5"
    assert run("index", "bundled", "-o", str(idx), "--dims", "1").returncode == 0
    pairs = tmp_path / "p.txt"
    pairs.write_text("0 1\n5 99999\n")
    r = run("query", str(idx), str(pairs))
    assert r.returncode == 2 and "targets[1] out of range 0..3616, got 99999" in r.stderr
    pairs.write_text("0 1\n5\n")
    r = run("query", str(idx), str(pairs))
    assert r.returncode == 2 and f"{pairs}:2: expected 'u v' (query pair), got '5'" in r.stderr
    r = run("query", str(pairs), str(pairs))
    assert r.returncode == 2 and "not an HDF5 file" in r.stderr


def test_bad_arguments(tmp_path):
    r = run("index", "bundled", "-o", str(tmp_path / "x.h5"), "--dims", "0")
    assert r.returncode == 2 and "dims must be an integer >= 1, got 0" in r.stderr
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.parametrize("kind", ["paper", "scale-free", "layered"])
@pytest.mark.parametrize("ext", ["gra", "txt", "h5"])
def test_generate_then_index(tmp_path, kind, ext):
    g = tmp_path / f"g.{ext}"
    assert main(["generate", kind, "-n", "500", "--degree", "3", "--seed", "4", "-o", str(g), "--quiet"]) == 0
    back = distgrail.read_graph(str(g))
    ref = distgrail.io.generate.generate(kind, 500, 3, seed=4)
    assert back.n == 500
    # .gra and .h5 store the CSR without duplicate edges; edge lists keep every line
    assert set(zip(back.src.tolist(), back.dst.tolist())) == set(zip(ref.src.tolist(), ref.dst.tolist()))
    idx = distgrail.build_index(str(g), dims=2, backend="cpu")
    assert idx.n == 500


def test_convert_roundtrip(tmp_path):
    h5 = tmp_path / "k.h5"
    assert main(["convert", "bundled", "-o", str(h5), "--quiet"]) == 0
    a = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    b = distgrail.build_index(str(h5), dims=2, backend="cpu")
    for k in a.arrays:
        np.testing.assert_array_equal(a.arrays[k], b.arrays[k])
    assert a.meta["source_sha256"] == b.meta["source_sha256"]
