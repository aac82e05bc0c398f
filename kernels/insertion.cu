// Edge insertions: the pushes of the insertion sweep, a[to[i]] = op(a[to[i]], val[i]) for every i,
// repeated targets included (atomics). Twin: distgrail/stages/insertion.py, _scatter on NumPy
// (ufunc.at). 64-bit operands only: the sweep widens levels and intervals to int64 and the
// support masks are uint64 words. A grid-stride loop: any grid covers any n.
#include "common.cuh"

extern "C" __global__ void dg_push_max(i64* a, const i64* to, const i64* val, i64 n) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        atomicMax(a + to[i], val[i]);
}

extern "C" __global__ void dg_push_min(i64* a, const i64* to, const i64* val, i64 n) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        atomicMin(a + to[i], val[i]);
}

extern "C" __global__ void dg_push_or(u64* a, const i64* to, const u64* val, i64 n) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        atomicOr(a + to[i], val[i]);
}
