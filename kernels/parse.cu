// GPU text parsing of .gra files, whitespace edge lists and Matrix Market coordinate files.
// Twin of distgrail/io/parse.py: every kernel has a NumPy function of the same name minus the
// dg_parse_ prefix that computes the same arrays (count_numpy, write_numpy, lines_numpy, ...).
//
// One chunk of text (complete lines, the last one possibly without '\n' at the end of the file):
//   count   one warp per 1024-byte tile: tokens, newlines, A and B markers per tile; bad bytes and a
//           '\r' not followed by '\n' -> flag
//   (host)  inclusive scan of the tile counts (cupy.cumsum), totals come back (one sync per chunk)
//   write   the same walk again: token starts and lines, marker positions, per-line prefix counts
//   lines   one thread per line: the line's structure, its vertex id (.gra) or its pair (edge lists)
//   (host)  inclusive scan of the edges per line
//   gra_edges / pair_edges: edges straight into the output arrays at ebase + offset
//   advance ebase += edges of this chunk (the running edge count stays on the device)
// Formats: 0 .gra (tokens are digit runs; A = ':', B = '#'; bytes other than digits, blanks,
// ':', '#' are bad); 1 edge list, 3 comma-separated edge list and 2 Matrix Market (tokens are runs
// of non-blank bytes; in 3 a comma is a blank, as the CPU reader turns commas into spaces; A =
// comment character: '#' or '%' in edge lists, '%' in Matrix Market; no B).
// Anything unusual sets a bit of *flags; the host then reads the file with the CPU reader, which
// reports the error (file:line: message, got 'value') exactly as without a GPU.
#include "common.cuh"

// FMT_*, C_*, F_*, TILE and NO_COMMENT come from distgrail/constants.py (KERNEL_MACROS["parse"]),
// in the #define block distgrail.gpu.kernels prepends
#define LANE_BYTES (TILE / 32)  // the bytes of one lane of a tile's warp
#define FULLMASK 0xffffffffu

__device__ __forceinline__ int dg_class(unsigned c, int fmt) {
    if (c == '\n') return C_NL;
    if (c == ' ' || c == '\t' || c == '\r' || (fmt == FMT_CSV && c == ',')) return 0;
    if (fmt == FMT_GRA) {
        if (c >= '0' && c <= '9') return C_TOK;
        if (c == ':') return C_A;
        if (c == '#') return C_B;
        return C_BAD;
    }
    if (c == '%' || ((fmt == FMT_EDGELIST || fmt == FMT_CSV) && c == '#')) return C_TOK | C_A;
    return C_TOK;
}

// class of byte p; bytes outside 0..L-1 are blanks
__device__ __forceinline__ int dg_class_at(const unsigned char* __restrict__ data, i64 L, i64 p, int fmt) {
    return (p >= 0 && p < L) ? dg_class(data[p], fmt) : 0;
}

// the 32 bytes of one lane (the buffer is padded to a multiple of TILE bytes)
__device__ __forceinline__ void dg_load32(const unsigned char* __restrict__ data, i64 p0, unsigned char* b) {
    const uint4* q = reinterpret_cast<const uint4*>(data + p0);
    uint4 x = q[0], y = q[1];
    unsigned w[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
#pragma unroll
    for (int k = 0; k < 32; ++k) b[k] = (unsigned char)(w[k >> 2] >> (8 * (k & 3)));
}

// per-lane counts of tokens, newlines, A, B and bad bytes; *last gets the class of the lane's last byte
__device__ __forceinline__ void dg_lane_counts(const unsigned char* b, i64 p0, i64 L, int fmt, int prev,
                                               int* cnt) {
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const int c = (p0 + k < L) ? dg_class(b[k], fmt) : 0;
        cnt[0] += (c & C_TOK) && !(prev & C_TOK);
        cnt[1] += (c & C_NL) != 0;
        cnt[2] += (c & C_A) != 0;
        cnt[3] += (c & C_B) != 0;
        cnt[4] += (c & C_BAD) != 0;
        prev = c;
    }
}

__device__ __forceinline__ int dg_prev_class(const unsigned char* __restrict__ data, i64 L, int fmt,
                                             const unsigned char* b, i64 p0, int lane) {
    const int last = (p0 + 31 < L) ? dg_class(b[31], fmt) : 0;
    int prev = __shfl_up_sync(FULLMASK, last, 1);
    if (lane == 0) prev = dg_class_at(data, L, p0 - 1, fmt);
    return prev;
}

