"""The build's steps across MPI ranks: :class:`AcrossRanks`, the placement that
:func:`distgrail.build.build_index` walks when given a communicator of several ranks.

Nothing here runs at import time; ``mpi4py.MPI`` is imported by the functions that need it.
Every method is collective over the communicator: a failure on one rank is every rank's
:class:`~distgrail.mpi.errors.RankError` (:func:`~distgrail.mpi.errors.run_shared`).

The ranks first agree on a transport (:func:`distgrail.mpi.transport.transport_for`):
``"nccl"`` (GPU to GPU) on a GPU backend where NCCL works on every rank, else ``"mpi"`` (host
memory; ``DISTGRAIL_NCCL=0`` forces it). Rank 0 reads the graph and condenses it on its device
(:func:`distgrail.stages.phases.read_on` / :func:`~distgrail.stages.phases.condense_on`; a text file on a
GPU backend with several ranks is parsed by all ranks instead,
:func:`distgrail.mpi.parse.read_graph_ranks`). The other ranks receive only what phases 3–4
read: the DAG's CSR (``indptr``, ``indices``) and ``level_ptr`` (:data:`ROOT_ONLY_DAG` stay on
rank 0: the reverse CSR that only phase 1 reads, and ``comp``/``level`` that only the assembled
index holds). When the input is a ``.h5`` graph with a stored condensation (``distgrail
convert``), every rank reads the condensation from the file itself instead (if some rank cannot,
it is broadcast). Rank 0 computes phases 1–2 (the spanning forest and its subtree sizes) once
and broadcasts them. The d dimensions are split into contiguous blocks, one per rank, rank 0's
smaller (:func:`~distgrail.mpi.collectives.dims_split`: it also runs phases 1–2 and the write;
ranks beyond d get none and wait). Phases 3–4 run on every rank for its block; phase 5's mask
words are split over the ranks too, the last ranks first, and each rank's words start before
phases 1–2 (:func:`distgrail.mpi.phase5.start_distributed`).

With the ``"mpi"`` transport rank 0 keeps its DAG on its device for its own steps and sends a
host copy (which it also keeps for the index file: no device → host → device round trip), each
rank writes its label block straight into its node's shared label array
(:mod:`distgrail.mpi.nodeshare`; node leaders then send the blocks of other nodes), or, without
shared memory (``DISTGRAIL_SHM=0``, or /dev/shm too small), the blocks are gathered with
``Gatherv`` (:mod:`distgrail.mpi.hostpath`). With ``"nccl"`` (:mod:`distgrail.mpi.devicepath`)
the DAG's CSR, the forest, each rank's label block (gathered to rank 0's GPU) and phase 5's
mask words move device to device; rank 0 copies to the host only what the index holds. Rank 0
writes the one HDF5 index (atomically).

``full_index_on="all"`` (the API's promise): afterwards every rank gets what queries need
(labels, ``comp``, ``level``, post-order ranks) and **every rank returns the same, complete
Index**. ``full_index_on="root"`` (the CLI): only rank 0 assembles the Index; the other ranks
return None. Dimension i depends only on (seed, i), so the index is byte-identical to a
one-process build. With a GPU backend each rank is bound to a GPU by its node-local rank
(:func:`distgrail.mpi.binding.ensure_bound`) unless it is bound already.

Timings (``index.timings``, rank 0's seconds per step): ``transport_setup`` (on first use of a
communicator with NCCL also the unique id's broadcast and starting ``ncclCommInitRank`` in the
background: ``nccl_init`` and ``nccl_warmup`` are its seconds on that thread, ``nccl_wait`` the
main thread's wait for it at the first NCCL transfer), ``read`` (with rank-parallel parsing also
the steps it reports, e.g. ``parse share`` and ``exchange``), ``condense``, ``bcast_dag``,
``phases 1-2``, ``bcast_forest``, ``phases 3-4``, the labels' way to rank 0 (host path:
``alloc_labels``, ``gather_labels``, ``copy_labels``/``bcast_labels``; NCCL path:
``gather_labels`` and ``labels_to_host``, with ``full_index_on="root"`` also
``labels_own_to_host`` and ``labels_own_wait``), ``write_open`` (rank 0's index file laid out, the
DAG to the host: :class:`~distgrail.build.EarlyWrite`), ``phase 5``, ``bcast_index``,
``dag_to_host`` (0 where ``write_open`` did it), ``write``. ``phases 3-4``, ``phase34_setup``,
``phase3_ranks``, ``phase4_intervals`` and
``phase34_to_host`` (``phase34_cast`` on the NCCL path) are those of the slowest rank, ``phases
3-4 rank0`` is rank 0's, and ``phases 3-4 own slowest`` / ``fastest`` the most and least time a
rank spent on its own phases 3–4 work. Every other rank's own steps follow as ``rank<r> <step>``.
``index.meta["transport"]`` says which transport ran; ``index.meta["dims_split"]`` holds the
dimensions per rank.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np

from ..arrays import to_host
from ..dtypes import smallest_uint
from ..errors import DistGrailError, GraphFormatError
from ..gpu.backend import get_backend
from ..index import assemble
from ..io.binary import read_condensation
from ..io.read import detect_format
from ..placement import check_output, host_landing, index_dag_to_host, light_graph
from ..stages import deep, phases
from ..stages.condense import DAG, dag_to_host
from ..stages.labeling import Forest, prefetch_csr
from . import devicepath
from .binding import ensure_bound
from .collectives import bcast_array, bcast_dataclass, dims_split, offsets, root_share as env_root_share
from .errors import mpi, own_comm, run_shared
from .hostpath import labels_by_host, slowest
from .phase5 import start_distributed
from .transport import transport_for

__all__ = ["AcrossRanks", "ROOT_ONLY_DAG"]

#: DAG arrays a rank that only labels does not receive: the reverse CSR (phase 1, on rank 0)
#: and the vertex -> component map and levels (only the assembled index holds them)
ROOT_ONLY_DAG = ("comp", "level", "rindptr", "rindices")


def _text_file(path, fmt) -> bool:
    """True when ``path`` is a text graph (what rank-parallel parsing reads); False for a ``.h5``
    graph or a file that cannot be opened (rank 0 then reads alone and reports it)."""
    if fmt != "auto":
        return fmt != "h5"
    if os.path.splitext(os.fspath(path))[1].lower() == ".gra":
        return True  # by name: no need to open it
    try:
        return detect_format(path) != "h5"
    except (OSError, GraphFormatError):  # (a compressed head that does not inflate: rank 0 reports it)
        return False


def _stored_condensation(g, dag):
    """The path of the ``.h5`` graph file ``dag`` was read from, or None when it was computed."""
    meta = getattr(g, "meta", None)
    return meta.get("path") if isinstance(meta, dict) and dag.meta.get("stored") else None


def _same_options(every: list) -> None:
    """Refuse build options that differ between ranks (``every``: each rank's ``config.agreed()``)."""
    if any(a != every[0] for a in every):
        bad = next(r for r, a in enumerate(every) if a != every[0])
        raise DistGrailError("dims, seed, parent_rule, backend, full_index_on, supports, partition and layout must be "
                             f"the same on every rank; rank 0 has {every[0]}, rank {bad} has {every[bad]}")


class AcrossRanks:
    """The build's moves, collective over ``comm``'s ranks (a
    :class:`~distgrail.placement.Placement`; see the module doc)."""

    idle_steps = ()
    #: phase 5's words are the last ranks' (:func:`~distgrail.mpi.phase5.word_split`): they sweep
    #: while rank 0 computes phases 1–2
    masks_before_forest = True

    def __init__(self, comm, owned, be, config, writes, counts):
        self.comm, self.owned, self.be, self.config = comm, owned, be, config
        self.backend_name = be.name  # (the backend asked for: a deep DAG's phases may run on the host)
        self.run = phases.StageRun(be, config)
        self.root = 0
        self.me = comm.Get_rank()
        self.here = self.me == self.root
        self.everywhere = config.full_index_on == "all"
        self.writes = writes
        self.counts = counts  # dimensions per rank
        self.lo, self.hi = int(offsets(counts)[self.me]), int(offsets(counts)[self.me + 1])
        self.tp = None
        self.nccl = False
        self.steps = None
        self.complete = True  # this rank holds every DAG field (rank 0, or read from a stored condensation)
        self.dag_host = None  # rank 0, host transport: the host copy of its device DAG it sent
        self.host_dag = None  # (dag, its host copies) made before phase 5's wait (before_masks_wait)
        self.stage_timings = {}  # the stages' own sub-steps (phase1_forest, slowest phases 3-4, ...)
        self.own_timings = {}  # this rank's own phases 3-4 sub-steps
        self.own_labels = None  # split layout: (first dimension, this rank's label block) it writes itself
        self.held_rows = {}  # split layout: other {dataset: (first row, rows)} this rank writes (DAG, forest, masks)
        self.share_landing = {}  # split layout: {dataset: (host array, prefault thread)} for this rank's share
        self.split = writes and config.layout == "split"  # every rank writes its part (mpi.splitwrite)

    @classmethod
    def open(cls, comm, config):
        """Collective: the configuration equal on every rank, each rank bound to its GPU, the
        backend chosen (once, here), rank 0's output path checked (in the split layout every
        rank's directory for its part too), the dimensions split."""
        comm, owned = own_comm(comm)
        try:
            here = comm.Get_rank() == 0
            every = comm.allgather(config.agreed())
            # (judged by rank 0 and shared: the error printed once, as one rank's, not by every rank)
            run_shared(comm, "comparing the build options of every rank", _same_options if here else None, every)
            writes = comm.bcast(config.output is not None if here else None, root=0)  # rank 0's output decides
            dev = ensure_bound(comm, config.backend)
            be = run_shared(comm, "selecting the backend", get_backend, config.backend, dev)
            run_shared(comm, "checking the output path", check_output if here else None, config.output)
            if writes and config.layout == "split":  # every rank writes its part beside it: each checks its own
                from ..indexfile.split import check_part_dir

                output = comm.bcast(os.fspath(config.output) if here else None, root=0)
                run_shared(comm, "checking the output path", None if here else check_part_dir, output, comm.Get_rank())
            share = config.root_share
            if share is None:
                share = run_shared(comm, "reading DISTGRAIL_ROOT_SHARE", env_root_share if here else None)
            counts = run_shared(comm, "splitting the dimensions", dims_split, config.dims, comm.Get_size(),
                                comm.bcast(share, root=0))
        except BaseException:
            if owned:
                comm.Free()
            raise
        return cls(comm, owned, be, config, writes, counts)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.owned:
            self.comm.Free()
        return False

    # -- steps, in pipeline order ----------------------------------------------------------
    def connect(self):
        """Agree on the transport (NCCL set up in the background where it works on every rank)."""
        self.tp = transport_for(self.comm, self.be)
        self.nccl = self.tp.name == "nccl"

    def read(self, graph, digest=None):
        """A text file on a GPU backend is parsed by all ranks (:func:`distgrail.mpi.parse.read_graph_ranks`);
        anything else is read by rank 0 alone. The graph on rank 0, None elsewhere."""
        comm, be, root = self.comm, self.be, self.root
        fmt, num_vertices = self.config.fmt, self.config.num_vertices
        name = os.fspath(graph) if isinstance(graph, (str, os.PathLike)) else type(graph).__name__
        par = None
        if self.here and be.is_gpu and isinstance(graph, (str, os.PathLike)):
            par = (os.fspath(graph), fmt, num_vertices) if _text_file(graph, fmt) else None
        par = comm.bcast(par, root=root)
        g = None
        if par is not None:
            try:
                from .parse import read_graph_ranks
            except ImportError:  # a trimmed install: rank 0 reads alone
                read_graph_ranks = None
            if not comm.allreduce(read_graph_ranks is not None, op=mpi().LAND):
                par = None
        if par is not None:
            g = read_graph_ranks(comm, par[0], par[1], par[2], be=be, transport=self.tp)
        else:
            g = run_shared(comm, f"reading the graph {name}", phases.read if self.here else None, self.run, graph,
                           digest)
        meta = getattr(g, "meta", None) if self.here else None
        if isinstance(meta, dict) and isinstance(meta.get("timings"), dict):  # rank-parallel parsing's own steps
            self.stage_timings.update(meta["timings"])
        return g

    def condense(self, entry, g):
        """On rank 0's device (a stored condensation is read); None elsewhere."""
        return run_shared(self.comm, "condensing cycles", entry if self.here else None, self.run, g)

    def without_edges(self, g):
        return light_graph(g) if self.here else g

    def share_dag(self, dag, g):
        """``(dag, graph)`` on every rank: other ranks read a stored condensation themselves or
        receive the labeling fields (the others are None), device to device with NCCL; rank 0
        keeps its own DAG (on its device)."""
        comm, root, here = self.comm, self.root, self.here
        dag = self._deep_to_host(dag)
        # the file's digest is not sent here: it may still be hashing (it goes with the index: join_digest)
        head = (g.name, _stored_condensation(g, dag), getattr(g, "meta", {}).get("node_labels")) if here else None
        name, path, labels = comm.bcast(head, root=root)  # the user's node labels too (small next to the DAG)
        if not here:
            g = SimpleNamespace(name=name, digest=None, meta={} if labels is None else {"node_labels": labels})
        self.complete = here
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
                self.complete = True
                return mine, g
        if self.nccl:
            return devicepath.share_dag(self.tp, dag, root), g
        if here:  # the host copy goes to the other ranks and into the index; the device DAG stays for phases 1-5
            self.dag_host = run_shared(comm, "copying the DAG to the host", dag_to_host, dag, self.be)
        else:
            run_shared(comm, "copying the DAG to the host")
        got = bcast_dataclass(comm, self.dag_host, DAG, root, skip=ROOT_ONLY_DAG)
        return (dag if here else got), g

    def _deep_to_host(self, dag):
        """Collective, on a GPU backend: a deep, narrow DAG (:func:`~distgrail.stages.deep.labels_on_host`,
        decided by rank 0's DAG and every rank's compiled sweeps) comes to rank 0's host, and every
        rank runs the later entries on the CPU backend (its dimensions and mask words there, the
        moves through host memory and MPI), as one process does (:meth:`OneProcess.share_dag
        <distgrail.placement.OneProcess.share_dag>`): the GPUs would sweep it a level at a time.
        The same index. Returns rank 0's DAG (None elsewhere, as given)."""
        comm, here = self.comm, self.here
        if not comm.allreduce(bool(self.be.is_gpu), op=mpi().LAND):
            return dag
        shape = comm.bcast((int(dag.C), int(dag.m), int(dag.n_levels)) if here else None, root=self.root)
        if not comm.allreduce(bool(run_shared(comm, "probing the host's compiled sweeps", deep.labels_on_host, *shape)),
                              op=mpi().LAND):
            return dag
        if here:
            phases.notice(f"phases 1-5 on the hosts' compiled sweeps: the condensed DAG has {shape[2]:,} levels "
                          f"for {shape[0]:,} components and {shape[1]:,} edges, which the GPUs sweep a level at a time")
        dag = run_shared(comm, "copying the DAG to the host", dag_to_host if here else None, dag, self.be)
        self.be = get_backend("cpu")
        self.run = phases.StageRun(self.be, self.config)
        self.nccl = False  # (what moves now is on the hosts)
        return dag

    def once(self, what, entry, dag, *args):
        """``entry`` on rank 0 (None elsewhere); the other ranks upload the CSR meanwhile (host
        transport): phases 3–4 read it next."""
        if self.here:
            return run_shared(self.comm, what, entry, self.run, dag, *args)
        upload = (lambda: prefetch_csr(dag, None, None, self.be)) if isinstance(dag.indptr, np.ndarray) else None
        return run_shared(self.comm, what, upload)

    def share_arrays(self, arrays):
        """Rank 0's arrays (host) where the index is assembled; {} elsewhere."""
        arrays = run_shared(self.comm, "copying the stage's arrays to the host",
                            (lambda: {k: self.be.to_host(a) for k, a in arrays.items()}) if self.here else None)
        if self.everywhere:
            names = self.comm.bcast(sorted(arrays) if self.here else None, root=self.root)
            return {k: bcast_array(self.comm, arrays[k] if self.here else None, self.root) for k in names}
        return arrays if self.here else {}

    def share_forest(self, forest):
        if self.nccl:
            forest = devicepath.bcast_forest(self.tp, forest, self.root)
        else:
            forest = bcast_dataclass(self.comm, forest, Forest, self.root)
        self.stage_timings.update(forest.timings)
        if self._edges_split() and not self.here and forest.on_gpu:  # its share, written by this rank
            parent, size = forest.arrays(self.be)
            self._land_shares({"forest/parent": parent, "forest/subtree_size": size})
        return forest

    def start_masks(self, entry, dag, K):
        """Phase 5 across ranks, started before phases 1–2 (each rank's mask words on a GPU on a
        stream of its own, beside rank 0's phases 1–2 and every rank's phases 3–4); its
        ``result()`` (collective) gathers the words after the labels' gather."""
        keep = self.held_rows if self._edges_split() else None
        return start_distributed(self.comm, self.run, entry, dag, K, self.everywhere, self.root,
                                 self.tp if self.nccl else None, keep)

    def _what(self):
        lo, hi = self.lo, self.hi
        return (f"labeling dimensions {lo}..{hi - 1}" if hi - lo > 1 else f"labeling dimension {lo}"
                if hi > lo else "labeling (no dimension on this rank)")

    def split_dims(self, entry, dag, forest):
        """``entry`` (phases 3–4) for this rank's block of dimensions, and the blocks' way to rank
        0 (and every rank with ``full_index_on="all"``): ``(labels, post0)``, labels a host array
        where the index is assembled (None elsewhere)."""
        comm, be, steps, local_t = self.comm, self.be, self.steps, self.own_timings
        lo, hi, root, here, everywhere = self.lo, self.hi, self.root, self.here, self.everywhere
        split = self.split
        if split and not everywhere:
            return self._labels_kept(entry, dag, forest)
        if not self.nccl:
            labels, post0 = labels_by_host(steps, comm, self.run, entry, dag, forest, self.counts, lo, hi,
                                           self._what(), local_t, self.stage_timings, everywhere, root)
            self._keep_own(split, labels)
            return labels, post0
        # labels stay on each rank's GPU and meet on rank 0's; the host pages of the gathered
        # labels get ready while the GPUs label
        landing = run_shared(comm, "allocating host memory for the labels", devicepath.landing, be,
                             (self.config.dims, dag.C, 2), smallest_uint(max(dag.C - 1, 0)), everywhere or here)
        with steps.stage("phases 3-4"):
            post0, iv = run_shared(comm, self._what(), entry, self.run, dag, forest, range(lo, hi), local_t,
                                   None, on_device=True)
        local_t["phases 3-4"] = steps.timings["phases 3-4"]
        own = devicepath.copy_own_block(be, iv, landing, here, everywhere, root)  # while the others label
        self.stage_timings.update(slowest(comm, local_t))
        labels = devicepath.gather_blocks(self.tp, iv, everywhere, "labels", root, steps.timings, landing, own)
        self._keep_own(split, labels)
        return labels, post0

    def _keep_own(self, split, labels):
        if split and labels is not None:  # every rank writes its own block of the gathered labels
            self.own_labels = (self.lo, labels[self.lo:self.hi])

    def _labels_kept(self, entry, dag, forest):
        """Split layout, the index assembled on rank 0 only: phases 3–4 for this rank's block of
        dimensions, which stays here (the host copy this rank writes into its part); rank 0's
        labels are a :class:`~distgrail.indexfile.split.Rows` of its own block."""
        from ..indexfile.split import Rows

        comm, steps, local_t, lo, hi = self.comm, self.steps, self.own_timings, self.lo, self.hi
        def label():
            post0, iv = entry(self.run, dag, forest, range(lo, hi), local_t, None)
            return post0, np.ascontiguousarray(to_host(iv)).reshape(hi - lo, dag.C, 2)

        with steps.stage("phases 3-4"):
            post0, iv = run_shared(comm, self._what(), label)
        local_t["phases 3-4"] = steps.timings["phases 3-4"]
        self.stage_timings.update(slowest(comm, local_t))
        self.own_labels = (lo, iv)
        ut = smallest_uint(max(dag.C - 1, 0))
        return (Rows((self.config.dims, dag.C, 2), ut, lo, iv) if self.here else None), post0

    def release_forest(self, forest):
        if self.everywhere or self.here:
            forest.release_device()  # the index keeps host copies

    def before_masks_wait(self, dag):
        """Collective. The split layout with the index assembled on rank 0 only: the DAG's host
        copies (each rank's share of its edges, rank 0's arrays) made now, while the last ranks'
        mask sweep runs, instead of after phase 5 (:meth:`dag_to_host` then hands them over).
        With ``full_index_on="all"`` (:meth:`for_queries` may still change the DAG) and for a
        spread DAG (its rows come by stream) nothing is done here."""
        if self.split and not self.everywhere and not getattr(self, "spread", False):
            self.host_dag = (dag, run_shared(self.comm, "copying the DAG to the host", self.dag_to_host, dag))

    def for_queries(self, post0, dag):
        """With ``full_index_on="all"``: rank 0's post-order ranks, and ``comp``/``level`` where
        they were not sent (device to device with NCCL), on every rank."""
        if not self.everywhere:
            return post0, dag
        comm, root, here = self.comm, self.root, self.here
        post0 = bcast_array(comm, post0 if here else None, root)
        need = comm.allreduce(not self.complete, op=mpi().LOR)
        if not need:
            return post0, dag
        if self.nccl:
            comp, level = devicepath.bcast_comp_level(self.tp, dag, root)
        else:
            src = self.dag_host if here else dag
            comp = bcast_array(comm, src.comp if here else None, root)
            level = bcast_array(comm, src.level if here else None, root)
        if not self.complete:
            dag.comp, dag.level = comp, level
        return post0, dag

    def land_dag(self, dag):
        """Where the index is assembled and the DAG is on the device: host pages for what the
        index keeps of it, touched while the GPUs work (:func:`~distgrail.placement.host_landing`)."""
        want = (self.everywhere or self.here) and self.dag_host is None
        self.landing = host_landing(dag, self.be, ("indices", "indptr") if self._edges_split() else ()) if want else {}
        if self.split:  # this rank's share of the DAG's edges and row pointers (_share_edges), likewise
            self._land_shares({f"dag/{k}": getattr(dag, k, None) for k in ("indices", "indptr")})

    def _land_shares(self, arrays):
        """Host pages for this rank's share (:meth:`_share_rows`) of each device array, touched
        from now on (fresh pages cost as much as the copy); nothing on the CPU."""
        from ..indexfile.split import split_rows

        for name, a in arrays.items():
            if self.be.is_gpu and a is not None and not isinstance(a, np.ndarray):
                lo, hi = split_rows(int(a.shape[0]), self.comm.Get_size())[self.me:self.me + 2]
                h = np.empty((hi - lo,) + tuple(a.shape[1:]), a.dtype)
                self.share_landing[name] = (h, self.be.prefault(h))

    def dag_to_host(self, dag):
        """What the index holds, as host arrays, where it is assembled. The split layout: every
        rank also keeps its share of the DAG's edges and row pointers (``held_rows``), which it
        writes."""
        made, self.host_dag = getattr(self, "host_dag", None), None
        if made is not None and made[0] is dag:  # (made before phase 5's wait)
            return made[1]
        landing, self.landing = getattr(self, "landing", None), None
        if self.split:
            self._share_edges(dag)
        if not (self.everywhere or self.here):
            return dag
        if self._edges_split() and "dag/indices" in self.held_rows:  # rank 0 keeps its block of edges only
            from dataclasses import replace

            src = self.dag_host if self.dag_host is not None else dag
            shared = {k: None for k in ("indices", "indptr") if f"dag/{k}" in self.held_rows}
            host = index_dag_to_host(replace(src, **shared), self.be, landing)
            for k in shared:
                setattr(host, k, self._held(f"dag/{k}", getattr(dag, k)))
            return host
        if self.dag_host is not None:
            return self.dag_host
        return index_dag_to_host(dag, self.be, landing)

    def _edges_split(self) -> bool:
        """The split layout with the index assembled on rank 0 only: what a rank writes stays there
        (the DAG's edges by block, its label block, the masks where they meet), so rank 0 copies
        its own share to the host, not everything."""
        return self.split and not self.everywhere

    def _share_edges(self, dag):
        """The split layout: the DAG's edges and row pointers (every rank holds the CSR it
        labelled with) cut into even blocks, each rank's block to its host to be written into its
        part: rank 0 no longer writes them all."""
        self._share_rows("dag/indices", getattr(dag, "indices", None))
        self._share_rows("dag/indptr", getattr(dag, "indptr", None))

    def _share_rows(self, name, a):
        """Rows ``lo..hi`` of ``a`` (this rank's copy of a dataset every rank holds whole, on its
        device or host), this rank's even share, to its host for its part (``held_rows``) when
        every rank holds ``a`` and none holds rows of it already (a spread DAG's own rows)."""
        from ..indexfile.split import split_rows

        have = a is not None and name not in self.held_rows
        if not self.comm.allreduce(have, op=mpi().LAND):  # (every rank takes the same way)
            return
        lo, hi = split_rows(int(a.shape[0]), self.comm.Get_size())[self.me:self.me + 2]

        landing = self.share_landing.pop(name, None)

        def share():  # (into the pages touched since the array was shared, where they were: Backend.land)
            with self.be.on_device():
                return np.ascontiguousarray(self.be.land(a[lo:hi], landing) if landing else to_host(a[lo:hi]))

        rows = run_shared(self.comm, f"copying this rank's share of {name} to the host", share)
        self.held_rows[name] = (lo, rows)

    def _held(self, name, a):
        """Rank 0's stand-in for ``a`` when every rank writes its share of it (``held_rows``): a
        :class:`~distgrail.indexfile.split.Rows` of rank 0's rows; else ``a``."""
        from ..indexfile.split import Rows

        if name not in self.held_rows:
            return a
        lo, rows = self.held_rows[name]
        return Rows(tuple(int(x) for x in a.shape), rows.dtype, lo, rows)

    def _share_forest(self, forest):
        """The split layout, the index assembled on rank 0 only: the forest (every rank holds it
        for phases 3–4) cut into even blocks like the DAG's edges; rank 0's forest for the index
        is then its own rows (:meth:`_held`)."""
        if not self._edges_split():
            return forest
        parent = size = None
        if forest is not None:
            parent, size = forest.arrays(self.be) if forest.on_gpu else (forest.parent, forest.size)
        self._share_rows("forest/parent", parent)
        self._share_rows("forest/subtree_size", size)
        if not self.here or "forest/parent" not in self.held_rows:
            return forest
        return SimpleNamespace(parent=self._held("forest/parent", parent), size=self._held("forest/subtree_size", size))

    def join_digest(self, g):
        """Rank 0 joins its background hash (a failure there is every rank's error) and sends the
        value where the index is assembled."""
        from ..io.digest import resolve

        comm, root, here = self.comm, self.root, self.here
        digest = run_shared(comm, "hashing the graph file", (lambda: resolve(g.digest)) if here else None)
        digest = comm.bcast(digest, root=root) if self.everywhere else digest
        if self.everywhere or here:
            g.digest = digest

    def assemble(self, g, dag, forest, post0, labels, masks, extra):
        self.tp.ready()  # a background NCCL set-up that failed fails the build, even if nothing waited for it
        forest = self._share_forest(forest)
        c = self.config
        # the last collective before the write: the index is whole where it is wanted
        return run_shared(self.comm, "assembling the index", assemble if self.everywhere or self.here else None,
                          g, dag, forest, post0, labels, c.dims, c.seed, c.parent_rule, supports=masks, extra=extra)

    def write(self, idx, early=None):
        """Rank 0 writes (finishes the file written while the build ran, or writes the index now);
        every rank takes part in the step, whatever it passed as output."""
        def save(out):
            if early is None or not early.finish(idx):
                idx.save(out)

        if self.split:  # every rank writes its part (distgrail.mpi.splitwrite)
            from .splitwrite import write_split

            return write_split(self, idx)
        output = self.config.output
        run_shared(self.comm, f"writing the index {os.fspath(output) if self.here else ''}",
                   save if self.here else None, output)

    def finish(self, idx, steps):
        """Timings (rank 0's steps, then every other rank's own as ``rank<r> <step>``) and meta."""
        comm, root, here = self.comm, self.root, self.here
        setup_t = self.tp.take_timings()  # nccl_init, nccl_warmup, nccl_wait: where this build set NCCL up
        mine = {**steps.timings, **self.stage_timings, **setup_t}
        if "write_part" in self.own_timings:  # (the split layout: its own part, as every rank's)
            mine["write_part"] = self.own_timings["write_part"]
        per_rank = comm.gather({**steps.timings, **self.own_timings, **setup_t}, root=root)
        if here:
            mine.update({f"rank{r} {k}": v for r, t in enumerate(per_rank) if r != root for k, v in t.items()})
        if self.everywhere:
            idx.timings = comm.bcast(mine if here else None, root=root)
        elif here:
            idx.timings = mine
        if idx is not None:
            idx.meta["backend"] = self.backend_name
            idx.meta["transport"] = self.tp.name if self.be.name == self.backend_name else "mpi"
            if self.be.name != self.backend_name:  # (a deep DAG labelled on the hosts: _deep_to_host)
                idx.meta["phases_backend"] = self.be.name
            idx.meta["dims_split"] = self.counts.tolist()
        return idx
