"""NumPy or CuPy: which array module holds an array, and an array on the host; large host
copies and reductions spread over threads.

The partitioned stages and searches are written once against an array module ``xp`` (NumPy on
the CPU backend, CuPy on a GPU backend); these two helpers are what they share. CuPy is imported
only when a CuPy array is met.

:func:`copy_parallel` and :func:`max_parallel` cut a large host array into pieces for a shared
pool of threads (NumPy drops the GIL inside a copy or a reduction of a numeric array): one
thread copies host memory at a few GB/s, well below what the memory or a GPU's upload takes, so a
query batch's pinned staging and its id check went at one core's speed (docs/benchmarks.md)."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

from . import cores

__all__ = ["to_host", "array_module", "csr_positions", "spans", "sorted_distinct", "unique", "scatter_max", "scatter_min",
           "scatter_at", "copy_parallel", "copy_many_parallel", "prefault_beside", "populate", "interleaved_rows", "max_parallel", "HOST_PIECE_BYTES"]

#: a piece of a parallel host copy or reduction: smaller arrays stay on the calling thread
HOST_PIECE_BYTES = 8 << 20
#: threads of the shared host pool (at most; fewer on smaller machines)
HOST_THREADS = 16
_pool = None
_pool_lock = threading.Lock()


def _host_pool():
    global _pool
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor

            _pool = ThreadPoolExecutor(max(1, min(HOST_THREADS, cores.usable())), thread_name_prefix="distgrail-host")
        return _pool


def _forget_pool():
    """In a forked child: the parent's pool threads do not exist there; a fresh pool is made."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _run_pieces(fn, pieces) -> list:
    """``[fn(*args) for args in pieces]`` on the shared host threads; every piece is waited for
    before a failure is raised (no thread still writes into the caller's arrays then), an
    interrupt too: pieces not begun are cancelled, those running finish first."""
    from concurrent.futures import wait

    futures = [_host_pool().submit(fn, *args) for args in pieces]
    try:
        wait(futures)
    except BaseException:
        for f in futures:
            f.cancel()
        wait(futures)
        raise
    return [f.result() for f in futures]


def interleaved_rows(a: np.ndarray, b: np.ndarray):
    """The (k, 2) rows, int64 or int32, whose two columns ``a`` and ``b`` are (views of one
    C-ordered array, as a mapped (k, 2) ``.npy`` gives: one pass over the rows reads both), or
    None."""
    w = a.itemsize
    if (a.dtype == b.dtype and a.dtype in (np.dtype(np.int64), np.dtype(np.int32)) and a.ndim == b.ndim == 1
            and a.size == b.size and a.size and a.strides == b.strides == (2 * w,)
            and b.ctypes.data == a.ctypes.data + w):
        return np.lib.stride_tricks.as_strided(a, shape=(a.size, 2), strides=(2 * w, w), writeable=False)
    return None


