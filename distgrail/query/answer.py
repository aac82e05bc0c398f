"""Answering a query batch: the NumPy path (every step in order) and the GPU path (CuPy +
kernels/prefilter.cu, kernels/search.cu); ``be.pick(answer_batch_numpy, answer_batch_cuda)``
picks one for a backend.

``answer_batch_cuda`` is the CUDA counterpart of :func:`answer_batch_numpy` and
gives the same answers and the same per-step counts. Search rounds: a pair the one-warp search
settles counts the rounds of the forward CPU search (``SearchOptions(cpu_search="forward")``), a
pair it hands on (``QueryStats.grid_searched``) those of the bidirectional one (compiled or NumPy:
the same); with none handed on the round count equals the forward search's, with all handed on
(``SearchOptions(visit_budget=-1)``) the bidirectional search's.

* The steps before the search are one fused kernel (``dg_prefilter``): component lookup, level
  filter, support masks, all d interval filters and the dimension-0 DT-subtree cut read one
  packed int32 record per component (kernels/query.cuh); the pairs left undecided are appended
  to a work list.
* The search (``dg_search``) runs every undecided pair of the chunk at once, one warp per query
  with dynamic scheduling: a level-synchronous search with exactly the frontiers of
  :func:`distgrail.query.search.guided_search_numpy` (level, support-mask and interval pruning,
  positive DT-subtree and support cut on every entered vertex, early exit), a per-warp visited
  bitmap that the warp clears after each query, and a per-warp queue. A query whose queue would
  outgrow ``QUEUE_CAP``, or that has scanned more than the visit budget
  (:attr:`SearchOptions.visit_budget <distgrail.query.stats.SearchOptions>`) of edges, is handed on
  untouched to the grid-wide search (:mod:`distgrail.query.grid`): all threads of the GPU on the
  frontiers of all such queries at once, bidirectionally (forward from u, backward from v over a
  reverse CSR built on the GPU), one round per launch pair, the frontiers of
  :func:`distgrail.query.bidir.bidirectional_search_numpy`.
* Batches stream through the GPU in chunks (:mod:`distgrail.query.staging`), so GPU memory
  stays bounded whatever the batch size; answers keep input order. The next chunk goes up and
  the last one's answers come down on streams of their own while the kernels answer this one;
  staged ids travel as int32.
* Concurrent batches: :class:`Labels` is read-only; each GPU batch borrows a
  :class:`QueryScratch` of its own from a :class:`ScratchPool` (the index keeps one per device)
  and runs on ``be.device``: its kernels in the calling thread's current stream, the copies of a
  streamed batch on the scratch's own two streams, which start after what the caller queued.
"""

from __future__ import annotations

import contextlib
import importlib.util
import threading
import time

import numpy as np

from ..errors import BackendError
from ..gpu.kernels import load_module
from ..gpu.memory import launcher
from ..jit import failed_to_compile
from .grid import GridSearch
from .idcheck import refuse_out_of_range
from . import staging
from .prefilter import prefilter
from .bidir import bidirectional_search_numpy
from .search import guided_search_numpy
from .stats import MAX_ROUNDS, POSITIVE, SEARCH_NEG, SEARCH_POS, STEPS, UNDECIDED, Labels, QueryStats, SearchOptions

__all__ = ["answer_batch_numpy", "answer_batch_cuda", "records", "records_on_device", "record_width", "QueryScratch",
           "ScratchPool", "QUEUE_CAP", "SCRATCH_BYTES"]

#: queue entries per warp of the one-warp search; longer searches go to the grid-wide search
QUEUE_CAP = 1 << 14
#: upper bound on the one-warp search's scratch (visited bitmaps + queues), bytes
SCRATCH_BYTES = 1 << 30

