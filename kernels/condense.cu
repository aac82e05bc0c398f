// Condensation on the GPU: CSR building from 64-bit (row << 32 | col) keys, the frontier sweeps of
// the SCC search (peel = trimming / Kahn levels, reach = forward-backward, colour propagation and
// the colour-restricted backward search) and helpers. Twins: distgrail.stages.scc (NumPy).
// Ids are int32 (n < 2^31 - 1), CSR row pointers int64, frontiers int32. Edge positions are int64
// everywhere; the scan of the keep flags is int32 up to 2^31 - 1 edges and int64 past that
// (the *64 kernels), and past that the keys are sorted in row buckets (dg_cond_key_rows,
// dg_cond_bucket) of fewer than 2^31 keys each, one library sort per bucket.
#include "common.cuh"

#define DG_SENTINEL 0xFFFFFFFFFFFFFFFFULL  // a dropped edge (self-loop / inside one component)

#define DG_PEEL 0        // cnt[v] -= 1; at 0, v leaves (rep[v] = v, level[v] = round + 1)
#define DG_REACH 1       // mark[v] |= bit
#define DG_COLOR 2       // color[v] = max(color[v], color[u]); changed -> next frontier once per round
#define DG_COLOR_BACK 3  // reverse CSR: rep[v] = color[u] where color[v] == color[u]

// grid-stride, one warp per row; lanes over the row's entries
#define DG_WARP_ROWS(nrows)                                                   \
    const int lane = threadIdx.x & 31;                                        \
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;                    \
    for (i64 r = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < (nrows); r += nwarps)

// A hub row (more than `hub` entries: R-MAT 27's condensed DAG has one of 11.1 M) would hold one
// warp for the whole launch; the warp-per-row kernels skip it and append it to `hubs` (hubs[0]
// counts them, hubs[1 + i] a row; the host sizes it for every row that can be one), and their
// *_hubs companions sweep the hub rows' entries, a team of the grid's warps a row (dg_hub_team,
// kernels/common.cuh).
__device__ __forceinline__ bool dg_hub_row(i64 deg, i64 hub, long long* hubs, i64 r, int lane) {
    if (deg <= hub) return false;
    if (lane == 0) hubs[1 + (i64)atomicAdd((unsigned long long*)hubs, 1ULL)] = r;
    return true;
}

// the entries of every hub row, warp by warp (a warp's lanes step together: entry b + lane, while
// b < end), a team of warps on each row (dg_hub_team); u the row
#define DG_HUB_ENTRIES(hubs)                                                                    \
    const int lane = threadIdx.x & 31;                                                          \
    const i64 nh = (hubs)[0];                                                                   \
    DG_TEAM_HUB_ROWS(nh, h)                                                                     \
        for (i64 u = (hubs)[1 + h], b = ptr[u] + tm.warp * 32, end = ptr[u + 1]; b < end; b += tm.size * 32)

// bit 0: some pair (src[i-1], dst[i-1]) >= (src[i], dst[i]) (unsorted or repeated); bit 1: a self-loop
extern "C" __global__ void dg_cond_check(const int* __restrict__ src, const int* __restrict__ dst, i64 m,
                                         int* __restrict__ flags) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    int f = 0;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride) {
        const int s = src[i], d = dst[i];
        if (s == d) f |= 2;
        if (i > 0) {
            const int ps = src[i - 1], pd = dst[i - 1];
            if (ps > s || (ps == s && pd >= d)) f |= 1;
        }
    }
    if (f) atomicOr(flags, f);
}

__device__ __forceinline__ u64 dg_key(int a, int b) { return a == b ? DG_SENTINEL : ((u64)(unsigned)a << 32) | (unsigned)b; }

// keys of an edge list; self-loops become the sentinel (sorted last, dropped)
extern "C" __global__ void dg_cond_pack(const int* __restrict__ src, const int* __restrict__ dst, u64* __restrict__ keys,
                                        i64 m) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride) keys[i] = dg_key(src[i], dst[i]);
}

