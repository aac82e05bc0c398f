// GPU labeling, phases 1-4 (twins: forest.py, subtree.py, ranks.py, intervals.py).
//
// Level sweeps. Components are numbered by level, so level l is the id range
// level_ptr[l]:level_ptr[l+1] and its CSR rows are one contiguous edge range. Every sweep kernel
// processes `nlev` levels l0, l0+step, ...: launched as ONE block it walks all of them with a
// __syncthreads() between levels (many small levels per launch: deep DAGs are not launch-bound);
// launched as a grid it gets exactly one (large) level. Inside a level the rows and edges are split
// evenly over the threads by a merge-path search over (row ends, edges), so a hub row is shared by
// many threads (load balance for skewed degrees); a thread folds the edges it owns of one row into
// a register accumulator and merges it into the row's value with one atomic (min / max / add are
// order-independent on integers, so results are deterministic).
//
// Values written in the same launch are read with __ldcg (L2, never a stale L1 line).
#include "common.cuh"

#define DG_CAP (1ULL << 62)

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

// row of every CSR entry (one warp per row)
extern "C" __global__ void dg_csr_rows(const i64* ptr, int* rows, i64 C) {
    const int lane = threadIdx.x & 31;
    const i64 warp = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 v = warp; v < C; v += nwarps)
        for (i64 e = ptr[v] + lane; e < ptr[v + 1]; e += 32) rows[e] = (int)v;
}

// phase 2: the "edges" of level l are its vertices, each merged into its DT parent
struct ParentRange {
    const i64* parent;
    __device__ Lev level(const i64* lp, int l) const {
        Lev v;
        v.a = v.e0 = lp[l];
        v.b = v.e1 = lp[l + 1];
        return v;
    }
    __device__ i64 row(const Lev&, i64 e) const { return parent[e]; }
};

// ---------------------------------------------------------------------------------------------
// Phase 2: size[v] = 1 + sum of size over DT children. size starts at 1.
struct SizeOp {
    i64* size;
    typedef i64 Acc;
    __device__ void reset(Acc& a) { a = 0; }
    __device__ i64 key(i64 e) const { return e; }
    __device__ void fold(Acc& a, i64 v, i64) { a += __ldcg(size + v); }
    __device__ void flush(Acc& a, i64 row) { atomicAdd((unsigned long long*)(size + row), (unsigned long long)a); }
};

// phase 2 without a children CSR: child levels deepest first, size[parent[v]] += size[v]
extern "C" __global__ void __launch_bounds__(1024) dg_size_levels(const i64* level_ptr, int l0, int step, int nlev,
                                                                  const i64* parent, i64* size) {
    SizeOp op{size};
    sweep_edges(level_ptr, l0, step, nlev, op, ParentRange{parent});
}

// ---------------------------------------------------------------------------------------------
// dfs rule: zeta[v] = min(1 + sum zeta[children], CAP). zeta starts at 1.
struct ZetaOp {
    const int* idx;
    u64* zeta;
    typedef u64 Acc;
    __device__ void reset(Acc& a) { a = 0; }
    __device__ i64 key(i64 e) const { return idx[e]; }
    __device__ void fold(Acc& a, i64 c, i64) { a = sat_add(a, __ldcg(zeta + c)); }
    __device__ void edge(Acc& a, i64 e, i64 r) { fold(a, key(e), r); }
    __device__ void flush(Acc& a, i64 row) { atomic_sat_add(zeta + row, a); }
};

extern "C" __global__ void __launch_bounds__(1024) dg_sweep_zeta(const i64* level_ptr, int l0, int step, int nlev,
                                                                 const i64* indptr, const int* indices, u64* zeta) {
    ZetaOp op{indices, zeta};
    sweep_levels(level_ptr, indptr, l0, step, nlev, op);
}

extern "C" __global__ void __launch_bounds__(1024) dg_small_zeta(const i64* level_ptr, int l0, int step, int nlev,
                                                                 const i64* indptr, const int* indices,
                                                                 const int* rows, u64* zeta) {
    ZetaOp op{indices, zeta};
    sweep_edges(level_ptr, l0, step, nlev, op, CsrRows{indptr, rows});
}

