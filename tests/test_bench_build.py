"""The build benchmark (distgrail/benchmarks/build.py) at a tiny scale, CPU path only: one table
per graph with every row, real seconds, the --cpu-max-edges skip, graphs reused on a second run."""

from __future__ import annotations

import os
import re

from distgrail.benchmarks import build as bench


def test_build_benchmark_tiny_cpu_only(tmp_path, capsys):
    out = str(tmp_path / "b")
    assert bench.main(["--out", out, "--scale", "2e-5", "--no-gpu", "--cpu-max-edges", "500", "--json"]) == 0
    text = capsys.readouterr().out
    names = [g[0] for g in bench.graphs(2e-5)]
    assert names == ["dag11.gra", "dag11.txt", "sf-cycles.gra", "layered.gra", "chain.gra"]
    blocks = re.split(r"\n(?=\S+: n=)", text.split("\n[", 1)[0].strip())
    assert [b.split(":", 1)[0] for b in blocks] == names
    ran = skipped = 0
    for block in blocks:
        for row in bench.ROWS:
            assert re.search(rf"^  {re.escape(row)}\s", block, re.M), (row, block)
        assert "GPU path: skipped (--no-gpu)" in block
        m = int(re.search(r"m=([\d,]+)", block).group(1).replace(",", ""))
        if m > 500:
            assert "CPU path: skipped (--cpu-max-edges)" in block
            skipped += 1
        else:
            wall = re.search(r"index wall \(subprocess\)\s+([\d.]+) s", block)
            assert wall and float(wall.group(1)) > 0.05, block
            assert os.path.exists(os.path.join(out, block.split(":", 1)[0] + ".cpu.idx.h5"))
            ran += 1
    assert ran >= 1 and skipped >= 1
    # the graphs have what the benchmark promises: the cyclic one has cycles, the layered one its levels
    import distgrail

    sf = distgrail.build_index(os.path.join(out, "sf-cycles.gra"), dims=1, backend="cpu", supports=0)
    assert sf.C < sf.n
    lay = distgrail.build_index(os.path.join(out, "layered.gra"), dims=1, backend="cpu", supports=0)
    assert lay.meta["n_levels"] == bench.graphs(2e-5)[3][2]["levels"]
    chain = distgrail.build_index(os.path.join(out, "chain.gra"), dims=1, backend="cpu", supports=0)
    assert chain.meta["n_levels"] == chain.n == chain.C == bench.graphs(2e-5)[4][2]["n"]
    before = os.path.getmtime(os.path.join(out, "dag11.gra"))
    assert bench.main(["--out", out, "--scale", "2e-5", "--no-gpu", "--cpu-max-edges", "0"]) == 0
    assert os.path.getmtime(os.path.join(out, "dag11.gra")) == before  # reused, not regenerated
    assert capsys.readouterr().out.count("skipped (--cpu-max-edges)") == 5


def test_build_benchmark_rmat_generates_once_and_reports_rates(tmp_path, capsys):
    out = str(tmp_path / "r")
    assert bench.main(["--out", out, "--rmat", "8", "--edge-factor", "4", "--no-gpu"]) == 0
    text = capsys.readouterr().out
    path = os.path.join(out, "rmat-s8-e4.txt")
    assert text.startswith("rmat-s8-e4.txt: n=256, m=1,024") and os.path.getsize(path) > 0
    lines = open(path, "rb").read().splitlines()
    assert lines[0] == b"# distgrail edge list: 256 vertices, 1024 edges" and len(lines) == 1 + 1024
    assert re.search(r"CPU path: read [\d.]+ GB/s", text) and re.search(r"digest alone \(BLAKE3\): [\d.]+ GB/s", text)
    for row in bench.ROWS:
        assert re.search(rf"^  {re.escape(row)}\s+[\d.]+ s", text, re.M), row
    mtime = os.path.getmtime(path)
    assert bench.main(["--out", out, "--rmat", "8", "--edge-factor", "4", "--no-gpu"]) == 0
    assert os.path.getmtime(path) == mtime  # reused, not generated again
