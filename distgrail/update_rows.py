"""Edge insertions that produce only the changed rows of an index: what ``distgrail update
--layout patch`` writes as a patch over the index it read (:mod:`distgrail.indexfile.patch`).

:func:`insert_rows` does what :func:`distgrail.update.insert_edges` does for a swept update with
``keep_ids=True`` (the same checks, the same answers, the same record in ``updates/edges`` and
``updates/log``), but returns the rows that differ from the file's base instead of a new index:
no renumbering, no whole array written or brought back. On a GPU backend the sweep is
:func:`~distgrail.stages.insertion.sweep_insertions` on the device (the arrays it reads go up
once) and only the changed rows come down; on the CPU, the compiled walks of
:mod:`distgrail.stages.insertion_rows` over the index's host arrays in place (no pass over every
row). The edges' check takes the prefilter's certificates (same component, a support between
them, the tree cut) over the rows of the components the edges name; edges left undecided are
swept (an implied edge changes no label). The filters' decided share of
:data:`~distgrail.update.SAMPLE_PAIRS` random pairs before and after is taken the same way.

Returns None (the caller then runs :func:`~distgrail.update.insert_edges`) when the batch is past
``rebuild_above`` (the components are labelled again) or, on the CPU, a level would pass its
stored type.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .arrays import spans, unique
from .update import (LOG, SAMPLE_PAIRS, SAMPLE_SEED, UPDATES, UpdateReport, _log, added_edges, checked_edges,
                     default_rebuild_above, in_memory, live_components)

__all__ = ["insert_rows", "RowsUpdate", "apply_rows"]


@dataclass
class RowsUpdate:
    """The changed rows of an index after :func:`insert_rows`, relative to the arrays it read
    (or, with ``previous``, to their base): ``rows`` {dataset: (sorted int64 rows, values)}
    along the component axis (axis 1 of ``labels/intervals``, axis 0 of the others),
    ``dag`` (rows, indptr, indices) the DAG rows written again as a CSR over those rows,
    ``whole`` small datasets written whole, ``meta`` the new root attributes; ``intact``: the
    index's host arrays are as they were before the update (the array sweep, or nothing swept),
    so they may stand for the rows' values before it (``write_patched_index(prior=...)``);
    ``crcs``: ``{dataset: (crc32_block, crc32s)}`` of the whole result datasets the rows patch
    (and of ``dag/indptr``, ``dag/indices``), computed on the device where the swept arrays are
    (``write_patched_index(crcs=...)``; empty otherwise)."""

    meta: dict
    rows: dict = field(default_factory=dict)
    dag: tuple | None = None
    whole: dict = field(default_factory=dict)
    intact: bool = False
    crcs: dict = field(default_factory=dict)


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


def insert_rows(index, sources, targets, *, backend: str = "cpu", rebuild_above: int | None = None,
                previous: dict | None = None, sweep: str = "auto"):
    """``(RowsUpdate, UpdateReport)`` for the edges ``sources[i] -> targets[i]`` (module doc), or
    None. The compiled walks change ``index``'s arrays in place (levels, intervals, masks): it is
    spent; the array sweep leaves them as they were (on a GPU they go up once and only the changed
    rows come down; :attr:`RowsUpdate.intact`). ``previous``: {dataset: sorted rows} a patch over the same base already holds
    (``"dag"`` for its DAG rows; :func:`~distgrail.indexfile.patch_read.patch_rows`): the rows
    returned are the union, their values the new ones. An update that adds no DAG edge returns
    those rows (their values as ``index`` holds them) and the edges' record. ``sweep``: ``"arrays"``
    (:func:`~distgrail.stages.insertion.sweep_insertions` on the backend's device, the arrays up
    once), ``"walks"`` (the compiled walks, CPU backend only) or ``"auto"`` (arrays on a GPU,
    walks on the CPU)."""
    from .gpu.backend import get_backend

    be = get_backend(backend)
    if sweep not in ("auto", "arrays", "walks") or sweep == "walks" and be.is_gpu:
        raise ValueError(f"insert_rows: sweep must be auto, arrays or walks (walks on the CPU backend), got {sweep!r}")
    arrays = sweep == "arrays" or sweep == "auto" and be.is_gpu
    if not arrays:  # (the compiled walks change the host arrays in place)
        in_memory(index, "insert_rows(sweep='walks')")
    t0 = time.perf_counter()
    a = index.arrays
    report = UpdateReport(components_before=live_components(index))
    s, t = checked_edges(index, sources, targets)
    report.given = int(s.size)
    comp = a["vertex/component"]
    dev = None
    if arrays and not all(isinstance(x, np.ndarray) for x in a.values()):  # some left in the file
        from .update import _Device  # (open_index(defer=...)): up first, and checked there, whatever the
        # edges; their components looked up there

        dev = _Device(index, be)
        report.seconds["upload"] = dev.upload_s
        with be.on_device():
            cs, ct = (be.to_host(dev.arr["comp"][be.xp.asarray(x)]).astype(np.int64) for x in (s, t))
    else:
        cs, ct = comp[s].astype(np.int64), comp[t].astype(np.int64)
    cand = np.flatnonzero(cs != ct)
    report.same_component = int(s.size - cand.size)
    limit = rebuild_above if rebuild_above is not None else default_rebuild_above(index)
    if cand.size > limit:
        return None
    if arrays and cand.size:
        from .update import _Device

        dev = dev or _Device(index, be)  # (the arrays the sweep reads, up once; the check runs there too)
        reach = dev.known_reachable(cs[cand], ct[cand])
        report.seconds["upload"] = dev.upload_s
    else:
        reach = _gathered(a, cs[cand], ct[cand])[0] if cand.size else np.zeros(0, bool)
    new = added_edges(s, t, cand, reach, report)
    report.seconds["check"] = time.perf_counter() - t0
    prev = previous or {}
    if not new.size:  # nothing reaches further: the labels stay, the patch keeps its rows
        report.components_after = report.components_before
        if dev is not None:  # (the index's arrays on the device: its rows come from there)
            rows, dag = _device_rows(index, dev, dev.arr, {n: np.asarray(r, np.int64) for n, r in prev.items()},
                                     np.dtype(a["dag/level"].dtype))
        else:
            rows = {name: (r, _host_rows(a, name, r)) for name, r in prev.items() if name != "dag"}
            dag = (prev["dag"], *csr_rows(np, a["dag/indptr"], a["dag/indices"], prev["dag"])) if "dag" in prev else None
        counts = (int(index.meta.get("n_dag_edges", a["dag/indices"].size)), int(index.meta["n_levels"]),
                  int(index.meta.get("components_by_level", 1)))
        return _rows_update(index, report, s, t, rows, dag, a.get("supports/ids"), counts, None, t0, True)
    key = unique(np, cs[new] * index.C + ct[new])
    if key.size > limit:
        return None
    swept = (_swept_on_device if dev is not None else _swept_on_host)(index, dev, key, report, prev)
    if swept is None:
        return None
    return _rows_update(index, report, s, t, *swept, t0, dev is not None)


def _rows_update(index, report, s, t, rows, dag, ids, counts, crcs, t0, intact):
    """The :class:`RowsUpdate` of ``rows``, ``dag``, the support ``ids``, ``counts`` (DAG
    edges, levels, components numbered by level) and ``crcs`` (None: none known) after an update of ``index`` by the edges
    ``s -> t`` (``report`` filled): its root attributes and the datasets written whole."""
    from ._version import __version__

    a, m = index.arrays, index.meta
    meta = {k: v for k, v in m.items() if k not in ("path", "layout", "parts", "patched")}
    meta.update(distgrail_version=__version__, n_components=index.C, n_dag_edges=int(counts[0]),
                n_levels=int(counts[1]), components_by_level=int(bool(counts[2])))
    done = np.stack([s, t], axis=1)
    if UPDATES in a:
        done = np.concatenate([np.asarray(a[UPDATES], dtype=np.int64).reshape(-1, 2), done])
    whole = {UPDATES: done, LOG: _log(index, report)}
    if index.supports:
        whole["supports/ids"] = np.asarray(ids).astype(a["supports/ids"].dtype)
    report.seconds["total"] = time.perf_counter() - t0
    return RowsUpdate(meta=meta, rows=rows, dag=dag, whole=whole, intact=intact, crcs=crcs or {}), report


def _swept_on_host(index, dev, key, report, prev):
    """``(rows, dag, ids, counts, None)`` of the sweep of the component edges ``key`` (``a * C + b``)
    by the compiled walks over ``index``'s host arrays (changed in place), or None (a level past
    its stored type)."""
    from .stages.insertion_rows import LevelOverflow, sweep_rows

    a, C, K = index.arrays, index.C, index.supports
    comp = a["vertex/component"]
    before = _decided(a, lambda v: comp[v].astype(np.int64), index.n)
    iv = a["labels/intervals"]
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
    _swept_report(report, info, before, after)
    names = {"dag/level": "level", "labels/intervals": "lo"}
    if K:
        names.update({"supports/in": "inn", "supports/out": "out"})
    rows = {}
    for name, field in names.items():
        r = _union(got.rows[field], prev.get(name))
        rows[name] = (r, _host_rows(a, name, r))
    cr = _union(got.comp_rows, prev.get("vertex/component"))
    rows["vertex/component"] = (cr, comp_after(cr).astype(comp.dtype))
    dag = _dag_union(a, got, prev.get("dag"))
    removed = int((a["dag/indptr"][got.dag_rows + 1] - a["dag/indptr"][got.dag_rows]).sum())
    by_level = int(index.meta.get("components_by_level", 1)) and info["sorted_near_changes"]
    counts = (int(a["dag/indices"].size) - removed + int(got.dag_idx.size),
              max(int(index.meta["n_levels"]), info["top_level"] + 1), by_level)
    return rows, dag, got.ids, counts, None


def _swept_on_device(index, dev, key, report, prev):
    """``(rows, dag, ids, counts, crcs)`` of the sweep of the component edges ``key`` on the device of
    ``dev`` (a :class:`~distgrail.update._Device`: the arrays up there), ids kept; only the
    changed rows (and ``prev``'s) and the changed datasets' block CRC-32s (:func:`_device_crcs`)
    come down."""
    from .dtypes import smallest_uint
    from .stages.insertion import sweep_insertions
    from .update import _changed_datasets

    be, xp, C, K = dev.be, dev.xp, index.C, index.supports
    with be.on_device():
        before = dev.decided(dev.arr)
        t1 = time.perf_counter()
        k = xp.asarray(key)
        got, info = sweep_insertions(xp, dev.arr, k // C, k % C, renumber=False)
        dev.arr = None  # (swept in place)
        changed = _changed_datasets(be, info.pop("changed"), K, host=False)
        report.seconds["swept"] = time.perf_counter() - t1
        _swept_report(report, info, before, dev.decided(got))
        t2 = time.perf_counter()
        L = int(got["level"].max()) + 1 if C else 1
        for name, r in changed.items():  # (joined to the earlier patch's rows there: a sort on the device)
            if prev.get(name) is not None:
                changed[name] = unique(xp, xp.concatenate([r, xp.asarray(prev[name], dtype=xp.int64)]))
        rows, dag = _device_rows(index, dev, got, changed, smallest_uint(max(L - 1, 0)))
        of = _row_values(xp, got, dev, smallest_uint(max(L - 1, 0)))
        ids = be.to_host(got["ids"]) if K else None
        counts = (int(got["indices"].size), L, info.pop("components_by_level"))
        report.seconds["download"] = time.perf_counter() - t2
        t3 = time.perf_counter()
        names = [n for n, (r, _) in rows.items() if r.size] + ["dag"] * bool("dag" in changed and dag[0].size)
        crcs = _device_crcs(index, dev, got, names, of)
        report.seconds["checksums"] = time.perf_counter() - t3
    return rows, dag, ids, counts, crcs


def _row_values(xp, got, dev, level_type) -> dict:
    """``{dataset: rows -> values}`` over the sweep's arrays ``got`` on the device (``dev``'s), in
    the stored types (levels as ``level_type``): a dataset's rows as a patch writes them."""
    return {"vertex/component": lambda r: got["comp"][r],
            "dag/level": lambda r: got["level"][r].astype(level_type),
            "labels/intervals": lambda r: xp.stack([got["lo"][:, r], got["hi"][:, r]], axis=-1).astype(dev.iv_dtype),
            "supports/out": lambda r: got["out"][:, r].T, "supports/in": lambda r: got["inn"][:, r].T}


