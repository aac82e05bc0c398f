// The guided search, query step 5 (twin: distgrail/query/search.py, guided_search_numpy): pass 1
// (dg_search, one warp per query) and pass 2 (dg_grid_*, grid-wide, below). Record layout and step
// codes: query.cuh. work counters (u64): [0] undecided, [1] next, [2] handed to the grid-wide search.
#include "query.cuh"

// One warp per query, level-synchronous BFS from cu in the pruned DAG, exactly the frontier
// sets of guided_search_numpy (so the round count matches; a child enters only if
// the level, support-mask and interval tests allow it, and answers the query on a DT-subtree or
// support-mask hit). Warps take queries from the work list
// one at a time (dynamic scheduling). Each warp owns a visited bitmap (vwords words, left all-zero
// after every query) and a queue of `cap` vertices; a query whose queue would overflow, or that
// has scanned more than `budget` edges, is handed to `handed_on` untouched, for the grid-wide
// search (dg_grid_* below), which redoes it from the start.
extern "C" __global__ void dg_search(const int4* __restrict__ work, const u64* __restrict__ nwork_p,
                                     u64* __restrict__ next_p,
                                     const i64* __restrict__ indptr, const i32* __restrict__ indices,
                                     const i32* __restrict__ rec, int R, int d, int W,
                                     unsigned int* __restrict__ visited, i64 vwords,
                                     i32* __restrict__ queue, i64 cap, i64 budget,
                                     unsigned char* __restrict__ ans,
                                     int4* __restrict__ handed_on, u64* __restrict__ nhanded_p,
                                     u64* __restrict__ counters) {
    extern __shared__ i32 tgt_all[];
    const int lane = threadIdx.x & 31;
    const int warp_in_block = threadIdx.x >> 5;
    const i64 gw = (i64)blockIdx.x * (blockDim.x >> 5) + warp_in_block;
    i32* tgt = tgt_all + warp_in_block * R;
    unsigned int* visited_by_warp = visited + gw * vwords;
    i32* warp_queue = queue + gw * cap;
    const unsigned int lt = (1u << lane) - 1u;
    const int B = 4 + 4 * W;
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
            atomicOr(&visited_by_warp[item.y >> 5], 1u << (item.y & 31));
            warp_queue[0] = item.y;
        }
        __syncwarp();
        const int tl = tgt[0], tp = tgt[2];
        i64 head = 0, tail = 1;
        int rounds = 0;
        i64 scanned = 0;
        bool found = false, hand_on = false;
        while (head < tail && !found && !hand_on) {
            ++rounds;
            const i64 lend = tail;
            for (i64 f0 = head; f0 < lend && !found && !hand_on; f0 += 32) {
                const i64 fi = f0 + lane;
                i64 beg = 0, deg = 0;
                if (fi < lend) {
                    const int x = warp_queue[fi];
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
                scanned += total;  // warp-uniform: the visit budget hands long searches on
                if (scanned > budget) { hand_on = true; break; }
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
                        const int r = dg_child(c, v, rec, R, tgt, tl, tp, W, B, d, visited_by_warp);
                        hit = r == DG_CHILD_HIT;
                        fresh = r == DG_CHILD_NEW;
                    }
                    const unsigned int m = __ballot_sync(FULL, fresh);
                    if (fresh) {
                        const i64 pos = tail + __popc(m & lt);
                        if (pos < cap) warp_queue[pos] = c;
                        else atomicAnd(&visited_by_warp[c >> 5], ~(1u << (c & 31)));  // not queued: unmark
                    }
                    tail += __popc(m);
                    __syncwarp();
                    if (__any_sync(FULL, hit)) { found = true; break; }
                    if (tail > cap) { hand_on = true; break; }
                }
            }
            head = lend;
        }
        // leave the bitmap all-zero: every marked vertex is in the queue (all bits of a touched
        // word belong to this query)
        const i64 nq = tail < cap ? tail : cap;
        for (i64 k = lane; k < nq; k += 32) visited_by_warp[warp_queue[k] >> 5] = 0u;
        __syncwarp();
        if (lane == 0) {
            if (hand_on) {
                const u64 at = atomicAdd(nhanded_p, 1ull);
                handed_on[at] = item;
            } else {
                ans[item.x] = found ? 1 : 0;
                if (found) ++npos; else ++nneg;
                if ((u64)rounds > maxr) maxr = rounds;
            }
        }
    }
    if (lane == 0) {
        if (npos) atomicAdd(&counters[DG_STEP_SEARCH_POSITIVE], npos);
        if (nneg) atomicAdd(&counters[DG_STEP_SEARCH_NEGATIVE], nneg);
        if (maxr) atomicMax(&counters[DG_MAX_ROUNDS], maxr);
    }
}