// keys (f[u] << 32 | f[v]) of every CSR entry u -> v, or (f[v] << 32 | f[u]) if swap;
// f[u] == f[v] -> sentinel. A piece of the rows: ptr starts at row row0 (its offsets those of the
// whole CSR), keys[e - base] for entry e (base: the piece's first entry)
extern "C" __global__ void dg_cond_csr_keys(const i64* __restrict__ ptr, const int* __restrict__ idx,
                                            const int* __restrict__ f, u64* __restrict__ keys, i64 n, int swap,
                                            i64 row0, i64 base, i64 hub, long long* hubs) {
    DG_WARP_ROWS(n) {
        if (dg_hub_row(ptr[r + 1] - ptr[r], hub, hubs, r, lane)) continue;
        const int fu = f[row0 + r];
        for (i64 e = ptr[r] + lane; e < ptr[r + 1]; e += 32) {
            const int fv = f[idx[e]];
            keys[e - base] = swap ? dg_key(fv, fu) : dg_key(fu, fv);
        }
    }
}

extern "C" __global__ void dg_cond_csr_keys_hubs(const i64* __restrict__ ptr, const int* __restrict__ idx,
                                                 const int* __restrict__ f, u64* __restrict__ keys, int swap,
                                                 i64 row0, i64 base, const long long* __restrict__ hubs) {
    DG_HUB_ENTRIES(hubs) {
        const i64 e = b + lane;
        if (e < end) {
            const int fu = f[row0 + u], fv = f[idx[e]];
            keys[e - base] = swap ? dg_key(fv, fu) : dg_key(fu, fv);
        }
    }
}

// (a << 32 | b) -> (b << 32 | a), in place: the reverse CSR's keys from the forward's
extern "C" __global__ void dg_cond_swap(u64* __restrict__ keys, i64 m) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride) {
        const u64 k = keys[i];
        keys[i] = (k << 32) | (k >> 32);
    }
}

// keep[i] = 1 for the first of equal sorted keys, 0 for repeats and sentinels
extern "C" __global__ void dg_cond_keep(const u64* __restrict__ keys, i64 m, unsigned char* __restrict__ keep) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride) {
        const u64 k = keys[i];
        keep[i] = (k != DG_SENTINEL && (i == 0 || keys[i - 1] != k)) ? 1 : 0;
    }
}

// column of every kept key at its place; pos = inclusive prefix sum of keep (has_pos 0: keep all)
template <class P>
__device__ __forceinline__ void dg_compact(const u64* __restrict__ keys, const P* __restrict__ pos, int has_pos, i64 m,
                                           int* __restrict__ out) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride) {
        if (!has_pos) {
            out[i] = (int)(keys[i] & 0xFFFFFFFFULL);
        } else {
            const i64 p = (i64)pos[i], q = i ? (i64)pos[i - 1] : 0;
            if (p != q) out[p - 1] = (int)(keys[i] & 0xFFFFFFFFULL);
        }
    }
}
extern "C" __global__ void dg_cond_compact(const u64* __restrict__ keys, const int* __restrict__ pos, int has_pos,
                                           i64 m, int* __restrict__ out) {
    dg_compact(keys, pos, has_pos, m, out);
}
extern "C" __global__ void dg_cond_compact64(const u64* __restrict__ keys, const i64* __restrict__ pos, int has_pos,
                                             i64 m, int* __restrict__ out) {
    dg_compact(keys, pos, has_pos, m, out);
}

