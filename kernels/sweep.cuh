// Level sweeps shared by the stage kernels (forest.cu, subtree.cu, intervals.cu).
//
// Components are numbered by level, so level l is the id range level_ptr[l]:level_ptr[l+1] and
// its CSR rows are one contiguous edge range. Every sweep kernel processes `nlev` levels l0,
// l0+step, ...: launched as ONE block it walks all of them with a __syncthreads() between levels
// (many small levels per launch: deep DAGs are not launch-bound); launched as a grid it gets
// exactly one (large) level (distgrail/gpu/sweep.py plans the launches). Inside a level the rows
// and edges are split evenly over the threads by a merge-path search over (row ends, edges), so a
// hub row is shared by many threads (load balance for skewed degrees); a thread folds the edges
// it owns of one row into a register accumulator and merges it into the row's value with one
// atomic (min / max / add are order-independent on integers, so results are deterministic).
//
// Values written in the same launch are read with __ldcg (L2, never a stale L1 line).
#pragma once
#include "common.cuh"

// saturating add on 0..DG_CAP (twin of distgrail/satmath.py)
__device__ __forceinline__ u64 sat_add(u64 a, u64 b) {  // a, b <= CAP: no wrap
    u64 s = a + b;
    return s > DG_CAP ? DG_CAP : s;
}
__device__ __forceinline__ void atomic_sat_add(u64* p, u64 v) {
    u64 old = *((volatile u64*)p), assumed;
    do {
        assumed = old;
        old = atomicCAS((unsigned long long*)p, assumed, sat_add(assumed, v));
    } while (old != assumed);
}

// Merge-path split of one level's (rows a..b-1, their edges) among nthr threads; calls
// op.edge(acc, e, row) for owned edges and op.flush(acc, row) once per (thread, row) touched.
template <class Op>
__device__ __forceinline__ void sweep_level(const i64* __restrict__ ptr, i64 a, i64 b, i64 tid, i64 nthr, Op& op) {
    const i64 nrows = b - a;
    if (nrows <= 0) return;
    const i64 e0 = ptr[a];
    const i64 nnz = ptr[b] - e0;
    const i64 items = nrows + nnz;
    const i64 per = (items + nthr - 1) / nthr;
    const i64 d0 = tid * per;
    if (d0 >= items) return;
    const i64 d1 = min(d0 + per, items);
    i64 lo = max(d0 - nnz, (i64)0), hi = min(d0, nrows);
    while (lo < hi) {
        i64 mid = (lo + hi) >> 1;
        if (ptr[a + mid + 1] - e0 <= d0 - mid - 1) lo = mid + 1; else hi = mid;
    }
    i64 x = lo, y = d0 - lo;
    i64 rend = x < nrows ? ptr[a + x + 1] - e0 : nnz;
    typename Op::Acc acc;
    op.reset(acc);
    bool have = false;
    for (i64 d = d0; d < d1; ++d) {
        if (y < rend) {
            op.edge(acc, e0 + y, a + x);
            have = true;
            ++y;
        } else {
            if (have) op.flush(acc, a + x);
            op.reset(acc);
            have = false;
            ++x;
            rend = x < nrows ? ptr[a + x + 1] - e0 : nnz;
        }
    }
    if (have) op.flush(acc, a + x);
}

template <class Op>
__device__ __forceinline__ void sweep_levels(const i64* __restrict__ level_ptr, const i64* __restrict__ ptr,
                                             int l0, int step, int nlev, Op& op) {
    const bool one_block = gridDim.x == 1;
    const i64 tid = one_block ? threadIdx.x : blockIdx.x * (i64)blockDim.x + threadIdx.x;
    const i64 nthr = one_block ? blockDim.x : (i64)gridDim.x * blockDim.x;
    for (int k = 0; k < nlev; ++k) {
        const int l = l0 + k * step;
        sweep_level(ptr, level_ptr[l], level_ptr[l + 1], tid, nthr, op);
        if (one_block) __syncthreads();
    }
}

