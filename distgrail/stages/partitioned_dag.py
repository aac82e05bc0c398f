"""Phases 1–5 on a condensed DAG whose edges stay partitioned over the ranks (issue 24: a DAG
too large for one GPU). Written once against an array module ``xp`` (NumPy, or CuPy on a GPU
backend) and an exchange ``ex``, like :mod:`distgrail.stages.partitioned_scc`; no MPI here.

Every rank holds arrays of O(C) that are the same on every rank (levels, the forest, labels,
masks) and ITS block of DAG rows: after :func:`spread_dag` rank r holds the out-edges of the
components ``bounds[r] .. bounds[r+1]-1`` (blocks balanced by edges), distinct and sorted, as a
local CSR. No rank holds another rank's edges.

- **levels** (:func:`kahn_levels`): Kahn's longest-path levels over the condensed edges where
  they were condensed (each rank its own, duplicates across ranks counted on both sides), one
  frontier per level, its decrements exchanged as an id list (``allgather``) or as a count per
  component (``allreduce``), whichever is smaller for that level.
- **numbering** (:func:`spread_dag`): components ordered by (level, compact id) = (level,
  smallest vertex): the canonical numbering of :mod:`distgrail.stages.condense`; each rank routes
  its renumbered edges to the owner of their source row (``alltoall``), which drops duplicates.
- **phase 1** (:func:`spread_parents`, max-level rule): the best hash over each component's
  candidate in-edges (``allreduce`` MAX), then the smallest parent holding it (MIN): two rounds
  of C words, the rule of :func:`distgrail.stages.forest.parents_max_level`.
- **phase 4** (:func:`spread_intervals`) and **phase 5** (:func:`spread_masks`): the level sweeps
  of :mod:`~distgrail.stages.intervals` and :mod:`~distgrail.stages.supports`, the ranks in turn
  (a rank's rows are a range of levels): each sweeps its rows with the one-process sweep from
  the values the other ranks' rows reached and broadcasts its block's (``bcast_from``): one
  broadcast per rank and side, none per level.
- phases 2–3 need only the forest (O(C)): every rank runs the one-process stages on its copy.

The exchange (``ex``) adds to that of :mod:`~distgrail.stages.partitioned_scc`: ``rank`` and
``size``, op ``"bor"`` for ``allreduce``, ``allgather(a)`` (the concatenation in rank order on
every rank), ``bcast_from(a, root)`` (rank ``root``'s ``a`` on every rank; None elsewhere) and
``alltoall(parts)`` (``parts[j]`` goes to rank j; returns what this rank got,
concatenated in rank order; it may empty the list ``parts`` once it has copied them).
"""

from __future__ import annotations

import numpy as np

from ..arrays import sorted_distinct
from ..arrays import to_host as _host
from ..hashing import STREAM_PARENT, hash3_xp
from ..arrays import scatter_at, scatter_max, scatter_min

__all__ = ["PartDAG", "PEEL_BLOCK", "kahn_levels", "csr_levels", "spread_dag", "spread_parents", "spread_intervals", "spread_masks", "own_levels",
           "block_csr",
           "spread_degrees", "gather_csr", "gather_degrees", "spread_bytes", "id_type"]


#: component counts from which this module's ids are int64 (int32 below)
INT64_IDS_FROM = 2**31


def id_type(xp, C: int):
    """The type of component ids in this module's arrays: int32 while C < 2^31, int64 above (a
    partitioned build is where C can pass 2^31: the one-GPU DAG path refuses it)."""
    return xp.int32 if int(C) < INT64_IDS_FROM else xp.int64


def _scalar_sum(xp, ex, v) -> int:
    return int(_host(ex.allreduce(xp.asarray([int(v)], dtype=xp.int64), "sum"))[0])


