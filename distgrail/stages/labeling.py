"""The labeling pipeline: phases 1–4 on a condensed DAG.

Phases 1–2 (forest, subtree sizes) are computed once and shared; phases 3–4 (ranks,
intervals) run for any subset of the d dimensions, which is how MPI ranks split the work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..gpu.backend import Backend
from ..gpu.memory import ensure_fits
from ..errors import DistGrailError
from .forest import PARENT_RULES, parents
from .intervals import descendant_intervals
from .ranks import post_order_ranks
from .subtree import subtree_sizes

__all__ = ["Forest", "DeviceDAG", "build_forest", "label_dimensions", "check_label_args", "prefetch_csr",
           "device_csr", "release_device_csr", "upload"]


class _HostArray:
    """A :class:`Forest` array read as a host array: a device copy is downloaded on the first
    read and kept (so ``bcast_dataclass`` and ``assemble`` see plain NumPy arrays)."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            raise AttributeError(self.name)  # no class-level default: a dataclass field without one
        host = obj._host.get(self.name)
        if host is None and self.name in obj._device:
            host = obj._host[self.name] = obj._be.to_host(obj._device[self.name])
        return host

    def __set__(self, obj, value):
        if "_host" not in obj.__dict__:
            obj._host, obj._device, obj._be = {}, {}, None
        obj._host[self.name] = value
        obj._device.pop(self.name, None)


@dataclass
class Forest:
    """Phases 1–2: the spanning forest DT.

    ``parent`` and ``size`` read as host arrays. A forest built on a GPU (:meth:`on_device`)
    keeps its device arrays: :meth:`arrays` hands them to phases 3–4 without a host round trip,
    and the host copies are downloaded once, on first read (e.g. to broadcast or write them).
    """

    parent: np.ndarray = _HostArray()
    size: np.ndarray = _HostArray()
    timings: dict = field(default_factory=dict)

    @classmethod
    def on_device(cls, be: Backend, parent, size, timings=None) -> "Forest":
        """A forest whose arrays live on ``be``'s device."""
        f = cls(parent=None, size=None, timings={} if timings is None else timings)
        f._be = be
        f._host = {}
        f._device = {"parent": parent, "size": size}
        return f

    @property
    def on_gpu(self) -> bool:
        """True while the forest holds device arrays."""
        return bool(self._device)

    def arrays(self, be: Backend):
        """(parent, size) on ``be``'s device: the kept device arrays when they are on it, else
        uploaded from the host copies."""
        if self._device and self._be is not None and (self._be.name, self._be.device) == (be.name, be.device):
            return self._device["parent"], self._device["size"]
        parent, size = self.parent, self.size
        if be.is_gpu:
            with be.on_device():
                ensure_fits(parent.nbytes + size.nbytes, f"the forest of {parent.size:,} components")
        return be.asarray(parent), be.asarray(size)

    def release_device(self):
        """Download what is not on the host yet, then drop the device arrays."""
        for name in list(self._device):
            getattr(self, name)
        self._device = {}


