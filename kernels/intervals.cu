// Phase 4: descendant intervals (twin: distgrail/stages/intervals.py).
//
// lh[v][j] = (lo_j, hi_j) for K dimensions, interleaved so that one child costs K 8-byte loads;
// lo = min, hi = max over the children, bottom-up. lh starts at (post, post). The kernels are
// templates over K = 1..DG_MAX_DIMS_PER_SWEEP, instantiated by name (CuPy name_expressions
// "dg_sweep_iv<K>", "dg_small_iv<K>"; see distgrail.gpu.kernels.TEMPLATES).
#include "sweep.cuh"

template <int K>
struct IntervalOp {
    const int* idx;
    int2* lh;
    struct Acc {
        int lo[K], hi[K];
    };
    __device__ void reset(Acc& a) {
#pragma unroll
        for (int j = 0; j < K; ++j) { a.lo[j] = 0x7fffffff; a.hi[j] = -0x7fffffff - 1; }
    }
    __device__ i64 key(i64 e) const { return idx[e]; }
    __device__ void edge(Acc& a, i64 e, i64 r) { fold(a, key(e), r); }
    __device__ void fold(Acc& a, i64 c, i64) {
        const int2* q = lh + c * K;
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int2 t = __ldcg(q + j);
            a.lo[j] = min(a.lo[j], t.x);
            a.hi[j] = max(a.hi[j], t.y);
        }
    }
    __device__ void flush(Acc& a, i64 row) {
        int* r = (int*)(lh + row * K);
#pragma unroll
        for (int j = 0; j < K; ++j) {
            atomicMin(r + 2 * j, a.lo[j]);
            atomicMax(r + 2 * j + 1, a.hi[j]);
        }
    }
};

template <int K>
__global__ void __launch_bounds__(DG_BATCH_THREADS)
dg_sweep_iv(const i64* level_ptr, int l0, int step, int nlev, const i64* indptr, const int* indices, int2* lh) {
    static_assert(K >= 1 && K <= DG_MAX_DIMS_PER_SWEEP, "K: dimensions per sweep");
    IntervalOp<K> op{indices, lh};
    sweep_levels(level_ptr, indptr, l0, step, nlev, op);
}

template <int K>
__global__ void __launch_bounds__(DG_BATCH_THREADS)
dg_small_iv(const i64* level_ptr, int l0, int step, int nlev, const i64* indptr, const int* indices, int2* lh,
            const int* rows) {
    static_assert(K >= 1 && K <= DG_MAX_DIMS_PER_SWEEP, "K: dimensions per sweep");
    IntervalOp<K> op{indices, lh};
    sweep_edges(level_ptr, l0, step, nlev, op, CsrRows{indptr, rows});
}
