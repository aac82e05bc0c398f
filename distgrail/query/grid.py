"""The grid-wide search on the GPU: the hard queries that the one-warp search (``dg_search``)
handed on, searched bidirectionally by all threads of the GPU at once (the ``dg_grid_*`` kernels
in ``kernels/search.cu``).

Each query grows, round by round, a forward side from u (forward CSR) and a backward side from v
(the reverse CSR, built on the GPU once per context), always the side whose frontier has the fewer
edges; the sides meeting, a DT-subtree cut or a support cut answers it, a side running empty
proves it unreachable. Every round is two launches over the (query, side, vertex) frontier
entries of a whole group of hard queries: ``dg_grid_expand`` (one warp per entry, lanes over its
edges, one visited bitmap per query and side with atomic test-and-set, next frontier appended
with atomics, entries and edges counted per query and side) and ``dg_grid_compact`` (drops the
entries of ended queries). The frontiers are those of the NumPy twin,
:func:`distgrail.query.bidir.bidirectional_search_numpy` (``sizes`` there gives the per-round
totals that :meth:`GridSearch.run` returns with ``trace=True``), so answers, step counts and the
round count of these queries equal the CPU's.

Why bidirectional: on dense DAGs the hard queries are the ones whose forward search is long;
growing the smaller side meets in the middle and ends a negative query as soon as the smaller
side is exhausted.

Memory is bounded: :func:`plan_grid` sizes the groups from the number of components C and a
byte budget (two bitmaps of C bits per query of a group, two frontier lists of ``cap`` entries,
``cap >= 2 C`` so that one query always fits). A group whose frontier outgrows ``cap`` is redone
in halves (:func:`run_groups`), down to groups of one query, which cannot outgrow it.
"""

from __future__ import annotations

import numpy as np

from ..errors import BackendError
from ..gpu.kernels import load_module

__all__ = ["plan_grid", "run_groups", "GridSearch", "GRID_BYTES", "GRID_MAX_BYTES", "ROUND_BATCH", "GRID_BLOCK"]

#: least bytes of the grid-wide search's scratch (bitmaps + frontier lists; at least what one query needs)
GRID_BYTES = 1 << 30
#: the scratch grows to a quarter of the free GPU memory, up to this many bytes: bigger groups,
#: fewer rounds of launches (a large random batch on a dense DAG hands hundreds of thousands of
#: queries to this search: docs/benchmarks.md)
GRID_MAX_BYTES = 16 << 30
#: rounds launched between two looks at the frontier size (launches after the end change nothing)
ROUND_BATCH = 8
#: threads per block of the grid kernels
GRID_BLOCK = 256

#: bytes per frontier entry: (code, vertex) int32 in the frontier and in the raw next frontier
_ENTRY_BYTES = 16
#: bytes per query besides its bitmaps: done flag + two sets of four u64 counters
_QUERY_BYTES = 1 + 2 * 4 * 8


def bitmap_words(C: int) -> int:
    """uint32 words of one query's visited bitmap (C bits, one spare word)."""
    return (C + 31) // 32 + 1


