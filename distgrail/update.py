"""Edge insertions into an index, exact, without reading or condensing the original graph again.

:func:`insert_edges` takes an :class:`~distgrail.index.Index` and new edges ``u -> v`` between
its vertices and returns an index that answers for the graph plus those edges:

1. The edges are mapped to the index's components. An edge inside one component, or one whose
   tail the index already answers as reaching its head, adds no reachability: it changes nothing
   (every filter and every label stays as it is; the edge is only recorded).
2. The other edges are added to the index's condensed DAG, and the labels are made again over that
   graph of components (:func:`distgrail.build_index` on ``C`` vertices, same dims, seed, parent
   rule and K): its condensation merges the components a new edge puts on a cycle, and the
   vertices' components are composed through it. The original graph is neither read nor
   condensed again; the labelling runs over the components, not the vertices.
3. Every edge given is appended to the dataset ``updates/edges`` (original vertex ids, in the
   order given), so an index says what was added since it was built (``info`` shows the count;
   an index that holds it still opens in any earlier reader: a dataset it does not use).

Answers are those of an index built from the original graph plus the edges (the tests compare
with BFS over both); the labels themselves may differ from that build's (other component
numbers). Edges naming a vertex the index does not have are refused (new vertices need a
rebuild: ``distgrail index``); so is an index built from node labels (ids only, for now).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ._version import __version__
from .errors import QueryError

__all__ = ["insert_edges", "UpdateReport", "UPDATES"]

#: the dataset that records the inserted edges, (k, 2) int64 original vertex ids
UPDATES = "updates/edges"


@dataclass
class UpdateReport:
    """What :func:`insert_edges` did: edges given, inside one component, already reachable,
    added to the DAG; components before and after (fewer: merged by new cycles); whether the
    labels were made again; seconds per step."""

    given: int = 0
    same_component: int = 0
    already_reachable: int = 0
    added: int = 0
    components_before: int = 0
    components_after: int = 0
    relabelled: bool = False
    seconds: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"given": self.given, "same_component": self.same_component,
                "already_reachable": self.already_reachable, "added": self.added,
                "components_before": self.components_before, "components_after": self.components_after,
                "relabelled": self.relabelled, "seconds": {k: round(v, 6) for k, v in self.seconds.items()}}

    def summary(self) -> str:
        return (f"{self.given:,} edge(s): {self.same_component:,} inside one component, "
                f"{self.already_reachable:,} already reachable, {self.added:,} added to the DAG; components "
                f"{self.components_before:,} -> {self.components_after:,}"
                + ("; labels made again over the components" if self.relabelled else "; labels unchanged"))


def _checked_edges(index, sources, targets):
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
                                 f"index (0..{index.n - 1}); new vertices need a rebuild (distgrail index)")
    return s.astype(np.int64), t.astype(np.int64)


def insert_edges(index, sources, targets, *, backend: str = "auto", progress: bool = False):
    """``(new index, UpdateReport)``: ``index`` answering for its graph plus the edges
    ``sources[i] -> targets[i]`` (module doc). ``index`` itself is not changed; when no edge
    adds reachability the new index shares its arrays."""
    from .build import build_index
    from .index import Index

    report = UpdateReport(components_before=index.C)
    t0 = time.perf_counter()
    s, t = _checked_edges(index, sources, targets)
    report.given = int(s.size)
    comp = index.arrays["vertex/component"]
    cs, ct = comp[s].astype(np.int64), comp[t].astype(np.int64)
    other = cs != ct
    report.same_component = int(np.count_nonzero(~other))
    reach = index.query(s[other], t[other], backend=backend)[0] if other.any() else np.zeros(0, bool)
    new = np.flatnonzero(other)[~reach]
    report.already_reachable = int(np.count_nonzero(reach))
    report.added = int(new.size)
    report.seconds["check"] = time.perf_counter() - t0
    done = np.stack([s, t], axis=1)
    if UPDATES in index.arrays:
        done = np.concatenate([np.asarray(index.arrays[UPDATES], dtype=np.int64).reshape(-1, 2), done])
    if not new.size:  # nothing reaches further: the index answers already
        arrays = dict(index.arrays)
        arrays[UPDATES] = done
        report.components_after = index.C
        report.seconds["total"] = time.perf_counter() - t0
        out = Index(index.meta, arrays)
        out._lock, out._query_state = index._lock, index._query_state  # same labels: the same query state
        return out, report
    t1 = time.perf_counter()
    ip = np.asarray(index.arrays["dag/indptr"], dtype=np.int64)
    tail = np.repeat(np.arange(index.C, dtype=np.int64), np.diff(ip))
    head = np.asarray(index.arrays["dag/indices"], dtype=np.int64)
    graph = (np.concatenate([tail, cs[new]]), np.concatenate([head, ct[new]]))
    m = index.meta
    K = index.supports
    over = build_index(graph, num_vertices=index.C, dims=index.dims, seed=int(m["seed"]),
                       parent_rule=m["parent_rule"], supports=K, backend=backend, progress=progress)
    report.seconds["relabel"] = time.perf_counter() - t1
    arrays = dict(over.arrays)
    inner = np.asarray(over.arrays["vertex/component"])
    arrays["vertex/component"] = inner[np.asarray(comp)].astype(inner.dtype, copy=False)
    arrays[UPDATES] = done
    meta = {k: v for k, v in m.items() if k not in ("path", "layout", "parts")}  # (of the file it came from)
    meta["distgrail_version"] = __version__
    for k in ("n_components", "n_dag_edges", "n_levels", "supports", "backend"):
        if k in over.meta:
            meta[k] = over.meta[k]
    report.components_after = int(meta["n_components"])
    report.relabelled = True
    report.seconds["total"] = time.perf_counter() - t0
    return Index(meta, arrays), report
