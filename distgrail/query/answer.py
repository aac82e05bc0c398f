"""Answering a query batch: the NumPy path (every step in order) and the GPU path (CuPy +
kernels/prefilter.cu, kernels/search.cu).

``answer_batch_cuda`` is the CUDA counterpart of :func:`answer_batch_numpy` and
gives the same answers and the same per-step counts. Search rounds: a pair the one-warp search
settles counts the rounds of the forward CPU search (``CPU_SEARCH = "forward"``), a pair it hands
on (``QueryStats.grid_searched``) those of the bidirectional one (compiled or NumPy: the same);
with none handed on the round count equals the forward search's, with all handed on
(``SEARCH_BUDGET = -1``) the bidirectional search's.

* The steps before the search are one fused kernel (``dg_prefilter``): component lookup, level
  filter, support masks, all d interval filters and the dimension-0 DT-subtree cut read one
  packed int32 record per component (kernels/query.cuh); the pairs left undecided are appended
  to a work list.
* The search (``dg_search``) runs every undecided pair of the chunk at once, one warp per query
  with dynamic scheduling: a level-synchronous search with exactly the frontiers of
  :func:`distgrail.query.search.guided_search_numpy` (level, support-mask and interval pruning,
  positive DT-subtree and support cut on every entered vertex, early exit), a per-warp visited bitmap that the warp clears after
  each query, and a per-warp queue. A query whose queue would outgrow ``QUEUE_CAP``, or that
  has scanned more than ``SEARCH_BUDGET`` edges, is handed on untouched to the grid-wide search
  (:mod:`distgrail.query.grid`): all threads of the GPU on the frontiers of all such queries at
  once, bidirectionally (forward from u, backward from v over a reverse CSR built on the GPU), one
  round per launch pair, the frontiers of :func:`distgrail.query.bidir.bidirectional_search_numpy`.
* Batches stream through the GPU in chunks of ``CHUNK_PAIRS`` pairs (pinned double buffers on
  the host), so GPU memory stays bounded whatever the batch size; answers keep input order.
"""

from __future__ import annotations

import importlib.util
import time
import warnings

import numpy as np

from ..errors import BackendError
from ..gpu.kernels import load_module
from .grid import GridSearch
from .prefilter import prefilter
from .bidir import bidirectional_search_numpy
from .search import guided_search_numpy
from .stats import MAX_ROUNDS, POSITIVE, SEARCH_NEG, SEARCH_POS, UNDECIDED, Labels, QueryStats

__all__ = ["answer_batch_numpy", "answer_batch_cuda", "records", "record_width", "CHUNK_PAIRS", "QUEUE_CAP",
           "SCRATCH_BYTES", "SEARCH_BUDGET"]

#: pairs per GPU chunk (inputs 16 B + work list 32 B + answer 1 B per pair on the device)
CHUNK_PAIRS = 1 << 23
#: queue entries per warp of the one-warp search; longer searches go to the grid-wide search
QUEUE_CAP = 1 << 14
#: edges a warp may scan for one query before handing it to the grid-wide search (the visit
#: budget: one warp grinding a long search was the long tail of dense DAGs; -1 hands on all).
#: H100, dag11 d = 5, 10 M random pairs with the bidirectional grid-wide search: K = 64 1037 /
#: 1003 / 1007 ms at 4096 / 1024 / 256 edges; K = 1024 554 / 543 ms at 4096 / 1024
SEARCH_BUDGET = 1 << 10
#: upper bound on the one-warp search's scratch (visited bitmaps + queues), bytes
SCRATCH_BYTES = 1 << 30

_BLOCK = 256
_I32_MAX = np.iinfo(np.int32).max


#: the CPU backend's search, all with the same answers and step counts: "compiled" (the default
#: when numba is installed: :mod:`distgrail.query.bidir_jit`, numba imported on the first search),
#: "bidirectional" (the same search in NumPy, :mod:`distgrail.query.bidir`; the default without
#: numba, and what "compiled" falls back to if numba fails to import) or "forward" (the GPU's twin,
#: :func:`guided_search_numpy`: the same rounds as the GPU)
CPU_SEARCH = "compiled" if importlib.util.find_spec("numba") is not None else "bidirectional"
#: "compiled" runs the NumPy search for fewer undecided pairs than this (same answers and rounds):
#: a handful of pairs never waits for numba's import (~0.3 s) or a compile (~3 s, once per cache)
COMPILED_MIN_PAIRS = 64