class PartDAG:
    """The condensed DAG of a partitioned build (module doc). ``n``, ``C``, ``m`` (distinct DAG
    edges over all ranks), ``comp`` (n) and ``level`` (C, int32) on every rank's device;
    ``level_ptr`` and ``bounds`` (row blocks) on the host; this rank's rows ``r0 .. r1-1`` as
    ``indptr`` (local offsets from 0) and ``indices`` (component ids), and ``erow`` (each local
    edge's row); ids are int32 below 2^31 components, int64 from there. ``level_off`` (host): where
    each level's rows start in this rank's edges, so that a level's edges are found without
    reading the device."""

    def __init__(self, n, C, m, comp, level, level_ptr, bounds, rank, indptr, indices, erow, level_off):
        self.n, self.C, self.m = int(n), int(C), int(m)
        self.comp, self.level, self.level_ptr, self.bounds = comp, level, level_ptr, bounds
        self.r0, self.r1 = int(bounds[rank]), int(bounds[rank + 1])
        self.indptr, self.indices, self.erow = indptr, indices, erow
        self.level_off = level_off.tolist()
        self.meta, self.timings = {}, {}

    @property
    def n_levels(self) -> int:
        return int(self.level_ptr.shape[0] - 1)

    def level_edges_here(self, lev: int):
        """``(rows, children)`` of this rank's edges leaving level ``lev``'s components."""
        e0, e1 = self.level_off[lev], self.level_off[lev + 1]
        return self.erow[e0:e1], self.indices[e0:e1]


def spread_bytes(n: int, C: int, m_local: int, k: int, W: int) -> int:
    """Device bytes of the spread phases on one rank: its condensed edges as keys and their sort
    (about 40 bytes each, sent and received), the O(C) arrays (levels, counts, numbering, forest,
    ranks: about 80 bytes each), post-order ranks and intervals (24 bytes per dimension) and the
    phase-4 sweep's buffer of a group of dimensions (8 bytes each), the two mask arrays (16 bytes
    per word), and ``comp`` (n)."""
    from ..constants import MAX_DIMS_PER_SWEEP

    return int(40 * m_local + (80 + 24 * k + 8 * min(k, MAX_DIMS_PER_SWEEP) + 16 * W) * C + 8 * n + (64 << 20))


def kahn_levels(xp, ex, C: int, cu, cv, partial: bool = False):
    """Collective: the longest-path level of every component (int32, the same on every rank) of
    the DAG whose edges ``cu -> cv`` (this rank's, sorted by ``cu``) are spread over the ranks;
    and the number of levels (:func:`csr_levels` over them). ``partial``: a graph with cycles is
    no error: the vertices no level reaches (on a cycle, or below one) keep -1."""
    ptr = xp.searchsorted(cu, xp.arange(C + 1, dtype=cu.dtype)).astype(xp.int64)  # (the edges come sorted by cu)
    return csr_levels(xp, ex, C, ptr, cv, partial)


#: the fewest heads a rank's block holds in the peel's exchange of a level (:func:`csr_levels`),
#: where the exchange names none (``ex.peel_block``: NCCL's is larger)
PEEL_BLOCK = 1 << 8


def _pow2(k: int) -> int:
    """The least power of two at least ``k`` (1 for k <= 1)."""
    return 1 << max(int(k) - 1, 0).bit_length()