// Pass 2 of the search: the grid-wide BIDIRECTIONAL search for the hard queries (launcher:
// distgrail/query/grid.py; twin: distgrail/query/bidir.py bidirectional_search_numpy, same frontiers
// round by round). Record layout and step codes: query.cuh.
//
// A group of m hard queries (slots 0..m-1 of `hard` from g0 on, items {index, cu, cv, 0}) is searched
// by the whole GPU. Each query has a forward side (from cu over the forward CSR) and a backward side
// (from cv over the reverse CSR), each with its own bitmap of C bits (visited + (2 slot + side) * vwords).
// The frontier is one list of (code, vertex) entries, code = slot (forward) or ~slot (backward); a
// round is two launches:
//   dg_grid_expand   every entry of a live query: if its side is the one the query grows this round
//                    (forward iff its forward frontier has at most as many edges as its backward
//                    one: `cur` counters of the last round), the neighbours that pass the side's
//                    tests and are new to that side's bitmap go to the raw next list; a neighbour
//                    already marked by the OTHER side, or a DT-subtree / support cut, sets done[slot].
//                    An entry of the side not grown is carried over unchanged. Every entry appended
//                    is counted in `nxt`: entries and edges (out-degree forward, in-degree backward)
//                    per side and query.
//   dg_grid_compact  raw next list -> frontier, without the entries of answered queries and of
//                    queries with an empty side (those are not reachable); zeroes `cur` for reuse.
// Counter sets are u64 rows of `gs` slots: [0] forward entries [1] backward entries [2] forward
// edges [3] backward edges; the host swaps `cur` and `nxt` after every round.
// Frontier counts live in three u64 slots fcnt[0..2] that rotate (host: a, b, c -> c, a, b):
// expand reads fcnt[a], appends at fcnt[b], zeroes fcnt[c]; compact reads fcnt[b], appends at
// fcnt[c], zeroes fcnt[a]. A frontier list holds `cap` entries; an append beyond it sets
// gstate[1] (the host then redoes the group in smaller groups). gstate[0] counts the rounds whose
// frontier was not empty, so launches past the end of the search change nothing.

// The backward side's test of parent p of a frontier vertex, for the query whose source u has
// record src (level sl, DT subtree start0..post0 = ss..sp): DG_CHILD_HIT if p answers it (p is
// marked by the forward side, p lies in u's DT subtree, or u reaches a support that reaches p);
// DG_CHILD_NEW if p enters the backward side (level above u's, L_p inside L_u, the masks allow
// u -> p, not yet in bwd, the backward side's bitmap: its bit is set now); DG_CHILD_SKIP otherwise.
__device__ __forceinline__ int dg_parent(int p, const i32* __restrict__ rec, int R, const i32* __restrict__ src,
                                         int sl, int ss, int sp, int W, int B, int d,
                                         const unsigned int* __restrict__ fwd, unsigned int* __restrict__ bwd) {
    const i32* rp = rec + (i64)p * R;
    const int4 hp = *reinterpret_cast<const int4*>(rp);
    if (hp.x < sl) return DG_CHILD_SKIP;
    if (dg_bit(fwd, p)) return DG_CHILD_HIT;
    if (hp.x == sl) return DG_CHILD_SKIP;
    bool pos = false, neg = false;
    if (W) dg_masks(src, rp, W, pos, neg);
    if (neg || !dg_inside(src, rp, B, d)) return DG_CHILD_SKIP;
    if (pos || (ss <= hp.z && hp.z <= sp)) return DG_CHILD_HIT;
    const unsigned int bit = 1u << (p & 31);
    return (atomicOr(&bwd[p >> 5], bit) & bit) ? DG_CHILD_SKIP : DG_CHILD_NEW;
}

