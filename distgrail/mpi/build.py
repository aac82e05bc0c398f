"""The index built across MPI ranks.

Nothing here runs at import time; ``mpi4py.MPI`` is imported by the functions that need it.

Building (:func:`build_index_distributed`)
    The ranks first agree on a transport (:func:`distgrail.mpi.transport.transport_for`):
    ``"nccl"`` (GPU to GPU) on a GPU backend where NCCL works on every rank, else ``"mpi"``
    (host memory; ``DISTGRAIL_NCCL=0`` forces it). Rank 0 reads the graph and condenses it with
    :func:`distgrail.placement.read_on` / :func:`~distgrail.placement.condense_on` (on its GPU
    for a GPU backend; a text file on a GPU backend with several ranks is parsed by all ranks
    instead, :func:`distgrail.mpi.parse.read_graph_ranks`, where that module is installed). The
    other ranks receive only what phases 3–4 read: the DAG's CSR (``indptr``, ``indices``) and
    ``level_ptr`` (:data:`ROOT_ONLY_DAG` stay on rank 0: the reverse CSR that only phase 1
    reads, and ``comp``/``level`` that only the assembled index holds). When the input is a
    ``.h5`` graph with a stored condensation (``distgrail convert``), every rank reads the
    condensation from the file itself instead (if some rank cannot, it is broadcast as above).
    Rank 0 computes phases 1–2 (the spanning forest and its subtree sizes) once and broadcasts
    them. The d dimensions are split into contiguous blocks, one per rank, rank 0's smaller
    (:func:`~distgrail.mpi.collectives.dims_split`: it also runs phases 1–2 and the write; ranks
    beyond d get none and wait). Phases 3–4 run on every rank for its block.

    With the ``"mpi"`` transport the DAG comes back to rank 0's host after the condensation and
    everything moves through host memory as before: each rank writes its label block straight
    into its node's shared label array (:mod:`distgrail.mpi.nodeshare`), node leaders then send
    the blocks of other nodes; without shared memory (``DISTGRAIL_SHM=0``, or /dev/shm too
    small) the blocks are gathered with ``Gatherv``. With ``"nccl"``
    (:mod:`distgrail.mpi.devicepath`) the DAG stays on rank 0's GPU and its CSR, the forest,
    each rank's label block (gathered to rank 0's GPU) and phase 5's mask words move device to
    device; rank 0 copies to the host only what the index holds. Rank 0 writes the one HDF5
    index (atomically).

    ``full_index_on="all"`` (the API's promise, :func:`distgrail.build_index` with ``comm``):
    afterwards every rank gets what queries need (labels, ``comp``, ``level``, post-order
    ranks) and **every rank returns the same, complete Index**. ``full_index_on="root"`` (the
    CLI): only rank 0 assembles the Index; the other ranks return None.
    Dimension i depends only on (seed, i), so the index is byte-identical to a one-process build.
    With ``backend="gpu"`` (or ``"auto"`` on GPU machines) each rank is bound to a GPU by its
    node-local rank (:func:`distgrail.mpi.binding.ensure_bound`) unless it is bound already.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np

from ..dtypes import smallest_uint
from ..errors import BackendError, DistGrailError
from ..index import assemble
from ..gpu.backend import BACKENDS, get_backend
from ..io.binary import read_condensation
from ..progress import Stages
from ..stages.condense import DAG, condense, dag_to_host
from ..stages.labeling import Forest, build_forest, check_label_args, label_dimensions, prefetch_csr
from ..io.read import detect_format
from ..placement import condense_on, read_on
from .binding import ensure_bound
from . import devicepath
from .collectives import bcast_array, bcast_dataclass, dims_split, offsets, root_share as _env_root_share
from .errors import mpi, own_comm, run_shared
from ..stages.supports import DEFAULT_SUPPORTS, resolve_supports
from .phase5 import supports_distributed
from .hostpath import labels_by_host as _labels_by_host, slowest as _slowest
from .transport import transport_for

__all__ = ["build_index_distributed", "ROOT_ONLY_DAG", "FULL_INDEX_ON"]


#: DAG arrays a rank that only labels does not receive: the reverse CSR (phase 1, on rank 0)
#: and the vertex -> component map and levels (only the assembled index holds them)
ROOT_ONLY_DAG = ("comp", "level", "rindptr", "rindices")
#: where the complete Index is assembled: on every rank (the API), or on rank 0 only (the CLI)
FULL_INDEX_ON = ("all", "root")


def _stored_condensation(g, dag):
    """The path of the ``.h5`` graph file ``dag`` was read from, or None when it was computed."""
    meta = getattr(g, "meta", None)
    return meta.get("path") if isinstance(meta, dict) and dag.meta.get("stored") else None


def _share_dag(comm, dag, g, root=0, tp=None):
    """Collective: ``(dag, graph, complete)`` on every rank. Other ranks read a stored
    condensation themselves (``complete``: they have every field) or receive the labeling
    fields by broadcast (the others are None): through host memory, or device to device with
    an NCCL transport ``tp`` (:func:`distgrail.mpi.devicepath.share_dag`)."""
    here = comm.Get_rank() == root
    # the file's digest is not sent here: it may still be hashing (it goes with the index, _share_digest)
    head = (g.name, _stored_condensation(g, dag), getattr(g, "meta", {}).get("node_labels")) if here else None
    name, path, labels = comm.bcast(head, root=root)  # the user's node labels too (small next to the DAG)
    g = g if here else SimpleNamespace(name=name, digest=None, meta={} if labels is None else {"node_labels": labels})
    if path is not None:
        want = comm.bcast((dag.n, dag.C, dag.m) if here else None, root=root)
        mine, ok = dag, True
        if not here:
            try:
                mine = read_condensation(path)
                ok = mine is not None and (mine.n, mine.C, mine.m) == tuple(want)
            except Exception:  # noqa: BLE001 - e.g. the file is not on this node: broadcast instead
                ok = False
        if comm.allreduce(ok, op=mpi().LAND):
            return mine, g, True
    if tp is not None and tp.name == "nccl":
        return devicepath.share_dag(tp, dag, root), g, here
    return bcast_dataclass(comm, dag, DAG, root, skip=ROOT_ONLY_DAG), g, here


def _text_file(path, fmt) -> bool:
    """True when ``path`` is a text graph (what rank-parallel parsing reads); False for a ``.h5``
    graph or a file that cannot be opened (rank 0 then reads alone and reports it)."""
    try:
        return fmt != "h5" and (fmt != "auto" or detect_format(path) != "h5")
    except OSError:
        return False


def _read(comm, be, graph, num_vertices, fmt, tp, name, root=0):
    """Collective read stage: a text file on a GPU backend with several ranks is parsed by all
    ranks (:func:`distgrail.mpi.parse.read_graph_ranks`, where installed); anything else is read
    by rank 0 alone (:func:`distgrail.build.read_on`: on the GPU for text files on a GPU backend).
    The graph on rank 0, None elsewhere."""
    here = comm.Get_rank() == root
    par = None
    if here and be.is_gpu and comm.Get_size() > 1 and isinstance(graph, (str, os.PathLike)):
        par = (os.fspath(graph), fmt, num_vertices) if _text_file(graph, fmt) else None
    par = comm.bcast(par, root=root)
    if par is not None:
        try:
            from .parse import read_graph_ranks
        except ImportError:
            read_graph_ranks = None
        if comm.allreduce(read_graph_ranks is not None, op=mpi().LAND):
            return read_graph_ranks(comm, par[0], par[1], par[2], be=be, transport=tp)
    return run_shared(comm, f"reading the graph {name}", read_on if here else None, be, graph, num_vertices, fmt)


def _condense_root(be, g, on_device):
    """Condense stage on rank 0: a stored condensation (``.h5`` graph) is read; else the GPU
    condensation on a GPU backend (:func:`distgrail.build.condense_on`). The DAG comes back to
    the host unless the transport moves device arrays (``on_device``)."""
    if isinstance(getattr(g, "meta", None), dict) and g.meta.get("condensation") is not None:
        return condense(g)
    dag = condense_on(be, g)
    return dag if on_device else dag_to_host(dag, be)


def _pending_digest(g):
    """The graph's digest without waiting for it: a running background digest stays one."""
    return g.digest_source if hasattr(g, "digest_source") else g.digest


