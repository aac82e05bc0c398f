"""The distributed build's transfers when arrays move device to device (an NCCL transport).

:class:`distgrail.mpi.placement.AcrossRanks` uses these when
:func:`~distgrail.mpi.transport.transport_for` chose ``"nccl"``; with the ``"mpi"`` transport it
keeps the host path (node-shared labels or ``Gatherv``). Every function is collective over
the transport's communicator and works on any backend (on the CPU "the device" is host memory,
which is how CI runs this path with a fake NCCL).

* the DAG: rank 0's CSR (``indptr``, ``indices``, on its GPU after the GPU condensation, or
  uploaded once and kept for phases 1–2) is broadcast to every rank's device; ``level_ptr``,
  which the sweeps read on the host, goes by MPI;
* the forest (phases 1–2): ``parent`` and ``size``, device to device;
* labels: each rank's block of dimensions stays on its device and is gathered to rank 0's
  device, which copies to the host only what the index holds (every rank's device too, with
  ``full_index_on="all"``); with ``full_index_on="root"`` rank 0 copies its own block to the
  host as soon as it is done (:class:`OwnBlockCopy`, while the others still label) and then
  receives and copies only the others' blocks;
* phase 5: each rank's block of mask words, likewise;
* ``comp`` and ``level`` (what queries need on every rank), device to device.
"""

from __future__ import annotations

import numpy as np

from ..stages.condense import DAG
from ..stages.labeling import Forest, device_csr, upload
from .collectives import bcast_array
from .errors import run_shared

__all__ = ["share_dag", "bcast_forest", "gather_blocks", "landing", "copy_own_block", "OwnBlockCopy",
           "bcast_comp_level", "land_transposed", "TRANSPOSE_SLAB_BYTES"]


def share_dag(tp, dag, root: int = 0):
    """The DAG's labeling fields on every rank: rank 0's DAG itself, a DAG with the CSR on this
    rank's device (``comp``, ``level`` and the reverse CSR None) elsewhere."""
    comm, be = tp.comm, tp.be
    here = comm.Get_rank() == root
    head = comm.bcast((dag.n, dict(dag.meta), dict(dag.timings)) if here else None, root=root)
    csr = run_shared(comm, "uploading the DAG's CSR", device_csr if here else None, be, dag)  # kept for phases 1-2
    ip, ix = csr if here else (None, None)
    ip, ix = tp.bcast(ip, root), tp.bcast(ix, root)
    level_ptr = bcast_array(comm, np.asarray(dag.level_ptr) if here else None, root)
    if here:
        return dag
    n, meta, timings = head
    return DAG(n=n, comp=None, indptr=ip, indices=ix, rindptr=None, rindices=None, level=None,
               level_ptr=level_ptr, meta=meta, timings=timings)


def bcast_forest(tp, forest, root: int = 0):
    """Rank 0's forest on every rank's device (host arrays are downloaded only when read)."""
    comm, be = tp.comm, tp.be
    here = comm.Get_rank() == root
    timings = comm.bcast(dict(forest.timings) if here else None, root=root)
    arrays = run_shared(comm, "uploading the forest", forest.arrays if here else None, be)
    parent, size = arrays if here else (None, None)
    parent, size = tp.bcast(parent, root), tp.bcast(size, root)
    if here:
        return forest
    if be.is_gpu:
        return Forest.on_device(be, parent, size, timings)
    return Forest(parent=parent, size=size, timings=timings)


def landing(be, shape, dtype, wanted: bool):
    """``(host array, prefault thread)`` for :func:`gather_blocks` to copy into, its pages touched
    in the background meanwhile (fresh pages cost as much as the copy: docs/benchmarks.md); None where the gathered array is not wanted."""
    if not wanted:
        return None
    out = np.empty(shape, dtype)
    return out, be.prefault(out)


class OwnBlockCopy:
    """Root 0's own block copied into the first rows of the landing host array on a thread and
    stream of its own, started as soon as the block is done: it overlaps the wait for the other
    ranks' blocks (:func:`gather_blocks` then copies only theirs). ``seconds``: the copy's time."""

    def __init__(self, be, block, landing):
        import threading

        self.rows, self.error, self.seconds = int(block.shape[0]), None, 0.0
        self.out = landing[0]
        be.synchronize()  # the block is complete before another stream reads it
        self.thread = threading.Thread(target=self._run, args=(be, block, landing), name="distgrail-own-labels",
                                       daemon=True)
        self.thread.start()

    def _run(self, be, block, landing):
        import contextlib
        import time

        t = time.perf_counter()
        try:
            landing[1].join()  # the pages are touched
            with be.on_device():
                with be.xp.cuda.Stream(non_blocking=True) if be.is_gpu else contextlib.nullcontext():
                    be.to_host(block, out=self.out[:self.rows])
        except BaseException as e:  # noqa: BLE001 - raised at the join, on the main thread
            self.error = e
        self.seconds = time.perf_counter() - t

    def join(self):
        self.thread.join()
        if self.error is not None:
            raise self.error


