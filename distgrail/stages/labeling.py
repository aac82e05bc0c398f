"""The labeling pipeline: phases 1–4 on a condensed DAG.

Phases 1–2 (forest, subtree sizes) are computed once and shared; phases 3–4 (ranks,
intervals) run for any subset of the d dimensions, which is how MPI ranks split the work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..gpu.backend import Backend, get_backend
from ..gpu.sweep import MAX_DIMS_PER_SWEEP
from ..errors import DistGrailError
from .forest import PARENT_RULES, parents
from .intervals import descendant_intervals
from .ranks import post_order_ranks
from .subtree import subtree_sizes

__all__ = ["Forest", "build_forest", "label_dimensions", "check_label_args"]


@dataclass
class Forest:
    """Phases 1–2: the spanning forest DT (host arrays)."""

    parent: np.ndarray
    size: np.ndarray
    timings: dict = field(default_factory=dict)


def check_label_args(dims, seed, parent_rule):
    if isinstance(dims, bool) or not isinstance(dims, (int, np.integer)) or dims < 1:
        raise DistGrailError(f"dims must be an integer >= 1, got {dims!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise DistGrailError(f"seed must be an integer in 0..2^64-1, got {seed!r}")
    if parent_rule not in PARENT_RULES:
        raise DistGrailError(f"parent_rule must be one of {', '.join(PARENT_RULES)}, got {parent_rule!r}")


def device_csr(be: Backend, dag, keep: bool = True):
    """The DAG's CSR on ``be``'s device, uploaded once and kept on ``dag`` until
    :func:`release_device_csr` (phases 1, 4 and an MPI rank's prefetch share one upload)."""
    key = (be.name, be.device)
    cached = getattr(dag, "_device_csr", None)
    if cached is not None and cached[0] == key:
        return cached[1], cached[2]
    ip, ix = be.asarray(dag.indptr), be.asarray(dag.indices)
    if keep and be.is_gpu:
        dag._device_csr = (key, ip, ix)
    return ip, ix


def release_device_csr(dag):
    if hasattr(dag, "_device_csr"):
        del dag._device_csr


def prefetch_csr(dag, seed=0, parent_rule="max-level", backend="auto"):
    """Upload the CSR ahead of phases 3–4: an MPI rank does this while rank 0 builds the forest
    (same arguments as :func:`build_forest`, so the two can stand in the same call)."""
    be = get_backend(backend)
    device_csr(be, dag)
    be.synchronize()


class _DeviceDAG:
    """The DAG's arrays on the backend's device."""

    def __init__(self, be: Backend, dag):
        self._be, self._dag = be, dag
        self.indptr, self.indices = device_csr(be, dag)
        self.level = be.asarray(dag.level)
        self.level_ptr = dag.level_ptr  # host: sweeps read slice bounds

    # the reverse CSR is uploaded only by the stages that read it (the GPU max-level rule does not)
    @property
    def rindptr(self):
        if not hasattr(self, "_rindptr"):
            self._rindptr = self._be.asarray(self._dag.rindptr)
        return self._rindptr

    @property
    def rindices(self):
        if not hasattr(self, "_rindices"):
            self._rindices = self._be.asarray(self._dag.rindices)
        return self._rindices


def _timed(timings, key, be, fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    be.synchronize()
    timings[key] = timings.get(key, 0.0) + time.perf_counter() - t
    return out


def build_forest(dag, seed: int = 0, parent_rule: str = "max-level", backend="auto") -> Forest:
    """Phases 1–2 on ``backend``; returns host arrays."""
    be = get_backend(backend)
    timings = {}
    if be.is_gpu:
        from ..gpu.memory import ensure_fits

        ensure_fits(forest_bytes(dag.C, dag.m, parent_rule, dag.indices.dtype.itemsize),
                    f"phases 1-2 of a DAG with {dag.C:,} components and {dag.m:,} edges")
    ddag = _DeviceDAG(be, dag)
    parent = _timed(timings, "phase1_forest", be, parents, be, ddag, seed, parent_rule)
    size = _timed(timings, "phase2_subtree_sizes", be, subtree_sizes, be, parent, dag.level_ptr)
    return Forest(parent=be.to_host(parent), size=be.to_host(size), timings=timings)


def label_dimensions(dag, forest: Forest, dims_to_do, seed: int = 0, backend="auto", timings=None, out=None):
    """Phases 3–4 for the dimensions ``dims_to_do``; the intervals are written into ``out``
    when it is given (a C-contiguous host array of their shape and dtype, e.g. a block of an
    MPI shared-memory window).

    Returns
    -------
    post0 : ndarray (C,)       post-order ranks of the first dimension in ``dims_to_do``
                               (the index keeps those of dimension 0); empty when no dimension
    intervals : ndarray (k, C, 2)  [min, max] over DAG descendants, in the smallest unsigned
                               type that holds 0..C-1 (cast on the device: fewer bytes to copy)
    """
    from ..dtypes import smallest_uint

    be = get_backend(backend)
    timings = {} if timings is None else timings
    dims_to_do = list(dims_to_do)
    C = dag.C
    ut = smallest_uint(max(C - 1, 0))
    if not dims_to_do:
        return np.zeros(0, np.int64), np.zeros((0, C, 2), ut) if out is None else out
    t0 = time.perf_counter()
    out = np.empty((len(dims_to_do), C, 2), ut) if out is None else out
    landing = be.prefault(out)  # the host pages get ready while the GPU works
    if be.is_gpu:
        from ..gpu.memory import ensure_fits

        ensure_fits(label_bytes(C, dag.m, len(dims_to_do), dag.indices.dtype.itemsize),
                    f"phases 3-4 of {len(dims_to_do)} dimension(s) of a DAG with {C:,} components and {dag.m:,} edges")
    parent = be.asarray(forest.parent)
    size = be.asarray(forest.size)
    ip, ix = device_csr(be, dag, keep=False)
    release_device_csr(dag)
    be.synchronize()
    timings["phase34_setup"] = timings.get("phase34_setup", 0.0) + time.perf_counter() - t0
    post = _timed(timings, "phase3_ranks", be, post_order_ranks, be, parent, size, dag.level_ptr, seed, dims_to_do)
    del parent, size
    lo, hi = _timed(timings, "phase4_intervals", be, descendant_intervals, be, ip, ix, dag.level_ptr, post)
    del ip, ix
    landing.join()
    return _timed(timings, "phase34_to_host", be, _labels_to_host, be, post, lo, hi, ut, out)


def _labels_to_host(be, post, lo, hi, ut, out):
    """post0 and the intervals cast to ``ut`` on the device, then copied to the host."""
    post0 = be.to_host(post[0])
    del post
    iv = be.xp.stack((lo.astype(ut), hi.astype(ut)), axis=-1)
    del lo, hi
    return post0, be.to_host(iv, out=out)


# -- GPU memory estimates ------------------------------------------------------------------
def forest_bytes(C: int, m: int, parent_rule: str = "max-level", id_bytes: int = 4) -> int:
    """Estimated peak GPU bytes of phases 1–2 (DAG upload included)."""
    csr = 2 * (8 * (C + 1) + id_bytes * m)
    est = csr + 4 * C + 8 * C + 17 * C  # level, parent, hub scan
    est += 8 * C  # phase 2: sizes
    if parent_rule == "dfs":
        est += 8 * C * 2 + 8 * m + 4 * m  # zeta, dist, per-edge ζ prefix, COO rows (ζ sweep)
    return int(est)


def label_bytes(C: int, m: int, dims: int, id_bytes: int = 4) -> int:
    """Estimated peak GPU bytes of phases 3–4 for ``dims`` dimensions (CSR upload included)."""
    k = int(dims)
    est = 8 * (C + 1) + id_bytes * m + 16 * C + 4 * m  # CSR, parent, size, COO rows
    p3 = 16 * k * C + 80 * C  # ranks + jump buffer + per-dimension sort scratch
    p4 = 8 * k * C + 8 * min(k, MAX_DIMS_PER_SWEEP) * C + 16 * k * C + 16 * k * C  # post, buffer, lo/hi, stack
    return int(est + max(p3, p4))
