"""``python -m distgrail.benchmarks.columns`` runs on a small size: four files, each read on both
paths (the edges checked equal inside), one row each with both times and their ratio; with
``--mtx`` a fifth, a Matrix Market ``real`` file of the same edges."""

from __future__ import annotations

import json

import pytest

from distgrail.benchmarks import columns


def test_the_columns_benchmark_prints_both_paths_side_by_side(tmp_path, capsys):
    assert columns.main(["--edges", "3000", "--repeat", "1", "--dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["edges"] == 3000 and [r["file"] for r in out["rows"]][0] == "2 columns" and len(out["rows"]) == 4
    for r in out["rows"]:
        assert r["fast_seconds"] > 0 and r["general_seconds"] > 0 and r["bytes"] > 3000 * 4
        # the ratio of the unrounded times: within what the seconds' rounding to 1e-4 (and its own
        # to 0.01) allows (a read of a few ms rounds to 2 digits: 0.0028 / 0.0012 printed as 2.21)
        g, f, h = r["general_seconds"], r["fast_seconds"], 0.5e-4
        assert (g - h) / (f + h) - 0.005 <= r["general_over_fast"] <= (g + h) / max(f - h, 1e-9) + 0.005, r
    assert list(tmp_path.iterdir()) == []  # (its files removed)


def test_the_mtx_row_reads_a_matrix_market_real_file_on_both_paths(tmp_path, capsys):
    assert columns.main(["--edges", "2000", "--repeat", "1", "--dir", str(tmp_path), "--json", "--mtx"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["file"] for r in rows][-1] == "Matrix Market real" and len(rows) == 5
    assert rows[-1]["fast_seconds"] > 0 and rows[-1]["general_seconds"] > 0 and rows[-1]["bytes"] > 2000 * 8
    assert list(tmp_path.iterdir()) == []


def test_the_general_side_makes_no_fast_attempt_at_matrix_market_values(tmp_path, monkeypatch):
    """The 'general' column stood for the reader before the fast path took Matrix Market values,
    but its stand-in dropped the header's ``Fields``, so every chunk was first tried by the fast
    path (which then read the chunk unchecked and was refused) before the general path: a wasted
    attempt timed on the general side. Now no chunk of such a file reaches the fast path's body
    there, and counts the benchmark cannot use are refused (exit 2)."""
    import distgrail.io.edgelist as edgelist
    from distgrail.benchmarks import columns

    calls = []
    real = edgelist._pairs_chunk_fast

    def spy(*a, **k):
        calls.append(a[8] if len(a) > 8 else k.get("fields"))
        return real(*a, **k)

    monkeypatch.setattr(edgelist, "_pairs_chunk_fast", spy)
    seen = []
    monkeypatch.setattr(columns, "_best", lambda fn, repeat: (seen.append(len(calls)), (0.1, fn()))[1])
    assert columns.main(["--edges", "2000", "--repeat", "1", "--dir", str(tmp_path), "--json", "--mtx"]) == 0
    # seen: the spy's calls before each timed read; the last pair is the mtx file's fast then general read
    fast_calls, general_calls = seen[-1] - seen[-2], len(calls) - seen[-1]
    assert fast_calls >= 1 and general_calls == 0, (fast_calls, general_calls)
    for bad in (["--repeat", "0"], ["--edges", "0"]):
        with pytest.raises(SystemExit) as e:
            columns.main([*bad, "--dir", str(tmp_path)])
        assert e.value.code == 2