// dfs rule: zex[e] = min(sum of zeta over the children before e in its CSR row, CAP).
// One warp per row, a saturating warp scan (associative on 0..CAP), chunks of 32 with a carry.
extern "C" __global__ void dg_zeta_exclusive(const i64* indptr, const int* indices, const u64* zeta,
                                             u64* zex, i64 C) {
    const int lane = threadIdx.x & 31;
    const i64 warp = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 v = warp; v < C; v += nwarps) {
        const i64 e0 = indptr[v], e1 = indptr[v + 1];
        u64 carry = 0;
        for (i64 base = e0; base < e1; base += 32) {
            const i64 e = base + lane;
            const u64 z = e < e1 ? zeta[indices[e]] : 0;
            u64 s = z;
            for (int o = 1; o < 32; o <<= 1) {
                u64 t = __shfl_up_sync(0xffffffffu, s, o);
                if (lane >= o) s = sat_add(s, t);
            }
            u64 ex = __shfl_up_sync(0xffffffffu, s, 1);  // exclusive: the previous lane's inclusive
            if (lane == 0) ex = 0;
            if (e < e1) zex[e] = sat_add(carry, ex);
            carry = sat_add(carry, __shfl_sync(0xffffffffu, s, 31));
        }
    }
}

// weight of the DAG edge p -> v: 1 + zex at v's position in p's (sorted) CSR row, saturating
__device__ __forceinline__ u64 edge_weight(const i64* indptr, const int* indices, const u64* zex, i64 p, int v) {
    i64 lo = indptr[p], hi = indptr[p + 1];
    while (lo < hi) {
        i64 mid = (lo + hi) >> 1;
        if (indices[mid] < v) lo = mid + 1; else hi = mid;
    }
    return sat_add(zex[lo], 1ULL);
}

// dfs rule: dist[v] = min over in-edges p -> v of dist[p] + w(p -> v) (saturating), top-down
// over the reverse CSR. dist starts at U64 max for levels >= 1.
struct DistOp {
    const i64* indptr;
    const int* indices;
    const u64* zex;
    const int* rindices;
    u64* dist;
    typedef u64 Acc;
    __device__ void reset(Acc& a) { a = ~0ULL; }
    __device__ i64 key(i64 e) const { return rindices[e]; }
    __device__ void fold(Acc& a, i64 p, i64 row) {
        const u64 c = sat_add(__ldcg(dist + p), edge_weight(indptr, indices, zex, p, (int)row));
        a = c < a ? c : a;
    }
    __device__ void edge(Acc& a, i64 e, i64 row) { fold(a, key(e), row); }
    __device__ void flush(Acc& a, i64 row) { atomicMin((unsigned long long*)(dist + row), (unsigned long long)a); }
};

extern "C" __global__ void __launch_bounds__(1024) dg_sweep_dist(const i64* level_ptr, int l0, int step, int nlev,
                                                                 const i64* rindptr, const int* rindices,
                                                                 const i64* indptr, const int* indices,
                                                                 const u64* zex, u64* dist) {
    DistOp op{indptr, indices, zex, rindices, dist};
    sweep_levels(level_ptr, rindptr, l0, step, nlev, op);
}

extern "C" __global__ void __launch_bounds__(1024) dg_small_dist(const i64* level_ptr, int l0, int step, int nlev,
                                                                 const i64* rindptr, const int* rindices,
                                                                 const i64* indptr, const int* indices,
                                                                 const u64* zex, u64* dist) {
    DistOp op{indptr, indices, zex, rindices, dist};
    sweep_edges(level_ptr, l0, step, nlev, op, CsrRange{rindptr});
}

// ---------------------------------------------------------------------------------------------
// Phase 1, dfs rule: parent selection, a lexicographic argmax over the in-edges of each vertex,
// key (U64max - (dist[p] + w), level[p], hash(p*C+v)), then the smallest edge. (The max-level
// rule runs from the forward CSR in forest.cu.)
struct Best {
    u64 a;
    i64 b;
    u64 c;
    i64 e;  // reverse-CSR edge, -1: none
};

