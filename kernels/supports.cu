// Phase 5: support choice and support-vertex reach masks (twin: distgrail/stages/supports.py).
//
// mask is (C, W) u64, row-major; bit j of a row = support j of the block. Components are numbered
// by level and every edge goes to a higher level, so
//   out (bottom-up, pull):  out[u] |= OR of out[c] over the children c of u (forward CSR), or
//   out (bottom-up, push):  out[p] |= out[c] for every edge p -> c (reverse CSR, atomicOr),
// deepest level first;
//   in  (top-down, pull):   in[v]  |= OR of in[p] over the parents p of v (reverse CSR), or
//   in  (top-down, push):   in[c]  |= in[u] for every edge u -> c (forward CSR, atomicOr),
// shallowest level first. OR is order-independent, so results are bit-identical to the twin
// whatever the schedule. A push skips rows whose mask is 0 and children already holding the bits.
//
// dg_support_sweep runs BOTH sweeps in one pass of steps (step s: out of level L-2-s, or L-1-s when
// out pushes; in of level s+shift; a pushing side handles the level whose masks became final) as
// the units of distgrail/stages/support_schedule.py: a run of small steps walked by one block
// with __syncthreads() between steps, one side's rows of one step, or one chunk of SWEEP_HUB_EDGES
// edges of a hub row (a row with more edges than that; the row units skip it). With `tickets` the
// launch is persistent: blocks take units in order by an atomic ticket (ctr[CTR_TICKET]); the
// units of one first step form a group, and a unit of group k starts once the done counter of
// group k-1 reaches that group's unit count gcount[k-1] (each group waited for the one before it,
// so every earlier step is finished). Every group has a counter of its own (DONE_STRIDE apart):
// a step's waits and finishes touch one counter, the ticket another, and the error flag a third.
// This cannot deadlock: a block holding ticket t waits only for smaller tickets, all held by
// running blocks. A wait longer than ~2^35 clocks sets the error flag ctr[CTR_ERR] (the host
// raises) instead of hanging. Without `tickets` block b runs unit u_base + b (the host launches
// one step per launch).
// Masks written in the same launch are read with __ldcg (L2: never a stale L1 line).
#include "common.cuh"

#define FULL 0xffffffffu
// SIDE_*, SWEEP_HUB_EDGES, PUSH_IN / PUSH_OUT (the `push` bits: the in side pushes along the forward
// CSR, else pulls over the reverse one; the out side pushes along the reverse CSR, else pulls over
// the forward one), SKIP_OUT / SKIP_IN (that side is not swept: its steps have no units, the runs
// leave it), SCHED_FIELDS / DESC_FIELDS (support_schedule.FIELDS / DESC_FIELDS), CTR_TICKET / CTR_ERR /
// CTR_WORDS (u64 words of ctr: the ticket and the error flag in different 128-byte lines),
// DONE_STRIDE (one u32 done counter per group, a 32-byte sector each), SWEEP_THREADS and
// CHOOSE_THREADS come from distgrail/constants.py (KERNEL_MACROS["supports"]), in the #define
// block distgrail.gpu.kernels prepends
static_assert(SWEEP_THREADS % 32 == 0 && SWEEP_THREADS <= 1024, "hub_chunk reduces over the block's warps");
static_assert(CTR_TICKET < CTR_WORDS && CTR_ERR < CTR_WORDS && (CTR_ERR - CTR_TICKET) * 8 >= 128,
              "ctr: the ticket and the error flag in different 128-byte lines of CTR_WORDS words");

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
// ...), and for a pulling row its own first mask word (only its own unit writes it, so it holds
// the seed bit all sweep long; a hub row's mask only its chunks write, by atomicOr). It does not depend on the sweep, so a unit loads it BEFORE waiting
// for the units it needs, and after the wait only the neighbours' masks are loaded (one L2 round
// trip per level on the critical path).
#define PF 8
struct Pre {
    i64 e0, e1;
    u64 own;
    int c[PF];
};

__device__ __forceinline__ void prefetch_row(const Side& sd, bool push, i64 u, bool act, int lane, int G, int W,
                                             Pre& p) {
    p.own = (!push && act && lane == 0) ? __ldcg(&sd.mask[u * W]) : 0ULL;
    p.e0 = act ? sd.ptr[u] : 0;
    p.e1 = act ? sd.ptr[u + 1] : 0;
    if (p.e1 - p.e0 > SWEEP_HUB_EDGES) p.e1 = p.e0;  // a hub row: its chunk units sweep it (hub_chunk)
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
        if (push) {  // mask[u] is final (its neighbours' pushes came on earlier steps): push it on
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
            if (act && lane == 0 && acc) sd.mask[u * W + w] = (w == 0 ? p.own : __ldcg(&sd.mask[u * W + w])) | acc;
        }
    }
}

