"""The index built across MPI ranks.

Nothing here runs at import time; ``mpi4py.MPI`` is imported by the functions that need it.

Building (:func:`build_index_distributed`)
    Rank 0 reads the graph and condenses it; the DAG is broadcast without its reverse CSR
    (:data:`ROOT_ONLY_DAG`: only phase 1 reads it, and phase 1 runs on rank 0; on the other
    ranks those fields are None). Rank 0 computes phases 1–2
    (the spanning forest and its subtree sizes) once and broadcasts them. The d dimensions are
    split into contiguous blocks, one per rank (rank r gets ``d // P`` dimensions, one more if
    ``r < d % P``; ranks beyond d get none and wait). Phases 3–4 run on every rank for its
    block, which it writes straight into its node's shared label array
    (:mod:`distgrail.mpi.nodeshare`); node leaders exchange the blocks of other nodes. Without
    shared memory (``DISTGRAIL_SHM=0``, or /dev/shm too small) the blocks are gathered to rank
    0 and broadcast back instead. Rank 0 writes the one HDF5 index (atomically), and **every
    rank returns the same, complete Index**.
    Dimension i depends only on (seed, i), so the index is byte-identical to a one-process build.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np

from ..dtypes import smallest_uint
from ..errors import BackendError, DistGrailError
from ..index import assemble
from ..gpu.backend import BACKENDS, get_backend
from ..progress import Stages
from ..stages.condense import DAG, condense
from ..stages.labeling import Forest, build_forest, check_label_args, label_dimensions, prefetch_csr
from ..io.read import as_graph
from .collectives import CHUNK_BYTES, bcast_array, bcast_dataclass, gather_rows, offsets, split_counts
from .errors import mpi, own_comm, run_shared
from .nodeshare import NodeGroups, room_for, shm_enabled

__all__ = ["build_index_distributed", "ROOT_ONLY_DAG"]


#: DAG arrays only the root reads (phase 1 runs there): the reverse CSR, half the DAG's bytes
ROOT_ONLY_DAG = ("rindptr", "rindices")


def _bcast_dag(comm, dag, g, root=0):
    name, sha = comm.bcast((g.name, g.sha256) if comm.Get_rank() == root else None, root=root)
    dag = bcast_dataclass(comm, dag, DAG, root, skip=ROOT_ONLY_DAG)
    return dag, (g if comm.Get_rank() == root else SimpleNamespace(name=name, sha256=sha))


def _check_output(output):
    if output is None:
        return
    if not isinstance(output, (str, os.PathLike)):
        raise DistGrailError(f"output must be a path or None, got {output!r}")
    d = os.path.dirname(os.path.abspath(os.fspath(output)))
    if not os.path.isdir(d):
        raise DistGrailError(f"{os.fspath(output)}: cannot write the index: directory {d} does not exist")
    if not os.access(d, os.W_OK):
        raise DistGrailError(f"{os.fspath(output)}: cannot write the index: directory {d} is not writable")


def build_index_distributed(graph, dims: int = 5, seed: int = 0, parent_rule: str = "max-level", backend="auto",
                            fmt: str = "auto", num_vertices=None, output=None, comm=None, progress: bool = False):
    """Collective: build the index with phases 3–4 split over ``comm``'s ranks (see the module doc).

    ``graph``, ``fmt``, ``num_vertices`` and ``output`` are used on rank 0 only (other ranks may
    pass None); ``dims``, ``seed``, ``parent_rule`` and ``backend`` must be the same on every
    rank. Every rank returns the same complete :class:`~distgrail.index.Index`; rank 0 writes
    ``output``. ``comm=None`` uses a clone of COMM_WORLD.

    ``index.timings`` holds, besides the stages of a one-process build, ``bcast_dag``,
    ``bcast_forest``, ``alloc_labels`` (grouping ranks by node, allocating the node-shared label
    array), ``gather_labels`` (node barrier and the exchange between nodes, or the ``Gatherv``
    to rank 0) and ``bcast_labels`` (every rank's own copy of the labels); ``phases 3-4``,
    ``phase34_setup``, ``phase3_ranks``, ``phase4_intervals`` and ``phase34_to_host`` are those
    of the slowest rank, ``phases 3-4 rank0`` is rank 0's, and ``phases 3-4 own slowest`` /
    ``fastest`` are the most and least time a rank spent on its own phases 3–4 work (without
    waiting for the others).
    """
    check_label_args(dims, seed, parent_rule)  # identical on every rank, before any collective
    if not (backend in BACKENDS or hasattr(backend, "xp")):
        raise BackendError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    comm, owned = own_comm(comm)
    try:
        me, size = comm.Get_rank(), comm.Get_size()
        root = 0
        mine = (int(dims), int(seed), str(parent_rule), str(getattr(backend, "name", backend)))
        allargs = comm.allgather(mine)
        if any(a != allargs[0] for a in allargs):
            bad = next(r for r, a in enumerate(allargs) if a != allargs[0])
            raise DistGrailError("dims, seed, parent_rule and backend must be the same on every rank; rank 0 has "
                                 f"{allargs[0]}, rank {bad} has {allargs[bad]}")
        here = me == root
        name = os.fspath(graph) if isinstance(graph, (str, os.PathLike)) else type(graph).__name__
        be = run_shared(comm, "selecting the backend", get_backend, backend)
        run_shared(comm, "checking the output path", _check_output if here else None, output)
        timings = {}
        with Stages(progress and here, total=9) as st:
            g = st.run("read", run_shared, comm, f"reading the graph {name}",
                       as_graph if here else None, graph, num_vertices, fmt)
            dag = st.run("condense", run_shared, comm, "condensing cycles", condense if here else None, g)
            dag, g = st.run("bcast_dag", _bcast_dag, comm, dag, g, root)
            forest = st.run("phases 1-2", run_shared, comm, "computing phases 1-2 (forest, subtree sizes)",
                            build_forest if here else prefetch_csr, dag, seed, parent_rule, be)
            forest = st.run("bcast_forest", bcast_dataclass, comm, forest, Forest, root)
            timings.update(forest.timings)

            counts = split_counts(dims, size)
            lo, hi = int(offsets(counts)[me]), int(offsets(counts)[me + 1])
            what = (f"labeling dimensions {lo}..{hi - 1}" if hi - lo > 1 else f"labeling dimension {lo}"
                    if hi > lo else "labeling (no dimension on this rank)")
            local_t = {}
            ut = np.dtype(smallest_uint(max(dag.C - 1, 0)))  # the labels' dtype, the same on every rank
            shape = (dims, dag.C, 2)
            nodes, buf = st.run("alloc_labels", _shared_labels, comm, shape, ut)
            try:
                post0, iv = st.run("phases 3-4", run_shared, comm, what, label_dimensions, dag, forest,
                                  range(lo, hi), seed, be, local_t, None if buf is None else buf[lo:hi])
                local_t["phases 3-4"] = st.timings["phases 3-4"]
                keys = ("phases 3-4", "phase34_setup", "phase3_ranks", "phase4_intervals", "phase34_to_host")
                slow = np.array([local_t.get(k, 0.0) for k in keys])
                comm.Allreduce(mpi().IN_PLACE, slow, op=mpi().MAX)
                timings.update(dict(zip(keys, slow.tolist())))
                timings["phases 3-4 rank0"] = local_t["phases 3-4"]
                own = sum(local_t.get(k, 0.0) for k in keys[1:])  # this rank's work, without waiting
                every = comm.allgather(own)
                timings["phases 3-4 own slowest"], timings["phases 3-4 own fastest"] = max(every), min(every)
                if buf is not None:  # every rank wrote its block into its node's shared array
                    st.run("gather_labels", nodes.allgather_rows, buf, counts, CHUNK_BYTES)
                    labels = st.run("bcast_labels", run_shared, comm, "copying the labels", np.array, buf)
                else:
                    iv = np.ascontiguousarray(iv).reshape(hi - lo, dag.C, 2)
                    out = st.run("gather_labels", _gather_labels, comm, iv, counts, dag.C, ut.str, root)
                    labels = st.run("bcast_labels", bcast_array, comm, out, root)
            finally:
                if nodes is not None:
                    nodes.free()
            # rank 0 always owns dimension 0: its post-order rank is the reference
            post0 = bcast_array(comm, post0 if here else None, root)
            # the last collective before the write: every rank has all it needs and is fine
            idx = run_shared(comm, "assembling the index", assemble, g, dag, forest, post0, labels, dims, seed,
                             parent_rule)
            if output is not None:
                st.run("write", run_shared, comm, f"writing the index {os.fspath(output)}",
                       idx.save if here else None, output)
        idx.timings = comm.bcast({**st.timings, **timings} if here else None, root=root)
        idx.meta["backend"] = be.name
        return idx
    finally:
        if owned:
            comm.Free()


def _shared_labels(comm, shape, dtype):
    """Collective: ``(nodes, array)``, the label array shared by the ranks of each node, or
    ``(None, None)`` when shared memory is turned off or /dev/shm lacks room on some rank."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    ok = comm.allreduce(bool(shm_enabled() and room_for(nbytes)), op=mpi().LAND)
    if not ok:
        return None, None
    nodes = run_shared(comm, "grouping the ranks by node", NodeGroups, comm)
    try:
        return nodes, run_shared(comm, f"allocating {nbytes / 2**20:.0f} MiB of node-shared labels",
                                 nodes.array, shape, dtype)
    except BaseException:
        nodes.free()
        raise


def _gather_labels(comm, iv, counts, C, dt, root):
    here = comm.Get_rank() == root
    out = run_shared(comm, "allocating the gathered labels",
                     (lambda: np.empty((int(np.sum(counts)), C, 2), dtype=np.dtype(dt))) if here else None)
    return gather_rows(comm, iv, counts, out, root)