#: pairs the NumPy prefilter takes in a process before the compiled CPU prefilter is loaded
#: (``cpu_search`` "auto"): loading its compiled code (numba, from its cache) costs about what the
#: NumPy prefilter spends on this many pairs, so a process that answers few pairs never pays it
#: and one that answers many pays at most twice that; once loaded, any batch of
#: ``compiled_min_pairs`` pairs takes it
COMPILED_PREFILTER_FIRST = 1 << 22
#: pairs the NumPy prefilter has taken in this process while the compiled one was not loaded
_NUMPY_PAIRS = [0]

#: components per block of :func:`records_on_device` (its device scratch beyond the records:
#: the block's slices as stored and their widened copies, at most about 24 + 16 W + 8 d bytes
#: per component of a block)
RECORD_BLOCK = 1 << 23
_BLOCK = 256
_I32_MAX = np.iinfo(np.int32).max


def have_numba() -> bool:
    """Whether numba is installed (what ``cpu_search="auto"`` resolves to; numba itself is
    imported on the first compiled search only)."""
    return importlib.util.find_spec("numba") is not None


def _cpu_search(k: int, search: SearchOptions, L: Labels | None = None, prefiltered: bool = False):
    """The search for ``k`` undecided pairs on ``L``: fewer than ``compiled_min_pairs`` take the
    NumPy one until the compiled search has run on ``L`` (its code for ``L``'s array types is
    loaded then; another index's types may need a compile), unless the batch's prefilter ran
    compiled (``prefiltered``): numba and the prefilter's code are loaded then, and the search's
    own code costs a small part of that once, where the NumPy search's fixed cost for a few
    pairs is paid by every batch (docs/benchmarks.md)."""
    method = search.cpu_method(have_numba())
    if method == "forward":
        return guided_search_numpy
    if method == "bidirectional" or (k < search.compiled_min_pairs and not prefiltered
                                     and not (L is not None and L.searched.built)):
        return bidirectional_search_numpy
    return _compiled("bidir_jit", "compiled_search", "search", bidirectional_search_numpy)


def _compiled(module: str, name: str, what: str, numpy_way):
    """``distgrail.query.<module>.<name>``, or ``numpy_way`` with a warning when numba is missing
    or broken (the NumPy way gives the same answers)."""
    from ..jit import load

    got = load(f"{__package__}.{module}", what, stacklevel=5)
    return numpy_way if got is None else getattr(got, name)


def _compiled_first(k: int, search: SearchOptions) -> bool:
    """Whether a batch of ``k`` pairs would take the compiled prefilter (:func:`_cpu_prefilter`'s
    rule, without counting the pairs)."""
    if k < search.compiled_min_pairs or search.cpu_method(have_numba()) != "compiled":
        return False
    return not (search.cpu_search == "auto" and not _prefilter_loaded() and _NUMPY_PAIRS[0] + k < COMPILED_PREFILTER_FIRST)


def prepare_cpu(L: Labels, k: int, search: SearchOptions | None = None, ids=None) -> bool:
    """What the first compiled CPU batch of ``k`` pairs makes before it answers, made now: numba
    and the compiled modules imported, the components' packed records (:func:`~distgrail.query.
    bidir_jit._layout`, kept on ``L`` for the batch), the compiled prefilter's code loaded (so
    any batch then takes it, even when ``k`` was an estimate too high). For a thread beside the
    read of the pairs (``distgrail query``); nothing when the batch would take the NumPy
    prefilter. ``ids``: a few ids of the kind the batch will pass (its type, layout and
    writeability: the read-only strided columns of a mapped ``.npy``, say), whose code numba
    compiles or loads apart from that of contiguous int64 ids. Returns whether it prepared."""
    search = search or SearchOptions()
    if not _compiled_first(k, search):
        return False
    from ..jit import load

    jit = load(f"{__package__}.prefilter_jit", "prefilter", stacklevel=3)
    if jit is None:
        return False
    jit._layout(L)
    if L.C:  # its code loaded too (one pair): the batch then takes it by the rule above, whatever its size
        one = np.zeros(1, dtype=np.int64)
        jit.compiled_prefilter_left(L, one, one)
        if ids is not None and np.size(ids):
            some = ids[:2]  # (ids of this index: read, and answered, as the batch's)
            jit.compiled_prefilter_left(L, some, some)
    return True


