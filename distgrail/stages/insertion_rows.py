"""Edge insertions swept with every component id kept, on the CPU, touching only what changes:
the rows a change-only index file stores.

:func:`sweep_rows` is :func:`distgrail.stages.insertion.sweep_insertions` with
``renumber=False`` over an index's own host arrays (its datasets as read, stored types): the same
steps (cycles merged, the rows of tails and merged components written again, levels and ``in``
masks pushed down, intervals and ``out`` masks pushed up), the same resulting values, but as
compiled walks (:mod:`~distgrail.stages.insertion_rows_jit`) that visit only the components the
new edges reach, and no pass over every component or every DAG edge but the reverse CSR's (the
upward sweep needs each component's parents; the index stores only children) and, when merges
happened, one over the vertices (those of merged-away components take their representative).
The levels, intervals and masks are changed in place in the arrays given; the DAG, the vertices'
components and the support ids are not: their new rows come back instead.

Why: an update that writes the whole index costs at least the page cache's write of every byte
(docs/design.md, "A change-only file"); these rows are what the patched layout
(:mod:`distgrail.indexfile.patch`) writes instead.
"""

from __future__ import annotations

import time

import numpy as np

from ..arrays import unique
from ..errors import DistGrailError

__all__ = ["sweep_rows", "RowsSwept", "LevelOverflow", "reverse_of"]


class LevelOverflow(DistGrailError):
    """A level would pass the largest value of the stored level type: the caller sweeps the
    whole arrays instead (the arrays given were changed: read them again)."""


class RowsSwept:
    """What :func:`sweep_rows` changed: ``rows`` {dataset: sorted int64 rows} (``dag``: the
    rows written again, ``dag_ptr``/``dag_idx`` their entries as a CSR over those rows),
    ``comp_rows``/``comp_values`` (vertices that took their representative), ``ids`` (support
    components, mapped), ``info`` (as :func:`sweep_insertions`' info, with ``components_by_level``
    and ``n_levels``)."""

    def __init__(self):
        self.rows: dict = {}
        self.dag_rows = self.dag_ptr = self.dag_idx = None
        self.comp_rows = self.comp_values = None
        self.ids = None
        self.info: dict = {}


#: DAG edges from which the reverse CSR is made over the host threads (each thread the parents of
#: one range of components, every thread reading the whole CSR); below, by SciPy's transpose
PARALLEL_REVERSE_EDGES = 1 << 22


def reverse_of(ip, ix, C: int):
    """The parents of each row of the CSR ``(ip, ix)``: (indptr int64, indices of ``ix``'s type),
    each row's parents ascending."""
    from .. import cores
    from ..arrays import HOST_THREADS, _run_pieces
    from ..jit import load

    if not ix.size:
        return np.zeros(C + 1, np.int64), np.zeros(0, ix.dtype)
    T = max(1, min(HOST_THREADS, cores.usable()))
    jit = load(f"{__package__}.insertion_rows_jit", "the change-only update", warn=False)
    if T == 1 or ix.size < PARALLEL_REVERSE_EDGES or jit is None:
        from scipy.sparse import csr_matrix

        bwd = csr_matrix((np.ones(ix.size, np.int8), ix, ip), shape=(C, C)).tocsc()
        return bwd.indptr.astype(np.int64, copy=False), bwd.indices.astype(ix.dtype, copy=False)
    cuts = np.linspace(0, C, T + 1).astype(np.int64)
    counts = [np.zeros(int(cuts[k + 1] - cuts[k]), np.int64) for k in range(T)]
    _run_pieces(jit.reverse_count, [(ix, 0, ix.size, cuts[k], cuts[k + 1], counts[k]) for k in range(T)])
    rptr = np.zeros(C + 1, np.int64)
    np.cumsum(np.concatenate(counts), out=rptr[1:])
    ridx = np.empty(ix.size, ix.dtype)
    _run_pieces(jit.reverse_fill, [(ip, ix, cuts[k], cuts[k + 1], rptr, ridx) for k in range(T)])
    return rptr, ridx