def _share_digest(comm, g, everywhere, root):
    """Collective: root joins its background hash (a failure there is every rank's error) and
    sends the value where the index is assembled."""
    from ..io.digest import resolve

    here = comm.Get_rank() == root
    sha = run_shared(comm, "hashing the graph file", (lambda: resolve(g.digest)) if here else None)
    sha = comm.bcast(sha, root=root) if everywhere else sha
    if everywhere or here:
        g.digest = sha


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


def _check_args(dims, seed, parent_rule, full_index_on):
    check_label_args(dims, seed, parent_rule)
    if full_index_on not in FULL_INDEX_ON:
        raise DistGrailError(f"full_index_on must be one of {', '.join(FULL_INDEX_ON)}, got {full_index_on!r}")


def build_index_distributed(graph, dims: int = 5, seed: int = 0, parent_rule: str = "max-level", backend="auto",
                            fmt: str = "auto", num_vertices=None, output=None, comm=None, progress: bool = False,
                            full_index_on: str = "all", supports: int = DEFAULT_SUPPORTS, root_share=None):
    """Collective: build the index with phases 3–4 split over ``comm``'s ranks (see the module doc).

    ``graph``, ``fmt``, ``num_vertices`` and ``output`` are used on rank 0 only (other ranks may
    pass None or anything: rank 0's ``output`` decides whether the index is written, and every
    rank takes part in that step either way); ``dims``, ``seed``, ``parent_rule``, ``backend``
    and ``full_index_on`` must be the same on every rank. With ``full_index_on="all"`` every
    rank returns the same complete :class:`~distgrail.index.Index`; with ``"root"`` rank 0
    returns it and the other ranks None. ``comm=None`` uses a clone of COMM_WORLD.

    ``root_share`` (rank 0's is used): rank 0's share of the dimensions against an even split
    (:func:`~distgrail.mpi.collectives.dims_split`; None: ``DISTGRAIL_ROOT_SHARE``, else
    :data:`~distgrail.mpi.collectives.ROOT_SHARE`); ``index.meta["dims_split"]`` holds the
    dimensions per rank.

    ``index.timings`` holds rank 0's seconds per step: ``transport_setup`` (choosing the
    transport; on first use of a communicator with NCCL also the unique id's broadcast and
    starting ``ncclCommInitRank`` in the background: ``nccl_init`` and ``nccl_warmup`` are its
    seconds on that thread, ``nccl_wait`` the main thread's wait for it at the first NCCL
    transfer), ``read`` (with rank-parallel
    parsing also the steps it reports in the graph's ``meta["timings"]``, e.g. ``parse share``
    and ``exchange``), ``condense``, ``bcast_dag``, ``phases 1-2``, ``bcast_forest``,
    ``phases 3-4``, the labels' way to rank 0 (host path: ``alloc_labels``, the node-shared
    array, and ``gather_labels``, the node barrier and transfers between nodes or the
    ``Gatherv``; NCCL path: ``gather_labels`` device to device and ``labels_to_host``; with
    ``full_index_on="root"`` rank 0 copies its own block early, ``labels_own_to_host``, and
    waits for that copy, ``labels_own_wait``), ``phase
    5``, and with ``full_index_on="all"`` ``bcast_labels`` and ``bcast_index`` (post-order
    ranks, comp and level); on the NCCL path ``dag_to_host`` (the DAG arrays the index holds);
    ``write``. ``phases 3-4``, ``phase34_setup``, ``phase3_ranks``, ``phase4_intervals`` and
    ``phase34_to_host`` (``phase34_cast`` on the NCCL path) are those of the slowest rank,
    ``phases 3-4 rank0`` is rank 0's, and ``phases 3-4 own slowest`` / ``fastest`` are the
    most and least time a rank spent on its own phases 3–4 work (without waiting for the
    others). Every other rank's own steps follow as ``rank<r> <step>``. ``index.meta
    ["transport"]`` says which transport ran (``"nccl"`` or ``"mpi"``; not stored in the file).
    """
    if not (backend in BACKENDS or hasattr(backend, "xp")):
        raise BackendError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    comm, owned = own_comm(comm)
    try:
        me, size = comm.Get_rank(), comm.Get_size()
        root = 0
        here = me == root
        run_shared(comm, "checking the arguments", _check_args, dims, seed, parent_rule, full_index_on)
        mine = (int(dims), int(seed), str(parent_rule), str(getattr(backend, "name", backend)), full_index_on)
        allargs = comm.allgather(mine)
        if any(a != allargs[0] for a in allargs):
            bad = next(r for r, a in enumerate(allargs) if a != allargs[0])
            raise DistGrailError("dims, seed, parent_rule, backend and full_index_on must be the same on every rank; "
                                 f"rank 0 has {allargs[0]}, rank {bad} has {allargs[bad]}")
        everywhere = full_index_on == "all"
        write = comm.bcast(output is not None if here else None, root=root)  # rank 0's output decides
        name = os.fspath(graph) if isinstance(graph, (str, os.PathLike)) else type(graph).__name__
        dev = ensure_bound(comm, backend)
        be = run_shared(comm, "selecting the backend", get_backend, backend, dev)
        run_shared(comm, "checking the output path", _check_output if here else None, output)
        timings = {}
        with Stages(progress and here, total=12) as st:
            tp = st.run("transport_setup", transport_for, comm, be)
            nccl = tp.name == "nccl"
            g = st.run("read", _read, comm, be, graph, num_vertices, fmt, tp, name, root)
            if here and isinstance(g.meta.get("timings"), dict):  # rank-parallel parsing's own steps
                timings.update(g.meta["timings"])
            dag = st.run("condense", run_shared, comm, "condensing cycles", _condense_root if here else None,
                         be, g, nccl)
            if here:  # the edges are not needed any more (on the GPU: give their memory back)
                g = SimpleNamespace(name=g.name, digest=_pending_digest(g), meta=g.meta)
            dag, g, complete = st.run("bcast_dag", _share_dag, comm, dag, g, root, tp)
            forest = st.run("phases 1-2", run_shared, comm, "computing phases 1-2 (forest, subtree sizes)",
                            build_forest if here else prefetch_csr if isinstance(dag.indptr, np.ndarray) else None,
                            dag, seed, parent_rule, be)
            if nccl:
                forest = st.run("bcast_forest", devicepath.bcast_forest, tp, forest, root)
            else:
                forest = st.run("bcast_forest", bcast_dataclass, comm, forest, Forest, root)
            timings.update(forest.timings)

            share = run_shared(comm, "reading DISTGRAIL_ROOT_SHARE", _env_root_share if here and root_share is None
                               else None) if root_share is None else root_share
            counts = run_shared(comm, "splitting the dimensions", dims_split, dims, size, comm.bcast(share, root=root))
            lo, hi = int(offsets(counts)[me]), int(offsets(counts)[me + 1])
            what = (f"labeling dimensions {lo}..{hi - 1}" if hi - lo > 1 else f"labeling dimension {lo}"
                    if hi > lo else "labeling (no dimension on this rank)")
            local_t = {}
            if nccl:  # labels stay on each rank's GPU and meet on rank 0's
                # the host pages of the gathered labels get ready while the GPUs label
                landing = run_shared(comm, "allocating host memory for the labels", devicepath.landing, be,
                                     (dims, dag.C, 2), smallest_uint(max(dag.C - 1, 0)), everywhere or here)
                post0, iv = st.run("phases 3-4", run_shared, comm, what, label_dimensions, dag, forest,
                                   range(lo, hi), seed, be, local_t, None, on_device=True)
                local_t["phases 3-4"] = st.timings["phases 3-4"]
                own = devicepath.copy_own_block(be, iv, landing, here, everywhere, root)  # while the others label
                timings.update(_slowest(comm, local_t))
                labels = devicepath.gather_blocks(tp, iv, everywhere, "labels", root, st.timings, landing, own)
                del iv
            else:
                labels, post0 = _labels_by_host(st, comm, dag, forest, counts, lo, hi, what, seed, be, local_t,
                                                timings, everywhere, root)
            if everywhere or here:
                forest.release_device()  # the index keeps host copies
            K = resolve_supports(supports, dag)  # "auto": from the shared DAG's C and m, same on every rank
            sup = st.run("phase 5", supports_distributed, comm, dag, K, seed, be, everywhere, root,
                         tp if nccl else None) if K else None
            if everywhere:  # what queries need, on every rank; rank 0 always owns dimension 0
                post0, dag = st.run("bcast_index", _bcast_for_queries, comm, post0, dag, complete, root,
                                    tp if nccl else None)
            if nccl and (everywhere or here):
                dag = st.run("dag_to_host", devicepath.host_dag, dag, be)  # only what the index holds
            _share_digest(comm, g, everywhere, root)  # the background hash is joined only now
            tp.ready()  # a background NCCL set-up that failed fails the build, even if nothing waited for it
            # the last collective before the write: the index is whole where it is wanted
            idx = run_shared(comm, "assembling the index", assemble if everywhere or here else None, g, dag, forest,
                             post0, labels, dims, seed, parent_rule, supports=sup)
            if write:  # every rank enters the step, whatever it passed as output
                st.run("write", run_shared, comm, f"writing the index {os.fspath(output) if here else ''}",
                       idx.save if here else None, output)
        setup_t = tp.take_timings()  # nccl_init, nccl_warmup, nccl_wait: where this build set NCCL up
        mine = {**st.timings, **timings, **setup_t}
        per_rank = comm.gather({**st.timings, **local_t, **setup_t}, root=root)  # each rank's own steps
        if here:  # every other rank's own timings beside rank 0's, as "rank<r> <step>"
            mine.update({f"rank{r} {k}": v for r, t in enumerate(per_rank) if r != root for k, v in t.items()})
        if everywhere:
            idx.timings = comm.bcast(mine if here else None, root=root)
        elif here:
            idx.timings = mine
        if idx is not None:
            idx.meta["backend"] = be.name
            idx.meta["transport"] = tp.name
            idx.meta["dims_split"] = counts.tolist()
        return idx
    finally:
        if owned:
            comm.Free()


def _bcast_for_queries(comm, post0, dag, complete, root, tp=None):
    """Collective: rank 0's post-order ranks, and ``comp``/``level`` where they were not sent
    (device to device with an NCCL transport ``tp``)."""
    here = comm.Get_rank() == root
    post0 = bcast_array(comm, post0 if here else None, root)
    need = comm.allreduce(not complete, op=mpi().LOR)
    if need and tp is not None:
        comp, level = devicepath.bcast_comp_level(tp, dag, root)
        if not complete:
            dag.comp, dag.level = comp, level
    elif need:
        comp = bcast_array(comm, dag.comp if here else None, root)
        level = bcast_array(comm, dag.level if here else None, root)
        if not complete:
            dag.comp, dag.level = comp, level
    return post0, dag