def plan_grid(C: int, nhard: int, budget: int = GRID_BYTES) -> tuple[int, int]:
    """(queries per group, frontier entries per list) for ``nhard`` hard queries on C components.

    Half the budget goes to the frontier lists, the rest to two bitmaps (forward, backward) and
    the counters per query of a group; the lists always hold at least 2 C entries (one query's
    whole search: each side holds a vertex at most once) and at most what ``nhard`` queries can
    need (``2 nhard C``); a group holds at least one query."""
    if C < 1 or nhard < 1:
        raise ValueError(f"plan_grid needs C >= 1 and nhard >= 1, got C={C}, nhard={nhard}")
    qbytes = 2 * 4 * bitmap_words(C) + _QUERY_BYTES
    cap = max(2 * C, min(budget // 2 // _ENTRY_BYTES, 2 * nhard * C))
    group = max(1, min(nhard, (budget - cap * _ENTRY_BYTES) // qbytes, 2**31 - 1))
    return int(group), int(cap)


def run_groups(n: int, group: int, run) -> list[int]:
    """Search queries ``0..n-1`` in consecutive groups of at most ``group``: ``run(start, count)``
    returns False when that group's frontier outgrew its lists; the group is then retried with
    half the size, and later groups keep the smaller size. Returns the sizes of the groups run."""
    done = []
    s = 0
    while s < n:
        m = min(group, n - s)
        if run(s, m):
            done.append(m)
            s += m
            continue
        if m == 1:
            raise BackendError("grid-wide search: one query outgrew a frontier list of C entries (cannot happen)")
        group = m // 2
    return done


class GridSearch:
    """Scratch and kernels of the grid-wide search for one :class:`~distgrail.query.answer.QueryScratch`
    (``ctx``: its labels' arrays, counters and device facts); made on the query's device."""

    def __init__(self, ctx, budget: int | None = None):
        self.ctx = ctx
        if budget is None:
            free = int(ctx.cp.cuda.runtime.memGetInfo()[0])
            budget = max(GRID_BYTES, min(free // 4, GRID_MAX_BYTES))
        self.budget = budget
        mod = load_module("search", ctx.cp.cuda.Device().id)  # pass 2 of the search stage: dg_grid_* of search.cu
        self.k_seed, self.k_expand, self.k_compact, self.k_finish = (
            mod.get_function(f"dg_grid_{k}") for k in ("seed", "expand", "compact", "finish"))
        self.vwords = bitmap_words(ctx.C)
        self.group = self.cap = 0
        self.rindptr = self.rindices = None

    def reverse(self):
        """The reverse CSR (parents of each component) on the device: built once per labels
        (``dg_cond_transpose``, the condensation's transpose; rows in no particular order) under
        the lock of :attr:`Labels.reverse <distgrail.query.stats.Labels.reverse>`, and finished
        before it is shared (other batches read it from other streams)."""
        if self.rindptr is None:
            self.rindptr, self.rindices = self.ctx.labels.reverse.get(self._transpose)
        return self.rindptr, self.rindices

    def _transpose(self):
        from ..stages.scc import CudaSteps

        ctx = self.ctx
        rev = CudaSteps().transpose(ctx.indptr, ctx.indices, ctx.C)
        ctx.cp.cuda.get_current_stream().synchronize()
        return rev

    def _scratch(self, nhard: int):
        cp = self.ctx.cp
        group, cap = plan_grid(self.ctx.C, nhard, self.budget)
        if group > self.group or cap > self.cap:
            group, cap = max(group, self.group), max(cap, self.cap)
            self.visited = cp.empty(2 * group * self.vwords, dtype=cp.uint32)
            self.fq, self.fv, self.nq, self.nv = (cp.empty(cap, dtype=cp.int32) for _ in range(4))
            self.done = cp.empty(group, dtype=cp.uint8)
            self.counts = cp.empty((2, 4 * group), dtype=cp.uint64)  # cur / nxt counter sets
            self.fcnt = cp.zeros(3, dtype=cp.uint64)
            self.gstate = cp.zeros(2, dtype=cp.uint64)
            self.group, self.cap = group, cap
        return plan_grid(self.ctx.C, nhard, self.budget)[0]

    def run(self, hard, nhard: int, answers, stream, trace: bool = False):
        """Answer the ``nhard`` items of ``hard`` ((k, 4) int32 on the device); counts go to the
        context's counters. With ``trace``: per-round frontier sizes, summed over the groups."""
        if nhard <= 0:
            return []
        self.reverse()
        group = self._scratch(nhard)
        sizes: list[int] = []
        run = lambda s, m: self._group(hard, s, m, answers, stream, trace, sizes)  # noqa: E731
        run_groups(nhard, group, run)
        return sizes

    def _group(self, hard, g0, m, answers, stream, trace, sizes):
        ctx = self.ctx
        i32, i64 = np.int32, np.int64
        grid = max(1, ctx.sms * 8)
        gs = i64(self.group)
        cur, nxt = self.counts[0], self.counts[1]
        with stream:
            self.visited[:2 * m * self.vwords].fill(0)
            a, b, c = 0, 1, 2
            self.k_seed((-(-m // GRID_BLOCK),), (GRID_BLOCK,),
                        (hard, i64(g0), i32(m), self.fq, self.fv, self.visited, i64(self.vwords), self.done,
                         self.fcnt, i32(a), self.gstate, ctx.indptr, self.rindptr, cur, nxt, gs))
            mine: list[int] = []
            while True:
                for _ in range(1 if trace else ROUND_BATCH):
                    self.k_expand((grid,), (GRID_BLOCK,),
                                  (hard, i64(g0), self.fq, self.fv, self.nq, self.nv, i64(self.cap), self.fcnt,
                                   i32(a), i32(b), i32(c), ctx.indptr, ctx.indices, self.rindptr, self.rindices,
                                   ctx.rec, i32(ctx.R), i32(ctx.d), i32(ctx.W), self.visited, i64(self.vwords),
                                   self.done, self.gstate, cur, nxt, gs))
                    self.k_compact((grid,), (GRID_BLOCK,),
                                   (self.nq, self.nv, i64(self.cap), self.fq, self.fv, self.fcnt, i32(a), i32(b),
                                    i32(c), self.done, nxt, cur, gs, i32(m)))
                    a, b, c = c, a, b
                    cur, nxt = nxt, cur
                fc = self.fcnt.get(stream=stream)
                state = self.gstate.get(stream=stream)
                if state[1]:
                    return False  # a frontier list overflowed: the caller splits the group
                if trace and int(state[0]) > len(mine):
                    mine.append(int(fc[a]))
                if fc[a] == 0:
                    break
            self.k_finish((-(-m // GRID_BLOCK),), (GRID_BLOCK,),
                          (hard, i64(g0), i32(m), self.done, answers, self.gstate, ctx.counters))
        for r, k in enumerate(mine):
            if r < len(sizes):
                sizes[r] += k
            else:
                sizes.append(k)
        return True
