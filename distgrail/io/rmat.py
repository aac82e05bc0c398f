"""Graph500 R-MAT graphs (Kronecker generator): the usual stand-in for web and social graphs.

``2^scale`` vertices and ``edge_factor * 2^scale`` directed edges. Every edge descends ``scale``
levels of the adjacency matrix: at each level it falls in the top-left quadrant with probability
``a``, top-right ``b``, bottom-left ``c``, bottom-right ``d = 1 - a - b - c`` (Graph500: .57, .19,
.19, .05), which fixes one bit of the source (bottom: 1) and one of the target (right: 1), most
significant first. Vertex ids are then scrambled by a seeded bijection of ``0..2^scale-1`` (so
the high-degree vertices are not the low ids); self-loops and repeated edges are kept as drawn.

Determinism: edges are made in chunks of :data:`CHUNK_EDGES`; chunk ``k`` draws from its own
bit generator (SFC64, the fastest of NumPy's, seeded by ``SeedSequence(seed, spawn_key=(k,))``),
32 bits per level compared with the quadrant thresholds (``a``, ``a+b``, ``a+b+c`` times 2^32). A
chunk depends on (seed, k) only, so the graph is the same for any number of threads. Chunks are
generated and formatted on a thread pool (the bit generator and the compiled kernels of
:mod:`distgrail.io.rmat_jit` release the GIL) and written in order.

Text output is ``u v`` per line (an edge list, no header), formatted without ``np.savetxt``: the
digits of every id are computed a whole chunk at a time and scattered into one byte array
(:func:`edge_lines`). Binary ``.h5`` output is distgrail's graph file (:mod:`distgrail.io.binary`):
a CSR, so there repeated edges are merged (reachability is the same).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import cores
from ..errors import DistGrailError
from ..hashing import hash_base

__all__ = ["run_generate", "GRAPH500", "CHUNK_EDGES", "RMAT", "rmat_chunk", "scramble", "edge_lines", "write_rmat", "rmat_edges", "rmat_keys",
           "csr_of_keys"]

#: Graph500's quadrant probabilities (a, b, c); d = 1 - a - b - c = .05
GRAPH500 = (0.57, 0.19, 0.19)
#: edges per chunk (one generator each): fixes the graph, so it never depends on the thread count
CHUNK_EDGES = 1 << 16
_MAX_SCALE = 32  # ids fit uint32
_S_SCRAMBLE = 0x524D4154  # hash stream of the scrambling keys ("RMAT")
_MASK64 = (1 << 64) - 1


class RMAT:
    """The parameters of one R-MAT graph, checked. ``n = 2^scale``, ``m = edge_factor * n``."""

    def __init__(self, scale: int, edge_factor: int = 16, seed: int = 0, a: float = GRAPH500[0],
                 b: float = GRAPH500[1], c: float = GRAPH500[2], scramble_ids: bool = True):
        for what, v, lo, hi in (("scale", scale, 1, _MAX_SCALE), ("edge factor", edge_factor, 1, 1 << 20),
                                ("seed", seed, 0, _MASK64)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
                shown = "2^64-1" if hi == _MASK64 else hi  # (the seed: as index, paper and pairs say it)
                raise DistGrailError(f"R-MAT {what} must be an integer in {lo}..{shown}, got {v!r}")
        probs = []
        for what, v in (("a", a), ("b", b), ("c", c)):
            try:
                v = float(v)
            except (TypeError, ValueError):
                raise DistGrailError(f"R-MAT -{what} must be a probability, got {v!r}") from None
            if not 0.0 <= v <= 1.0:
                raise DistGrailError(f"R-MAT -{what} must be in 0..1, got {v!r}")
            probs.append(v)
        if sum(probs) > 1.0 + 1e-12:
            raise DistGrailError(f"R-MAT a + b + c must be at most 1 (d = 1 - a - b - c), got "
                                 f"{probs[0]:g} + {probs[1]:g} + {probs[2]:g} = {sum(probs):g}")
        self.scale, self.edge_factor, self.seed = int(scale), int(edge_factor), int(seed)
        self.a, self.b, self.c = probs
        self.d = max(0.0, 1.0 - sum(probs))
        self.scramble_ids = bool(scramble_ids)
        self.n = 1 << self.scale
        self.m = self.edge_factor * self.n  # Python int: passes 2^31 at scale 27
        cum = np.cumsum(probs)
        #: uint32 draws at or above these fall right of / below the quadrant boundaries
        self.thresholds = tuple(int(min(round(x * 2.0**32), 2**32)) for x in cum)
        self.keys = _scramble_keys(self.seed, self.scale)

    @property
    def n_chunks(self) -> int:
        return -(-self.m // CHUNK_EDGES)

    @property
    def name(self) -> str:
        return (f"rmat-s{self.scale}-e{self.edge_factor}-a{self.a:g}-b{self.b:g}-c{self.c:g}-seed{self.seed}"
                + ("" if self.scramble_ids else "-unscrambled"))


def _scramble_keys(seed: int, scale: int):
    """Odd multipliers and added constants of the scrambling bijection, from the seed."""
    words = [hash_base(seed, _S_SCRAMBLE + i) for i in range(6)]
    mask = (1 << scale) - 1
    return tuple((w | 1) & _MASK64 if i % 2 == 0 else w & mask for i, w in enumerate(words))


def scramble(ids: np.ndarray, scale: int, keys) -> np.ndarray:
    """A seeded bijection of ``0..2^scale-1`` applied to ``ids`` (uint64): three rounds of
    ``x -> x * odd + k mod 2^scale`` (invertible: an odd multiplier is a unit mod 2^scale) and
    ``x -> x ^ (x >> h)`` (invertible on scale-bit words for h >= 1)."""
    x = np.asarray(ids, dtype=np.uint64).copy()
    mask = np.uint64((1 << scale) - 1)
    h = np.uint64(max(1, (scale + 1) // 2))
    with np.errstate(over="ignore"):
        for r in range(3):
            x *= np.uint64(keys[2 * r])
            x += np.uint64(keys[2 * r + 1])
            x &= mask  # mod 2^scale (2^scale divides 2^64, so the wrap is harmless)
            x ^= x >> h
    return x


def _jit():
    """The compiled kernels (:mod:`distgrail.io.rmat_jit`), or None without numba."""
    try:
        from . import rmat_jit
    except ImportError:  # pragma: no cover - numba is a dependency
        return None
    return rmat_jit


def rmat_chunk(p: RMAT, k: int, jit: bool = True):
    """Sources and targets (uint32, or uint64 at scale 32) of chunk ``k``: edges
    ``k * CHUNK_EDGES`` .. up to ``m``; a pure function of (the parameters, k). ``jit=False``:
    the NumPy code (the compiled kernels' twin)."""
    e0 = k * CHUNK_EDGES
    count = min(CHUNK_EDGES, p.m - e0)
    if count <= 0:
        raise DistGrailError(f"R-MAT chunk {k} is past the last edge (m = {p.m})")
    bg = np.random.SFC64(np.random.SeedSequence(p.seed, spawn_key=(k,)))
    draws = bg.random_raw(count * ((p.scale + 1) // 2)).view(np.uint32)  # 32 bits per level
    draws = draws[: count * p.scale].reshape(p.scale, count)
    ta, tab, tabc = (np.uint32(min(t, 2**32 - 1)) for t in p.thresholds)
    full = tuple(t >= 2**32 for t in p.thresholds)  # a threshold of 1.0: nothing reaches it
    dt = np.uint64 if p.scale > 31 else np.uint32
    u = np.zeros(count, dtype=dt)
    v = np.zeros(count, dtype=dt)
    fast = _jit() if jit else None
    if fast is not None:
        fast.levels(draws, ta, tab, tabc, *full, u, v)
        if p.scramble_ids:
            u, v = u.astype(np.uint64), v.astype(np.uint64)
            fast.scramble(u, p.scale, *(np.uint64(x) for x in p.keys))
            fast.scramble(v, p.scale, *(np.uint64(x) for x in p.keys))
            u, v = u.astype(dt), v.astype(dt)
        return u, v
    bit = np.empty(count, dtype=bool)
    tmp = np.empty(count, dtype=bool)
    for lvl in range(p.scale):
        r = draws[lvl]
        np.greater_equal(r, tab, out=bit)  # bottom half (quadrants c, d): source bit 1
        if full[1]:
            bit[:] = False
        u <<= dt(1)
        u |= bit
        # right half (quadrants b, d): r in [a, a+b) or r >= a+b+c
        np.greater_equal(r, ta, out=tmp)
        if full[0]:
            tmp[:] = False
        np.logical_xor(tmp, bit, out=tmp)
        if not full[2]:
            np.greater_equal(r, tabc, out=bit)
            np.logical_xor(tmp, bit, out=tmp)
        v <<= dt(1)
        v |= tmp
    if p.scramble_ids:
        u = scramble(u, p.scale, p.keys).astype(dt)
        v = scramble(v, p.scale, p.keys).astype(dt)
    return u, v


# -- text -------------------------------------------------------------------------------------

_POW10 = np.array([10**i for i in range(20)], dtype=np.uint64)


def edge_lines(u: np.ndarray, v: np.ndarray, jit: bool = True) -> np.ndarray:
    """The bytes of ``"u v\\n"`` for every edge, as one uint8 array; compiled
    (:mod:`distgrail.io.rmat_jit`), or with ``jit=False`` whole-array operations: the digit count
    of every id, each line's offset by a cumulative sum, then each digit place scattered."""
    fast = _jit() if jit else None
    if fast is not None:
        return fast.edge_lines(np.ascontiguousarray(u), np.ascontiguousarray(v))
    u = np.asarray(u, dtype=np.uint64)
    v = np.asarray(v, dtype=np.uint64)
    k = u.size
    if k == 0:
        return np.zeros(0, dtype=np.uint8)
    lu = np.searchsorted(_POW10[1:], u, side="right").astype(np.int64) + 1  # digits of u
    lv = np.searchsorted(_POW10[1:], v, side="right").astype(np.int64) + 1
    length = lu + lv + 2
    end = np.cumsum(length)
    out = np.empty(int(end[-1]), dtype=np.uint8)
    start = end - length
    out[start + lu] = 32  # the space
    out[end - 1] = 10  # the newline
    for vals, first, ln in ((u, start, lu), (v, start + lu + 1, lv)):
        last = first + ln - 1  # the units digit's position; digit j (from the right) at last - j
        x = vals.copy()
        for j in range(int(ln.max())):
            live = ln > j
            if live.all():
                out[last - j] = (x % np.uint64(10)).astype(np.uint8) + 48
            else:
                out[(last - j)[live]] = (x[live] % np.uint64(10)).astype(np.uint8) + 48
            x //= np.uint64(10)
    return out


# -- the whole graph --------------------------------------------------------------------------

def _threads(threads):
    if threads is None:
        return cores.usable()
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise DistGrailError(f"threads must be an integer >= 1, got {threads!r}")
    return int(threads)


def _in_order(pool, fn, n_items, window):
    """``fn(0), fn(1), ...`` computed on ``pool`` at most ``window`` ahead, yielded in order."""
    futs = {}
    for i in range(n_items):
        while len(futs) < window and i + len(futs) < n_items:
            j = i + len(futs)
            futs[j] = pool.submit(fn, j)
        yield futs.pop(i).result()


def rmat_edges(p: RMAT, threads=None):
    """All edges of ``p`` as (src, dst) uint32 (uint64 at scale 32) arrays, chunks on threads."""
    t = _threads(threads)
    dt = np.uint64 if p.scale > 31 else np.uint32
    src = np.empty(p.m, dtype=dt)
    dst = np.empty(p.m, dtype=dt)

    def one(k):
        u, v = rmat_chunk(p, k)
        src[k * CHUNK_EDGES: k * CHUNK_EDGES + u.size] = u
        dst[k * CHUNK_EDGES: k * CHUNK_EDGES + u.size] = v

    with ThreadPoolExecutor(t, thread_name_prefix="distgrail-rmat") as pool:
        for _ in _in_order(pool, one, p.n_chunks, 4 * t):
            pass
    return src, dst


def rmat_keys(p: RMAT, threads=None, done=None):
    """Every edge of ``p`` as one uint64 key ``source << 32 | target`` (the order the ``.h5``
    graph's CSR sorts by), chunks on threads: 8 bytes an edge (separate source and target arrays
    and the keys made from them held 16). ``done(k)``: called with each chunk's edge count, in
    order (progress)."""
    t = _threads(threads)
    keys = np.empty(p.m, dtype=np.uint64)

    def one(k):
        u, v = rmat_chunk(p, k)
        seg = keys[k * CHUNK_EDGES: k * CHUNK_EDGES + u.size]
        np.left_shift(u.astype(np.uint64), np.uint64(32), out=seg)
        np.bitwise_or(seg, v, out=seg)
        return u.size

    with ThreadPoolExecutor(t, thread_name_prefix="distgrail-rmat") as pool:
        for k in _in_order(pool, one, p.n_chunks, 4 * t):
            if done is not None:
                done(k)
    return keys


def write_rmat(p: RMAT, path, fmt: str, threads=None, progress: bool = False) -> dict:
    """Write the graph of ``p`` to ``path`` as ``"edgelist"`` (text, ``u v`` per line) or
    ``"h5"`` (binary graph file); atomically. Returns timings and counts. ``progress``: the
    edges generated (and for ``.h5`` the sort and the write) shown on stderr
    (:class:`distgrail.progress.Share`, :class:`~distgrail.progress.Steps`)."""
    from ..progress import Share, Steps
    from .atomic import atomic_path

    t0 = time.perf_counter()
    nthreads = _threads(threads)
    path = os.fspath(path)
    if fmt == "h5":
        with Share(progress, p.m, "generate rmat", unit="edges") as share:
            keys = rmat_keys(p, nthreads, done=share.update)
        tg = time.perf_counter() - t0
        from .binary import write_binary_csr

        with Steps(progress, total=["sort into rows", "write"], desc="distgrail: generate rmat") as steps:
            with steps.stage("sort into rows"):
                indptr, indices = csr_of_keys(p.n, keys, nthreads)
                del keys  # (the indices live in its memory)
            with steps.stage("write"):
                write_binary_csr(path, p.n, indptr, indices, name=p.name)
        return {"generate_seconds": tg, "write_seconds": time.perf_counter() - t0 - tg, "threads": nthreads,
                "m_stored": int(indices.size)}
    if fmt != "edgelist":
        raise DistGrailError(f"R-MAT graphs are written as an edge list (text) or .h5, not {fmt!r}")

    def one(k):
        t = time.perf_counter()
        u, v = rmat_chunk(p, k)
        t1 = time.perf_counter()
        return edge_lines(u, v), t1 - t, time.perf_counter() - t1

    gen = fmt_s = 0.0  # thread-seconds generating and formatting
    with atomic_path(path) as tmp, open(tmp, "wb") as f, \
            ThreadPoolExecutor(nthreads, thread_name_prefix="distgrail-rmat") as pool, \
            Share(progress, p.m, "generate rmat", unit="edges") as share:
        f.write(f"# distgrail edge list: {p.n} vertices, {p.m} edges\n".encode())  # (io.dialect.DECLARED)
        for k, (out, tg, tf) in enumerate(_in_order(pool, one, p.n_chunks, 4 * nthreads)):
            gen, fmt_s = gen + tg, fmt_s + tf
            f.write(memoryview(out))
            share.update(min(CHUNK_EDGES, p.m - k * CHUNK_EDGES))
    total = time.perf_counter() - t0
    share = gen / (gen + fmt_s) if gen + fmt_s else 0.0  # the wall time split as the work was
    return {"generate_seconds": total * share, "write_seconds": total * (1 - share), "threads": nthreads,
            "m_stored": p.m}


#: the bucket sort's buckets: 2^12 ranges of sources, sorted on threads
BUCKET_BITS = 12
#: keys a bucket each thread's slice holds at least (fewer threads on fewer keys): the slices'
#: counts and places then cost at most half the keys' bytes, whatever ``threads``
MIN_SLICE_KEYS_PER_BUCKET = 4


def csr_of_keys(n: int, keys: np.ndarray, threads=None, jit: bool = True):
    """``(indptr int64, indices)`` (ids of :func:`~distgrail.io.graph.id_dtype`) of the distinct
    edges in ``keys`` (uint64 ``source << 32 | target``, sources below ``n``), successors sorted,
    self-loops kept. ``keys`` is spent: the indices are written into its memory.

    Compiled (:mod:`distgrail.io.rmat_jit`): the keys bucket-sorted by their sources' top
    :data:`BUCKET_BITS` bits (counts and scatter on threads, a slice each), each bucket sorted
    (NumPy's sort releases the GIL) and made distinct on threads; buckets hold disjoint ranges of
    sources, so their degree counts never meet. Peak: the keys twice (16 bytes an edge) and the
    row pointers. The whole-array sort it replaces (``jit=False``, the twin) is one thread, and
    its distinct copy and ``bincount``'s int64 temporaries took about 30 bytes an edge."""
    from .graph import id_dtype

    idt = id_dtype(n)
    fast = _jit() if jit else None
    m = int(keys.size)
    if fast is None or m == 0:
        return _csr_numpy(n, keys)
    bits = int(max(n, 1) - 1).bit_length()  # (the bits of a source)
    nb = 1 << min(bits, BUCKET_BITS)
    shift = np.uint64(32 + bits - min(bits, BUCKET_BITS))  # key >> shift: the bucket
    # slices of at least MIN_SLICE_KEYS_PER_BUCKET keys a bucket: each slice's counts and places are
    # nb words each, so '--threads 100000' took threads x buckets words (gigabytes at scale 12)
    T = max(1, min(_threads(threads), m // (MIN_SLICE_KEYS_PER_BUCKET * nb)))
    bounds = np.arange(T + 1, dtype=np.int64) * m // T
    counts = np.zeros((T, nb), dtype=np.int64)
    indptr = np.zeros(n + 1, dtype=np.int64)
    degree = indptr[1:]
    with ThreadPoolExecutor(T, thread_name_prefix="distgrail-csr") as pool:
        list(pool.map(lambda t: fast.key_counts(keys, bounds[t], bounds[t + 1], shift, counts[t]), range(T)))
        start = np.zeros(nb + 1, dtype=np.int64)
        np.cumsum(counts.sum(axis=0), out=start[1:])
        at = start[:-1] + np.cumsum(counts, axis=0) - counts  # slice t's first place in bucket b
        out = np.empty_like(keys)
        list(pool.map(lambda t: fast.key_scatter(keys, bounds[t], bounds[t + 1], shift, at[t], out), range(T)))

        def one(b):
            out[start[b]:start[b + 1]].sort()
            return fast.distinct_degrees(out, start[b], start[b + 1], degree)

        distinct = np.fromiter(pool.map(one, range(nb)), dtype=np.int64, count=nb)
        first = np.zeros(nb + 1, dtype=np.int64)
        np.cumsum(distinct, out=first[1:])
        indices = keys.view(idt)[:int(first[-1])]  # (every key is in out now)
        list(pool.map(lambda b: fast.distinct_targets(out, start[b], start[b + 1], indices, first[b]), range(nb)))
    np.cumsum(degree, out=degree)
    return indptr, indices


def _csr_numpy(n: int, keys: np.ndarray):
    """:func:`csr_of_keys`'s twin: one sort of the whole array, its distinct copy, ``bincount``."""
    from .graph import id_dtype

    keys.sort()
    if keys.size:
        keep = np.empty(keys.size, dtype=bool)
        keep[0] = True
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
        keys = keys[keep]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount((keys >> np.uint64(32)).astype(np.int64), minlength=n), out=indptr[1:])
    return indptr, (keys & np.uint64(0xFFFFFFFF)).astype(id_dtype(n))


def run_generate(args, fmt: str):
    """``distgrail generate rmat``: write the graph; returns (JSON summary, the line for humans)."""
    if args.scale is None:
        raise DistGrailError("generate rmat: give the scale, --scale S (2^S vertices)")
    if fmt not in ("edgelist", "h5"):
        raise DistGrailError(f"generate rmat writes an edge list (.txt, ...) or a binary graph (.h5), not {fmt!r}")
    p = RMAT(args.scale, args.edge_factor, seed=args.seed, a=args.a, b=args.b, c=args.c)
    if fmt == "h5":  # (built whole in memory: '--scale 32 -o r.h5' ran out of memory, '--dims too large')
        from ..dtypes import size_problem

        why = size_problem(p.n, p.m)
        if why:
            raise DistGrailError(f"generate rmat --scale {p.scale} --edge-factor {p.edge_factor} -o {args.output}: "
                                 f"{why}; a .h5 graph is built whole in memory, an edge list (.txt) is written "
                                 "as it is generated")
    t = time.perf_counter()
    r = write_rmat(p, args.output, fmt, threads=args.threads, progress=not args.quiet)
    wall = time.perf_counter() - t
    summary = {"output": os.path.abspath(args.output), "kind": "rmat", "scale": p.scale, "edge_factor": p.edge_factor,
               "n": p.n, "m": p.m, "m_stored": r["m_stored"], "a": p.a, "b": p.b, "c": p.c, "d": round(p.d, 12),
               "seed": p.seed, "threads": r["threads"], "seconds": round(wall, 6),
               "generate_seconds": round(r["generate_seconds"], 6), "write_seconds": round(r["write_seconds"], 6),
               "edges_per_second": round(p.m / wall) if wall else None}
    merged = f", {r['m_stored']:,} distinct" if r["m_stored"] != p.m else ""
    return summary, (f"{args.output}: rmat scale {p.scale}, {p.n:,} vertices, {p.m:,} edges{merged} "
                     f"({wall:.2f} s, {p.m / max(wall, 1e-9) / 1e6:.1f} M edges/s, {r['threads']} threads)")
