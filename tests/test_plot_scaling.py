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


def _matplotlib():
    return pytest.importorskip("matplotlib", reason="matplotlib is not installed: pip install 'distgrail[plot]' "
                                                    "(launch/setup.sh installs it with the test extra)")


def test_figure_draws_the_speedups(tmp_path):
    _matplotlib()
    import matplotlib.pyplot as plt

    _write_runs(tmp_path, {1: (0.4, 2.0, 8.0), 2: (0.25, 1.6, 4.0), 4: (0.2, 1.0, 2.5)})
    fig = plot_scaling.figure(plot_scaling.load_runs(str(tmp_path)))
    try:
        ax = fig.axes[0]
        lines = {ln.get_label(): (list(ln.get_xdata()), [round(y, 9) for y in ln.get_ydata()]) for ln in ax.lines}
        assert lines == {"ideal": ([1, 2, 4], [1.0, 2.0, 4.0]), "labeling": ([1, 2, 4], [1.0, 1.6, 2.0]),
                         "whole build": ([1, 2, 4], [1.0, 1.25, 2.0]), "queries": ([1, 2, 4], [1.0, 2.0, 3.2])}
        assert ax.get_title() == "100 components, 1,000 DAG edges, d=16, 1,000,000 queries"
        assert ax.get_ylabel() == "speedup over 1 GPU" and list(ax.get_xticks()) == [1, 2, 4]
    finally:
        plt.close(fig)


def test_png_is_written(tmp_path):
    _matplotlib()
    import matplotlib.image

    _write_runs(tmp_path, {1: (0.4, 2.0, 8.0), 2: (0.25, 1.6, 4.0)})
    out = plot_scaling.plot(plot_scaling.load_runs(str(tmp_path)), str(tmp_path / "s.png"))
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(out)
    assert img.shape[:2] == (504, 720)  # 6 x 4.2 inches at 120 dpi
    assert img[..., :3].min() < 0.5 < img[..., :3].max()  # something is drawn on the white page
