// Block CRC-32s of a dataset's bytes, zlib's CRC-32: what an index file stores for every block
// of a dataset (twin: distgrail/stages/checksums.py, block_crcs_numpy).
//
// CRC-32 is linear once its initial and final XOR are set apart: with L(M) the CRC of M from a
// zero register and no final XOR, L(A + B) = L(A) * x^(8 |B|) + L(B) modulo the polynomial, and
// crc32(M) = L(M) ^ (0xFFFFFFFF * x^(8 |M|)) ^ 0xFFFFFFFF. Each thread takes one chunk of `chunk`
// bytes of one block (the block's last chunk may be shorter), computes L of it (slicing by 4 over
// aligned 16-byte words, bytewise at the ends), multiplies it by x^(8 z) for the z bytes of its
// block after it and XORs the product into its block's word of `raw`, zeroed by the caller. The
// caller adds the initial and final XOR of each block's length (a few thousand blocks).
#include "common.cuh"

// a * b modulo the polynomial, both reflected (x^0 is bit 31): zlib's multmodp
__device__ __forceinline__ unsigned dg_multmodp(unsigned a, unsigned b) {
    unsigned p = 0;
    for (unsigned m = 1u << 31; m; m >>= 1) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        b = (b & 1) ? (b >> 1) ^ (unsigned)CRC_POLY : b >> 1;
    }
    return p;
}

// four bytes (the low byte first) through the register, from the four slicing tables
__device__ __forceinline__ unsigned dg_crc_word(const unsigned (*t)[256], unsigned c) {
    return t[3][c & 255] ^ t[2][(c >> 8) & 255] ^ t[1][(c >> 16) & 255] ^ t[0][c >> 24];
}

// tables: 4 x 256 slicing tables (tables[0] zlib's byte table); x2k: x^(2^k) modulo the
// polynomial for k = 0..31 (x's powers repeat: x^(2^k) is entry k & 31, as in zlib); chunks:
// n_blocks * per_block (per_block = ceil(block / chunk))
extern "C" __global__ void __launch_bounds__(DG_GRID_THREADS)
dg_crc_chunks(const unsigned char* buf, i64 nbytes, i64 block, i64 chunk, i64 per_block, i64 chunks,
              const unsigned* tables, const unsigned* x2k, unsigned* raw) {
    __shared__ unsigned t[4][256];
    __shared__ unsigned pw[32];
    for (int i = threadIdx.x; i < 1024; i += blockDim.x) t[i >> 8][i & 255] = tables[i];
    for (int i = threadIdx.x; i < 32; i += blockDim.x) pw[i] = x2k[i];
    __syncthreads();
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x; c < chunks; c += stride) {
        const i64 k = c / per_block;
        const i64 b0 = k * block;
        const i64 len = nbytes - b0 < block ? nbytes - b0 : block;
        const i64 c0 = (c - k * per_block) * chunk;
        if (c0 >= len) continue;
        const i64 c1 = c0 + chunk < len ? c0 + chunk : len;
        const unsigned char* p = buf + b0;
        unsigned crc = 0;
        i64 i = c0;
        for (; i < c1 && (reinterpret_cast<size_t>(p + i) & 15); ++i) crc = t[0][(crc ^ p[i]) & 255] ^ (crc >> 8);
        for (; i + 16 <= c1; i += 16) {
            const uint4 w = __ldg(reinterpret_cast<const uint4*>(p + i));
            crc = dg_crc_word(t, crc ^ w.x);
            crc = dg_crc_word(t, crc ^ w.y);
            crc = dg_crc_word(t, crc ^ w.z);
            crc = dg_crc_word(t, crc ^ w.w);
        }
        for (; i < c1; ++i) crc = t[0][(crc ^ p[i]) & 255] ^ (crc >> 8);
        unsigned shift = 1u << 31;  // x^(8 z), z the block's bytes after this chunk
        int b = 3;
        for (i64 z = len - c1; z; z >>= 1, ++b)
            if (z & 1) shift = dg_multmodp(pw[b & 31], shift);
        atomicXor(raw + k, dg_multmodp(shift, crc));
    }
}