// 1 when a lane's bytes hold a '\r' that is not followed by '\n' (lines end with '\n' or "\r\n"; a
// lone '\r' would split nothing, so "0 1\r1 2" would read as one edge); a '\r' as the text's last
// byte ends the file's last line (chunks and rank ranges end at a '\n' or at the end of the file)
__device__ __forceinline__ int dg_stray_cr(const unsigned char* __restrict__ data, i64 L, const unsigned char* b,
                                           i64 p0) {
    int bad = 0;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const i64 p = p0 + k;
        if (b[k] == '\r' && p + 1 < L) bad |= ((k < 31) ? b[k + 1] : data[p + 1]) != '\n';
    }
    return bad;
}

// counts: ntiles x 4 int32 (tokens, newlines, A, B)
extern "C" __global__ void dg_parse_count(const unsigned char* __restrict__ data, i64 L, int fmt, i64 ntiles,
                                          int* __restrict__ counts, int* __restrict__ flags) {
    const int lane = threadIdx.x & 31;
    const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 tile = warp; tile < ntiles; tile += nwarps) {  // uniform per warp
        const i64 p0 = tile * TILE + (i64)lane * LANE_BYTES;
        unsigned char b[32];
        dg_load32(data, p0, b);
        const int prev = dg_prev_class(data, L, fmt, b, p0, lane);
        int cnt[5] = {0, 0, 0, 0, 0};
        dg_lane_counts(b, p0, L, fmt, prev, cnt);
        cnt[4] += dg_stray_cr(data, L, b, p0);
#pragma unroll
        for (int k = 0; k < 5; ++k)
            for (int o = 16; o > 0; o >>= 1) cnt[k] += __shfl_xor_sync(FULLMASK, cnt[k], o);
        if (lane == 0) {
            for (int k = 0; k < 4; ++k) counts[tile * 4 + k] = cnt[k];
            if (cnt[4]) atomicOr(flags, F_BAD_BYTE);
        }
    }
}

// incl: inclusive scan of counts over tiles. Writes
//   tok_pos[t], tok_line[t]     offset and line of the t-th token start
//   line_tok[l + 1], line_a[l + 1], line_b[l + 1]   tokens, A, B before the l-th newline
//   a_pos[a], a_tok[a]          offset of the a-th A marker, token starts at offsets <= it
//   b_pos[b], b_tok[b]          the same for B markers
// and line_*[0] = 0, line_*[NL + 1] = totals.
extern "C" __global__ void dg_parse_write(const unsigned char* __restrict__ data, i64 L, int fmt, i64 ntiles,
                                          const int* __restrict__ counts, const int* __restrict__ incl,
                                          int NL, int T, int A, int B,
                                          int* __restrict__ tok_pos, int* __restrict__ tok_line,
                                          int* __restrict__ line_tok, int* __restrict__ line_a,
                                          int* __restrict__ line_b, int* __restrict__ a_pos, int* __restrict__ a_tok,
                                          int* __restrict__ b_pos, int* __restrict__ b_tok) {
    const int lane = threadIdx.x & 31;
    const i64 gid = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (gid == 0) {
        line_tok[0] = 0; line_a[0] = 0; line_b[0] = 0;
        line_tok[NL + 1] = T; line_a[NL + 1] = A; line_b[NL + 1] = B;
    }
    const i64 warp = gid >> 5;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 tile = warp; tile < ntiles; tile += nwarps) {
        const i64 p0 = tile * TILE + (i64)lane * LANE_BYTES;
        unsigned char b[32];
        dg_load32(data, p0, b);
        int prev = dg_prev_class(data, L, fmt, b, p0, lane);
        int cnt[5] = {0, 0, 0, 0, 0};
        dg_lane_counts(b, p0, L, fmt, prev, cnt);
        int off[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {  // exclusive scan over lanes, plus the tiles before
            int x = cnt[k];
            for (int o = 1; o < 32; o <<= 1) {
                int y = __shfl_up_sync(FULLMASK, x, o);
                if (lane >= o) x += y;
            }
            off[k] = x - cnt[k] + incl[tile * 4 + k] - counts[tile * 4 + k];
        }
        int t = off[0], l = off[1], a = off[2], bq = off[3];
#pragma unroll
        for (int k = 0; k < 32; ++k) {
            const i64 p = p0 + k;
            const int c = (p < L) ? dg_class(b[k], fmt) : 0;
            if ((c & C_TOK) && !(prev & C_TOK)) { tok_pos[t] = (int)p; tok_line[t] = l; ++t; }
            if (c & C_A) { a_pos[a] = (int)p; a_tok[a] = t; ++a; }
            if (c & C_B) { b_pos[bq] = (int)p; b_tok[bq] = t; ++bq; }
            if (c & C_NL) { line_tok[l + 1] = t; line_a[l + 1] = a; line_b[l + 1] = bq; ++l; }
            prev = c;
        }
    }
}

