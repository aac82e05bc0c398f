"""Queries over a DAG spread over ranks: the prefilter on replicated labels, then a distributed
frontier search for the pairs it leaves open (issue 24). Written once against an array module
``xp`` (NumPy on the CPU backend, CuPy on a GPU backend) and an exchange object (the one of
:mod:`distgrail.stages.partitioned_scc`: ``allreduce``, ``allgather``, ``alltoall``), with no MPI
here; :mod:`distgrail.mpi.partition_query` opens the index and drives it.

What each rank holds: the labels (levels, intervals, DT ranks, support masks, ``comp``: O(n + C
(d + W)), the same on every rank) and only its **row block** of the DAG (:class:`RowBlock`: rows
``r0 .. r1-1``, blocks balanced by edges, :func:`row_bounds`), so no rank holds the DAG's edges.

The search is :func:`~distgrail.query.search.guided_search_numpy`'s, level-synchronous over all
ranks: a frontier entry is a key ``q * C + v`` (query q of the chunk at component v) held by v's
owner. Each round, every rank expands the entries it holds along its rows, applies the same tests
to each child (hit, level, intervals, support masks, DT-subtree cut), marks the queries answered,
and sends the children left to their owners (``alltoall``); each owner drops the keys it has seen
(a per-rank visited set: the key's owner alone ever sees it), and the newly answered queries are
made known to every rank (``allgather``), which drop their entries. The frontiers after every round
are exactly the forward search's, so the answers and the round count are too.

Queries are taken in chunks of :data:`CHUNK_QUERIES` over all ranks (keys, done flags and visited
sets are per chunk). A rank that fails inside a round (out of memory, also when the data it
received goes onto its device) still takes part in the round's exchanges with nothing to send
and reports its failure at the next round's count, so every rank leaves the search at the same
round with no answers: :func:`spread_search` returns the error, and the caller shares it
(:func:`~distgrail.mpi.errors.share_outcome`) instead of any rank waiting. Only the counts' own
exchanges (a few bytes each) are outside this: under ``python -m mpi4py`` a failure there aborts
the job.
"""

from __future__ import annotations

import time

import numpy as np

from ..arrays import csr_positions, to_host, unique
from ..segments import gather_rows
from .prefilter import in_subtree, inside, prefilter, support_verdict
from .stats import SEARCH_NEG, SEARCH_POS, UNDECIDED, Labels, QueryStats

__all__ = ["CHUNK_QUERIES", "EXPAND_EDGES", "expand_limit", "RowBlock", "row_bounds", "spread_search", "answer_spread"]

#: queries (over all ranks) per search chunk
CHUNK_QUERIES = 1 << 16
#: children a rank tests at once in a round (default; on a GPU the driver passes
#: :func:`expand_limit` of its free memory): a larger frontier is expanded in slices of about this
#: many edges (at least one row each), so the search's working memory is bounded whatever the
#: frontier's degree sum. Each slice costs a few dozen kernel launches, so smaller slices slowed
#: the search several times over (docs/benchmarks.md)
EXPAND_EDGES = 1 << 23
#: working bytes of a child in a round: its component, query and target (int64) and the target's
#: d interval bounds (lo, hi: int32)
CHILD_BYTES, CHILD_BYTES_PER_DIM = 24, 8


