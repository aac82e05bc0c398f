// Query steps before the search (twin: distgrail/query/prefilter.py): same component, level filter,
// support masks (+ / -), interval filter, DT-subtree cut. Record layout and step codes: query.cuh.
// Pairs left undecided go to the work list as {index in this chunk, cu, cv, 0}; their answers are
// written 0 (the search sets them). wctr[0] counts the work list.
#include "query.cuh"

// WIDE = 0: int32 vertex ids (staged, narrowed on the host), 1: int64 (uploaded as they are)
template <int WIDE> struct dg_query_id { typedef int t; };
template <> struct dg_query_id<1> { typedef long long t; };

template <int WIDE>
__global__ void dg_prefilter(const typename dg_query_id<WIDE>::t* __restrict__ src,
                             const typename dg_query_id<WIDE>::t* __restrict__ dst, i64 nq,
                             const i32* __restrict__ comp, const i32* __restrict__ rec, int R, int d,
                             int W, unsigned char* __restrict__ ans, int4* __restrict__ work,
                             u64* __restrict__ wctr, u64* __restrict__ counters) {
    __shared__ unsigned int cnt[DG_PRE_LAST + 1];
    if (threadIdx.x <= DG_PRE_LAST) cnt[threadIdx.x] = 0;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const int B = 4 + 4 * W;
    unsigned int c[DG_PRE_LAST + 1];
#pragma unroll
    for (int s = 0; s <= DG_PRE_LAST; ++s) c[s] = 0;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    // the loop bound is uniform per warp, so every lane takes part in the ballots
    for (i64 base = (i64)blockIdx.x * blockDim.x + (threadIdx.x & ~31); base < nq; base += stride) {
        const i64 i = base + lane;
        int code = -1;  // -1: no pair, 0: undecided
        int cu = 0, cv = 0;
        if (i < nq) {
            cu = comp[src[i]];
            cv = comp[dst[i]];
            if (cu == cv) {
                code = DG_STEP_SAME_COMPONENT;
            } else {
                const i32* ru = rec + (i64)cu * R;
                const i32* rv = rec + (i64)cv * R;
                const int4 hu = *reinterpret_cast<const int4*>(ru);
                const int4 hv = *reinterpret_cast<const int4*>(rv);
                bool pos = false, neg = false;
                if (hu.x >= hv.x) code = DG_STEP_LEVEL_FILTER;
                else {
                    if (W) dg_masks(ru, rv, W, pos, neg);
                    if (pos) code = DG_STEP_SUPPORT_POSITIVE;
                    else if (neg) code = DG_STEP_SUPPORT_NEGATIVE;
                    else if (!dg_inside(ru, rv, B, d)) code = DG_STEP_INTERVAL_FILTER;
                    else if (hu.y <= hv.z && hv.z <= hu.z) code = DG_STEP_TREE_CUT;
                    else code = 0;
                }
            }
            ans[i] = (code == DG_STEP_SAME_COMPONENT || code == DG_STEP_SUPPORT_POSITIVE || code == DG_STEP_TREE_CUT);
        }
#pragma unroll
        for (int s = 1; s <= DG_PRE_LAST; ++s) c[s] += __popc(__ballot_sync(FULL, code == s));
        const unsigned int m = __ballot_sync(FULL, code == 0);
        if (m) {
            u64 at = 0;
            if (lane == 0) at = atomicAdd(wctr, (u64)__popc(m));
            at = __shfl_sync(FULL, at, 0);
            if (code == 0) work[at + __popc(m & ((1u << lane) - 1u))] = make_int4((int)i, cu, cv, 0);
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int s = 1; s <= DG_PRE_LAST; ++s)
            if (c[s]) atomicAdd(&cnt[s], c[s]);
    }
    __syncthreads();
    if (threadIdx.x >= 1 && threadIdx.x <= DG_PRE_LAST && cnt[threadIdx.x])
        atomicAdd(&counters[threadIdx.x], (u64)cnt[threadIdx.x]);
}