// ptr[v] = kept keys of rows < v: lower bound of v << 32 in the sorted keys, through pos
template <class P>
__device__ __forceinline__ void dg_row_ptr(const u64* __restrict__ keys, const P* __restrict__ pos, int has_pos, i64 m,
                                           i64 n, i64* __restrict__ ptr) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 v = (i64)blockIdx.x * blockDim.x + threadIdx.x; v <= n; v += stride) {
        const u64 want = (u64)v << 32;
        i64 lo = 0, hi = m;
        while (lo < hi) {
            const i64 mid = (lo + hi) >> 1;
            if (keys[mid] < want) lo = mid + 1; else hi = mid;
        }
        ptr[v] = !has_pos ? lo : (lo ? (i64)pos[lo - 1] : 0);
    }
}
extern "C" __global__ void dg_cond_row_ptr(const u64* __restrict__ keys, const int* __restrict__ pos, int has_pos,
                                           i64 m, i64 n, i64* __restrict__ ptr) {
    dg_row_ptr(keys, pos, has_pos, m, n, ptr);
}
extern "C" __global__ void dg_cond_row_ptr64(const u64* __restrict__ keys, const i64* __restrict__ pos, int has_pos,
                                             i64 m, i64 n, i64* __restrict__ ptr) {
    dg_row_ptr(keys, pos, has_pos, m, n, ptr);
}

// row of a key; the sentinel's is n (sorted last)
__device__ __forceinline__ i64 dg_key_row(u64 k, i64 n) { return k == DG_SENTINEL ? n : (i64)(k >> 32); }

// cnt[row + 1] += 1 for every key (cnt: n + 2 zeros; its inclusive scan: keys of the rows before)
extern "C" __global__ void dg_cond_key_rows(const u64* __restrict__ keys, i64 m, i64 n,
                                            unsigned long long* __restrict__ cnt) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride)
        atomicAdd(&cnt[dg_key_row(keys[i], n) + 1], 1ULL);
}

// every key into its row bucket: bucket j holds rows bounds[j] .. bounds[j + 1] - 1 and is filled
// from cursor[j] on (its start); order inside a bucket is arbitrary (each is sorted afterwards)
extern "C" __global__ void dg_cond_bucket(const u64* __restrict__ keys, i64 m, i64 n, const i64* __restrict__ bounds,
                                          int nb, unsigned long long* __restrict__ cursor, u64* __restrict__ out) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride) {
        const u64 k = keys[i];
        const i64 row = dg_key_row(k, n);
        int lo = 0, hi = nb - 1;  // last j with bounds[j] <= row
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (bounds[mid] <= row) lo = mid; else hi = mid - 1;
        }
        out[atomicAdd(&cursor[lo], 1ULL)] = k;
    }
}

// ptr[v] = lower bound of v in the sorted src[0..m) (an edge list that is already the CSR)
extern "C" __global__ void dg_cond_src_ptr(const int* __restrict__ src, i64 m, i64 n, i64* __restrict__ ptr) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 v = (i64)blockIdx.x * blockDim.x + threadIdx.x; v <= n; v += stride) {
        i64 lo = 0, hi = m;
        while (lo < hi) {
            const i64 mid = (lo + hi) >> 1;
            if ((i64)src[mid] < v) lo = mid + 1; else hi = mid;
        }
        ptr[v] = lo;
    }
}

// cnt[v] += 1 for every entry u -> v with u and v both remaining (rep < 0)
extern "C" __global__ void dg_cond_count(const i64* __restrict__ ptr, const int* __restrict__ idx,
                                         const int* __restrict__ rep, int* __restrict__ cnt, i64 n, i64 hub,
                                         long long* hubs) {
    DG_WARP_ROWS(n) {
        if (rep[r] >= 0 || dg_hub_row(ptr[r + 1] - ptr[r], hub, hubs, r, lane)) continue;
        for (i64 e = ptr[r] + lane; e < ptr[r + 1]; e += 32) {
            const int v = idx[e];
            if (rep[v] < 0) atomicAdd(&cnt[v], 1);
        }
    }
}

