// Phase 5: support choice and support-vertex reach masks (twin: distgrail/stages/supports.py).
//
// mask is (C, W) u64, row-major; bit j of a row = support j of the block. Components are numbered
// by level and every edge goes to a higher level, so
//   out (bottom-up, pull):  out[u] |= OR of out[c] over the children c of u, deepest level first;
//   in  (top-down, pull):   in[v]  |= OR of in[p] over the parents p of v (reverse CSR), or
//   in  (top-down, push):   in[c]  |= in[u] for every edge u -> c (forward CSR, atomicOr),
// shallowest level first. OR is order-independent, so results are bit-identical to the twin
// whatever the schedule.
//
// dg_support_sweep runs BOTH sweeps in one pass of steps (step s: out of level L-2-s, in of level
// s+shift) as the units of distgrail/stages/support_schedule.py: a run of small steps walked by one
// block with __syncthreads() between steps, or one side's rows of one step. With `tickets` the
// launch is persistent: blocks take units in order by an atomic ticket, and a unit starts once the
// done counter reaches its `need` (all units of earlier steps finished). This cannot deadlock: a
// block holding ticket t waits only for smaller tickets, all held by running blocks. A wait longer
// than ~2^35 clocks sets the error flag ctr[2] (the host raises) instead of hanging. Without
// `tickets` block b runs unit u_base + b (the host launches one step per launch).
// Masks written in the same launch are read with __ldcg (L2: never a stale L1 line).
#include "common.cuh"

#define FULL 0xffffffffu
#define SIDE_RUN (-1)
#define SIDE_OUT 0
#define SIDE_IN 1
#define SCHED_FIELDS 8  // s0, s1, side, r0, r1, g, need, pad (support_schedule.FIELDS)
// block sizes, derived from the shared constants as supports.SWEEP_THREADS / CHOOSE_THREADS are
#define SWEEP_THREADS (DG_BATCH_THREADS / 2)  // 128 registers a thread: the prefetched structure
#define CHOOSE_THREADS DG_GRID_THREADS

struct Side {
    const i64* ptr;
    const int* ind;
    u64* mask;
};

// OR over the G lanes of each aligned group (G | 32); every lane of the warp must call it
__device__ __forceinline__ u64 group_or(u64 x, int G) {
    for (int o = G >> 1; o > 0; o >>= 1) x |= __shfl_xor_sync(FULL, x, o);
    return x;
}

// A row's structure: its edge range and the first PF neighbour ids of this lane (lane, lane + G,
// ...). It depends on the CSR only, so a unit loads it BEFORE waiting for the units it needs, and
// after the wait only the masks are loaded (one L2 round trip per level on the critical path).
#define PF 8
struct Pre {
    i64 e0, e1;
    int c[PF];
};

__device__ __forceinline__ void prefetch_row(const Side& sd, i64 u, bool act, int lane, int G, Pre& p) {
    p.e0 = act ? sd.ptr[u] : 0;
    p.e1 = act ? sd.ptr[u + 1] : 0;
#pragma unroll
    for (int k = 0; k < PF; ++k) {
        const i64 j = p.e0 + lane + (i64)k * G;
        p.c[k] = j < p.e1 ? sd.ind[j] : 0;
    }
}