def csr_levels(xp, ex, C: int, ptr, head, partial: bool = False):
    """Collective: :func:`kahn_levels` over this rank's edges as a CSR by source (``ptr`` int64 of
    ``C + 1``, ``head``; duplicate edges are fine, a self-loop is a cycle). A level is one
    exchange: each rank's heads of the edges out of the frontier in a block of ``cap`` slots, its
    count in front (:meth:`~distgrail.stages.partitioned_sweeps.ArraySweeps.expand_block`),
    gathered as equal blocks (one ``ncclAllGather`` on GPUs), the counts read from the gathered
    headers (the one host wait of the level: the same counts on every rank, so every rank takes
    the same branch) and every block's heads taking down the in-degrees
    (:meth:`~distgrail.stages.partitioned_sweeps.ArraySweeps.settle_blocks`): on a GPU the
    frontier's size stays on the device from one level to the next. ``cap`` follows the levels:
    twice the previous level's largest count (a power of two, at least the exchange's
    ``peel_block`` or :data:`PEEL_BLOCK`), so a narrow level sends little; a count past it sends
    the level again in blocks that hold it, or, when the level holds at least ``2 C`` heads or
    its blocks would outweigh a count per component, one count per component (an allreduce of
    ``8 C`` bytes)."""
    from .partitioned_sweeps import block_bytes, sweeps_for

    level = xp.full(C, -1, dtype=xp.int32)
    if C == 0:
        return level, 0
    ops = sweeps_for(xp)
    size, isz = int(ex.size), int(head.dtype.itemsize)
    indeg = ex.allreduce(xp.bincount(head, minlength=C).astype(xp.int64, copy=False), "sum")
    first = xp.flatnonzero(indeg == 0).astype(head.dtype)
    level[first] = 0
    front = ops.front(first)
    floor = int(getattr(ex, "peel_block", PEEL_BLOCK))
    cap, lev = floor, 0
    while True:
        block = ops.expand_block(ptr, head, front, cap)
        got = ex.allgather(block, [int(block.size)] * size)
        counts = ops.block_counts(got, size)
        total, most = sum(counts), max(counts)
        if total == 0:
            break
        lev += 1
        if most > cap and (total >= 2 * C or size * block_bytes(_pow2(most), isz) >= 8 * C):
            t = ops.expand(ptr, head, ops.front_ids(front))  # (a count per component is less to send)
            dec = ex.allreduce(xp.bincount(t, minlength=C).astype(xp.int64, copy=False), "sum")
            del t
            indeg -= dec
            ids = xp.flatnonzero((dec > 0) & (indeg == 0)).astype(head.dtype)
            del dec
            level[ids] = lev
            front = ops.front(ids)
        else:
            if most > cap:  # (every rank sends again)
                cap = _pow2(most)
                block = ops.expand_block(ptr, head, front, cap)
                got = ex.allgather(block, [int(block.size)] * size)
            front = ops.settle_blocks(got, size, cap, head.dtype, counts, indeg, level, lev)
        cap = max(floor, _pow2(2 * most))
    if not partial and bool((level < 0).any()):  # pragma: no cover - the condensation leaves a DAG
        raise RuntimeError("the condensed graph has a cycle")
    return level, lev + 1