extern "C" __global__ void dg_cond_count_hubs(const i64* __restrict__ ptr, const int* __restrict__ idx,
                                              const int* __restrict__ rep, int* __restrict__ cnt,
                                              const long long* __restrict__ hubs) {
    DG_HUB_ENTRIES(hubs) {
        const i64 e = b + lane;
        if (e < end) {
            const int v = idx[e];
            if (rep[v] < 0) atomicAdd(&cnt[v], 1);
        }
    }
}

// reverse CSR rows (unordered within a row: used for searches only); cursor starts at rptr[:-1]
extern "C" __global__ void dg_cond_transpose(const i64* __restrict__ ptr, const int* __restrict__ idx,
                                             i64* __restrict__ cursor, int* __restrict__ ridx, i64 n, i64 hub,
                                             long long* hubs) {
    DG_WARP_ROWS(n) {
        if (dg_hub_row(ptr[r + 1] - ptr[r], hub, hubs, r, lane)) continue;
        for (i64 e = ptr[r] + lane; e < ptr[r + 1]; e += 32) {
            const i64 p = (i64)atomicAdd((unsigned long long*)&cursor[idx[e]], 1ULL);
            ridx[p] = (int)r;
        }
    }
}

extern "C" __global__ void dg_cond_transpose_hubs(const i64* __restrict__ ptr, const int* __restrict__ idx,
                                                  i64* __restrict__ cursor, int* __restrict__ ridx,
                                                  const long long* __restrict__ hubs) {
    DG_HUB_ENTRIES(hubs) {
        const i64 e = b + lane;
        if (e < end) ridx[(i64)atomicAdd((unsigned long long*)&cursor[idx[e]], 1ULL)] = (int)u;
    }
}

// minm[rep[v]] = smallest v of each component (minm starts at n)
extern "C" __global__ void dg_cond_min_member(const int* __restrict__ rep, int* __restrict__ minm, i64 n) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 v = (i64)blockIdx.x * blockDim.x + threadIdx.x; v < n; v += stride) atomicMin(&minm[rep[v]], (int)v);
}

struct SweepState {
    int* rep;
    int* cnt;
    int* color;
    int* mark;
    int* level;  // PEEL: written when want_level
    int want_level;
    int bit;
};

// Does the entry u -> v put v on the next frontier (round `round` being processed)?
__device__ __forceinline__ bool dg_visit(int mode, int u, int v, const SweepState& s, int round) {
    if (mode == DG_PEEL) {
        if (s.rep[v] < 0 && atomicSub(&s.cnt[v], 1) == 1) {
            s.rep[v] = v;
            if (s.want_level) s.level[v] = round + 1;
            return true;
        }
    } else if (mode == DG_REACH) {
        if (s.rep[v] < 0 && !(atomicOr(&s.mark[v], s.bit) & s.bit)) return true;
    } else if (mode == DG_COLOR) {
        if (s.rep[v] < 0) {
            const int c = s.color[u];
            if (atomicMax(&s.color[v], c) < c && atomicExch(&s.mark[v], round + 1) != round + 1) return true;
        }
    } else {  // DG_COLOR_BACK
        const int c = s.color[u];
        if (s.rep[v] < 0 && s.color[v] == c && atomicCAS(&s.rep[v], -1, c) == -1) return true;
    }
    return false;
}

// one round: frontier fin[0..nin) -> fout, status[0] = its length, status[1] = its rows' entries
extern "C" __global__ void dg_cond_sweep(int mode, const i64* __restrict__ ptr, const int* __restrict__ idx,
                                         int* rep, int* cnt, int* color, int* mark, int* level, int want_level, int bit,
                                         const int* __restrict__ fin, i64 nin, int* __restrict__ fout,
                                         unsigned long long* status, int round, i64 hub, long long* hubs) {
    const SweepState s{rep, cnt, color, mark, level, want_level, bit};
    DG_WARP_ROWS(nin) {
        const int u = fin[r];
        if (dg_hub_row(ptr[u + 1] - ptr[u], hub, hubs, u, lane)) continue;
        for (i64 e = ptr[u] + lane; e < ptr[u + 1]; e += 32) {
            const int v = idx[e];
            if (dg_visit(mode, u, v, s, round)) {
                fout[atomicAdd(&status[0], 1ULL)] = v;
                atomicAdd(&status[1], (unsigned long long)(ptr[v + 1] - ptr[v]));
            }
        }
    }
}

