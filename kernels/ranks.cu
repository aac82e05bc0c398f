// Phase 3: post-order ranks (twin: distgrail/stages/ranks.py).
//
// Sibling order of dimension i: by parent, then by the uint64 key dg_hash(base_i, v), a bijection
// of v (so keys never tie). The launcher sorts the keys on the device and then sums the sizes
// of earlier siblings; dg_jump adds those offsets along the root paths.
#include "common.cuh"

// key[v] = dg_hash(base, v), the twin of hashing.hash3(seed, STREAM_DIM0 + dim, arange(n))
extern "C" __global__ void dg_sibling_key(u64* key, i64 n, u64 base) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        key[i] = dg_hash(base, (u64)i);
}

// One pointer-jumping round for k dimensions at once:
//   s_out[j][v] = s_in[j][v] + s_in[j][anc[v]],  anc_out[v] = anc[anc[v]]  (anc -1: done)
extern "C" __global__ void dg_jump(const i64* s_in, i64* s_out, const int* anc_in, int* anc_out, i64 C, int k) {
    for (i64 v = blockIdx.x * (i64)blockDim.x + threadIdx.x; v < C; v += (i64)gridDim.x * blockDim.x) {
        const int a = anc_in[v];
        if (a >= 0) {
            for (int j = 0; j < k; ++j) s_out[j * C + v] = s_in[j * C + v] + s_in[j * C + a];
            anc_out[v] = anc_in[a];
        } else {
            for (int j = 0; j < k; ++j) s_out[j * C + v] = s_in[j * C + v];
            anc_out[v] = -1;
        }
    }
}