def copy_own_block(be, block, landing, here: bool, everywhere: bool, root: int = 0):
    """An :class:`OwnBlockCopy` of ``block`` where it pays and is simple (root 0, the labels
    wanted on the root only, a landing array of the labels' dtype); None elsewhere."""
    ok = here and root == 0 and not everywhere and landing is not None and landing[0].dtype == block.dtype
    return OwnBlockCopy(be, block, landing) if ok and tuple(landing[0].shape[1:]) == tuple(block.shape[1:]) else None


def gather_blocks(tp, block, everywhere: bool, what: str, root: int = 0, timings=None, landing=None, own=None,
                  transposed: bool = False):
    """Every rank's device ``block`` stacked in rank order, as a host array on root (and on every
    rank when ``everywhere``); None elsewhere. ``transposed``: the stacked (rows, cols) array comes
    to the host as (cols, rows), transposed on the device (:func:`land_transposed`). ``timings``
    gets ``gather_<what>``, ``bcast_<what>`` and ``<what>_to_host`` (with ``own``: also ``<what>_own_to_host``, the
    early copy's time, and ``<what>_own_wait``, the wait for it). ``landing``: from
    :func:`landing`, the host array to copy into; ``own``: from :func:`copy_own_block` on root,
    which then receives and copies only the other ranks' blocks."""
    import time

    comm, be = tp.comm, tp.be
    here = comm.Get_rank() == root
    t = time.perf_counter()
    full = tp.gatherv(block, root, keep_own=own is None)
    t1 = time.perf_counter()
    if everywhere:
        full = tp.bcast(full, root)
    t2 = time.perf_counter()

    def to_host(a):
        if own is not None:
            w = time.perf_counter()
            own.join()  # before the others' copy: both lock pages of one host array
            if timings is not None:
                timings[f"{what}_own_wait"] = time.perf_counter() - w
                timings[f"{what}_own_to_host"] = own.seconds
            if own.rows < landing[0].shape[0]:
                be.to_host(a, out=landing[0][own.rows:])
            return landing[0]
        return land_transposed(be, a, landing) if transposed else be.land(a, landing)

    host = run_shared(comm, f"copying the {what} to the host", to_host if everywhere or here else None, full)
    if timings is not None:
        timings[f"gather_{what}"] = timings.get(f"gather_{what}", 0.0) + t1 - t
        if everywhere:
            timings[f"bcast_{what}"] = timings.get(f"bcast_{what}", 0.0) + t2 - t1
        timings[f"{what}_to_host"] = timings.get(f"{what}_to_host", 0.0) + time.perf_counter() - t2
    return host


#: bytes of one slab :func:`land_transposed` transposes on the device at a time
TRANSPOSE_SLAB_BYTES = 1 << 28


def land_transposed(be, a, landing=None) -> np.ndarray:
    """Device ``a`` (rows, cols) as a C-contiguous host (cols, rows) array, into ``landing``'s array
    where its shape and dtype match (:meth:`~distgrail.gpu.backend.Backend.land`): slabs of at most
    :data:`TRANSPOSE_SLAB_BYTES` of columns, each transposed on the device and copied down (the
    host's strided transpose of the gathered phase-5 masks cost more than their gather and copy:
    docs/benchmarks.md)."""
    rows, cols = (int(x) for x in a.shape)
    dt = np.dtype(a.dtype)
    if landing is not None and tuple(landing[0].shape) == (cols, rows) and landing[0].dtype == dt:
        landing[1].join()
        out = landing[0]
    else:
        out = np.empty((cols, rows), dt)
    step = max(1, TRANSPOSE_SLAB_BYTES // max(1, rows * dt.itemsize))
    with be.on_device():
        for c0 in range(0, cols, step):
            c1 = min(cols, c0 + step)
            be.to_host(be.xp.ascontiguousarray(a[:, c0:c1].T), out=out[c0:c1])
    return out


def bcast_comp_level(tp, dag, root: int = 0):
    """``(comp, level)`` as host arrays on every rank (rank 0's, device to device)."""
    comm, be = tp.comm, tp.be
    here = comm.Get_rank() == root
    out = []
    for name in ("comp", "level"):
        a = run_shared(comm, f"uploading the DAG's {name}", upload if here else None, be, getattr(dag, name) if here
                       else None, f"the DAG's {name}")
        a = tp.bcast(a, root)
        out.append(run_shared(comm, f"copying the DAG's {name} to the host", be.to_host, a))
    return tuple(out)
