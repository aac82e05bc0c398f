// Shared device helpers. Twin of distgrail/hashing.py: dg_hash must match hash3 bit for bit.
#pragma once
typedef unsigned long long u64;
typedef long long i64;

#define DG_GOLDEN 0x9E3779B97F4A7C15ULL
#define DG_S2 0xD1B54A32D192ED03ULL

__device__ __forceinline__ u64 dg_mix(u64 z) {
    z ^= z >> 30; z *= 0xBF58476D1CE4E5B9ULL;
    z ^= z >> 27; z *= 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// base = dg_mix(seed * GOLDEN + stream * S2), computed once on the host side of the call
__device__ __forceinline__ u64 dg_hash(u64 base, u64 key) {
    return dg_mix(((key + 1ULL) * DG_GOLDEN) ^ base);
}
