"""Edge insertions swept into an index's labels, without labelling it again.

:func:`sweep_insertions` takes an index's arrays and new component edges ``a -> b`` (each one
adding reachability: ``a`` does not reach ``b`` yet) and returns arrays that answer for the DAG
plus those edges. The forest and its post-order ranks stay; what the edges change is swept from
the components they touch, so the work follows what changes, not the graph's size:

1. **Cycles.** A new cycle holds a new edge, and each of its components is reachable from a new
   edge's head and reaches a new edge's tail. Its old levels lie between the lowest head's and the
   highest tail's (old edges go down the levels), so a forward sweep from the heads, kept under
   the highest tail's level, and a backward sweep inside it from the tails bound the candidates;
   their strongly connected components (SciPy, over that small subgraph) are merged. Each merged
   group keeps one representative (the member with the largest DT subtree: its tree cut stays
   sound), which takes the union of the members' edges, the hull of their intervals, the union of
   their support masks and the highest level; the other members are dropped.
2. **The DAG.** The rows of the tails and of the merged members are written again (their edges,
   the new ones, mapped to representatives, without repeats or self-loops); every other row keeps
   its entries (mapped to the representatives where merges happened).
3. **Downward sweep** (levels and ``in`` masks): ``level[b] >= level[a] + 1`` and
   ``in[b] ⊇ in[a]`` along every edge, pushed from the heads and the representatives to the
   children whose values change, until nothing does (the DAG is acyclic, so this ends).
4. **Upward sweep** (intervals and ``out`` masks): the interval of every component is widened to
   the hull of its children's and its ``out`` mask takes theirs, pushed from the tails and the
   representatives to the parents whose values change. Intervals then hold every descendant's in
   every dimension (the negative filter and the search's pruning stay sound); the masks are the
   exact reach sets again (the support filters stay exact).
5. **Renumbering.** Components are numbered by level (the index's invariant, which the file
   checks and the compiled search relies on): the survivors are sorted by their new level and
   every id is mapped. When merges dropped components, the ranks are compacted by the monotone
   map ``f(r)`` = the surviving DT ranks below ``r``: containment of intervals and membership in a
   DT subtree survive any monotone map, so every filter keeps its proof.

Every step is array code on ``xp`` (NumPy or CuPy, :func:`~distgrail.arrays.array_module`): the
same numbers on the CPU and on a GPU. The pushes are NumPy's ``ufunc.at`` on the CPU and their
twins in kernels/insertion.cu (64-bit atomics) on a GPU.
"""

from __future__ import annotations

import time

import numpy as np

from .. import cores
from ..arrays import csr_positions, scatter_at, spans, to_host, unique
from ..errors import DistGrailError
from ..jit import guard, load, restarts

__all__ = ["sweep_insertions", "reverse_csr", "SWEEP_FIELDS"]

#: the arrays :func:`sweep_insertions` reads and returns, by name (shapes in its doc)
SWEEP_FIELDS = ("comp", "indptr", "indices", "level", "post0", "size", "parent", "lo", "hi", "out", "inn", "ids")


def _by_key(xp, keys, nodes):
    """For ``keys`` sorted: (positions in ``keys`` of the values equal to one of ``nodes``, the
    index in ``nodes`` of each)."""
    lo = xp.searchsorted(keys, nodes, side="left")
    return spans(xp, lo, xp.searchsorted(keys, nodes, side="right") - lo)


def reverse_csr(xp, ip, ix):
    """The parents of each row of the CSR ``(ip, ix)`` as a CSR ``(indptr, indices)`` (int64)."""
    C = ip.size - 1
    if xp is np:  # one O(m) pass
        from scipy.sparse import csr_matrix

        bwd = csr_matrix((np.ones(ix.size, np.int8), ix, ip), shape=(C, C)).tocsc()
        return bwd.indptr.astype(np.int64), bwd.indices.astype(np.int64)
    _, row = csr_positions(xp, ip, xp.arange(C, dtype=xp.int64), which=True)
    o = xp.argsort(ix)
    return xp.searchsorted(ix[o], xp.arange(C + 1), side="left").astype(xp.int64), row[o]


