// The partitioned condensation's passes over one rank's edge list (s[i] -> d[i]), each fused into
// one pass over the edges. Twins: distgrail.stages.partitioned_sweeps (array code, NumPy or CuPy).
// Vertex ids are int32 (<0>) or int64 (<1>); edge positions and counts are int64. The per-vertex
// flags the passes look up at random (alive, fresh) come packed as numpy.packbits packs them: n/8
// bytes stay in L2 (R-MAT scale 27: 16.8 MB against the 134 MB of one byte a vertex).
#include "common.cuh"

template <int WIDE> struct dg_psw_id { typedef int t; };
template <> struct dg_psw_id<1> { typedef long long t; };

#define DG_PSW_TILE ((i64)PSW_THREADS * PSW_ROUNDS)

// bit j of a bitmap packed as numpy.packbits packs it
__device__ __forceinline__ bool dg_psw_bit(const unsigned char* __restrict__ bits, i64 j) {
    return (bits[j >> 3] >> (7 - (int)(j & 7))) & 1;
}

// bit j of a bitmap packed as numpy.packbits packs it (byte j >> 3, bit 7 - (j & 7)), the bytes
// read as little-endian 32-bit words; the word is read first, so a bit set already costs no atomic
__device__ __forceinline__ void dg_psw_set(unsigned* __restrict__ words, i64 j) {
    const unsigned bit = 1u << (((unsigned)(j >> 3) & 3u) * 8u + (7u - (unsigned)(j & 7)));
    unsigned* w = words + (j >> 5);
    if (!(*w & bit)) atomicOr(w, bit);
}

// presence: bit d[i] (v has an in-edge) and bit n + s[i] (u has an out-edge) of a 2n-bit bitmap
template <int WIDE>
__global__ void dg_psw_presence(const typename dg_psw_id<WIDE>::t* __restrict__ s,
                                const typename dg_psw_id<WIDE>::t* __restrict__ d, i64 m, i64 n,
                                unsigned* __restrict__ words) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride) {
        dg_psw_set(words, (i64)d[i]);
        dg_psw_set(words, n + (i64)s[i]);
    }
}

// colour push: nxt[d[i]] = max(nxt[d[i]], color[s[i]]) for every edge whose source is fresh (packed)
template <int WIDE>
__global__ void dg_psw_colour(const typename dg_psw_id<WIDE>::t* __restrict__ s,
                              const typename dg_psw_id<WIDE>::t* __restrict__ d, i64 m,
                              const unsigned char* __restrict__ fresh,
                              const typename dg_psw_id<WIDE>::t* __restrict__ color,
                              typename dg_psw_id<WIDE>::t* __restrict__ nxt) {
    typedef typename dg_psw_id<WIDE>::t T;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride) {
        const T u = s[i];
        if (!dg_psw_bit(fresh, (i64)u)) continue;
        const T c = color[u];
        T* p = nxt + d[i];
        if (*p < c) atomicMax(p, c);
    }
}

// backward step: nxt[bs[i]] = 1 for every edge whose head is fresh (packed)
template <int WIDE>
__global__ void dg_psw_back(const typename dg_psw_id<WIDE>::t* __restrict__ bs,
                            const typename dg_psw_id<WIDE>::t* __restrict__ bd, i64 m,
                            const unsigned char* __restrict__ fresh, unsigned char* __restrict__ nxt) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride)
        if (dg_psw_bit(fresh, (i64)bd[i])) nxt[bs[i]] = 1;
}

template <int WIDE>
__device__ __forceinline__ bool dg_psw_keep(int mode, i64 i, i64 m, const typename dg_psw_id<WIDE>::t* __restrict__ s,
                                            const typename dg_psw_id<WIDE>::t* __restrict__ d,
                                            const unsigned char* __restrict__ alive,
                                            const typename dg_psw_id<WIDE>::t* __restrict__ color) {
    if (i >= m) return false;
    const auto u = s[i], v = d[i];
    if (mode == PSW_NO_LOOP) return u != v;
    if (mode == PSW_ALIVE) return dg_psw_bit(alive, (i64)u) && dg_psw_bit(alive, (i64)v);  // (packed)
    return mode == PSW_SAME && color[u] == color[v];
}

