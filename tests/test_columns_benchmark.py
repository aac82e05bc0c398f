"""``python -m distgrail.benchmarks.columns`` runs on a small size: four files, each read on both
paths (the edges checked equal inside), one row each with both times and their ratio; with
``--mtx`` a fifth, a Matrix Market ``real`` file of the same edges."""

from __future__ import annotations

import json

from distgrail.benchmarks import columns


def test_the_columns_benchmark_prints_both_paths_side_by_side(tmp_path, capsys):
    assert columns.main(["--edges", "3000", "--repeat", "1", "--dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["edges"] == 3000 and [r["file"] for r in out["rows"]][0] == "2 columns" and len(out["rows"]) == 4
    for r in out["rows"]:
        assert r["fast_seconds"] > 0 and r["general_seconds"] > 0 and r["bytes"] > 3000 * 4
        assert abs(r["general_over_fast"] - r["general_seconds"] / r["fast_seconds"]) < 0.05 * r["general_over_fast"] + 0.01
    assert list(tmp_path.iterdir()) == []  # (its files removed)


def test_the_mtx_row_reads_a_matrix_market_real_file_on_both_paths(tmp_path, capsys):
    assert columns.main(["--edges", "2000", "--repeat", "1", "--dir", str(tmp_path), "--json", "--mtx"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["file"] for r in rows][-1] == "Matrix Market real" and len(rows) == 5
    assert rows[-1]["fast_seconds"] > 0 and rows[-1]["general_seconds"] > 0 and rows[-1]["bytes"] > 2000 * 8
    assert list(tmp_path.iterdir()) == []
