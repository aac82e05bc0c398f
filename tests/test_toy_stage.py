"""A stage added by the recipe of docs/design.md ("Adding a stage") in three files: the stage
module and its kernel (tests/toy/forest_children.py and .cu), and its line in
``distgrail.stages.phases.EXTRA_STAGES`` (put there by ``monkeypatch``). The build runs it, the
index file holds its dataset (written early, while the build runs), the other datasets are the
bytes of a build without it, and the answers stay those of a BFS."""

from __future__ import annotations

import os

import numpy as np
import pytest

import distgrail
from distgrail.errors import DistGrailError
from distgrail.stages import phases
from toy.forest_children import DATASET, STAGE, forest_children_numpy

from conftest import ROOT


def expected_children(parent) -> np.ndarray:
    """Children per component, counted one parent at a time (independent of the twin)."""
    out = np.zeros(len(parent), np.int64)
    for p in np.asarray(parent).tolist():
        if p >= 0:
            out[p] += 1
    return out


@pytest.fixture
def with_toy(monkeypatch):
    monkeypatch.setattr(phases, "EXTRA_STAGES", (STAGE,))


def test_the_recipe_is_three_files_and_the_docs_name_them():
    here = os.path.join(ROOT, "tests", "toy")
    assert sorted(f for f in os.listdir(here) if not f.startswith("__")) == ["forest_children.cu",
                                                                               "forest_children.py"]
    design = open(os.path.join(ROOT, "docs", "design.md")).read()
    assert "## Adding a stage" in design and "EXTRA_STAGES" in design and "forest_children" in design


def test_the_twin_counts_children():
    parent = np.array([-1, 0, 0, 1, -1, 4, 0], np.int64)
    assert forest_children_numpy(parent).tolist() == [3, 1, 0, 0, 1, 0, 0] == expected_children(parent).tolist()
    assert forest_children_numpy(np.zeros(0, np.int64)).shape == (0,)


@pytest.mark.parametrize("graph", ["bundled", "cycles"])
def test_a_toy_stage_lands_in_the_index_and_changes_nothing_else(with_toy, tmp_path, graph):
    g = distgrail.bundled_graph() if graph == "bundled" else (np.array([0, 1, 2, 2, 3, 5, 5]),
                                                                np.array([1, 2, 0, 3, 3, 6, 5]))
    out = tmp_path / "toy.h5"
    idx = distgrail.build_index(g, dims=3, seed=5, backend="cpu", output=out)
    assert idx.index_write == "early"  # its dataset laid out with the others, written while the build ran
    got = distgrail.open_index(out)
    assert np.array_equal(got.arrays[DATASET], expected_children(got.arrays["forest/parent"]))
    assert int(got.arrays[DATASET].sum()) == int((got.arrays["forest/parent"] >= 0).sum())
    # the other datasets: the bytes of a build without the stage
    phases_before = phases.EXTRA_STAGES
    try:
        phases.EXTRA_STAGES = ()
        ref = distgrail.build_index(g, dims=3, seed=5, backend="cpu", output=tmp_path / "ref.h5")
    finally:
        phases.EXTRA_STAGES = phases_before
    ref = distgrail.open_index(tmp_path / "ref.h5")
    assert set(got.arrays) == set(ref.arrays) | {DATASET}
    for k, a in ref.arrays.items():
        b = got.arrays[k]
        assert a.dtype == b.dtype and np.asarray(a).tobytes() == np.asarray(b).tobytes(), k


def test_answers_stay_exact_with_the_stage(with_toy):
    from distgrail.bfs import bfs_reachable, csr_of
    from distgrail.io.pairs import read_pairs

    g = distgrail.io.read.as_graph(distgrail.bundled_graph())
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    s, t = read_pairs(distgrail.bundled_pairs())
    indptr, indices = csr_of(g)
    want = bfs_reachable(indptr, indices, s[:3000], t[:3000])
    got, _ = idx.query(s[:3000], t[:3000], backend="cpu")
    assert np.array_equal(got, want)


def test_the_stage_is_a_progress_step(with_toy, tmp_path, capsys, monkeypatch):
    from distgrail.build import steps
    from distgrail.progress import Steps

    assert "stage forest_children" in steps()
    assert steps().index("stage forest_children") == steps().index("bcast_forest") + 1
    monkeypatch.setattr(Steps, "DELAY", 0.0)
    distgrail.build_index(distgrail.bundled_graph(), dims=1, backend="cpu", progress=True)
    assert "stage forest_children" in capsys.readouterr().err


def test_a_stage_returning_the_wrong_shape_is_refused_and_leaves_no_file(monkeypatch, tmp_path):
    bad = phases.Stage("bad", {"toy/bad": (np.float64, lambda C: (C,))},
                       lambda run, dag, forest: {"toy/bad": np.zeros(1)})
    monkeypatch.setattr(phases, "EXTRA_STAGES", (bad,))
    out = tmp_path / "bad.h5"
    with pytest.raises(DistGrailError, match=r"stage bad: returned \{'toy/bad': \('float64', \(1,\)\)\}"):
        distgrail.build_index(distgrail.bundled_graph(), dims=1, backend="cpu", output=out)
    assert os.listdir(tmp_path) == []
