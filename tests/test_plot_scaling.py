"""The scaling plot (issue 16): speedups computed from the scaling JSON files, PNG written."""

import json

import pytest

from distgrail.benchmarks import plot_scaling


def _write_runs(tmp_path, times):
    for n, (label, wall, query) in times.items():
        run = {"ranks": n, "C": 100, "dag_edges": 1000, "dims": 16, "queries": 10**6,
               "labeling_seconds": label, "index_wall_seconds": wall, "query_seconds": query}
        (tmp_path / f"scaling-{n}.json").write_text(json.dumps(run))


def test_speedups_against_the_smallest_rank_count(tmp_path):
    _write_runs(tmp_path, {1: (0.4, 2.0, 8.0), 2: (0.25, 1.6, 4.0), 4: (0.2, 1.0, 2.5)})
    sp = plot_scaling.speedups(plot_scaling.load_runs(str(tmp_path)))
    assert sp["labeling"] == [(1, 1.0), (2, 1.6), (4, 2.0)]
    assert sp["whole build"] == [(1, 1.0), (2, 1.25), (4, 2.0)]
    assert sp["queries"] == [(1, 1.0), (2, 2.0), (4, 3.2)]


def test_missing_runs_are_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no scaling"):
        plot_scaling.load_runs(str(tmp_path))


def test_png_is_written(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib (extra 'plot') is not installed: the PNG is not drawn")
    _write_runs(tmp_path, {1: (0.4, 2.0, 8.0), 2: (0.25, 1.6, 4.0)})
    out = plot_scaling.plot(plot_scaling.load_runs(str(tmp_path)), str(tmp_path / "s.png"))
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
