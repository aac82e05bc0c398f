"""The build-scaling benchmark (distgrail.benchmarks.build_scaling): whole ``distgrail index`` runs on
1 and 2 ranks timed side by side, every index checked against the 1-rank one, failures reported.

Serial tests that start their own ``mpiexec`` jobs (PyPI's MPICH beside the venv's Python), as
tests/test_launch.py does: no pytest-mpi marker.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _env(timeout: int) -> dict:
    """This environment without an outer MPI job's variables, with MPICH's own job timeout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))}
    env["MPIEXEC_TIMEOUT"] = str(timeout)
    return env


def _benchmark(*args, timeout=50):
    return subprocess.run([sys.executable, "-m", "distgrail.benchmarks.build_scaling", *args], env=_env(timeout),
                          capture_output=True, text=True, timeout=timeout)


def _has_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


@pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")
def test_one_and_two_ranks_build_the_same_index(tmp_path):
    graph = tmp_path / "g.txt"
    subprocess.run([sys.executable, "-m", "distgrail", "generate", "rmat", "--scale", "10", "-o", str(graph),
                    "--quiet"], check=True, timeout=30)
    out, report, png = tmp_path / "out", tmp_path / "scal.json", tmp_path / "scal.png"
    plot = ["--plot", str(png)] if _has_matplotlib() else []
    r = _benchmark(str(graph), "--ranks", "1,2", "--variants", "single:off,split:on", "--backend", "cpu",
                   "--dims", "3", "--repeat", "1", "--out", str(out), "--json", str(report), "--timeout", "20", *plot)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "same" in r.stdout and "DIFFER" not in r.stdout and "FAILED" not in r.stdout, r.stdout
    assert "GPU GB" in r.stdout and "start s" in r.stdout and "rest s" in r.stdout
    assert "mpiexec -n 2" in r.stdout and "--layout split --partition on" in r.stdout, r.stdout
    rows = json.loads(report.read_text())["rows"]
    assert {(row["ranks"], row["variant"]) for row in rows} == {
        (n, v) for n in (1, 2) for v in ("single:off", "split:on")}
    for row in rows:
        assert row["wall"] > 0 and row["same"] is True and not row["failed"], row
        assert row["gpu_used"] is None  # (the CPU backend: no GPU pool peak to report)
        assert [s["status"] for s in row["samples"]] == [0] and row["samples"][0]["total"] > 0, row
        assert 0 < row["samples"][0]["startup"] < row["samples"][0]["wall"], row  # (start-up inside the wall)
        assert row["startup"] == row["samples"][0]["startup"], row  # (the median of one sample)
    assert [p.name.split(".")[0] for p in out.glob("*.part0")] == ["g-2-split-on"]
    if plot:
        assert png.read_bytes()[:8] == PNG_SIGNATURE


def test_a_failed_run_is_reported_and_sets_the_exit_status(tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no such interpreter today' >&2\nexit 3\n")
    broken.chmod(0o755)
    graph = tmp_path / "g.txt"
    graph.write_text("0 1\n")
    r = _benchmark(str(graph), "--ranks", "1", "--python", str(broken), "--out", str(tmp_path / "out"),
                   "--json", str(tmp_path / "scal.json"), timeout=30)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED" in r.stdout and "FAILED (exit 3)" in r.stderr, r.stdout + r.stderr
    assert "no such interpreter today" in r.stderr
    (row,) = json.loads((tmp_path / "scal.json").read_text())["rows"]
    assert row["failed"] and row["samples"][0]["status"] == 3 and row["wall"] is None


def test_replot_draws_the_rows_of_earlier_runs(tmp_path):
    """--replot runs nothing: the rows of several --json files, each graph named with its d, in one
    table (and one plot where matplotlib is installed); no graph and no --replot is an error."""
    def saved(name, dims, walls):
        rows = [{"graph": name, "variant": "split:on", "ranks": n, "wall": w, "total": w - 1, "gpu_used": None,
                 "failed": False, "same": True, "baseline": n == 1, "command": "x",
                 "speedup_wall": walls[1] / w, "speedup_total": (walls[1] - 1) / (w - 1),
                 "samples": [{"status": 0, "wall": w, "total": w - 1}, {"status": 0, "wall": w - 1, "total": w - 2},
                             {"status": 1, "wall": 0.5, "total": None}]} for n, w in walls.items()]
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"dims": dims, "backend": "gpu", "repeat": 2, "rows": rows}))
        return str(path)

    a = saved("rmat27", 5, {1: 12.0, 4: 8.0})
    b = saved("paper", 16, {1: 9.0, 2: 12.0})
    png = tmp_path / "both.png"
    r = _benchmark("--replot", a, b, *(["--plot", str(png)] if _has_matplotlib() else []), timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rmat27 d=5" in r.stdout and "paper d=16" in r.stdout and "1.50" in r.stdout and "0.75" in r.stdout, r.stdout
    if _has_matplotlib():
        assert png.read_bytes()[:8] == PNG_SIGNATURE
    r = _benchmark("--replot", a, "--best", timeout=60)  # fastest samples: 11 and 7 s, so 1.57x
    assert r.returncode == 0 and "11.000" in r.stdout and "1.57" in r.stdout, r.stdout
    r = _benchmark(timeout=60)
    assert r.returncode == 2 and "--replot" in r.stderr, r.stderr
