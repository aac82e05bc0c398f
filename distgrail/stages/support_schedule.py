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

Units are ordered by step. Unit u may start once the ``need[u]`` units before its first step are
done (the units of one first step form a ``group``; the kernel waits for the group before, which
waited for the one before it); the kernel hands units out by an atomic ticket and waits on the
done counter of the group before (one launch for the whole phase), or the host launches the units
of one step per launch (``schedule="levels"``).
The schedule is a pure function of the level sizes, so it is planned and tested on the CPU.
"""

from __future__ import annotations

import numpy as np

from ..constants import BATCH_THREADS, SMALL_LEVEL

__all__ = ["RUN", "OUT", "IN", "FIELDS", "DESC_FIELDS", "group_size", "support_schedule", "schedule_descriptors",
           "expand_schedule", "step_groups"]

#: side codes of a unit: a run of small steps (both sides), one side's rows of one step
RUN, OUT, IN = -1, 0, 1
#: int32 fields of a unit (one row of the schedule); ``g``: G of a one-side unit, or
#: ``G_out | G_in << 8`` of a run
FIELDS = ("s0", "s1", "side", "r0", "r1", "g", "need", "group")
#: int64 fields of a descriptor (:func:`schedule_descriptors`): first step, end step, side, rows
#: a..b, rows per unit, g, need, group, units (DESC_FIELDS in kernels/supports.cu)
DESC_FIELDS = ("s0", "s1", "side", "a", "b", "rpu", "g", "need", "group", "n")


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
                     small: int = SMALL_LEVEL, max_group: int = 32, push_out: bool = False) -> np.ndarray:
    """The units of the fused sweep, an (U, 8) int32 array of :data:`FIELDS`.

    ``level_ptr``: the L+1 level bounds; ``out_ends[l]`` = forward ``indptr[level_ptr[l]]`` and
    ``in_ends[l]`` the same for the CSR the ``in`` side reads (the reverse CSR when pulling, the
    forward one when pushing).
    """
    return expand_schedule(schedule_descriptors(level_ptr, out_ends, in_ends, push, threads, small, max_group,
                                                push_out))


def schedule_descriptors(level_ptr, out_ends, in_ends, push: bool, threads: int = BATCH_THREADS // 2,
                         small: int = SMALL_LEVEL, max_group: int = 32, push_out: bool = False) -> np.ndarray:
    """The schedule in compact form, an (D, 10) int64 array of :data:`DESC_FIELDS`: one row per run
    of small steps (one unit) or per side of a large step (``n`` units of ``rpu`` rows from ``a``,
    ending at ``b``), in unit order; :func:`expand_schedule` (or ``dg_support_expand`` on the GPU)
    turns it into the units. D is at most 2 (L - 1), so planning costs O(L) on the host whatever
    the number of units (same arguments as :func:`support_schedule`)."""
    lp = np.asarray(level_ptr, dtype=np.int64)
    L = lp.size - 1
    S = max(L - 1, 0)
    if S == 0:
        return np.zeros((0, len(DESC_FIELDS)), np.int64)
    rows = np.diff(lp)
    eo_l = np.diff(np.asarray(out_ends, dtype=np.int64))
    ei_l = np.diff(np.asarray(in_ends, dtype=np.int64))
    s = np.arange(S, dtype=np.int64)
    lo, li = L - 2 - s + (1 if push_out else 0), s + (0 if push else 1)
    ro, eo, ri, ei = rows[lo], eo_l[lo], rows[li], ei_l[li]
    wo = np.where(eo > 0, ro + eo, 0)
    wi = np.where(ei > 0, ri + ei, 0)
    is_small = (wo <= small) & (wi <= small)

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
    for side, lev, r, e in ((OUT, lo, ro, eo), (IN, li, ri, ei)):  # large steps: units of threads // G rows
        sel = np.flatnonzero(~is_small & (e > 0))
        G = group_size(e[sel], r[sel], max_group)
        rpu = threads // G
        firsts.append(sel), orders.append(np.full_like(sel, side + 1)), counts.append(-(-r[sel] // rpu))
        s1s.append(sel + 1), sides.append(np.full_like(sel, side)), levs.append(lev[sel]), rpus.append(rpu)
        gs.append(G)
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
    a = np.where(side != RUN, lp[lev], 0)
    b = np.where(side != RUN, lp[np.minimum(lev + 1, L)], 0)
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
