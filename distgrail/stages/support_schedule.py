"""The launch schedule of the phase-5 mask sweeps (``dg_support_sweep`` in kernels/supports.cu).

Both masks are swept in ONE pass of steps ``s = 0 .. L-2`` (L levels): step s ORs the ``out``
masks of level ``L-2-s`` (bottom-up, pull over the forward CSR) and the ``in`` masks of level
``s+1`` (top-down, pull over the reverse CSR) or, when the reverse CSR is not on the device, pushes
the ``in`` masks of level ``s`` along the forward CSR. The two sides touch different arrays, so one
step carries both and the sweep has L-1 steps instead of 2(L-1) level passes.

The steps are cut into *units*, one block of ``threads`` (``BATCH_THREADS // 2``: the kernel
keeps a row's structure in registers) each:

* a run of consecutive small steps (each side's level at most ``SMALL_LEVEL`` rows + edges, or
  without edges) is ONE unit that one block walks with ``__syncthreads()`` between steps;
* every other step gives, per side with edges, units of ``threads // G`` rows: one row per
  group of G lanes, G the power of two (1..32) nearest above the level's mean degree.

* a *hub* row (more than ``hub_edges`` = :data:`~distgrail.constants.SWEEP_HUB_EDGES` edges on
  the CSR its side reads) is skipped by the row units and swept by units of ``hub_edges`` of its
  edges each, the whole block on one chunk (a pull ORs the chunk's result into the row
  atomically). A giant component with millions of children, as a row of one unit, held the whole
  sweep (docs/benchmarks.md).
  The hub rows are found on the GPU (``dg_support_hubs``, twin :func:`hub_rows_numpy`, at most
  m / ``hub_edges`` of them); a step with a hub is never small.

Units are ordered by step. Unit u may start once the ``need[u]`` units before its first step are
done (the units of one first step form a ``group``; the kernel waits for the group before, which
waited for the one before it); the kernel hands units out by an atomic ticket and waits on the
done counter of the group before (one launch for the whole phase), or the host launches the units
of one step per launch (``schedule="levels"``).
The schedule is a pure function of the level sizes and the hub rows, so it is planned and
tested on the CPU; :func:`plan_reads` reads both from the GPU in one wait. The hub lists must be
complete (the kernel skips every row of more than ``SWEEP_HUB_EDGES`` edges in the row units):
without them, as for a DAG without hubs, pass None.
"""

from __future__ import annotations

import numpy as np

from ..constants import BATCH_THREADS, SMALL_LEVEL, SWEEP_HUB_EDGES
from ..errors import BackendError

__all__ = ["RUN", "OUT", "IN", "OUT_HUB", "IN_HUB", "FIELDS", "DESC_FIELDS", "group_size", "support_schedule",
           "schedule_descriptors", "expand_schedule", "step_groups", "hub_rows_numpy", "hub_capacity",
           "plan_reads", "hubs_from_buffer"]

#: side codes of a unit: a run of small steps (both sides), one side's rows of one step, one
#: chunk of a hub row's edges on one side
RUN, OUT, IN, OUT_HUB, IN_HUB = -1, 0, 1, 2, 3
#: int32 fields of a unit (one row of the schedule); ``g``: G of a one-side unit, or
#: ``G_out | G_in << 8`` of a run, or the row of a hub chunk (``r0``: the chunk, ``r1 = r0 + 1``)
FIELDS = ("s0", "s1", "side", "r0", "r1", "g", "need", "group")
#: int64 fields of a descriptor (:func:`schedule_descriptors`): first step, end step, side, rows
#: a..b, rows per unit, g, need, group, units (DESC_FIELDS in kernels/supports.cu)
DESC_FIELDS = ("s0", "s1", "side", "a", "b", "rpu", "g", "need", "group", "n")
_NO_HUBS = (np.zeros(0, np.int64), np.zeros(0, np.int64))


def hub_rows_numpy(ptr, hub_edges: int = SWEEP_HUB_EDGES):
    """NumPy twin of ``dg_support_hubs``: (rows, edge counts) of the rows of CSR ``ptr`` with more
    than ``hub_edges`` edges, by row."""
    deg = np.diff(np.asarray(ptr, dtype=np.int64))
    rows = np.flatnonzero(deg > hub_edges).astype(np.int64)
    return rows, deg[rows]