// appends the flagged lanes' (code, vertex) to the raw next list and counts them for query q, side s
__device__ __forceinline__ void dg_grid_append(bool fresh, int code, int y, u64 deg, int q, int s, i32* nq,
                                               i32* nv, i64 cap, u64* fcnt_b, u64* gstate, u64* nxt, i64 gs) {
    const int lane = threadIdx.x & 31;
    const unsigned int mk = __ballot_sync(FULL, fresh);
    if (!mk) return;
    u64 sum = fresh ? deg : 0;
    for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(FULL, sum, o);
    u64 at = 0;
    if (lane == 0) {
        at = atomicAdd(fcnt_b, (u64)__popc(mk));
        if (at + __popc(mk) > (u64)cap) gstate[1] = 1;  // the group must be split
        atomicAdd(&nxt[s * gs + q], (u64)__popc(mk));
        atomicAdd(&nxt[(2 + s) * gs + q], sum);
    }
    at = __shfl_sync(FULL, at, 0);
    if (fresh) {
        const u64 p = at + __popc(mk & ((1u << lane) - 1u));
        if (p < (u64)cap) {
            nq[p] = code;
            nv[p] = y;
        }
    }
}

extern "C" __global__ void dg_grid_seed(const int4* __restrict__ hard, i64 g0, int m, i32* __restrict__ fq,
                                        i32* __restrict__ fv, unsigned int* __restrict__ visited, i64 vwords,
                                        unsigned char* __restrict__ done, u64* __restrict__ fcnt, int a,
                                        u64* __restrict__ gstate, const i64* __restrict__ indptr,
                                        const i64* __restrict__ rindptr, u64* __restrict__ cur,
                                        u64* __restrict__ nxt, i64 gs) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) {
        fcnt[0] = 0;
        fcnt[1] = 0;
        fcnt[2] = 0;
        fcnt[a] = 2 * (u64)m;
        gstate[0] = 0;
        gstate[1] = 0;
    }
    if (i < m) {
        const int u = hard[g0 + i].y, v = hard[g0 + i].z;
        fq[2 * i] = (i32)i;
        fv[2 * i] = u;
        fq[2 * i + 1] = ~(i32)i;
        fv[2 * i + 1] = v;
        done[i] = 0;
        visited[(2 * i) * vwords + (u >> 5)] |= 1u << (u & 31);  // bitmaps 2i, 2i+1 are this thread's alone
        visited[(2 * i + 1) * vwords + (v >> 5)] |= 1u << (v & 31);
        cur[i] = 1;
        cur[gs + i] = 1;
        cur[2 * gs + i] = (u64)(indptr[u + 1] - indptr[u]);
        cur[3 * gs + i] = (u64)(rindptr[v + 1] - rindptr[v]);
        for (int k = 0; k < 4; ++k) nxt[k * gs + i] = 0;
    }
}

