"""Edge insertions into an index, exact, without reading or condensing the original graph again.

:func:`insert_edges` takes an :class:`~distgrail.index.Index` and new edges ``u -> v`` between
its vertices and returns an index that answers for the graph plus those edges:

1. The edges are mapped to the index's components. An edge inside one component, or one whose
   tail the index already answers as reaching its head, adds no reachability: it changes nothing
   (every filter and every label stays as it is; the edge is only recorded). Which edges are
   known to be implied depends on the check: with the index's query state on the device (after
   a query, or in ``serve``), its exact answers; without one (``distgrail update``), the
   prefilter over the arrays the sweep uploads anyway, whose undecided edges are swept in as DAG
   edges (an implied edge changes no label; the report counts it as added). An edge given again
   later in the same batch is implied by its first copy: counted as already reachable.
2. The other edges (distinct component pairs) are swept into the labels
   (:mod:`distgrail.stages.insertion`): components the edges put on a cycle are merged, the DAG's
   rows of the tails and merged components are written again, levels and ``in`` masks are pushed
   down from the heads, intervals and ``out`` masks up from the tails, only as far as they change,
   and the components are numbered by level again. The forest and its ranks stay. On the GPU
   backend this runs on the device. With more new DAG edges than ``rebuild_above``, the labels are
   made again over the components instead (:func:`distgrail.build_index` on the condensed DAG plus
   the edges, same dims, seed, parent rule and K; its condensation merges the new cycles). Either
   way the original graph is neither read nor condensed again.
3. Every edge given is appended to the dataset ``updates/edges`` (original vertex ids, in the
   order given), so an index says what was added since it was built (``info`` shows the count;
   an index that holds it still opens in any earlier reader: a dataset it does not use).

Answers are those of an index built from the original graph plus the edges (the tests compare
with BFS over both); the labels themselves may differ from that build's (other component
numbers, widened intervals). Edges naming a vertex the index does not have are refused (new vertices need a
rebuild: ``distgrail index``); so is an index built from node labels (ids only, for now).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ._version import __version__
from .arrays import unique
from .errors import QueryError, id_range
from .indexfile.layout import UPDATES
from .progress import Steps

__all__ = ["insert_edges", "UpdateReport", "UPDATES", "LOG", "LOG_COLUMNS", "METHODS", "update_summary", "checked_edges", "in_memory"]


#: one row per update, int64: the columns of :data:`LOG_COLUMNS` (``info`` sums them)
LOG = "updates/log"
LOG_COLUMNS = ("given", "same_component", "already_reachable", "added", "components_before", "components_after",
               "method", "decided_before_ppm", "decided_after_ppm")
#: the ``method`` column's codes
METHODS = ("unchanged", "swept", "relabelled")
#: random vertex pairs (seed :data:`SAMPLE_SEED`) whose share decided by the filters a swept
#: update records before and after (``decided_*_ppm``; -1 where none was taken)
SAMPLE_PAIRS, SAMPLE_SEED = 100_000, 45


@dataclass
class UpdateReport:
    """What :func:`insert_edges` did: edges given, inside one component, already reachable (by
    the index, or a repeat of an edge given before it in the batch), added to the DAG; components before and after (fewer: merged by new cycles); whether the
    labels were made again; seconds per step."""

    given: int = 0
    same_component: int = 0
    already_reachable: int = 0
    added: int = 0
    components_before: int = 0
    components_after: int = 0
    relabelled: bool = False
    #: "unchanged" (no edge adds reachability), "swept" (the labels swept from the new edges) or
    #: "relabelled" (more new DAG edges than ``rebuild_above``: the components labelled again)
    method: str = "unchanged"
    #: what the sweep did (:func:`distgrail.stages.insertion.sweep_insertions`'s ``info``)
    sweep: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"given": self.given, "same_component": self.same_component,
                "already_reachable": self.already_reachable, "added": self.added,
                "components_before": self.components_before, "components_after": self.components_after,
                "relabelled": self.relabelled, "method": self.method, "sweep": dict(self.sweep), "seconds": {k: round(v, 6) for k, v in self.seconds.items()}}

    def summary(self) -> str:
        return (f"{self.given:,} edge(s): {self.same_component:,} inside one component, "
                f"{self.already_reachable:,} already reachable, {self.added:,} added to the DAG; components "
                f"{self.components_before:,} -> {self.components_after:,}"
                + {"unchanged": "; labels unchanged", "relabelled": "; labels made again over the components "
                   "(more new DAG edges than --rebuild-above)",
                   "swept": "; labels swept from the new edges"}[self.method])


def checked_edges(index, sources, targets):
    """``(src, dst)`` int64 vertex ids of the new edges, each in 0..n-1 (else a DistGrailError
    naming the first one outside)."""
    if index.node_labels is not None:
        raise QueryError("insert_edges: this index was built from node labels; updates take vertex ids "
                             "only (rebuild with distgrail index)")
    s, t = np.asarray(sources), np.asarray(targets)
    if s.shape != t.shape or s.ndim != 1:
        raise QueryError(f"insert_edges: sources and targets must be 1-D of equal length, got shapes "
                             f"{s.shape} and {t.shape}")
    for a, what in ((s, "sources"), (t, "targets")):
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise QueryError(f"insert_edges: {what} must be integer vertex ids, got dtype {a.dtype}")
        bad = np.flatnonzero((a < 0) | (a >= index.n)) if a.size else ()
        if len(bad):
            raise QueryError(f"insert_edges: {what}[{int(bad[0])}] = {int(a[bad[0]])} is not a vertex of the "
                                 f"index ({id_range(index.n, lead='', whose='it')}); new vertices need a rebuild "
                                 "(distgrail index)")
    return s.astype(np.int64), t.astype(np.int64)


def insert_edges(index, sources, targets, *, backend: str = "auto", progress: bool = False,
                 rebuild_above: int | None = None, consume: bool = False, write=None, keep_ids: bool = False):
    """``(new index, UpdateReport)``: ``index`` answering for its graph plus the edges
    ``sources[i] -> targets[i]`` (module doc). ``index`` itself is not changed; when no edge
    adds reachability the new index shares its arrays. ``rebuild_above``: with more new DAG
    edges than this the labels are made again over the components instead of swept
    (default :func:`default_rebuild_above`). ``consume``: the swept arrays come back into the
    memory of ``index``'s own host arrays, which are then spent (``index`` must not be used after;
    what ``distgrail update`` does: its input is read for this alone). ``write(new, ready)``:
    writes the new index while its swept arrays come down from the device, in the order of the
    file (``ready(name)`` returns once dataset ``name``'s values are in ``new.arrays``; pass it to
    :meth:`Index.save <distgrail.index.Index.save>`); called once, and this returns after it and
    every download (``report.seconds["write"]``). ``keep_ids``: a swept update keeps every
    component's id (no renumbering: levels no longer sorted by id, merged-away components left as
    dead rows; :func:`~distgrail.stages.insertion.sweep_insertions`), and the new index's
    :attr:`changed` names the rows that differ from ``index``'s by dataset (what a change-only file
    stores); else (and for an unchanged or relabelled update) :attr:`changed` is None."""
    from .index import Index

    from .gpu.backend import get_backend

    be = get_backend(backend)
    in_memory(index, "insert_edges")
    report = UpdateReport(components_before=live_components(index))
    t0 = time.perf_counter()
    s, t = checked_edges(index, sources, targets)
    report.given = int(s.size)
    comp = index.arrays["vertex/component"]
    cs, ct = comp[s].astype(np.int64), comp[t].astype(np.int64)
    cand = np.flatnonzero(cs != ct)
    report.same_component = int(s.size - cand.size)
    done = np.stack([s, t], axis=1)
    if UPDATES in index.arrays:
        done = np.concatenate([np.asarray(index.arrays[UPDATES], dtype=np.int64).reshape(-1, 2), done])
    m = index.meta
    limit = rebuild_above if rebuild_above is not None else default_rebuild_above(index)
    state = index._query_state.get((be.name, be.device))
    with Steps(progress, total=["checking the edges", "sweeping the labels"], desc="distgrail update") as steps:
        dev = None
        with steps.stage("checking the edges"):
            if cand.size and cand.size <= limit and not (state is not None and state.built):
                # no query state on this device yet: the index goes up once, for the sweep, and the
                # prefilter there tells which edges the index already answers (undecided ones are
                # swept: an implied edge changes no label)
                dev = _Device(index, be)
                reach = dev.known_reachable(cs[cand], ct[cand])
            else:  # the index's own exact answers (its query state is there, or the batch is relabelled)
                reach = index.query(s[cand], t[cand], backend=be)[0] if cand.size else np.zeros(0, bool)
        new = added_edges(s, t, cand, reach, report)
        report.seconds["check"] = time.perf_counter() - t0
        if not new.size:  # nothing reaches further: the index answers already
            steps.skip("sweeping the labels")
            dev = None  # (its device arrays go before the write)
        else:
            t1 = time.perf_counter()
            key = unique(np, cs[new] * index.C + ct[new])  # distinct component edges, sorted
            pairs = np.stack([key // index.C, key % index.C], axis=1)
            if pairs.shape[0] > limit:
                steps.skip("sweeping the labels")  # (the relabelling shows its own steps)
                arrays, over_meta = _relabel(index, pairs, be, progress)
                report.method = "relabelled"
            else:
                with steps.stage("sweeping the labels"):
                    served = _served(index, be, state)
                    dev = dev or (_Device.from_state(index, be, served) if served is not None else _Device(index, be))
                    # (a served index: its host arrays come down after the update is served)
                    arrays, over_meta, report.sweep, on_device = dev.sweep(
                        pairs, consume=consume, keep_on_device=served is not None,
                        arrive=write is not None or served is not None, defer=write is None and served is not None,
                        renumber=not keep_ids)
                report.method = "swept"
                report.seconds.update({f"sweep_{k}": v for k, v in report.sweep.pop("seconds").items()})
    if not new.size:  # (written once the steps are closed, as after a sweep)
        arrays = dict(index.arrays)
        arrays[UPDATES] = done
        report.components_after = report.components_before
        arrays[LOG] = _log(index, report)
        out = Index(index.meta, arrays)
        out._lock, out._query_state = index._lock, index._query_state  # same labels: the same query state
        _written(out, write, None, report)
        report.seconds["total"] = time.perf_counter() - t0
        return out, report
    report.seconds[report.method] = time.perf_counter() - t1
    arrivals = dev.arrivals if report.method == "swept" else None
    try:
        arrays[UPDATES] = done
        meta = {k: v for k, v in m.items() if k not in ("path", "layout", "parts")}  # (of the file it came from)
        meta["distgrail_version"] = __version__
        meta.update(over_meta)
        if "components_by_level" not in over_meta:  # (renumbered or relabelled: sorted by level again)
            meta.pop("components_by_level", None)
        report.sweep.pop("components_after", None)
        if report.method == "swept":  # (dead rows an update that kept the ids left are not components)
            report.components_after = report.components_before - int(report.sweep["components_merged"])
        else:
            report.components_after = int(meta["n_components"]) - (index.C - report.components_before)
        changed = report.sweep.pop("changed", None)
        report.relabelled = report.method == "relabelled"
        arrays[LOG] = _log(index, report)
        out = Index(meta, arrays)
        out.changed = changed
        _written(out, write, arrivals, report)
        if write is None and arrivals is not None:  # (a served index: its host arrays still landing)
            out._pending = arrivals
    except BaseException:
        if arrivals is not None:  # (no copy still lands in memory the caller may reuse)
            arrivals.join(cancel=True)
        raise
    if report.method == "swept" and on_device is not None:  # a served index: the new state packed on the device
        t2 = time.perf_counter()
        try:
            with be.on_device():
                out._adopt_state(be, on_device)
            report.seconds["state"] = time.perf_counter() - t2
        except be.xp.cuda.memory.OutOfMemoryError:  # (left to be made from the host arrays when first used)
            del on_device
            be.xp.get_default_memory_pool().free_all_blocks()
        on_device = None
    report.seconds["total"] = time.perf_counter() - t0
    return out, report


def in_memory(index, what: str) -> None:
    """QueryError unless every dataset of ``index`` is in memory (not left in its file by
    ``open_index(defer=...)``, which only :func:`distgrail.update_rows.insert_rows`' array sweep
    reads: it takes them from the file to the device)."""
    left = sorted(n for n, a in index.arrays.items() if not isinstance(a, np.ndarray))
    if left:
        raise QueryError(f"{what}: the index was opened with /{left[0]} and {len(left) - 1} more dataset(s) left in its "
                         "file (open_index(defer=...)); open it whole, or update it with insert_rows' array sweep")


def added_edges(s, t, cand, reach, report) -> np.ndarray:
    """The positions among ``cand`` (edges between two components) of the edges to sweep in: those
    not ``reach``-ed already, a repeat of an edge given before it left out (implied by its first
    copy, not added twice); ``report``'s counts of both set."""
    new = cand[~reach]
    if new.size > 1:
        _, first = np.unique(np.stack([s[new], t[new]], axis=1), axis=0, return_index=True)
        new = new[np.sort(first)]
    report.already_reachable = int(cand.size - new.size)
    report.added = int(new.size)
    return new