def _pieces(n: int, itemsize: int, piece_bytes: int | None = None):
    """``[(lo, hi), ...]`` covering ``0..n``: one piece per thread, none under ``piece_bytes``
    (default HOST_PIECE_BYTES)."""
    k = max(1, min(HOST_THREADS, cores.usable(), (n * itemsize) // (piece_bytes or HOST_PIECE_BYTES)))
    cuts = [n * i // k for i in range(k + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def copy_parallel(dst: np.ndarray, src: np.ndarray, piece_bytes: int | None = None) -> None:
    """``dst[...] = src`` for 1-D host arrays of equal length (cast as NumPy casts; ``src`` may be
    strided), in pieces of at least ``piece_bytes`` (default HOST_PIECE_BYTES) over the shared
    host threads when the copy is large."""
    copy_many_parallel([(dst, src)], piece_bytes)


def copy_many_parallel(copies, piece_bytes: int | None = None) -> None:
    """:func:`copy_parallel` of several ``(dst, src)`` pairs at once: the pieces of all of them
    go to the host threads together (two columns of a few pieces each keep every thread busy,
    where one copy after the other would leave half of them idle)."""
    tasks = []
    for dst, src in copies:
        if dst.shape != src.shape or dst.ndim != 1:
            raise ValueError(f"copy_parallel: 1-D arrays of one length, got {dst.shape} and {src.shape}")
        tasks += [(dst[a:b], src[a:b], "unsafe")
                  for a, b in _pieces(int(dst.size), max(dst.itemsize, src.itemsize), piece_bytes)]
    if len(tasks) == 1:
        np.copyto(*tasks[0])
    elif tasks:
        _run_pieces(np.copyto, tasks)


#: madvise advice that faults a range's pages in, writable, without touching them (Linux 5.14)
_MADV_POPULATE_WRITE = 23


def _madvise_populate(lo: int, length: int) -> None:
    """``madvise(lo, length, MADV_POPULATE_WRITE)``; its failure (an older kernel: EINVAL) ignored."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(length), _MADV_POPULATE_WRITE)


def _fresh_pages(a: np.ndarray):
    """``(lo, hi)``: the whole pages inside ``a`` when it is a fresh host array (owns its memory,
    C-contiguous, writeable, not a file's mapping, on Linux), else None."""
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    fresh = (a.flags.owndata and a.flags.c_contiguous and a.flags.writeable and not isinstance(a, np.memmap)
             and sys.platform.startswith("linux"))
    lo = -(-a.ctypes.data // page) * page
    hi = (a.ctypes.data + a.nbytes) // page * page
    return (lo, hi, page) if fresh and hi > lo else None


def populate(a: np.ndarray) -> None:
    """Fault in the pages of a fresh host array ``a`` (:func:`prefault_beside`'s rule) now, over
    the shared host threads, each one ``madvise(MADV_POPULATE_WRITE)`` over a page-aligned piece:
    a copy that then locks ``a``'s pages for DMA (``cudaHostRegister``, one thread in the driver)
    finds them mapped instead of faulting each in. Contents untouched; small arrays, other arrays,
    other OSes and older kernels: nothing is done."""
    got = _fresh_pages(a)
    if got is None or got[1] - got[0] < 2 * HOST_PIECE_BYTES:
        return
    lo, hi, page = got
    pages = (hi - lo) // page
    cuts = [lo + page * (pages * i // k) for k in [len(_pieces(hi - lo, 1))] for i in range(k + 1)]
    try:
        _run_pieces(lambda a0, a1, held=a: _madvise_populate(a0, a1 - a0), list(zip(cuts[:-1], cuts[1:])))
    except Exception:  # noqa: BLE001 - an optimisation only: the copy faults the pages in instead
        pass


def prefault_beside(a: np.ndarray):
    """Fault in the pages of a fresh host array ``a`` (one that owns its memory, C-contiguous and
    writeable, not a file's mapping) on a thread of its own: one ``madvise(MADV_POPULATE_WRITE)``
    over the whole pages inside it, the kernel mapping and zeroing them in one call, not one trap
    a page as the first writes would; whoever fills ``a`` then writes into mapped pages. Its
    contents are not touched. Returns the wait for it, which the caller must make before ``a``
    may go. Any other array (a view, a mapping, read-only), another OS or an older kernel: nothing
    is done."""
    got = _fresh_pages(a)
    if got is None:
        return lambda: None
    lo, hi, _ = got

    def run(held=a):  # (holds the array until the call is done)
        try:
            _madvise_populate(lo, hi - lo)
        except Exception:  # noqa: BLE001 - an optimisation only: the writes fault the pages in instead
            pass

    th = threading.Thread(target=run, name="distgrail-prefault", daemon=True)
    try:
        th.start()
    except RuntimeError:  # no thread to be had: the writes fault the pages in
        return lambda: None
    return th.join


#: ids a thread of :func:`narrow_parallel` checks, then copies, at a time (512 KiB of int64: in
#: its core's L2 cache between the two)
NARROW_BLOCK = 1 << 16


def narrow_parallel(copies, below: int, piece_bytes: int | None = None) -> bool:
    """``dst[...] = src`` for each ``(dst, src)`` of 1-D integer host arrays of equal length, each
    piece's ids first checked to lie in ``0..below-1`` (:func:`as_unsigned`'s one maximum) by the
    thread that then copies it, while the piece is in its cache: one pass over ``src`` where a
    check, then a copy, were two. False when any id lies outside (the ``dst`` then partly
    written, to be dropped)."""
    def one(dst, src):
        for lo in range(0, src.size, NARROW_BLOCK):  # (a block checked, then copied from the cache)
            block = src[lo:lo + NARROW_BLOCK]
            if int(as_unsigned(block, below).max()) >= below:
                return False
            dst[lo:lo + NARROW_BLOCK] = block
        return True

    tasks = [(dst[lo:hi], src[lo:hi]) for dst, src in copies
             for lo, hi in _pieces(int(src.size), src.itemsize, piece_bytes)]
    return all(_run_pieces(one, tasks))


def max_parallel(a: np.ndarray):
    """``a.max()`` of a non-empty 1-D host array, in pieces over the shared host threads when it
    is large."""
    parts = _pieces(int(a.size), a.itemsize)
    if len(parts) == 1:
        return a.max()
    return max(_run_pieces(np.max, [(a[lo:hi],) for lo, hi in parts]))


def as_unsigned(ids: np.ndarray, below: int) -> np.ndarray:
    """Integer host ids as unsigned values ``u`` with ``u < below`` exactly when the id is in
    ``0..below-1`` (a negative id becomes huge): a view of native int32 (when ``below <= 2^31``),
    int64 and unsigned ids, else widened to int64 first. One maximum then checks both ends."""
    if ids.dtype == np.dtype(np.int32) and below <= 2**31:
        return ids.view(np.uint32)
    if ids.dtype == np.dtype(np.int64):
        return ids.view(np.uint64)
    if ids.dtype.kind == "u" and ids.dtype.isnative:
        return ids
    return ids.astype(np.int64).view(np.uint64)


def to_host(a) -> np.ndarray:
    """``a`` as a NumPy array: itself when it is one, else copied from its device (``a.get()``)."""
    return a if isinstance(a, np.ndarray) else a.get()


def array_module(a):
    """``numpy`` for NumPy arrays and scalars, ``cupy`` for CuPy arrays."""
    if isinstance(a, (np.ndarray, np.generic, int, float, bool)):
        return np
    if type(a).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def csr_positions(xp, ptr, rows, which: bool = False):
    """Positions in a CSR (offsets ``ptr``) of the entries of ``rows``, row by row (int64); with
    ``which``, also the index in ``rows`` of each entry's row (what ``repeat(arange(rows.size),
    degrees)`` gives, without CuPy's ``repeat``, which takes its counts through the host)."""
    start = ptr[rows]
    pos, r = spans(xp, start, ptr[rows + 1] - start)
    return (pos, r) if which else pos


def spans(xp, start, count):
    """Positions ``start[i] .. start[i] + count[i] - 1`` for every i, in order (int64), and the i
    of each: on NumPy by ``repeat`` (O(total)), on CuPy by a search of the running counts (no
    counts through the host)."""
    cs = xp.cumsum(count)
    total = int(cs[-1]) if cs.size else 0
    if total == 0:
        none = xp.zeros(0, dtype=xp.int64)
        return none, none
    e = xp.arange(total, dtype=xp.int64)
    if xp is np:
        r = np.repeat(np.arange(start.size, dtype=np.int64), count)
        return np.repeat(start - (cs - count), count) + e, r
    r = xp.searchsorted(cs, e, side="right")
    return start[r] + e - (cs[r] - count[r]), r


def sorted_distinct(xp, a):
    """``a`` (1-D) sorted in place and without repeats: a sort and a neighbour comparison. Not
    ``xp.unique``: it copies, and NumPy 2.3+ answers a plain ``np.unique`` of integers by hashing,
    far slower than this sort (docs/benchmarks.md)."""
    a.sort()
    if a.shape[0] < 2:
        return a
    keep = xp.empty(a.shape[0], dtype=xp.bool_)
    keep[0] = True
    xp.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def unique(xp, a):
    """The sorted distinct values of ``a`` (what ``xp.unique(a)`` gives; ``a`` is left alone):
    :func:`sorted_distinct` of a flat copy."""
    return sorted_distinct(xp, xp.array(a, copy=True).ravel())


def scatter_max(xp, a, idx, vals) -> None:
    """``a[idx[i]] = max(a[idx[i]], vals[i])`` for every i, repeated indices included
    (``maximum.at``: NumPy's, and CuPy's since CuPy 13; cupyx.scatter_max warns as deprecated)."""
    scatter_at(xp, "maximum", a, idx, vals)


def scatter_min(xp, a, idx, vals) -> None:
    """``a[idx[i]] = min(a[idx[i]], vals[i])`` for every i, repeated indices included."""
    scatter_at(xp, "minimum", a, idx, vals)


def scatter_at(xp, op, a, idx, vals) -> None:
    """``xp.<op>.at(a, idx, vals)``: the ufunc ``op`` ("maximum", "minimum", "add", "bitwise_or")
    applied in place at ``idx``, repeated indices included."""
    getattr(xp, op).at(a, idx, vals)  # (CuPy has ufunc.at since 13; the GPU extras need 13 or later)
