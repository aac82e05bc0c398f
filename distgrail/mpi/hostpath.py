"""The labels' way to rank 0 through host memory (the ``"mpi"`` transport of
:class:`distgrail.mpi.placement.AcrossRanks`): each rank writes its block of dimensions
straight into its node's shared label array (:mod:`distgrail.mpi.nodeshare`; node leaders then
send the blocks of other nodes), or, without shared memory, the blocks are gathered with
``Gatherv``. Blocks land in rank order, which is dimension order (contiguous blocks).
"""

from __future__ import annotations

import numpy as np

from ..dtypes import smallest_uint
from .collectives import CHUNK_BYTES, bcast_array, gather_rows, receive_buffer
from .errors import mpi, run_shared
from .nodeshare import NodeGroups, room_for, shm_enabled

__all__ = ["labels_by_host", "slowest", "shared_labels", "gather_labels"]


def labels_by_host(st, comm, run, entry, dag, forest, counts, lo, hi, what, local_t, timings, everywhere, root):
    """``entry`` (phases 3–4, :func:`distgrail.stages.phases.labels`) on this rank's dimensions
    ``lo..hi-1`` and the labels' way to rank 0 (and every rank) through host memory: each rank
    writes its block into its node's shared array, or ``Gatherv`` without shared memory. ``st``:
    the pipeline's :class:`~distgrail.progress.Steps` (the sub-steps are timed into it)."""
    here = comm.Get_rank() == root
    ut = np.dtype(smallest_uint(max(dag.C - 1, 0)))  # the labels' dtype, the same on every rank
    dims = int(np.sum(counts))
    with st.stage("alloc_labels"):
        nodes, buf = shared_labels(comm, (dims, dag.C, 2), ut)
    try:
        with st.stage("phases 3-4"):
            post0, iv = run_shared(comm, what, entry, run, dag, forest, range(lo, hi), local_t,
                                   None if buf is None else buf[lo:hi])
        local_t["phases 3-4"] = st.timings["phases 3-4"]
        timings.update(slowest(comm, local_t))
        if buf is not None:  # every rank wrote its block into its node's shared array
            with st.stage("gather_labels"):
                if everywhere:
                    nodes.allgather_rows(buf, counts, CHUNK_BYTES)
                else:
                    nodes.gather_rows_to_root(buf, counts, CHUNK_BYTES)
            with st.stage("bcast_labels" if everywhere else "copy_labels"):
                labels = run_shared(comm, "copying the labels", np.array if everywhere or here else None, buf)
        else:
            iv = np.ascontiguousarray(iv).reshape(hi - lo, dag.C, 2)
            with st.stage("gather_labels"):
                labels = gather_labels(comm, iv, counts, dag.C, ut.str, root)
            if everywhere:
                with st.stage("bcast_labels"):
                    labels = bcast_array(comm, labels, root)
    finally:
        if nodes is not None:
            nodes.free()
    return labels, post0


def slowest(comm, local_t):
    """Collective: the phases 3-4 timings of the slowest rank, rank 0's, and the most and least
    time a rank spent on its own work."""
    keys = ("phases 3-4", "phase34_setup", "phase3_ranks", "phase4_intervals", "phase34_to_host", "phase34_cast")
    slow = np.array([local_t.get(k, 0.0) for k in keys])
    comm.Allreduce(mpi().IN_PLACE, slow, op=mpi().MAX)
    out = {k: v for k, v in zip(keys, slow.tolist()) if k in local_t or k == "phases 3-4"}
    out["phases 3-4 rank0"] = comm.bcast(local_t["phases 3-4"], root=0)
    every = comm.allgather(sum(local_t.get(k, 0.0) for k in keys[1:]))  # own work, without waiting
    out["phases 3-4 own slowest"], out["phases 3-4 own fastest"] = max(every), min(every)
    return out


def shared_labels(comm, shape, dtype):
    """Collective: ``(nodes, array)``, the label array shared by the ranks of each node, or
    ``(None, None)`` when shared memory is turned off or /dev/shm lacks room on some rank."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    # (DISTGRAIL_SHM is read inside run_shared: a malformed value on some ranks only ends every rank)
    wanted = run_shared(comm, "reading DISTGRAIL_SHM", shm_enabled)
    ok = comm.allreduce(bool(wanted and room_for(nbytes)), op=mpi().LAND)
    if not ok:
        return None, None
    nodes = run_shared(comm, "grouping the ranks by node", NodeGroups, comm)
    try:
        return nodes, run_shared(comm, f"allocating {nbytes / 2**20:.0f} MiB of node-shared labels",
                                 nodes.array, shape, dtype)
    except BaseException:
        nodes.free()
        raise


def gather_labels(comm, iv, counts, C, dt, root):
    here = comm.Get_rank() == root
    out = run_shared(comm, "allocating the gathered labels", receive_buffer if here else None,
                     (int(np.sum(counts)), C, 2), dt)
    return gather_rows(comm, iv, counts, out, root)
