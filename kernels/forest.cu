// Phase 1: the spanning forest DT (twins: distgrail/stages/forest.py).
//
// max-level rule, from the forward CSR (no reverse CSR needed on the GPU): parent(v) = the
// in-neighbour p with level(p) = level(v) - 1 and the largest dg_hash(base, p * C + v); equal
// hashes -> smaller p. Pass 1 takes the largest hash per child, pass 2 the smallest p among the
// edges that hold it.
//
// dfs rule: path counts zeta (bottom-up sweep), their exclusive prefix along each CSR row (the
// edge weights), dist (top-down sweep over the reverse CSR), then a lexicographic argmax over
// each vertex's in-edges.
#include "sweep.cuh"

// f(u, v, hash) for every candidate edge u -> v (level[v] == level[u] + 1): one warp per row,
// its lanes over the row's edges, grid-stride over rows; a row of more than DG_HUB edges is left
// to for_hub_candidate_edges (one warp on R-MAT 27's row of 11.1 M edges held the whole launch).
template <class F>
__device__ __forceinline__ void for_candidate_edges(const i64* __restrict__ indptr, const int* __restrict__ indices,
                                                    const int* __restrict__ level, i64 C, u64 base, F f) {
    const int lane = threadIdx.x & 31;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 u = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; u < C; u += nwarps) {
        const int want = level[u] + 1;
        const i64 e0 = indptr[u], e1 = indptr[u + 1];
        if (e1 - e0 > DG_HUB) continue;
        for (i64 e = e0 + lane; e < e1; e += 32) {
            const int v = indices[e];
            if (level[v] == want) f(u, v, dg_hash(base, (u64)u * (u64)C + (u64)v));
        }
    }
}

// the same over the rows hubs[0..nhubs) (every row of more than DG_HUB edges), a team of warps on
// each row (dg_hub_team)
template <class F>
__device__ __forceinline__ void for_hub_candidate_edges(const i64* __restrict__ indptr, const int* __restrict__ indices,
                                                        const int* __restrict__ level, i64 C, u64 base,
                                                        const i64* __restrict__ hubs, i64 nhubs, F f) {
    const int lane = threadIdx.x & 31;
    DG_TEAM_HUB_ROWS(nhubs, h) {
        const i64 u = hubs[h];
        const int want = level[u] + 1;
        const i64 e1 = indptr[u + 1];
        for (i64 e = indptr[u] + tm.warp * 32 + lane; e < e1; e += tm.size * 32) {
            const int v = indices[e];
            if (level[v] == want) f(u, v, dg_hash(base, (u64)u * (u64)C + (u64)v));
        }
    }
}

extern "C" __global__ void dg_parent_best_hash(const i64* __restrict__ indptr, const int* __restrict__ indices,
                                               const int* __restrict__ level, u64* __restrict__ best,
                                               i64 C, u64 base) {
    for_candidate_edges(indptr, indices, level, C, base, [&](i64, int v, u64 h) { atomicMax(&best[v], h); });
}

extern "C" __global__ void dg_parent_pick(const i64* __restrict__ indptr, const int* __restrict__ indices,
                                          const int* __restrict__ level, const u64* __restrict__ best,
                                          u64* __restrict__ parent, i64 C, u64 base) {
    for_candidate_edges(indptr, indices, level, C, base, [&](i64 u, int v, u64 h) {
        if (h == best[v]) atomicMin(&parent[v], (u64)u);
    });
}

extern "C" __global__ void dg_parent_best_hash_hubs(const i64* __restrict__ indptr, const int* __restrict__ indices,
                                                    const int* __restrict__ level, u64* __restrict__ best, i64 C,
                                                    u64 base, const i64* __restrict__ hubs, i64 nhubs) {
    for_hub_candidate_edges(indptr, indices, level, C, base, hubs, nhubs,
                            [&](i64, int v, u64 h) { atomicMax(&best[v], h); });
}

extern "C" __global__ void dg_parent_pick_hubs(const i64* __restrict__ indptr, const int* __restrict__ indices,
                                               const int* __restrict__ level, const u64* __restrict__ best,
                                               u64* __restrict__ parent, i64 C, u64 base,
                                               const i64* __restrict__ hubs, i64 nhubs) {
    for_hub_candidate_edges(indptr, indices, level, C, base, hubs, nhubs, [&](i64 u, int v, u64 h) {
        if (h == best[v]) atomicMin(&parent[v], (u64)u);
    });
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

extern "C" __global__ void __launch_bounds__(DG_BATCH_THREADS)
dg_sweep_zeta(const i64* level_ptr, int l0, int step, int nlev, const i64* indptr, const int* indices,
              u64* zeta) {
    ZetaOp op{indices, zeta};
    sweep_levels(level_ptr, indptr, l0, step, nlev, op);
}

extern "C" __global__ void __launch_bounds__(DG_BATCH_THREADS)
dg_small_zeta(const i64* level_ptr, int l0, int step, int nlev, const i64* indptr, const int* indices,
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

extern "C" __global__ void __launch_bounds__(DG_BATCH_THREADS)
dg_sweep_dist(const i64* level_ptr, int l0, int step, int nlev, const i64* rindptr, const int* rindices,
              const i64* indptr, const int* indices, const u64* zex, u64* dist) {
    DistOp op{indptr, indices, zex, rindices, dist};
    sweep_levels(level_ptr, rindptr, l0, step, nlev, op);
}

extern "C" __global__ void __launch_bounds__(DG_BATCH_THREADS)
dg_small_dist(const i64* level_ptr, int l0, int step, int nlev, const i64* rindptr, const int* rindices,
              const i64* indptr, const int* indices, const u64* zex, u64* dist) {
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

// one warp per vertex (vertices with in-degree > DG_HUB are left to dg_parent_hubs)
extern "C" __global__ void dg_parent_warp(DG_PARENT_PARAMS) {
    const ParentArgs A = DG_PARENT_ARGS;
    const int lane = threadIdx.x & 31;
    const i64 warp = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 v = warp; v < A.C; v += nwarps) {
        const i64 e0 = A.rindptr[v], e1 = A.rindptr[v + 1];
        if (e1 - e0 > DG_HUB) continue;
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
extern "C" __global__ void __launch_bounds__(DG_HUB_THREADS)
dg_parent_hubs(DG_PARENT_PARAMS, const i64* hubs, i64 nhubs) {
    const ParentArgs A = DG_PARENT_ARGS;
    __shared__ Best part[DG_HUB_THREADS / 32];
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

