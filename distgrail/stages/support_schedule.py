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
done; the kernel hands units out by an atomic ticket and waits on a done counter (one launch for
the whole phase), or the host launches the units of one step per launch (``schedule="levels"``).
The schedule is a pure function of the level sizes, so it is planned and tested on the CPU.
"""

from __future__ import annotations

import numpy as np

from ..constants import BATCH_THREADS, SMALL_LEVEL

__all__ = ["RUN", "OUT", "IN", "FIELDS", "group_size", "support_schedule", "step_groups"]

#: side codes of a unit: a run of small steps (both sides), one side's rows of one step
RUN, OUT, IN = -1, 0, 1
#: int32 fields of a unit (one row of the schedule); ``g``: G of a one-side unit, or
#: ``G_out | G_in << 8`` of a run
FIELDS = ("s0", "s1", "side", "r0", "r1", "g", "need", "pad")


def group_size(edges, rows):
    """Lanes per row: the power of two in 1..32 at or above ``edges / rows`` (arrays or ints)."""
    e = np.asarray(edges, dtype=np.float64)
    r = np.maximum(np.asarray(rows, dtype=np.float64), 1.0)
    avg = np.maximum(e / r, 1.0)
    g = np.left_shift(1, np.minimum(np.ceil(np.log2(avg)).astype(np.int64), 5))
    return g.astype(np.int64)


def support_schedule(level_ptr, out_ends, in_ends, push: bool, threads: int = BATCH_THREADS // 2,
                     small: int = SMALL_LEVEL) -> np.ndarray:
    """The units of the fused sweep, an (U, 8) int32 array of :data:`FIELDS`.

    ``level_ptr``: the L+1 level bounds; ``out_ends[l]`` = forward ``indptr[level_ptr[l]]`` and
    ``in_ends[l]`` the same for the CSR the ``in`` side reads (the reverse CSR when pulling, the
    forward one when pushing).
    """
    lp = np.asarray(level_ptr, dtype=np.int64)
    L = lp.size - 1
    S = max(L - 1, 0)
    if S == 0:
        return np.zeros((0, len(FIELDS)), np.int32)
    rows = np.diff(lp)
    eo_l = np.diff(np.asarray(out_ends, dtype=np.int64))
    ei_l = np.diff(np.asarray(in_ends, dtype=np.int64))
    s = np.arange(S, dtype=np.int64)
    lo, li = L - 2 - s, s + (0 if push else 1)
    ro, eo, ri, ei = rows[lo], eo_l[lo], rows[li], ei_l[li]
    wo = np.where(eo > 0, ro + eo, 0)
    wi = np.where(ei > 0, ri + ei, 0)
    is_small = (wo <= small) & (wi <= small)

    parts = []  # (first step, order within the step, unit rows)
    # runs of consecutive small steps: one unit each
    if is_small.any():
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
        z = np.zeros_like(st)
        parts.append((st, z, np.stack((st, en, np.full_like(st, RUN), z, z, g), axis=1)))
    # large steps: per side with edges, units of threads // G rows
    for side, lev, r, e in ((OUT, lo, ro, eo), (IN, li, ri, ei)):
        sel = np.flatnonzero(~is_small & (e > 0))
        if sel.size == 0:
            continue
        G = group_size(e[sel], r[sel])
        rpu = threads // G
        n = -(-r[sel] // rpu)
        k = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
        step = np.repeat(sel, n)
        a = np.repeat(lp[lev[sel]], n) + k * np.repeat(rpu, n)
        b = np.minimum(a + np.repeat(rpu, n), np.repeat(lp[lev[sel] + 1], n))
        u = np.stack((step, step + 1, np.full_like(step, side), a, b, np.repeat(G, n)), axis=1)
        parts.append((step, np.full_like(step, side + 1), u))
    if not parts:
        return np.zeros((0, len(FIELDS)), np.int32)
    first = np.concatenate([p[0] for p in parts])
    within = np.concatenate([p[1] for p in parts])
    units = np.concatenate([p[2] for p in parts])
    order = np.argsort(first * 3 + within, kind="stable")  # by step, run / out / in; rows stay ascending
    units, first = units[order], first[order]
    need = np.searchsorted(first, first, side="left")
    out = np.zeros((units.shape[0], len(FIELDS)), np.int32)
    out[:, :6] = units
    out[:, 6] = need
    return out


def step_groups(sched: np.ndarray):
    """(first unit, unit count) of each launch of ``schedule="levels"``: the units of one step
    (or one run) per launch."""
    if sched.shape[0] == 0:
        return []
    s0 = sched[:, 0]
    st = np.concatenate(([0], np.flatnonzero(np.diff(s0)) + 1))
    cnt = np.diff(np.concatenate((st, [s0.size])))
    return list(zip(st.tolist(), cnt.tolist()))