// Runs of small levels, edge-parallel: thread t takes edges e0+t, e0+t+nthr, ... of the level.
// The row of an edge comes from rng.row (a COO row array, a search in the level's row pointers,
// or the parent array for phase 2). Everything that depends only on the structure (the next level's bounds,
// the thread's first edge, its row and child) is loaded while the current level's values are in
// flight, so a level costs about one L2 round trip, the atomics and the barrier. (Measured on
// the 100k-level DAG: combining lanes of one row by warp shuffles before the atomics, and finding
// rows by search instead of a COO row array, each made a level slower, not faster.)
// Launched as a grid (one level, nlev = 1) it is the plain edge-parallel pass.
struct Lev {
    i64 a, b, e0, e1;  // rows a..b-1, edges e0..e1-1
};

template <class Op, class Rng>
__device__ __forceinline__ void sweep_edges(const i64* __restrict__ level_ptr, int l0, int step, int nlev, Op& op,
                                            const Rng& rng) {
    const bool one_block = gridDim.x == 1;
    const i64 tid = one_block ? threadIdx.x : blockIdx.x * (i64)blockDim.x + threadIdx.x;
    const i64 nthr = one_block ? blockDim.x : (i64)gridDim.x * blockDim.x;
    Lev lev = rng.level(level_ptr, l0);
    i64 e = lev.e0 + tid, row = -1, key = 0;
    if (e < lev.e1) { row = rng.row(lev, e); key = op.key(e); }
    for (int k = 0; k < nlev; ++k) {
        typename Op::Acc acc;
        op.reset(acc);
        const bool have = e < lev.e1;
        if (have) op.fold(acc, key, row);  // value load issued here
        Lev nlv = lev;
        i64 nrow = -1, nkey = 0;
        if (k + 1 < nlev) {  // prefetch the next level's structure
            nlv = rng.level(level_ptr, l0 + (k + 1) * step);
            if (nlv.e0 + tid < nlv.e1) { nrow = rng.row(nlv, nlv.e0 + tid); nkey = op.key(nlv.e0 + tid); }
        }
        if (have) op.flush(acc, row);
        for (i64 x = e + nthr; x < lev.e1; x += nthr) {  // levels wider than the block
            const i64 r = rng.row(lev, x);
            op.reset(acc);
            op.fold(acc, op.key(x), r);
            op.flush(acc, r);
        }
        if (one_block) __syncthreads();
        lev = nlv;
        e = nlv.e0 + tid;
        row = nrow;
        key = nkey;
    }
}

// edges of level l are the CSR entries of its rows; the row of entry e by binary search
struct CsrRange {
    const i64* ptr;
    __device__ Lev level(const i64* lp, int l) const {
        Lev v;
        v.a = lp[l];
        v.b = lp[l + 1];
        v.e0 = ptr[v.a];
        v.e1 = ptr[v.b];
        return v;
    }
    __device__ i64 row(const Lev& v, i64 e) const {  // last r in [a, b) with ptr[r] <= e
        i64 lo = v.a, hi = v.b - 1;
        while (lo < hi) {
            const i64 mid = (lo + hi + 1) >> 1;
            if (ptr[mid] <= e) lo = mid; else hi = mid - 1;
        }
        return lo;
    }
};

// the same with a COO row array (4 bytes per edge, one load instead of a search)
struct CsrRows {
    const i64* ptr;
    const int* rows;
    __device__ Lev level(const i64* lp, int l) const { return CsrRange{ptr}.level(lp, l); }
    __device__ i64 row(const Lev&, i64 e) const { return rows[e]; }
};

// row of every CSR entry (one warp per row); compiled into each stage module that includes this
// header, and fetched from the calling stage's module by distgrail.gpu.sweep.rows_if_needed
extern "C" __global__ void dg_csr_rows(const i64* ptr, int* rows, i64 C) {
    const int lane = threadIdx.x & 31;
    const i64 warp = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 v = warp; v < C; v += nwarps)
        for (i64 e = ptr[v] + lane; e < ptr[v + 1]; e += 32) rows[e] = (int)v;
}

