// Phase 2: subtree sizes of the spanning forest DT (twin: distgrail/stages/subtree.py).
#include "sweep.cuh"

// the "edges" of level l are its vertices, each merged into its DT parent
struct ParentRange {
    const i64* parent;
    __device__ Lev level(const i64* lp, int l) const {
        Lev v;
        v.a = v.e0 = lp[l];
        v.b = v.e1 = lp[l + 1];
        return v;
    }
    __device__ i64 row(const Lev&, i64 e) const { return parent[e]; }
};

// size[v] = 1 + sum of size over DT children. size starts at 1.
struct SizeOp {
    i64* size;
    typedef i64 Acc;
    __device__ void reset(Acc& a) { a = 0; }
    __device__ i64 key(i64 e) const { return e; }
    __device__ void fold(Acc& a, i64 v, i64) { a += __ldcg(size + v); }
    __device__ void flush(Acc& a, i64 row) { atomicAdd((unsigned long long*)(size + row), (unsigned long long)a); }
};

// phase 2 without a children CSR: child levels deepest first, size[parent[v]] += size[v]
extern "C" __global__ void __launch_bounds__(DG_BATCH_THREADS)
dg_size_levels(const i64* level_ptr, int l0, int step, int nlev, const i64* parent, i64* size) {
    SizeOp op{size};
    sweep_edges(level_ptr, l0, step, nlev, op, ParentRange{parent});
}

