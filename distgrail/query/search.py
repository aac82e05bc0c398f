"""The last step of a query: the guided multi-query search for the pairs the prefilters left open.

All undecided pairs at once, as a frontier of (query, vertex) pairs. A child c of a frontier
vertex is entered only if level(c) < level(cv), L_cv ⊆ L_c and the support masks do not rule
c ↛ cv out (in[c] ⊆ in[cv] and out[cv] ⊆ out[c]); hitting cv, or entering a c whose DT subtree
holds cv or that reaches a support reaching cv (out[c] & in[cv] != 0), answers the query, which
then leaves the frontier. Per-query visited marks keep any vertex from being expanded twice for
the same query. The CUDA twin is ``dg_search`` in ``kernels/search.cu``: same frontiers, same
round count.

CPU cost: the visited marks are one bit per (query, component), in a bitmap of at most
:data:`VISITED_BYTES` that is reused from chunk to chunk and cleared by the keys it marked (no
page faults after the first chunk); the targets' labels are gathered once per chunk.
"""

from __future__ import annotations

import numpy as np

from ..segments import gather_rows, sorted_unique
from .prefilter import in_subtree, inside, support_verdict
from .stats import Labels

__all__ = ["guided_search_numpy", "VISITED_BYTES", "CHUNK_QUERIES"]

#: upper bound on the visited bitmap of one search chunk (bytes, one bit per (query, component))
VISITED_BYTES = 1 << 27
#: at most this many queries per chunk (larger chunks leave the caches and run slower)
CHUNK_QUERIES = 2048


def guided_search_numpy(L: Labels, cu: np.ndarray, cv: np.ndarray, sizes: list | None = None):
    """The search on the CPU for pairs that passed the prefilters. Returns (answers, rounds).

    ``sizes``: a list that receives the frontier size after each round, summed over all queries
    (what the GPU's grid-wide search reports with ``trace``)."""
    k = cu.size
    found = np.zeros(k, dtype=bool)
    if k == 0:
        return found, 0
    C = L.C
    chunk = max(1, min(k, CHUNK_QUERIES, 8 * VISITED_BYTES // max(C, 1)))
    bitmap = np.zeros((chunk * C + 7) // 8, dtype=np.uint8)
    rounds = 0
    for q0 in range(0, k, chunk):
        q1 = min(k, q0 + chunk)
        done, r = _search_chunk(L, cu[q0:q1].astype(np.int64), cv[q0:q1].astype(np.int64), bitmap, sizes)
        found[q0:q1] = done
        rounds = max(rounds, r)
    return found, rounds


def _test(bitmap, key):
    return ((bitmap[key >> 3] >> (key & 7).astype(np.uint8)) & 1).astype(bool)


def _mark(bitmap, key):
    """Set the bits of ``key`` (sorted, distinct)."""
    byte = key >> 3
    bit = np.left_shift(np.uint8(1), (key & 7).astype(np.uint8))
    first = np.ones(byte.size, dtype=bool)
    first[1:] = byte[1:] != byte[:-1]
    bitmap[byte[first]] |= np.bitwise_or.reduceat(bit, np.flatnonzero(first))


def _search_chunk(L: Labels, src, tv, bitmap, sizes=None):
    nq = src.size
    C, W = L.C, L.W
    lev_t = L.level[tv]
    lo_t, hi_t = L.lo[:, tv], L.hi[:, tv]
    post_t = L.post0[tv]
    mask_t = (L.out[:, tv], L.inn[:, tv])
    done = np.zeros(nq, dtype=bool)
    fq = np.arange(nq, dtype=np.int64)
    fv = src
    marked = [fq * C + fv]
    _mark(bitmap, marked[0])
    r = 0
    while fq.size:
        r += 1
        ch, cnt = gather_rows(L.indptr, L.indices, fv)
        q = np.repeat(fq, cnt)
        ch = ch.astype(np.int64)
        hit = ch == tv[q]
        done[q[hit]] = True
        keep = ~done[q] & (L.level[ch] < lev_t[q])
        # a (query, vertex) pair is tested once: whatever the tests say now they say again
        key = q[keep] * C + ch[keep]
        key = sorted_unique(key[~_test(bitmap, key)])
        _mark(bitmap, key)
        marked.append(key)
        q, ch = key // C, key % C
        keep = inside(L, ch, lo_t[:, q], hi_t[:, q])
        q, ch = q[keep], ch[keep]
        cut = in_subtree(L, ch, post_t[q])
        if W:
            pos, neg = support_verdict(L, ch, None, (mask_t[0][:, q], mask_t[1][:, q]))
            cut |= pos & ~neg
            keep = ~neg
            q, ch, cut = q[keep], ch[keep], cut[keep]
        done[q[cut]] = True
        keep = ~done[q]
        fq, fv = q[keep], ch[keep]
        if sizes is not None:
            if len(sizes) < r:
                sizes.append(0)
            sizes[r - 1] += int(fq.size)
    for key in marked:  # leave the bitmap all-zero for the next chunk
        bitmap[key >> 3] = 0
    return done, r