// the filter, pass 1: how many edges of each tile of DG_PSW_TILE edges pass (one block a tile)
template <int WIDE>
__global__ void dg_psw_count(int mode, const typename dg_psw_id<WIDE>::t* __restrict__ s,
                             const typename dg_psw_id<WIDE>::t* __restrict__ d, i64 m,
                             const unsigned char* __restrict__ alive,
                             const typename dg_psw_id<WIDE>::t* __restrict__ color, i64 ntiles,
                             int* __restrict__ counts) {
    __shared__ int warp_sum[PSW_THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (i64 t = blockIdx.x; t < ntiles; t += gridDim.x) {
        int c = 0;
        for (int r = 0; r < PSW_ROUNDS; ++r)
            c += dg_psw_keep<WIDE>(mode, t * DG_PSW_TILE + (i64)r * PSW_THREADS + threadIdx.x, m, s, d, alive, color);
        for (int k = 16; k; k >>= 1) c += __shfl_down_sync(0xFFFFFFFFu, c, k);
        if (lane == 0) warp_sum[warp] = c;
        __syncthreads();
        if (threadIdx.x == 0) {
            int total = 0;
            for (int w = 0; w < PSW_THREADS / 32; ++w) total += warp_sum[w];
            counts[t] = total;
        }
        __syncthreads();
    }
}

// the filter, pass 2: each tile's passing edges written in order from start[t] (the exclusive sum
// of the counts): out_s, out_d hold the passing edges in their input order
template <int WIDE>
__global__ void dg_psw_compact(int mode, const typename dg_psw_id<WIDE>::t* __restrict__ s,
                               const typename dg_psw_id<WIDE>::t* __restrict__ d, i64 m,
                               const unsigned char* __restrict__ alive,
                               const typename dg_psw_id<WIDE>::t* __restrict__ color, i64 ntiles,
                               const i64* __restrict__ start, typename dg_psw_id<WIDE>::t* __restrict__ out_s,
                               typename dg_psw_id<WIDE>::t* __restrict__ out_d) {
    __shared__ int warp_sum[PSW_THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned below = (1u << lane) - 1u;
    for (i64 t = blockIdx.x; t < ntiles; t += gridDim.x) {
        i64 at = start[t];
        for (int r = 0; r < PSW_ROUNDS; ++r) {
            const i64 i = t * DG_PSW_TILE + (i64)r * PSW_THREADS + threadIdx.x;
            const bool k = dg_psw_keep<WIDE>(mode, i, m, s, d, alive, color);
            const unsigned ballot = __ballot_sync(0xFFFFFFFFu, k);
            if (lane == 0) warp_sum[warp] = __popc(ballot);
            __syncthreads();
            int before = 0, total = 0;
            for (int w = 0; w < PSW_THREADS / 32; ++w) {
                before += w < warp ? warp_sum[w] : 0;
                total += warp_sum[w];
            }
            if (k) {
                const i64 o = at + before + __popc(ballot & below);
                out_s[o] = s[i];
                out_d[o] = d[i];
            }
            at += total;
            __syncthreads();
        }
    }
}

// The peel from the sources (Kahn's levels over this rank's edges sorted by source, CSR ptr over
// every vertex), one level a step: expand, then the exchange of the heads (host side), then settle.
// Both append in the order their atomics give; the sets, and so every level, are the twin's.

// the heads of the edges out of front[0..f) appended to out from *count on, those from slot cap on
// counted and not written (one warp a frontier vertex, its edges' slots taken by one atomic)
template <typename T>
__device__ __forceinline__ void dg_psw_expand_warps(const T* __restrict__ front, i64 f, const i64* __restrict__ ptr,
                                                    const T* __restrict__ head, T* __restrict__ out,
                                                    u64* __restrict__ count, i64 cap) {
    const int lane = threadIdx.x & 31;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 w = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < f; w += warps) {
        const i64 u = (i64)front[w];
        const i64 a = ptr[u], deg = ptr[u + 1] - a;
        if (deg == 0) continue;  // (the whole warp: one vertex)
        u64 base = 0;
        if (lane == 0) base = atomicAdd(count, (u64)deg);
        base = __shfl_sync(0xFFFFFFFFu, base, 0);
        for (i64 j = lane; j < deg && (i64)base + j < cap; j += 32) out[base + j] = head[a + j];
    }
}

// expand: the heads of this rank's edges out of the frontier front[0..f) appended to out from
// *count on (out holds every edge of the rank: no cap)
template <int WIDE>
__global__ void dg_psw_expand(const typename dg_psw_id<WIDE>::t* __restrict__ front, i64 f,
                              const i64* __restrict__ ptr, const typename dg_psw_id<WIDE>::t* __restrict__ head,
                              typename dg_psw_id<WIDE>::t* __restrict__ out, u64* __restrict__ count) {
    dg_psw_expand_warps(front, f, ptr, head, out, count, (i64)0x7FFFFFFFFFFFFFFFLL);
}

// settle: each of got[0..g) (the heads every rank expanded, one entry an edge) takes one from its
// in-degree; the one that takes the last sets its vertex's level to lev and appends it to front
template <int WIDE>
__global__ void dg_psw_settle(const typename dg_psw_id<WIDE>::t* __restrict__ got, i64 g, i64* __restrict__ indeg,
                              int* __restrict__ level, int lev, typename dg_psw_id<WIDE>::t* __restrict__ front,
                              u64* __restrict__ count) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < g; i += stride) {
        const i64 v = (i64)got[i];
        if (atomicAdd((u64*)(indeg + v), ~0ULL) == 1ULL) {  // (adding 2^64 - 1 takes one)
            level[v] = lev;
            front[atomicAdd(count, 1ULL)] = (typename dg_psw_id<WIDE>::t)v;
        }
    }
}

