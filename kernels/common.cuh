// Shared device helpers. Twin of distgrail/hashing.py: dg_hash must match hash3 bit for bit.
// Every DG_* constant comes from distgrail/constants.py, in the #define block that
// distgrail.gpu.kernels.defines_header generates and prepends to every kernel source.
#pragma once
#if !defined(DG_CONSTANTS_GENERATED)
#error "DG_* constants missing: compile distgrail.gpu.kernels.module_source(name) (the generated #define block, then the file)"
#endif
typedef unsigned long long u64;
typedef long long i64;

__device__ __forceinline__ u64 dg_mix(u64 z) {
    z ^= z >> 30; z *= DG_MIX1;
    z ^= z >> 27; z *= DG_MIX2;
    return z ^ (z >> 31);
}

// base = dg_mix(seed * GOLDEN + stream * S2), computed once on the host side of the call
__device__ __forceinline__ u64 dg_hash(u64 base, u64 key) {
    return dg_mix(((key + 1ULL) * DG_GOLDEN) ^ base);
}