def _cpu_search(k: int):
    if CPU_SEARCH == "forward":
        return guided_search_numpy
    if CPU_SEARCH == "compiled" and k < COMPILED_MIN_PAIRS:
        return bidirectional_search_numpy
    if CPU_SEARCH == "compiled":
        try:
            from .bidir_jit import compiled_search
        except ImportError as e:  # numba missing or broken: the NumPy search gives the same answers
            warnings.warn(f"compiled CPU search unavailable ({e}); using the NumPy search", RuntimeWarning,
                          stacklevel=3)
            return bidirectional_search_numpy
        return compiled_search
    if CPU_SEARCH == "bidirectional":
        return bidirectional_search_numpy
    raise ValueError(f"CPU_SEARCH must be 'compiled', 'bidirectional' or 'forward', got {CPU_SEARCH!r}")


def answer_batch_numpy(L: Labels, sources: np.ndarray, targets: np.ndarray, stats: QueryStats | None = None):
    """Every step on the CPU for original vertex ids; returns bool answers."""
    t0 = time.perf_counter()
    cu = L.comp[sources]
    cv = L.comp[targets]
    ans, code = prefilter(L, cu, cv)
    und = np.flatnonzero(code == UNDECIDED)
    found, rounds = _cpu_search(und.size)(L, cu[und], cv[und])
    ans[und] = found
    code[und] = np.where(found, SEARCH_POS, SEARCH_NEG)
    if stats is not None:
        stats.queries += int(sources.size)
        stats.reachable += int(np.count_nonzero(ans))
        stats.add_codes(code)
        stats.search_rounds = max(stats.search_rounds, rounds)
        stats.seconds += time.perf_counter() - t0
    return ans


def record_width(d: int, W: int) -> int:
    """int32 per packed component record (kernels/query.cuh): header, 2 W mask words, d intervals."""
    return (4 + 4 * W + 2 * d + 3) // 4 * 4


def records(level, start0, post0, lo, hi, out, inn) -> np.ndarray:
    """The packed (C, R) int32 records the query kernels read (layout in kernels/query.cuh)."""
    C = int(level.shape[0])
    d, W = int(lo.shape[0]), int(out.shape[1])
    if C >= _I32_MAX:
        raise BackendError(f"GPU queries need fewer than 2^31 components, got C={C:,}")
    R = record_width(d, W)
    rec = np.zeros((max(C, 1), R), dtype=np.int32)
    if C:
        rec[:C, 0] = level
        rec[:C, 1] = start0
        rec[:C, 2] = post0
        if W:
            rec[:C, 4:4 + 2 * W] = np.ascontiguousarray(out, dtype=np.uint64).view(np.int32)
            rec[:C, 4 + 2 * W:4 + 4 * W] = np.ascontiguousarray(inn, dtype=np.uint64).view(np.int32)
        B = 4 + 4 * W
        rec[:C, B:B + 2 * d:2] = lo.T
        rec[:C, B + 1:B + 2 * d:2] = hi.T
    return rec