extern "C" __global__ void dg_grid_expand(const int4* __restrict__ hard, i64 g0, const i32* __restrict__ fq,
                                          const i32* __restrict__ fv, i32* __restrict__ nq, i32* __restrict__ nv,
                                          i64 cap, u64* __restrict__ fcnt, int a, int b, int c,
                                          const i64* __restrict__ indptr, const i32* __restrict__ indices,
                                          const i64* __restrict__ rindptr, const i32* __restrict__ rindices,
                                          const i32* __restrict__ rec, int R, int d, int W,
                                          unsigned int* __restrict__ visited, i64 vwords,
                                          unsigned char* __restrict__ done, u64* __restrict__ gstate,
                                          const u64* __restrict__ cur, u64* __restrict__ nxt, i64 gs) {
    const u64 n0 = fcnt[a];
    const i64 n = (i64)(n0 < (u64)cap ? n0 : (u64)cap);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        fcnt[c] = 0;
        if (n) gstate[0] += 1;
    }
    const int lane = threadIdx.x & 31;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    const int B = 4 + 4 * W;
    for (i64 e = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; e < n; e += nwarps) {
        const int code = fq[e], x = fv[e];
        const int s = code < 0 ? 1 : 0;
        const int q = code < 0 ? ~code : code;
        int dq = 0;
        if (lane == 0) dq = *(volatile unsigned char*)(done + q);
        if (__shfl_sync(FULL, dq, 0)) continue;  // answered this round: its entries do not matter
        const bool go_fwd = cur[2 * gs + q] <= cur[3 * gs + q];
        const i64* ptr = s ? rindptr : indptr;
        if (go_fwd == (s == 1)) {  // the side not grown this round: carried over unchanged
            dg_grid_append(lane == 0, code, x, (u64)(ptr[x + 1] - ptr[x]), q, s, nq, nv, cap, &fcnt[b], gstate,
                           nxt, gs);
            continue;
        }
        const int4 item = hard[g0 + q];
        unsigned int* fwd = visited + (2 * (i64)q) * vwords;
        unsigned int* bwd = fwd + vwords;
        const i32* idx = s ? rindices : indices;
        const i32* end_rec = rec + (i64)(s ? item.y : item.z) * R;
        const int4 eh = *reinterpret_cast<const int4*>(end_rec);
        const i64 beg = ptr[x], end = ptr[x + 1];
        for (i64 j0 = beg; j0 < end; j0 += 32) {  // warp-uniform bounds
            const i64 j = j0 + lane;
            bool hit = false, fresh = false;
            int y = 0;
            u64 deg = 0;
            if (j < end) {
                y = idx[j];
                int r;
                if (s) {
                    r = dg_parent(y, rec, R, end_rec, eh.x, eh.y, eh.z, W, B, d, fwd, bwd);
                } else {
                    r = dg_child(y, item.z, rec, R, end_rec, eh.x, eh.z, W, B, d, fwd, bwd);
                }
                hit = r == DG_CHILD_HIT;
                fresh = r == DG_CHILD_NEW;
                if (fresh) deg = (u64)(ptr[y + 1] - ptr[y]);  // out-degree forward, in-degree backward
            }
            dg_grid_append(fresh, code, y, deg, q, s, nq, nv, cap, &fcnt[b], gstate, nxt, gs);
            if (__any_sync(FULL, hit)) {
                if (lane == 0) done[q] = 1;
                break;
            }
        }
    }
}

extern "C" __global__ void dg_grid_compact(const i32* __restrict__ nq, const i32* __restrict__ nv, i64 cap,
                                           i32* __restrict__ fq, i32* __restrict__ fv, u64* __restrict__ fcnt,
                                           int a, int b, int c, const unsigned char* __restrict__ done,
                                           const u64* __restrict__ nxt, u64* __restrict__ cur, i64 gs, int m) {
    const u64 n0 = fcnt[b];
    const i64 n = (i64)(n0 < (u64)cap ? n0 : (u64)cap);
    if (blockIdx.x == 0 && threadIdx.x == 0) fcnt[a] = 0;
    const int lane = threadIdx.x & 31;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 q = (i64)blockIdx.x * blockDim.x + threadIdx.x; q < m; q += stride)
        for (int k = 0; k < 4; ++k) cur[k * gs + q] = 0;  // the next round's `nxt`
    for (i64 base = (i64)blockIdx.x * blockDim.x + (threadIdx.x & ~31); base < n; base += stride) {
        const i64 i = base + lane;
        bool keep = false;
        int code = 0, x = 0;
        if (i < n) {
            code = nq[i];
            x = nv[i];
            const int q = code < 0 ? ~code : code;
            keep = !done[q] && nxt[q] && nxt[gs + q];  // a query with an empty side has ended
        }
        const unsigned int mk = __ballot_sync(FULL, keep);
        if (mk) {
            u64 at = 0;
            if (lane == 0) at = atomicAdd(&fcnt[c], (u64)__popc(mk));
            at = __shfl_sync(FULL, at, 0);
            if (keep) {
                const u64 p = at + __popc(mk & ((1u << lane) - 1u));
                fq[p] = code;  // p < n <= cap
                fv[p] = x;
            }
        }
    }
}

// answers and step counts of a finished group; one thread per query
extern "C" __global__ void dg_grid_finish(const int4* __restrict__ hard, i64 g0, int m,
                                          const unsigned char* __restrict__ done, unsigned char* __restrict__ ans,
                                          const u64* __restrict__ gstate, u64* __restrict__ counters) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0 && gstate[0]) atomicMax(&counters[DG_MAX_ROUNDS], gstate[0]);
    if (i < m) {
        const int f = done[i] ? 1 : 0;
        ans[hard[g0 + i].x] = (unsigned char)f;
        atomicAdd(&counters[f ? DG_STEP_SEARCH_POSITIVE : DG_STEP_SEARCH_NEGATIVE], 1ull);
    }
}