// The integer at offset p: its digits up to the first non-digit; -1 (and *ok = false) when it has
// no digit, exceeds hi, is below lo, or (edge lists, Matrix Market) ends in a byte other than a
// blank or a line end ("1.5", "-3", "7x"; a comment mark glued to it, "5%20", "1#x": a comment
// starts at a line's start or after a blank, guards.glued_mark).
__device__ __forceinline__ i64 dg_value(const unsigned char* __restrict__ data, i64 L, i64 p, int fmt, i64 lo,
                                        i64 hi, bool* ok) {
    i64 v = 0;
    int nd = 0;
    for (; p < L; ++p) {
        const unsigned c = data[p];
        if (c < '0' || c > '9') break;
        v = v * 10 + (c - '0');
        ++nd;
        if (v > hi) { *ok = false; return -1; }  // v <= hi < 2^31 before the multiply: no overflow
    }
    if (nd == 0 || v < lo) { *ok = false; return -1; }
    if (fmt != FMT_GRA && p < L) {
        const int c = dg_class(data[p], fmt);
        if (c & C_TOK) { *ok = false; return -1; }
    }
    return v;
}

// 1 when the token at p is a digit run: digits up to a blank, a line end, a comment character or the
// end of the text ("12", "7#x"); 0 for "0.5", "{}", "7x" (the field-count check holds only lines
// of integers)
__device__ __forceinline__ bool dg_digits(const unsigned char* __restrict__ data, i64 L, i64 p, int fmt) {
    const i64 p0 = p;
    while (p < L && data[p] >= '0' && data[p] <= '9') ++p;
    if (p == p0) return false;
    if (p < L) {
        const int c = dg_class(data[p], fmt);
        if ((c & C_TOK) && !(c & C_A)) return false;
    }
    return true;
}

// 1 when a token ends before p: at a blank, a line end, a comment mark or the end of the text
__device__ __forceinline__ bool dg_stop(const unsigned char* __restrict__ data, i64 L, i64 p, int fmt) {
    if (p >= L) return true;
    const int c = dg_class(data[p], fmt);
    return !(c & C_TOK) || (c & C_A);
}

// 1 when the token at p is a Matrix Market entry's value (edgelist.MTX_VALUES, bad_values): values
// VALUES_INTEGER (an integer field) an optional sign and digits; VALUES_NUMBER (real, double,
// complex) an optional sign, then digits with an optional '.' among or after them or '.' then
// digits, then an optional exponent (e, E, d or D, an optional sign, digits); or inf, infinity, nan
// in any case after an optional sign. The token ends as dg_stop says ("1.5%c": "1.5").
__device__ __forceinline__ bool dg_mtx_value(const unsigned char* __restrict__ data, i64 L, i64 p, int fmt,
                                             int values) {
    if (p < L && (data[p] == '+' || data[p] == '-')) ++p;
    const i64 d0 = p;
    while (p < L && data[p] >= '0' && data[p] <= '9') ++p;
    i64 nd = p - d0;
    if (values != VALUES_INTEGER) {
        if (nd == 0 && p < L && ((data[p] | 0x20) == 'i' || (data[p] | 0x20) == 'n')) {
            const char* word = (data[p] | 0x20) == 'i' ? "infinity" : "nan";
            int k = 0;
            while (word[k] && p < L && (data[p] | 0x20) == word[k]) ++p, ++k;
            return (k == 3 || k == 8) && dg_stop(data, L, p, fmt);  // inf, nan, infinity
        }
        if (p < L && data[p] == '.') {
            const i64 f0 = ++p;
            while (p < L && data[p] >= '0' && data[p] <= '9') ++p;
            nd += p - f0;
        }
        if (nd == 0) return false;
        if (p < L && ((data[p] | 0x20) == 'e' || (data[p] | 0x20) == 'd')) {
            ++p;
            if (p < L && (data[p] == '+' || data[p] == '-')) ++p;
            const i64 e0 = p;
            while (p < L && data[p] >= '0' && data[p] <= '9') ++p;
            if (p == e0) return false;
        }
    }
    return nd > 0 && dg_stop(data, L, p, fmt);
}