def _merge_groups(jit, a, ea, eb, flag, rev, C):
    """(members, representative of each) of the groups the new edges put on a cycle (module
    :mod:`~distgrail.stages.insertion` step 1), sorted by member; both empty when none."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    none = np.zeros(0, np.int64), np.zeros(0, np.int64)
    level, ip, ix = a["level"], a["indptr"], a["indices"]
    o = np.argsort(ea, kind="stable")
    tail_a, tail_b = ea[o], eb[o]
    o = np.argsort(eb, kind="stable")
    head_b, head_a = eb[o], ea[o]
    top = int(level[ea].max())
    fwd = jit.forward_under(ip, ix, level, top, tail_a, tail_b, _distinct(eb), flag)
    tails = _distinct(ea[(flag[ea] & jit.F_FWD) != 0])
    if not tails.size:
        return none, fwd
    back = jit.backward_inside(rev[0], rev[1], head_b, head_a, tails, flag)
    cand = np.sort(back)  # (every one of them is marked forward too)
    rows, ch = _row_entries(ip, ix, cand)
    inside = (flag[ch] & (jit.F_FWD | jit.F_BACK)) == (jit.F_FWD | jit.F_BACK)
    both = ((flag[ea] & jit.F_BACK) != 0) & ((flag[eb] & jit.F_BACK) != 0)
    src = np.concatenate([rows[inside], np.searchsorted(cand, ea[both])])
    dst = np.concatenate([np.searchsorted(cand, ch[inside]), np.searchsorted(cand, eb[both])])
    k = int(cand.size)
    g = csr_matrix((np.ones(src.size, bool), (src, dst)), shape=(k, k))
    _, lab = connected_components(g, directed=True, connection="strong")
    cnt = np.bincount(lab, minlength=1)
    big = cnt[lab] > 1
    if not big.any():
        return none, fwd
    members, lab = cand[big], lab[big]
    size = a["size"][members].astype(np.int64)
    o = np.lexsort((members, -size, lab))  # per group: the largest DT subtree first, then the lowest id
    members, lab = members[o], lab[o]
    first = np.ones(lab.size, dtype=bool)
    first[1:] = lab[1:] != lab[:-1]
    rep = members[first][np.cumsum(first) - 1]
    o = np.argsort(members)
    return (members[o], rep[o]), fwd


def _distinct(v):
    """Sorted distinct values of ``v`` (by a sort: NumPy's hashing ``unique`` is far slower here)."""
    return unique(np, v)


def _has(keys, v):
    """Whether each of ``v`` is in the sorted ``keys``."""
    if not keys.size:
        return np.zeros(v.shape, bool)
    at = np.minimum(np.searchsorted(keys, v), keys.size - 1)
    return keys[at] == v


def _mapped(v, mem, rep):
    """``v`` with merged members replaced by their representatives."""
    if not mem.size or not v.size:
        return v
    at = np.minimum(np.searchsorted(mem, v), mem.size - 1)
    return np.where(mem[at] == v, rep[at], v)


def _row_entries(ip, ix, rows):
    """(row of each entry, entries) of ``rows`` of the CSR, int64."""
    cnt = (ip[rows + 1] - ip[rows]).astype(np.int64)
    r = np.repeat(np.arange(rows.size), cnt)
    start = np.repeat(ip[rows].astype(np.int64) - np.concatenate([[0], np.cumsum(cnt)[:-1]]), cnt)
    return r, ix[start + np.arange(cnt.sum())].astype(np.int64)


def _written_rows(a, mem, rep, dead, rev, ea, eb):
    """The DAG rows written again: (rows, indptr, indices) as a CSR over the sorted rows (tails
    and merged members: their entries and the new edges mapped, distinct, sorted, no self-loop;
    parents of merged-away members: their entries mapped, in order)."""
    ip, ix = a["indptr"], a["indices"]
    src = _distinct(np.concatenate([ea, mem]))
    r, c = _row_entries(ip, ix, src)
    p = _mapped(np.concatenate([src[r], ea]), mem, rep)
    c = _mapped(np.concatenate([c, eb]), mem, rep)
    C = int(a["level"].size)
    key = _distinct((p * C + c)[p != c])
    p_new, c_new = key // C, key % C
    par = np.zeros(0, np.int64)
    if dead.size:
        _, par = _row_entries(rev[0], rev[1], dead)
        par = _distinct(par)[~_has(src, _distinct(par))]
    rows = _distinct(np.concatenate([src, par]))
    at_row, vals = p_new, c_new
    if par.size:
        pr, pc = _row_entries(ip, ix, par)
        at_row = np.concatenate([p_new, par[pr]])
        vals = np.concatenate([c_new, _mapped(pc, mem, rep)])
    o = np.argsort(at_row, kind="stable")  # (rows disjoint: each row's entries keep their order)
    slot = np.searchsorted(rows, at_row[o])
    ptr = np.zeros(rows.size + 1, np.int64)
    np.cumsum(np.bincount(slot, minlength=rows.size), out=ptr[1:])
    idx = vals[o].astype(ix.dtype)
    return rows, ptr, idx


#: a front of at least this many components is pushed a round at a time over the host threads
#: (producers and owners, :mod:`~distgrail.stages.insertion_rows_jit`); smaller ones on one thread
PARALLEL_FRONT = 1 << 15


def _rounds(jit, way, front, changed, flag, **v):
    """The downward (``way`` "down") or upward sweep from ``front`` until nothing changes: small
    fronts by the one-thread sweep (until a front passes :data:`PARALLEL_FRONT`), large ones a
    round at a time over the threads. Returns (rounds, pushes, [changed rows, ...])."""
    from .. import cores
    from ..arrays import HOST_THREADS, _run_pieces

    T = max(1, min(HOST_THREADS, cores.usable()))
    rounds = pushes = 0
    parts = [changed]
    while front.size:
        if front.size < PARALLEL_FRONT or T == 1:
            buf = np.empty(max(16, front.size), np.int64)
            if way == "down":
                r, p, nc, buf, front = jit.down_sweep(front, v["ip"], v["ix"], v["rows"], v["ptr"], v["idx"], v["level"],
                                                      v["inn"], v["top"], flag, buf, 0, PARALLEL_FRONT)
                if r < 0:
                    raise LevelOverflow(f"a level passes {v['top']}, the largest of the stored level type "
                                        f"{v['level'].dtype}")
            else:
                rip, rix = v["rev"]
                r, p, nc, buf, front = jit.up_sweep(front, rip, rix, v["mem"], v["rep"], v["by_rep"], v["mem_of"],
                                                    v["head_b"], v["head_a"], v["lo"], v["hi"], v["out"], flag, buf, 0,
                                                    PARALLEL_FRONT)
            rounds, pushes = rounds + r, pushes + p
            parts.append(buf[:nc])
            continue
        rounds += 1
        cuts = np.linspace(0, front.size, T + 1).astype(np.int64)
        if way == "down":
            snap = (np.empty(front.size, v["level"].dtype), np.empty((front.size, v["inn"].shape[1]), np.uint64))
            made = _run_pieces(jit.down_produce, [(front, cuts[k], cuts[k + 1], v["ip"], v["ix"], v["rows"], v["ptr"],
                                                   v["idx"], flag, v["level"], v["inn"], *snap, T) for k in range(T)])

            def own(o):
                nn = nc = 0
                nxt, ch = np.empty(16, np.int64), np.empty(16, np.int64)
                for tgt, slot, off in made:
                    nn, nc, nxt, ch = jit.down_consume(tgt, slot, off[o], off[o + 1], *snap, v["level"], v["inn"],
                                                       v["top"], flag, nxt, nn, ch, nc)
                    if nn < 0:
                        return None
                return nxt[:nn], ch[:nc]
        else:
            rip, rix = v["rev"]
            d = v["lo"].shape[0]
            snap = (np.empty((front.size, d), v["lo"].dtype), np.empty((front.size, d), v["hi"].dtype),
                    np.empty((front.size, v["out"].shape[1]), np.uint64))
            made = _run_pieces(jit.up_produce, [(front, cuts[k], cuts[k + 1], rip, rix, v["mem"], v["rep"], v["by_rep"],
                                                 v["mem_of"], v["head_b"], v["head_a"], flag, v["lo"], v["hi"],
                                                 v["out"], *snap, T) for k in range(T)])

            def own(o):
                nn = nc = 0
                nxt, ch = np.empty(16, np.int64), np.empty(16, np.int64)
                for tgt, slot, off in made:
                    nn, nc, nxt, ch = jit.up_consume(tgt, slot, off[o], off[o + 1], *snap, v["lo"], v["hi"], v["out"],
                                                     flag, nxt, nn, ch, nc)
                return nxt[:nn], ch[:nc]
        pushes += int(sum(int(off[T]) for _, _, off in made))
        owned = _run_pieces(own, [(o,) for o in range(T)])
        del made
        if any(x is None for x in owned):
            raise LevelOverflow(f"a level passes {v['top']}, the largest of the stored level type {v['level'].dtype}")
        front = np.concatenate([nxt for nxt, _ in owned])
        flag[front] &= ~np.uint16(jit.F_NEXT)  # (the owners' marks of this round's next front)
        parts.extend(ch for _, ch in owned)
    return rounds, pushes, parts


def sweep_rows(a: dict, ea, eb, rev=None) -> RowsSwept:
    """The new component edges ``ea[i] -> eb[i]`` (int64, distinct pairs, ``ea`` not reaching
    ``eb``) swept into the arrays ``a`` with every id kept (module doc). ``a``: ``comp``,
    ``indptr`` (int64), ``indices``, ``level``, ``size``, ``lo``/``hi`` (d, C) (views into the
    intervals are fine), ``out``/``inn`` (C, W) uint64 (stored layout; W may be 0), ``ids``;
    ``level``, ``lo``, ``hi``, ``out``, ``inn`` are changed in place. ``rev``: the DAG's parents
    (:func:`reverse_of`), made here when None. Raises :class:`LevelOverflow` when a level passes
    its type (``a`` partly changed)."""
    from ..jit import load

    jit = load(f"{__package__}.insertion_rows_jit", "the change-only update", stacklevel=4)
    if jit is None:
        raise DistGrailError("the change-only update needs numba (it failed to load)")
    t = time.perf_counter()
    secs = {}

    def mark(step):
        nonlocal t
        now = time.perf_counter()
        secs[step] = now - t
        t = now

    C = int(a["level"].size)
    ea, eb = np.asarray(ea, np.int64), np.asarray(eb, np.int64)
    if rev is None:
        rev = reverse_of(a["indptr"], a["indices"], C)
    mark("reverse")
    flag = np.zeros(C, np.uint16)  # (pages of components never visited stay untouched)
    flag[ea] |= jit.F_TAIL
    flag[eb] |= jit.F_HEAD
    (mem, rep), _ = _merge_groups(jit, a, ea, eb, flag, rev, C)
    mark("cycles")
    out = RowsSwept()
    info = out.info
    dead = mem[mem != rep]
    reps = _distinct(rep)
    info.update(merged_groups=int(reps.size), components_merged=int(dead.size))
    level, lo, hi, ow, iw = a["level"], a["lo"], a["hi"], a["out"], a["inn"]
    if mem.size:
        flag[mem] |= jit.F_MEMBER
        np.maximum.at(level, rep, level[mem])
        np.maximum.at(hi, (slice(None), rep), hi[:, mem])
        np.minimum.at(lo, (slice(None), rep), lo[:, mem])
        for w in range(ow.shape[1]):
            np.bitwise_or.at(ow[:, w], rep, ow[mem, w])
            np.bitwise_or.at(iw[:, w], rep, iw[mem, w])
    rows, ptr, idx = _written_rows(a, mem, rep, dead, rev, ea, eb)
    flag[rows] |= jit.F_ROW
    out.dag_rows, out.dag_ptr, out.dag_idx = rows, ptr, idx
    mark("rows")
    pa, pb = _mapped(ea, mem, rep), _mapped(eb, mem, rep)
    top = np.iinfo(level.dtype).max
    front = np.empty(max(pa.size, 1), np.int64)
    changed = np.empty(max(pa.size, 1), np.int64)
    nf, nc = jit.push_down(pa, pb, level, iw, top, flag, front, changed)
    if nf < 0:
        raise LevelOverflow(f"a level passes {top}, the largest of the stored level type {level.dtype}")
    start = _distinct(np.concatenate([front[:nf], reps]))
    rounds, pushes, parts = _rounds(jit, "down", start, changed[:nc], level=level, inn=iw, top=top, flag=flag,
                                    ip=a["indptr"], ix=a["indices"], rows=rows, ptr=ptr, idx=idx)
    down = _distinct(np.concatenate(parts + [reps]))
    info.update(down_rounds=int(rounds), down_rows=int(pushes))
    mark("down")
    front = np.empty(max(pa.size, 1), np.int64)
    changed = np.empty(max(pa.size, 1), np.int64)
    nf, nc = jit.push_up(pa, pb, lo, hi, ow, flag, front, changed)
    start = _distinct(np.concatenate([front[:nf], reps]))
    o = np.argsort(rep, kind="stable")
    by_rep, mem_of = rep[o], mem[o]
    o = np.argsort(eb, kind="stable")
    rounds, pushes, parts = _rounds(jit, "up", start, changed[:nc], lo=lo, hi=hi, out=ow, flag=flag, rev=rev,
                                    mem=mem, rep=rep, by_rep=by_rep, mem_of=mem_of, head_b=eb[o], head_a=ea[o])
    up = _distinct(np.concatenate(parts + [reps]))
    info.update(up_rounds=int(rounds), up_rows=int(pushes))
    mark("up")
    comp = a["comp"]
    if dead.size:
        from .. import cores
        from ..arrays import HOST_THREADS, _run_pieces

        cuts = np.linspace(0, comp.size, max(1, min(HOST_THREADS, cores.usable())) + 1).astype(np.int64)
        out.comp_rows = np.concatenate(_run_pieces(jit.dead_vertices, [(comp, flag, mem, rep, cuts[k], cuts[k + 1])
                                                                       for k in range(cuts.size - 1)]))
        out.comp_values = _mapped(comp[out.comp_rows].astype(np.int64), mem, rep).astype(comp.dtype)
        out.ids = _mapped(np.asarray(a["ids"], np.int64), mem, rep).astype(a["ids"].dtype)
    else:
        out.comp_rows = np.zeros(0, np.int64)
        out.comp_values = np.zeros(0, comp.dtype)
        out.ids = a["ids"]
    out.rows = {"level": down, "inn": down, "lo": up, "hi": up, "out": up}
    info["components_after"] = C - int(dead.size)
    # (every pair of neighbouring rows with a raised level between them: the others are as they were)
    lv = level[down].astype(np.int64)
    info["sorted_near_changes"] = bool(C == 0 or not (
        (level[np.maximum(down - 1, 0)].astype(np.int64) > lv) | (level[np.minimum(down + 1, C - 1)] < lv)).any())
    info["top_level"] = int(level[down].max()) if down.size else -1
    mark("kept")
    info["seconds"] = secs
    return out