def expand_limit(free_bytes: int, dims: int) -> int:
    """Children per slice for ``free_bytes`` of device memory: a quarter of it (the rest for the
    routed keys, the visited set and their sorts), at least 2^20."""
    return max(1 << 20, int(free_bytes) // (4 * (CHILD_BYTES + CHILD_BYTES_PER_DIM * int(dims))))


def row_bounds(indptr: np.ndarray, size: int) -> np.ndarray:
    """Row blocks balanced by edges: ``size + 1`` host ints, block j = rows bounds[j] .. bounds[j+1]-1
    (the rows whose edges start before the j-th equal share of the edges)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    C, m = int(indptr.size - 1), int(indptr[-1]) if indptr.size else 0
    share = np.array([(j * m) // size for j in range(1, size)], dtype=np.int64)
    mid = np.searchsorted(indptr[:C], share, side="left") if size > 1 else np.zeros(0, np.int64)
    return np.concatenate(([0], np.minimum(mid, C), [C])).astype(np.int64)


class RowBlock:
    """This rank's rows ``r0 .. r1-1`` of the DAG CSR: ``indptr`` (local offsets from 0, int64) and
    ``indices`` (children, component ids) on the device of ``xp``; ``bounds`` (host, every
    rank's block)."""

    def __init__(self, xp, indptr, indices, bounds, rank: int):
        self.xp = xp
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self.rank, self.size = int(rank), int(self.bounds.size - 1)
        self.r0, self.r1 = int(self.bounds[rank]), int(self.bounds[rank + 1])
        self.indptr = xp.asarray(indptr, dtype=xp.int64)
        self.indices = xp.asarray(indices)
        self._inner = xp.asarray(self.bounds[1:-1])

    def owner(self, v):
        """The rank holding row ``v`` of each component id in ``v``."""
        return self.xp.searchsorted(self._inner, v, side="right")

    def degrees(self, v):
        """Out-degrees of components ``v`` (all in this block)."""
        return self.indptr[v - self.r0 + 1] - self.indptr[v - self.r0]

    def children(self, v):
        """``(children, which)`` of components ``v`` (all in this block), row by row: ``which``
        is the index in ``v`` of each child's parent."""
        rows = v - self.r0
        if self.xp is np:  # by repeats: faster on the CPU than the searches of csr_positions
            ch, cnt = gather_rows(self.indptr, self.indices, rows)
            return ch.astype(np.int64), np.repeat(np.arange(rows.size), cnt)
        pos, which = csr_positions(self.xp, self.indptr, rows, which=True)
        return self.indices[pos].astype(self.xp.int64), which


class _Guard:
    """The first exception of this rank's local steps; later steps are skipped (they return
    their empty value) so that the rank still takes part in every exchange."""

    def __init__(self):
        self.error = None

    def __call__(self, fn, empty, *args):
        if self.error is None:
            try:
                return fn(*args)
            except Exception as e:  # reported at the next count, then shared by the caller
                self.error = e
        return empty

    def exchange(self, fn, empty, *args):
        """An exchange every rank enters, failed or not. An exception out of it (the received
        data put on this rank's device, after the messages) becomes this rank's failure and
        ``empty`` its result, so the rank stays in step with the others."""
        try:
            return fn(*args)
        except Exception as e:
            if self.error is None:
                self.error = e
            return empty


def _route(xp, rows: RowBlock, keys, C: int):
    """``keys`` cut into one part per rank: the owners of their components."""
    owner = rows.owner(keys % C)
    order = xp.argsort(owner)
    keys, owner = keys[order], owner[order]
    ends = to_host(xp.searchsorted(owner, xp.arange(1, rows.size + 1), side="left")).tolist()
    return [keys[a:b] for a, b in zip([0] + ends[:-1], ends)]


def _unseen(xp, keys, visited, done, C: int):
    """The distinct ``keys`` not in ``visited`` (sorted) whose query is not done; and the new visited."""
    keys = unique(xp, keys)
    if visited.size and keys.size:
        pos = xp.minimum(xp.searchsorted(visited, keys), visited.size - 1)
        keys = keys[visited[pos] != keys]
    visited = xp.sort(xp.concatenate((visited, keys))) if keys.size else visited
    return keys[~done[keys // C]], visited


def _slices(xp, deg, limit: int) -> list:
    """``[(a, b), ...]``: consecutive runs of entries whose degrees sum to at most ``limit`` each
    (a run holds at least one entry)."""
    ends = to_host(xp.cumsum(deg)) if deg.size else np.zeros(0, np.int64)
    if not ends.size or ends[-1] <= limit:
        return [(0, int(deg.size))]
    cuts, a = [], 0
    while a < ends.size:
        before = ends[a - 1] if a else 0
        b = max(a + 1, int(np.searchsorted(ends, before + limit, side="right")))
        cuts.append((a, b))
        a = b
    return cuts


def _expand(xp, L: Labels, rows: RowBlock, keys, t, done, limit: int | None = None):
    """One round on this rank's entries: marks ``done`` and returns (children keys left, newly
    done). Entries are expanded in slices of at most ``limit`` children (default
    :data:`EXPAND_EDGES`, read at the call; :func:`_slices`); the
    children kept are filtered by the done flags after the last slice, as in one pass."""
    C, limit = L.C, EXPAND_EDGES if limit is None else limit
    was = done.copy()
    parts = [_expand_part(xp, L, rows, keys[a:b], t, done) for a, b in _slices(xp, rows.degrees(keys % C), limit)]
    nxt = parts[0] if len(parts) == 1 else xp.concatenate(parts)
    return nxt[~done[nxt // C]], xp.flatnonzero(done & ~was)


def _expand_part(xp, L: Labels, rows: RowBlock, keys, t, done):
    """The children keys of ``keys`` that pass every test; marks the queries it answers in ``done``."""
    C = L.C
    q, v = keys // C, keys % C
    ch, which = rows.children(v)
    q = q[which]
    tq = t[q]
    done[q[ch == tq]] = True
    keep = ~done[q] & (L.level[ch] < L.level[tq])
    q, ch, tq = q[keep], ch[keep], tq[keep]
    keep = inside(L, ch, L.lo[:, tq], L.hi[:, tq])
    q, ch, tq = q[keep], ch[keep], tq[keep]
    cut = in_subtree(L, ch, L.post0[tq])
    if L.W:
        pos, neg = support_verdict(L, ch, tq)
        cut |= pos & ~neg
        q, ch, cut = q[~neg], ch[~neg], cut[~neg]
    done[q[cut]] = True
    keep = ~done[q]
    return q[keep] * C + ch[keep]


def _search_chunk(xp, ex, L: Labels, rows: RowBlock, keys, t, sizes, guard: _Guard, expand=None):
    """(done flags of the chunk's queries, rounds, whether a rank failed) of the frontier that
    starts at ``keys``."""
    C, i64 = L.C, xp.int64
    none = xp.zeros(0, dtype=i64)
    done = guard(xp.zeros, xp.zeros(0, dtype=bool), t.size, bool)
    visited = none
    keys = guard.exchange(ex.alltoall, none, guard(_route, [none] * rows.size, xp, rows, keys, C))
    r = 0
    while True:
        keys, visited = guard(_unseen, (none, visited), xp, keys, visited, done, C)
        total, failed = (int(x) for x in to_host(ex.allreduce(xp.asarray([keys.size, guard.error is not None],
                                                                           dtype=i64), "sum")))
        if failed:
            return done, r, True
        if r and sizes is not None:
            sizes.extend([0] * (r - len(sizes)))
            sizes[r - 1] += total
        if total == 0:
            return done, r, False
        r += 1
        nxt, newly = guard(_expand, (none, none), xp, L, rows, keys, t, done, expand)
        keys = guard.exchange(ex.alltoall, none, guard(_route, [none] * rows.size, xp, rows, nxt, C))
        got = guard.exchange(ex.allgather, none, guard(newly.astype, none, i64))
        guard(done.__setitem__, None, got, True)


def _put(found, a: int, b: int, done, q):
    found[a:b] = done[q]


def spread_search(xp, ex, L: Labels, rows: RowBlock, cu, cv, chunk: int = CHUNK_QUERIES, sizes=None, guard=None,
                  expand=None):
    """Collective: the search for this rank's undecided component pairs ``(cu, cv)``. Returns
    ``(found, rounds, error)``: ``found`` (bool, on ``xp``) and ``rounds`` as the forward search
    gives them, ``error`` this rank's exception (None when it did not fail). When any rank failed,
    every rank leaves at the same round and ``found`` is None on every rank (the caller shares
    the error). ``sizes``: a list that receives the frontier size (over all ranks) after each
    round; ``guard``: the caller's :class:`_Guard` when a step before this one may have failed;
    ``expand``: children per slice of a round (default :data:`EXPAND_EDGES`)."""
    i64 = xp.int64
    k = int(cu.size)
    guard = guard or _Guard()
    none = xp.zeros(0, dtype=i64)
    off = np.concatenate(([0], np.cumsum(to_host(ex.allgather(xp.asarray([k], dtype=i64)))))).astype(np.int64)
    me, Q, C = rows.rank, int(off[-1]), int(L.C)
    chunk = max(1, min(int(chunk), (2**62) // max(C, 1)))  # keys q * C + v stay int64
    found = guard(xp.zeros, None, k, bool)
    rounds = 0
    for g0 in range(0, Q, chunk):
        g1 = min(Q, g0 + chunk)
        a, b = (int(min(k, max(0, g - off[me]))) for g in (g0, g1))
        # the chunk's targets in global order (a failed rank sends b - a zeros from the host: the
        # others' targets stay where they expect them until the next count stops every rank)
        mine = guard(lambda: cv[a:b].astype(i64), np.zeros(b - a, np.int64))
        t = guard.exchange(ex.allgather, none, mine)
        q = guard(lambda: xp.arange(a, b, dtype=i64) + int(off[me] - g0), none)
        keys = guard(lambda: q * C + cu[a:b].astype(i64), none)
        done, r, failed = _search_chunk(xp, ex, L, rows, keys, t, sizes, guard, expand)
        if failed:  # every rank leaves here, at the same round
            break
        guard(_put, None, found, a, b, done, q)
        rounds = max(rounds, r)
    # the last step may have failed after the last count: one more, so that every rank knows
    failed = int(to_host(ex.allreduce(xp.asarray([guard.error is not None], dtype=i64), "sum"))[0])
    return (None if failed else found), rounds, guard.error


def answer_spread(xp, ex, L: Labels, rows: RowBlock, sources, targets, stats: QueryStats | None = None,
                  chunk: int = CHUNK_QUERIES, sizes=None, expand=None):
    """Collective: ``(answers, error)`` for this rank's pairs of vertex ids: host bool answers and
    None; or, when any rank failed, None and this rank's exception (None on the ranks that did not
    fail) on every rank: every rank returns, and the caller shares the error.
    ``sizes``, ``expand``: as :func:`spread_search`'s."""
    t0 = time.perf_counter()
    guard, none = _Guard(), xp.zeros(0, dtype=xp.int64)

    def pre():
        cu, cv = L.comp[xp.asarray(sources)], L.comp[xp.asarray(targets)]
        ans, code = prefilter(L, cu, cv)
        return cu, cv, ans, code, xp.flatnonzero(code == UNDECIDED)

    cu, cv, ans, code, und = guard(pre, (none, none, None, None, none))
    found, rounds, error = spread_search(xp, ex, L, rows, cu[und], cv[und], chunk, sizes, guard, expand)
    if found is None:  # this rank or another failed: no answers anywhere
        return None, error
    ans[und] = found
    code[und] = xp.where(found, SEARCH_POS, SEARCH_NEG).astype(code.dtype)
    if stats is not None:
        host = to_host(code)
        stats.queries += int(host.size)
        stats.reachable += int(to_host(ans).sum())
        stats.add_codes(host)
        stats.search_rounds = max(stats.search_rounds, rounds)
        stats.seconds += time.perf_counter() - t0
    return to_host(ans).astype(bool, copy=False), error
