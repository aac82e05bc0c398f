// Phase 1, max-level rule, from the forward CSR (no reverse CSR needed on the GPU).
// Twin of distgrail.stages.forest.parents_max_level: parent(v) = the in-neighbour p with
// level(p) = level(v) - 1 and the largest dg_hash(base, p * C + v); equal hashes -> smaller p.
// Pass 1 takes the largest hash per child, pass 2 the smallest p among the edges that hold it.
#include "common.cuh"

// f(u, v, hash) for every candidate edge u -> v (level[v] == level[u] + 1): one warp per row,
// its lanes over the row's edges, grid-stride over rows.
template <class F>
__device__ __forceinline__ void for_candidate_edges(const i64* __restrict__ indptr, const int* __restrict__ indices,
                                                    const int* __restrict__ level, i64 C, u64 base, F f) {
    const int lane = threadIdx.x & 31;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 u = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; u < C; u += nwarps) {
        const int want = level[u] + 1;
        const i64 e1 = indptr[u + 1];
        for (i64 e = indptr[u] + lane; e < e1; e += 32) {
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
