"""Phase 4 (bottom-up): L_v = [min, max] of the rank over all DAG descendants of v (v included).

This form is sound for any spanning forest and any sibling order (DESIGN invariant 2):
u →* v ⇒ descendants(v) ⊆ descendants(u) ⇒ L_v ⊆ L_u.
"""

from __future__ import annotations

import numpy as np

__all__ = ["descendant_intervals"]


def descendant_intervals_numpy(indptr, indices, level_ptr, post):
    """NumPy twin: (lo, hi), each shaped like ``post`` (k, C)."""
    lo = post.copy()
    hi = post.copy()
    lp = level_ptr.tolist()
    for lev in range(len(lp) - 3, -1, -1):
        a, b = lp[lev], lp[lev + 1]
        e0, e1 = int(indptr[a]), int(indptr[b])
        if e0 == e1:
            continue
        deg = np.diff(indptr[a : b + 1])
        nz = np.flatnonzero(deg)
        starts = (indptr[a:b] - e0)[nz]
        ch = indices[e0:e1]
        rows = a + nz
        lo[:, rows] = np.minimum(lo[:, rows], np.minimum.reduceat(lo[:, ch], starts, axis=1))
        hi[:, rows] = np.maximum(hi[:, rows], np.maximum.reduceat(hi[:, ch], starts, axis=1))
    return lo, hi


def descendant_intervals(be, indptr, indices, level_ptr, post):
    """Phase 4 on backend ``be``."""
    from .gpu_labeling import descendant_intervals_cuda

    return be.pick(descendant_intervals_numpy, descendant_intervals_cuda)(indptr, indices, level_ptr, post)
