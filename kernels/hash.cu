// Counter hash on the device: twin of distgrail/hashing.py hash3 (bit-identical).
#include "common.cuh"

extern "C" __global__ void dg_hash_keys(const i64* __restrict__ keys, u64* __restrict__ out, i64 n, u64 base) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = dg_hash(base, (u64)keys[i]);
}

// keys are 0..n-1 (vertex ids): no input array needed
extern "C" __global__ void dg_hash_iota(u64* __restrict__ out, i64 n, u64 base) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = dg_hash(base, (u64)i);
}