// the same round over the hub rows dg_cond_sweep skipped; a warp's hits take their places in
// fout with one atomic (its entries' count in status[1] summed across the warp first)
extern "C" __global__ void dg_cond_sweep_hubs(int mode, const i64* __restrict__ ptr, const int* __restrict__ idx,
                                              int* rep, int* cnt, int* color, int* mark, int* level, int want_level,
                                              int bit, const long long* __restrict__ hubs, int* __restrict__ fout,
                                              unsigned long long* status, int round) {
    const SweepState s{rep, cnt, color, mark, level, want_level, bit};
    DG_HUB_ENTRIES(hubs) {
        const i64 e = b + lane;
        int v = 0;
        bool hit = false;
        if (e < end) {
            v = idx[e];
            hit = dg_visit(mode, (int)u, v, s, round);
        }
        const unsigned hits = __ballot_sync(0xffffffffu, hit);
        if (!hits) continue;
        unsigned long long w = hit ? (unsigned long long)(ptr[v + 1] - ptr[v]) : 0ULL;
        for (int o = 16; o > 0; o >>= 1) w += __shfl_down_sync(0xffffffffu, w, o);
        unsigned long long at = 0;
        if (lane == 0) {
            at = atomicAdd(&status[0], (unsigned long long)__popc(hits));
            atomicAdd(&status[1], w);
        }
        at = __shfl_sync(0xffffffffu, at, 0);
        if (hit) fout[at + __popc(hits & ((1u << lane) - 1u))] = v;
    }
}

// Consecutive rounds in ONE block while a frontier's length + entries stay <= small_work.
// state (int64): [0] frontier length, [1] round, [2] entries of the frontier's rows,
// [3] which buffer holds it (0: fa, 1: fb), [4] rounds done by this launch (out)
extern "C" __global__ void dg_cond_sweep_small(int mode, const i64* __restrict__ ptr, const int* __restrict__ idx,
                                               int* rep, int* cnt, int* color, int* mark, int* level, int want_level,
                                               int bit, int* fa, int* fb, i64* state, i64 small_work) {
    const SweepState s{rep, cnt, color, mark, level, want_level, bit};
    __shared__ unsigned long long s_n, s_work;
    // state[4] in: the most rounds this launch runs (0: no cap; a narrow peel is checked after it)
    i64 nin = state[0], work = state[2], done = 0;
    const i64 cap = state[4];
    int round = (int)state[1], cur = (int)state[3];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    while (nin > 0 && nin + work <= small_work && (cap == 0 || done < cap)) {
        const int* fin = cur ? fb : fa;
        int* fout = cur ? fa : fb;
        if (threadIdx.x == 0) { s_n = 0; s_work = 0; }
        __syncthreads();
        for (i64 i = warp; i < nin; i += nwarps) {
            const int u = fin[i];
            for (i64 e = ptr[u] + lane; e < ptr[u + 1]; e += 32) {
                const int v = idx[e];
                if (dg_visit(mode, u, v, s, round)) {
                    fout[atomicAdd(&s_n, 1ULL)] = v;
                    atomicAdd(&s_work, (unsigned long long)(ptr[v + 1] - ptr[v]));
                }
            }
        }
        __syncthreads();
        nin = (i64)s_n;
        work = (i64)s_work;
        round += 1;
        cur ^= 1;
        done += 1;
        __syncthreads();  // everyone has read s_n before it is reset
    }
    if (threadIdx.x == 0) {
        state[0] = nin; state[1] = round; state[2] = work; state[3] = cur; state[4] = done;
    }
}
