"""The CPU backend's search: bidirectional, from u forward and from v backward, vectorised over a
chunk of queries (the pairs the prefilters left open).

On dense DAGs the forward-only search of :func:`distgrail.query.search.guided_search_numpy`
scans many thousands of edges per pair, each costly in NumPy (docs/benchmarks.md). Searching
from both ends and always growing the side with the fewer frontier edges meets in the middle
and scans far fewer edges.

Each round, every live query expands the side whose frontier has the fewer edges (out-degrees
forward, in-degrees backward; ties forward):

* forward, (q, x) → child c: ``c`` marked by the backward side (``v`` is marked there from the
  start) answers q; else c enters only if level(c) < level(v), L_v ⊆ L_c and the support masks
  allow c → v; a DT-subtree or support hit (out[c] & in[v]) answers q;
* backward, (q, y) → parent p: ``p`` marked by the forward side (``u`` from the start) answers
  q; else p enters only if level(p) > level(u), L_p ⊆ L_u and the masks allow u → p; p in u's
  DT subtree or out[u] & in[p] != 0 answers q.

A query whose side runs empty is not reachable: every vertex on a path u → v passes the tests
of both sides, so an exhausted side would have met it. Exact like the forward search; only the
round count differs (it counts rounds of this search). The GPU keeps the forward search (its
twin is :func:`guided_search_numpy`).
"""

from __future__ import annotations

import numpy as np

from ..segments import gather_rows, sorted_unique
from .prefilter import in_subtree, inside, support_verdict
from .search import VISITED_BYTES, _mark, _test
from .stats import Labels, read_only

__all__ = ["bidirectional_search_numpy", "reverse_csr", "CHUNK_QUERIES"]

#: queries per chunk (two bitmaps of chunk * C bits; 256 ran faster than 1024 and 4096: the
#: bitmap probes stay closer to the caches; docs/benchmarks.md)
CHUNK_QUERIES = 256


def reverse_csr(L: Labels):
    """(indptr, indices, out-degrees) of the parents of each component: built once per ``L``
    (under :attr:`Labels.reverse`'s lock, read-only after), shared by every later search."""
    return L.reverse.get(lambda: _reverse_csr(L))


def _reverse_csr(L: Labels):
    import scipy.sparse as sp

    C = L.C
    fwd = sp.csr_matrix((np.ones(L.indices.size, dtype=np.int8), L.indices, L.indptr), shape=(C, C))
    bwd = fwd.tocsc()  # column-major: the parents of each component, in one O(m) pass
    return tuple(read_only(a) for a in (bwd.indptr.astype(np.int64), bwd.indices,
                                        np.diff(L.indptr).astype(np.int64)))


