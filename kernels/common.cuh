// Shared device helpers. Twin of distgrail/hashing.py: dg_hash must match hash3 bit for bit.
// Every DG_* constant comes from distgrail/constants.py as a -D option (distgrail.gpu.kernels).
#pragma once
#if !defined(DG_GOLDEN) || !defined(DG_MIX1) || !defined(DG_MIX2) || !defined(DG_S2) || !defined(DG_CAP) ||        \
    !defined(DG_UNDECIDED) || !defined(DG_STEP_SAME_COMPONENT) || !defined(DG_STEP_LEVEL_FILTER) ||                  \
    !defined(DG_STEP_SUPPORT_POSITIVE) || !defined(DG_STEP_SUPPORT_NEGATIVE) || !defined(DG_STEP_INTERVAL_FILTER) || \
    !defined(DG_STEP_TREE_CUT) || !defined(DG_STEP_SEARCH_POSITIVE) || !defined(DG_STEP_SEARCH_NEGATIVE) ||          \
    !defined(DG_MAX_ROUNDS) || !defined(DG_HUB) || !defined(DG_BATCH_THREADS) ||                                     \
    !defined(DG_GRID_THREADS) || !defined(DG_HUB_THREADS) || !defined(DG_MAX_DIMS_PER_SWEEP)
#error "DG_* constants missing: compile with the -D options of distgrail.gpu.kernels.define_options()"
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