// OR one row (a group of G lanes; every lane of the warp calls it, act = the lane's row exists)
__device__ __forceinline__ void or_row(const Side& sd, bool push, i64 u, bool act, const Pre& p, int lane, int G,
                                       int W) {
    const i64 rest = p.e0 + lane + (i64)PF * G;  // first entry not prefetched
    for (int w = 0; w < W; ++w) {
        if (push) {  // in[u] is final (its parents are on earlier steps): push it to the children
            const u64 x = act ? __ldcg(&sd.mask[u * W + w]) : 0ULL;
            if (!x) continue;
#pragma unroll
            for (int k = 0; k < PF; ++k) {
                if (p.e0 + lane + (i64)k * G < p.e1) {
                    u64* q = &sd.mask[(i64)p.c[k] * W + w];
                    if ((__ldcg(q) & x) != x) atomicOr((unsigned long long*)q, (unsigned long long)x);
                }
            }
            for (i64 j = rest; j < p.e1; j += G) {
                u64* q = &sd.mask[(i64)sd.ind[j] * W + w];
                if ((__ldcg(q) & x) != x) atomicOr((unsigned long long*)q, (unsigned long long)x);
            }
        } else {  // pull: OR of the neighbours' (final) masks
            u64 acc = 0;
#pragma unroll
            for (int k = 0; k < PF; ++k)
                if (p.e0 + lane + (i64)k * G < p.e1) acc |= __ldcg(&sd.mask[(i64)p.c[k] * W + w]);
            for (i64 j = rest; j < p.e1; j += G) acc |= __ldcg(&sd.mask[(i64)sd.ind[j] * W + w]);
            acc = group_or(acc, G);
            if (act && lane == 0 && acc) sd.mask[u * W + w] = __ldcg(&sd.mask[u * W + w]) | acc;
        }
    }
}

// rows a..b-1 of one side, a group of G lanes per row, over threads t = 0..nt-1 (nt % 32 == 0).
// The row loop has the same trip count for every thread, so the group shuffles never diverge.
// `pre`: this thread's structure of the first row (a + t / G), loaded by prefetch_row when `use_pre`.
__device__ __forceinline__ void side_rows(const Side& sd, bool push, i64 a, i64 b, int G, int W, int t, int nt,
                                          bool use_pre, const Pre& pre) {
    if (a >= b || sd.ptr[a] == sd.ptr[b]) return;  // no edge: nothing to OR (same for all threads)
    const int ng = nt / G, lane = t & (G - 1);
    for (i64 base = a; base < b; base += ng) {
        const i64 u = base + t / G;
        const bool act = u < b;
        if (use_pre && base == a) {
            or_row(sd, push, u, act, pre, lane, G, W);
        } else {
            Pre p;
            prefetch_row(sd, u, act, lane, G, p);
            or_row(sd, push, u, act, p, lane, G, W);
        }
    }
}

__device__ __forceinline__ void run_unit(const int* __restrict__ su, const i64* __restrict__ lp, int L, int shift,
                                         bool push, int W, const Side& out, const Side& in, const Pre& pre) {
    const int t = threadIdx.x, nt = blockDim.x;
    const int s0 = su[0], s1 = su[1], side = su[2], g = su[5];
    if (side == SIDE_RUN) {
        for (int s = s0; s < s1; ++s) {
            const int lo = L - 2 - s, li = s + shift;
            side_rows(out, false, lp[lo], lp[lo + 1], g & 0xff, W, t, nt, false, pre);
            side_rows(in, push, lp[li], lp[li + 1], g >> 8, W, t, nt, false, pre);
            __syncthreads();
        }
    } else if (side == SIDE_OUT) {
        side_rows(out, false, su[3], su[4], g, W, t, nt, true, pre);
    } else {
        side_rows(in, push, su[3], su[4], g, W, t, nt, true, pre);
    }
}

// thread 0 of a block: wait until ctr[1] (units done) >= need, or flag ctr[2] after ~2^35 clocks
__device__ void wait_done(unsigned long long* ctr, long long need) {
    volatile unsigned long long* done = ctr + 1;
    volatile unsigned long long* err = ctr + 2;
    const long long t0 = clock64();
    while ((long long)*done < need) {
        if (*err) break;
        if (clock64() - t0 > (1LL << 35)) {
            atomicExch(ctr + 2, 1ULL);
            break;
        }
        __nanosleep(64);
    }
    __threadfence();  // acquire: the finished units' masks before ours
}

