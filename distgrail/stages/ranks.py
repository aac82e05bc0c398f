"""Phase 3 (top-down): post-order rank of the forest DT under dimension i's sibling order.

Siblings (and roots) are ordered by the uint64 counter hash of (seed, dimension, vertex),
compared as integers. For a fixed (seed, dimension) the hash is a bijection of the vertex id
(:mod:`distgrail.hashing`), so (parent, hash) is a total order: no ties, no tie rule.
A vertex's post-order rank is ``start + size - 1`` where ``start`` is the first rank of its
subtree: the sum, over the path to its root, of the sizes of earlier siblings.
"""

from __future__ import annotations

import math
import os

import numpy as np

from .. import cores
from ..constants import GRID_THREADS
from ..hashing import STREAM_DIM0, hash3, hash_base
from ..gpu.memory import ensure_fits, launcher
from ..gpu.sweep import cupy, kernel, sm_count
from ..jit import restarts
from .deep import compiled_sweeps, n_levels

__all__ = ["post_order_ranks", "post_order_ranks_numpy", "post_order_ranks_cpu", "post_order_ranks_cuda",
           "sibling_keys", "sibling_offsets", "offsets_in_key_order", "offsets_in_key_order_cuda", "ranks_bytes"]


def sibling_keys(C: int, seed: int, dim: int) -> np.ndarray:
    """The sibling key (uint64) of every vertex in dimension ``dim``."""
    return hash3(seed, STREAM_DIM0 + dim, np.arange(C, dtype=np.int64))


def offsets_in_key_order(parent, size, key):
    """Sum of the sizes of the siblings placed before each vertex when the children of each
    parent are ordered by ``key`` (distinct uint64 values, compared as integers)."""
    C = parent.size
    order = np.lexsort((key, parent))  # by parent, then key: separate arrays, each its own dtype
    s = size[order]
    par = parent[order]
    cs = np.cumsum(s)
    new_group = np.ones(C, dtype=bool)
    new_group[1:] = par[1:] != par[:-1]
    group_first = np.flatnonzero(new_group)
    gid = np.cumsum(new_group) - 1
    base = (cs - s)[group_first]
    off = np.empty(C, dtype=np.int64)
    off[order] = cs - s - base[gid]
    return off


def sibling_offsets(parent, size, seed: int, dim: int):
    """Sum of the sizes of the siblings placed before each vertex in dimension ``dim``."""
    return offsets_in_key_order(parent, size, sibling_keys(parent.size, seed, dim))


def post_order_ranks_numpy(parent, size, level_ptr, seed, dims):
    """NumPy twin: post-order ranks, shape (len(dims), C)."""
    C = parent.size
    out = np.empty((len(dims), C), dtype=np.int64)
    lp = level_ptr.tolist()
    for k, dim in enumerate(dims):
        start = sibling_offsets(parent, size, seed, dim)
        for lev in range(1, len(lp) - 1):
            a, b = lp[lev], lp[lev + 1]
            start[a:b] += start[parent[a:b]]
        out[k] = start + size - 1
    return out


#: components from which the CPU backend orders siblings with linear compiled passes
#: (:mod:`distgrail.stages.ranks_jit`) rather than ``np.lexsort``: numba's import and cache
#: load cost less than the sorts save above it (docs/benchmarks.md, session 43)
COMPILED_RANKS_COMPONENTS = 1 << 19
#: most dimensions ordered at once on the CPU (each holds ~56 bytes a component of work space;
#: :func:`_threads` also keeps them within half the free memory)
_RANKS_THREADS = 8
_BYTES_PER_COMPONENT = 56