def _device_rows(index, dev, got, rows, level_type) -> tuple:
    """``(rows, dag)`` for a patch: ``{dataset: (host rows, host values)}`` of the rows ``rows``
    (``{dataset: int64 rows}``, on the device or the host; ``"dag"``: the DAG rows) of the sweep's
    arrays ``got`` on ``dev``'s device, and ``(rows, indptr, indices)`` of the DAG rows (None
    without them)."""
    be, xp = dev.be, dev.xp
    of = _row_values(xp, got, dev, level_type)
    out, dag = {}, None
    for name, r in rows.items():
        r = xp.asarray(r, dtype=xp.int64)
        if name == "dag":
            dag = (be.to_host(r), *(be.to_host(x) for x in csr_rows(xp, got["indptr"], got["indices"], r)))
        else:
            out[name] = (be.to_host(r), be.to_host(xp.ascontiguousarray(of[name](r))))
    return out, dag


def _device_crcs(index, dev, got, names, of) -> dict:
    """``{dataset: (crc32_block, crc32s, dtype, shape)}`` of the result datasets ``names`` (``"dag"``:
    the DAG's CSR), each laid out on the device as the file stores it (``of``: rows as written;
    every dataset in the index's stored type, the one a patch by rows keeps; the writer uses an
    entry only for a dataset of that type and shape):
    :func:`~distgrail.stages.checksums.block_crcs_cuda` (on the CPU backend the host's
    :func:`~distgrail.indexfile.layout.block_crcs`), so the patch's writer reads no block of the
    base for them and rebuilds no CSR on the host. An optimisation only: where the device has no
    room for a dataset laid out whole, none (the writer computes them)."""
    from .errors import BackendError

    pool = None if dev.be.is_gpu else _crc_pool()
    try:
        return _laid_out_crcs(index, dev, got, names, of, pool)
    except (BackendError, MemoryError):  # (CuPy's out-of-memory error is a MemoryError)
        return {}
    finally:
        if pool is not None:
            pool.shutdown()


