"""Where the build's data lives and how it moves: the one-process placement.

:func:`distgrail.build.build_index` walks one pipeline of steps, each a method of a placement.
:class:`OneProcess` runs every step in this process on one backend (NumPy on the CPU, one GPU
with CuPy), and its moves (sharing the DAG and the forest, gathering labels) are nothing.
:class:`distgrail.mpi.placement.AcrossRanks` has the same methods, collective over MPI ranks.

The first two steps are shared by both: :func:`read_on` (a text graph file is parsed on the GPU
when the backend is a GPU backend) and :func:`condense_on` (the condensation on the GPU when it
fits, else on the CPU with a one-line notice why; a stored condensation of a ``.h5`` graph is read).
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import numpy as np

from .errors import BackendError, DistGrailError
from .gpu.backend import get_backend
from .gpu.memory import GpuMemoryError
from .index import assemble
from .io.read import as_graph
from .stages.condense import DAG, condense, condense_cuda
from .stages.labeling import build_forest, check_label_args, label_dimensions
from .stages.support_count import check_supports_arg

__all__ = ["OneProcess", "read_on", "condense_on", "check_output", "check_build_args", "light_graph", "Done",
           "INDEX_FIELDS", "host_landing", "index_dag_to_host"]


def _notice(text: str) -> None:
    print(f"distgrail: notice: {text}", file=sys.stderr, flush=True)


def read_on(be, graph, num_vertices=None, fmt="auto"):
    """Read step: a text graph file is parsed on the GPU (:func:`distgrail.io.parse.read_graph_cuda`)
    when ``be`` is a GPU backend; anything else, or a file the GPU parser hands back (too big for
    the GPU, 64-bit ids), is read by the CPU readers."""
    if be.is_gpu and isinstance(graph, (str, os.PathLike)):
        from .io.parse import read_graph_cuda

        g = read_graph_cuda(graph, fmt, num_vertices, be, notify=_notice)
        if g is not None:
            return g
    return as_graph(graph, num_vertices, fmt)


def condense_on(be, g):
    """Condense step: a stored condensation (a ``.h5`` graph written by ``distgrail convert``) is
    read; else on the GPU (the DAG stays there, ``level_ptr`` on the host for the sweeps) when
    ``be`` is a GPU backend, else the CPU path; a graph whose vertex ids need 64 bits goes to the
    CPU path with a one-line notice why, one too big for the GPU's memory is refused
    (:class:`~distgrail.gpu.memory.GpuMemoryError`: ``--backend cpu`` is the user's choice)."""
    if isinstance(getattr(g, "meta", None), dict) and g.meta.get("condensation") is not None:
        return condense(g)
    if be.is_gpu:
        try:
            with be.on_device():
                src, dst = be.asarray(g.src, np.int32), be.asarray(g.dst, np.int32)
                dag = condense_cuda(src, dst, g.n, be)
            dag.level_ptr = be.to_host(dag.level_ptr) if not isinstance(dag.level_ptr, np.ndarray) else dag.level_ptr
            return dag
        except GpuMemoryError:
            raise  # too big for this GPU: refused with need vs have and the ways out, no silent switch
        except BackendError as e:
            _notice(f"condensing on the CPU: {e}")
    if not isinstance(g.src, np.ndarray):  # edges parsed on the GPU, condensed on the CPU
        g.src, g.dst = be.to_host(g.src), be.to_host(g.dst)
    return condense(g)


def check_output(output) -> None:
    """The index can be written at ``output`` (None: no output): its directory exists and is
    writable. Checked before any work."""
    if output is None:
        return
    if not isinstance(output, (str, os.PathLike)):
        raise DistGrailError(f"output must be a path or None, got {output!r}")
    d = os.path.dirname(os.path.abspath(os.fspath(output)))
    if not os.path.isdir(d):
        raise DistGrailError(f"{os.fspath(output)}: cannot write the index: directory {d} does not exist")
    if not os.access(d, os.W_OK):
        raise DistGrailError(f"{os.fspath(output)}: cannot write the index: directory {d} is not writable")


def check_build_args(dims, seed, parent_rule, supports) -> None:
    check_label_args(dims, seed, parent_rule)
    check_supports_arg(supports)


class Done:
    """A step's result that is ready now (``result()`` returns it)."""

    def __init__(self, value=None):
        self.value = value

    def result(self):
        return self.value


def light_graph(g):
    """The graph without its edges: what the index keeps of it (name, digest, node labels)."""
    digest = g.digest_source if hasattr(g, "digest_source") else g.digest  # a running hash stays one
    return SimpleNamespace(name=g.name, digest=digest, meta=getattr(g, "meta", {}))


#: the DAG fields an index holds (not the reverse CSR, which only phases 1 and 5 read)
INDEX_FIELDS = ("comp", "indptr", "indices", "level")


def host_landing(dag: DAG, be) -> dict:
    """Host arrays for the device fields of ``dag`` that an index holds, each ``(array, thread)``
    whose pages a thread touches now, while the GPU works (phases 1–2, or more where the index
    file is written after the build): fresh pages cost as much as the copy itself (R-MAT scale
    27, one H200: ``dag_to_host`` of 1.7 GB took 0.65 s). Empty on the CPU or for host
    fields."""
    if not be.is_gpu:
        return {}
    out = {}
    for k in INDEX_FIELDS:
        a = getattr(dag, k)
        if a is not None and not isinstance(a, np.ndarray):
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
    """Every step in this process, on one backend; the moves between ranks are nothing.

    Attributes the pipeline reads: ``be`` (the backend), ``here`` (this process assembles the
    index), ``writes`` (an output was given), ``idle_steps`` (step names that do nothing here and
    are not timed), ``steps`` (set by the pipeline: sub-steps are timed into it),
    ``masks_before_forest`` (phase 5 starts before phases 1–2, not after them).
    """

    idle_steps = ("transport_setup", "bcast_dag", "bcast_forest", "bcast_index")
    here = True
    #: phase 5 starts after phases 1–2: started before them, phase 1's first launches waited for
    #: the whole sweep (the one GPU does both)
    masks_before_forest = False

    def __init__(self, be, output):
        self.be = be
        self.writes = output is not None
        self.steps = None
        self.stage_timings = {}  # the stages' own sub-steps (phase1_forest, phase3_ranks, ...)

    @classmethod
    def open(cls, backend, dims, seed, parent_rule, supports, output) -> "OneProcess":
        """Check the arguments and the output path, and choose the backend (once, here)."""
        check_build_args(dims, seed, parent_rule, supports)
        check_output(output)
        return cls(get_backend(backend), output)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    # -- steps, in pipeline order ----------------------------------------------------------
    def connect(self):
        """Nothing to connect in one process."""

    def read(self, graph, num_vertices, fmt):
        return read_on(self.be, graph, num_vertices, fmt)

    def condense(self, g):
        return condense_on(self.be, g)

    def without_edges(self, g):
        return light_graph(g)

    def share_dag(self, dag, g):
        return dag, g

    def land_dag(self, dag):
        """Host pages for what the index keeps of the DAG, touched while the GPU works."""
        self.landing = host_landing(dag, self.be)

    def forest(self, dag, seed, parent_rule):
        forest = build_forest(dag, seed, parent_rule, self.be)
        self.stage_timings.update(forest.timings)
        return forest

    def share_forest(self, forest):
        return forest

    def start_masks(self, dag, K, seed):
        """Phase 5 started (on a GPU on a stream of its own, beside phases 3–4); ``result()``
        gives ``(ids, out, in)`` host arrays, or None when ``K`` is 0."""
        if not K:
            return Done(None)
        from .stages.supports import start_supports, words

        landing = (None, None)
        if self.be.is_gpu:  # the masks' host pages (out, in), touched while the GPU works, as the DAG's
            shape = (int(dag.C), words(min(int(K), int(dag.C))))
            landing = [(h, self.be.prefault(h)) for h in (np.empty(shape, np.uint64), np.empty(shape, np.uint64))]
        return start_supports(dag, K, seed, self.be, landing)

    def label(self, dag, forest, dims, seed):
        """Phases 3–4 for every dimension: ``(labels, post0)``, host arrays."""
        with self.steps.stage("phases 3-4"):
            post0, labels = label_dimensions(dag, forest, range(dims), seed, self.be, self.stage_timings)
        return labels, post0

    def release_forest(self, forest):
        forest.release_device()  # the index keeps host copies; the forest's GPU memory goes back

    def for_queries(self, post0, dag):
        return post0, dag

    def dag_to_host(self, dag):
        landing, self.landing = getattr(self, "landing", None), None
        return index_dag_to_host(dag, self.be, landing)

    def join_digest(self, g):
        """Nothing: :func:`~distgrail.index.assemble` joins the input file's background digest."""

    def assemble(self, g, dag, forest, post0, labels, dims, seed, parent_rule, supports):
        return assemble(g, dag, forest, post0, labels, dims, seed, parent_rule, supports=supports)

    def write(self, idx, output, early=None):
        """Finish the file written while the build ran (:class:`~distgrail.build.EarlyWrite`), or
        write the index now."""
        if early is None or not early.finish(idx):
            idx.save(output)

    def finish(self, idx, steps):
        """The index with its timings (the pipeline's steps, then the stages' own) and backend."""
        idx.timings = {**steps.timings, **self.stage_timings}
        idx.meta["backend"] = self.be.name
        return idx