def _cpu_prefilter(k: int, search: SearchOptions):
    """:func:`~distgrail.query.prefilter_jit.compiled_prefilter_left` where the compiled CPU search
    runs (``cpu_search`` "auto" with numba, or "compiled") and the batch has at least
    ``compiled_min_pairs`` pairs; with "auto", only once this process's batches have brought
    :data:`COMPILED_PREFILTER_FIRST` pairs (this one included) or it is loaded. Else None (the
    NumPy prefilter: the same answers and codes)."""
    if k < search.compiled_min_pairs or search.cpu_method(have_numba()) != "compiled":
        return None
    if not _compiled_first(k, search):  # ("auto", not loaded yet, too few pairs so far)
        _NUMPY_PAIRS[0] += k
        return None
    return _compiled("prefilter_jit", "compiled_prefilter_left", "prefilter", None)


def _loaded(module: str) -> bool:
    """Whether this process has run ``distgrail.query.<module>``'s compiled kernel already (its
    code is loaded: calling it costs no import and no compile). Another thread may be importing
    it meanwhile: a module in ``sys.modules`` still without its kernel is not loaded."""
    import sys

    block = getattr(sys.modules.get(f"{__package__}.{module}"), "_block", None)
    return bool(getattr(block, "signatures", None))


def _prefilter_loaded() -> bool:
    """:func:`_loaded` of the compiled prefilter."""
    return _loaded("prefilter_jit")


def answer_batch_numpy(L: Labels, sources: np.ndarray, targets: np.ndarray, stats: QueryStats | None = None, *,
                       search: SearchOptions | None = None, pool=None, out=None, checked: bool = True):
    """Every step on the CPU for original vertex ids; returns bool answers. The component lookup
    and the prefilter run compiled where the compiled search does (:func:`_cpu_prefilter`), else
    in NumPy. Its scratch is the call's own (``pool``, the GPU launcher's scratch pool, is unused
    here); ``out``, as the GPU launcher's, receives the answers (copied into it here).
    ``checked=False``: ids whose range is not checked yet (native int64 or int32): the compiled
    prefilter checks each as it reads it, the NumPy one all of them first; a bad one is refused
    (:func:`~distgrail.query.idcheck.refuse_out_of_range`) before any answer."""
    t0 = time.perf_counter()
    search = search or SearchOptions()
    compiled = _cpu_prefilter(int(np.size(sources)), search)
    counts = None
    if compiled is not None:  # the component lookup and the prefilter in one compiled pass
        counts = np.zeros(len(STEPS) + 1, dtype=np.int64)  # (the codes counted there, block by block)
        try:
            # (only the pairs left to the search come back with their component ids: no code or
            # id is written for the others)
            ans, und, cu, cv = compiled(L, sources, targets, counts=counts)
        except Exception as e:
            if not failed_to_compile(f"{__package__}.prefilter_jit", "prefilter", e):
                raise
            compiled = counts = None
    if compiled is None:
        if not checked:  # (negative ids would index from the end)
            refuse_out_of_range(sources, targets, int(np.size(L.comp)))
        cu = L.comp[sources]
        cv = L.comp[targets]
        ans, code = prefilter(L, cu, cv)
        und = np.flatnonzero(code == UNDECIDED)
        cu, cv = cu[und], cv[und]
    searching = _cpu_search(und.size, search, L, prefiltered=compiled is not None)
    try:
        found, rounds = searching(L, cu, cv)
    except Exception as e:
        if searching in (bidirectional_search_numpy, guided_search_numpy) or \
                not failed_to_compile(f"{__package__}.bidir_jit", "search", e):
            raise
        found, rounds = bidirectional_search_numpy(L, cu, cv)
    ans[und] = found
    if counts is None:
        code[und] = np.where(found, SEARCH_POS, SEARCH_NEG)
    if stats is not None:
        stats.queries += int(sources.size)
        stats.reachable += int(np.count_nonzero(ans))
        if counts is None:
            stats.add_codes(code)
        else:
            positive = int(np.count_nonzero(found))
            counts[UNDECIDED] -= und.size
            counts[SEARCH_POS] += positive
            counts[SEARCH_NEG] += und.size - positive
            stats.add_counts(counts)
        stats.search_rounds = max(stats.search_rounds, rounds)
        stats.seconds += time.perf_counter() - t0
    if out is not None:
        if out.shape != ans.shape:
            raise BackendError(f"answer_batch_numpy: out must hold {ans.size} answers, got shape {out.shape}")
        out[...] = ans
        return out
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


