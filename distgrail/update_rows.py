"""Edge insertions that produce only the changed rows of an index, on the CPU: what ``distgrail
update`` writes as a patch over the index it read (:mod:`distgrail.indexfile.patch`).

:func:`insert_rows` does what :func:`distgrail.update.insert_edges` does for a swept update with
``keep_ids=True`` (the same checks, the same answers, the same record in ``updates/edges`` and
``updates/log``), but over the index's host arrays in place, with the compiled walks of
:mod:`distgrail.stages.insertion_rows`, and returns the rows that differ from the file's base
instead of a new index: no CUDA, no upload, no pass over every row, no renumbering. The edges'
check takes the prefilter's certificates (same component, a support between them, the tree cut)
over the rows of the components the edges name; edges left undecided are swept (an implied edge
changes no label). The filters' decided share of :data:`~distgrail.update.SAMPLE_PAIRS` random
pairs before and after is taken the same way, over the rows those pairs name.

Returns None (the caller then runs :func:`~distgrail.update.insert_edges`) when the batch is past
``rebuild_above`` (the components are labelled again) or a level would pass its stored type.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .arrays import unique
from .update import (LOG, SAMPLE_PAIRS, SAMPLE_SEED, UPDATES, UpdateReport, _log, checked_edges, default_rebuild_above,
                     live_components)

__all__ = ["insert_rows", "RowsUpdate", "apply_rows"]


@dataclass
class RowsUpdate:
    """The changed rows of an index after :func:`insert_rows`, relative to the arrays it read
    (or, with ``previous``, to their base): ``rows`` {dataset: (sorted int64 rows, values)}
    along the component axis (axis 1 of ``labels/intervals``, axis 0 of the others),
    ``dag`` (rows, indptr, indices) the DAG rows written again as a CSR over those rows,
    ``whole`` small datasets written whole, ``meta`` the new root attributes."""

    meta: dict
    rows: dict = field(default_factory=dict)
    dag: tuple | None = None
    whole: dict = field(default_factory=dict)


def _gathered(a, cu, cv):
    """The prefilter's (answer, code) for component pairs ``(cu, cv)`` over only their rows."""
    from .query.prefilter import prefilter
    from .query.stats import Labels

    both = np.concatenate([cu, cv])
    ids = unique(np, both)
    inv = np.searchsorted(ids, both)
    k = cu.size
    iv = a["labels/intervals"]
    post0 = a["labels/dt_post0"][ids].astype(np.int64)
    start0 = post0 - a["forest/subtree_size"][ids].astype(np.int64) + 1
    W = a["supports/out"].shape[1] if "supports/out" in a else 0
    masks = {}
    if W:
        masks = {"out": np.ascontiguousarray(a["supports/out"][ids].T), "inn": np.ascontiguousarray(a["supports/in"][ids].T)}
    L = Labels(comp=None, indptr=None, indices=None, C=int(ids.size), d=int(iv.shape[0]), W=int(W),
               level=a["dag/level"][ids], lo=np.ascontiguousarray(iv[:, ids, 0]), hi=np.ascontiguousarray(iv[:, ids, 1]),
               start0=start0, post0=post0, **masks)
    return prefilter(L, inv[:k].astype(np.int64), inv[k:].astype(np.int64))


def _decided(a, comp_of, n) -> int:
    """Parts per million of the sample pairs (:data:`SAMPLE_PAIRS`, seed :data:`SAMPLE_SEED`)
    the filters decide; ``comp_of(vertices)`` gives their components."""
    rng = np.random.default_rng(SAMPLE_SEED)
    u, v = rng.integers(0, n, SAMPLE_PAIRS), rng.integers(0, n, SAMPLE_PAIRS)
    _, code = _gathered(a, comp_of(u), comp_of(v))
    return int(np.count_nonzero(code)) * 1_000_000 // SAMPLE_PAIRS


