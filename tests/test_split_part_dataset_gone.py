"""A split index's part that lacks a dataset the main file maps to it (removed, or its HDF5
structure damaged so that the name no longer resolves) is named a damaged index, with the part
and the dataset, exit 2 (it read "the part ... holds no dataset", not said to be damage)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import distgrail
from distgrail.errors import IndexFormatError
from conftest import ROOT


def test_a_part_without_its_dataset_is_a_damaged_index(tmp_path):
    rng = np.random.default_rng(2)
    src, dst = rng.integers(0, 300, (2, 2000))
    distgrail.build_index((src, dst), num_vertices=300, dims=2, backend="cpu").save(str(tmp_path / "i.h5"))
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "distgrail", "convert", "i.h5", "--layout", "split", "--parts", "2",
                        "-o", "s.h5", "--quiet"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    part = sorted(glob.glob(str(tmp_path / "s.h5.*part1*")))[0]
    names = []
    with h5py.File(part, "a") as f:
        f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        assert names
        del f[names[0]]
    with pytest.raises(IndexFormatError) as e:
        distgrail.open_index(str(tmp_path / "s.h5"))
    msg = str(e.value)
    assert "damaged index: the part" in msg and os.path.basename(part) in msg and f"/{names[0]}" in msg, msg
    r = subprocess.run([sys.executable, "-m", "distgrail", "info", "s.h5"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "damaged index: the part" in r.stderr and "Traceback" not in r.stderr, r.stderr
