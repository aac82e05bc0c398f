// Queries on the GPU: twin of distgrail/query.py (prefilter + guided_search_numpy).
//
// Per-component record, int32, REC ints per component (REC = 4 + 2 d rounded up to a multiple of 4):
//   [0] level  [1] start0 (first DT rank of the subtree, dim 0)  [2] post0  [3] 0
//   [4 + 2k] lo_k  [5 + 2k] hi_k   for k < d
// Step codes as in distgrail/query.py: 1 same, 2 level, 3 interval, 4 tree, 5 search+, 6 search-.
// counters (u64): [c] = queries settled with code c (1..6), [7] = max search rounds.
// work counters (u64): [0] undecided, [1] next (pass 1), [2] overflowed, [3] next (pass 2).
#include "common.cuh"

typedef int i32;
#define FULL 0xffffffffu

__device__ __forceinline__ bool dg_inside(const i32* __restrict__ a, const i32* __restrict__ b, int d) {
    // L_b subset of L_a in every dimension
    for (int k = 0; k < d; ++k) {
        int2 x = *reinterpret_cast<const int2*>(a + 4 + 2 * k);
        int2 y = *reinterpret_cast<const int2*>(b + 4 + 2 * k);
        if (x.x > y.x || y.y > x.y) return false;
    }
    return true;
}

// Steps 1-4 for nq pairs of original vertex ids; pairs left undecided go to the work list as
// {index in this chunk, cu, cv, 0}. Answers of undecided pairs are written 0 (the search sets them).
extern "C" __global__ void dg_prefilter(const i64* __restrict__ src, const i64* __restrict__ dst, i64 nq,
                                        const i32* __restrict__ comp, const i32* __restrict__ rec, int R, int d,
                                        unsigned char* __restrict__ ans, int4* __restrict__ work,
                                        u64* __restrict__ wctr, u64* __restrict__ counters) {
    __shared__ unsigned int cnt[5];
    if (threadIdx.x < 5) cnt[threadIdx.x] = 0;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    unsigned int c1 = 0, c2 = 0, c3 = 0, c4 = 0;
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
                code = 1;
            } else {
                const i32* ru = rec + (i64)cu * R;
                const i32* rv = rec + (i64)cv * R;
                int4 hu = *reinterpret_cast<const int4*>(ru);
                int4 hv = *reinterpret_cast<const int4*>(rv);
                if (hu.x >= hv.x) code = 2;
                else if (!dg_inside(ru, rv, d)) code = 3;
                else if (hu.y <= hv.z && hv.z <= hu.z) code = 4;
                else code = 0;
            }
            ans[i] = (code == 1 || code == 4) ? 1 : 0;
        }
        c1 += __popc(__ballot_sync(FULL, code == 1));
        c2 += __popc(__ballot_sync(FULL, code == 2));
        c3 += __popc(__ballot_sync(FULL, code == 3));
        c4 += __popc(__ballot_sync(FULL, code == 4));
        const unsigned int m = __ballot_sync(FULL, code == 0);
        if (m) {
            u64 at = 0;
            if (lane == 0) at = atomicAdd(wctr, (u64)__popc(m));
            at = __shfl_sync(FULL, at, 0);
            if (code == 0) work[at + __popc(m & ((1u << lane) - 1u))] = make_int4((int)i, cu, cv, 0);
        }
    }
    if (lane == 0) {
        atomicAdd(&cnt[1], c1);
        atomicAdd(&cnt[2], c2);
        atomicAdd(&cnt[3], c3);
        atomicAdd(&cnt[4], c4);
    }
    __syncthreads();
    if (threadIdx.x >= 1 && threadIdx.x < 5 && cnt[threadIdx.x]) atomicAdd(&counters[threadIdx.x], (u64)cnt[threadIdx.x]);
}