// rows: a warp's edges out of one source take their slots together (__match_any_sync: the lanes of
// one source, its first lane the leader), one atomic a source a warp instead of one an edge: the
// edges of a CSR-stored graph come sorted by source, and 32 atomics on one address queue up.
// The loops stride by whole warps, so every lane of a warp reaches the same intrinsics.

// rows, first pass: the row sizes of the CSR by source, one for each edge but a self-loop,
// counted into size[s[i]] (the peel's rows: every edge kept, duplicates too, in no sorted order)
template <int WIDE>
__global__ void dg_psw_rowsize(const typename dg_psw_id<WIDE>::t* __restrict__ s,
                               const typename dg_psw_id<WIDE>::t* __restrict__ d, i64 m, u64* __restrict__ size) {
    const int lane = threadIdx.x & 31;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 w = (i64)blockIdx.x * blockDim.x + (threadIdx.x & ~31); w < m; w += stride) {
        const i64 i = w + lane;
        const i64 u = i < m ? (i64)s[i] : -1;
        const bool live = i < m && u != (i64)d[i];
        const unsigned act = __ballot_sync(0xFFFFFFFFu, live);
        if (!live) continue;
        const unsigned peers = __match_any_sync(act, (unsigned long long)u);
        if (lane == __ffs(peers) - 1) atomicAdd(size + u, (u64)__popc(peers));
    }
}

// rows, second pass: each edge but a self-loop writes its head into the next slot of its source's
// row (cursor[u] starts at the row's first slot; within a warp in the edges' order, across warps
// in the atomics' order)
template <int WIDE>
__global__ void dg_psw_rowfill(const typename dg_psw_id<WIDE>::t* __restrict__ s,
                               const typename dg_psw_id<WIDE>::t* __restrict__ d, i64 m, u64* __restrict__ cursor,
                               typename dg_psw_id<WIDE>::t* __restrict__ head) {
    const int lane = threadIdx.x & 31;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 w = (i64)blockIdx.x * blockDim.x + (threadIdx.x & ~31); w < m; w += stride) {
        const i64 i = w + lane;
        const i64 u = i < m ? (i64)s[i] : -1;
        const typename dg_psw_id<WIDE>::t v = i < m ? d[i] : 0;
        const bool live = i < m && u != (i64)v;
        const unsigned act = __ballot_sync(0xFFFFFFFFu, live);
        if (!live) continue;
        const unsigned peers = __match_any_sync(act, (unsigned long long)u);
        const int leader = __ffs(peers) - 1;
        u64 base = 0;
        if (lane == leader) base = atomicAdd(cursor + u, (u64)__popc(peers));
        base = __shfl_sync(peers, base, leader);
        head[base + __popc(peers & ((1u << lane) - 1u))] = v;
    }
}

// expand into a block (the peel's one exchange a level): as dg_psw_expand, but the frontier's size
// read from the device counter fcount (the previous level's settle wrote it: no host wait between
// levels), the heads into the block's cap slots after its 8-byte header, which takes the count
// (heads past cap are counted, not written: the host sees the count and sends a larger block)
template <int WIDE>
__global__ void dg_psw_expand_block(const typename dg_psw_id<WIDE>::t* __restrict__ front,
                                    const u64* __restrict__ fcount, const i64* __restrict__ ptr,
                                    const typename dg_psw_id<WIDE>::t* __restrict__ head,
                                    unsigned char* __restrict__ block, i64 cap) {
    typedef typename dg_psw_id<WIDE>::t T;
    dg_psw_expand_warps(front, (i64)*fcount, ptr, head, (T*)(block + 8), (u64*)block, cap);
}

// settle the gathered blocks (size of them, stride bytes apart, each its count and cap slots; stride a
// multiple of 8, block_bytes in distgrail/stages/partitioned_sweeps.py, so each count is an aligned u64):
// dg_psw_settle over each block's heads, the next frontier's size left in fcount
template <int WIDE>
__global__ void dg_psw_settle_blocks(const unsigned char* __restrict__ got, int size, i64 stride, i64 cap,
                                     i64* __restrict__ indeg, int* __restrict__ level, int lev,
                                     typename dg_psw_id<WIDE>::t* __restrict__ front, u64* __restrict__ fcount) {
    typedef typename dg_psw_id<WIDE>::t T;
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (int r = 0; r < size; ++r) {
        const unsigned char* b = got + (i64)r * stride;
        i64 c = (i64)*(const u64*)b;
        if (c > cap) c = cap;  // (never: the host sends a block of every count)
        const T* heads = (const T*)(b + 8);
        for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < c; i += step) {
            const i64 v = (i64)heads[i];
            if (atomicAdd((u64*)(indeg + v), ~0ULL) == 1ULL) {  // (adding 2^64 - 1 takes one)
                level[v] = lev;
                front[atomicAdd(fcount, 1ULL)] = (T)v;
            }
        }
    }
}
