"""``python -m distgrail.benchmarks.serve --ranks 1,2 --fronts root,ranks`` on the CPU: a server
of one process and two of 2 MPI ranks (PyPI's MPICH ``mpiexec``; rank 0 sharding, and every rank
listening with each client placed on a rank), round trips and a load test against each, every answer checked against ``Index.query``, both servers stopped with exit
status 0 (rank 0 signalled under MPI), and the throughputs side by side."""

from __future__ import annotations

import json
import os
import sys

import pytest

import distgrail

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


@pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")
def test_servers_of_1_and_2_ranks_side_by_side(tmp_path, capsys, monkeypatch):
    pytest.importorskip("aiohttp")
    from conftest import ROOT

    from distgrail.benchmarks import serve

    for k in [k for k in os.environ if k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))]:
        monkeypatch.delenv(k)
    monkeypatch.delenv("MPIEXEC", raising=False)
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("MPIEXEC_TIMEOUT", "120")
    path = str(tmp_path / "kegg.h5")
    distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu").save(path)
    out = tmp_path / "bench.json"
    code = serve.main([path, "--backend", "cpu", "--sizes", "1000,70000", "--repeat", "1", "--no-cli",
                       "--clients", "2", "--seconds", "1", "--client-pairs", "70000", "--ranks", "1,2",
                       "--fronts", "root,ranks", "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    got = json.loads(out.read_text())["servers"]
    assert set(got) == {"1", "2", "2 ranks"}
    for r, v in got.items():
        assert v["server_exit_status"] == 0 and v["load"]["wrong_answers"] == 0 and v["load"]["requests"] > 0, r
        assert [row["pairs"] for row in v["round_trip"]] == [1000, 70000]
    assert len(got["2"]["rank_devices"]) == 2 and got["2 ranks"]["front"] == "ranks"
    assert "server of 2 rank(s)" in text and " x first" in text


def test_replot_draws_the_servers_of_saved_runs(tmp_path):
    """``--replot RUN.json --plot PNG`` runs nothing and draws a PNG from the saved servers;
    ``--replot`` without ``--plot`` and no INDEX without ``--replot`` are usage errors."""
    pytest.importorskip("matplotlib")
    from distgrail.benchmarks import serve

    def server(ranks, front, mps):
        return {"ranks": ranks, "front": front, "load": {"pairs_per_second": mps * 1e6, "clients": 4,
                                                          "pairs_per_request": 1000}}

    run = tmp_path / "run.json"
    run.write_text(json.dumps({"servers": {"1": server(1, "root", 100), "2": server(2, "root", 99),
                                           "2 ranks": server(2, "ranks", 190)}}))
    png = tmp_path / "s.png"
    assert serve.main(["--replot", str(run), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = serve.figure([json.loads(run.read_text())])
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "--front ranks, 4 clients x 1,000 pairs" in labels and "--front root, 4 clients x 1,000 pairs" in labels
    for argv in (["--replot", str(run)], []):
        with pytest.raises(SystemExit) as e:
            serve.main(argv)
        assert e.value.code == 2
