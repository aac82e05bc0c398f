"""The query-throughput benchmark (distgrail/benchmarks/query_floor.py) on the CPU: its rows,
table, JSON and plot; the GPU steps (floor, upload, pinned) run on the GPU machine
(docs/benchmarks.md), the sharded row under MPI (tests/test_bench_query_floor_mpi.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import distgrail
from distgrail.benchmarks import query_floor


@pytest.fixture(scope="module")
def index_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("qf") / "kegg.h5")
    distgrail.build_index(distgrail.bundled_graph(), dims=2, seed=1, backend="cpu", output=path)
    return path


def test_cpu_rows_table_json_and_plot(index_path, tmp_path, capsys):
    out, png = tmp_path / "q.json", tmp_path / "q.png"
    assert query_floor.main([index_path, "--batches", "1000,3e3", "--repeat", "1", "--backend", "cpu",
                             "--json", str(out), "--plot", str(png)]) == 0
    rows = json.load(open(out))["rows"]
    assert [(r["ranks"], r["batch"], r["step"]) for r in rows] == [(1, 1000, "host arrays"), (1, 3000, "host arrays")]
    assert all(r["seconds"] > 0 for r in rows)
    text = capsys.readouterr().out
    assert "host arrays" in text and "3,000" in text and png.stat().st_size > 1000
    # a GPU run's rows beside it: the ratio to the floor of the same batch, the floor drawn
    gpu = [{"ranks": 1, "batch": 1000, "step": "floor", "seconds": 0.001},
           {"ranks": 1, "batch": 1000, "step": "pinned", "seconds": 0.004},
           {"ranks": 4, "batch": 1000, "step": "sharded", "seconds": 0.002, "mpi_seconds": {"scatter": 0.001}}]
    json.dump({"rows": gpu}, open(tmp_path / "g.json", "w"))
    assert query_floor.main(["--replot", str(tmp_path / "g.json"), "--plot", str(png)]) == 0
    lines = capsys.readouterr().out.splitlines()
    pinned = next(line for line in lines if "pinned" in line)
    assert pinned.split() == ["1", "1,000", "pinned", "4.00", "0.2", "4.0"]  # 4 ms: 0.25 M q/s, 4x the floor
    assert any("sharded" in line and "'scatter': 0.001" in line for line in lines)


def test_answers_are_checked(index_path, monkeypatch):
    """A step whose answers differ from Index.query's ends the benchmark with a message."""
    with pytest.raises(SystemExit, match="the floor answers differ"):
        query_floor._same(np.array([True, False]), np.array([True, True]), "floor")
    query_floor._same(np.array([1, 0], np.uint8), np.array([True, False]), "floor")  # equal: no error


@pytest.mark.parametrize("bad", ["1,x", "0", "-5,10"])
def test_bad_batches_are_refused(index_path, bad, capsys):
    with pytest.raises(SystemExit) as e:
        query_floor.main([index_path, "--batches", bad, "--backend", "cpu"])
    assert e.value.code == 2 and "--batches" in capsys.readouterr().err


def test_pairs_are_uniform_and_seeded():
    s, t = query_floor.draw_pairs(50, 10_000, 3)
    s2, _ = query_floor.draw_pairs(50, 10_000, 3)
    assert s.dtype == t.dtype == np.int64 and np.array_equal(s, s2)
    assert s.min() == 0 and s.max() == 49 and abs(np.bincount(t, minlength=50).mean() - 200) < 1e-9