def live_components(index) -> int:
    """The components of ``index`` that vertices belong to: its rows but those an update that
    kept the ids merged away (dead rows; the last ``updates/log`` row's ``components_after``)."""
    if LOG not in index.arrays:
        return index.C
    log = np.asarray(index.arrays[LOG], dtype=np.int64).reshape(-1, len(LOG_COLUMNS))
    return int(log[-1, LOG_COLUMNS.index("components_after")]) if log.shape[0] else index.C


def _written(out, write, arrivals, report) -> None:
    """``write(out, ready)`` while ``arrivals`` (the swept arrays' downloads, or None: all there)
    land; returns once both are done, the write's time in ``report.seconds``."""
    if write is None:
        return
    t = time.perf_counter()
    try:
        write(out, arrivals.wait if arrivals is not None else (lambda name: None))
    except BaseException:
        if arrivals is not None:
            arrivals.join(cancel=True)
        raise
    if arrivals is not None:
        arrivals.join()
        report.seconds["sweep_download"] = arrivals.seconds  # (beside the write)
    report.seconds["write"] = time.perf_counter() - t


def _served(index, be, state):
    """The GPU :class:`~distgrail.query.stats.Labels` of ``index``'s built query state on ``be``
    (an index being served), when the sweep may start from them and the new index's state be
    packed beside them on the device (room for a second state's records); else None."""
    if not be.is_gpu or state is None or not state.built or index.C == 0:
        return None
    from .gpu.memory import available_gpu_bytes

    L = state.get(None)[0]
    n, C, m, d, W = index.n, index.C, int(index.arrays["dag/indices"].size), index.dims, L.W
    csr = 4 * n + 4 * m + 8 * (C + 1)  # comp, indices, indptr (int32/int64 as the state holds them)
    sweep = C * (8 + 16 * d + 16 * W + 16) + csr  # level, lo/hi, masks (int64/uint64), ranks, sizes, parents
    with be.on_device():
        free, _, _ = available_gpu_bytes()
    # the swept arrays and the new state's records and CSR beside the old state, with room to spare
    return L if free > 1.25 * (sweep + int(L.rec.nbytes) + csr) else None