def records_on_device(be, level, post0, subtree_size, intervals, out, inn, block: int = RECORD_BLOCK,
                      upload=None):
    """:func:`records` packed on ``be``'s GPU from the index's stored host arrays: ``level`` (C,),
    ``post0`` (C,), ``subtree_size`` (C,) (``start0 = post0 - subtree_size + 1``), ``intervals``
    (d, C, 2) and the (C, W) masks ``out``/``inn``; the same int32 bytes as :func:`records` (its
    NumPy twin). Host-side packing writes each of the R columns across the whole (C, R) array
    (seconds for a large index: docs/benchmarks.md); here each block of ``block``
    components is uploaded as stored (contiguous slices) and packed by the GPU, so the host only
    reads what it has. ``upload(list of arrays)``: the block's slices on the device, all at once
    (a :class:`~distgrail.gpu.dma.Stager`'s; default: one ``be.asarray`` after another). Arrays
    already on the device (an update's swept arrays) are packed where they are."""
    C = int(level.shape[0])
    d, W = int(intervals.shape[0]), int(out.shape[1])
    if C >= _I32_MAX:
        raise BackendError(f"GPU queries need fewer than 2^31 components, got C={C:,}")
    R = record_width(d, W)
    B = 4 + 4 * W
    xp = be.xp
    send = upload if upload is not None else (lambda arrays: [be.asarray(x) for x in arrays])
    with be.on_device():
        rec = xp.zeros((max(C, 1), R), dtype=xp.int32)
        for a in range(0, C, max(1, int(block))):
            b = min(C, a + max(1, int(block)))
            blk = rec[a:b]
            got = send([level[a:b], post0[a:b], subtree_size[a:b]] + ([out[a:b], inn[a:b]] if W else [])
                       + [intervals[i, a:b] for i in range(d)])
            blk[:, 0] = got[0]
            post = got[1].astype(xp.int64)
            blk[:, 1] = post - got[2].astype(xp.int64) + 1
            blk[:, 2] = post
            del post
            if W:
                blk[:, 4:4 + 2 * W] = _words(be, got[3])
                blk[:, 4 + 2 * W:4 + 4 * W] = _words(be, got[4])
            for i, iv in enumerate(got[5 if W else 3:]):
                blk[:, B + 2 * i:B + 2 * i + 2] = iv
            del got
    return rec


def _words(be, masks):
    """(k, W) mask words, host or device, as (k, 2 W) int32 halves on ``be``'s device."""
    if isinstance(masks, np.ndarray):
        masks = be.asarray(np.ascontiguousarray(masks, dtype=np.uint64))
    return be.xp.ascontiguousarray(masks, dtype=be.xp.uint64).view(be.xp.int32)


