"""Queries: prefilters (steps 1–4) and the guided multi-query search (step 5).

For a pair (u, v) mapped to components (cu, cv):

1. ``same_component``  cu == cv                               → reachable
2. ``level_filter``    level(cu) >= level(cv)                   → not reachable
3. ``interval_filter`` L_cv ⊄ L_cu in some dimension            → not reachable
4. ``tree_cut``        cv in cu's DT subtree (dimension 0)      → reachable
5. ``search``          all undecided pairs at once, as a frontier of (query, vertex) pairs;
   a child c is entered only if level(c) < level(cv) and L_cv ⊆ L_c; hitting cv, or a c whose
   DT subtree holds cv, answers the query, which then leaves the frontier. Per-query visited
   marks keep any vertex from being expanded twice for the same query.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .condense import gather_rows
from .segments import sorted_unique

__all__ = ["STEPS", "QueryStats", "Labels", "prefilter", "guided_search_numpy", "answer_batch_numpy"]

STEPS = ("same_component", "level_filter", "interval_filter", "tree_cut", "search_positive", "search_negative")
UNDECIDED = 0
# step codes: index in STEPS + 1
SAME, LEVEL, INTERVAL, TREE, SEARCH_POS, SEARCH_NEG = range(1, 7)

#: upper bound on the visited bitmap of one search chunk (bytes)
VISITED_BYTES = 1 << 26


@dataclass
class QueryStats:
    """What a batch of queries cost and how each was decided."""

    queries: int = 0
    reachable: int = 0
    steps: dict = field(default_factory=lambda: {s: 0 for s in STEPS})
    search_rounds: int = 0
    seconds: float = 0.0
    backend: str = "cpu"
    ranks: int = 1

    def add_codes(self, codes: np.ndarray):
        counts = np.bincount(codes, minlength=len(STEPS) + 1)
        for i, s in enumerate(STEPS):
            self.steps[s] += int(counts[i + 1])

    def merge(self, other: "QueryStats") -> "QueryStats":
        out = QueryStats(backend=self.backend, ranks=self.ranks)
        out.queries = self.queries + other.queries
        out.reachable = self.reachable + other.reachable
        out.steps = {s: self.steps[s] + other.steps[s] for s in STEPS}
        out.search_rounds = max(self.search_rounds, other.search_rounds)
        out.seconds = max(self.seconds, other.seconds)
        return out

    @property
    def queries_per_second(self) -> float:
        return self.queries / self.seconds if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict:
        return {
            "queries": self.queries,
            "reachable": self.reachable,
            "steps": dict(self.steps),
            "search_rounds": self.search_rounds,
            "seconds": self.seconds,
            "queries_per_second": self.queries_per_second,
            "backend": self.backend,
            "ranks": self.ranks,
        }

    def summary(self) -> str:
        lines = [
            f"queries            {self.queries:,}",
            f"reachable          {self.reachable:,}",
        ]
        for s in STEPS:
            lines.append(f"  {s:<17}{self.steps[s]:,}")
        lines.append(f"search rounds      {self.search_rounds}")
        lines.append(f"time               {self.seconds * 1e3:.2f} ms ({self.queries_per_second:,.0f} queries/s, "
                     f"{self.backend}, {self.ranks} rank{'s' if self.ranks != 1 else ''})")
        return "\n".join(lines)


@dataclass
class Labels:
    """The query-time view of an index (on one backend's device)."""

    comp: object  # (n,) component of each vertex
    level: object  # (C,)
    lo: object  # (d, C) interval minima
    hi: object  # (d, C) interval maxima
    post0: object  # (C,) DT post-order rank, dimension 0
    start0: object  # (C,) first rank of the DT subtree, dimension 0
    indptr: object
    indices: object
    #: per-backend derived data (the GPU query context keeps its packed records here)
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def C(self) -> int:
        return int(self.level.shape[0])


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


def answer_batch_numpy(L: Labels, sources: np.ndarray, targets: np.ndarray, stats: QueryStats | None = None):
    """All five steps on the CPU for original vertex ids; returns bool answers."""
    t0 = time.perf_counter()
    cu = L.comp[sources]
    cv = L.comp[targets]
    ans, code = prefilter(L, cu, cv)
    und = np.flatnonzero(code == UNDECIDED)
    found, rounds = guided_search_numpy(L, cu[und], cv[und])
    ans[und] = found
    code[und] = np.where(found, SEARCH_POS, SEARCH_NEG)
    if stats is not None:
        stats.queries += int(sources.size)
        stats.reachable += int(np.count_nonzero(ans))
        stats.add_codes(code)
        stats.search_rounds = max(stats.search_rounds, rounds)
        stats.seconds += time.perf_counter() - t0
    return ans