def default_rebuild_above(index) -> int:
    """New DAG edges past which :func:`insert_edges` labels the components again rather than
    sweeping: a fifth of the DAG's edges, at least 1,000,000: from about there relabelling
    costs less than the sweep (docs/benchmarks.md, session 26), and it leaves fresh labels behind."""
    return max(1_000_000, int(index.meta.get("n_dag_edges", 0)) // 5)


def _relabel(index, pairs, be, progress):
    """The components labelled again: :func:`distgrail.build_index` over the DAG plus ``pairs``."""
    from .build import build_index

    m = index.meta
    ip = np.asarray(index.arrays["dag/indptr"], dtype=np.int64)
    tail = np.repeat(np.arange(index.C, dtype=np.int64), np.diff(ip))
    head = np.asarray(index.arrays["dag/indices"], dtype=np.int64)
    graph = (np.concatenate([tail, pairs[:, 0]]), np.concatenate([head, pairs[:, 1]]))
    over = build_index(graph, num_vertices=index.C, dims=index.dims, seed=int(m["seed"]),
                       parent_rule=m["parent_rule"], supports=index.supports, backend=be, progress=progress)
    arrays = dict(over.arrays)
    inner = np.asarray(over.arrays["vertex/component"])
    arrays["vertex/component"] = inner[np.asarray(index.arrays["vertex/component"])].astype(inner.dtype, copy=False)
    return arrays, {k: over.meta[k] for k in ("n_components", "n_dag_edges", "n_levels", "supports", "backend")
                    if k in over.meta}


def _uploaded(be, arrays) -> list:
    """``arrays`` on ``be``'s device as stored: on a GPU all at once through a
    :class:`~distgrail.gpu.dma.Stager`'s threads and page-locked buffers (the driver locks an
    array's own pages on one thread: docs/benchmarks.md), else as they are."""
    if not be.is_gpu:
        return [np.asarray(x) for x in arrays]
    from .gpu.dma import Stager

    host = [x if isinstance(x, np.ndarray) else np.asarray(x) for x in arrays]
    with Stager(be.xp, be.device) as stager:
        return stager.upload(host)


class _Device:
    """The arrays the sweep reads, on ``be``'s device (uploaded once, in their stored types; the
    fields the sweep writes as copies; those ``index`` left in its file, read from there straight
    to the device and checked there: :func:`~distgrail.indexfile.read_device.upload_datasets`):
    what :meth:`known_reachable` (the prefilter over them) and :meth:`sweep` use."""

    arrivals = None  # the swept arrays on their way down (sweep(arrive=True))

    def __init__(self, index, be):
        t = time.perf_counter()
        self.index, self.be = index, be
        a = index.arrays
        K, C = index.supports, index.C
        names = ["labels/intervals", "vertex/component", "dag/indptr", "dag/indices", "dag/level", "labels/dt_post0",
                 "forest/subtree_size", "forest/parent"] + ["supports/out", "supports/in", "supports/ids"] * bool(K)
        with be.on_device():
            xp = self.xp = be.xp
            if not all(isinstance(a[n], np.ndarray) for n in names):  # left in the file
                from .indexfile.read_device import upload_datasets  # (open_index(defer=...)): read to the device

                got = upload_datasets(be, index.meta["path"], index.meta, a, names)
            else:
                got = dict(zip(names, _uploaded(be, [a[n] for n in names])))
            iv = got["labels/intervals"]
            out = got["supports/out"] if K else xp.zeros((C, 0), xp.uint64)
            inn = got["supports/in"] if K else xp.zeros((C, 0), xp.uint64)
            self.arr = {"comp": got["vertex/component"], "indptr": got["dag/indptr"].astype(xp.int64),
                        "indices": got["dag/indices"], "level": got["dag/level"].astype(xp.int64, copy=True),
                        "post0": got["labels/dt_post0"], "size": got["forest/subtree_size"],
                        "parent": got["forest/parent"],
                        "lo": iv[:, :, 0].astype(xp.int64),  # (64-bit: every type has GPU atomics)
                        "hi": iv[:, :, 1].astype(xp.int64), "out": out.T.copy(), "inn": inn.T.copy(),
                        "ids": got["supports/ids"] if K else xp.zeros(0, xp.int64)}
            be.synchronize()
        self.iv_dtype = np.dtype(a["labels/intervals"].dtype)
        self.upload_s = time.perf_counter() - t

    @classmethod
    def from_state(cls, index, be, L):
        """The sweep's arrays from a served index's query state ``L`` on ``be``'s device (its
        records unpacked there, in the stored types), not uploaded again; ``forest/parent`` and
        the support ids, which queries do not read, go up."""
        self = cls.__new__(cls)
        t = time.perf_counter()
        self.index, self.be = index, be
        a = index.arrays
        d, W = L.d, L.W
        B = 4 + 4 * W
        with be.on_device():
            xp = self.xp = be.xp
            rec = L.rec[:index.C]

            def stored(name, v):  # the dataset's own type (the state holds them widened)
                return v.astype(np.dtype(a[name].dtype), copy=False)

            def words(lo):  # (W, C) uint64 masks from the records' int32 halves
                return xp.ascontiguousarray(rec[:, lo:lo + 2 * W]).view(xp.uint64).T.copy()

            ix = a["dag/indices"]
            self.arr = {"comp": stored("vertex/component", L.comp), "indptr": L.indptr,
                        "indices": stored("dag/indices", L.indices) if ix.size else be.asarray(ix),
                        "level": rec[:, 0].astype(xp.int64), "post0": stored("labels/dt_post0", rec[:, 2]),
                        "size": stored("forest/subtree_size", rec[:, 2] - rec[:, 1] + 1),
                        "parent": be.asarray(a["forest/parent"]),
                        "lo": xp.ascontiguousarray(rec[:, B:B + 2 * d:2].T, dtype=xp.int64),
                        "hi": xp.ascontiguousarray(rec[:, B + 1:B + 2 * d:2].T, dtype=xp.int64),
                        "out": words(4) if W else xp.zeros((0, index.C), xp.uint64),
                        "inn": words(4 + 2 * W) if W else xp.zeros((0, index.C), xp.uint64),
                        "ids": be.asarray(a["supports/ids"]) if index.supports else xp.zeros(0, xp.int64)}
            be.synchronize()
        self.iv_dtype = np.dtype(a["labels/intervals"].dtype)
        self.upload_s = time.perf_counter() - t
        return self

    def known_reachable(self, cu, cv):
        """Component pairs the prefilter answers reachable (same component, support positive, tree
        cut) on the uploaded arrays; the others are not known to be."""
        from .query.prefilter import prefilter

        xp, be = self.xp, self.be
        with be.on_device():
            ans, _ = prefilter(_labels(xp, self.arr), xp.asarray(cu), xp.asarray(cv))
            return be.to_host(ans).astype(bool)

    def decided(self, a) -> int:
        """Parts per million of :data:`SAMPLE_PAIRS` random vertex pairs (a fixed seed) that the
        filters decide on the arrays ``a`` (the rest would go to the search): what an update
        costs the filters, before and after (``updates/log``)."""
        from .query.prefilter import prefilter

        xp, be, n = self.xp, self.be, self.index.n
        rng = np.random.default_rng(SAMPLE_SEED)
        u, v = rng.integers(0, n, SAMPLE_PAIRS), rng.integers(0, n, SAMPLE_PAIRS)
        with be.on_device():
            comp = a["comp"]
            _, code = prefilter(_labels(xp, a), comp[xp.asarray(u)].astype(xp.int64),
                                comp[xp.asarray(v)].astype(xp.int64))
            return int(xp.count_nonzero(code)) * 1_000_000 // SAMPLE_PAIRS

    def sweep(self, pairs, consume: bool = False, keep_on_device: bool = False, arrive: bool = False,
              defer: bool = False, renumber: bool = True):
        """(host arrays, meta, info, device arrays or None) of the index swept for the component
        edges ``pairs``; ``consume``: each array lands in the memory of the input's array of that
        name where it fits (pages already there: fresh pages cost as much as the copy; the input
        is spent); ``keep_on_device``: the swept arrays by dataset name are also returned as they
        are on the device (for the new index's query state), else None. ``arrive``: the host
        arrays are returned before their values, which a thread copies down in the order the index
        file is written (``self.arrivals``, a :class:`~distgrail.gpu.dma.Arrivals`). ``defer``
        (with ``arrive``; a served update, no file written) the host arrays are made on that
        thread as well, their entries None until each lands: the new index waits for them when
        first read (:attr:`Index.arrays <distgrail.index.Index.arrays>`), while its query state,
        packed from the device arrays, answers at once (a writer gets arrays of their shapes and
        types before their values, as without ``defer``). ``renumber=False``: ids kept
        (:func:`~distgrail.stages.insertion.sweep_insertions`); ``info["changed"]`` then holds
        the changed rows by dataset name, on the host (:data:`CHANGED_DATASETS`)."""
        from .dtypes import smallest_uint
        from .stages.insertion import sweep_insertions

        xp, be, a = self.xp, self.be, self.index.arrays
        K = self.index.supports
        with be.on_device():
            before = self.decided(self.arr)
            got, info = sweep_insertions(xp, self.arr, xp.asarray(pairs[:, 0]), xp.asarray(pairs[:, 1]),
                                         renumber=renumber)
            if "changed" in info:
                info["changed"] = _changed_datasets(be, info["changed"], K)
            self.arr = None  # (swept in place)
            info["decided_ppm"] = (before, self.decided(got))
            t = time.perf_counter()
            L = int(got["level"].max()) + 1 if got["level"].size else 1
            out = {"vertex/component": got["comp"], "dag/indptr": got["indptr"], "dag/indices": got["indices"],
                   "dag/level": got["level"].astype(smallest_uint(max(L - 1, 0))), "forest/parent": got["parent"],
                   "forest/subtree_size": got["size"], "labels/dt_post0": got["post0"],
                   "labels/intervals": xp.stack([got["lo"], got["hi"]], axis=-1).astype(self.iv_dtype)}
            if K:  # cast and stacked on the device: each array comes back once, as stored
                out["supports/ids"] = got["ids"].astype(np.asarray(a["supports/ids"]).dtype)
                out["supports/out"] = xp.ascontiguousarray(got["out"].T)
                out["supports/in"] = xp.ascontiguousarray(got["inn"].T)
            del got
            sizes = {k: int(v.size) for k, v in out.items()}
            if arrive and defer:  # (every entry there before the thread starts: it adds no key)
                from .gpu.dma import Arrivals
                from .indexfile.layout import dataset_order

                arrays = dict.fromkeys(out)
                self.arrivals = Arrivals(be.to_host, [(k, out[k], None) for k in dataset_order(out)],
                                         context=be.side_stream(), make=_fresh, into=arrays)
            elif arrive:
                from .gpu.dma import Arrivals
                from .indexfile.layout import dataset_order

                arrays = {k: (_landing(a.get(k), v) if consume else None) for k, v in out.items()}
                arrays = {k: h if h is not None else _fresh(out[k]) for k, h in arrays.items()}
                # (on a stream of the thread's own, after the sweep's work queued here)
                self.arrivals = Arrivals(be.to_host, [(k, out[k], arrays[k]) for k in dataset_order(out)],
                                         context=be.side_stream())
            else:
                arrays = {k: be.to_host(v, out=_landing(a.get(k), v) if consume else None) for k, v in out.items()}
            if not keep_on_device:
                out = None
        info["seconds"]["upload"] = self.upload_s
        info["seconds"]["download"] = time.perf_counter() - t
        for k, v in a.items():  # node labels and any other dataset the sweep does not touch
            if k not in arrays and not k.startswith(("vertex/component", "dag/", "forest/", "labels/", "supports/")):
                arrays[k] = v
        meta = {"n_components": int(sizes["dag/level"]), "n_dag_edges": int(sizes["dag/indices"]),
                "n_levels": L, "backend": be.name, "supports": int(K)}
        if not renumber:
            meta["components_by_level"] = int(info.pop("components_by_level"))
        return arrays, meta, info, out


#: the dataset each field of a kept-ids sweep's ``changed`` rows stands for (``dag``: the rows of
#: the CSR ``dag/indptr``, ``dag/indices`` written again)
CHANGED_DATASETS = {"comp": "vertex/component", "dag": "dag", "level": "dag/level", "lo": "labels/intervals",
                    "out": "supports/out", "inn": "supports/in"}


def _changed_datasets(be, changed: dict, K: int, host: bool = True) -> dict:
    """The sweep's changed rows by field as int64 arrays by dataset name (the intervals' rows:
    the union of ``lo``'s and ``hi``'s; no mask rows without supports), on the host (``host``)
    or left on the device."""
    rows = dict(changed)
    rows["lo"] = unique(be.xp, be.xp.concatenate([rows["lo"], rows.pop("hi")]))
    return {CHANGED_DATASETS[k]: be.to_host(v).astype(np.int64) if host else v.astype(be.xp.int64, copy=False)
            for k, v in rows.items() if K or k not in ("out", "inn")}


def _labels(xp, a):
    """The prefilter's :class:`~distgrail.query.stats.Labels` over the sweep's arrays ``a``."""
    from .query.stats import Labels

    start0 = a["post0"].astype(xp.int64) - a["size"].astype(xp.int64) + 1
    return Labels(comp=a["comp"], indptr=a["indptr"], indices=a["indices"], C=int(a["level"].size),
                  d=int(a["lo"].shape[0]), W=int(a["out"].shape[0]), level=a["level"], lo=a["lo"], hi=a["hi"],
                  start0=start0, post0=a["post0"].astype(xp.int64), out=a["out"], inn=a["inn"])


def _landing(old, new):
    """A host array for device array ``new`` in the memory of host array ``old`` (a view of its
    first bytes: same dtype, contiguous, writable, large enough), or None."""
    if not (isinstance(old, np.ndarray) and old.dtype == new.dtype and old.flags.c_contiguous
            and old.flags.writeable and old.size >= new.size):
        return None
    return old.reshape(-1)[:new.size].reshape(new.shape)


def _fresh(v) -> np.ndarray:
    """A host array for device array ``v``, its pages mapped over the host threads (a download
    into fresh pages would map them one at a time)."""
    from .arrays import populate

    h = np.empty(v.shape, dtype=v.dtype)
    populate(h)
    return h


def _log(index, report) -> np.ndarray:
    """``updates/log`` of ``index`` with ``report``'s row appended."""
    before, after = report.sweep.get("decided_ppm", (-1, -1))
    row = np.array([[report.given, report.same_component, report.already_reachable, report.added,
                     report.components_before, report.components_after, METHODS.index(report.method), before, after]],
                   np.int64)
    if LOG in index.arrays:
        return np.concatenate([np.asarray(index.arrays[LOG], dtype=np.int64).reshape(-1, len(LOG_COLUMNS)), row])
    return row


def update_summary(arrays) -> dict | None:
    """What the updates of an index cost, from ``updates/log`` (None without updates): how many,
    the edges given and added to the DAG, components merged away, how each was made, and the
    share of random pairs the filters decide before the first swept update and after the last."""
    if LOG not in arrays:
        return None
    log = np.asarray(arrays[LOG], dtype=np.int64).reshape(-1, len(LOG_COLUMNS))
    col = {c: log[:, i] for i, c in enumerate(LOG_COLUMNS)}
    return {"updates": int(log.shape[0]), "edges_given": int(col["given"].sum()),
            "edges_added": int(col["added"].sum()),
            "components_merged": int((col["components_before"] - col["components_after"]).sum()),
            "methods": {m: int(np.count_nonzero(col["method"] == i)) for i, m in enumerate(METHODS)},
            # the filters' share of random pairs decided: before the first swept update, after the last
            "decided_share_before": _share(col["decided_before_ppm"], 0),
            "decided_share_after": _share(col["decided_after_ppm"], -1)}


def _share(ppm, at: int):
    """The ppm taken (not -1) at the first (``at`` 0) or last (-1) update, as a share; None."""
    got = ppm[ppm >= 0]
    return round(float(got[at]) / 1e6, 6) if got.size else None
