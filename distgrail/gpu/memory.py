"""GPU memory and the launchers' device: checking an estimate against what is free before a
launcher allocates, running a launcher on its backend's device, and turning CuPy's
out-of-memory error into a :class:`~distgrail.errors.BackendError` that says what to do."""

from __future__ import annotations

import functools

import numpy as np

from .. import settings
from ..errors import BackendError
from .sweep import cupy

__all__ = ["gpu_memory_limit", "GpuMemoryError", "ensure_fits", "launcher", "oom_guard", "check_ids", "offset_dtype", "pieces", "drop_in_pieces", "condense_gpu_problem",
           "gpu_bytes_needed", "available_gpu_bytes", "gpu_fit_problem", "PoolPeak"]


class GpuMemoryError(BackendError):
    """A graph or a step does not fit the GPU's memory (an estimate against what is free): the
    build stops with this error (exit status 2) instead of switching to the CPU path, which is
    for ``--backend cpu`` to choose."""


def gpu_memory_limit(value=None) -> int | None:
    """``DISTGRAIL_GPU_MEMORY_LIMIT``: bytes this process may use on its GPU (``20e9``, ``20G``,
    ``512M``; unset or empty: no cap). Honoured by the free-memory checks and by CuPy's pool
    (:func:`distgrail.gpu.backend.get_backend` sets its limit), so N ranks can share one GPU.

    >>> gpu_memory_limit("20G"), gpu_memory_limit("1.5e9"), gpu_memory_limit("")
    (21474836480, 1500000000, None)
    """
    name = "DISTGRAIL_GPU_MEMORY_LIMIT"
    return settings.get(name) if value is None else settings.parse(name, str(value))


def _capped(avail: int, cp) -> int:
    cap = gpu_memory_limit()
    return avail if cap is None else min(avail, max(cap - int(cp.get_default_memory_pool().used_bytes()), 0))


def ensure_fits(nbytes: int, what: str) -> None:
    """Raise :class:`GpuMemoryError` (a :class:`BackendError`) with the estimate if ``nbytes`` cannot be allocated now on the
    current device (free device memory plus what CuPy's pool holds unused)."""
    cp = cupy()
    dev = cp.cuda.Device()
    free, total = dev.mem_info
    avail = _capped(free + cp.get_default_memory_pool().free_bytes(), cp)
    if nbytes > avail:
        raise GpuMemoryError(f"{what} needs about {nbytes / 2**30:.2f} GiB of GPU memory, but only "
                           f"{avail / 2**30:.2f} GiB of {total / 2**30:.2f} GiB are free on GPU "
                           f"{dev.id}; use --backend cpu or a larger GPU")


def _oom_message(name, e):
    return f"{name}: GPU out of memory ({e}); use --backend cpu or a larger GPU"