__device__ __forceinline__ bool better(const Best& x, const Best& y) {
    if (x.e < 0) return false;
    if (y.e < 0) return true;
    if (x.a != y.a) return x.a > y.a;
    if (x.b != y.b) return x.b > y.b;
    if (x.c != y.c) return x.c > y.c;
    return x.e < y.e;
}

struct ParentArgs {
    const i64* rindptr;
    const int* rindices;
    const int* level;
    const i64* indptr;
    const int* indices;
    const u64* zex;
    const u64* dist;
    i64* parent;
    i64 C;
    u64 base;
};

__device__ __forceinline__ Best edge_key(const ParentArgs& A, i64 e, i64 v) {
    Best k;
    const i64 p = A.rindices[e];
    k.c = dg_hash(A.base, (u64)p * (u64)A.C + (u64)v);
    const u64 d = sat_add(A.dist[p], edge_weight(A.indptr, A.indices, A.zex, p, (int)v));
    k.a = ~0ULL - d;
    k.b = A.level[p];
    k.e = e;
    return k;
}

__device__ __forceinline__ Best shfl_best(const Best& x, int src) {
    Best y;
    y.a = __shfl_sync(0xffffffffu, x.a, src);
    y.b = __shfl_sync(0xffffffffu, x.b, src);
    y.c = __shfl_sync(0xffffffffu, x.c, src);
    y.e = __shfl_sync(0xffffffffu, x.e, src);
    return y;
}

#define DG_PARENT_PARAMS                                                                                 \
    const i64 *rindptr, const int *rindices, const int *level, const i64 *indptr, const int *indices,   \
        const u64 *zex, const u64 *dist, i64 *parent, i64 C, u64 base
#define DG_PARENT_ARGS {rindptr, rindices, level, indptr, indices, zex, dist, parent, C, base}

// one warp per vertex (vertices with in-degree > hub are left to dg_parent_hubs)
extern "C" __global__ void dg_parent_warp(DG_PARENT_PARAMS, i64 hub) {
    const ParentArgs A = DG_PARENT_ARGS;
    const int lane = threadIdx.x & 31;
    const i64 warp = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 v = warp; v < A.C; v += nwarps) {
        const i64 e0 = A.rindptr[v], e1 = A.rindptr[v + 1];
        if (e1 - e0 > hub) continue;
        Best best;
        best.e = -1;
        for (i64 e = e0 + lane; e < e1; e += 32) {
            Best k = edge_key(A, e, v);
            if (better(k, best)) best = k;
        }
        for (int o = 16; o > 0; o >>= 1) {
            Best y = shfl_best(best, (lane + o) & 31);
            if (better(y, best)) best = y;
        }
        if (lane == 0) A.parent[v] = best.e >= 0 ? (i64)A.rindices[best.e] : -1;
    }
}

// one block per hub vertex
extern "C" __global__ void __launch_bounds__(256) dg_parent_hubs(DG_PARENT_PARAMS, const i64* hubs, i64 nhubs) {
    const ParentArgs A = DG_PARENT_ARGS;
    __shared__ Best part[8];
    for (i64 h = blockIdx.x; h < nhubs; h += gridDim.x) {
        const i64 v = hubs[h];
        const i64 e0 = A.rindptr[v], e1 = A.rindptr[v + 1];
        Best best;
        best.e = -1;
        for (i64 e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
            Best k = edge_key(A, e, v);
            if (better(k, best)) best = k;
        }
        const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
        for (int o = 16; o > 0; o >>= 1) {
            Best y = shfl_best(best, (lane + o) & 31);
            if (better(y, best)) best = y;
        }
        if (lane == 0) part[w] = best;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int i = 1; i < (int)(blockDim.x >> 5); ++i)
                if (better(part[i], best)) best = part[i];
            A.parent[v] = best.e >= 0 ? (i64)A.rindices[best.e] : -1;
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------------
// Phase 3: post-order ranks. Sibling order keys: float64 of the dimension hash (the NumPy twin
// lexsorts a float64 stack of (hash, parent)), ties by id.
extern "C" __global__ void dg_hash_f64(double* out, i64 n, u64 base) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = __ull2double_rn(dg_hash(base, (u64)i));
}