def insert_rows(index, sources, targets, *, rebuild_above: int | None = None, previous: dict | None = None):
    """``(RowsUpdate, UpdateReport)`` for the edges ``sources[i] -> targets[i]`` (module doc), or
    None. ``index``'s arrays are changed in place (levels, intervals, masks): it is spent.
    ``previous``: {dataset: sorted rows} a patch over the same base already holds (``"dag"``
    for its DAG rows): the rows returned are the union, their values the new ones."""
    from .stages.insertion_rows import LevelOverflow, sweep_rows

    t0 = time.perf_counter()
    a = index.arrays
    report = UpdateReport(components_before=live_components(index))
    s, t = checked_edges(index, sources, targets)
    report.given = int(s.size)
    comp = a["vertex/component"]
    cs, ct = comp[s].astype(np.int64), comp[t].astype(np.int64)
    cand = np.flatnonzero(cs != ct)
    report.same_component = int(s.size - cand.size)
    limit = rebuild_above if rebuild_above is not None else default_rebuild_above(index)
    if cand.size > limit:
        return None
    reach = _gathered(a, cs[cand], ct[cand])[0] if cand.size else np.zeros(0, bool)
    new = cand[~reach]
    if new.size > 1:  # a repeat of an edge given before it: implied by its first copy
        _, first = np.unique(np.stack([s[new], t[new]], axis=1), axis=0, return_index=True)
        new = new[np.sort(first)]
    report.already_reachable = int(cand.size - new.size)
    report.added = int(new.size)
    report.seconds["check"] = time.perf_counter() - t0
    if not new.size:
        return None  # (nothing reaches further: the general path records the edges without a sweep)
    C = index.C
    key = unique(np, cs[new] * C + ct[new])
    if key.size > limit:
        return None
    before = _decided(a, lambda v: comp[v].astype(np.int64), index.n)
    iv = a["labels/intervals"]
    K = index.supports
    W = a["supports/out"].shape[1] if K else 0
    arr = {"comp": comp, "indptr": a["dag/indptr"], "indices": a["dag/indices"], "level": a["dag/level"],
           "size": a["forest/subtree_size"], "lo": iv[:, :, 0], "hi": iv[:, :, 1],
           "out": a["supports/out"] if K else np.zeros((C, 0), np.uint64),
           "inn": a["supports/in"] if K else np.zeros((C, 0), np.uint64),
           "ids": a["supports/ids"] if K else np.zeros(0, np.int64)}
    t1 = time.perf_counter()
    try:
        got = sweep_rows(arr, key // C, key % C)
    except LevelOverflow:
        return None
    report.seconds["swept"] = time.perf_counter() - t1
    info = got.info
    def comp_after(v):
        c = comp[v].astype(np.int64)
        if got.comp_rows.size:
            at = np.minimum(np.searchsorted(got.comp_rows, v), got.comp_rows.size - 1)
            hit = got.comp_rows[at] == v
            c[hit] = got.comp_values[at[hit]]
        return c

    after = _decided(a, comp_after, index.n)
    report.method = "swept"
    report.components_after = report.components_before - int(info["components_merged"])
    report.sweep = {k: v for k, v in info.items() if k not in ("seconds", "sorted_near_changes", "top_level",
                                                               "components_after")}
    report.sweep["decided_ppm"] = (before, after)
    report.seconds.update({f"sweep_{k}": v for k, v in info["seconds"].items()})
    prev = previous or {}
    rows = {}

    def put(name, r, values):
        rows[name] = (r, values(r))

    def union(name, r):
        return unique(np, np.concatenate([r, prev[name]])) if name in prev else r

    put("dag/level", union("dag/level", got.rows["level"]), lambda r: a["dag/level"][r])
    put("labels/intervals", union("labels/intervals", got.rows["lo"]), lambda r: iv[:, r, :])
    if K:
        put("supports/in", union("supports/in", got.rows["inn"]), lambda r: a["supports/in"][r])
        put("supports/out", union("supports/out", got.rows["out"]), lambda r: a["supports/out"][r])
    cr = union("vertex/component", got.comp_rows)
    rows["vertex/component"] = (cr, comp_after(cr).astype(comp.dtype))
    dag = _dag_union(a, got, prev.get("dag"))
    old_m = int(a["dag/indices"].size)
    removed = int((a["dag/indptr"][got.dag_rows + 1] - a["dag/indptr"][got.dag_rows]).sum())
    m = index.meta
    meta = {k: v for k, v in m.items() if k not in ("path", "layout", "parts")}
    from ._version import __version__

    by_level = int(m.get("components_by_level", 1)) and info["sorted_near_changes"]
    meta.update(distgrail_version=__version__, n_components=C, n_dag_edges=old_m - removed + int(got.dag_idx.size),
                n_levels=max(int(m["n_levels"]), info["top_level"] + 1), components_by_level=int(bool(by_level)))
    done = np.stack([s, t], axis=1)
    if UPDATES in a:
        done = np.concatenate([np.asarray(a[UPDATES], dtype=np.int64).reshape(-1, 2), done])
    whole = {UPDATES: done, LOG: _log(index, report)}
    if K:
        whole["supports/ids"] = np.asarray(got.ids).astype(a["supports/ids"].dtype)
    report.seconds["total"] = time.perf_counter() - t0
    return RowsUpdate(meta=meta, rows=rows, dag=dag, whole=whole), report


def _dag_union(a, got, prev_rows):
    """(rows, indptr, indices) of the DAG rows written again, with the rows ``prev_rows`` (an
    earlier patch's) as the arrays ``a`` hold them where this update did not write them."""
    rows, ptr, idx = got.dag_rows, got.dag_ptr, got.dag_idx
    if prev_rows is None or not np.setdiff1d(prev_rows, rows).size:
        return rows, ptr, idx
    ip, ix = a["dag/indptr"], a["dag/indices"]
    extra = np.setdiff1d(prev_rows, rows)
    allr = np.union1d(rows, extra)
    cnt = np.empty(allr.size, np.int64)
    mine = np.isin(allr, rows)
    cnt[mine] = np.diff(ptr)
    cnt[~mine] = (ip[extra + 1] - ip[extra]).astype(np.int64)
    nptr = np.zeros(allr.size + 1, np.int64)
    np.cumsum(cnt, out=nptr[1:])
    nidx = np.empty(int(nptr[-1]), dtype=idx.dtype)
    for r_at, (lo, hi) in zip(np.flatnonzero(mine), zip(ptr[:-1], ptr[1:])):
        nidx[nptr[r_at]:nptr[r_at + 1]] = idx[lo:hi]
    for r_at, c in zip(np.flatnonzero(~mine), extra):
        nidx[nptr[r_at]:nptr[r_at + 1]] = ix[ip[c]:ip[c + 1]]
    return allr, nptr, nidx


def apply_rows(arrays: dict, up: RowsUpdate) -> dict:
    """The whole arrays of the index ``up`` describes, from the arrays of its base (a reference:
    what a reader of the patch gets; a plain reference for the tests)."""
    out = dict(arrays)
    for name, (r, v) in up.rows.items():
        x = np.array(arrays[name])
        if name == "labels/intervals":
            x[:, r, :] = v
        else:
            x[r] = v
        out[name] = x
    if up.dag is not None:
        rows, ptr, idx = up.dag
        ip, ix = np.asarray(arrays["dag/indptr"], np.int64), arrays["dag/indices"]
        C = ip.size - 1
        cnt = np.diff(ip)
        cnt[rows] = np.diff(ptr)
        nip = np.zeros(C + 1, np.int64)
        np.cumsum(cnt, out=nip[1:])
        nix = np.empty(int(nip[-1]), ix.dtype)
        keep = np.ones(C, bool)
        keep[rows] = False
        kr = np.flatnonzero(keep)
        src = np.concatenate([np.arange(ip[c], ip[c + 1]) for c in kr]) if kr.size else np.zeros(0, np.int64)
        dst = np.concatenate([np.arange(nip[c], nip[c + 1]) for c in kr]) if kr.size else np.zeros(0, np.int64)
        nix[dst] = ix[src]
        for i, c in enumerate(rows):
            nix[nip[c]:nip[c + 1]] = idx[ptr[i]:ptr[i + 1]]
        out["dag/indptr"], out["dag/indices"] = nip.astype(arrays["dag/indptr"].dtype), nix
    out.update(up.whole)
    return out