def oom_guard(fn):
    """CuPy's out-of-memory error in ``fn`` becomes a :class:`BackendError`."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        cp = cupy()
        try:
            return fn(*args, **kwargs)
        except cp.cuda.memory.OutOfMemoryError as e:
            raise BackendError(_oom_message(fn.__name__, e)) from None

    return wrapper


def launcher(fn):
    """Decorator of a stage's CUDA launcher ``fn(be, ...)``: it runs on ``be.device`` (not on
    whatever device is current), and an out-of-memory error becomes a :class:`BackendError`."""
    @functools.wraps(fn)
    def wrapper(be, *args, **kwargs):
        cp = cupy()
        with cp.cuda.Device(be.device):
            try:
                return fn(be, *args, **kwargs)
            except cp.cuda.memory.OutOfMemoryError as e:
                raise BackendError(_oom_message(fn.__name__, e)) from None

    return wrapper


def check_ids(indices, what):
    if indices.dtype != np.int32:
        raise BackendError(f"the GPU backend needs int32 vertex ids ({what} has dtype {indices.dtype}); "
                           "graphs of 2^31 or more components must use --backend cpu")


# -- widths and limits, as pure functions of the sizes (the limits are parameters, so tests can
# -- force small ones and check the choices the real sizes would make) ---------------------------

def offset_dtype(count: int, limit: int = 2**31 - 1):
    """dtype of positions and prefix sums over ``count`` items (edge positions, scans of per-edge
    flags, CSR offsets): int32 while every value 0..count fits ``limit``, else int64.

    >>> offset_dtype(10).__name__, offset_dtype(2**31 + 5).__name__, offset_dtype(10, limit=4).__name__
    ('int32', 'int64', 'int64')
    """
    return np.int32 if int(count) <= int(limit) else np.int64


def pieces(count: int, limit: int = 2**31 - 1):
    """``(lo, hi)`` ranges splitting ``count`` items into pieces of at most ``limit`` (library calls
    such as CuPy's scan or sort that index with 32 bits get one piece at a time).

    >>> list(pieces(7, 3)), list(pieces(0, 3))
    ([(0, 3), (3, 6), (6, 7)], [])
    """
    count, limit = int(count), max(1, int(limit))
    return [(lo, min(lo + limit, count)) for lo in range(0, count, limit)]


def condense_gpu_problem(n: int, m: int, id_limit: int = 2**31 - 1) -> str | None:
    """None when GPU condensation takes ``n`` vertices and ``m`` edges, else why not. Vertex ids
    are signed 32-bit on the GPU (-1 marks an undecided vertex), so ``n`` must stay below
    ``id_limit``; the edge count has no such limit (offsets, scans and sorts go 64-bit or in
    pieces past 2^31 - 1). Graphs of 2^31 - 1 or more vertices are condensed on the CPU, whose
    ids widen to int64.

    >>> condense_gpu_problem(1000, 2**31 + 5) is None
    True
    >>> condense_gpu_problem(2**31, 10)[:40]
    'GPU condensation keeps vertex ids in int'
    """
    if int(n) >= int(id_limit):
        return (f"GPU condensation keeps vertex ids in int32 and needs fewer than {int(id_limit):,} vertices "
                f"(got n={int(n):,}); the CPU path widens ids to int64")
    return None


#: device bytes the wide condensation (past 2^31 - 1 edges: row buckets) takes beyond 24 per edge:
#: one bucket's sort scratch (about 2 GiB), counted apart since CuPy's pool peaked above the
#: count without it (docs/benchmarks.md)
WIDE_EXTRA = 2 << 30


def gpu_bytes_needed(n: int, m: int, dims: int, K: int, wide_limit: int = 2**31 - 1, C: int | None = None,
                     m_dag: int | None = None, held_edges: bool = True) -> int:
    """Peak GPU bytes of a one-GPU build of ``n`` vertices and ``m`` input edges with ``dims``
    label dimensions and ``K`` support vertices, the condensed DAG having ``C`` components and
    ``m_dag`` edges (default n and m: an upper bound; before condensation, ``m_dag=0`` gives what
    is needed for sure). Derived from the code, stage by stage:

    * fixed: 576 MiB (the parse's chunk ring and per-chunk token tables, 32 MiB chunks: about
      15 chunk sizes; the sort's own scratch: 64 MiB);
    * parsed edges: int32 src and dst, 8 bytes per edge, held through the build;
    * condensation (kernels/condense.cu, :func:`~distgrail.stages.condense.condense_bytes`; of
      unsorted edges, as text gives them: a sorted ``.h5`` graph needs 8 bytes per edge before
      its condensed edges' keys, sorted as below, as many as every edge of an acyclic one): a
      64-bit key per edge, the sort's second buffer (8) and the previous step's int32 column
      array (4): 20 bytes per edge; past ``wide_limit`` edges the scan of the keep flags is
      int64 and keys, scan, new and old column arrays make 24 (the row-bucket sort there: keys,
      bucketed copy and old column array, 20, plus one bucket's scratch of about 2 GiB, less
      than the other 4 bytes per edge); about sixteen int32 / int64 arrays per vertex: 64
      bytes per vertex;
    * phases 1-5, with the condensed DAG resident (forward and reverse CSR: 8 bytes per edge,
      24 per vertex with comp and level): the COO rows of the small levels (4 per edge), the
      forest and phase-1/2 scratch (45 per vertex), phase 3's ranks (16 dims + 80) then phase
      4's intervals (lo, hi and their stacked copy: 32 dims, one group of at most 8 dims of
      int32 pairs: 8 min(dims, 8)), the post-order ranks kept between them (8 dims), and phase
      5's reach masks beside them (out and in: 16 ceil(K / 64), plus 32 of schedule).

    So: need = 576 MiB + 8 m + max(20 m (24 m + 2 GiB past 2^31 - 1 edges) + 64 n,
    12 m_dag + (101 + 8 dims + max(16 dims + 80, 32 dims + 8 min(dims, 8)) + 16 ceil(K / 64)) C).
    ``held_edges=False``: the parsed edges are handed to the condensation
    (:func:`~distgrail.stages.condense.condense_cuda_of`, one process reading a file onto the GPU),
    which lets go of them once their keys are made: need = 576 MiB + max(16 m, the condensation's
    term, the labeling's term), the 16 bytes the edges and their keys at once.
    Examples: dims 5, K 64: 28 bytes per edge and 64 per vertex, or 20 per edge and 357 per
    vertex (of the DAG), whichever is larger, plus 576 MiB; past 2^31 - 1 edges 32 bytes per edge
    and 2 GiB of bucket scratch (``WIDE_EXTRA``). The formula worked out for the R-MAT graphs and
    checked against CuPy's pool peak (``distgrail index --json``: ``gpu_pool_peak_bytes``):
    docs/benchmarks.md. The pool also holds cached blocks, which it frees and retries with when
    an allocation fails.

    >>> gpu_bytes_needed(0, 0, 5, 64) == 576 << 20
    True
    >>> gpu_bytes_needed(10, 2**31 + 5, 5, 0) - gpu_bytes_needed(10, 2**31 + 5, 5, 0, wide_limit=2**32) == 4 * (2**31 + 5) + 2**31
    True
    """
    n, m, dims, K = int(n), int(m), max(int(dims), 0), max(int(K), 0)
    fixed = 576 << 20
    condense = (24 * m + WIDE_EXTRA if m > int(wide_limit) else 20 * m) + 64 * n
    per_vertex = 101 + 8 * dims + max(16 * dims + 80, 32 * dims + 8 * min(dims, 8)) + 16 * (-(-K // 64))
    C = n if C is None else int(C)
    m_dag = m if m_dag is None else int(m_dag)
    labeling = 12 * m_dag + per_vertex * C
    if not held_edges:  # (handed over: at most the parsed edges and their keys, 16 bytes, before the sort)
        return fixed + max(16 * m, condense, labeling)
    return fixed + 8 * m + max(condense, labeling)


def available_gpu_bytes(share: int = 1) -> tuple[int, int, int]:
    """``(available, total, device id)`` of the current GPU: free memory plus what CuPy's pool
    holds unused. ``share``: the processes sharing the GPU
    (:func:`~distgrail.mpi.binding.ranks_on_this_gpu`); this one counts that share of the device's
    free memory, but all of its own pool's unused blocks (no other process can take them, and
    theirs are not in the free memory), and then ``DISTGRAIL_GPU_MEMORY_LIMIT``, already one
    process's cap, as it is."""
    cp = cupy()
    dev = cp.cuda.Device()
    free, total = dev.mem_info
    mine = int(free) // max(1, int(share)) + int(cp.get_default_memory_pool().free_bytes())
    return _capped(mine, cp), int(total), int(dev.id)


class PoolPeak:
    """Context: the high-water marks of CuPy's default memory pool while it is active -- ``used``
    (bytes in live arrays: what :func:`gpu_bytes_needed` estimates) and ``held`` (taken from the
    device, cached blocks included) -- by wrapping the allocator (one Python call per allocation).
    Nothing is tracked when ``active`` is false or CuPy cannot be imported (no GPU stack)."""

    def __init__(self, active: bool = True):
        self.active = bool(active)

    def report(self) -> dict | None:
        """``{"used": bytes, "held": bytes}``, or None when nothing was tracked."""
        return {"used": self.used, "held": self.held} if self._cp is not None else None

    def __enter__(self):
        self.used = self.held = 0
        self._cp = None
        if not self.active:
            return self
        try:
            import cupy as cp
        except ImportError:
            return self
        pool, before = cp.get_default_memory_pool(), cp.cuda.get_allocator()

        def malloc(size):
            mem = before(size)
            self.used = max(self.used, int(pool.used_bytes()))
            self.held = max(self.held, int(pool.total_bytes()))
            return mem

        self._cp, self._before = cp, before
        cp.cuda.set_allocator(malloc)
        return self

    def __exit__(self, *exc):
        if self._cp is not None:
            self._cp.cuda.set_allocator(self._before)
        return False


#: the ways out of a refusal on one GPU
WAYS_OUT = ("use --backend cpu (host memory, slower), a GPU with more memory, fewer --dims / --supports, or a "
            "partitioned build across GPUs (MPI ranks, index --partition on)")
#: the ways out of a refusal inside a partitioned build
WAYS_OUT_PARTITIONED = ("use more MPI ranks (each holds about 1/N of the edges), GPUs with more memory, fewer --dims / "
                        "--supports, or --backend cpu (host memory, slower)")


def gpu_fit_problem(need: int, have: int, what: str, where: str = "the GPU", ways: str = WAYS_OUT) -> str | None:
    """None when ``need`` bytes fit in ``have``, else the refusal: need against have, and the
    ways out (``ways``).

    >>> gpu_fit_problem(10, 20, "x") is None
    True
    >>> "--backend cpu" in gpu_fit_problem(3 << 30, 2 << 30, "indexing g.txt")
    True
    """
    if int(need) <= int(have):
        return None
    return f"{what} needs about {need / 2**30:,.1f} GiB of GPU memory, {where} has {have / 2**30:,.1f} GiB available; {ways}"


# -- library calls in pieces: CuPy's scan and reductions index with 32 bits (cupy/cupy#9841: a
# -- cumsum past 2^31 elements returns its input), so arrays longer than ``limit`` go piecewise.
# -- The functions take NumPy or CuPy arrays (``xp``), so the NumPy twins run the same code.

def scan_in_pieces(xp, flags, dtype, limit: int = 2**31 - 1):
    """Inclusive prefix sum of ``flags`` as ``dtype``, one library scan per piece of at most
    ``limit`` items, each piece offset by the last sum of the pieces before it.

    >>> scan_in_pieces(np, np.array([1, 0, 1, 1, 1], np.uint8), np.int64, limit=2).tolist()
    [1, 1, 2, 3, 4]
    """
    out = xp.empty(int(flags.shape[0]), dtype=dtype)
    for lo, hi in pieces(out.shape[0], limit):
        xp.cumsum(flags[lo:hi], dtype=dtype, out=out[lo:hi])
        if lo:
            out[lo:hi] += out[lo - 1]
    return out


def scan_in_place(xp, a, limit: int = 2**31 - 1):
    """``a`` replaced by its inclusive prefix sum (its own dtype), a working piece at a time
    (:func:`working_piece`): each piece's library scan is a copy of the piece, not of ``a``, so
    the peak is ``a`` and a sixteenth of it (:func:`scan_in_pieces` holds a second whole array).

    >>> a = np.array([1, 0, 1, 1, 1], np.int32); scan_in_place(np, a, limit=2).tolist(), a.tolist()
    ([1, 1, 2, 3, 4], [1, 1, 2, 3, 4])
    """
    for lo, hi in pieces(int(a.shape[0]), working_piece(int(a.shape[0]), limit)):
        part = xp.cumsum(a[lo:hi], dtype=a.dtype)
        if lo:
            part += a[lo - 1]
        a[lo:hi] = part
    return a


def max_in_pieces(xp, a, limit: int = 2**31 - 1) -> int:
    """Largest value of the non-empty ``a``, one library reduction per piece.

    >>> max_in_pieces(np, np.array([3, 9, 2, 7]), limit=3)
    9
    """
    return max(int(a[lo:hi].max()) for lo, hi in pieces(a.shape[0], limit))


def min_in_pieces(xp, a, limit: int = 2**31 - 1) -> int:
    """Smallest value of the non-empty ``a``, one library reduction per piece.

    >>> min_in_pieces(np, np.array([3, 9, 2, 7]), limit=3)
    2
    """
    return min(int(a[lo:hi].min()) for lo, hi in pieces(a.shape[0], limit))


def select_in_pieces(xp, a, mask, limit: int = 2**31 - 1):
    """``a[mask]`` (boolean mask), one library selection per working piece (:func:`working_piece`:
    a library selection holds a scan of its mask and its own result beside the output, so whole
    pieces of ``limit`` held more than the result again); past one piece each is written into one
    array sized by a count first (no parts concatenated: the result is held once).

    >>> select_in_pieces(np, np.arange(5), np.array([1, 0, 1, 1, 0], bool), limit=2).tolist()
    [0, 2, 3]
    """
    spans = pieces(a.shape[0], working_piece(int(a.shape[0]), limit))
    if len(spans) <= 1:
        return a[mask] if spans else a[:0]
    counts = [int(xp.count_nonzero(mask[lo:hi])) for lo, hi in spans]
    out = xp.empty((sum(counts),) + tuple(a.shape[1:]), dtype=a.dtype)
    at = 0
    for (lo, hi), c in zip(spans, counts):
        if c:
            out[at:at + c] = a[lo:hi][mask[lo:hi]]
        at += c
    return out


#: the least entries a working piece takes (:func:`working_piece`: about a sixteenth of the array,
#: at most ``limit``): each piece's library call holds its own copy beside the result
SELECT_CHUNK_MIN = 1 << 20


def working_piece(size: int, limit: int = 2**31 - 1) -> int:
    """Items a piece of a library call over ``size`` items takes where the call holds copies of
    its piece (a scan, a selection): about a sixteenth of them, at least :data:`SELECT_CHUNK_MIN`,
    at most ``limit``.

    >>> working_piece(2**32) == 2**28, working_piece(100), working_piece(2**40) == 2**31 - 1
    (True, 1048576, True)
    """
    return min(max(1, int(limit)), max(SELECT_CHUNK_MIN, -(-int(size) // 16)))


def drop_in_pieces(xp, a, value, limit: int = 2**31 - 1, most: int | None = None):
    """``a[a != value]`` in one array sized by a count first (the pieces' selections are written
    into it, not concatenated), one library call per piece; ``a`` itself when more than ``most``
    entries would stay. A piece is about a sixteenth of ``a`` (at least :data:`SELECT_CHUNK_MIN`,
    at most ``limit``): its mask, the library's scan of it and its selection are held beside ``a``
    and the result, so the peak is about the result and a sixteenth of ``a`` working (whole pieces
    held the result twice: CudaSteps.mapped_csr's drop past its old whole sort's peak).

    >>> drop_in_pieces(np, np.array([5, 1, 5, 2, 3]), 5, limit=2).tolist()
    [1, 2, 3]
    >>> drop_in_pieces(np, np.array([5, 1, 5, 2, 3]), 5, most=2).tolist()
    [5, 1, 5, 2, 3]
    """
    size = int(a.shape[0])
    spans = pieces(size, working_piece(size, limit))
    counts = [int(xp.count_nonzero(a[lo:hi] != value)) for lo, hi in spans]
    if most is not None and sum(counts) > most:
        return a
    out = xp.empty(sum(counts), dtype=a.dtype)
    at = 0
    for (lo, hi), c in zip(spans, counts):
        if c:
            piece = a[lo:hi]
            out[at:at + c] = piece[piece != value]
        at += c
    return out
