"""What a query batch needs and reports: the step codes, :class:`QueryStats` and :class:`Labels`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["STEPS", "UNDECIDED", "SAME", "LEVEL", "SUPPORT_POS", "SUPPORT_NEG", "INTERVAL", "TREE", "SEARCH_POS",
           "SEARCH_NEG", "MAX_ROUNDS", "QueryStats", "Labels"]

# the steps and their codes: distgrail.constants (the one source shared with the CUDA kernels)
from ..constants import (INTERVAL, LEVEL, MAX_ROUNDS, SAME, SEARCH_NEG, SEARCH_POS, STEPS, SUPPORT_NEG,  # noqa: E402
                         SUPPORT_POS, TREE, UNDECIDED)

#: steps whose answer is "reachable"
POSITIVE = (SAME, SUPPORT_POS, TREE, SEARCH_POS)


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
    #: GPU: searched pairs the one-warp search handed to the grid-wide bidirectional search (its
    #: rounds count as the bidirectional search's; the others' as the forward search's)
    grid_searched: int = 0

    def add_codes(self, codes: np.ndarray):
        counts = np.bincount(codes, minlength=len(STEPS) + 1)
        for i, s in enumerate(STEPS):
            self.steps[s] += int(counts[i + 1])

    def add_counts(self, counts):
        """Per-code counts (index = step code) from a GPU counter array."""
        for i, s in enumerate(STEPS):
            self.steps[s] += int(counts[i + 1])

    def merge(self, other: "QueryStats") -> "QueryStats":
        out = QueryStats(backend=self.backend, ranks=self.ranks)
        out.queries = self.queries + other.queries
        out.reachable = self.reachable + other.reachable
        out.steps = {s: self.steps[s] + other.steps[s] for s in STEPS}
        out.search_rounds = max(self.search_rounds, other.search_rounds)
        out.grid_searched = self.grid_searched + other.grid_searched
        out.seconds = max(self.seconds, other.seconds)
        return out

    @property
    def searched(self) -> int:
        """Pairs that went to the search (step 6)."""
        return self.steps["search_positive"] + self.steps["search_negative"]

    @property
    def queries_per_second(self) -> float:
        return self.queries / self.seconds if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict:
        return {
            "queries": self.queries,
            "reachable": self.reachable,
            "steps": dict(self.steps),
            "search_rounds": self.search_rounds,
            "grid_searched": self.grid_searched,
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
        if self.grid_searched:
            lines.append(f"  grid-wide        {self.grid_searched:,} of the searched pairs")
        lines.append(f"search rounds      {self.search_rounds}")
        lines.append(f"time               {self.seconds * 1e3:.2f} ms ({self.queries_per_second:,.0f} queries/s, "
                     f"{self.backend}, {self.ranks} rank{'s' if self.ranks != 1 else ''})")
        return "\n".join(lines)


@dataclass
class Labels:
    """The query-time view of an index, one compact copy on one backend's device.

    CPU (NumPy), one 1-D array per field (column gathers are faster in NumPy than gathers of
    packed rows: measured 2.5x on the search): ``level`` (C,) as stored; ``lo``/``hi`` (d, C)
    and ``start0``/``post0`` (C,) in the intervals' small unsigned type; ``out``/``inn`` (W, C)
    uint64 support masks (W = 0 without supports); ``comp`` and the CSR as stored (``indptr``
    int64, ``indices`` in the smallest type).
    GPU: only what the kernels read: ``rec`` (C, R) int32 packed records (layout in
    kernels/query.cuh), ``comp`` int32, ``indptr`` int64, ``indices`` int32.
    """

    comp: object  # (n,) component of each vertex
    indptr: object
    indices: object
    C: int
    d: int
    W: int = 0  # 64-bit words per support mask
    level: object = None  # CPU: (C,)
    lo: object = None  # CPU: (d, C)
    hi: object = None  # CPU: (d, C)
    start0: object = None  # CPU: (C,) first DT rank of the subtree, dimension 0
    post0: object = None  # CPU: (C,) DT post-order rank, dimension 0
    out: object = None  # CPU: (W, C) uint64, supports each component reaches
    inn: object = None  # CPU: (W, C) uint64, supports that reach each component
    rec: object = None  # GPU: (C, R) int32 records
    #: per-backend derived data (the GPU query context keeps its scratch here)
    cache: dict = field(default_factory=dict, repr=False, compare=False)