// r sorts fh ascending; make ties (equal fh, rare) ascend by id, whatever the sort's stability.
extern "C" __global__ void dg_fix_ties(const double* fh, i64* r, i64 n) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const double f = fh[r[i]];
        if (i > 0 && fh[r[i - 1]] == f) continue;  // not the first of its run
        i64 j = i + 1;
        while (j < n && fh[r[j]] == f) ++j;
        for (i64 a = i + 1; a < j; ++a) {  // insertion sort of the run by id
            const i64 x = r[a];
            i64 b = a - 1;
            while (b >= i && r[b] > x) { r[b + 1] = r[b]; --b; }
            r[b + 1] = x;
        }
    }
}

// One pointer-jumping round for k dimensions at once:
//   s_out[j][v] = s_in[j][v] + s_in[j][anc[v]],  anc_out[v] = anc[anc[v]]  (anc -1: done)
extern "C" __global__ void dg_jump(const i64* s_in, i64* s_out, const int* anc_in, int* anc_out, i64 C, int k) {
    for (i64 v = blockIdx.x * (i64)blockDim.x + threadIdx.x; v < C; v += (i64)gridDim.x * blockDim.x) {
        const int a = anc_in[v];
        if (a >= 0) {
            for (int j = 0; j < k; ++j) s_out[j * C + v] = s_in[j * C + v] + s_in[j * C + a];
            anc_out[v] = anc_in[a];
        } else {
            for (int j = 0; j < k; ++j) s_out[j * C + v] = s_in[j * C + v];
            anc_out[v] = -1;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Phase 4: lh[v][j] = (lo_j, hi_j) for K dimensions, interleaved so that one child costs K
// 8-byte loads; lo = min, hi = max over the children, bottom-up. lh starts at (post, post).
template <int K>
struct IntervalOp {
    const int* idx;
    int2* lh;
    struct Acc {
        int lo[K], hi[K];
    };
    __device__ void reset(Acc& a) {
#pragma unroll
        for (int j = 0; j < K; ++j) { a.lo[j] = 0x7fffffff; a.hi[j] = -0x7fffffff - 1; }
    }
    __device__ i64 key(i64 e) const { return idx[e]; }
    __device__ void edge(Acc& a, i64 e, i64 r) { fold(a, key(e), r); }
    __device__ void fold(Acc& a, i64 c, i64) {
        const int2* q = lh + c * K;
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int2 t = __ldcg(q + j);
            a.lo[j] = min(a.lo[j], t.x);
            a.hi[j] = max(a.hi[j], t.y);
        }
    }
    __device__ void flush(Acc& a, i64 row) {
        int* r = (int*)(lh + row * K);
#pragma unroll
        for (int j = 0; j < K; ++j) {
            atomicMin(r + 2 * j, a.lo[j]);
            atomicMax(r + 2 * j + 1, a.hi[j]);
        }
    }
};

#define DG_DEF_IV(K)                                                                                     \
    extern "C" __global__ void __launch_bounds__(1024) dg_sweep_iv##K(const i64* level_ptr, int l0, int step, \
                                                                      int nlev, const i64* indptr,       \
                                                                      const int* indices, int2* lh) {    \
        IntervalOp<K> op{indices, lh};                                                                   \
        sweep_levels(level_ptr, indptr, l0, step, nlev, op);                                             \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(1024) dg_small_iv##K(const i64* level_ptr, int l0, int step, \
                                                                      int nlev, const i64* indptr,       \
                                                                      const int* indices, int2* lh,      \
                                                                      const int* rows) {                 \
        IntervalOp<K> op{indices, lh};                                                                   \
        sweep_edges(level_ptr, l0, step, nlev, op, CsrRows{indptr, rows});                               \
    }
DG_DEF_IV(1)
DG_DEF_IV(2)
DG_DEF_IV(3)
DG_DEF_IV(4)
DG_DEF_IV(5)
DG_DEF_IV(6)
DG_DEF_IV(7)
DG_DEF_IV(8)