// One thread per line l < nlines (= NL + 1).
// .gra: a line with a token, ':' or '#' must read "<id>: <successors> #": one ':', one '#' after
//   it, one token before ':', none after '#'. line_u = vertex id (-1: blank or bad line),
//   line_edges = successors; seen[id] += 1.
// edge lists: the tokens before the first comment character; none: blank line; one: bad line;
//   two or more: line_u, line_v = first two values - lo, line_edges = 1. width > 0 (the file's
//   first edge line's fields, the host passes it when they are all integers): a line with tokens
//   before its comment, all of them digit runs, must have width of them, else F_WIDTH (an adjacency
//   list "0 1 2 3" read as the edge 0 -> 1 would lose edges); a line with another token (a float
//   weight, NetworkX's "{}") is not held to it; the tokens' bytes are read only on lines whose count
//   differs. Matrix Market (the host passes its header's count: pattern 2, integer/real/double 3,
//   complex 4): every line with tokens before its comment must have width of them, whatever they
//   are ("1 2 1.5 7" in a real file too), else F_WIDTH. 0: not checked. tabs (the host passes 1
//   when the file's first edge line holds a tab and no comma: a tab-separated file): a line with a
//   tab among the blanks before its first token, or two among the blanks after it (unless a comment
//   mark ends that token), has an empty first or second field ("2\t\t4", read as blanks the edge
//   from 2 to 4): F_LINE (guards.empty_tab_field). values (Matrix Market; 0: not checked, 1: an
//   integer field's, 2: a real, double or complex one's): every token after the first two before
//   the comment must be such a value (dg_mtx_value), else F_VALUE ("1 2 abc" in a real file, "1 2
//   1.5" in an integer one): the kernels accept no file the CPU reader refuses for its values.
extern "C" __global__ void dg_parse_lines(const unsigned char* __restrict__ data, i64 L, int fmt, int nlines,
                                          const int* __restrict__ tok_pos, const int* __restrict__ line_tok,
                                          const int* __restrict__ line_a, const int* __restrict__ line_b,
                                          const int* __restrict__ a_pos, const int* __restrict__ a_tok,
                                          const int* __restrict__ b_pos, const int* __restrict__ b_tok,
                                          i64 lo, i64 hi, int width, int tabs, int values,
                                          int* __restrict__ line_edges,
                                          int* __restrict__ line_u,
                                          int* __restrict__ line_v, int* __restrict__ seen,
                                          int* __restrict__ flags) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 l = (i64)blockIdx.x * blockDim.x + threadIdx.x; l < nlines; l += stride) {
        const int t0 = line_tok[l], t1 = line_tok[l + 1];
        const int a0 = line_a[l], a1 = line_a[l + 1];
        int u = -1, v = -1, ne = 0, bad = 0;
        bool ok = true;
        if (fmt == FMT_GRA) {
            const int b0 = line_b[l], b1 = line_b[l + 1];
            if (t1 > t0 || a1 > a0 || b1 > b0) {
                if (a1 - a0 == 1 && b1 - b0 == 1 && a_tok[a0] - t0 == 1 && t1 == b_tok[b0] && b_pos[b0] > a_pos[a0]) {
                    const i64 id = dg_value(data, L, tok_pos[t0], fmt, lo, hi, &ok);
                    if (ok) {
                        u = (int)id;
                        ne = t1 - t0 - 1;
                        atomicAdd(seen + id, 1);
                    } else {
                        bad = F_VALUE;
                    }
                } else {
                    bad = F_LINE;
                }
            }
        } else {
            const int cmt = a1 > a0 ? a_pos[a0] : NO_COMMENT;
            const bool live0 = t1 > t0 && tok_pos[t0] < cmt;
            const bool live1 = t1 > t0 + 1 && tok_pos[t0 + 1] < cmt;
            if (live1) {
                const i64 x = dg_value(data, L, tok_pos[t0], fmt, lo, hi, &ok);
                const i64 y = dg_value(data, L, tok_pos[t0 + 1], fmt, lo, hi, &ok);
                if (ok) {
                    u = (int)(x - lo);
                    v = (int)(y - lo);
                    ne = 1;
                } else {
                    bad = F_VALUE;
                }
            } else if (live0) {
                bad = F_LINE;
            }
            if (tabs && live0) {  // a tab-separated file: no empty first or second field
                int lead = 0, run = 0;
                for (i64 p = (i64)tok_pos[t0] - 1; p >= 0 && (data[p] == ' ' || data[p] == '\t' || data[p] == '\r');
                     --p)
                    lead += data[p] == '\t';
                i64 p = tok_pos[t0];
                while (p < L && (dg_class(data[p], fmt) & C_TOK) && !(dg_class(data[p], fmt) & C_A)) ++p;
                if (p >= L || !(dg_class(data[p], fmt) & C_A))  // (a comment glued to the first token: none after it)
                    for (; p < L && (data[p] == ' ' || data[p] == '\t' || data[p] == '\r'); ++p) run += data[p] == '\t';
                if (lead || run >= 2) bad |= F_LINE;
            }
            // tokens before the comment: a_tok counts the tokens starting at or before it
            int live = t1 - t0;
            if (a1 > a0) {
                const int k = a_tok[a0];
                live = k - t0 - ((k > t0 && tok_pos[k - 1] == cmt) ? 1 : 0);
            }
            if (width > 0 && live > 0 && live != width) {
                bool digits = true;  // (the first two, when converted, are digit runs)
                if (fmt != FMT_MTX)  // (Matrix Market: any line of another count)
                    for (int t = t0 + (ne ? 2 : 0); t < t0 + live && digits; ++t)
                        digits = dg_digits(data, L, tok_pos[t], fmt);
                if (digits) bad |= F_WIDTH;
            }
            if (values > 0)
                for (int t = t0 + 2; t < t0 + live; ++t)
                    if (!dg_mtx_value(data, L, tok_pos[t], fmt, values)) {
                        bad |= F_VALUE;
                        break;
                    }
        }
        line_u[l] = u;
        line_v[l] = v;
        line_edges[l] = ne;
        if (bad) atomicOr(flags, bad);
    }
}