def _threads(C: int, dims: int) -> int:
    """Threads for phase 3 on the CPU: one a dimension, at most a core each, at most
    :data:`_RANKS_THREADS`, and their work space within half the free memory."""
    k = min(dims, cores.usable(), _RANKS_THREADS)
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # (not every system says)
        return max(1, k)
    return max(1, min(k, free // (2 * _BYTES_PER_COMPONENT * max(C, 1))))


def _compiled_offsets(parent, size, seed):
    """A function ``dim -> sibling offsets`` of the compiled passes, or None (small forest, or
    numba does not load): the twin's :func:`sibling_offsets`, the same numbers. Its passes raise
    :class:`~distgrail.jit.CompileFailed` where they fail to compile (:func:`distgrail.jit.guard`):
    the first here, warming them up, the caller's then again without them."""
    if parent.size < COMPILED_RANKS_COMPONENTS:
        return None
    from ..constants import GOLDEN, MIX1, MIX2
    from ..jit import guard, load

    jit = guard(load(f"{__package__}.ranks_jit", "sibling order", stacklevel=6), "sibling order")
    if jit is None:
        return None
    parent = np.ascontiguousarray(parent)
    size = np.ascontiguousarray(size)
    buckets = jit.parent_buckets(parent)
    words = np.uint64(GOLDEN), np.uint64(MIX1), np.uint64(MIX2)
    one = np.full(1, -1, dtype=parent.dtype)  # compiled (or loaded) here, before threads call it
    jit.sibling_offsets_into(np.empty(1, np.int64), one, np.ones(1, size.dtype), jit.parent_buckets(one),
                             np.uint64(0), *words)

    def offsets(dim):
        out = np.empty(parent.size, dtype=np.int64)
        jit.sibling_offsets_into(out, parent, size, buckets, np.uint64(hash_base(seed, STREAM_DIM0 + dim)), *words)
        return out
    return offsets


@restarts
def post_order_ranks_cpu(parent, size, level_ptr, seed, dims):
    """The CPU backend's phase 3: the twin's numbers. Large forests order siblings by compiled
    linear passes (:mod:`distgrail.stages.ranks_jit`); on a deep forest
    (:mod:`distgrail.stages.deep`) the root-path sums run in one compiled pass per dimension. A
    compiled pass that fails to compile: all again without its module
    (:func:`~distgrail.jit.restarts`)."""
    compiled = _compiled_offsets(parent, size, seed)
    jit = compiled_sweeps(n_levels(level_ptr))
    if compiled is None and jit is None:
        return post_order_ranks_numpy(parent, size, level_ptr, seed, dims)
    offsets = compiled or (lambda dim: sibling_offsets(parent, size, seed, dim))
    lp = np.asarray(level_ptr).tolist()
    dims = list(dims)
    out = np.empty((len(dims), parent.size), dtype=np.int64)

    def one(k):
        start = offsets(dims[k])
        if jit is not None:
            jit.add_parent_starts(start, parent, int(level_ptr[1]))
        else:
            for lev in range(1, len(lp) - 1):
                a, b = lp[lev], lp[lev + 1]
                start[a:b] += start[parent[a:b]]
        np.add(start, size - 1, out=out[k])

    threads = _threads(parent.size, len(dims)) if compiled else 1
    if threads <= 1:
        for k in range(len(dims)):
            one(k)
        return out
    from concurrent.futures import ThreadPoolExecutor

    ex = ThreadPoolExecutor(threads)  # the compiled passes release the GIL
    try:
        for f in [ex.submit(one, k) for k in range(len(dims))]:
            f.result()
    finally:  # an error or an interrupt: the dimensions not started are dropped, not waited for
        ex.shutdown(wait=False, cancel_futures=True)
    return out


def post_order_ranks(be, parent, size, level_ptr, seed, dims):
    """Phase 3 on backend ``be`` for the dimensions ``dims`` (``parent``, ``size`` on its device)."""
    return be.pick(post_order_ranks_cpu, post_order_ranks_cuda)(parent, size, level_ptr, seed, dims)


# -- CUDA launcher (kernels/ranks.cu) ------------------------------------------------------------

def ranks_bytes(C: int, k: int) -> int:
    """Estimated GPU bytes that :func:`post_order_ranks_cuda` allocates for ``k`` dimensions: the
    ranks, the pointer-jumping buffer and the per-dimension sort scratch."""
    return int(16 * k * C + 80 * C)


def _grid(C):
    return (max(1, min(-(-C // GRID_THREADS), sm_count() * 32)),), (GRID_THREADS,)


def sibling_keys_cuda(C: int, seed: int, dim: int):
    """Device twin of :func:`sibling_keys` (``dg_sibling_key``)."""
    cp = cupy()
    key = cp.empty(C, dtype=cp.uint64)
    if C:
        gs, bs = _grid(C)
        kernel("ranks", "dg_sibling_key")(gs, bs, (key, np.int64(C), np.uint64(hash_base(seed, STREAM_DIM0 + dim))))
    return key


def offsets_in_key_order_cuda(parent, size, key, out=None):
    """Device twin of :func:`offsets_in_key_order` (keys distinct): the keys' ranks by an argsort
    of the uint64 keys, then one argsort of ``(parent + 1) * C + rank``, unique per vertex."""
    cp = cupy()
    C = parent.size
    out = cp.empty(C, dtype=cp.int64) if out is None else out
    if C == 0:
        return out
    rk = cp.empty(C, dtype=cp.int64)
    rk[cp.argsort(key)] = cp.arange(C, dtype=cp.int64)
    order = cp.argsort((parent + 1) * C + rk)
    del rk
    s = size[order]
    excl = cp.cumsum(s) - s
    del s
    par = parent[order]
    new_group = cp.ones(C, dtype=cp.bool_)
    new_group[1:] = par[1:] != par[:-1]
    del par
    first = cp.flatnonzero(new_group)
    gid = cp.cumsum(new_group) - 1
    out[order] = excl - excl[first][gid]
    return out


@launcher
def post_order_ranks_cuda(be, parent, size, level_ptr, seed, dims):
    """GPU twin of :func:`post_order_ranks_numpy`: shape (len(dims), C)."""
    cp = cupy()
    dims = [int(d) for d in dims]
    k = len(dims)
    C = parent.size
    ensure_fits(ranks_bytes(C, k), f"phase 3 of {k} dimension(s) of a forest of {C:,} components")
    out = cp.empty((k, C), dtype=cp.int64)
    if C == 0 or k == 0:
        return out
    L = int(np.asarray(level_ptr).size) - 1
    for i, dim in enumerate(dims):
        key = sibling_keys_cuda(C, seed, dim)
        offsets_in_key_order_cuda(parent, size, key, out=out[i])
        del key
    # start = sum of the offsets along the root path: pointer jumping, all dimensions at once
    rounds = math.ceil(math.log2(L)) if L > 1 else 0
    if rounds:
        gs, bs = _grid(C)
        jump = kernel("ranks", "dg_jump")
        anc = parent.astype(cp.int32)
        anc2 = cp.empty_like(anc)
        tmp = cp.empty_like(out)
        a, b = out, tmp
        for _ in range(rounds):
            jump(gs, bs, (a, b, anc, anc2, np.int64(C), np.int32(k)))
            a, b = b, a
            anc, anc2 = anc2, anc
        out = a
        del b, tmp, anc, anc2
    out += size - 1
    return out
