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