// rows a..b-1 of one side, a group of G lanes per row, over threads t = 0..nt-1 (nt % 32 == 0).
// The row loop has the same trip count for every thread, so the group shuffles never diverge.
// `pre`: this thread's structure of the first row (a + t / G), loaded by prefetch_row when `use_pre`.
__device__ __forceinline__ void side_rows(const Side& sd, bool push, i64 a, i64 b, int G, int W, int t, int nt,
                                          bool use_pre, const Pre& pre) {
    // no edge: nothing to OR (same for all threads); a one-side unit has rows with edges
    if (!use_pre && (a >= b || sd.ptr[a] == sd.ptr[b])) return;
    const int ng = nt / G, lane = t & (G - 1);
    for (i64 base = a; base < b; base += ng) {
        const i64 u = base + t / G;
        const bool act = u < b;
        if (use_pre && base == a) {
            or_row(sd, push, u, act, pre, lane, G, W);
        } else {
            Pre p;
            prefetch_row(sd, push, u, act, lane, G, W, p);
            or_row(sd, push, u, act, p, lane, G, W);
        }
    }
}

// Chunk su[3] (SWEEP_HUB_EDGES edges) of hub row su[5], the whole block on it: a push ORs the row's
// (final) mask into the chunk's neighbours; a pull ORs the chunk's neighbours' masks, reduces them
// over the block and ORs the result into the row's mask atomically (the row's other chunks do too;
// no row unit writes a hub row). `red`: SWEEP_THREADS / 32 words of shared memory.
__device__ __forceinline__ void hub_chunk(const Side& sd, bool push, i64 u, i64 k, int W, int t, int nt,
                                          u64* red) {
    const i64 end = sd.ptr[u + 1];
    const i64 e0 = sd.ptr[u] + k * SWEEP_HUB_EDGES, e1 = min(e0 + (i64)SWEEP_HUB_EDGES, end);
    for (int w = 0; w < W; ++w) {
        if (push) {
            const u64 x = __ldcg(&sd.mask[u * W + w]);  // the same word for every thread: no divergence
            if (!x) continue;
            for (i64 j = e0 + t; j < e1; j += nt) {
                u64* q = &sd.mask[(i64)sd.ind[j] * W + w];
                if ((__ldcg(q) & x) != x) atomicOr((unsigned long long*)q, (unsigned long long)x);
            }
        } else {
            u64 acc = 0;
            for (i64 j = e0 + t; j < e1; j += nt) acc |= __ldcg(&sd.mask[(i64)sd.ind[j] * W + w]);
            acc = group_or(acc, 32);
            if ((t & 31) == 0) red[t >> 5] = acc;
            __syncthreads();
            if (t == 0) {
                for (int k2 = 1; k2 < nt / 32; ++k2) acc |= red[k2];
                if (acc) atomicOr((unsigned long long*)&sd.mask[u * W + w], (unsigned long long)acc);
            }
            __syncthreads();
        }
    }
}

__device__ __forceinline__ void run_unit(const int* __restrict__ su, const i64* __restrict__ lp, int L, int shift,
                                         int push, int W, const Side& out, const Side& in, const Pre& pre) {
    const bool pin = push & PUSH_IN, pout = push & PUSH_OUT;
    const int t = threadIdx.x, nt = blockDim.x;
    const int s0 = su[0], s1 = su[1], side = su[2], g = su[5];
    if (side == SIDE_RUN) {
        for (int s = s0; s < s1; ++s) {
            const int lo = L - 2 - s + (pout ? 1 : 0), li = s + shift;
            if (!(push & SKIP_OUT)) side_rows(out, pout, lp[lo], lp[lo + 1], g & 0xff, W, t, nt, false, pre);
            if (!(push & SKIP_IN)) side_rows(in, pin, lp[li], lp[li + 1], g >> 8, W, t, nt, false, pre);
            __syncthreads();
        }
    } else if (side == SIDE_OUT) {
        side_rows(out, pout, su[3], su[4], g, W, t, nt, true, pre);
    } else if (side == SIDE_IN) {
        side_rows(in, pin, su[3], su[4], g, W, t, nt, true, pre);
    } else {
        __shared__ u64 red[SWEEP_THREADS / 32];
        const bool so = side == SIDE_OUT_HUB;
        hub_chunk(so ? out : in, so ? pout : pin, (i64)g, (i64)su[3], W, t, nt, red);
    }
}

// thread 0 of a block: wait until *cnt (units of the group before done) >= need, or set the
// error flag ctr[CTR_ERR] after ~2^35 clocks (it is read only every 256 polls)
__device__ void wait_done(unsigned long long* ctr, const unsigned int* cnt, unsigned int need) {
    volatile const unsigned int* done = cnt;
    volatile unsigned long long* err = ctr + CTR_ERR;
    const long long t0 = clock64();
    for (unsigned int k = 1; *done < need; ++k) {
        if ((k & 255) == 0) {
            if (*err) break;
            if (clock64() - t0 > (1LL << 35)) {
                atomicExch(ctr + CTR_ERR, 1ULL);
                break;
            }
        }
        __nanosleep(64);
    }
    __threadfence();  // acquire: the finished units' masks before ours
}

