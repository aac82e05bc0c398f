"""Step 5 of a query: the guided multi-query search for the pairs the prefilters left open.

All undecided pairs at once, as a frontier of (query, vertex) pairs; a child c is entered only if
level(c) < level(cv) and L_cv ⊆ L_c; hitting cv, or a c whose DT subtree holds cv, answers the
query, which then leaves the frontier. Per-query visited marks keep any vertex from being
expanded twice for the same query. The CUDA twin is ``dg_search`` in ``kernels/query.cu``.
"""

from __future__ import annotations

import numpy as np

from ..segments import gather_rows, sorted_unique
from .stats import Labels

__all__ = ["guided_search_numpy", "VISITED_BYTES"]

#: upper bound on the visited bitmap of one search chunk (bytes)
VISITED_BYTES = 1 << 26


def guided_search_numpy(L: Labels, cu: np.ndarray, cv: np.ndarray):
    """Step 5 on the CPU for pairs that passed the prefilters. Returns (answers, rounds)."""
    k = cu.size
    found = np.zeros(k, dtype=bool)
    if k == 0:
        return found, 0
    C = L.C
    chunk = max(1, min(k, VISITED_BYTES // max(C, 1)))
    rounds = 0
    d = L.lo.shape[0]
    for q0 in range(0, k, chunk):
        q1 = min(k, q0 + chunk)
        nq = q1 - q0
        tv = cv[q0:q1].astype(np.int64)
        lev_t = L.level[tv]
        lo_t = L.lo[:, tv]
        hi_t = L.hi[:, tv]
        post_t = L.post0[tv]
        done = np.zeros(nq, dtype=bool)
        visited = np.zeros(nq * C, dtype=bool)
        fq = np.arange(nq, dtype=np.int64)
        fv = cu[q0:q1].astype(np.int64)
        visited[fq * C + fv] = True
        r = 0
        while fq.size:
            r += 1
            ch, cnt = gather_rows(L.indptr, L.indices, fv)
            q = np.repeat(fq, cnt)
            ch = ch.astype(np.int64)
            hit = ch == tv[q]
            done[q[hit]] = True
            keep = ~done[q] & (L.level[ch] < lev_t[q])
            # a (query, vertex) pair is tested once: whatever the test says now it says again
            key = q[keep] * C + ch[keep]
            key = sorted_unique(key[~visited[key]])
            visited[key] = True
            q, ch = key // C, key % C
            keep = np.ones(q.size, dtype=bool)
            for j in range(d):
                keep &= (L.lo[j][ch] <= lo_t[j][q]) & (hi_t[j][q] <= L.hi[j][ch])
            q, ch = q[keep], ch[keep]
            cut = (L.start0[ch] <= post_t[q]) & (post_t[q] <= L.post0[ch])
            done[q[cut]] = True
            keep = ~done[q]
            fq, fv = q[keep], ch[keep]
        rounds = max(rounds, r)
        found[q0:q1] = done
    return found, rounds