// .gra: one thread per token; every token but the first of a good vertex line is a successor:
// edge ebase + (edges of the lines before) + (its place in the line) = (line_u, value).
extern "C" __global__ void dg_parse_gra_edges(const unsigned char* __restrict__ data, i64 L, int T,
                                              const int* __restrict__ tok_pos, const int* __restrict__ tok_line,
                                              const int* __restrict__ line_tok, const int* __restrict__ line_u,
                                              const int* __restrict__ line_edges, const int* __restrict__ eincl,
                                              i64 hi, const i64* __restrict__ ebase, i64 cap,
                                              int* __restrict__ src, int* __restrict__ dst, int* __restrict__ flags) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    const i64 e0 = ebase[0];
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < T; t += stride) {
        const int l = tok_line[t];
        const int t0 = line_tok[l];
        const int id = line_u[l];
        if (t == t0 || id < 0) continue;
        bool ok = true;
        const i64 v = dg_value(data, L, tok_pos[t], FMT_GRA, 0, hi, &ok);
        if (!ok) atomicOr(flags, F_VALUE);
        const i64 e = e0 + (eincl[l] - line_edges[l]) + (t - t0 - 1);
        if (e < cap) {
            src[e] = id;
            dst[e] = (int)v;
        } else {
            atomicOr(flags, F_CAPACITY);
        }
    }
}

// edge lists: one thread per line; a good line is edge ebase + eincl[l] - 1.
extern "C" __global__ void dg_parse_pair_edges(int nlines, const int* __restrict__ line_edges,
                                               const int* __restrict__ line_u, const int* __restrict__ line_v,
                                               const int* __restrict__ eincl, const i64* __restrict__ ebase, i64 cap,
                                               int* __restrict__ src, int* __restrict__ dst,
                                               int* __restrict__ flags) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    const i64 e0 = ebase[0];
    for (i64 l = (i64)blockIdx.x * blockDim.x + threadIdx.x; l < nlines; l += stride) {
        if (!line_edges[l]) continue;
        const i64 e = e0 + eincl[l] - 1;
        if (e < cap) {
            src[e] = line_u[l];
            dst[e] = line_v[l];
        } else {
            atomicOr(flags, F_CAPACITY);
        }
    }
}

// ebase += edges of this chunk (one thread; launched after the edge kernel on the same stream)
extern "C" __global__ void dg_parse_advance(i64* __restrict__ ebase, const int* __restrict__ eincl, int nlines) {
    if (blockIdx.x == 0 && threadIdx.x == 0) ebase[0] += eincl[nlines - 1];
}