def _bounds(xp, ex, C, nu, size):
    """Row blocks balanced by edges: ``bounds`` (size + 1 host ints) from the per-row counts."""
    cnt = ex.allreduce(xp.bincount(nu, minlength=C).astype(xp.int64), "sum") if C else xp.zeros(0, xp.int64)
    cum = xp.cumsum(cnt)
    total = int(cum[-1]) if C else 0
    targets = xp.asarray([(j * total) // size for j in range(1, size)], dtype=xp.int64)
    mid = _host(xp.searchsorted(cum, targets, side="right")).astype(np.int64) if size > 1 else np.zeros(0, np.int64)
    return np.concatenate(([0], np.minimum(mid, C), [C])).astype(np.int64)


def spread_dag(xp, ex, n: int, compact, C: int, box, levels=None) -> PartDAG:
    """Collective: the :class:`PartDAG` of the graph whose vertices have compact SCC ids
    ``compact`` (the same on every rank) and whose condensed edges on this rank are the keys in
    the one-element list ``box`` (sorted distinct int64 ``cu * C + cv``,
    :func:`~distgrail.stages.partitioned_scc.condensed_keys`; taken out of the list, so that
    their memory goes back once they are read). ``levels``: ``(level, L)`` of those components
    when known already (:func:`~distgrail.stages.partitioned_scc.peeled_keys`), else peeled
    here (:func:`kahn_levels`)."""
    idt = compact.dtype
    keys = box.pop()
    if C:
        cu, cv = (keys // C).astype(idt), (keys % C).astype(idt)
    else:
        cu = cv = keys.astype(idt)
    del keys
    lev0, L = kahn_levels(xp, ex, C, cu, cv) if levels is None else levels
    order = xp.argsort(lev0.astype(xp.int64) * C + xp.arange(C, dtype=xp.int64))  # (level, compact id)
    new_of_old = xp.empty(C, dtype=idt)
    new_of_old[order] = xp.arange(C, dtype=idt)
    level = lev0[order]
    del lev0, order
    level_ptr = _host(xp.searchsorted(level, xp.arange(L + 1, dtype=xp.int32))).astype(np.int64) if C else \
        np.zeros(1, np.int64)
    nu, nv = new_of_old[cu], new_of_old[cv]
    del cu, cv
    bounds = _bounds(xp, ex, C, nu, ex.size)
    mine = nu.astype(xp.int64)
    del nu
    mine *= C
    mine += nv
    del nv
    mine.sort()
    cut = _host(xp.searchsorted(mine, xp.asarray(bounds * C, dtype=xp.int64))).tolist()
    parts = [mine[cut[j]:cut[j + 1]] for j in range(ex.size)]
    del mine
    got = sorted_distinct(xp, ex.alltoall(parts))  # (the exchange may empty parts once it has copied them)
    del parts
    r0, r1 = int(bounds[ex.rank]), int(bounds[ex.rank + 1])
    rows = got // C if C else got
    indptr = xp.searchsorted(rows, xp.arange(r0, r1 + 1, dtype=xp.int64)).astype(xp.int64)
    cdt = id_type(xp, C)
    indices = (got % C).astype(cdt) if C else got.astype(cdt)
    erow = rows.astype(cdt)
    del got, rows
    m = _scalar_sum(xp, ex, indices.size)
    level_off = _host(indptr[xp.asarray(np.clip(level_ptr, r0, r1) - r0)]).astype(np.int64)
    comp = new_of_old[compact]
    return PartDAG(n, C, m, comp, level, level_ptr, bounds, ex.rank, indptr, indices, erow, level_off)


def spread_parents(xp, ex, pd: PartDAG, seed: int):
    """Collective phase 1, max-level rule: the parent of every component (int64, -1 for sources),
    the same on every rank and as :func:`~distgrail.stages.forest.parents_max_level`."""
    C = pd.C
    u, c = pd.erow.astype(xp.int64), pd.indices.astype(xp.int64)
    cand = pd.level[u] == pd.level[c] - 1
    u, c = u[cand], c[cand]
    h = hash3_xp(xp, seed, STREAM_PARENT, u * C + c)
    best = xp.zeros(C, dtype=xp.uint64)
    scatter_max(xp, best, c, h)
    best = ex.allreduce(best, "max")
    win = h == best[c]
    minp = xp.full(C, C, dtype=xp.int64)
    scatter_min(xp, minp, c[win], u[win])
    minp = ex.allreduce(minp, "min")
    return xp.where(minp == C, -1, minp)


def own_levels(pd: PartDAG):
    """``(first, last)``: the levels of this rank's rows ``r0 .. r1-1`` (components are numbered by
    level, so a rank's rows are the levels between; the block's first and last level may hold
    other ranks' rows too); ``(0, -1)`` for no rows."""
    if pd.r1 <= pd.r0:
        return 0, -1
    lp = np.asarray(pd.level_ptr)
    return int(np.searchsorted(lp, pd.r0, "right")) - 1, int(np.searchsorted(lp, pd.r1 - 1, "right")) - 1


def _kernels_fit(xp, pd) -> bool:
    """The one-process CUDA sweeps can sweep this rank's rows: CuPy arrays, int32 ids."""
    return getattr(xp, "__name__", "") == "cupy" and pd.indices.dtype == xp.int32


def block_csr(xp, pd: PartDAG):
    """This rank's rows as a CSR of the whole DAG's shape, what the one-process sweeps read:
    ``indptr`` (C + 1, int64: the rows of the other ranks empty) and ``indices``, with ``C`` and
    ``level_ptr``."""
    from types import SimpleNamespace

    ip = xp.zeros(pd.C + 1, dtype=xp.int64)
    ip[pd.r0:pd.r1 + 1] = pd.indptr
    if pd.r1 < pd.C:
        ip[pd.r1 + 1:] = pd.indptr[-1]
    return SimpleNamespace(C=pd.C, indptr=ip, indices=pd.indices, level_ptr=pd.level_ptr)


def spread_intervals(xp, ex, pd: PartDAG, post):
    """Collective phase 4: ``(lo, hi)`` (each shaped like ``post``, (k, C)), the same on every
    rank and as :func:`~distgrail.stages.intervals.descendant_intervals_numpy`.

    A rank's rows are a range of levels and every edge goes down the levels, so the ranks sweep
    in turn, the last rank (the deepest rows) first: each sweeps its rows over every dimension
    from the values the deeper ranks' rows reached, then broadcasts its block's values, final
    (P broadcasts of 16 k bytes per component of the block; no exchange per level). The sweep is
    the one-process kernels' on a CSR of this rank's rows
    (:func:`~distgrail.stages.intervals.sweep_intervals_cuda`) on a GPU, the array code per level
    (:func:`_intervals_rows`, the twin) otherwise."""
    lo, hi = post.copy(), post.copy()
    k, C = post.shape
    bounds = [int(b) for b in pd.bounds]
    for r in range(ex.size - 1, -1, -1):
        a, b = bounds[r], bounds[r + 1]
        if a == b:
            continue
        mine = ex.rank == r
        _take_turn(ex, "phase 4 over this rank's rows", lambda: _intervals_here(xp, pd, lo, hi) if mine else None)
        got = ex.bcast_from(xp.concatenate((lo[:, a:b], hi[:, a:b])) if mine else None, r)
        if not mine:
            lo[:, a:b] = got[:k]
            hi[:, a:b] = got[k:]
        del got
    return lo, hi


def _take_turn(ex, step: str, fn) -> None:
    """Collective: ``fn()`` (this rank's part of a turn, or nothing), then its failure any rank's
    (``ex.agree``): the others would otherwise wait in the turn's broadcast for a rank that
    failed (out of memory, a sweep's error flag) instead of ending with its error."""
    error = None
    try:
        fn()
    except Exception as e:  # shared below, on every rank
        error = e
    ex.agree(step, error)


def _intervals_here(xp, pd: PartDAG, lo, hi) -> None:
    """This rank's phase-4 sweep of its rows, in place: the one-process kernels on a GPU (int32
    ids), the array code otherwise."""
    if not _kernels_fit(xp, pd):
        _intervals_rows(xp, pd, lo, hi)
        return
    from .intervals import sweep_intervals_cuda

    bc = block_csr(xp, pd)
    sweep_intervals_cuda(bc.indptr, bc.indices, pd.level_ptr, lo, hi, own_levels(pd), into=(lo, hi))


def _intervals_rows(xp, pd: PartDAG, lo, hi) -> None:
    """The twin of this rank's phase-4 sweep: its levels deepest first, each dimension's MIN and
    MAX pushed from the children to the rows (in place)."""
    first, last = own_levels(pd)
    for lev in range(min(last, pd.n_levels - 2), first - 1, -1):
        rows, ch = pd.level_edges_here(lev)
        for j in range(lo.shape[0] if rows.size else 0):
            scatter_min(xp, lo[j], rows, lo[j][ch])
            scatter_max(xp, hi[j], rows, hi[j][ch])


def spread_masks(xp, ex, pd: PartDAG, ids):
    """Collective phase 5: ``(out, in)``, (C, W) uint64 (W = ceil(K / 64)), the same on every rank
    and as :func:`~distgrail.stages.supports.support_masks_numpy` for supports ``ids``.

    The ranks sweep in turn as in :func:`spread_intervals`, each side in its own order, both at
    once: at step s, rank P-1-s pulls ``out`` into its rows from their children (the deeper
    ranks' rows final already) and broadcasts its block; rank s pushes its rows' ``in`` to their
    children and broadcasts ``in`` from its first row on (its block final, the deeper rows holding
    what ranks 0..s pushed to them). On a GPU each sweep is the one-process sweep
    (:func:`~distgrail.stages.supports.sweep_masks_cuda`, one side, from the values so far); the
    array code per level (:func:`_masks_rows`, the twin) otherwise."""
    C, K = pd.C, int(ids.shape[0])
    W = (K + 63) // 64
    out = xp.zeros((C, W), dtype=xp.uint64)
    if W and C:
        j = np.arange(K)
        bits = np.left_shift(np.uint64(1), (j & 63).astype(np.uint64))
        out[xp.asarray(ids.astype(np.int64)), xp.asarray(j >> 6)] = xp.asarray(bits)  # distinct ids
    inn = out.copy()
    if not (W and C):
        return out, inn
    bounds = [int(b) for b in pd.bounds]
    P = ex.size
    for s in range(P):
        def mine():
            for side, r in (("out", P - 1 - s), ("in", s)):
                if bounds[r] < bounds[r + 1] and ex.rank == r:
                    _sweep_side(xp, pd, ids, side, out if side == "out" else inn)

        _take_turn(ex, "phase 5 over this rank's rows", mine)
        r = P - 1 - s
        a, b = bounds[r], bounds[r + 1]
        if a < b:
            got = ex.bcast_from(out[a:b] if ex.rank == r else None, r)
            if ex.rank != r:
                out[a:b] = got
        a, b = bounds[s], bounds[s + 1]
        if a < b:
            got = ex.bcast_from(inn[a:] if ex.rank == s else None, s)
            if ex.rank != s:
                inn[a:] = got
    return out, inn


def _sweep_side(xp, pd: PartDAG, ids, side: str, mask) -> None:
    """This rank's sweep of one side of the masks over its rows, in place on ``mask`` (C, W)."""
    if not _kernels_fit(xp, pd):
        _masks_rows(xp, pd, side, mask)
        return
    from .supports import sweep_masks_cuda

    bc = block_csr(xp, pd)
    start = (mask, None) if side == "out" else (None, mask)
    sweep_masks_cuda(bc, xp.asarray(ids.astype(np.int32)), sides=(side,), start=start)


def _masks_rows(xp, pd: PartDAG, side: str, mask) -> None:
    """The twin of this rank's sweep of one side: ``out`` its levels deepest first, each row ORing
    its children's words; ``in`` its levels in order, each row ORing its words into its
    children's (in place on ``mask``, (C, W))."""
    first, last = own_levels(pd)
    levels = range(min(last, pd.n_levels - 2), first - 1, -1) if side == "out" else range(first, last + 1)
    for lev in levels:
        rows, ch = pd.level_edges_here(lev)
        if not rows.size:
            continue
        to, frm = (rows, ch) if side == "out" else (ch, rows)
        for w in range(mask.shape[1]):  # a word at a time: temporaries of the level's edges, not W times them
            scatter_at(xp, "bitwise_or", mask[:, w], to, mask[frm, w])


def spread_degrees(xp, ex, pd: PartDAG):
    """Collective: (in-degree, out-degree) of every component in the DAG, int64, on every rank."""
    out = xp.zeros(pd.C, dtype=xp.int64)
    out[pd.r0:pd.r1] = xp.diff(pd.indptr)
    out = ex.allreduce(out, "sum")
    inn = ex.allreduce(xp.bincount(pd.indices, minlength=pd.C).astype(xp.int64), "sum")
    return inn, out


def gather_degrees(xp, ex, pd: PartDAG):
    """Collective: the whole DAG's ``indptr`` (int64, host) on the root, None elsewhere: the
    rows' blocks in rank order are the rows in order."""
    deg = ex.gather(xp.diff(pd.indptr))
    if not ex.root:
        return None
    indptr = np.zeros(pd.C + 1, dtype=np.int64)
    np.cumsum(_host(deg), out=indptr[1:])
    return indptr


def gather_csr(xp, ex, pd: PartDAG):
    """Collective: ``(indptr, indices)`` of the whole DAG as host arrays (int64, the ids' type) on
    the root, None elsewhere."""
    indptr = gather_degrees(xp, ex, pd)
    ind = ex.gather(pd.indices)
    if not ex.root:
        return None, None
    return indptr, _host(ind).astype(id_type(np, pd.C), copy=False)


# -- the phases' spread forms (entries: distgrail.stages.phases) ----------------------------

def spread_forest(be, ex, pd: PartDAG, seed: int):
    """Collective phases 1–2 on a spread DAG: the :class:`~distgrail.stages.labeling.Forest`, the
    same on every rank (phase 1 by :func:`spread_parents`, phase 2 on every rank's copy)."""
    import time

    from .labeling import Forest
    from .subtree import subtree_sizes

    t = {}
    t0 = time.perf_counter()
    with be.on_device():
        parent = spread_parents(be.xp, ex, pd, seed)
        be.synchronize()
        t["phase1_forest"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        size = subtree_sizes(be, parent, pd.level_ptr)
        be.synchronize()
    t["phase2_subtree_sizes"] = time.perf_counter() - t0
    return Forest.on_device(be, parent, size, t) if be.is_gpu else Forest(parent=parent, size=size, timings=t)


def spread_labels(be, ex, pd: PartDAG, forest, dims, seed: int, timings: dict):
    """Collective phases 3–4 on a spread DAG for the dimensions ``dims``: ``(post0, intervals)``,
    the intervals on ``be``'s device (phase 3 on every rank's copy of the forest, phase 4 by
    :func:`spread_intervals`)."""
    import time

    from ..dtypes import smallest_uint
    from .labeling import _labels_on_device
    from .ranks import post_order_ranks

    parent, size = forest.arrays(be)
    t0 = time.perf_counter()
    post = post_order_ranks(be, parent, size, pd.level_ptr, seed, dims)
    be.synchronize()
    timings["phase3_ranks"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with be.on_device():
        lo, hi = spread_intervals(be.xp, ex, pd, post)
        post0, iv = _labels_on_device(be, post, lo, hi, smallest_uint(max(pd.C - 1, 0)))
    timings["phase4_intervals"] = time.perf_counter() - t0
    return post0, iv


def spread_supports(be, ex, pd: PartDAG, K: int, seed: int):
    """Collective phase 5 on a spread DAG: ``(ids, out, in)``, the masks on ``be``'s device; the
    supports chosen from the degrees over all ranks by the rule of
    :func:`~distgrail.stages.supports.choose_supports`."""
    from ..dtypes import smallest_int
    from .supports import STREAM_SUPPORT, pick_per_slice

    C = pd.C
    xp = be.xp
    K = min(int(K), C)
    with be.on_device():
        inn, out = spread_degrees(xp, ex, pd)
        ids = np.zeros(0, np.int64)
        if K:
            score = (inn.astype(xp.uint64) + np.uint64(1)) * (out.astype(xp.uint64) + np.uint64(1))
            tie = hash3_xp(xp, seed, STREAM_SUPPORT, xp.arange(C, dtype=xp.uint64))
            ids = pick_per_slice(_host(score), _host(tie), K)
        ids = ids.astype(smallest_int(max(C, 1)))
        o, i = spread_masks(xp, ex, pd, ids)
    return ids, o, i
