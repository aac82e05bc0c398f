// Shared by the query kernels (prefilter.cu, search.cu; twins: distgrail/query/prefilter.py, search.py).
//
// Per-component record, R int32 per component (R = 4 + 4 W + 2 d rounded up to a multiple of 4):
//   [0] level  [1] start0 (first DT rank of the subtree, dim 0)  [2] post0  [3] 0
//   [4 .. 4+2W)      out mask, W u64 words (supports the component reaches)
//   [4+2W .. 4+4W)   in mask,  W u64 words (supports that reach the component)
//   [B + 2k] lo_k  [B + 2k + 1] hi_k   for k < d, B = 4 + 4 W
// W = 0: no supports (plain GRAIL). Step codes come from Python (distgrail.constants (CUDA_MACROS))
// as DG_STEP_<STEP> in the generated #define block; counters (u64): [code] = queries settled with that code,
// [DG_MAX_ROUNDS] = max search rounds.
#pragma once
#include "common.cuh"

#if !defined(DG_STEP_SAME_COMPONENT) || !defined(DG_STEP_SEARCH_NEGATIVE) || !defined(DG_MAX_ROUNDS)
#error "query step codes come from Python: compile distgrail.gpu.kernels.module_source(name) (DG_STEP_...)"
#endif
// the prefilter counts the codes 1..DG_PRE_LAST; the search settles the rest
#define DG_PRE_LAST DG_STEP_TREE_CUT
static_assert(DG_STEP_SAME_COMPONENT == 1 && DG_STEP_LEVEL_FILTER <= DG_PRE_LAST &&
              DG_STEP_SUPPORT_POSITIVE <= DG_PRE_LAST && DG_STEP_SUPPORT_NEGATIVE <= DG_PRE_LAST &&
              DG_STEP_INTERVAL_FILTER <= DG_PRE_LAST && DG_STEP_SEARCH_POSITIVE > DG_PRE_LAST &&
              DG_STEP_SEARCH_NEGATIVE > DG_PRE_LAST && DG_MAX_ROUNDS > DG_STEP_SEARCH_NEGATIVE,
              "step codes: same = 1, prefilter steps before the search steps");

typedef int i32;
#define FULL 0xffffffffu

// L_b subset of L_a in every dimension (intervals at int offset B)
__device__ __forceinline__ bool dg_inside(const i32* __restrict__ a, const i32* __restrict__ b, int B, int d) {
    for (int k = 0; k < d; ++k) {
        int2 x = *reinterpret_cast<const int2*>(a + B + 2 * k);
        int2 y = *reinterpret_cast<const int2*>(b + B + 2 * k);
        if (x.x > y.x || y.y > x.y) return false;
    }
    return true;
}

// support masks of a -> b: pos: a reaches a support that reaches b; neg: a support reaches a but
// not b, or b reaches a support a does not reach
__device__ __forceinline__ void dg_masks(const i32* __restrict__ a, const i32* __restrict__ b, int W,
                                         bool& pos, bool& neg) {
    const u64* oa = reinterpret_cast<const u64*>(a + 4);
    const u64* ob = reinterpret_cast<const u64*>(b + 4);
    u64 p = 0, n = 0;
    for (int w = 0; w < W; ++w) {
        const u64 xa = oa[w], ya = oa[W + w], xb = ob[w], yb = ob[W + w];
        p |= xa & yb;
        n |= (ya & ~yb) | (xb & ~xa);
    }
    pos = p != 0;
    neg = n != 0;
}

// The search's test of child c of a frontier vertex, for the query whose target v has record tgt
// (level tl, post-order rank tp): DG_CHILD_HIT if c answers it (c == v, c holds v in its DT
// subtree, or c reaches a support that reaches v); DG_CHILD_NEW if c is to be entered and was not
// yet visited by this query (its bit in `visited` is set now); DG_CHILD_SKIP otherwise. Shared by the
// one-warp search (dg_search: same frontiers as guided_search_numpy) and the forward side of the
// grid-wide bidirectional search (dg_grid_expand; `other` = the backward side's bitmap: a child
// marked there is a hit, as in bidirectional_search_numpy).
#define DG_CHILD_SKIP 0
#define DG_CHILD_HIT 1
#define DG_CHILD_NEW 2
__device__ __forceinline__ bool dg_bit(const unsigned int* __restrict__ visited, int c) {
    return (visited[c >> 5] >> (c & 31)) & 1u;
}

__device__ __forceinline__ int dg_child(int c, int v, const i32* __restrict__ rec, int R,
                                        const i32* __restrict__ tgt, int tl, int tp, int W, int B, int d,
                                        unsigned int* __restrict__ visited,
                                        const unsigned int* __restrict__ other = nullptr) {
    if (c == v) return DG_CHILD_HIT;
    const i32* rc = rec + (i64)c * R;
    const int4 hc = *reinterpret_cast<const int4*>(rc);
    if (hc.x > tl) return DG_CHILD_SKIP;
    if (other && dg_bit(other, c)) return DG_CHILD_HIT;  // the bidirectional search met the other side
    if (hc.x == tl) return DG_CHILD_SKIP;
    bool pos = false, neg = false;
    if (W) dg_masks(rc, tgt, W, pos, neg);
    if (neg || !dg_inside(rc, tgt, B, d)) return DG_CHILD_SKIP;
    if (pos || (hc.y <= tp && tp <= hc.z)) return DG_CHILD_HIT;
    const unsigned int bit = 1u << (c & 31);
    return (atomicOr(&visited[c >> 5], bit) & bit) ? DG_CHILD_SKIP : DG_CHILD_NEW;
}