class _Context:
    """The kernels and scratch of one GPU :class:`Labels` (records, comp, CSR live in ``L``)."""

    def __init__(self, L):
        import cupy as cp

        self.cp = cp
        C, d, W = L.C, L.d, L.W
        n = int(L.comp.shape[0])
        if max(n, C) >= _I32_MAX:
            raise BackendError(f"GPU queries need fewer than 2^31 vertices and components, got n={n:,}, C={C:,}")
        self.C, self.d, self.W, self.n = C, d, W, n
        self.R = R = int(L.rec.shape[1])
        self.rec, self.comp, self.indptr, self.indices = L.rec, L.comp, L.indptr, L.indices
        self.k_pre = load_module("prefilter").get_function("dg_prefilter")
        self.k_search = load_module("search").get_function("dg_search")
        dev = cp.cuda.Device()
        self.sms = int(dev.attributes["MultiProcessorCount"])
        try:
            regs = int(self.k_search.num_regs)
            per_block = -(-regs * 32 // 256) * 256 * (_BLOCK // 32)
            blocks = max(1, min(8, 65536 // per_block))
        except Exception:  # pragma: no cover - attribute names differ across CuPy versions
            blocks = 4
        self.smem = (_BLOCK // 32) * R * 4
        if self.smem > 48 * 1024:
            raise BackendError(f"GPU queries need records of at most {48 * 1024 // (4 * 8)} int32 "
                               f"(4 + 4 W + 2 d, W = 64-bit words per support mask), got d={d}, W={W}")
        resident = self.sms * blocks * (_BLOCK // 32)
        self.vwords = (C + 31) // 32 + 1
        # one warp per query, short queue; the queries it hands on go to the grid-wide search
        self.cap1 = max(1, min(C, QUEUE_CAP))
        self.budget = int(SEARCH_BUDGET)
        m = int(L.indices.shape[0])
        per1 = 4 * (self.vwords + self.cap1)
        self.blocks1 = max(1, min(resident, SCRATCH_BYTES // per1) // (_BLOCK // 32))
        self.nw1 = self.blocks1 * (_BLOCK // 32)
        self.visited = cp.zeros(self.nw1 * self.vwords, dtype=cp.uint32)
        self.queue1 = cp.empty(self.nw1 * self.cap1, dtype=cp.int32)
        # a query can be handed on only if its queue (at most C vertices) or its edges (at most m) can pass a limit
        self.two_pass = self.cap1 < C or self.budget < m
        self.grid = GridSearch(self)
        # counters[code] per step, [MAX_ROUNDS] max rounds; wctr per chunk: undecided, next, handed on
        self.counters = cp.zeros(MAX_ROUNDS + 1, dtype=cp.uint64)
        self.wctr = cp.zeros(8, dtype=cp.uint64)
        self.size = 0
        self.handed = 0  # queries handed to the grid-wide search since the batch began

    def buffers(self, k):
        cp = self.cp
        if k > self.size:
            self.ds = cp.empty(k, dtype=cp.int64)
            self.dt = cp.empty(k, dtype=cp.int64)
            self.dans = cp.empty(k, dtype=cp.uint8)
            self.work = cp.empty((k, 4), dtype=cp.int32)
            self.ovf = cp.empty((k, 4), dtype=cp.int32)
            self.size = k

    def launch(self, ds, dt, dans, nq: int, stream, trace=None):
        """Steps 1–5 for ``nq`` pairs already on the device, in ``stream`` (queued; the stream is
        synchronised once to read how many queries go to the grid-wide search, if any can).
        ``trace``: a list that receives the grid-wide search's per-round frontier sizes."""
        i32, i64 = np.int32, np.int64
        w = self.wctr
        w.data.memset_async(0, w.nbytes, stream)
        grid = max(1, min(-(-nq // _BLOCK), self.sms * 16))
        with stream:
            self.k_pre((grid,), (_BLOCK,), (ds, dt, i64(nq), self.comp, self.rec, i32(self.R), i32(self.d),
                                            i32(self.W), dans, self.work, w, self.counters))
            # one warp per query: every undecided pair; wctr[0] undecided, [1] next, [2] handed on
            self.k_search((self.blocks1,), (_BLOCK,),
                          (self.work, w[0:], w[1:], self.indptr, self.indices, self.rec, i32(self.R), i32(self.d),
                           i32(self.W), self.visited, i64(self.vwords), self.queue1, i64(self.cap1), i64(self.budget),
                           dans, self.ovf, w[2:], self.counters), shared_mem=self.smem)
        if self.two_pass:  # the grid-wide search for the queries handed on
            nhard = int(w[2:3].get(stream=stream)[0])
            self.handed += nhard
            sizes = self.grid.run(self.ovf, nhard, dans, stream, trace=trace is not None)
            if trace is not None:
                trace.extend(sizes)


def _context(L) -> _Context:
    ctx = L.cache.get("gpu_query")
    if ctx is None:
        ctx = L.cache["gpu_query"] = _Context(L)
    return ctx


def answer_batch_cuda(L, sources, targets, stats=None):
    """Every step on the GPU for original vertex ids (host int64 arrays); returns host bool answers.

    The batch may be of any size: it is cut into chunks of :data:`CHUNK_PAIRS` pairs that stream
    through pinned host buffers, so GPU memory does not grow with the batch. Device buffers are
    kept per ``Labels`` object: answer one batch at a time per index (not thread-safe).
    """
    import cupy as cp

    t0 = time.perf_counter()
    sources = np.ascontiguousarray(sources, dtype=np.int64)
    targets = np.ascontiguousarray(targets, dtype=np.int64)
    nq = int(sources.size)
    out = np.empty(nq, dtype=bool)
    counts = np.zeros(MAX_ROUNDS + 1, dtype=np.uint64)
    handed = 0
    if nq:
        ctx = _context(L)
        stream = cp.cuda.get_current_stream()
        ctx.counters.data.memset_async(0, ctx.counters.nbytes, stream)
        ctx.handed = 0
        chunk = max(1, int(CHUNK_PAIRS))
        if nq <= chunk:
            ctx.buffers(nq)
            ds, dt, dans = ctx.ds[:nq], ctx.dt[:nq], ctx.dans[:nq]
            _h2d(ds, sources, stream)
            _h2d(dt, targets, stream)
            ctx.launch(ds, dt, dans, nq, stream)
            _d2h(out, dans, stream)
        else:
            _stream_chunks(ctx, sources, targets, out, chunk, stream)
        counts = ctx.counters.get(stream=stream)
        stream.synchronize()
        handed = ctx.handed
    if stats is not None:
        stats.queries += nq
        stats.add_counts(counts)
        stats.reachable += sum(int(counts[c]) for c in POSITIVE)
        stats.search_rounds = max(stats.search_rounds, int(counts[MAX_ROUNDS]))
        stats.grid_searched += handed
        stats.seconds += time.perf_counter() - t0
    return out


def _h2d(dev, host, stream):
    """Asynchronous copy host → device (kind 1) in ``stream`` (truly asynchronous from pinned memory)."""
    from cupy.cuda import runtime

    runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, host.nbytes, 1, stream.ptr)


def _d2h(host, dev, stream):
    """Copy device → host (kind 2) in ``stream``; asynchronous only into pinned memory."""
    from cupy.cuda import runtime

    runtime.memcpyAsync(host.ctypes.data, dev.data.ptr, host.nbytes, 2, stream.ptr)


def _stream_chunks(ctx, sources, targets, out, chunk, stream):
    """Double-buffered chunks: the host fills one pinned slot while the GPU works on the other."""
    import cupy as cp
    import cupyx

    nq = sources.size
    ctx.buffers(chunk)
    slots = [(cupyx.empty_pinned(chunk, np.int64), cupyx.empty_pinned(chunk, np.int64),
              cupyx.empty_pinned(chunk, np.uint8)) for _ in range(2)]
    pending = [None, None]  # (event, a, b) of the chunk whose answers land in that slot

    def drain(k):
        ev, a, b = pending[k]
        ev.synchronize()
        out[a:b] = slots[k][2][:b - a].view(bool)
        pending[k] = None

    for i, a in enumerate(range(0, nq, chunk)):
        b = min(nq, a + chunk)
        k = i & 1
        if pending[k] is not None:
            drain(k)
        m = b - a
        ps, pt, pa = slots[k]
        ps[:m] = sources[a:b]
        pt[:m] = targets[a:b]
        ds, dt, dans = ctx.ds[:m], ctx.dt[:m], ctx.dans[:m]
        _h2d(ds, ps[:m], stream)
        _h2d(dt, pt[:m], stream)
        ctx.launch(ds, dt, dans, m, stream)
        _d2h(pa[:m], dans, stream)
        ev = cp.cuda.Event(block=False, disable_timing=True)
        ev.record(stream)
        pending[k] = (ev, a, b)
    for k in (0, 1):
        if pending[k] is not None:
            drain(k)
