"""Steps 1–5 of a query (u, v) mapped to components (cu, cv), in this order:

1. ``same_component``   cu == cv                                          → reachable
2. ``level_filter``     level(cu) >= level(cv)                            → not reachable
3. ``support_positive`` out[cu] & in[cv] != 0 (cu → s → cv for a support s) → reachable
4. ``support_negative`` in[cu] & ~in[cv] != 0 (some s → cu, s ↛ cv) or
                        out[cv] & ~out[cu] != 0 (cv → s, cu ↛ s)           → not reachable
5. ``interval_filter``  L_cv ⊄ L_cu in some dimension                      → not reachable
6. ``tree_cut``         cv in cu's DT subtree (dimension 0)                → reachable

Steps 3–4 need the support masks of phase 5 (:mod:`distgrail.stages.supports`); an index
without them (K = 0) skips them and they count 0. The CUDA twin is ``dg_prefilter`` in
``kernels/prefilter.cu``, launched by :mod:`distgrail.query.answer`.
"""

from __future__ import annotations

from ..arrays import array_module
from .stats import INTERVAL, LEVEL, SAME, SUPPORT_NEG, SUPPORT_POS, TREE, Labels

__all__ = ["prefilter", "support_verdict", "inside", "in_subtree"]


def support_verdict(L: Labels, cu, cv, mask_v=None):
    """(positive, negative) of steps 3–4 for component pairs (cu, cv); ``mask_v`` optionally
    gives (out, in) of cv already gathered, each (W, k)."""
    xp = array_module(cu)
    pos = xp.zeros(cu.shape, dtype=bool)
    neg = xp.zeros(cu.shape, dtype=bool)
    for w in range(L.W):
        ou, iu = L.out[w][cu], L.inn[w][cu]
        ov, iv = (L.out[w][cv], L.inn[w][cv]) if mask_v is None else (mask_v[0][w], mask_v[1][w])
        pos |= (ou & iv) != 0
        neg |= ((iu & ~iv) | (ov & ~ou)) != 0
    return pos, neg


def inside(L: Labels, outer, lo_in, hi_in):
    """L_inner ⊆ L_outer in every dimension: ``outer`` component ids, ``lo_in``/``hi_in`` (d, k)
    the inner components' intervals."""
    ok = array_module(outer).ones(outer.shape, dtype=bool)
    for k in range(L.d):
        ok &= (L.lo[k][outer] <= lo_in[k]) & (hi_in[k] <= L.hi[k][outer])
    return ok


def in_subtree(L: Labels, outer, post_in):
    """DT rank ``post_in`` (dimension 0) in the DT subtree of each ``outer`` component."""
    return (L.start0[outer] <= post_in) & (post_in <= L.post0[outer])


def prefilter(L: Labels, cu, cv):
    """The steps before the search. Returns (answer, code) with code 0 for pairs left to the search.
    The arrays may be NumPy's or, all of them, CuPy's (the spread search's prefilter on a GPU)."""
    xp = array_module(cu)
    code = xp.zeros(cu.shape, dtype=xp.int8)
    ans = xp.zeros(cu.shape, dtype=bool)
    same = cu == cv
    code[same] = SAME
    ans[same] = True
    op = xp.flatnonzero(~same)
    lvl = L.level[cu[op]] >= L.level[cv[op]]
    code[op[lvl]] = LEVEL
    op = op[~lvl]
    a, b = cu[op], cv[op]
    if L.W:
        pos, neg = support_verdict(L, a, b)
        code[op[pos]] = SUPPORT_POS
        ans[op[pos]] = True
        neg &= ~pos  # cannot both hold (exactness); keep the counts disjoint anyway
        code[op[neg]] = SUPPORT_NEG
        rest = ~(pos | neg)
        op, a, b = op[rest], a[rest], b[rest]
    ins = inside(L, a, L.lo[:, b], L.hi[:, b])
    code[op[~ins]] = INTERVAL
    op, a, b = op[ins], a[ins], b[ins]
    tree = in_subtree(L, a, L.post0[b])
    code[op[tree]] = TREE
    ans[op[tree]] = True
    return ans, code