class _Edges:
    """The new edges, sorted by tail and by head, for lookups from either end."""

    def __init__(self, xp, ea, eb):
        o = xp.argsort(ea)
        self.tail_a, self.tail_b = ea[o], eb[o]
        o = xp.argsort(eb)
        self.head_b, self.head_a = eb[o], ea[o]
        self.xp = xp

    def heads_from(self, nodes):
        pos, _ = _by_key(self.xp, self.tail_a, nodes)
        return self.tail_b[pos]

    def tails_into(self, nodes):
        pos, _ = _by_key(self.xp, self.head_b, nodes)
        return self.head_a[pos]


def _cycles(xp, a, rev, E: _Edges, ea, eb):
    """The groups of components the new edges put on cycles: (members, representative of each),
    host int64 arrays, empty when none."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    C, level, ip, ix = a["level"].size, a["level"], a["indptr"], a["indices"]
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    top = level[ea].max()
    fwd = xp.zeros(C, dtype=bool)
    front = unique(xp, eb)
    fwd[front] = True
    while front.size:  # descendants of the heads, under the highest tail's level
        ch = xp.concatenate([ix[csr_positions(xp, ip, front)].astype(xp.int64), E.heads_from(front)])
        ch = ch[(level[ch] <= top) & ~fwd[ch]]
        front = unique(xp, ch)
        fwd[front] = True
    tails = ea[fwd[ea]]
    if not tails.size:
        return none
    rip, rix = rev
    back = xp.zeros(C, dtype=bool)
    front = unique(xp, tails)
    back[front] = True
    while front.size:  # inside those: the ancestors of the tails
        par = xp.concatenate([rix[csr_positions(xp, rip, front)].astype(xp.int64), E.tails_into(front)])
        par = par[fwd[par] & ~back[par]]
        front = unique(xp, par)
        back[front] = True
    cand = xp.flatnonzero(fwd & back)
    loc = xp.full(C, -1, dtype=xp.int64)
    loc[cand] = xp.arange(cand.size, dtype=xp.int64)
    pos, r = csr_positions(xp, ip, cand, which=True)
    ch = loc[ix[pos].astype(xp.int64)]
    both = (loc[ea] >= 0) & (loc[eb] >= 0)
    src = to_host(xp.concatenate([r[ch >= 0], loc[ea[both]]]))
    dst = to_host(xp.concatenate([ch[ch >= 0], loc[eb[both]]]))
    k = int(cand.size)
    g = csr_matrix((np.ones(src.size, bool), (src, dst)), shape=(k, k))  # (repeats sum to True, never 0)
    _, lab = connected_components(g, directed=True, connection="strong")
    cnt = np.bincount(lab, minlength=1)
    big = cnt[lab] > 1
    if not big.any():
        return none
    members = to_host(cand)[big]
    lab = lab[big]
    size = to_host(a["size"][xp.asarray(members)]).astype(np.int64)
    o = np.lexsort((members, -size, lab))  # per group: the largest DT subtree first, then the lowest id
    members, lab = members[o], lab[o]
    first = np.ones(lab.size, dtype=bool)
    first[1:] = lab[1:] != lab[:-1]
    rep = members[first][np.cumsum(first) - 1]
    return members, rep


def _rewrite_rows(xp, ip, ix, m, rows, p, c):
    """The CSR ``(ip, ix)`` with the rows ``rows`` (sorted, distinct) replaced by the entries
    ``c`` of rows ``p`` (sorted by row; rows of ``rows`` not in ``p`` become empty) and every
    other entry mapped by ``m`` (None: kept)."""
    C = ip.size - 1
    cnt = ip[1:] - ip[:-1]
    cnt[rows] = 0
    if p.size:
        up, k = _run_lengths(xp, p)
        cnt[up] = k
    nip = xp.zeros(C + 1, dtype=xp.int64)
    xp.cumsum(cnt, out=nip[1:])
    nix = xp.empty(int(nip[-1]), dtype=ix.dtype)
    old = xp.zeros(ix.size, dtype=bool)
    old[csr_positions(xp, ip, rows)] = True
    new = xp.zeros(nix.size, dtype=bool)
    if p.size:
        new[csr_positions(xp, nip, up)] = True
    kept = ix[~old]
    nix[~new] = kept if m is None else m[kept].astype(ix.dtype)
    if p.size:
        nix[new] = c.astype(ix.dtype)
    return nip, nix


def _run_lengths(xp, s):
    """Distinct values of sorted ``s`` and how often each occurs."""
    start = xp.ones(s.size, dtype=bool)
    start[1:] = s[1:] != s[:-1]
    at = xp.flatnonzero(start)
    return s[at], xp.diff(xp.concatenate([at, xp.asarray([s.size], dtype=at.dtype)]))


def _changed(xp, before, after):
    return xp.any(before != after, axis=0)


#: the CUDA twin of each push (kernels/insertion.cu), by the NumPy ufunc it stands for
PUSH_KERNELS = {"maximum": "dg_push_max", "minimum": "dg_push_min", "bitwise_or": "dg_push_or"}
#: threads per block of the push kernels, and the most blocks (a grid-stride loop does the rest)
PUSH_THREADS, PUSH_BLOCKS = 256, 1 << 16


def _scatter(xp, op, row, to, val):
    """``row[to[i]] = op(row[to[i]], val[i])`` for every i, repeated ``to`` included: NumPy's
    ``ufunc.at``, or on a GPU its twin in kernels/insertion.cu (atomics on 64-bit words; ``row``
    contiguous int64, or uint64 for ``bitwise_or``)."""
    if xp is np:
        scatter_at(np, op, row, to, val)
        return
    from ..gpu.kernels import load_module

    n = int(to.size)
    if not n:
        return
    want = xp.uint64 if op == "bitwise_or" else xp.int64
    if row.dtype != want or not row.flags.c_contiguous:
        raise DistGrailError(f"insertions: the push needs a contiguous {xp.dtype(want)} row, got {row.dtype}")
    fn = load_module("insertion", xp.cuda.Device().id).get_function(PUSH_KERNELS[op])
    blocks = min(PUSH_BLOCKS, -(-n // PUSH_THREADS))
    fn((blocks,), (PUSH_THREADS,), (row, xp.ascontiguousarray(to, dtype=xp.int64),
                                    xp.ascontiguousarray(val, dtype=want), np.int64(n)))


def _push(xp, vals, ops, to, frm):
    """``to[i]`` takes ``frm[i]``'s values, by each field's operation (``level``: at least one
    above; else the scatter ufunc); returns the distinct ``to`` whose values changed."""
    keep = to != frm
    to, frm = to[keep], frm[keep]
    if not to.size:
        return to
    tgt = unique(xp, to)
    before = [v[..., tgt].copy() for v in vals]
    for v, op in zip(vals, ops):
        rows = v if v.ndim == 2 else v[None]
        for row in rows:
            src = row[frm] + 1 if op == "level" else row[frm]
            _scatter(xp, "maximum" if op == "level" else op, row, to, src)
    moved = xp.zeros(tgt.size, dtype=bool)
    for b, v in zip(before, vals):
        after = v[..., tgt]
        moved |= _changed(xp, b.reshape(-1, tgt.size), after.reshape(-1, tgt.size))
    return tgt[moved]


def _sweep(xp, vals, ops, front, neighbours, C, seen=None):
    """Push from ``front`` until no value changes; returns (rounds, rows pushed to). ``seen``: a
    list that takes every front (the rows whose values changed), ``front`` first."""
    rounds = touched = 0
    while front.size:
        if seen is not None:
            seen.append(front)
        rounds += 1
        if rounds > C + 2:  # an acyclic graph settles within its longest path
            raise DistGrailError("insertions: the sweep did not settle (a cycle left in the DAG); please report this")
        front = _push(xp, vals, ops, *neighbours(front))
        touched += int(front.size)
    return rounds, touched


class _Clock:
    """Seconds per step, the device synchronised at each mark (CuPy runs asynchronously)."""

    def __init__(self, xp):
        self.xp, self.seconds = xp, {}
        self.t = time.perf_counter()

    def mark(self, step: str):
        if self.xp is not np:
            self.xp.cuda.get_current_stream().synchronize()
        now = time.perf_counter()
        self.seconds[step] = now - self.t
        self.t = now


def sweep_insertions(xp, a: dict, ea, eb, rev=None, renumber: bool = True):
    """``(arrays, info)``: the arrays ``a`` (module doc) updated for the new component edges
    ``ea[i] -> eb[i]`` (int64 on ``xp``, distinct, ``ea`` not reaching ``eb``).

    ``a``: ``comp`` (n,) component of each vertex; ``indptr`` (C+1,) int64 and ``indices`` (m,)
    the DAG; ``level`` (C,) int64; ``post0``, ``size``, ``parent`` (C,) the DT ranks, subtree
    sizes and parents; ``lo``, ``hi`` (d, C) the intervals; ``out``, ``inn`` (W, C) uint64 masks;
    ``ids`` (K,) support components. ``level``, ``lo``, ``hi``, ``out``, ``inn`` are updated in
    place (pass copies); the others are only read, and may be a served query state's own arrays
    (:meth:`distgrail.update._Device.from_state`), which other threads' queries read meanwhile. ``rev``: the DAG's parents as a CSR ``(indptr, indices)``
    (:func:`reverse_csr`, made here when None).
    ``info``: merged groups, components dropped, rounds and rows of each sweep, renumbered,
    seconds per step.

    ``renumber=False``: every component keeps its id (step 5 left out; levels are then not
    sorted by id, which the returned ``info["components_by_level"]`` says): a merged-away member
    stays as a dead row (no vertex, no DAG edge in or out; its labels as they were) and
    ``info["changed"]`` names the rows that differ from the input's, by field (a superset where
    cheaper): ``comp`` (vertices), ``dag`` (components whose DAG row was written again: tails,
    merged members, parents of merged-away members), ``level``/``inn`` (the downward sweep's and
    the representatives'), ``lo``/``hi``/``out`` (the upward sweep's and the representatives'),
    all sorted int64 on ``xp``; what a change-only index file stores.
    """
    missing = [f for f in SWEEP_FIELDS if f not in a]
    if missing:
        raise DistGrailError(f"sweep_insertions: the arrays lack {', '.join(missing)} (SWEEP_FIELDS names them)")
    clock = _Clock(xp)
    C = int(a["level"].size)
    rev = reverse_csr(xp, a["indptr"], a["indices"]) if rev is None else rev
    clock.mark("reverse")
    E = _Edges(xp, ea, eb)
    info = {"merged_groups": 0, "components_merged": 0}
    members, rep = _cycles(xp, a, rev, E, ea, eb)
    clock.mark("cycles")
    m = None
    dead = xp.zeros(0, dtype=xp.int64)
    if members.size:
        m = xp.arange(C, dtype=xp.int64)
        mem, rp = xp.asarray(members), xp.asarray(rep)
        m[mem] = rp
        dead_h = members != rep
        dead = xp.asarray(members[dead_h])
        info["merged_groups"] = int(np.count_nonzero(~dead_h))
        info["components_merged"] = int(np.count_nonzero(dead_h))
        for f, op in (("level", "maximum"), ("hi", "maximum"), ("lo", "minimum"), ("out", "bitwise_or"),
                      ("inn", "bitwise_or")):
            for row in (a[f] if a[f].ndim == 2 else a[f][None]):
                _scatter(xp, op, row, rp, row[mem])
    mp = (lambda v: v) if m is None else (lambda v: m[v])
    # 2. the DAG: rows of the tails and of merged members written again
    ip, ix = a["indptr"], a["indices"]
    src = unique(xp, xp.concatenate([ea, xp.asarray(members)]))
    pos, r = csr_positions(xp, ip, src, which=True)
    p = mp(xp.concatenate([src[r], ea]))
    c = mp(xp.concatenate([ix[pos].astype(xp.int64), eb]))
    key = unique(xp, (p * C + c)[p != c])
    p, c = key // C, key % C
    nip, nix = _rewrite_rows(xp, ip, ix, m, src, p, c)
    clock.mark("rows")
    # 3.-4. the sweeps
    pa, pb = mp(ea), mp(eb)
    reps = xp.asarray(unique(np, rep))
    down_vals, down_ops = [a["level"], a["inn"]], ["level", "bitwise_or"]
    front = unique(xp, xp.concatenate([_push(xp, down_vals, down_ops, pb, pa), reps]))

    def children(front):
        pos, r = csr_positions(xp, nip, front, which=True)
        return nix[pos].astype(xp.int64), front[r]

    down_seen, up_seen = ([], []) if not renumber else (None, None)
    info["down_rounds"], info["down_rows"] = _sweep(xp, down_vals, down_ops, front, children, C, down_seen)
    clock.mark("down")
    up_vals, up_ops = [a["lo"], a["hi"], a["out"]], ["minimum", "maximum", "bitwise_or"]
    front = unique(xp, xp.concatenate([_push(xp, up_vals, up_ops, pa, pb), reps]))
    rip, rix = rev
    if members.size:
        o = np.argsort(rep, kind="stable")
        by_rep, mem_of = xp.asarray(rep[o]), xp.asarray(members[o])
    else:
        by_rep = mem_of = xp.zeros(0, dtype=xp.int64)

    def parents(front):
        pos, which = _by_key(xp, by_rep, front)  # a representative speaks for its members
        ext = xp.concatenate([front, mem_of[pos]])
        own = xp.concatenate([front, front[which]])
        pos, r = csr_positions(xp, rip, ext, which=True)
        epos, ew = _by_key(xp, E.head_b, ext)
        par = xp.concatenate([rix[pos].astype(xp.int64), E.head_a[epos]])
        return mp(par), xp.concatenate([own[r], own[ew]])

    info["up_rounds"], info["up_rows"] = _sweep(xp, up_vals, up_ops, front, parents, C, up_seen)
    clock.mark("up")
    if not renumber:
        out = _kept(xp, a, m, dead, nip, nix, rev, src, reps, down_seen, up_seen, info)
        clock.mark("kept")
        info["seconds"] = clock.seconds
        return out, info
    out = _renumber(xp, a, m, dead, nip, nix)
    info["renumbered"] = out.pop("_renumbered")
    clock.mark("renumber")
    info["seconds"] = clock.seconds
    info["components_after"] = int(out["level"].size)
    return out, info


def _kept(xp, a, m, dead, ip, ix, rev, rewritten, reps, down_seen, up_seen, info):
    """The arrays with every id kept (``sweep_insertions(renumber=False)``): vertices and support
    ids mapped to their representatives, dead rows left; ``info["changed"]`` filled."""
    C = int(a["level"].size)
    comp, ids = a["comp"], a["ids"]
    vert = xp.zeros(0, dtype=xp.int64)
    rows = rewritten
    if dead.size:
        gone = xp.zeros(C, dtype=bool)
        gone[dead] = True
        vert = xp.flatnonzero(gone[comp]).astype(xp.int64)
        comp = comp.copy()
        comp[vert] = m[comp[vert]].astype(comp.dtype)
        ids = m[ids].astype(ids.dtype) if ids.size else ids
        rip, rix = rev
        rows = unique(xp, xp.concatenate([rewritten, rix[csr_positions(xp, rip, dead)].astype(xp.int64)]))
    level = a["level"]
    info["components_by_level"] = not bool(xp.any(level[1:] < level[:-1])) if C else True
    info["renumbered"] = False
    info["components_after"] = C - int(dead.size)

    def rows_of(seen):
        return unique(xp, xp.concatenate([reps.astype(xp.int64)] + [f.astype(xp.int64) for f in seen]))

    down, up = rows_of(down_seen), rows_of(up_seen)
    info["changed"] = {"comp": vert, "dag": rows, "level": down, "inn": down, "lo": up, "hi": up, "out": up}
    return {"comp": comp, "indptr": ip, "indices": ix, "ids": ids, "level": level, "post0": a["post0"],
            "size": a["size"], "parent": a["parent"], "lo": a["lo"], "hi": a["hi"], "out": a["out"], "inn": a["inn"]}


@restarts
def _renumber(xp, a, m, dead, ip, ix):
    """The arrays with the dropped components left out and the others numbered by level (module
    doc, step 5); where the compiled gather fails to compile, all again with NumPy's
    (:func:`~distgrail.jit.restarts`)."""
    C = int(a["level"].size)
    level = a["level"]
    live = xp.ones(C, dtype=bool)
    live[dead] = False
    comp = a["comp"] if m is None else m[a["comp"]]
    keep = {"level": level, "post0": a["post0"], "size": a["size"], "parent": a["parent"], "lo": a["lo"],
            "hi": a["hi"], "out": a["out"], "inn": a["inn"]}
    ids = a["ids"] if m is None else m[a["ids"]]
    if not dead.size and not bool(xp.any(level[1:] < level[:-1])):
        return {"comp": comp, "indptr": ip, "indices": ix, "ids": ids, **keep, "_renumbered": False}
    alive = xp.flatnonzero(live)
    if xp is np:  # (a stable sort by level alone, the same order: timsort's runs, the levels mostly in order still)
        order = alive[np.argsort(level[alive], kind="stable")]
    else:
        order = alive[xp.argsort(level[alive] * C + alive)]
    C2 = int(order.size)
    inv = xp.full(C, -1, dtype=xp.int64)
    inv[order] = xp.arange(C2, dtype=xp.int64)
    pos = csr_positions(xp, ip, order)
    nip = xp.zeros(C2 + 1, dtype=xp.int64)
    xp.cumsum(ip[order + 1] - ip[order], out=nip[1:])
    nix = inv[ix[pos].astype(xp.int64)].astype(ix.dtype)
    post0 = a["post0"].astype(xp.int64)
    start0 = post0 - a["size"].astype(xp.int64) + 1
    if dead.size:  # ranks compacted: f(r) = surviving DT ranks below r
        held = xp.zeros(C, dtype=xp.int64)
        held[post0[alive]] = 1
        f = xp.minimum(xp.cumsum(held) - held, C2 - 1)
    else:
        f = None
    narrow = {}  # f in each type it is applied to: one gather, no widened copy of the ranks first

    def fm(v):
        if f is None:
            return v
        if v.dtype not in narrow:
            narrow[v.dtype] = f.astype(v.dtype, copy=False)
        return xp.take(narrow[v.dtype], v)

    p0 = fm(post0[order])
    par = a["parent"][order].astype(xp.int64)
    ok = par >= 0
    ok[ok] = live[par[ok]]
    compiled = _compiled_gather(xp, C)
    if compiled is not None:  # each row in one compiled pass (insertion_jit), the rows on threads
        lo, hi = (compiled(a[k], order, f, cores.usable()) for k in ("lo", "hi"))
    else:
        lo, hi = fm(xp.take(a["lo"], order, axis=1)), fm(xp.take(a["hi"], order, axis=1))
    out = {"comp": inv[comp].astype(a["comp"].dtype), "indptr": nip, "indices": nix, "ids": inv[ids].astype(ids.dtype),
           "level": level[order], "post0": p0.astype(a["post0"].dtype),
           "size": (p0 - fm(start0[order]) + 1).astype(a["size"].dtype),
           "parent": xp.where(ok, inv[xp.maximum(par, 0)], -1).astype(a["parent"].dtype),
           "lo": lo, "hi": hi,
           "out": xp.take(a["out"], order, axis=1), "inn": xp.take(a["inn"], order, axis=1), "_renumbered": True}
    return out


#: components from which a CPU update's renumbering gathers the intervals with the compiled loop:
#: below, NumPy's two passes cost less than importing numba and loading the loop from its cache,
#: which a process pays once (docs/benchmarks.md, session 55)
COMPILED_GATHER_COMPONENTS = 1 << 21


def _compiled_gather(xp, C: int):
    """:func:`distgrail.stages.insertion_jit.rows_gathered` on the CPU from
    :data:`COMPILED_GATHER_COMPONENTS` components, when numba loads; else None. It raises
    :class:`~distgrail.jit.CompileFailed` where it fails to compile (:func:`distgrail.jit.guard`)."""
    if xp is not np or C < COMPILED_GATHER_COMPONENTS:
        return None
    jit = guard(load(f"{__package__}.insertion_jit", "renumbering", stacklevel=6), "renumbering")
    return None if jit is None else jit.rows_gathered
