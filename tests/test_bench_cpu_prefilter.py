"""The CPU prefilter benchmark (distgrail/benchmarks/cpu_prefilter.py) on the bundled index: its
rows and table, the ratio column, and its refusal of bad arguments."""

from __future__ import annotations

import pytest

import distgrail

pytest.importorskip("numba", reason="the compiled prefilter needs numba")
from distgrail.benchmarks import cpu_prefilter  # noqa: E402


@pytest.fixture(scope="module")
def index_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("cp") / "kegg.h5")
    distgrail.build_index(distgrail.bundled_graph(), dims=2, seed=1, backend="cpu", supports=64, output=path)
    return path


def test_rows_table_and_ratios(index_path, capsys):
    rows = cpu_prefilter.run(index_path, [1000, 5000], repeat=1, seed=3, threads=2)
    assert [(r["batch"], r["way"]) for r in rows] == [
        (k, w) for k in (1000, 5000)
        for w in ("prefilter, NumPy", "prefilter, compiled", "Index.query, NumPy", "Index.query, compiled")]
    assert all(r["seconds"] > 0 for r in rows)
    assert cpu_prefilter.main([index_path, "--batches", "2e3", "--repeat", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and lines[1].split()[:3] == ["2,000", "prefilter,", "NumPy"]
    assert lines[2].endswith("x") and not lines[1].endswith("x")  # the ratio beside each compiled way


def test_bad_batches(index_path):
    for bad in ("0", "1,x"):
        with pytest.raises(SystemExit) as e:
            cpu_prefilter.main([index_path, "--batches", bad])
        assert e.value.code == 2
