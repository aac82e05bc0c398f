"""One frozen build configuration (issue 41): made and checked once at the entry, passed as one
value; no placement method or walk takes its fields as arguments again."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import re

import numpy as np
import pytest

import distgrail
from distgrail.build import walk
from distgrail.config import BuildConfig
from distgrail.errors import BackendError, DistGrailError

from conftest import ROOT


@pytest.mark.parametrize("field, value, message", [
    ("dims", 0, "dims must be an integer >= 1, got 0"),
    ("dims", 2.0, "dims must be an integer >= 1"),
    ("seed", -1, "seed must be an integer in 0..2^64-1"),
    ("parent_rule", "bfs", "parent_rule must be one of"),
    ("supports", -3, "supports must be an integer >= 0 or 'auto'"),
    ("partition", "maybe", "partition must be one of auto, on, off, got 'maybe'"),
    ("full_index_on", "some", "full_index_on must be one of all, root"),
    ("output", 7, "output must be a path or None"),
])
def test_a_bad_field_is_refused_when_the_config_is_made(field, value, message):
    with pytest.raises(DistGrailError, match=re.escape(message)):
        BuildConfig(**{field: value})


def test_a_bad_backend_is_a_backend_error():
    with pytest.raises(BackendError, match="backend must be one of auto, cpu, gpu, got 'tpu'"):
        BuildConfig(backend="tpu")


def test_frozen_and_normal():
    c = BuildConfig(dims=np.int64(3), seed=np.uint64(7))
    assert type(c.dims) is int and type(c.seed) is int
    assert c.agreed() == (3, 7, "max-level", "auto", "all", "auto", "auto", "single")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.dims = 4
    assert c.replace(dims=4).dims == 4 and c.dims == 3
    with pytest.raises(DistGrailError):
        c.replace(dims=-1)


def test_build_index_takes_a_config_or_its_fields(tmp_path):
    a = distgrail.build_index(distgrail.bundled_graph(), BuildConfig(dims=2, seed=4, backend="cpu"))
    b = distgrail.build_index(distgrail.bundled_graph(), dims=2, seed=4, backend="cpu")
    c = distgrail.build_index(distgrail.bundled_graph(), BuildConfig(dims=5, seed=4, backend="cpu"), dims=2)
    for k in a.arrays:
        assert a.arrays[k].tobytes() == b.arrays[k].tobytes() == c.arrays[k].tobytes(), k
    with pytest.raises(TypeError, match="unexpected keyword arguments: dimz"):
        distgrail.build_index(distgrail.bundled_graph(), dimz=2)
    with pytest.raises(TypeError, match="config must be a BuildConfig, got 3 .give the options by name, e.g. dims=3"):
        distgrail.build_index(distgrail.bundled_graph(), 3)
    with pytest.raises(DistGrailError, match="dims must be"):
        distgrail.build_index(distgrail.bundled_graph(), dims=0, output=tmp_path / "x.h5")
    assert os.listdir(tmp_path) == []


#: the placements' modules: their methods take data and entries, never the config's fields
PLACEMENT_MODULES = ("distgrail/placement.py", "distgrail/mpi/placement.py", "distgrail/mpi/partition.py",
                     "distgrail/mpi/partition_dag.py")
CONFIG_FIELDS = set(BuildConfig.fields())


def test_no_placement_method_takes_a_config_field_as_an_argument():
    found = []
    for rel in PLACEMENT_MODULES:
        tree = ast.parse(open(os.path.join(ROOT, rel)).read())
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
                args = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
                found += [f"{rel}:{cls.name}.{fn.name}({a})" for a in sorted(args & CONFIG_FIELDS)]
    assert not found, found
    assert not set(inspect.signature(walk).parameters) & CONFIG_FIELDS
