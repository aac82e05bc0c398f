"""The compiled walks of :mod:`distgrail.stages.insertion_rows` (numba, one thread): the insertion
sweep with every component id kept, over an index's own arrays, visiting only the components the
new edges reach.

The arrays are the index's as read (stored types, written in place: levels, intervals, masks);
per component one ``flag`` word (uint16, made by ``np.zeros``, so the pages of components never
visited are never touched) carries what the walks learn:

====  ========================================================================
bit   meaning
====  ========================================================================
1     reached forward from a head, under the highest tail's level (cycles)
2     reaches a tail inside those (cycles; with 1: a candidate for a merge)
4     in a merged group (its representative included)
8     its DAG row is written again (``rw_rows``)
16    in the next front of the running sweep
32    changed by the downward sweep (level or ``in`` mask)
64    changed by the upward sweep (intervals or ``out`` mask)
128   the tail of a new edge
256   the head of a new edge
====  ========================================================================

Each lookup into a small sorted table (merged members, written rows, new edges) is a binary
search made only when the flag says the component is in it. The sweeps settle to the same
values as :func:`distgrail.stages.insertion.sweep_insertions` (each is the least fixpoint of a
monotone push along the DAG), which the tests compare array for array.
"""

from __future__ import annotations

import numpy as np

from ..jit import njit

__all__ = ["forward_under", "backward_inside", "down_sweep", "up_sweep", "push_down", "push_up", "dead_vertices",
           "down_produce", "down_consume", "up_produce", "up_consume", "reverse_count", "reverse_fill",
           "F_FWD", "F_BACK", "F_MEMBER", "F_ROW", "F_NEXT", "F_DOWN", "F_UP", "F_TAIL", "F_HEAD"]

F_FWD, F_BACK, F_MEMBER, F_ROW, F_NEXT, F_DOWN, F_UP, F_TAIL, F_HEAD = 1, 2, 4, 8, 16, 32, 64, 128, 256


@njit(nogil=True)
def _grow(buf, n):
    """``buf`` with room for one more entry after its first ``n``."""
    if n < buf.size:
        return buf
    out = np.empty(max(16, 2 * buf.size), dtype=buf.dtype)
    out[:n] = buf[:n]
    return out


@njit(nogil=True)
def _find(keys, x):
    """Position of ``x`` in sorted ``keys`` (it is there)."""
    return np.searchsorted(keys, x)


@njit(nogil=True)
def _rep(c, flag, mem, rep):
    """The representative of component ``c`` (itself unless merged)."""
    if flag[c] & F_MEMBER:
        return rep[_find(mem, c)]
    return c


@njit(nogil=True)
def forward_under(ip, ix, level, top, tail_a, tail_b, heads, flag):
    """Mark (bit 1) every component reached from ``heads`` along old edges and new edges
    (``tail_a[i] -> tail_b[i]``, sorted by tail) whose level is at most ``top``; returns them."""
    seen = np.empty(max(16, 2 * heads.size), dtype=np.int64)
    n = 0
    for h in heads:
        if not flag[h] & F_FWD:
            flag[h] |= F_FWD
            seen = _grow(seen, n)
            seen[n] = h
            n += 1
    i = 0
    while i < n:
        c = seen[i]
        i += 1
        for j in range(ip[c], ip[c + 1]):
            x = np.int64(ix[j])
            if level[x] <= top and not flag[x] & F_FWD:
                flag[x] |= F_FWD
                seen = _grow(seen, n)
                seen[n] = x
                n += 1
        if flag[c] & F_TAIL:
            k = np.searchsorted(tail_a, c)
            while k < tail_a.size and tail_a[k] == c:
                x = tail_b[k]
                k += 1
                if level[x] <= top and not flag[x] & F_FWD:
                    flag[x] |= F_FWD
                    seen = _grow(seen, n)
                    seen[n] = x
                    n += 1
    return seen[:n]


