"""What a query batch needs and reports: the step codes, :class:`QueryStats` and :class:`Labels`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["STEPS", "UNDECIDED", "SAME", "LEVEL", "INTERVAL", "TREE", "SEARCH_POS", "SEARCH_NEG", "QueryStats", "Labels"]

STEPS = ("same_component", "level_filter", "interval_filter", "tree_cut", "search_positive", "search_negative")
UNDECIDED = 0
# step codes: index in STEPS + 1
SAME, LEVEL, INTERVAL, TREE, SEARCH_POS, SEARCH_NEG = range(1, 7)


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