// Step 5: one warp per query, level-synchronous BFS from cu in the pruned DAG, exactly the frontier
// sets of guided_search_numpy (so the round count matches). Warps take queries from the work list
// one at a time (dynamic scheduling). Each warp owns a visited bitmap (vwords words, left all-zero
// after every query) and a queue of `cap` vertices; a query whose queue would overflow is
// re-queued to `overflow` untouched, for a second launch with cap >= C.
extern "C" __global__ void dg_search(const int4* __restrict__ work, const u64* __restrict__ nwork_p,
                                     u64* __restrict__ next_p,
                                     const i64* __restrict__ indptr, const i32* __restrict__ indices,
                                     const i32* __restrict__ rec, int R, int d,
                                     unsigned int* __restrict__ visited, i64 vwords,
                                     i32* __restrict__ queue, i64 cap,
                                     unsigned char* __restrict__ ans,
                                     int4* __restrict__ overflow, u64* __restrict__ novf_p,
                                     u64* __restrict__ counters) {
    extern __shared__ i32 tgt_all[];
    const int lane = threadIdx.x & 31;
    const int wib = threadIdx.x >> 5;
    const i64 gw = (i64)blockIdx.x * (blockDim.x >> 5) + wib;
    i32* tgt = tgt_all + wib * R;
    unsigned int* bm = visited + gw * vwords;
    i32* qu = queue + gw * cap;
    const unsigned int lt = (1u << lane) - 1u;
    const u64 nwork = *nwork_p;
    u64 npos = 0, nneg = 0, maxr = 0;
    for (;;) {
        u64 w = 0;
        if (lane == 0) w = atomicAdd(next_p, 1ull);
        w = __shfl_sync(FULL, w, 0);
        if (w >= nwork) break;
        const int4 item = work[w];
        const int v = item.z;
        for (int k = lane; k < R; k += 32) tgt[k] = rec[(i64)v * R + k];
        if (lane == 0) {
            atomicOr(&bm[item.y >> 5], 1u << (item.y & 31));
            qu[0] = item.y;
        }
        __syncwarp();
        const int tl = tgt[0], tp = tgt[2];
        i64 head = 0, tail = 1;
        int rounds = 0;
        bool found = false, ovf = false;
        while (head < tail && !found && !ovf) {
            ++rounds;
            const i64 lend = tail;
            for (i64 f0 = head; f0 < lend && !found && !ovf; f0 += 32) {
                const i64 fi = f0 + lane;
                i64 beg = 0, deg = 0;
                if (fi < lend) {
                    const int x = qu[fi];
                    beg = indptr[x];
                    deg = indptr[x + 1] - beg;
                }
                i64 incl = deg;
#pragma unroll
                for (int o = 1; o < 32; o <<= 1) {
                    const i64 y = __shfl_up_sync(FULL, incl, o);
                    if (lane >= o) incl += y;
                }
                const i64 total = __shfl_sync(FULL, incl, 31);
                const i64 excl = incl - deg;
                for (i64 e0 = 0; e0 < total; e0 += 32) {
                    const i64 e = e0 + lane;
                    // owner of edge e: the largest lane j with excl_j <= e (it has deg_j > 0)
                    int o = 0;
#pragma unroll
                    for (int s = 16; s > 0; s >>= 1) {
                        const i64 ex = __shfl_sync(FULL, excl, o + s);
                        if (ex <= e) o += s;
                    }
                    const i64 ob = __shfl_sync(FULL, beg, o);
                    const i64 oe = __shfl_sync(FULL, excl, o);
                    bool hit = false, fresh = false;
                    int c = 0;
                    if (e < total) {
                        c = indices[ob + (e - oe)];
                        if (c == v) {
                            hit = true;
                        } else {
                            const i32* rc = rec + (i64)c * R;
                            const int4 hc = *reinterpret_cast<const int4*>(rc);
                            if (hc.x < tl && dg_inside(rc, tgt, d)) {
                                if (hc.y <= tp && tp <= hc.z) {
                                    hit = true;
                                } else {
                                    const unsigned int bit = 1u << (c & 31);
                                    fresh = !(atomicOr(&bm[c >> 5], bit) & bit);
                                }
                            }
                        }
                    }
                    const unsigned int m = __ballot_sync(FULL, fresh);
                    if (fresh) {
                        const i64 pos = tail + __popc(m & lt);
                        if (pos < cap) qu[pos] = c;
                        else atomicAnd(&bm[c >> 5], ~(1u << (c & 31)));  // not queued: unmark
                    }
                    tail += __popc(m);
                    __syncwarp();
                    if (__any_sync(FULL, hit)) { found = true; break; }
                    if (tail > cap) { ovf = true; break; }
                }
            }
            head = lend;
        }
        // leave the bitmap all-zero: every marked vertex is in the queue (all bits of a touched
        // word belong to this query)
        const i64 nq = tail < cap ? tail : cap;
        for (i64 k = lane; k < nq; k += 32) bm[qu[k] >> 5] = 0u;
        __syncwarp();
        if (lane == 0) {
            if (ovf) {
                const u64 at = atomicAdd(novf_p, 1ull);
                overflow[at] = item;
            } else {
                ans[item.x] = found ? 1 : 0;
                if (found) ++npos; else ++nneg;
                if ((u64)rounds > maxr) maxr = rounds;
            }
        }
    }
    if (lane == 0) {
        if (npos) atomicAdd(&counters[5], npos);
        if (nneg) atomicAdd(&counters[6], nneg);
        if (maxr) atomicMax(&counters[7], maxr);
    }
}