@njit(nogil=True)
def backward_inside(rip, rix, head_b, head_a, tails, flag):
    """Mark (bit 2) every component marked forward that reaches one of ``tails`` along old edges
    and new ones (``head_a[i] -> head_b[i]``, sorted by head); returns them."""
    seen = np.empty(max(16, 2 * tails.size), dtype=np.int64)
    n = 0
    for t in tails:
        if flag[t] & F_FWD and not flag[t] & F_BACK:
            flag[t] |= F_BACK
            seen = _grow(seen, n)
            seen[n] = t
            n += 1
    i = 0
    while i < n:
        c = seen[i]
        i += 1
        for j in range(rip[c], rip[c + 1]):
            x = np.int64(rix[j])
            if flag[x] & F_FWD and not flag[x] & F_BACK:
                flag[x] |= F_BACK
                seen = _grow(seen, n)
                seen[n] = x
                n += 1
        if flag[c] & F_HEAD:
            k = np.searchsorted(head_b, c)
            while k < head_b.size and head_b[k] == c:
                x = head_a[k]
                k += 1
                if flag[x] & F_FWD and not flag[x] & F_BACK:
                    flag[x] |= F_BACK
                    seen = _grow(seen, n)
                    seen[n] = x
                    n += 1
    return seen[:n]


@njit(nogil=True)
def _down_one(c, x, level, inn, top):
    """``level[x] >= level[c] + 1`` and ``inn[x] |= inn[c]``: whether ``x`` changed (-1: the
    level passes ``top``, the largest its type holds)."""
    moved = 0
    up = np.int64(level[c]) + 1
    if up > np.int64(level[x]):
        if up > top:
            return -1
        level[x] = up
        moved = 1
    for w in range(inn.shape[1]):
        v = inn[x, w] | inn[c, w]
        if v != inn[x, w]:
            inn[x, w] = v
            moved = 1
    return moved


@njit(nogil=True)
def _up_one(c, p, lo, hi, out):
    """``p``'s intervals widened to hold ``c``'s and ``out[p] |= out[c]``: whether ``p`` changed."""
    moved = 0
    for k in range(lo.shape[0]):
        if lo[k, c] < lo[k, p]:
            lo[k, p] = lo[k, c]
            moved = 1
        if hi[k, c] > hi[k, p]:
            hi[k, p] = hi[k, c]
            moved = 1
    for w in range(out.shape[1]):
        v = out[p, w] | out[c, w]
        if v != out[p, w]:
            out[p, w] = v
            moved = 1
    return moved


@njit(nogil=True)
def _mark(x, bit, flag, front, nf, changed, nc):
    """``x`` into the next front (once) and the changed rows (once); the new counts."""
    if not flag[x] & bit:
        flag[x] |= bit
        changed[nc] = x
        nc += 1
    if not flag[x] & F_NEXT:
        flag[x] |= F_NEXT
        front[nf] = x
        nf += 1
    return nf, nc


@njit(nogil=True)
def _marked(x, bit, flag, nxt, nn, changed, nc):
    """:func:`_mark` into growing lists: ``x`` into the next front ``nxt`` (once) and the changed
    rows (once, by the sweep's ``bit``); ``(nxt, nn, changed, nc)``, grown where full."""
    if not flag[x] & bit:
        flag[x] |= bit
        changed = _grow(changed, nc)
        changed[nc] = x
        nc += 1
    if not flag[x] & F_NEXT:
        flag[x] |= F_NEXT
        nxt = _grow(nxt, nn)
        nxt[nn] = x
        nn += 1
    return nxt, nn, changed, nc


@njit(nogil=True)
def push_down(pa, pb, level, inn, top, flag, front, changed):
    """The new edges' own push (``pb`` takes from ``pa``, mapped ids): (front size, changed
    count), or (-1, 0) when a level passes ``top``. ``front``/``changed`` hold ``pa.size``."""
    nf = nc = 0
    for i in range(pa.size):
        if pa[i] == pb[i]:
            continue
        r = _down_one(pa[i], pb[i], level, inn, top)
        if r < 0:
            return -1, 0
        if r:
            nf, nc = _mark(pb[i], F_DOWN, flag, front, nf, changed, nc)
    return nf, nc


@njit(nogil=True)
def push_up(pa, pb, lo, hi, out, flag, front, changed):
    """The new edges' own push upward (``pa`` takes from ``pb``): (front size, changed count)."""
    nf = nc = 0
    for i in range(pa.size):
        if pa[i] != pb[i] and _up_one(pb[i], pa[i], lo, hi, out):
            nf, nc = _mark(pa[i], F_UP, flag, front, nf, changed, nc)
    return nf, nc


