"""A toy stage added by the recipe of docs/design.md ("Adding a stage"), file 1 of 3: the number
of children of every component in the spanning forest (phase 1's parents counted), as the index
dataset ``toy/forest_children`` (int64, (C,)). NumPy twin, CUDA launcher and the entry side by
side; the kernel is file 2 (``forest_children.cu``, beside this file); file 3 is the one line in
``distgrail/stages/phases.py`` that adds :data:`STAGE` to ``EXTRA_STAGES`` (the tests put it
there with ``monkeypatch``)."""

from __future__ import annotations

import os

import numpy as np

from distgrail.stages.phases import Stage

DATASET = "toy/forest_children"
KERNEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "forest_children.cu")


def forest_children_numpy(parent) -> np.ndarray:
    """Twin: children per component (int64)."""
    parent = np.asarray(parent)
    return np.bincount(parent[parent >= 0].astype(np.int64), minlength=parent.shape[0]).astype(np.int64)


def forest_children_cuda(be, parent):
    """Launcher: one thread per component adds one to its parent's count (kernel file 2)."""
    import cupy as cp

    with be.on_device():
        parent = cp.asarray(parent).astype(cp.int64)
        C = int(parent.shape[0])
        out = cp.zeros(C, dtype=cp.uint64)
        if C:
            fn = cp.RawModule(code=open(KERNEL).read()).get_function("toy_forest_children")
            fn(((C + 255) // 256,), (256,), (parent, out, np.int64(C)))
        return out.astype(cp.int64)


def run(stage_run, dag, forest) -> dict:
    """The entry: the twin or the launcher through the backend, on a whole DAG."""
    be = stage_run.be
    parent, _ = forest.arrays(be)
    return {DATASET: be.pick(forest_children_numpy, lambda p: forest_children_cuda(be, p))(parent)}


STAGE = Stage("forest_children", {DATASET: (np.int64, lambda C: (C,))}, run)