class QueryScratch:
    """The device scratch of one GPU query batch at a time on one :class:`Labels` (its records,
    comp and CSR stay in ``L``): the one-warp search's visited bitmaps and queues, the chunk
    buffers, the counters and the grid-wide search's scratch. Made on ``be.device`` (the caller
    runs under :func:`~distgrail.gpu.memory.launcher`); lent by a :class:`ScratchPool`."""

    def __init__(self, be, L: Labels):
        import cupy as cp

        self.cp = cp
        self.labels = L
        C, d, W = L.C, L.d, L.W
        n = int(L.comp.shape[0])
        if max(n, C) >= _I32_MAX:
            raise BackendError(f"GPU queries need fewer than 2^31 vertices and components, got n={n:,}, C={C:,}")
        self.C, self.d, self.W, self.n = C, d, W, n
        self.m = int(L.indices.shape[0])
        self.R = R = int(L.rec.shape[1])
        self.rec, self.comp, self.indptr, self.indices = L.rec, L.comp, L.indptr, L.indices
        pre = load_module("prefilter", be.device)
        # by the type of the ids on the device: int32 (staged) or int64 (uploaded as they are)
        self.k_pre = {np.dtype(np.int32): pre.get_function("dg_prefilter<0>"),
                      np.dtype(np.int64): pre.get_function("dg_prefilter<1>")}
        self.k_search = load_module("search", be.device).get_function("dg_search")
        self.sms = int(cp.cuda.Device(be.device).attributes["MultiProcessorCount"])
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
        self.queue_cap = max(1, min(C, QUEUE_CAP))
        warp_bytes = 4 * (self.vwords + self.queue_cap)  # one warp's visited bitmap and queue
        self.blocks = max(1, min(resident, SCRATCH_BYTES // warp_bytes) // (_BLOCK // 32))
        self.warps = self.blocks * (_BLOCK // 32)
        self.visited = cp.zeros(self.warps * self.vwords, dtype=cp.uint32)
        self.queue = cp.empty(self.warps * self.queue_cap, dtype=cp.int32)
        self.grid = GridSearch(self)
        # counters[code] per step, [MAX_ROUNDS] max rounds; work_counters per chunk: undecided,
        # next work item, handed on
        self.counters = cp.zeros(MAX_ROUNDS + 1, dtype=cp.uint64)
        self.work_counters = cp.zeros(8, dtype=cp.uint64)
        self.size = 0
        self.sets = []
        self.streams = None

    def buffers(self, k):
        """Room for chunks of ``k`` pairs: two sets of (sources, targets, answers), int64 ids
        (viewed as int32 where staged ids arrive narrowed), one uploaded while the other is
        answered, and one work list; the sets, the first of them also as ``ds``/``dt``/``answers``."""
        cp = self.cp
        if k > self.size:
            # the old buffers let go first (their memory back to the pool before the new ones are
            # made; size 0 until all are made, should one fail)
            self.sets = self.ds = self.dt = self.answers = self.work = self.handed_on = None
            self.size = 0
            self.sets = [(cp.empty(k, dtype=cp.int64), cp.empty(k, dtype=cp.int64), cp.empty(k, dtype=cp.uint8))
                         for _ in range(2)]
            self.ds, self.dt, self.answers = self.sets[0]
            self.work = cp.empty((k, 4), dtype=cp.int32)
            self.handed_on = cp.empty((k, 4), dtype=cp.int32)
            self.size = k
        return self.sets

    def side_streams(self):
        """This scratch's (upload, download) streams, made once on its device: the copies of a
        streamed batch run on them beside the kernels (:func:`distgrail.query.staging.stream_chunks`)."""
        if self.streams is None:
            cp = self.cp
            self.streams = (cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True))
        return self.streams

    def hands_on(self, budget: int) -> bool:
        """Whether a query can be handed on: its queue (at most C vertices) or its scanned edges
        (at most m) can pass a limit."""
        return self.queue_cap < self.C or budget < self.m

    def launch(self, ds, dt, answers, nq: int, stream, budget: int, trace=None) -> int:
        """Steps 1–5 for ``nq`` pairs already on the device (``ds``/``dt``: int32 or int64), in ``stream`` (queued; the stream is
        synchronised once to read how many queries go to the grid-wide search, if any can).
        ``budget``: the visit budget. ``trace``: a list that receives the grid-wide search's
        per-round frontier sizes. Returns the number of queries handed to the grid-wide search."""
        self.queue_steps(ds, dt, answers, nq, stream, budget)
        return self.finish_steps(answers, stream, budget, trace)

    def queue_steps(self, ds, dt, answers, nq: int, stream, budget: int) -> None:
        """The prefilter and the one-warp search of :meth:`launch`, queued in ``stream`` (no wait:
        the host may stage the next chunk meanwhile)."""
        i32, i64 = np.int32, np.int64
        w = self.work_counters
        w.data.memset_async(0, w.nbytes, stream)
        grid = max(1, min(-(-nq // _BLOCK), self.sms * 16))
        with stream:
            if ds.dtype != dt.dtype or ds.dtype not in self.k_pre:
                raise BackendError(f"query ids on the device: int32 or int64 of one type, got {ds.dtype} and {dt.dtype}")
            self.k_pre[ds.dtype]((grid,), (_BLOCK,), (ds, dt, i64(nq), self.comp, self.rec, i32(self.R), i32(self.d),
                                            i32(self.W), answers, self.work, w, self.counters))
            # one warp per query: every undecided pair; w[0] undecided, [1] next, [2] handed on
            self.k_search((self.blocks,), (_BLOCK,),
                          (self.work, w[0:], w[1:], self.indptr, self.indices, self.rec, i32(self.R), i32(self.d),
                           i32(self.W), self.visited, i64(self.vwords), self.queue, i64(self.queue_cap),
                           i64(budget), answers, self.handed_on, w[2:], self.counters), shared_mem=self.smem)

    def finish_steps(self, answers, stream, budget: int, trace=None) -> int:
        """The rest of :meth:`launch` after :meth:`queue_steps`: the grid-wide search for the
        queries handed on (a wait for the stream to read their count), if any can be."""
        if not self.hands_on(budget):
            return 0
        nhard = int(self.work_counters[2:3].get(stream=stream)[0])
        sizes = self.grid.run(self.handed_on, nhard, answers, stream, trace=trace is not None)
        if trace is not None:
            trace.extend(sizes)
        return nhard


class ScratchPool:
    """Free :class:`QueryScratch` of one GPU :class:`Labels`, lent to one batch at a time: a batch
    takes one (or makes one) under the lock and gives it back when its stream is done, so
    concurrent batches never share scratch; the pool keeps as many as ran at once. A batch that
    fails drops its scratch (its stream may still be using it)."""

    def __init__(self, be, L: Labels):
        self.be, self.labels = be, L
        self._lock = threading.Lock()
        self._free: list[QueryScratch] = []

    @contextlib.contextmanager
    def lend(self):
        with self._lock:
            scratch = self._free.pop() if self._free else None
        if scratch is None:
            with self.be.on_device():
                scratch = QueryScratch(self.be, self.labels)
        yield scratch  # not given back if the batch raised
        with self._lock:
            self._free.append(scratch)

    def idle(self) -> list:
        """The scratch not lent now (for tests and benchmarks)."""
        with self._lock:
            return list(self._free)


def ready_scratch(pool: ScratchPool, k: int) -> None:
    """One scratch of ``pool`` made now, with room for chunks of ``k`` pairs and its side
    streams, and given back to the pool: the next batch borrows it ready. What the ``query``
    command does beside the read of a large batch, so the batch's own time is the answer's
    (docs/benchmarks.md, session 29)."""
    with pool.lend() as scratch:
        scratch.buffers(max(1, int(k)))
        scratch.side_streams()
        pool.be.synchronize()


@launcher
def answer_batch_cuda(be, L: Labels, sources, targets, stats: QueryStats | None = None, *,
                      search: SearchOptions | None = None, pool: ScratchPool | None = None, out=None):
    """Every step on ``be``'s GPU for original vertex ids (host int64 or int32 arrays, every id
    already checked to lie in ``0 .. n-1``: ``Index.check_pairs``); returns host bool answers.

    The batch may be of any size: it is cut into chunks of
    :data:`~distgrail.query.staging.CHUNK_PAIRS` pairs that stream through pinned host buffers
    (:func:`~distgrail.query.staging.stream_chunks`), so GPU memory does not grow with the batch. The device scratch is
    borrowed from ``pool`` (one :class:`QueryScratch` per batch running at once), or made for this
    call when ``pool`` is None; the work runs in this thread's current stream on ``be.device``.
    ``out``: a host bool array of the batch's length to answer into (page-locked, e.g. made ahead
    by :func:`~distgrail.query.staging.pinned_answers`, the answers come down into it directly,
    without the pinned answer slots and the host's copy out of them); None: a new array.
    """
    import cupy as cp

    t0 = time.perf_counter()
    budget = (search or SearchOptions()).visit_budget
    sources, targets = _ids(sources), _ids(targets)  # strided columns stay views (staged)
    if sources.shape != targets.shape or sources.ndim != 1:
        raise BackendError(f"answer_batch_cuda: sources and targets of one length, got {sources.shape} and {targets.shape}")
    nq = int(sources.size)
    if out is None:
        out = np.empty(nq, dtype=bool)
    elif out.shape != (nq,) or out.dtype != np.dtype(bool) or not out.flags.c_contiguous or not out.flags.writeable:
        raise BackendError(f"answer_batch_cuda: out must be a writeable contiguous bool array of {nq} answers, "
                           f"got {out.dtype} {out.shape}")
    counts = np.zeros(MAX_ROUNDS + 1, dtype=np.uint64)
    handed = 0
    if pool is None:
        pool = ScratchPool(be, L)
    elif pool.labels is not L:
        raise BackendError("answer_batch_cuda: the scratch pool belongs to other labels")
    if nq:
        with pool.lend() as scratch:
            stream = cp.cuda.get_current_stream()
            scratch.counters.data.memset_async(0, scratch.counters.nbytes, stream)
            chunk = max(1, int(staging.CHUNK_PAIRS))
            if nq <= min(chunk, staging.DIRECT_PAIRS):  # small: the driver stages the copies itself
                ids = sources.dtype if sources.dtype == targets.dtype else np.dtype(np.int64)
                sources, targets = np.ascontiguousarray(sources, ids), np.ascontiguousarray(targets, ids)
                scratch.buffers(nq)
                ds, dt, answers = scratch.ds.view(ids)[:nq], scratch.dt.view(ids)[:nq], scratch.answers[:nq]
                staging.copy_up(ds, sources, stream)
                staging.copy_up(dt, targets, stream)
                handed = scratch.launch(ds, dt, answers, nq, stream, budget)
                staging.copy_down(out, answers, stream)
            else:
                handed = staging.stream_chunks(scratch, sources, targets, out, min(chunk, nq), stream, budget)
            counts = scratch.counters.get(stream=stream)
            stream.synchronize()
    if stats is not None:
        stats.queries += nq
        stats.add_counts(counts)
        stats.reachable += sum(int(counts[c]) for c in POSITIVE)
        stats.search_rounds = max(stats.search_rounds, int(counts[MAX_ROUNDS]))
        stats.grid_searched += handed
        stats.seconds += time.perf_counter() - t0
    return out


def _ids(a) -> np.ndarray:
    """Host vertex ids as the GPU path takes them: int64, or native int32 as it is (strided
    columns stay views: the staging's copy reads them)."""
    a = np.asarray(a)
    return a if a.dtype == np.dtype(np.int32) else a.astype(np.int64, copy=False)