def _crc_pool():
    from .indexfile.layout import crc_pool

    return crc_pool()


def _laid_out_crcs(index, dev, got, names, of, pool) -> dict:
    """:func:`_device_crcs`' work (``pool``: the host's CRC threads on the CPU backend, else None)."""
    from .indexfile.layout import block_crcs, block_size

    be, xp, a = dev.be, dev.xp, index.arrays

    def crcs(arr, block):
        if pool is None:
            from .stages.checksums import block_crcs_cuda

            return block_crcs_cuda(be, arr, block).tolist()
        return [f.result() for f in block_crcs(arr, block, pool)]

    out = {}
    for name in names:
        if name == "dag":
            whole = {"dag/indptr": got["indptr"], "dag/indices": got["indices"]}
        elif name == "labels/intervals":  # (d, C, 2), the two bounds side by side: built in place, no int64 copy
            iv = xp.empty((got["lo"].shape[0], index.C, 2), dtype=a[name].dtype)
            iv[:, :, 0], iv[:, :, 1] = got["lo"], got["hi"]
            whole = {name: iv}
        else:
            whole = {name: of[name](slice(None))}
        for n, arr in whole.items():
            arr = xp.ascontiguousarray(arr.astype(np.dtype(a[n].dtype), copy=False))
            if arr.size:
                block = block_size(arr.nbytes)
                out[n] = (block, crcs(arr, block), arr.dtype.str, tuple(int(x) for x in arr.shape))
            del arr
    return out