def check_label_args(dims, seed, parent_rule):
    if isinstance(dims, bool) or not isinstance(dims, (int, np.integer)) or dims < 1:
        raise DistGrailError(f"dims must be an integer >= 1, got {dims!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise DistGrailError(f"seed must be an integer in 0..2^64-1, got {seed!r}")
    if parent_rule not in PARENT_RULES:
        raise DistGrailError(f"parent_rule must be one of {', '.join(PARENT_RULES)}, got {parent_rule!r}")


def upload(be: Backend, a, what: str):
    """Host array ``a`` on ``be``'s device, after checking that it fits there (an array already on
    the device, e.g. a DAG condensed on the GPU, is used as it is: nothing to fit)."""
    if be.is_gpu and isinstance(a, np.ndarray):
        with be.on_device():
            ensure_fits(a.nbytes, f"uploading {what} ({a.size:,} x {a.dtype})")
    return be.asarray(a)


def device_csr(be: Backend, dag, keep: bool = True):
    """The DAG's CSR on ``be``'s device, uploaded once and kept on ``dag`` until
    :func:`release_device_csr` (phases 1, 4 and an MPI rank's prefetch share one upload)."""
    key = (be.name, be.device)
    cached = getattr(dag, "_device_csr", None)
    if cached is not None and cached[0] == key:
        return cached[1], cached[2]
    ip, ix = upload(be, dag.indptr, "the CSR's indptr"), upload(be, dag.indices, "the CSR's indices")
    if keep and be.is_gpu:
        dag._device_csr = (key, ip, ix)
    return ip, ix


def release_device_csr(dag):
    if hasattr(dag, "_device_csr"):
        del dag._device_csr


def prefetch_csr(dag, seed, parent_rule, be: Backend):
    """Upload the CSR ahead of phases 3–4: an MPI rank does this while rank 0 builds the forest
    (same arguments as :func:`build_forest`, so the two can stand in the same call)."""
    device_csr(be, dag)
    be.synchronize()


class DeviceDAG:
    """The DAG's arrays on the backend's device (the host arrays themselves on the CPU)."""

    def __init__(self, be: Backend, dag):
        self._be, self._dag = be, dag
        self.indptr, self.indices = device_csr(be, dag)
        self.level = upload(be, dag.level, "the levels")
        self.level_ptr = dag.level_ptr  # host: sweeps read slice bounds

    # the reverse CSR is uploaded only by the stages that read it (the GPU max-level rule does not)
    @property
    def rindptr(self):
        if not hasattr(self, "_rindptr"):
            self._rindptr = upload(self._be, self._dag.rindptr, "the reverse CSR's indptr")
        return self._rindptr

    @property
    def rindices(self):
        if not hasattr(self, "_rindices"):
            self._rindices = upload(self._be, self._dag.rindices, "the reverse CSR's indices")
        return self._rindices


def _timed(timings, key, be, fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    be.synchronize()
    timings[key] = timings.get(key, 0.0) + time.perf_counter() - t
    return out


def build_forest(dag, seed: int, parent_rule: str, be: Backend) -> Forest:
    """Phases 1–2 on ``be``. On a GPU the forest stays there (:meth:`Forest.on_device`):
    phases 3–4 in the same process use it without a host round trip."""
    timings = {}
    ddag = DeviceDAG(be, dag)
    parent = _timed(timings, "phase1_forest", be, parents, be, ddag, seed, parent_rule)
    size = _timed(timings, "phase2_subtree_sizes", be, subtree_sizes, be, parent, dag.level_ptr)
    if be.is_gpu:
        return Forest.on_device(be, parent, size, timings)
    return Forest(parent=parent, size=size, timings=timings)


def label_dimensions(dag, forest: Forest, dims_to_do, seed: int, be: Backend, timings=None, out=None,
                     on_device: bool = False):
    """Phases 3–4 for the dimensions ``dims_to_do``; the intervals are written into ``out``
    when it is given (a C-contiguous host array of their shape and dtype, e.g. a block of an
    MPI shared-memory window). ``on_device=True``: the intervals stay on ``be``'s device
    (an MPI rank sends them GPU to GPU); ``out`` is not used.

    Returns
    -------
    post0 : ndarray (C,)       post-order ranks of the first dimension in ``dims_to_do``
                               (the index keeps those of dimension 0); empty when no dimension
    intervals : ndarray (k, C, 2)  [min, max] over DAG descendants, in the smallest unsigned
                               type that holds 0..C-1 (cast on the device: fewer bytes to copy)
    """
    from ..dtypes import smallest_uint

    timings = {} if timings is None else timings
    dims_to_do = list(dims_to_do)
    C = dag.C
    ut = smallest_uint(max(C - 1, 0))
    if not dims_to_do:
        none = np.zeros((0, C, 2), ut)
        return np.zeros(0, np.int64), be.asarray(none) if on_device else none if out is None else out
    t0 = time.perf_counter()
    if not on_device:
        out = np.empty((len(dims_to_do), C, 2), ut) if out is None else out
    landing = be.prefault(out) if not on_device else None  # the host pages get ready while the GPU works
    parent, size = forest.arrays(be)  # each launcher below checks its own GPU memory
    ip, ix = device_csr(be, dag, keep=False)
    release_device_csr(dag)
    be.synchronize()
    timings["phase34_setup"] = timings.get("phase34_setup", 0.0) + time.perf_counter() - t0
    post = _timed(timings, "phase3_ranks", be, post_order_ranks, be, parent, size, dag.level_ptr, seed, dims_to_do)
    del parent, size
    lo, hi = _timed(timings, "phase4_intervals", be, descendant_intervals, be, ip, ix, dag.level_ptr, post)
    del ip, ix
    if on_device:
        return _timed(timings, "phase34_cast", be, _labels_on_device, be, post, lo, hi, ut)
    landing.join()
    return _timed(timings, "phase34_to_host", be, _labels_to_host, be, post, lo, hi, ut, out)


def _labels_on_device(be, post, lo, hi, ut):
    """post0 (host) and the intervals cast to ``ut`` on the device."""
    post0 = be.to_host(post[0])
    with be.on_device():
        return post0, be.xp.stack((lo.astype(ut), hi.astype(ut)), axis=-1)


def _labels_to_host(be, post, lo, hi, ut, out):
    """post0 and the intervals cast to ``ut`` on the device, then copied to the host; on the CPU
    cast straight into ``out`` (no stacked copy between)."""
    if not be.is_gpu and out is not None:
        out[..., 0] = lo
        out[..., 1] = hi
        return be.to_host(post[0]), out
    post0, iv = _labels_on_device(be, post, lo, hi, ut)
    del post, lo, hi
    return post0, be.to_host(iv, out=out)
