"""Steps 1–4 of a query (u, v) mapped to components (cu, cv):

1. ``same_component``  cu == cv                               → reachable
2. ``level_filter``    level(cu) >= level(cv)                   → not reachable
3. ``interval_filter`` L_cv ⊄ L_cu in some dimension            → not reachable
4. ``tree_cut``        cv in cu's DT subtree (dimension 0)      → reachable

The CUDA twin is ``dg_prefilter`` in ``kernels/query.cu``, launched by :mod:`distgrail.query.answer`.
"""

from __future__ import annotations

import numpy as np

from .stats import INTERVAL, LEVEL, SAME, TREE, Labels

__all__ = ["prefilter"]


def prefilter(L: Labels, cu, cv, xp=np):
    """Steps 1–4. Returns (answer, code) with code 0 for pairs left to the search."""
    code = xp.zeros(cu.shape, dtype=xp.int8)
    ans = xp.zeros(cu.shape, dtype=bool)
    same = cu == cv
    code[same] = SAME
    ans[same] = True
    lu = L.level[cu]
    lv = L.level[cv]
    lvl = ~same & (lu >= lv)
    code[lvl] = LEVEL
    open_ = ~same & ~lvl
    inside = open_.copy()
    for k in range(L.lo.shape[0]):
        lo, hi = L.lo[k], L.hi[k]
        inside &= (lo[cu] <= lo[cv]) & (hi[cv] <= hi[cu])
    code[open_ & ~inside] = INTERVAL
    p = L.post0[cv]
    tree = inside & (L.start0[cu] <= p) & (p <= L.post0[cu])
    code[tree] = TREE
    ans[tree] = True
    return ans, code
