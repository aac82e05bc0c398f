// Phase 5: support-vertex reach masks (twin: distgrail/stages/supports.py).
//
// mask is (C, W) u64, row-major; bit j of a row = support j of the block. Components are numbered
// by level and every edge goes to a higher level, so
//   out (bottom-up, pull): out[u] |= OR of out[c] over the children c of u, deepest level first;
//   in  (top-down, push):  in[c]  |= in[u] for every edge u -> c, shallowest level first.
// OR is order-independent, so results are bit-identical to the twin whatever the schedule.
// Kernels follow the level-sweep contract of distgrail/gpu/sweep.py: they process nlev levels
// l0, l0+step, ...; launched as ONE block they walk them with __syncthreads() between levels,
// launched as a grid they get exactly one level. One warp per row, lanes over the row's edges.
// Masks written in the same launch are read with __ldcg (L2: never a stale L1 line).
#include "common.cuh"

#define FULL 0xffffffffu

__device__ __forceinline__ u64 warp_or(u64 x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x |= __shfl_xor_sync(FULL, x, o);
    return x;
}

extern "C" __global__ void dg_support_out(const i64* __restrict__ level_ptr, int l0, int step, int nlev,
                                          const i64* __restrict__ indptr, const int* __restrict__ indices,
                                          u64* __restrict__ mask, int W) {
    const int lane = threadIdx.x & 31;
    const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (int k = 0; k < nlev; ++k) {
        const int l = l0 + k * step;
        for (i64 u = level_ptr[l] + warp; u < level_ptr[l + 1]; u += nwarps) {
            const i64 b = indptr[u], e = indptr[u + 1];
            for (int w = 0; w < W; ++w) {
                u64 acc = 0;
                for (i64 j = b + lane; j < e; j += 32) acc |= __ldcg(&mask[(i64)indices[j] * W + w]);
                acc = warp_or(acc);
                if (lane == 0 && acc) mask[u * W + w] |= acc;
            }
        }
        if (gridDim.x == 1) __syncthreads();
    }
}

extern "C" __global__ void dg_support_in(const i64* __restrict__ level_ptr, int l0, int step, int nlev,
                                         const i64* __restrict__ indptr, const int* __restrict__ indices,
                                         u64* __restrict__ mask, int W) {
    const int lane = threadIdx.x & 31;
    const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (int k = 0; k < nlev; ++k) {
        const int l = l0 + k * step;
        for (i64 u = level_ptr[l] + warp; u < level_ptr[l + 1]; u += nwarps) {
            const i64 b = indptr[u], e = indptr[u + 1];
            for (int w = 0; w < W; ++w) {
                const u64 x = __ldcg(&mask[u * W + w]);  // final: all parents of u are on lower levels
                if (!x) continue;
                for (i64 j = b + lane; j < e; j += 32) {
                    u64* p = &mask[(i64)indices[j] * W + w];
                    if ((__ldcg(p) & x) != x) atomicOr((unsigned long long*)p, (unsigned long long)x);
                }
            }
        }
        if (gridDim.x == 1) __syncthreads();
    }
}

// bit (j) of word j / 64 in row ids[j], for the nb supports of the block (ids distinct)
extern "C" __global__ void dg_support_seed(const int* __restrict__ ids, int nb, u64* __restrict__ mask, int W) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < nb) mask[(i64)ids[j] * W + (j >> 6)] |= 1ULL << (j & 63);
}