@njit(nogil=True)
def down_sweep(front, ip, ix, rw_rows, rw_ptr, rw_idx, level, inn, top, flag, changed, nc, limit):
    """Levels and ``in`` masks pushed from ``front`` to children (rows of ``rw_rows`` as written
    again, others as stored) until nothing changes or a front holds more than ``limit``: (rounds,
    pushes, changed count, changed, the front left), rounds -1 when a level passes ``top``.
    ``changed`` grows as needed."""
    rounds = pushes = 0
    cur = front.copy()
    ncur = cur.size
    for i in range(ncur):
        flag[cur[i]] &= ~F_NEXT
    nxt = np.empty(16, dtype=np.int64)
    while ncur:
        rounds += 1
        nn = 0
        for i in range(ncur):
            c = cur[i]
            if flag[c] & F_ROW:
                r = _find(rw_rows, c)
                a, b, src = rw_ptr[r], rw_ptr[r + 1], 1
            else:
                a, b, src = ip[c], ip[c + 1], 0
            for j in range(a, b):
                x = np.int64(rw_idx[j]) if src else np.int64(ix[j])
                if x == c:
                    continue
                pushes += 1
                moved = _down_one(c, x, level, inn, top)
                if moved < 0:
                    return -1, pushes, nc, changed, cur[:0]
                if moved:
                    nxt, nn, changed, nc = _marked(x, F_DOWN, flag, nxt, nn, changed, nc)
        for i in range(nn):
            flag[nxt[i]] &= ~F_NEXT
        cur, nxt, ncur = nxt, cur, nn
        if ncur > limit:
            return rounds, pushes, nc, changed, cur[:ncur].copy()
    return rounds, pushes, nc, changed, cur[:0]


@njit(nogil=True)
def up_sweep(front, rip, rix, mem, rep, by_rep, mem_of, head_b, head_a, lo, hi, out, flag, changed, nc, limit):
    """Intervals and ``out`` masks pushed from ``front`` to parents (a representative's parents
    are its members' too; parents by the old edges and the new ones, mapped to representatives)
    until nothing changes or a front holds more than ``limit``: (rounds, pushes, changed count,
    changed, the front left)."""
    rounds = pushes = 0
    cur = front.copy()
    ncur = cur.size
    for i in range(ncur):
        flag[cur[i]] &= ~F_NEXT
    nxt = np.empty(16, dtype=np.int64)
    while ncur:
        rounds += 1
        nn = 0
        for i in range(ncur):
            c = cur[i]
            g0 = g1 = 0
            if flag[c] & F_MEMBER:  # c is a representative (no front holds a dead member)
                g0 = np.searchsorted(by_rep, c)
                g1 = np.searchsorted(by_rep, c, side="right")
            for g in range(g0 - 1, g1):
                x = c if g < g0 else mem_of[g]
                if g >= g0 and x == c:
                    continue
                for j in range(rip[x], rip[x + 1]):
                    p = _rep(np.int64(rix[j]), flag, mem, rep)
                    if p == c:
                        continue
                    pushes += 1
                    if _up_one(c, p, lo, hi, out):
                        nxt, nn, changed, nc = _marked(p, F_UP, flag, nxt, nn, changed, nc)
                if flag[x] & F_HEAD:
                    k = np.searchsorted(head_b, x)
                    while k < head_b.size and head_b[k] == x:
                        p = _rep(head_a[k], flag, mem, rep)
                        k += 1
                        if p == c:
                            continue
                        pushes += 1
                        if _up_one(c, p, lo, hi, out):
                            nxt, nn, changed, nc = _marked(p, F_UP, flag, nxt, nn, changed, nc)
        for i in range(nn):
            flag[nxt[i]] &= ~F_NEXT
        cur, nxt, ncur = nxt, cur, nn
        if ncur > limit:
            return rounds, pushes, nc, changed, cur[:ncur].copy()
    return rounds, pushes, nc, changed, cur[:0]


