"""The pipeline's stages, one entry each, for a whole DAG or a spread one.

A placement (:mod:`distgrail.placement`) moves data and decides which rank runs what; the
computing is here. Each entry takes a :class:`StageRun` (the backend, the build's
:class:`~distgrail.config.BuildConfig` and, for a DAG spread over ranks, the exchange between
them) and the stage's data. On a whole DAG (:class:`~distgrail.stages.condense.DAG`) an entry
calls the stage module's NumPy twin or CUDA launcher through the backend; on a spread one
(:class:`~distgrail.stages.partitioned_dag.PartDAG`) it is collective over the ranks of
``run.ex``.

Entries, in pipeline order: :func:`read`, :func:`condense`, :func:`forest` (phases 1–2),
:func:`masks` (phase 5, started), :func:`labels` (phases 3–4 for some dimensions), and the
extra stages of :data:`EXTRA_STAGES` (docs/design.md, "Adding a stage").
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np

from ..errors import BackendError, DistGrailError
from ..gpu.memory import GpuMemoryError
from .condense import condense as _condense, condense_cuda_of
from . import deep
from .labeling import Forest, build_forest, label_dimensions
from .partitioned_dag import PartDAG, spread_forest, spread_labels, spread_supports

__all__ = ["StageRun", "Stage", "Done", "EXTRA_STAGES", "read", "condense", "forest", "labels", "masks", "spread",
           "extra_datasets", "read_on", "condense_on", "notice"]


@dataclass(frozen=True)
class StageRun:
    """What every stage entry is given besides its data: ``be`` (the backend), ``config`` (the
    build's :class:`~distgrail.config.BuildConfig`), ``ex`` (the exchange between the ranks when
    the DAG is spread over them; None otherwise)."""

    be: object
    config: object
    ex: object = None


@dataclass(frozen=True)
class Stage:
    """An extra stage (docs/design.md, "Adding a stage"): ``name`` (its progress step),
    ``datasets`` ({index dataset: (dtype, shape from the number of components C)}), ``run`` (the
    entry: ``run(stage_run, dag, forest) -> {dataset: array}``, host or device arrays of those
    dtypes and shapes, computed once where the whole DAG is, or by every rank on a spread one)."""

    name: str
    datasets: dict
    run: object
    spread: bool = False  # whether ``run`` takes a spread DAG (else such a build is refused)


#: the extra stages every build runs after phases 1–2, in order (none today: the recipe's test
#: adds one)
EXTRA_STAGES: tuple = ()


def spread(dag) -> bool:
    """Whether ``dag`` is spread over the ranks (a :class:`PartDAG`)."""
    return isinstance(dag, PartDAG)


def notice(text: str) -> None:
    """A one-line notice on stderr (a choice the build made for the user, and why)."""
    print(f"distgrail: notice: {text}", file=sys.stderr, flush=True)


def read(run, graph, digest=None):
    """Read (:func:`read_on` with the build's format and vertex count)."""
    return read_on(run.be, graph, run.config.num_vertices, run.config.fmt, digest)


def read_on(be, graph, num_vertices=None, fmt="auto", digest=None):
    """A text graph file is parsed on the GPU (:func:`distgrail.io.parse.read_graph_cuda`) when
    ``be`` is a GPU backend; anything else, or a file the GPU parser hands back (too big for the
    GPU, 64-bit ids), is read by the CPU readers (a ``.h5`` graph's edges then checked and
    expanded on the GPU: :func:`distgrail.io.binary.read_binary_graph`). ``digest``: the input's
    digest handle, started where the input was opened (None: the reader starts its own). A
    file's graph whose edges are on the GPU records how it was read (``meta["read_again"]``:
    path, vertex count, format and :func:`_file_stamp`): :func:`condense_on` hands those edges to
    the condensation and, should it fall back to the CPU, reads the file again."""
    from ..io.read import as_graph

    kw = {} if digest is None else {"digest": digest}
    g = None
    if be.is_gpu and isinstance(graph, (str, os.PathLike)):
        from ..io.parse import read_graph_cuda

        g = read_graph_cuda(graph, fmt, num_vertices, be, notify=notice, **kw)
    if g is None:
        g = as_graph(graph, num_vertices, fmt, device=be if be.is_gpu else None, **kw)  # (.h5 edges onto the GPU)
    if isinstance(graph, (str, os.PathLike)) and not isinstance(g.src, np.ndarray):
        # (the edges on the GPU go to the condensation; the file as read, for a read again)
        g.meta["read_again"] = (os.fspath(graph), num_vertices, fmt, _file_stamp(graph))
    return g


def _file_stamp(path):
    """Size, modification time, inode and device of the file at ``path`` (a str if it went away)."""
    try:
        st = os.stat(path)
    except OSError as e:
        return e.strerror
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def condense(run, g):
    """Condense (:func:`condense_on`)."""
    return condense_on(run.be, g)


def condense_on(be, g, keep_edges: bool = False):
    """A stored condensation (a ``.h5`` graph written by ``distgrail convert``) is read; else on
    the GPU (the DAG stays there, ``level_ptr`` on the host for the sweeps) when ``be`` is a GPU
    backend, else the CPU path; a graph whose vertex ids need 64 bits, or a deep, narrow one whose
    trimming runs a few vertices a round (:class:`~distgrail.stages.scc.NarrowPeel`), goes to the
    CPU path with a one-line notice why, one too big for the GPU's memory is refused
    (:class:`~distgrail.gpu.memory.GpuMemoryError`: ``--backend cpu`` is the user's choice).
    ``keep_edges``: the caller still needs ``g``'s edges afterwards (``distgrail convert`` writes
    them), so the edges read onto the GPU are not handed to the condensation."""
    meta = g.meta if isinstance(getattr(g, "meta", None), dict) else {}
    if meta.get("condensation") is not None:
        return _condense(g)
    if be.is_gpu:
        again = meta.get("read_again")
        # edges read onto the GPU from a file are handed to the condensation, which frees them as
        # it goes (the graph keeps none: its fallback below reads the file again); host edges stay
        # the graph's, their device copies are the condensation's alone
        hand = again is not None and not keep_edges and not isinstance(g.src, np.ndarray)
        held = g.hand_over_edges() if hand else [g.src, g.dst]
        try:
            with be.on_device():
                held[:] = [be.asarray(a, np.int32) for a in held]
                dag = condense_cuda_of(held, g.n, be, narrow_rounds=deep.HOST_DEEP_LEVELS,  # (a deep chain: the CPU's)
                                       kept=not hand and not isinstance(g.src, np.ndarray))  # (device edges kept)
            dag.level_ptr = be.to_host(dag.level_ptr) if not isinstance(dag.level_ptr, np.ndarray) else dag.level_ptr
            return dag
        except GpuMemoryError:
            raise  # too big for this GPU: refused with need vs have and the ways out, no silent switch
        except BackendError as e:
            notice(f"condensing on the CPU: {e}")
            if g.src is None:  # handed over
                if len(held) == 2:  # (not taken: the error came first)
                    g.src, g.dst = held
                else:
                    _read_again(g, again)
    if not isinstance(g.src, np.ndarray):  # edges parsed on the GPU, condensed on the CPU
        g.src, g.dst = be.to_host(g.src), be.to_host(g.dst)
    return _condense(g)


def _read_again(g, again) -> None:
    """The edges of ``g``, handed to the GPU condensation that then fell back, read again on the
    host from the file (``again``: path, vertex count and format as first read, and the file's
    :func:`_file_stamp` then, if recorded). A file whose size, modification time or inode differ
    from the first read's (before or after this read), or that now gives another vertex or edge
    count, is refused: its edges could be another graph's."""
    from ..io.read import as_graph

    path, num_vertices, fmt = again[:3]
    stamp = again[3] if len(again) > 3 else None
    notice(f"reading {os.path.basename(path)} again on the host (its edges on the GPU went to the condensation)")

    def changed(why):
        return DistGrailError(f"{path}: changed while it was indexed ({why})")

    if stamp is not None and _file_stamp(path) != stamp:
        raise changed("its size, modification time or inode differ from the first read's")
    h = as_graph(path, num_vertices, fmt)
    h.cancel_digest()  # (the first read's digest stands)
    if stamp is not None and _file_stamp(path) != stamp:
        raise changed("its size, modification time or inode differ from the first read's")
    if (h.n, h.m) != (g.n, g.m):
        raise changed(f"{g.n:,} vertices and {g.m:,} edges read first, {h.n:,} and {h.m:,} now")
    g.src, g.dst = h.src, h.dst


def forest(run, dag) -> Forest:
    """Phases 1–2: the spanning forest and its subtree sizes (on a GPU it stays there)."""
    cfg = run.config
    if spread(dag):
        return spread_forest(run.be, run.ex, dag, cfg.seed)
    return build_forest(dag, cfg.seed, cfg.parent_rule, run.be)


def labels(run, dag, forest, dims, timings=None, out=None, on_device=False):
    """Phases 3–4 for the dimensions ``dims``: ``(post0, intervals)``
    (:func:`~distgrail.stages.labeling.label_dimensions`; ``out`` a host array the intervals are
    written into, ``on_device`` keeps them on the device). On a spread DAG the intervals stay on
    the device."""
    timings = {} if timings is None else timings
    if spread(dag):
        return spread_labels(run.be, run.ex, dag, forest, dims, run.config.seed, timings)
    return label_dimensions(dag, forest, dims, run.config.seed, run.be, timings, out, on_device=on_device)


def masks(run, dag, K, ids=None, block=None, landing=(None, None), sides=("out", "in")):
    """Phase 5, started: an object whose ``result()`` gives ``(ids, out, in)``.

    Whole DAG, ``ids`` None: the K supports chosen and their masks swept, on a GPU on a stream of
    its own (:func:`~distgrail.stages.supports.start_supports`; ``landing``: host arrays the masks
    land in). With ``ids`` (chosen by one rank) and ``block`` ``(lo, hi)`` of them: only that
    block's words (an MPI rank's share), ``result()`` giving ``(ids, out, in)`` on the device;
    ``sides``: the sides it sweeps (one, where two ranks share a word: the other comes back (C, 0)).
    Spread DAG: collective, run when ``result()`` is asked for (the same point on every rank),
    the masks on the device."""
    from . import supports as s

    be, seed = run.be, run.config.seed
    if spread(dag):
        return _Later(spread_supports, be, run.ex, dag, K, seed)
    if ids is None:
        return s.start_supports(dag, K, seed, be, landing)
    with be.on_device():
        if not be.is_gpu:
            return Done((ids, *s.support_masks(be, dag, ids, block, sides)))
        be.synchronize()  # the DAG's device arrays are complete before another stream reads them
        stream = be.xp.cuda.Stream(non_blocking=True)
        with stream:
            pending = s.support_masks_cuda(be, dag, ids, block, wait=False, share=s.BESIDE_SHARE, sides=sides)
        pending.stream = stream
        return _Block(be, ids, pending)


def extra_datasets(C: int, stages=None) -> dict:
    """{dataset: (dtype, shape)} of the extra stages' index datasets for ``C`` components."""
    return {name: (np.dtype(dt), tuple(shape(C))) for st in (EXTRA_STAGES if stages is None else stages)
            for name, (dt, shape) in st.datasets.items()}


def check_extra(stage, out: dict, C: int) -> dict:
    """An extra stage's result: exactly its datasets, of their dtypes and shapes."""
    want = {name: (str(dt), s) for name, (dt, s) in extra_datasets(C, (stage,)).items()}
    got = {name: (str(np.dtype(a.dtype)), tuple(np.shape(a))) for name, a in out.items()}
    if got != want:
        raise DistGrailError(f"stage {stage.name}: returned {got}, its datasets are {want}")
    return out


class Done:
    """A step's result that is ready now (``result()`` returns it; nothing to ``settle``)."""

    def __init__(self, value=None):
        self.value = value

    def result(self):
        return self.value

    def settle(self):
        """Nothing runs."""


class _Later:
    """A collective step run when its result is asked for (a spread phase 5 runs after phases 3–4
    and the labels' gather, at the same point of the pipeline on every rank)."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def result(self):
        return self.fn(*self.args)

    def settle(self):
        """Nothing runs before ``result()``."""


class _Block:
    """An MPI rank's block of mask words under way on a stream of its own."""

    def __init__(self, be, ids, pending):
        self.be, self.ids, self.pending = be, ids, pending

    def settle(self):
        """On a failure elsewhere: wait for the sweep."""
        p, self.pending = self.pending, None
        if p is not None:
            p.settle()

    def result(self):
        with self.be.on_device():
            out, inn = self.pending.result()  # the sweep's stream is done
        return self.ids, out, inn