def hub_capacity(m: int, C: int, hub_edges: int = SWEEP_HUB_EDGES) -> int:
    """Room for the hub rows of a CSR of ``C`` rows and ``m`` edges (each has more than
    ``hub_edges``)."""
    return max(1, min(int(C), int(m) // (int(hub_edges) + 1)))


def plan_reads(cp, kernel, lp_dev, out_csr, in_csr, C: int, max_blocks: int):
    """What the host plans the sweep from, read in ONE wait: the levels' edge ranges on each side's
    CSR (``ends``, (2, L+1)) and the hub rows of each (``dg_support_hubs``, once when both sides
    read one CSR): ``(ends, [out_hubs, in_hubs], launches)``, each (rows, edge counts) by row.
    ``kernel``: :func:`distgrail.gpu.sweep.kernel` (the launcher's, which tests replace)."""
    csrs = [out_csr] + ([in_csr] if in_csr[0] is not out_csr[0] else [])
    parts, caps = [cp.stack((out_csr[0][lp_dev], in_csr[0][lp_dev])).ravel()], []
    for ptr, ind in csrs:
        caps.append(hub_capacity(int(ind.shape[0]), C))
        parts.append(cp.zeros(1 + 2 * caps[-1], dtype=cp.int64))
        if C:
            kernel("supports", "dg_support_hubs")((max(1, min(-(-C // 256), max_blocks)),), (256,),
                                                  (ptr, np.int64(C), parts[-1], np.int64(caps[-1])))
    got = cp.concatenate(parts).get()
    n = parts[0].shape[0]
    hubs = []
    for cap in caps:
        hubs.append(hubs_from_buffer(got[n:n + 1 + 2 * cap], cap))
        n += 1 + 2 * cap
    return got[:parts[0].shape[0]].reshape(2, -1), [hubs[0], hubs[-1]], (len(csrs) if C else 0)


def hubs_from_buffer(buf, cap: int):
    """(rows, edge counts) by row from ``dg_support_hubs``' buffer (host int64, 1 + 2 cap)."""
    buf = np.asarray(buf, dtype=np.int64)
    n = int(buf[0])
    if n > cap:
        raise BackendError(f"phase 5: dg_support_hubs found {n} hub rows, room for {cap} (a damaged CSR?)")
    rows, deg = buf[1:1 + n], buf[1 + cap:1 + cap + n]
    o = np.argsort(rows, kind="stable")
    return rows[o], deg[o]


def group_size(edges, rows, max_group: int = 32):
    """Lanes per row: the power of two in 1..``max_group`` (a power of two <= 32) at or above
    ``edges / rows`` (arrays or ints)."""
    e = np.asarray(edges, dtype=np.float64)
    r = np.maximum(np.asarray(rows, dtype=np.float64), 1.0)
    avg = np.maximum(e / r, 1.0)
    cap = int(max_group).bit_length() - 1
    g = np.left_shift(1, np.minimum(np.ceil(np.log2(avg)).astype(np.int64), cap))
    return g.astype(np.int64)


def support_schedule(level_ptr, out_ends, in_ends, push: bool, threads: int = BATCH_THREADS // 2,
                     small: int = SMALL_LEVEL, max_group: int = 32, push_out: bool = False, out_hubs=None,
                     in_hubs=None, hub_edges: int = SWEEP_HUB_EDGES) -> np.ndarray:
    """The units of the fused sweep, an (U, 8) int32 array of :data:`FIELDS`.

    ``level_ptr``: the L+1 level bounds; ``out_ends[l]`` = forward ``indptr[level_ptr[l]]`` and
    ``in_ends[l]`` the same for the CSR the ``in`` side reads (the reverse CSR when pulling, the
    forward one when pushing). ``out_hubs`` / ``in_hubs``: (rows, edge counts) of the hub rows of
    the CSR each side reads (:func:`hub_rows_numpy` with ``hub_edges``; None: none).
    """
    return expand_schedule(schedule_descriptors(level_ptr, out_ends, in_ends, push, threads, small, max_group,
                                                push_out, out_hubs, in_hubs, hub_edges))


def schedule_descriptors(level_ptr, out_ends, in_ends, push: bool, threads: int = BATCH_THREADS // 2,
                         small: int = SMALL_LEVEL, max_group: int = 32, push_out: bool = False, out_hubs=None,
                         in_hubs=None, hub_edges: int = SWEEP_HUB_EDGES) -> np.ndarray:
    """The schedule in compact form, an (D, 10) int64 array of :data:`DESC_FIELDS`: one row per run
    of small steps (one unit), per side of a large step (``n`` units of ``rpu`` rows from ``a``,
    ending at ``b``) or per hub row (``n`` chunks of ``hub_edges`` edges, ``g`` the row, ``a = 0``,
    ``b = n``, ``rpu = 1``), in unit order; :func:`expand_schedule` (or ``dg_support_expand`` on the
    GPU) turns it into the units. D is at most 2 (L - 1) + the hub rows, so planning costs O(L +
    hubs) on the host whatever the number of units (same arguments as :func:`support_schedule`)."""
    lp = np.asarray(level_ptr, dtype=np.int64)
    L = lp.size - 1
    S = max(L - 1, 0)
    if S == 0:
        return np.zeros((0, len(DESC_FIELDS)), np.int64)
    rows = np.diff(lp)
    eo_l = np.diff(np.asarray(out_ends, dtype=np.int64))
    ei_l = np.diff(np.asarray(in_ends, dtype=np.int64))
    s = np.arange(S, dtype=np.int64)
    shift_o, shift_i = (1 if push_out else 0), (0 if push else 1)
    lo, li = L - 2 - s + shift_o, s + shift_i
    ro, eo, ri, ei = rows[lo], eo_l[lo], rows[li], ei_l[li]
    wo = np.where(eo > 0, ro + eo, 0)
    wi = np.where(ei > 0, ri + ei, 0)
    hubs = []  # per side: (hub rows, their levels, edge counts), hub rows and edges per level
    for h in (out_hubs, in_hubs):
        hr, hd = (np.asarray(x, dtype=np.int64) for x in (h if h is not None else _NO_HUBS))
        hl = np.searchsorted(lp, hr, side="right") - 1
        hubs.append((hr, hl, hd, np.bincount(hl, minlength=L)[:L], np.bincount(hl, weights=hd, minlength=L)[:L]))
    is_small = (wo <= small) & (wi <= small) & (hubs[0][3][lo] == 0) & (hubs[1][3][li] == 0)

    # descriptors: a run of small steps (one unit) or one side's rows of one large step (n units
    # of rpu rows), ordered by first step, then run / out / in
    firsts, orders, counts, s1s, sides, levs, rpus, gs = [], [], [], [], [], [], [], []
    if is_small.any():  # runs of consecutive small steps: one unit each
        chg = np.flatnonzero(np.diff(is_small.astype(np.int8))) + 1
        st = np.concatenate(([0], chg))
        en = np.concatenate((chg, [S]))
        cw = np.concatenate(([0], np.cumsum(wo + wi)))
        keep = is_small[st] & (cw[en] > cw[st])  # a run without edges has nothing to do
        st, en = st[keep], en[keep]
        co = np.concatenate(([0], np.cumsum(np.where(eo > 0, eo, 0))))
        cro = np.concatenate(([0], np.cumsum(np.where(eo > 0, ro, 0))))
        ci = np.concatenate(([0], np.cumsum(np.where(ei > 0, ei, 0))))
        cri = np.concatenate(([0], np.cumsum(np.where(ei > 0, ri, 0))))
        g = group_size(co[en] - co[st], cro[en] - cro[st]) | (group_size(ci[en] - ci[st], cri[en] - cri[st]) << 8)
        one = np.ones_like(st)
        firsts.append(st), orders.append(0 * one), counts.append(one), s1s.append(en)
        sides.append(RUN * one), levs.append(0 * one), rpus.append(0 * one), gs.append(g)
    sides_ = ((OUT, OUT_HUB, lo, ro, eo, L - 2 + shift_o, -1, hubs[0]), (IN, IN_HUB, li, ri, ei, -shift_i, 1, hubs[1]))
    for side, hub_side, lev, r, e, s_at, s_dir, (hr, hl, hd, hub_rows, hub_e) in sides_:
        # large steps: units of threads // G rows; G from the rows that are not hubs
        e_rest = e - hub_e[lev].astype(np.int64)
        sel = np.flatnonzero(~is_small & (e_rest > 0))
        G = group_size(e_rest[sel], r[sel] - hub_rows[lev][sel], max_group)
        rpu = threads // G
        firsts.append(sel), orders.append(np.full_like(sel, side + 1)), counts.append(-(-r[sel] // rpu))
        s1s.append(sel + 1), sides.append(np.full_like(sel, side)), levs.append(lev[sel]), rpus.append(rpu)
        gs.append(G)
        hs = s_at + s_dir * hl  # a hub row's step: the step that sweeps its level on this side
        ok = (hs >= 0) & (hs < S)
        hs, hrow, hn = hs[ok], hr[ok], -(-hd[ok] // int(hub_edges))
        firsts.append(hs), orders.append(np.full_like(hs, side + 1)), counts.append(hn), s1s.append(hs + 1)
        sides.append(np.full_like(hs, hub_side)), levs.append(np.full_like(hs, -1)), rpus.append(np.ones_like(hs))
        gs.append(hrow)
    first, order_, n, s1, side, lev, rpu, g = (np.concatenate(x).astype(np.int64) for x in
                                                (firsts, orders, counts, s1s, sides, levs, rpus, gs))
    if first.size == 0:
        return np.zeros((0, len(DESC_FIELDS)), np.int64)
    o = np.argsort(first * 3 + order_, kind="stable")
    first, n, s1, side, lev, rpu, g = first[o], n[o], s1[o], side[o], lev[o], rpu[o], g[o]
    start = np.cumsum(n) - n  # first unit of each descriptor
    newstep = np.r_[True, first[1:] != first[:-1]]
    grp = np.cumsum(newstep) - 1  # group: the descriptors (units) of one first step
    need = start[newstep][grp]  # units before the step's first unit
    rowwise = (side == OUT) | (side == IN)
    a = np.where(rowwise, lp[np.maximum(lev, 0)], 0)
    b = np.where(rowwise, lp[np.minimum(lev + 1, L)], np.where(side == RUN, 0, n))
    return np.stack((first, s1, side, a, b, rpu, g, need, grp, n), axis=1)


def expand_schedule(desc: np.ndarray) -> np.ndarray:
    """The (U, 8) int32 units of :data:`FIELDS` from :func:`schedule_descriptors` (NumPy twin of
    ``dg_support_expand``): unit k of a descriptor has rows ``a + k rpu .. min(a + (k+1) rpu, b)``."""
    if desc.shape[0] == 0:
        return np.zeros((0, len(FIELDS)), np.int32)
    first, s1, side, a, b, rpu, g, need, grp, n = desc.T
    start = np.cumsum(n) - n
    U = int(n.sum())
    k = np.arange(U, dtype=np.int64) - np.repeat(start, n)  # unit index within its descriptor
    rep = lambda x: np.repeat(x, n)  # noqa: E731
    r0 = rep(a) + k * rep(rpu)
    out = np.empty((len(FIELDS), U), np.int32)
    out[0], out[1], out[2], out[3] = rep(first), rep(s1), rep(side), r0
    out[4] = np.minimum(r0 + rep(rpu), rep(b))
    out[5], out[6], out[7] = rep(g), rep(need), rep(grp)
    return np.ascontiguousarray(out.T)


def step_groups(sched: np.ndarray):
    """(first unit, unit count) of each launch of ``schedule="levels"``: the units of one step
    (or one run) per launch."""
    if sched.shape[0] == 0:
        return []
    s0 = sched[:, 0]
    st = np.concatenate(([0], np.flatnonzero(np.diff(s0)) + 1))
    cnt = np.diff(np.concatenate((st, [s0.size])))
    return list(zip(st.tolist(), cnt.tolist()))