extern "C" __global__ void __launch_bounds__(SWEEP_THREADS)
dg_support_sweep(const int* __restrict__ sched, long long U, long long u_base, int tickets,
                 unsigned long long* ctr, unsigned int* done, const int* __restrict__ gcount,
                 const i64* __restrict__ level_ptr, int L, int shift, int push, int W,
                 const i64* __restrict__ optr, const int* __restrict__ oind, u64* omask,
                 const i64* __restrict__ iptr, const int* __restrict__ iind, u64* imask) {
    const Side out{optr, oind, omask}, in{iptr, iind, imask};
    const bool tk = tickets != 0;
    const int t = threadIdx.x;
    __shared__ long long s_u;
    long long u = u_base + blockIdx.x;
    for (;;) {
        if (tk) {
            if (t == 0) s_u = (long long)atomicAdd(ctr + CTR_TICKET, 1ULL);
            __syncthreads();
            u = s_u;
        }
        if (u >= U) return;
        const int* su = sched + u * SCHED_FIELDS;
        const int side = su[2], G = su[5], grp = su[7];
        // the count to wait for, loaded before the structure's dependent loads stall the thread
        const unsigned int want = (tk && t == 0 && grp > 0) ? (unsigned int)gcount[grp - 1] : 0u;
        Pre p{0, 0, 0, {0}};
        if (side == SIDE_OUT || side == SIDE_IN) {  // structure first, then wait
            const i64 r = su[3] + t / G;
            const bool so = side == SIDE_OUT;
            prefetch_row(so ? out : in, (push & (so ? PUSH_OUT : PUSH_IN)) != 0, r, r < su[4], t & (G - 1), G, W, p);
        }
        if (tk) {
            if (t == 0 && grp > 0) wait_done(ctr, done + (i64)(grp - 1) * DONE_STRIDE, want);
            __syncthreads();
        }
        run_unit(su, level_ptr, L, shift, push, W, out, in, p);
        if (!tk) return;
        // the block's writes of the unit, ordered before thread 0's fence by the barrier (fences are
        // cumulative, as in cooperative groups' grid sync), are visible device-wide before the
        // unit counts as done; one fence per block, not one per thread
        __syncthreads();
        if (t == 0) {
            __threadfence();
            atomicAdd(done + (i64)grp * DONE_STRIDE, 1u);
        }
    }
}

// The units of the sweep from the schedule's descriptors (twin: support_schedule.expand_schedule):
// unit u belongs to the last descriptor with dstart <= u (dstart: first unit of each descriptor,
// ascending; every descriptor has at least one unit), and is its k-th, k = u - dstart.
extern "C" __global__ void dg_support_expand(const long long* __restrict__ desc, const long long* __restrict__ dstart,
                                             int D, long long U, int* __restrict__ sched) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long u = (long long)blockIdx.x * blockDim.x + threadIdx.x; u < U; u += stride) {
        int lo = 0, hi = D - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (dstart[mid] <= u) lo = mid; else hi = mid - 1;
        }
        const long long* d = desc + (long long)lo * DESC_FIELDS;
        const long long r0 = d[3] + (u - dstart[lo]) * d[5];
        int* o = sched + u * SCHED_FIELDS;
        o[0] = (int)d[0];
        o[1] = (int)d[1];
        o[2] = (int)d[2];
        o[3] = (int)r0;
        o[4] = (int)min(r0 + d[5], d[4]);
        o[5] = (int)d[6];
        o[6] = (int)d[7];
        o[7] = (int)d[8];
    }
}

// The hub rows of a CSR (rows with more than SWEEP_HUB_EDGES edges), appended in any order: hubs[0]
// counts them (past cap the host knows its bound was wrong), hubs[1 + i] a row, hubs[1 + cap + i]
// its edge count (twin: support_schedule.hub_rows_numpy; the host sorts them by row). A CSR of C
// rows and m edges has at most min(C, m / (SWEEP_HUB_EDGES + 1)) hubs: cap holds them all.
extern "C" __global__ void dg_support_hubs(const i64* __restrict__ ptr, i64 C, long long* __restrict__ hubs,
                                           long long cap) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 u = (i64)blockIdx.x * blockDim.x + threadIdx.x; u < C; u += stride) {
        const i64 deg = ptr[u + 1] - ptr[u];
        if (deg > SWEEP_HUB_EDGES) {
            const long long at = (long long)atomicAdd((unsigned long long*)hubs, 1ULL);
            if (at < cap) {
                hubs[1 + at] = u;
                hubs[1 + cap + at] = deg;
            }
        }
    }
}

// bit (j) of word j / 64 in row ids[j] of both masks, for the nb supports of the block (ids distinct)
// (a side whose SKIP_* bit is set in `skip` is not written: its mask may be the other side's)
extern "C" __global__ void dg_support_seed(const int* __restrict__ ids, int nb, u64* out, u64* in, int W, int skip) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < nb) {
        const i64 at = (i64)ids[j] * W + (j >> 6);
        const u64 bit = 1ULL << (j & 63);
        if (!(skip & SKIP_OUT)) out[at] |= bit;
        if (!(skip & SKIP_IN)) in[at] |= bit;
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
