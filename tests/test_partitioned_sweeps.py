"""The partitioned condensation's passes (distgrail/stages/partitioned_sweeps.py): the array code
against plain loops on the CPU, and on a GPU the kernels of kernels/partitioned_sweeps.cu against
that array code run on CuPy, bit for bit (int32 and int64 ids, empty inputs, several tiles per
block, every edge kept, none kept); the peel's expand and settle against loops and, on a GPU, the
kernels against the array code (the same sets: the kernels append in their atomics' order)."""

from __future__ import annotations

import numpy as np
import pytest

from distgrail.constants import PSW_ROUNDS, PSW_THREADS
from distgrail.gpu.kernels import TEMPLATES, kernel_source
from distgrail.stages import partitioned_sweeps as psw
from distgrail.stages.partitioned_sweeps import ALIVE, NO_LOOP, SAME, ArraySweeps, plan_tiles, sweeps_for


def graph(n, m, seed, dtype=np.int32):
    rng = np.random.default_rng(seed)
    s, d = rng.integers(0, n, m).astype(dtype), rng.integers(0, n, m).astype(dtype)
    d[: m // 10] = s[: m // 10]  # self-loops
    alive = rng.random(n) < 0.7
    color = rng.integers(0, max(n // 8, 1), n).astype(dtype)
    fresh = rng.random(n) < 0.3
    return s, d, alive, color, fresh


def loops(n, s, d, alive, color, fresh):
    keep = {NO_LOOP: [i for i in range(s.size) if s[i] != d[i]],
            ALIVE: [i for i in range(s.size) if alive[s[i]] and alive[d[i]]],
            SAME: [i for i in range(s.size) if color[s[i]] == color[d[i]]]}
    has = np.zeros(2 * n, bool)
    nxt = color.copy()
    back = fresh.copy()
    for u, v in zip(s.tolist(), d.tolist()):
        has[v] = has[n + u] = True
        if fresh[u]:
            nxt[v] = max(nxt[v], color[u])
        if fresh[v]:
            back[u] = True
    return keep, np.packbits(has), nxt, back


@pytest.mark.parametrize("n,m,seed", [(1, 0, 0), (1, 3, 1), (40, 200, 2), (500, 3000, 3)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_array_passes_equal_plain_loops(n, m, seed, dtype):
    s, d, alive, color, fresh = graph(n, m, seed, dtype)
    keep, packed, nxt, back = loops(n, s, d, alive, color, fresh)
    ops = sweeps_for(np)
    assert type(ops) is ArraySweeps
    for mode in (NO_LOOP, ALIVE, SAME):
        gs, gd = ops.filter(mode, s, d, alive=alive, color=color)
        np.testing.assert_array_equal(gs, s[keep[mode]])
        np.testing.assert_array_equal(gd, d[keep[mode]])
        assert gs.dtype == dtype
    np.testing.assert_array_equal(ops.presence(s, d, n), packed)
    got = color.copy()
    ops.colour(s, d, fresh, color, got)
    np.testing.assert_array_equal(got, nxt)
    got = fresh.copy()
    ops.back(s, d, fresh, got)
    np.testing.assert_array_equal(got, back)


def test_a_filter_that_keeps_every_edge_returns_its_inputs():
    s, d = np.array([0, 1, 2], np.int32), np.array([1, 2, 0], np.int32)
    gs, gd = ArraySweeps(np).filter(NO_LOOP, s, d)
    assert gs is s and gd is d


def test_every_kernel_is_instantiated_and_the_tile_is_the_constants():
    src = kernel_source("partitioned_sweeps")
    names = {e.split("<")[0] for e in TEMPLATES["partitioned_sweeps"]}
    assert names == {"dg_psw_presence", "dg_psw_colour", "dg_psw_back", "dg_psw_count", "dg_psw_compact",
                     "dg_psw_expand", "dg_psw_settle", "dg_psw_rowsize", "dg_psw_rowfill",
                     "dg_psw_expand_block", "dg_psw_settle_blocks"}
    for name in names:
        assert f"__global__ void {name}(" in src
    assert psw.TILE == PSW_THREADS * PSW_ROUNDS and "PSW_THREADS * PSW_ROUNDS" in src
    assert plan_tiles(3 * psw.TILE, 1) == (3, 3) and plan_tiles(100 * psw.TILE, 2) == (100, 16)


@pytest.mark.gpu
@pytest.mark.parametrize("n,m,seed", [(1, 0, 0), (7, 5, 1), (1000, 50_000, 2), (300_000, 2_000_000, 3)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("sms", [None, 1])
def test_kernels_equal_the_array_code_bit_for_bit(n, m, seed, dtype, sms, monkeypatch):
    """CudaSweeps against ArraySweeps on CuPy arrays; ``sms=1`` makes at most 8 blocks, so each
    block walks many tiles (the grid-stride loops)."""
    cp = pytest.importorskip("cupy")
    if sms is not None:
        monkeypatch.setattr(psw.CudaSweeps, "_sms", staticmethod(lambda: sms))
    s, d, alive, color, fresh = (cp.asarray(a) for a in graph(n, m, seed, dtype))
    ker, arr = psw.CudaSweeps(cp), ArraySweeps(cp)
    assert type(sweeps_for(cp)) is psw.CudaSweeps
    for mode in (NO_LOOP, ALIVE, SAME):
        a = ker.filter(mode, s, d, alive=alive, color=color)
        b = arr.filter(mode, s, d, alive=alive, color=color)
        for x, y in zip(a, b):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(cp.asnumpy(x), cp.asnumpy(y))
    np.testing.assert_array_equal(cp.asnumpy(ker.presence(s, d, n)), cp.asnumpy(arr.presence(s, d, n)))
    x, y = color.copy(), color.copy()
    ker.colour(s, d, fresh, color, x)
    arr.colour(s, d, fresh, color, y)
    np.testing.assert_array_equal(cp.asnumpy(x), cp.asnumpy(y))
    x, y = fresh.copy(), fresh.copy()
    ker.back(s, d, fresh, x)
    arr.back(s, d, fresh, y)
    np.testing.assert_array_equal(cp.asnumpy(x), cp.asnumpy(y))


@pytest.mark.gpu
def test_kernel_filter_keeping_all_or_none():
    cp = pytest.importorskip("cupy")
    s = cp.arange(10_000, dtype=cp.int32)
    d = (s + 1) % 10_000
    ker = psw.CudaSweeps(cp)
    gs, gd = ker.filter(NO_LOOP, s, d)
    assert gs is s and gd is d
    gs, gd = ker.filter(ALIVE, s, d, alive=cp.zeros(10_000, cp.bool_))
    assert gs.shape == (0,) and gd.shape == (0,) and gs.dtype == cp.int32


def peel_case(n, m, seed, dtype):
    """A CSR by source of random edges (duplicates and self-loops kept), in-degrees, a frontier."""
    rng = np.random.default_rng(seed)
    s, d = rng.integers(0, n, m), rng.integers(0, n, m)
    order = np.argsort(s, kind="stable")
    s, d = s[order], d[order].astype(dtype)
    ptr = np.searchsorted(s, np.arange(n + 1)).astype(np.int64)
    indeg = np.bincount(d, minlength=n).astype(np.int64) + rng.integers(0, 2, n)  # (some stay above 0)
    front = np.flatnonzero(rng.random(n) < 0.3).astype(dtype)
    return ptr, d, indeg, front


def peel_loops(ptr, head, indeg, front, lev, level):
    heads = [int(head[e]) for u in front.tolist() for e in range(ptr[u], ptr[u + 1])]
    indeg = indeg.copy()
    level = level.copy()
    new = set()
    for v in heads:
        indeg[v] -= 1
        if indeg[v] == 0:
            new.add(v)
            level[v] = lev
    return heads, indeg, level, sorted(new)


@pytest.mark.parametrize("n,m,seed", [(1, 0, 0), (1, 3, 1), (40, 200, 2), (500, 3000, 3)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_peel_steps_equal_plain_loops(n, m, seed, dtype):
    ptr, head, indeg, front = peel_case(n, m, seed, dtype)
    level = np.full(n, -1, np.int32)
    heads, w_indeg, w_level, w_front = peel_loops(ptr, head, indeg, front, 5, level)
    ops = ArraySweeps(np)
    t = ops.expand(ptr, head, front)
    assert t.tolist() == heads and t.dtype == dtype
    got = ops.settle(t, indeg, level, 5)
    assert got.tolist() == w_front and got.dtype == dtype
    np.testing.assert_array_equal(indeg, w_indeg)
    np.testing.assert_array_equal(level, w_level)


def rows_loops(s, d, n):
    """The CSR by source of the edges but self-loops, each row's heads in the edges' order."""
    rows = [[] for _ in range(n)]
    for u, v in zip(s.tolist(), d.tolist()):
        if u != v:
            rows[u].append(v)
    return np.cumsum([0] + [len(r) for r in rows]), [h for r in rows for h in r]


@pytest.mark.parametrize("n,m,seed", [(1, 0, 0), (1, 3, 1), (5, 0, 2), (40, 200, 3), (500, 3000, 4)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_rows_equal_plain_loops(n, m, seed, dtype):
    """Self-loops left out, duplicates kept, the heads in the edges' order; ptr int64."""
    rng = np.random.default_rng(seed)
    s, d = rng.integers(0, n, m).astype(dtype), rng.integers(0, n, m).astype(dtype)
    ptr, head = ArraySweeps(np).rows(s, d, n)
    w_ptr, w_head = rows_loops(s, d, n)
    assert ptr.dtype == np.int64 and ptr.shape == (n + 1,) and head.dtype == dtype
    assert ptr.tolist() == w_ptr.tolist() and head.tolist() == w_head


def sorted_rows(ptr, head):
    """Each row's heads sorted (the kernels fill a row in their atomics' order)."""
    ptr, head = np.asarray(ptr), np.asarray(head)
    row = np.repeat(np.arange(ptr.size - 1), np.diff(ptr))
    return head[np.lexsort((head, row))]


@pytest.mark.gpu
@pytest.mark.parametrize("n,m,seed", [(1, 0, 0), (1, 4, 1), (7, 5, 2), (1000, 50_000, 3), (300_000, 2_000_000, 4)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("sms,ordered", [(None, False), (1, False), (None, True)])
def test_rows_kernels_equal_the_array_code(n, m, seed, dtype, sms, ordered, monkeypatch):
    """dg_psw_rowsize / dg_psw_rowfill against the twin on CuPy: ptr bit for bit, each row's
    heads the same multiset; self-loops (one in 20 edges here) left out. ``sorted``: the edges by
    source, as a CSR-stored graph reads (a warp's lanes of one source share one atomic)."""
    cp = pytest.importorskip("cupy")
    if sms is not None:
        monkeypatch.setattr(psw.CudaSweeps, "_sms", staticmethod(lambda: sms))
    rng = np.random.default_rng(seed)
    s, d = rng.integers(0, n, m), rng.integers(0, n, m)
    loop = rng.random(m) < 0.05
    d[loop] = s[loop]
    if ordered:
        order = np.argsort(s, kind="stable")
        s, d = s[order], d[order]
    s, d = cp.asarray(s.astype(dtype)), cp.asarray(d.astype(dtype))
    (pk, hk), (pa, ha) = psw.CudaSweeps(cp).rows(s, d, n), ArraySweeps(cp).rows(s, d, n)
    assert pk.dtype == pa.dtype == cp.int64 and hk.dtype == ha.dtype == s.dtype
    np.testing.assert_array_equal(cp.asnumpy(pk), cp.asnumpy(pa))
    np.testing.assert_array_equal(sorted_rows(cp.asnumpy(pk), cp.asnumpy(hk)),
                                  sorted_rows(cp.asnumpy(pa), cp.asnumpy(ha)))
    assert int(pk[-1]) == m - int((s == d).sum())


@pytest.mark.gpu
@pytest.mark.parametrize("n,m,seed", [(1, 0, 0), (7, 5, 1), (1000, 50_000, 2), (300_000, 2_000_000, 3)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("sms", [None, 1])
def test_peel_kernels_equal_the_array_code(n, m, seed, dtype, sms, monkeypatch):
    """dg_psw_expand / dg_psw_settle against the array code on CuPy: the same heads and next
    frontier as sets (in the atomics' order), the same in-degrees and levels, bit for bit; a
    second level from the buffers the first one used. (A vertex expanded twice could take an
    in-degree below 0, where the kernel and the twin part: the peel never does.)"""
    cp = pytest.importorskip("cupy")
    if sms is not None:
        monkeypatch.setattr(psw.CudaSweeps, "_sms", staticmethod(lambda: sms))
    ptr, head, indeg, front = (cp.asarray(a) for a in peel_case(n, m, seed, dtype))
    ker, arr = psw.CudaSweeps(cp), ArraySweeps(cp)
    lk, la = cp.full(n, -1, cp.int32), cp.full(n, -1, cp.int32)
    ik, ia = indeg.copy(), indeg.copy()
    fk, fa = front, front
    for lev in (1, 2):
        if lev == 2:  # a vertex is expanded once (the peel's rule): the random first frontier's left out
            fk, fa = fk[~cp.isin(fk, front)], fa[~cp.isin(fa, front)]
        tk, ta = ker.expand(ptr, head, fk), arr.expand(ptr, head, fa)
        assert tk.dtype == ta.dtype == head.dtype
        np.testing.assert_array_equal(np.sort(cp.asnumpy(tk)), np.sort(cp.asnumpy(ta)))
        fk, fa = ker.settle(tk, ik, lk, lev), arr.settle(ta, ia, la, lev)
        np.testing.assert_array_equal(np.sort(cp.asnumpy(fk)), cp.asnumpy(fa))
        np.testing.assert_array_equal(cp.asnumpy(ik), cp.asnumpy(ia))
        np.testing.assert_array_equal(cp.asnumpy(lk), cp.asnumpy(la))


def blocks_of(ops, ptr, head, fronts, cap):
    """Every simulated rank's block for its frontier, gathered end to end."""
    return ops.xp.concatenate([ops.expand_block(ptr, head, ops.front(f), cap) for f in fronts])


@pytest.mark.parametrize("cap", [1, 3, 1 << 16])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_block_steps_equal_expand_and_settle(cap, dtype):
    """A peel level in blocks: each block's header the count of heads out of its frontier, its
    first min(count, cap) slots those heads; settled from the gathered blocks (counts at most
    cap) the same in-degrees, levels and next frontier as settle over every head."""
    ptr, head, indeg, _ = peel_case(500, 3000, 7, dtype)
    rng = np.random.default_rng(8)
    fronts = [np.flatnonzero(rng.random(500) < p).astype(dtype) for p in (0.002, 0.004, 0.0)]
    ops = ArraySweeps(np)
    got = blocks_of(ops, ptr, head, fronts, cap)
    L = psw.block_bytes(cap, np.dtype(dtype).itemsize)
    assert got.dtype == np.uint8 and got.size == 3 * L and L % 8 == 0
    heads = [ops.expand(ptr, head, f) for f in fronts]
    counts = ops.block_counts(got, 3)
    assert counts == [h.size for h in heads] and counts[2] == 0
    for r, h in enumerate(heads):
        k = min(h.size, cap)
        assert got[r * L + 8:r * L + 8 + k * h.itemsize].view(dtype).tolist() == h[:k].tolist()
    if max(counts) > cap:
        return  # (csr_levels sends such a level again in larger blocks)
    level, w_level = np.full(500, -1, np.int32), np.full(500, -1, np.int32)
    w_indeg = indeg.copy()
    w_front = ops.settle(np.concatenate(heads), w_indeg, w_level, 4)
    front = ops.settle_blocks(got, 3, cap, np.dtype(dtype), counts, indeg, level, 4)
    assert front.tolist() == w_front.tolist() and front.dtype == dtype
    np.testing.assert_array_equal(indeg, w_indeg)
    np.testing.assert_array_equal(level, w_level)


def dag_case(n, m, seed, dtype):
    """A CSR by source of a random DAG's edges (from the smaller id to the larger; duplicates
    kept), its in-degrees and its sources (the peel's first frontier: no vertex expands twice)."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    s, d = np.minimum(a, b), np.maximum(a, b)
    keep = s != d
    s, d = s[keep], d[keep]
    order = np.argsort(s, kind="stable")
    s, d = s[order], d[order].astype(dtype)
    ptr = np.searchsorted(s, np.arange(n + 1)).astype(np.int64)
    indeg = np.bincount(d, minlength=n).astype(np.int64)
    return ptr, d, indeg, np.flatnonzero(indeg == 0).astype(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("n,m,seed", [(7, 5, 1), (1000, 50_000, 2), (300_000, 2_000_000, 3)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("cap", [3, 1 << 16, 1 << 22])
def test_block_kernels_equal_the_array_code(n, m, seed, dtype, cap):
    """dg_psw_expand_block / dg_psw_settle_blocks against the twin on CuPy: each block's count
    bit for bit and its heads the same multiset (the atomics' order); settled (when every count
    fits) the same in-degrees and levels bit for bit, the next frontier the same set, its size
    on the device; a second level from that frontier as the kernels hold it."""
    cp = pytest.importorskip("cupy")
    ptr, head, indeg, front = (cp.asarray(a) for a in dag_case(n, m, seed, dtype))
    ker, arr = psw.CudaSweeps(cp), ArraySweeps(cp)
    isz = np.dtype(dtype).itemsize
    thirds = [cp.ascontiguousarray(front[j::3]) for j in range(3)]
    fk, fa = [ker.front(f) for f in thirds], thirds
    ik, ia = indeg.copy(), indeg.copy()
    lk, la = cp.full(n, -1, cp.int32), cp.full(n, -1, cp.int32)
    for lev in (1, 2, 3):
        gk = cp.concatenate([ker.expand_block(ptr, head, f, cap) for f in fk])
        ga = cp.concatenate([arr.expand_block(ptr, head, f, cap) for f in fa])
        ck, ca = ker.block_counts(gk, len(fk)), arr.block_counts(ga, len(fa))
        L = psw.block_bytes(cap, isz)
        assert ck == ca and gk.size == ga.size == len(fk) * L
        for r, c in enumerate(ca):
            k = min(c, cap) * isz
            a, b = cp.asnumpy(gk[r * L + 8:r * L + 8 + k]).view(dtype), cp.asnumpy(ga[r * L + 8:r * L + 8 + k]).view(dtype)
            if c <= cap:
                np.testing.assert_array_equal(np.sort(a), np.sort(b))
        if max(ca) > cap:
            return
        nk = ker.settle_blocks(gk, len(fk), cap, np.dtype(dtype), ck, ik, lk, lev)
        na = arr.settle_blocks(ga, len(fa), cap, np.dtype(dtype), ca, ia, la, lev)
        np.testing.assert_array_equal(np.sort(cp.asnumpy(ker.front_ids(nk))), cp.asnumpy(na))
        np.testing.assert_array_equal(cp.asnumpy(ik), cp.asnumpy(ia))
        np.testing.assert_array_equal(cp.asnumpy(lk), cp.asnumpy(la))
        fk, fa = [nk], [na]  # (one rank's frontier: the whole next one)