def bidirectional_search_numpy(L: Labels, cu: np.ndarray, cv: np.ndarray, sizes: list | None = None):
    """Answers for component pairs that passed the prefilters. Returns (answers, rounds).

    ``sizes``: a list that receives, per round, the frontier entries (both sides) of the queries
    still live after it, summed over all queries (the GPU grid-wide search's trace; the last is 0)."""
    k = cu.size
    found = np.zeros(k, dtype=bool)
    if k == 0:
        return found, 0
    C = L.C
    chunk = max(1, min(k, CHUNK_QUERIES, 8 * VISITED_BYTES // max(2 * C, 1)))
    bitmaps = [np.zeros((chunk * C + 7) // 8, dtype=np.uint8) for _ in range(2)]
    rev = reverse_csr(L)
    rounds = 0
    for q0 in range(0, k, chunk):
        q1 = min(k, q0 + chunk)
        mine = []
        done, r = _chunk(L, rev, cu[q0:q1].astype(np.int64), cv[q0:q1].astype(np.int64), bitmaps, mine)
        if sizes is not None:
            sizes.extend([0] * (len(mine) - len(sizes)))
            for i, x in enumerate(mine):
                sizes[i] += x
        found[q0:q1] = done
        rounds = max(rounds, r)
    return found, rounds


def _enter(bitmap, q, c, C, marked):
    """The (q, c) not yet marked, marked now (sorted by key); returns (q, c)."""
    key = q * C + c
    key = sorted_unique(key[~_test(bitmap, key)])
    _mark(bitmap, key)
    marked.append(key)
    return key // C, key % C


def _chunk(L: Labels, rev, su, tv, bitmaps, sizes):
    nq = su.size
    C, W = L.C, L.W
    fwd_map, bwd_map = bitmaps
    rptr, ridx, outdeg = rev
    indeg = np.diff(rptr)
    lev_u, lev_v = L.level[su], L.level[tv]
    lo_u, hi_u, lo_v, hi_v = L.lo[:, su], L.hi[:, su], L.lo[:, tv], L.hi[:, tv]
    start_u, post_u, post_v = L.start0[su], L.post0[su], L.post0[tv]
    if W:
        m_v = (L.out[:, tv], L.inn[:, tv])
    done = np.zeros(nq, dtype=bool)
    live = np.ones(nq, dtype=bool)
    q0 = np.arange(nq, dtype=np.int64)
    fq, fv = q0, su
    bq, bv = q0.copy(), tv
    marks = ([q0 * C + su], [q0 * C + tv])
    _mark(fwd_map, marks[0][0])
    _mark(bwd_map, marks[1][0])
    r = 0
    while live.any():
        r += 1
        fe = np.bincount(fq, weights=outdeg[fv], minlength=nq)
        be = np.bincount(bq, weights=indeg[bv], minlength=nq)
        go_f = fe <= be
        sel = go_f[fq]
        xq, xv = fq[sel], fv[sel]
        fq, fv = fq[~sel], fv[~sel]
        sel = ~go_f[bq]
        yq, yv = bq[sel], bv[sel]
        bq, bv = bq[~sel], bv[~sel]
        # forward: children of (xq, xv)
        ch, cnt = gather_rows(L.indptr, L.indices, xv)
        q = np.repeat(xq, cnt)
        lv = L.level[ch]
        keep = lv <= lev_v[q]  # v and the backward side's marks have level <= level(v)
        q, ch, lv = q[keep], ch[keep].astype(np.int64), lv[keep]
        hit = _test(bwd_map, q * C + ch)
        done[q[hit]] = True
        keep = ~done[q] & (lv < lev_v[q])
        q, ch = _enter(fwd_map, q[keep], ch[keep], C, marks[0])
        keep = inside(L, ch, lo_v[:, q], hi_v[:, q])
        q, ch = q[keep], ch[keep]
        cut = in_subtree(L, ch, post_v[q])
        if W:
            pos, neg = support_verdict(L, ch, None, (m_v[0][:, q], m_v[1][:, q]))
            cut |= pos & ~neg
            q, ch, cut = q[~neg], ch[~neg], cut[~neg]
        done[q[cut]] = True
        nfq, nfv = q, ch
        # backward: parents of (yq, yv)
        pa, cnt = gather_rows(rptr, ridx, yv)
        q = np.repeat(yq, cnt)
        lp = L.level[pa]
        keep = lp >= lev_u[q]  # u and the forward side's marks have level >= level(u)
        q, pa, lp = q[keep], pa[keep].astype(np.int64), lp[keep]
        hit = _test(fwd_map, q * C + pa)
        done[q[hit]] = True
        keep = ~done[q] & (lp > lev_u[q])
        q, pa = _enter(bwd_map, q[keep], pa[keep], C, marks[1])
        keep = np.ones(q.size, dtype=bool)  # L_p inside L_u in every dimension
        for k in range(L.d):
            keep &= (lo_u[k][q] <= L.lo[k][pa]) & (L.hi[k][pa] <= hi_u[k][q])
        q, pa = q[keep], pa[keep]
        cut = (start_u[q] <= L.post0[pa]) & (L.post0[pa] <= post_u[q])
        if W:
            pos, neg = support_verdict(L, su[q], pa)
            cut |= pos & ~neg
            q, pa, cut = q[~neg], pa[~neg], cut[~neg]
        done[q[cut]] = True
        nbq, nbv = q, pa
        fq, fv = np.concatenate([fq, nfq]), np.concatenate([fv, nfv])
        bq, bv = np.concatenate([bq, nbq]), np.concatenate([bv, nbv])
        # a query ends when answered or when one side has nothing left to expand
        alive_f = np.zeros(nq, dtype=bool)
        alive_f[fq] = True
        alive_b = np.zeros(nq, dtype=bool)
        alive_b[bq] = True
        live = ~done & alive_f & alive_b
        keep = live[fq]
        fq, fv = fq[keep], fv[keep]
        keep = live[bq]
        bq, bv = bq[keep], bv[keep]
        sizes.append(int(fq.size + bq.size))
    for bm, keys in zip(bitmaps, marks):  # leave the bitmaps all-zero for the next chunk
        for key in keys:
            bm[key >> 3] = 0
    return done, r