extern "C" __global__ void __launch_bounds__(SWEEP_THREADS)
dg_support_sweep(const int* __restrict__ sched, long long U, long long u_base, int tickets,
                 unsigned long long* ctr, const i64* __restrict__ level_ptr, int L, int shift, int push, int W,
                 const i64* __restrict__ optr, const int* __restrict__ oind, u64* omask,
                 const i64* __restrict__ iptr, const int* __restrict__ iind, u64* imask) {
    const Side out{optr, oind, omask}, in{iptr, iind, imask};
    const bool tk = tickets != 0;
    const int t = threadIdx.x;
    __shared__ long long s_u;
    long long u = u_base + blockIdx.x;
    for (;;) {
        if (tk) {
            if (t == 0) s_u = (long long)atomicAdd(ctr, 1ULL);
            __syncthreads();
            u = s_u;
        }
        if (u >= U) return;
        const int* su = sched + u * SCHED_FIELDS;
        const int side = su[2], G = su[5];
        Pre p{0, 0, {0}};
        if (side != SIDE_RUN) {  // structure first, then wait
            const i64 r = su[3] + t / G;
            prefetch_row(side == SIDE_OUT ? out : in, r, r < su[4], t & (G - 1), G, p);
        }
        if (tk) {
            if (t == 0) wait_done(ctr, su[6]);
            __syncthreads();
        }
        run_unit(su, level_ptr, L, shift, push != 0, W, out, in, p);
        if (!tk) return;
        __threadfence();  // every thread's writes of the unit are visible device-wide ...
        __syncthreads();
        if (t == 0) atomicAdd(ctr + 1, 1ULL);  // ... before the unit counts as done
    }
}

// bit (j) of word j / 64 in row ids[j] of both masks, for the nb supports of the block (ids distinct)
extern "C" __global__ void dg_support_seed(const int* __restrict__ ids, int nb, u64* __restrict__ out,
                                           u64* __restrict__ in, int W) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < nb) {
        const i64 at = (i64)ids[j] * W + (j >> 6);
        const u64 bit = 1ULL << (j & 63);
        out[at] |= bit;
        in[at] |= bit;
    }
}

// The support of slice j = [j C / K, (j+1) C / K) (one block of CHOOSE_THREADS, a power of two, per slice): the
// largest (indeg + 1) * (outdeg + 1), ties by the smaller dg_hash(base, id), then the smaller id
// (twin: choose_supports_numpy; base = hash_base(seed, STREAM_SUPPORT)).
__device__ __forceinline__ bool better(u64 s, u64 h, i64 c, u64 bs, u64 bh, i64 bc) {
    return bc < 0 || s > bs || (s == bs && (h < bh || (h == bh && c < bc)));
}

extern "C" __global__ void __launch_bounds__(CHOOSE_THREADS)
dg_support_choose(const i64* __restrict__ indptr, const i64* __restrict__ indeg, i64 C, int K, u64 base,
                  int* __restrict__ ids) {
    __shared__ u64 ss[CHOOSE_THREADS], sh[CHOOSE_THREADS];
    __shared__ i64 sc[CHOOSE_THREADS];
    const int j = blockIdx.x, t = threadIdx.x;
    const i64 a = (i64)j * C / K, b = (i64)(j + 1) * C / K;
    u64 bs = 0, bh = 0;
    i64 bc = -1;
    for (i64 c = a + t; c < b; c += CHOOSE_THREADS) {
        const u64 s = (u64)(indeg[c] + 1) * (u64)(indptr[c + 1] - indptr[c] + 1);
        const u64 h = dg_hash(base, (u64)c);
        if (better(s, h, c, bs, bh, bc)) { bs = s; bh = h; bc = c; }
    }
    ss[t] = bs; sh[t] = bh; sc[t] = bc;
    __syncthreads();
    for (int o = CHOOSE_THREADS / 2; o > 0; o >>= 1) {
        if (t < o && sc[t + o] >= 0 && better(ss[t + o], sh[t + o], sc[t + o], ss[t], sh[t], sc[t])) {
            ss[t] = ss[t + o]; sh[t] = sh[t + o]; sc[t] = sc[t + o];
        }
        __syncthreads();
    }
    if (t == 0) ids[j] = (int)sc[0];
}