@njit(nogil=True)
def dead_vertices(comp, flag, mem, rep, lo_v, hi_v):
    """The vertices ``lo_v .. hi_v - 1`` whose component was merged away (sorted)."""
    out = np.empty(16, dtype=np.int64)
    n = 0
    for v in range(lo_v, hi_v):
        c = np.int64(comp[v])
        if flag[c] & F_MEMBER and rep[_find(mem, c)] != c:
            out = _grow(out, n)
            out[n] = v
            n += 1
    return out[:n]


# -- the same sweeps a round at a time over threads (large fronts) ----------------------------
# A round: each producer thread takes a slice of the front, copies its components' values
# (the snapshot: what this round pushes, whatever owners write meanwhile) and lists every push as
# (target, slot in the front), grouped by the target's owner thread; then each owner applies the
# pushes to the targets it owns (blocks of 2^OWNER_SHIFT ids dealt round-robin), the only thread
# that writes them: no atomics, no lost update. Owners mark what changed and the next front.

OWNER_SHIFT = 12


@njit(nogil=True)
def _owner(x, T):
    return (x >> OWNER_SHIFT) % T


@njit(nogil=True)
def _bucketed(cnt, T):
    """Exclusive offsets (T + 1) of per-owner counts."""
    off = np.zeros(T + 1, np.int64)
    for o in range(T):
        off[o + 1] = off[o] + cnt[o]
    return off


@njit(nogil=True)
def down_produce(R, i0, i1, ip, ix, rw_rows, rw_ptr, rw_idx, flag, level, inn, snap_l, snap_m, T):
    """Producer of a downward round over ``R[i0:i1]``: (targets, slots, offsets by owner)."""
    cnt = np.zeros(T, np.int64)
    for i in range(i0, i1):
        c = R[i]
        flag[c] &= ~F_NEXT
        snap_l[i] = level[c]
        for w in range(inn.shape[1]):
            snap_m[i, w] = inn[c, w]
        if flag[c] & F_ROW:
            r = _find(rw_rows, c)
            for j in range(rw_ptr[r], rw_ptr[r + 1]):
                x = np.int64(rw_idx[j])
                if x != c:
                    cnt[_owner(x, T)] += 1
        else:
            for j in range(ip[c], ip[c + 1]):
                x = np.int64(ix[j])
                if x != c:
                    cnt[_owner(x, T)] += 1
    off = _bucketed(cnt, T)
    pos = off[:T].copy()
    tgt = np.empty(off[T], np.int64)
    slot = np.empty(off[T], np.int64)
    for i in range(i0, i1):
        c = R[i]
        if flag[c] & F_ROW:
            r = _find(rw_rows, c)
            a, b, src = rw_ptr[r], rw_ptr[r + 1], 1
        else:
            a, b, src = ip[c], ip[c + 1], 0
        for j in range(a, b):
            x = np.int64(rw_idx[j]) if src else np.int64(ix[j])
            if x != c:
                o = _owner(x, T)
                tgt[pos[o]] = x
                slot[pos[o]] = i
                pos[o] += 1
    return tgt, slot, off


@njit(nogil=True)
def down_consume(tgt, slot, a, b, snap_l, snap_m, level, inn, top, flag, nxt, nn, changed, nc):
    """An owner's pushes ``tgt[a:b]`` of one producer: (next count, changed count, next,
    changed), next count -1 when a level passes ``top``."""
    for e in range(a, b):
        x, i = tgt[e], slot[e]
        moved = 0
        up = np.int64(snap_l[i]) + 1
        if up > np.int64(level[x]):
            if up > top:
                return -1, nc, nxt, changed
            level[x] = up
            moved = 1
        for w in range(inn.shape[1]):
            v = inn[x, w] | snap_m[i, w]
            if v != inn[x, w]:
                inn[x, w] = v
                moved = 1
        if moved:
            nxt, nn, changed, nc = _marked(x, F_DOWN, flag, nxt, nn, changed, nc)
    return nn, nc, nxt, changed