def _swept_report(report, info, before, after) -> None:
    """``report`` of a swept update from the sweep's ``info`` and the decided shares (ppm)."""
    report.method = "swept"
    report.components_after = report.components_before - int(info["components_merged"])
    report.sweep = {k: v for k, v in info.items() if k not in ("seconds", "sorted_near_changes", "top_level",
                                                               "components_after", "components_by_level", "changed")}
    report.sweep["decided_ppm"] = (before, after)
    report.seconds.update({f"sweep_{k}": v for k, v in info["seconds"].items()})


def _union(r, prev) -> np.ndarray:
    """The sorted distinct rows ``r`` and ``prev`` (None: ``r``), int64."""
    r = np.asarray(r, dtype=np.int64)
    return r if prev is None else unique(np, np.concatenate([r, np.asarray(prev, dtype=np.int64)]))


def _host_rows(a, name, r) -> np.ndarray:
    """Rows ``r`` of host dataset ``a[name]`` (along axis 1 for the intervals)."""
    return a[name][:, r, :] if name == "labels/intervals" else a[name][r]


def csr_rows(xp, ip, ix, rows):
    """``(ptr, idx)``: the rows ``rows`` of the CSR ``(ip, ix)`` as a CSR of their own (``ptr``
    int64 from 0)."""
    start = ip[rows].astype(xp.int64)
    count = ip[rows + 1].astype(xp.int64) - start
    ptr = xp.zeros(rows.size + 1, dtype=xp.int64)
    xp.cumsum(count, out=ptr[1:])
    return ptr, ix[spans(xp, start, count)[0]]


def _dag_union(a, got, prev_rows):
    """(rows, indptr, indices) of the DAG rows written again, with the rows ``prev_rows`` (an
    earlier patch's) as the arrays ``a`` hold them where this update did not write them."""
    rows, ptr, idx = got.dag_rows, got.dag_ptr, got.dag_idx
    extra = np.setdiff1d(prev_rows, rows) if prev_rows is not None else np.zeros(0, np.int64)
    if not extra.size:
        return rows, ptr, idx
    eptr, eidx = csr_rows(np, a["dag/indptr"], a["dag/indices"], extra)
    allr = np.concatenate([rows, extra])
    order = np.argsort(allr, kind="stable")
    count = np.concatenate([np.diff(ptr), np.diff(eptr)])[order]
    start = np.concatenate([ptr[:-1], eptr[:-1] + ptr[-1]])[order]
    nptr = np.zeros(allr.size + 1, np.int64)
    np.cumsum(count, out=nptr[1:])
    values = np.concatenate([idx, eidx.astype(idx.dtype, copy=False)])
    return allr[order], nptr, values[spans(np, start, count)[0]]


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
