"""What a query batch needs and reports: the step codes, :class:`SearchOptions`, :class:`QueryStats`
and :class:`Labels` (read-only, shared by concurrent queries)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields

import numpy as np

from ..errors import QueryError

__all__ = ["STEPS", "UNDECIDED", "SAME", "LEVEL", "SUPPORT_POS", "SUPPORT_NEG", "INTERVAL", "TREE", "SEARCH_POS",
           "SEARCH_NEG", "MAX_ROUNDS", "SEARCH_METHODS", "VISIT_BUDGET", "SearchOptions", "QueryStats", "Labels",
           "Once"]

# the steps and their codes: distgrail.constants (the one source shared with the CUDA kernels)
from ..constants import (INTERVAL, LEVEL, MAX_ROUNDS, SAME, SEARCH_NEG, SEARCH_POS, STEPS, SUPPORT_NEG,  # noqa: E402
                         SUPPORT_POS, TREE, UNDECIDED)

#: steps whose answer is "reachable"
POSITIVE = (SAME, SUPPORT_POS, TREE, SEARCH_POS)

#: the CPU backend's searches, all with the same answers and step counts: "compiled"
#: (:mod:`distgrail.query.bidir_jit`, numba imported on the first search), "bidirectional" (the
#: same search in NumPy, :mod:`distgrail.query.bidir`; what "compiled" falls back to if numba fails
#: to import), "forward" (the GPU's twin, :func:`distgrail.query.search.guided_search_numpy`: the
#: same rounds as the GPU) and "auto" (compiled when numba is installed, else bidirectional)
SEARCH_METHODS = ("auto", "compiled", "bidirectional", "forward")
#: default visit budget of the GPU's one-warp search: the edges a warp may scan for one query
#: before handing it to the grid-wide search (one warp grinding a long search was the long tail of
#: dense DAGs)
VISIT_BUDGET = 1 << 10


@dataclass(frozen=True)
class SearchOptions:
    """How a batch's search (step 6) runs; passed down from :meth:`distgrail.Index.query`
    (``search=``). Every choice gives the same answers and step counts.

    ``cpu_search``: one of :data:`SEARCH_METHODS`. ``visit_budget``: GPU, edges a warp may scan for
    one query before handing it to the grid-wide search (-1 hands on every searched pair).
    ``compiled_min_pairs``: until the compiled CPU search has run on the index's labels, fewer
    undecided pairs than this take the NumPy search (unless the batch's prefilter ran compiled: its
    load is then behind, the search's a small part of it), and a batch of fewer pairs runs the NumPy prefilter
    instead of the compiled one (same answers, codes and rounds): a handful of pairs never waits
    for numba's import or a compile (once per cache; docs/benchmarks.md). Once it has run, any
    undecided pairs take it (the NumPy search's fixed cost for a few pairs was a third of a
    batch of random pairs on a small graph: docs/benchmarks.md).
    """

    cpu_search: str = "auto"
    visit_budget: int = VISIT_BUDGET
    compiled_min_pairs: int = 64

    def __post_init__(self):
        if self.cpu_search not in SEARCH_METHODS:
            raise QueryError(f"cpu_search must be one of {', '.join(SEARCH_METHODS)}, got {self.cpu_search!r}")
        for name, least in (("visit_budget", -1), ("compiled_min_pairs", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
                raise QueryError(f"{name} must be an integer >= {least}, got {v!r}")

    def cpu_method(self, have_numba: bool) -> str:
        """The CPU search "auto" stands for: "compiled" with numba installed, else "bidirectional"."""
        if self.cpu_search != "auto":
            return self.cpu_search
        return "compiled" if have_numba else "bidirectional"


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
    #: seconds this call spent putting the index's query state on the backend's device before it
    #: answered (0 where an earlier call had: ``seconds`` leaves it out, so batches compare)
    prepare_seconds: float = 0.0

    def add_codes(self, codes: np.ndarray):
        counts = np.bincount(codes, minlength=len(STEPS) + 1)
        for i, s in enumerate(STEPS):
            self.steps[s] += int(counts[i + 1])

    def add_counts(self, counts):
        """Per-code counts (index = step code): a GPU counter array, or the compiled CPU
        prefilter's counts."""
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
        out.prepare_seconds = max(self.prepare_seconds, other.prepare_seconds)
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
            "prepare_seconds": self.prepare_seconds,
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
        if self.prepare_seconds:
            lines.append(f"prepare            {self.prepare_seconds * 1e3:.2f} ms (the index to the device, once)")
        return "\n".join(lines)


_UNSET = object()


class Once:
    """A value derived from read-only data, built on first use under a lock and never changed after
    it is published (the reverse CSR, the compiled search's records): concurrent readers either
    build it (one of them) or wait for it, and all get the same object."""

    __slots__ = ("_lock", "_value")

    def __init__(self):
        self._lock = threading.Lock()
        self._value = _UNSET

    def get(self, build):
        value = self._value
        if value is _UNSET:
            with self._lock:
                value = self._value
                if value is _UNSET:
                    value = self._value = build()
        return value

    @property
    def built(self) -> bool:
        return self._value is not _UNSET


def read_only(a):
    """``a`` as a read-only NumPy view (the caller's array keeps its own flags); other types
    (CuPy arrays, scalars, None) unchanged."""
    if isinstance(a, np.ndarray):
        a = a.view()
        a.flags.writeable = False
    return a


@dataclass(frozen=True)
class Labels:
    """The query-time view of an index, one compact copy on one backend's device. Read-only, so
    any number of queries may share it: the dataclass is frozen and its NumPy arrays are read-only
    views (CuPy arrays have no such flag: no query code writes them). Data derived from it on first
    use lives in :class:`Once` fields, built once under a lock (``reverse``: the parents of each
    component, ``packed``: the compiled CPU search's records, ``first``: the compiled prefilter's
    first component of each component's level); per-call scratch belongs to the call
    (the GPU's scratch pool is the :class:`~distgrail.index.Index`'s).

    CPU (NumPy), one 1-D array per field (column gathers are faster in NumPy than gathers of
    packed rows, docs/benchmarks.md): ``level`` (C,) as stored; ``lo``/``hi`` (d, C)
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
    #: the parents of each component (CPU: :func:`distgrail.query.bidir.reverse_csr`; GPU: the
    #: device reverse CSR of the grid-wide search), built on first use
    reverse: Once = field(default_factory=Once, init=False, repr=False, compare=False)
    #: the compiled CPU search's packed records (:mod:`distgrail.query.bidir_jit`), built on first use
    packed: Once = field(default_factory=Once, init=False, repr=False, compare=False)
    #: the first component of each component's level (:mod:`distgrail.query.prefilter_jit`'s
    #: level filter), built on first use
    first: Once = field(default_factory=Once, init=False, repr=False, compare=False)
    #: set once the compiled CPU search has run on these labels (its code for their array types is
    #: loaded: a few undecided pairs then wait for no compile, :func:`distgrail.query.answer._cpu_search`)
    searched: Once = field(default_factory=Once, init=False, repr=False, compare=False)

    def __post_init__(self):
        for f in fields(self):
            if f.init:
                object.__setattr__(self, f.name, read_only(getattr(self, f.name)))
