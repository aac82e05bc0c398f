"""Where the build's data lives and how it moves: the placements.

:func:`distgrail.build.walk` alternates stages and moves. The stages compute
(:mod:`distgrail.stages.phases`: one entry each, for a whole DAG or a spread one); a placement
(:class:`Placement`) only decides which process runs an entry and moves what the entries made:

- :class:`OneProcess`: every entry in this process on one backend (NumPy on the CPU, one GPU with
  CuPy); its moves are nothing.
- :class:`distgrail.mpi.placement.AcrossRanks`: the DAG and the forest made on rank 0 and shared,
  the d dimensions and the support mask words split over the ranks, their blocks gathered.
- :class:`distgrail.mpi.partition.Partitioned`: the edges read and condensed in parts on every
  rank; the condensed DAG gathered to rank 0 (then as AcrossRanks) or kept spread over the ranks
  (every entry then collective over them).
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Protocol

import numpy as np

from .errors import DistGrailError, OutputError
from .gpu.backend import get_backend
from .index import assemble
from .stages import deep, phases
from .stages.condense import DAG

__all__ = ["Placement", "OneProcess", "check_output", "light_graph", "INDEX_FIELDS", "host_landing",
           "index_dag_to_host"]


class Placement(Protocol):
    """What :func:`distgrail.build.walk` asks of a placement, in pipeline order. Entries are the
    functions of :mod:`distgrail.stages.phases`, passed in; a placement runs them where their data
    is and moves their results.

    Attributes: ``be`` (the backend, chosen once), ``config`` (the
    :class:`~distgrail.config.BuildConfig`), ``here`` (this process assembles the index),
    ``writes`` (an output was given), ``idle_steps`` (step names that do nothing here and are not
    timed), ``masks_before_forest`` (phase 5 starts before phases 1–2), ``steps`` (set by the
    walk: sub-steps are timed into it).
    """

    be: object
    config: object
    here: bool
    writes: bool
    idle_steps: tuple
    masks_before_forest: bool

    def connect(self) -> None:
        """Set up the way data moves between ranks."""

    def read(self, graph, digest=None):
        """The graph, read where it is used (``digest``: the input's digest handle)."""

    def condense(self, entry, g):
        """``entry(run, g)``: the condensed DAG, where it goes."""

    def without_edges(self, g):
        """What the index keeps of the graph once its edges are not needed."""

    def share_dag(self, dag, g):
        """``(dag, graph)`` where the labeling needs them."""

    def land_dag(self, dag) -> None:
        """Host pages for what the index keeps of the DAG, touched while the devices work."""

    def once(self, what: str, entry, dag, *args):
        """``entry(run, dag, *args)`` once, where the whole DAG is (every rank on a spread one)."""

    def share_forest(self, forest):
        """The forest on every process that labels."""

    def share_arrays(self, arrays: dict) -> dict:
        """Host arrays made once, where the index is assembled."""

    def start_masks(self, entry, dag, K: int):
        """Phase 5 started by ``entry`` on this process's share of the mask words; ``result()``
        gathers ``(ids, out, in)`` where the index is assembled."""

    def split_dims(self, entry, dag, forest):
        """``entry`` on this process's block of dimensions; the blocks gathered: ``(labels, post0)``."""

    def release_forest(self, forest) -> None:
        """Device memory of the forest back (the index keeps host copies)."""

    def before_masks_wait(self, dag) -> None:
        """Work that needs nothing from phase 5, done before waiting for it (its sweep still runs)."""

    def for_queries(self, post0, dag):
        """What queries need, wherever the full index is returned."""

    def dag_to_host(self, dag):
        """What the index holds of the DAG, as host arrays, where it is assembled."""

    def join_digest(self, g) -> None:
        """The input's digest, joined and sent where the index is assembled."""

    def assemble(self, g, dag, forest, post0, labels, masks, extra):
        """The :class:`~distgrail.index.Index`, where it is assembled (None elsewhere)."""

    def write(self, idx, early=None) -> None:
        """The index file written (by the process that writes)."""

    def finish(self, idx, steps):
        """The index returned, with its timings and meta."""


def check_output(output) -> None:
    """The index can be written at ``output`` (None: no output): its directory exists and is
    writable. Checked before any work."""
    if output is None:
        return
    if not isinstance(output, (str, os.PathLike)):
        raise DistGrailError(f"output must be a path or None, got {output!r}")
    d = os.path.dirname(os.path.abspath(os.fspath(output)))
    if not os.path.isdir(d):
        raise OutputError(f"{os.fspath(output)}: cannot write the index: directory {d} does not exist")
    if not os.access(d, os.W_OK):
        raise OutputError(f"{os.fspath(output)}: cannot write the index: directory {d} is not writable")


def light_graph(g):
    """The graph without its edges: what the index keeps of it (name, digest, node labels)."""
    digest = g.digest_source if hasattr(g, "digest_source") else g.digest  # a running hash stays one
    return SimpleNamespace(name=g.name, digest=digest, meta=getattr(g, "meta", {}))


#: the DAG fields an index holds (not the reverse CSR, which only phases 1 and 5 read)
INDEX_FIELDS = ("comp", "indptr", "indices", "level")


def host_landing(dag: DAG, be, skip=()) -> dict:
    """Host arrays for the device fields of ``dag`` that an index holds, each ``(array, thread)``
    whose pages a thread touches now, while the GPU works (phases 1–2, or more where the index
    file is written after the build): fresh pages cost as much as the copy itself
    (docs/benchmarks.md). Empty on the CPU or for host
    fields."""
    if not be.is_gpu:
        return {}
    out = {}
    for k in INDEX_FIELDS:
        a = getattr(dag, k)
        if k not in skip and a is not None and not isinstance(a, np.ndarray):
            h = np.empty(a.shape, a.dtype)
            out[k] = (h, be.prefault(h))
    return out


def index_dag_to_host(dag: DAG, be, landing=None) -> DAG:
    """The DAG fields an :class:`~distgrail.index.Index` holds, as host arrays (into ``landing``'s
    arrays from :func:`host_landing` where given); the reverse CSR, which the index does not keep,
    is left out (None)."""
    landing = landing or {}

    def host(k):
        a = getattr(dag, k)
        if a is None or isinstance(a, np.ndarray):
            return a
        return be.land(a, landing.get(k))

    return DAG(n=dag.n, comp=host("comp"), indptr=host("indptr"), indices=host("indices"), rindptr=None,
               rindices=None, level=host("level"), level_ptr=host("level_ptr"),
               meta=dict(dag.meta), timings=dict(dag.timings))


class OneProcess:
    """Every entry in this process, on one backend; the moves between ranks are nothing
    (a :class:`Placement`)."""

    idle_steps = ("transport_setup", "bcast_dag", "bcast_forest", "bcast_index")
    here = True
    #: phase 5 starts after phases 1–2: started before them, phase 1's first launches waited for
    #: the whole sweep (the one GPU does both)
    masks_before_forest = False

    def __init__(self, be, config):
        self.be, self.config = be, config
        self.backend_name = be.name  # (the backend asked for: a deep DAG's phases may run on the host)
        self.run = phases.StageRun(be, config)
        self.writes = config.output is not None
        self.steps = None
        self.stage_timings = {}  # the stages' own sub-steps (phase1_forest, phase3_ranks, ...)

    @classmethod
    def open(cls, config) -> "OneProcess":
        """Check the output path and choose the backend (once, here)."""
        check_output(config.output)
        return cls(get_backend(config.backend), config)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def connect(self):
        """Nothing to connect in one process."""

    def read(self, graph, digest=None):
        return phases.read(self.run, graph, digest)

    def condense(self, entry, g):
        return entry(self.run, g)

    def without_edges(self, g):
        return light_graph(g)

    def share_dag(self, dag, g):
        """Nothing to share; a deep, narrow DAG on a GPU (:func:`~distgrail.stages.deep.labels_on_host`)
        comes to the host here, and every later entry runs on the CPU backend (the same numbers)."""
        if self.be.is_gpu and deep.labels_on_host(dag.C, dag.m, dag.n_levels):
            from .stages.condense import dag_to_host

            phases.notice(f"phases 1-5 on the host's compiled sweeps: the condensed DAG has {dag.n_levels:,} levels "
                          f"for {dag.C:,} components and {dag.m:,} edges, which the GPU sweeps a level at a time")
            dag = dag_to_host(dag, self.be)
            self.be = get_backend("cpu")
            self.run = phases.StageRun(self.be, self.config)
        return dag, g

    def land_dag(self, dag):
        self.landing = host_landing(dag, self.be)

    def once(self, what, entry, dag, *args):
        out = entry(self.run, dag, *args)
        self.stage_timings.update(getattr(out, "timings", {}))
        return out

    def share_forest(self, forest):
        return forest

    def share_arrays(self, arrays):
        return {k: self.be.to_host(a) for k, a in arrays.items()}

    def start_masks(self, entry, dag, K):
        """Phase 5 started (on a GPU on a stream of its own, beside phases 3–4), into host pages
        touched while the GPU works."""
        from .stages.supports import words

        landing = (None, None)
        if self.be.is_gpu:
            shape = (int(dag.C), words(min(int(K), int(dag.C))))
            landing = [(h, self.be.prefault(h)) for h in (np.empty(shape, np.uint64), np.empty(shape, np.uint64))]
        return entry(self.run, dag, K, landing=landing)

    def split_dims(self, entry, dag, forest):
        """Every dimension here: ``(labels, post0)``, host arrays."""
        with self.steps.stage("phases 3-4"):
            post0, labels = entry(self.run, dag, forest, range(self.config.dims), self.stage_timings)
        return labels, post0

    def release_forest(self, forest):
        forest.release_device()

    def before_masks_wait(self, dag):
        pass  # the DAG goes to the host beside phases 3-4 (EarlyWrite) or after the build

    def for_queries(self, post0, dag):
        return post0, dag

    def dag_to_host(self, dag):
        landing, self.landing = getattr(self, "landing", None), None
        return index_dag_to_host(dag, self.be, landing)

    def join_digest(self, g):
        """Nothing: :func:`~distgrail.index.assemble` joins the input file's background digest."""

    def assemble(self, g, dag, forest, post0, labels, masks, extra):
        c = self.config
        return assemble(g, dag, forest, post0, labels, c.dims, c.seed, c.parent_rule, supports=masks, extra=extra)

    def write(self, idx, early=None):
        """Finish the file written while the build ran (:class:`~distgrail.build.EarlyWrite`), or
        write the index now."""
        if self.config.layout == "split":
            from .indexfile.split import write_split_index

            write_split_index(self.config.output, idx.meta, idx.arrays, parts=1)
        elif early is None or not early.finish(idx):
            idx.save(self.config.output)

    def finish(self, idx, steps):
        """The index with its timings (the pipeline's steps, then the stages' own) and backend."""
        idx.timings = {**steps.timings, **self.stage_timings}
        idx.meta["backend"] = self.backend_name
        if self.be.name != self.backend_name:  # (a deep DAG labelled on the host: share_dag)
            idx.meta["phases_backend"] = self.be.name
        return idx