@njit(nogil=True)
def _up_push(p, c, i, T, phase, cnt, pos, tgt, slot):
    """One upward push of :func:`up_produce` from its ``i``-th component ``c`` to the parent ``p``
    (none to ``c`` itself): counted for ``p``'s owner in phase 0, written at the owner's next
    place in phase 1. The parents over the DAG rows and over the new edges take this same step."""
    if p == c:
        return
    o = _owner(p, T)
    if phase == 0:
        cnt[o] += 1
    else:
        tgt[pos[o]] = p
        slot[pos[o]] = i
        pos[o] += 1


@njit(nogil=True)
def up_produce(R, i0, i1, rip, rix, mem, rep, by_rep, mem_of, head_b, head_a, flag, lo, hi, out, snap_lo, snap_hi,
               snap_o, T):
    """Producer of an upward round over ``R[i0:i1]``: (targets, slots, offsets by owner)."""
    cnt = np.zeros(T, np.int64)
    pos = tgt = slot = np.empty(0, np.int64)  # (made in phase 1; phase 0 only counts)
    for phase in range(2):
        if phase == 1:
            off = _bucketed(cnt, T)
            pos = off[:T].copy()
            tgt = np.empty(off[T], np.int64)
            slot = np.empty(off[T], np.int64)
        for i in range(i0, i1):
            c = R[i]
            if phase == 0:
                flag[c] &= ~F_NEXT
                for k in range(lo.shape[0]):
                    snap_lo[i, k] = lo[k, c]
                    snap_hi[i, k] = hi[k, c]
                for w in range(out.shape[1]):
                    snap_o[i, w] = out[c, w]
            g0 = g1 = 0
            if flag[c] & F_MEMBER:
                g0 = np.searchsorted(by_rep, c)
                g1 = np.searchsorted(by_rep, c, side="right")
            for g in range(g0 - 1, g1):
                x = c if g < g0 else mem_of[g]
                if g >= g0 and x == c:
                    continue
                for j in range(rip[x], rip[x + 1]):
                    _up_push(_rep(np.int64(rix[j]), flag, mem, rep), c, i, T, phase, cnt, pos, tgt, slot)
                if flag[x] & F_HEAD:
                    k = np.searchsorted(head_b, x)
                    while k < head_b.size and head_b[k] == x:
                        _up_push(_rep(head_a[k], flag, mem, rep), c, i, T, phase, cnt, pos, tgt, slot)
                        k += 1
    return tgt, slot, off


@njit(nogil=True)
def up_consume(tgt, slot, a, b, snap_lo, snap_hi, snap_o, lo, hi, out, flag, nxt, nn, changed, nc):
    """An owner's upward pushes ``tgt[a:b]`` of one producer: (next count, changed count, next,
    changed)."""
    for e in range(a, b):
        p, i = tgt[e], slot[e]
        moved = 0
        for k in range(lo.shape[0]):
            if snap_lo[i, k] < lo[k, p]:
                lo[k, p] = snap_lo[i, k]
                moved = 1
            if snap_hi[i, k] > hi[k, p]:
                hi[k, p] = snap_hi[i, k]
                moved = 1
        for w in range(out.shape[1]):
            v = out[p, w] | snap_o[i, w]
            if v != out[p, w]:
                out[p, w] = v
                moved = 1
        if moved:
            nxt, nn, changed, nc = _marked(p, F_UP, flag, nxt, nn, changed, nc)
    return nn, nc, nxt, changed


@njit(nogil=True)
def reverse_count(ix, a, b, lo_c, hi_c, cnt):
    """Parents per component ``lo_c .. hi_c - 1`` among the entries ``ix[a:b]`` (added to ``cnt``,
    indexed from ``lo_c``)."""
    for j in range(a, b):
        x = np.int64(ix[j])
        if lo_c <= x < hi_c:
            cnt[x - lo_c] += 1


@njit(nogil=True)
def reverse_fill(ip, ix, lo_c, hi_c, rptr, ridx):
    """The parents of components ``lo_c .. hi_c - 1`` into ``ridx`` at ``rptr`` (rows in order:
    each component's parents ascending, as a CSC transpose gives)."""
    pos = rptr[lo_c:hi_c].copy()
    C = ip.size - 1
    for r in range(C):
        for j in range(ip[r], ip[r + 1]):
            x = np.int64(ix[j])
            if lo_c <= x < hi_c:
                ridx[pos[x - lo_c]] = r
                pos[x - lo_c] += 1
