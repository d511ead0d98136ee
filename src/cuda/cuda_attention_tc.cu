/* cuda_attention_tc.cu — causal GQA flash attention with documents on bf16 tensor cores (sm_80+,
 * tuned for sm_90): kernels.h's contract for runs whose stored type is bf16, at head sizes that
 * are multiples of 16 from 16 to 128 (cu_attention_tc_supported; every kernel is a template on
 * the head size, one instance each; other sizes take cuda_attention.cu's fp32 kernels). The
 * products are WMMA 16x16x16 with bf16 operands and fp32 accumulators.
 *
 * Recipe (FlashAttention-2's, as the CPU's avx512bf16 path, attention_dp_body.h): S = Q K^T, the
 * online softmax's max, exponentials, sums and lse in fp32 (exp2 with scale * log2 e folded in;
 * l sums the fp32 P); O += P V with P rounded to bf16. Backward: D = rowsum(dO * O) in fp32 from
 * the bf16 dO and O; P = exp(scale S - lse) and dP = dO V^T in fp32; dS = scale P (dP - D) in fp32,
 * rounded to bf16 for dQ += dS K and dK += dS^T Q; dV += P^T dO with P rounded to bf16. Every
 * accumulator is fp32; each output element is rounded to bf16 once, at the end (cu_bf16_round);
 * lse stays fp32.
 *
 * Split (cuda_attention.cu's): forward, a block per (query block, head); backward, the D kernel
 * (a warp per (query, head), into module scratch), kernel A (a block per (key block, KV head): dK
 * and dV over the G query heads of the KV head and, per head, the query blocks that see the key
 * block, in that order) and kernel B (a block per (query block, head): dQ over its key blocks in
 * order). Grids are (heads, blocks) so that the longest blocks of every head start first (the
 * last query blocks; kernel A's first key blocks). Deterministic: no atomics, every sum in a
 * fixed order, each output element written once; two runs give the same bits.
 *
 * Masking: tiles above the diagonal, or wholly before the document of the first row of their
 * query block (doc_start is non-decreasing), are skipped, as are the 16-wide chunks of a warp
 * wholly above its diagonal in the backward; inside a tile a score counts iff
 * doc_start[i] <= j <= i < T. Rows past T are zero in shared memory (cp.async's zero fill) and
 * never read or written in global memory. A row that has seen only masked scores keeps max -inf;
 * its exponentials use 0 as the max (no -inf - -inf).
 *
 * Tiles: 64 query rows (BR) by 64 keys (BC), 4 warps a block; a warp owns 16 rows of the block's
 * fixed side (queries in the forward and in kernel B, keys in kernel A) and its accumulators
 * (O, dQ or dK and dV: 16 x HS each) stay in WMMA fragments. The online softmax rescales O's rows
 * in the fragments through a row map (the row of each fragment element, read once by loading a
 * tile of row numbers; WMMA leaves the layout unspecified but fixes it per fragment type). Scores
 * and P go through the warp's own shared-memory buffers (fp32 S, bf16 P: the accumulator layout
 * becomes an operand layout there); the backward works in 16 x 16 chunks (S, dP, P, dS of 16
 * queries by 16 keys; at HS <= 64 a warp keeps its fixed 16 x HS operands in fragments, hoist).
 * bf16 tiles have rows of HS + 8 elements (16-byte aligned, ldmatrix without bank conflicts).
 * Loads: cp.async of 16 bytes where every tensor is 16-byte aligned, else plain loads; the
 * forward double-buffers K and V (the next key tile lands while the block computes), the backward
 * its streamed tiles (kernel A: Q, dO and rows; kernel B: K, V) where shared memory allows
 * (BwdL::NB; all but HS = 128). Blocks an SM: minb (4 at HS <= 32, 3 at 48 and 64, 2 above;
 * registers a thread capped to fit). Shared memory (FwdL, BwdL; HS 64 / 128): forward 63 / 95
 * KiB, kernels A and B 72 / 85 KiB each. Scratch: D (NH, T) fp32, grown on demand. */
#include "cuda/cuda_int.h"

#include <math.h>
#include <mma.h>
#include <stdint.h>

#include <type_traits>

extern "C" int cu_attention_tc_supported(int HS);
extern "C" size_t cu_attention_tc_scratch_bytes(void);

namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int NW = 4;       /* warps per block */
constexpr int NT = 32 * NW; /* threads per block */
constexpr int BR = 16 * NW; /* query rows per block (forward, kernel B); per tile (kernel A) */
constexpr int BC = 64;      /* keys per tile (forward, kernel B); per block (kernel A) */
constexpr int LDF = 20;     /* row stride of a warp's 16 x 16 fp32 staging tile */
constexpr int LDB = 24;     /* row stride of a warp's 16 x 16 bf16 staging tile */
constexpr unsigned FULL = 0xffffffffu;
constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;

static_assert(BR == BC, "kernel A's first query block is its key block's diagonal");

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBT = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>; /* rows^T */
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
constexpr int NE = FragC::num_elements; /* accumulator elements per lane */

/* Everything a kernel reads: one struct for the four kernels (unused members NULL). */
struct Tc {
    const uint16_t *q, *k, *v, *out, *dout; /* bf16 inputs */
    uint16_t *o, *dq, *dk, *dv;             /* bf16 outputs */
    float *lse;                             /* (NH, T): the forward writes it, the backward reads */
    const float *D;                         /* (NH, T): rowsum(dO * O) */
    const int32_t *doc;                     /* doc_start (T) or NULL */
    int T, NH, NKV, G;
    int vec;     /* every tensor 16-byte aligned: cp.async and 16-byte stores */
    float scale; /* 1 / sqrt(HS) */
    float sl2;   /* scale * log2 e */
};

/* ---- device primitives ----------------------------------------------------------------------- */

/* 16 bytes global -> shared, asynchronously; zeros where !in (src is then not read). */
__device__ __forceinline__ void cp16(void *dst, const void *src, bool in) {
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    int n = in ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n)
                 : "memory");
}

/* Waits for all of this thread's cp.async copies (a __syncthreads must follow before others
 * read them). */
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/* Closes this thread's group of cp.async copies issued since the last one. */
__device__ __forceinline__ void cp_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most one of this thread's groups (the newest) is in flight. */
__device__ __forceinline__ void cp_wait_but_one() {
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

__device__ __forceinline__ const bf16 *bp(const uint16_t *s) {
    return reinterpret_cast<const bf16 *>(s);
}

/* ---- tiles in shared memory ------------------------------------------------------------------ */

/* s := the ROWS x HS tile (row stride HS + 8) of rows row0.. of head hx of the (T, nhx, HS) bf16
 * tensor g, zero past T. Asynchronous where p.vec: cp_wait and __syncthreads before reading. */
template <int HS, int ROWS>
__device__ __forceinline__ void load_tile(uint16_t *s, const uint16_t *g, int row0, int hx, int nhx,
                                          const Tc &p) {
    constexpr int LDH = HS + 8, CPR = HS / 8, N = ROWS * CPR / NT; /* 16-byte chunks */
    static_assert(ROWS * CPR % NT == 0, "whole chunks per thread");
#pragma unroll
    for (int n = 0; n < N; n++) {
        const int idx = n * NT + (int)threadIdx.x, r = idx / CPR, c = 8 * (idx % CPR);
        const int i = row0 + r;
        const bool in = i < p.T;
        const uint16_t *src = in ? g + ((size_t)i * nhx + hx) * HS + c : g;
        uint16_t *dst = s + r * LDH + c;
        if (p.vec) {
            cp16(dst, src, in);
        } else {
#pragma unroll
            for (int u = 0; u < 8; u++)
                dst[u] = in ? src[u] : (uint16_t)0;
        }
    }
}

/* Per query row q0 + r (r < BR): the first key it sees (lo_s); with lse2_s, its lse * log2 e and
 * D of head h. Zeros past T. */
__device__ __forceinline__ void load_rows(int *lo_s, float *lse2_s, float *D_s, int q0, int h,
                                          const Tc &p) {
    for (int r = threadIdx.x; r < BR; r += NT) {
        const int i = q0 + r;
        const bool in = i < p.T;
        const size_t x = (size_t)h * p.T + i;
        lo_s[r] = in && p.doc ? p.doc[i] : 0;
        if (lse2_s) {
            lse2_s[r] = in ? p.lse[x] * LOG2E : 0.f;
            D_s[r] = in ? p.D[x] : 0.f;
        }
    }
}

/* Rows r0.. r0 + 15 (< T) of head hx of the (T, nhx, HS) bf16 tensor g, columns c0.. c0 + 15 :=
 * f times mul (rowmul[r] per row where rowmul is not NULL), rounded once. Through the warp's
 * 16 x 16 fp32 staging tile st; a warp call. */
template <int HS>
__device__ __forceinline__ void store_frag(uint16_t *g, const FragC &f, float *st,
                                           const float *rowmul, float mul, int r0, int c0, int hx,
                                           int nhx, const Tc &p, int lane) {
    __syncwarp(); /* earlier reads of st are done */
    wmma::store_matrix_sync(st, f, LDF, wmma::mem_row_major);
    __syncwarp();
    const int r = lane >> 1, c = 8 * (lane & 1), i = r0 + r;
    if (i >= p.T) return;
    const float s = rowmul ? rowmul[r] : mul;
    uint16_t b[8];
#pragma unroll
    for (int u = 0; u < 8; u++)
        b[u] = cu_bf16_round(st[r * LDF + c + u] * s);
    uint16_t *dst = g + ((size_t)i * nhx + hx) * HS + c0 + c;
    if (p.vec) {
        uint4 w;
        w.x = b[0] | (unsigned)b[1] << 16, w.y = b[2] | (unsigned)b[3] << 16;
        w.z = b[4] | (unsigned)b[5] << 16, w.w = b[6] | (unsigned)b[7] << 16;
        *reinterpret_cast<uint4 *>(dst) = w;
    } else {
#pragma unroll
        for (int u = 0; u < 8; u++)
            dst[u] = b[u];
    }
}

/* ---- forward --------------------------------------------------------------------------------- */

/* Blocks an SM the kernels are built for (registers a thread: 65536 / (128 minb), at most 255):
 * 2 at HS > 64 (shared memory allows no more at HS = 128), 3 at HS 48 and 64, 4 below. */
constexpr int minb(int HS) {
    return HS > 64 ? 2 : HS > 32 ? 3 : 4;
}

/* b rounded up to a multiple of 128 (the shared-memory layouts' offsets). */
__host__ __device__ constexpr size_t al128(size_t b) {
    return (b + 127) / 128 * 128;
}

/* Shared memory of the forward (byte offsets, each 128-aligned): the Q tile (BR x HS + 8 bf16),
 * whose space the warps' S tiles (16 x BC + 4 fp32) take once Q is in fragments; two buffers of
 * K and V tiles (BC x HS + 8 bf16 each; the next key tile lands in one while the block computes
 * on the other); the warps' P tiles (16 x BC + 8 bf16); per warp 16 alphas and 16 1/l; lo (BR
 * ints). */
template <int HS>
struct FwdL {
    static constexpr int LDH = HS + 8, LDS = BC + 4, LDP = BC + 8;
    static constexpr size_t QB = (size_t)BR * LDH * 2, SB = (size_t)NW * 16 * LDS * 4;
    static constexpr size_t TB = al128((size_t)BC * LDH * 2); /* a K or V tile */
    static constexpr size_t KV = al128(QB > SB ? QB : SB);    /* K_0, V_0, K_1, V_1 */
    static constexpr size_t P = KV + 4 * TB;
    static constexpr size_t ROW = P + al128((size_t)NW * 16 * LDP * 2);
    static constexpr size_t LO = ROW + al128((size_t)NW * 32 * 4);
    static constexpr size_t BYTES = LO + al128((size_t)BR * 4);
};

/* The row of each element of an accumulator fragment (all fragments of a type share the
 * layout): a tile of row numbers, through the warp's fp32 buffer st (row stride ld). */
__device__ __forceinline__ void row_map(int (&rowid)[NE], float *st, int ld, int lane) {
    for (int e = lane; e < 256; e += 32)
        st[(e / 16) * ld + e % 16] = (float)(e / 16);
    __syncwarp();
    FragC f;
    wmma::load_matrix_sync(f, st, ld, wmma::mem_row_major);
#pragma unroll
    for (int e = 0; e < NE; e++)
        rowid[e] = (int)f.x[e];
    __syncwarp();
}

/* The warp's scores Sw (16 x BC, fp32, row stride LDS) := Q_w K^T (raw, unscaled). */
template <int HS>
__device__ __forceinline__ void fwd_scores(float *Sw, const FragA (&qf)[HS / 16],
                                           const uint16_t *Ks) {
    using L = FwdL<HS>;
#pragma unroll
    for (int c = 0; c < BC / 16; c++) {
        FragC s;
        wmma::fill_fragment(s, 0.f);
#pragma unroll
        for (int kk = 0; kk < HS / 16; kk++) {
            FragBT kf;
            wmma::load_matrix_sync(kf, bp(Ks + 16 * c * L::LDH + 16 * kk), L::LDH);
            wmma::mma_sync(s, qf[kk], kf, s);
        }
        wmma::store_matrix_sync(Sw + 16 * c, s, L::LDS, wmma::mem_row_major);
    }
}

/* The online softmax over one key tile (keys k0..) of the warp's rows i0 + r, r < 16: two lanes a
 * row (lane 2r + half: columns 4t + 2 half, + 1). Scores masked and scaled by scale * log2 e; the
 * row max m updated (both lanes agree), the lane's partial sum l rescaled and P = exp2(s - m)
 * added (fp32); P rounded to bf16 into Pw; the rows' rescale factors into alpha_w. */
template <int HS>
__device__ __forceinline__ void fwd_softmax(const float *Sw, uint16_t *Pw, float *alpha_w, float &m,
                                            float &l, int lo, int i0, int k0, const Tc &p,
                                            int lane) {
    using L = FwdL<HS>;
    const int r = lane >> 1, half = lane & 1, i = i0 + r;
    float x[BC / 2], mx = -INFINITY;
#pragma unroll
    for (int t = 0; t < BC / 4; t++) {
        const int c = 4 * t + 2 * half;
        const float2 s = *reinterpret_cast<const float2 *>(Sw + r * L::LDS + c);
        const int j = k0 + c;
        const bool ok0 = i < p.T && j <= i && j >= lo, ok1 = i < p.T && j + 1 <= i && j + 1 >= lo;
        x[2 * t] = ok0 ? s.x * p.sl2 : -INFINITY;
        x[2 * t + 1] = ok1 ? s.y * p.sl2 : -INFINITY;
        mx = fmaxf(mx, fmaxf(x[2 * t], x[2 * t + 1]));
    }
    mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, 1));
    const float mn = fmaxf(m, mx);
    const float mu = mn == -INFINITY ? 0.f : mn; /* nothing seen yet: exps of -inf are 0 */
    const float al = exp2f(m - mu);
    m = mn;
    l *= al;
#pragma unroll
    for (int t = 0; t < BC / 4; t++) {
        const float e0 = exp2f(x[2 * t] - mu), e1 = exp2f(x[2 * t + 1] - mu);
        l += e0;
        l += e1;
        const unsigned w = cu_bf16_round(e0) | (unsigned)cu_bf16_round(e1) << 16;
        *reinterpret_cast<unsigned *>(Pw + r * L::LDP + 4 * t + 2 * half) = w;
    }
    if (half == 0) alpha_w[r] = al;
}

/* o := alpha (per row) o + P V, P the warp's bf16 16 x BC tile, V the block's BC x HS tile. */
template <int HS>
__device__ __forceinline__ void fwd_pv(FragC (&o)[HS / 16], const uint16_t *Pw, const uint16_t *Vs,
                                       const float *alpha_w, const int (&rowid)[NE]) {
    using L = FwdL<HS>;
    float a[NE];
#pragma unroll
    for (int e = 0; e < NE; e++)
        a[e] = alpha_w[rowid[e]];
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
#pragma unroll
        for (int e = 0; e < NE; e++)
            o[n].x[e] *= a[e];
    FragA pf[BC / 16];
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++)
        wmma::load_matrix_sync(pf[kk], bp(Pw + 16 * kk), L::LDP);
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            FragB vf;
            wmma::load_matrix_sync(vf, bp(Vs + 16 * kk * L::LDH + 16 * n), L::LDH);
            wmma::mma_sync(o[n], pf[kk], vf, o[n]);
        }
}

/* The warp's rows i0 + r: lse := (m + log2 l) ln 2 (l summed over the row's two lanes), out :=
 * o / l (1/l through inv_w; rows without a key, past T, get 0). */
template <int HS>
__device__ __forceinline__ void fwd_store(const FragC (&o)[HS / 16], float m, float l, float *inv_w,
                                          float *st, int i0, int h, const Tc &p, int lane) {
    const int r = lane >> 1, i = i0 + r;
    l += __shfl_xor_sync(FULL, l, 1);
    if ((lane & 1) == 0) {
        inv_w[r] = l > 0.f ? 1.f / l : 0.f;
        if (i < p.T) p.lse[(size_t)h * p.T + i] = (m + log2f(l)) * LN2;
    }
    __syncwarp();
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        store_frag<HS>(p.o, o[n], st, inv_w, 1.f, i0, 16 * n, h, p.NH, p, lane);
}

/* Issues the loads of key tile kb (K and V, KV head kvh) into buffer buf, as one cp.async group. */
template <int HS>
__device__ __forceinline__ void fwd_load_kv(unsigned char *smem, int buf, int kb, int kvh,
                                            const Tc &p) {
    using L = FwdL<HS>;
    uint16_t *Ks = reinterpret_cast<uint16_t *>(smem + L::KV + 2 * buf * L::TB);
    load_tile<HS, BC>(Ks, p.k, kb * BC, kvh, p.NKV, p);
    load_tile<HS, BC>(Ks + L::TB / 2, p.v, kb * BC, kvh, p.NKV, p);
    cp_commit();
}

/* Grid (NH, query blocks): the last query blocks (the longest) of every head first. Warp w owns
 * the block's rows 16 w.. 16 w + 15: its Q in fragments, O in fragments, m and l in its lanes. */
template <int HS>
__global__ void __launch_bounds__(NT, minb(HS)) fwd_kernel(Tc p) {
    using L = FwdL<HS>;
    extern __shared__ __align__(128) unsigned char smem_tc[];
    uint16_t *Qs = reinterpret_cast<uint16_t *>(smem_tc);
    int *lo_s = reinterpret_cast<int *>(smem_tc + L::LO);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *Sw = reinterpret_cast<float *>(smem_tc) + warp * 16 * L::LDS;
    uint16_t *Pw = reinterpret_cast<uint16_t *>(smem_tc + L::P) + warp * 16 * L::LDP;
    float *alpha_w = reinterpret_cast<float *>(smem_tc + L::ROW) + warp * 32, *inv_w = alpha_w + 16;
    const int q0 = ((int)gridDim.y - 1 - (int)blockIdx.y) * BR, h = blockIdx.x, kvh = h / p.G;
    const int i0 = q0 + 16 * warp;

    const int kb0 = (p.doc ? p.doc[q0] : 0) / BC, kb1 = min(q0 + BR - 1, p.T - 1) / BC;
    load_tile<HS, BR>(Qs, p.q, q0, h, p.NH, p);
    load_rows(lo_s, nullptr, nullptr, q0, h, p);
    cp_commit();
    fwd_load_kv<HS>(smem_tc, 0, kb0, kvh, p);
    cp_wait_but_one(); /* Q */
    __syncthreads();
    FragA qf[HS / 16];
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++)
        wmma::load_matrix_sync(qf[kk], bp(Qs + 16 * warp * L::LDH + 16 * kk), L::LDH);
    const int lo = lo_s[16 * warp + lane / 2];
    __syncthreads(); /* Q's space becomes the S tiles */
    int rowid[NE];
    row_map(rowid, Sw, L::LDS, lane);

    float m = -INFINITY, l = 0.f;
    FragC o[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        wmma::fill_fragment(o[n], 0.f);
    for (int kb = kb0; kb <= kb1; kb++) {
        const int buf = (kb - kb0) & 1;
        if (kb < kb1) {
            fwd_load_kv<HS>(smem_tc, buf ^ 1, kb + 1, kvh, p); /* read two tiles ago */
            cp_wait_but_one();                                 /* tile kb */
        } else {
            cp_wait();
        }
        __syncthreads();
        const uint16_t *Ks = reinterpret_cast<const uint16_t *>(smem_tc + L::KV + 2 * buf * L::TB);
        const uint16_t *Vs = Ks + L::TB / 2;
        fwd_scores<HS>(Sw, qf, Ks);
        __syncwarp();
        fwd_softmax<HS>(Sw, Pw, alpha_w, m, l, lo, i0, kb * BC, p, lane);
        __syncwarp();
        fwd_pv<HS>(o, Pw, Vs, alpha_w, rowid);
        __syncthreads(); /* K and V of buf are read: tile kb + 2 may land there */
    }
    fwd_store<HS>(o, m, l, inv_w, Sw, i0, h, p, lane);
}

/* ---- backward: D ----------------------------------------------------------------------------- */

/* D[h * T + i] = sum_d dout[i, h, d] * out[i, h, d] in fp32: a warp per (i, h), lanes over d,
 * then a fixed butterfly. */
__global__ void __launch_bounds__(NT) bwd_d_kernel(float *D, Tc p, int HS) {
    const size_t w = ((size_t)blockIdx.x * NT + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (w >= (size_t)p.T * p.NH) return; /* the whole warp */
    const size_t base = w * HS;
    float s = 0.f;
    for (int d = lane; d < HS; d += 32)
        s = fmaf(cu_bf16_widen(p.dout[base + d]), cu_bf16_widen(p.out[base + d]), s);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        s += __shfl_xor_sync(FULL, s, off);
    if (lane == 0) D[(size_t)(w % p.NH) * p.T + w / p.NH] = s;
}

/* ---- backward: shared pieces ----------------------------------------------------------------- */

/* Shared memory of kernels A and B (byte offsets, 128-aligned): tiles of BR = BC rows of HS + 8
 * bf16 each: the block's fixed pair (K, V in kernel A; Q, dO in kernel B) and NB buffers of the
 * streamed pair (Q, dO; K, V), NB = 2 where minb(HS) blocks still fit an SM (the next pair lands
 * while the block computes on the other), else 1; per warp the fp32 staging of S and dP (16 x 20
 * each) and the bf16 staging of P and dS (16 x 24 each); NB buffers of the query block's rows:
 * lse * log2 e, D and lo (BR each; kernel B uses the first). */
template <int HS>
struct BwdL {
    static constexpr int LDH = HS + 8;
    static constexpr size_t TILE = al128((size_t)BR * LDH * 2);
    static constexpr size_t WARP = 2 * 16 * LDF * 4 + 2 * 16 * LDB * 2; /* staging per warp */
    static constexpr size_t RB = al128((size_t)3 * BR * 4);             /* a rows buffer */
    static constexpr size_t bytes(int nb) {
        return (2 + 2 * (size_t)nb) * TILE + al128(NW * WARP) + nb * RB;
    }
    /* 228 KiB an SM, 1 KiB of it reserved a block */
    static constexpr int NB = (bytes(2) + 1024) * minb(HS) <= 228 * 1024 ? 2 : 1;
    static constexpr size_t FIX = 0, STREAM = 2 * TILE; /* + 2 TILE b: buffer b's pair */
    static constexpr size_t ST = (2 + 2 * (size_t)NB) * TILE;
    static constexpr size_t ROWS = ST + al128(NW * WARP); /* + RB b: buffer b's rows */
    static constexpr size_t BYTES = bytes(NB);
    static_assert(BYTES == ROWS + NB * RB, "layout");
};

/* The block's tiles, the warp's staging and the query block's rows (for one buffer). */
struct BwdS {
    uint16_t *Qs, *dOs, *Ks, *Vs; /* tiles */
    float *S, *dP;                /* the warp's 16 x 16 fp32 staging (row stride LDF) */
    uint16_t *P, *dS;             /* the warp's 16 x 16 bf16 staging (row stride LDB) */
    float *lse2_s, *D_s;
    int *lo_s;
};

/* The pointers of buffer b (of BwdL<HS>::NB): the streamed tiles (K and V where KV_STREAM, kernel
 * B; else Q and dO, kernel A) and rows of buffer b (kernel A; kernel B's rows are buffer 0's). */
template <int HS, bool KV_STREAM>
__device__ __forceinline__ BwdS bwd_smem(unsigned char *smem, int warp, int b) {
    using L = BwdL<HS>;
    BwdS s;
    uint16_t *fix = reinterpret_cast<uint16_t *>(smem + L::FIX);
    uint16_t *str = reinterpret_cast<uint16_t *>(smem + L::STREAM + 2 * L::TILE * b);
    uint16_t *fix2 = fix + L::TILE / 2, *str2 = str + L::TILE / 2;
    s.Qs = KV_STREAM ? fix : str, s.dOs = KV_STREAM ? fix2 : str2;
    s.Ks = KV_STREAM ? str : fix, s.Vs = KV_STREAM ? str2 : fix2;
    unsigned char *w = smem + L::ST + warp * L::WARP;
    s.S = reinterpret_cast<float *>(w), s.dP = s.S + 16 * LDF;
    s.P = reinterpret_cast<uint16_t *>(s.dP + 16 * LDF), s.dS = s.P + 16 * LDB;
    s.lse2_s = reinterpret_cast<float *>(smem + L::ROWS + (KV_STREAM ? 0 : L::RB * b));
    s.D_s = s.lse2_s + BR;
    s.lo_s = reinterpret_cast<int *>(s.D_s + BR);
    return s;
}

/* Whether the backward keeps the warp's fixed 16 x HS row blocks (K_w, V_w in kernel A; Q_w, dO_w
 * in kernel B) in fragments for the whole kernel (registers allow it at HS <= 64), rather than
 * loading them from shared memory for every chunk; NHA of each kept. */
__host__ __device__ constexpr bool hoist(int HS) {
    return HS <= 64;
}
__host__ __device__ constexpr int nha(int HS) {
    return hoist(HS) ? HS / 16 : 1;
}

/* wa, wda := the 16 x HS row blocks at a, da (bf16 tiles of row stride HS + 8) where hoist(HS). */
template <int HS>
__device__ __forceinline__ void bwd_hoist(FragA (&wa)[nha(HS)], FragA (&wda)[nha(HS)],
                                          const uint16_t *a, const uint16_t *da) {
    if constexpr (hoist(HS)) {
#pragma unroll
        for (int kk = 0; kk < HS / 16; kk++) {
            wmma::load_matrix_sync(wa[kk], bp(a + 16 * kk), HS + 8);
            wmma::load_matrix_sync(wda[kk], bp(da + 16 * kk), HS + 8);
        }
    }
}

/* s := A B^T and dp := dA dB^T over the head dimension: A, dA the 16 x HS row blocks at a, da
 * (in wa, wda where hoist(HS)), B, dB those at b, db (bf16 tiles of row stride HS + 8). Kernel A:
 * A = K_w, dA = V_w, B = Q_c, dB = dO_c (S^T and dP^T); kernel B: A = Q_w, dA = dO_w, B = K_c,
 * dB = V_c (S and dP). */
template <int HS>
__device__ __forceinline__ void bwd_scores(FragC &s, FragC &dp, const FragA (&wa)[nha(HS)],
                                           const FragA (&wda)[nha(HS)], const uint16_t *a,
                                           const uint16_t *da, const uint16_t *b,
                                           const uint16_t *db) {
    constexpr int LDH = HS + 8;
    wmma::fill_fragment(s, 0.f);
    wmma::fill_fragment(dp, 0.f);
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
        FragBT fb;
        if constexpr (hoist(HS)) {
            wmma::load_matrix_sync(fb, bp(b + 16 * kk), LDH);
            wmma::mma_sync(s, wa[kk], fb, s);
            wmma::load_matrix_sync(fb, bp(db + 16 * kk), LDH);
            wmma::mma_sync(dp, wda[kk], fb, dp);
        } else {
            FragA fa;
            wmma::load_matrix_sync(fa, bp(a + 16 * kk), LDH);
            wmma::load_matrix_sync(fb, bp(b + 16 * kk), LDH);
            wmma::mma_sync(s, fa, fb, s);
            wmma::load_matrix_sync(fa, bp(da + 16 * kk), LDH);
            wmma::load_matrix_sync(fb, bp(db + 16 * kk), LDH);
            wmma::mma_sync(dp, fa, fb, dp);
        }
    }
}

/* P and dS of a 16 x 16 chunk from the raw scores and dP in the warp's fp32 staging, whose
 * element (x, y) is query row qr0 + x and key column kc0 + y of the block's tiles (kernel B), or
 * the transpose, key kc0 + x and query qr0 + y (TR, kernel A): P = exp2(scale log2 e S - lse
 * log2 e), dS = scale P (dP - D), 0 where masked; rounded to bf16 into the bf16 staging (P only
 * where WITHP). Lane 2x + half takes y = 8 half.. 8 half + 7. */
template <bool TR, bool WITHP>
__device__ __forceinline__ void bwd_p_ds(const BwdS &s, int qr0, int kc0, int q0, int k0,
                                         const Tc &p, int lane) {
    const int x = lane >> 1, y0 = 8 * (lane & 1);
    /* the lane's 8 S and dP (16-byte aligned: LDF and y0 multiples of 4), 16 bytes at a time */
    const float4 *S4 = reinterpret_cast<const float4 *>(s.S + x * LDF + y0);
    const float4 *dP4 = reinterpret_cast<const float4 *>(s.dP + x * LDF + y0);
    const float4 sa = S4[0], sb = S4[1], da = dP4[0], db = dP4[1];
    const float sv[8] = {sa.x, sa.y, sa.z, sa.w, sb.x, sb.y, sb.z, sb.w};
    const float dv[8] = {da.x, da.y, da.z, da.w, db.x, db.y, db.z, db.w};
    /* kernel B: the lane's one query row, read once */
    const int lo_x = TR ? 0 : s.lo_s[qr0 + x];
    const float lse2_x = TR ? 0.f : s.lse2_s[qr0 + x], D_x = TR ? 0.f : s.D_s[qr0 + x];
    unsigned pw[4], dw[4];
#pragma unroll
    for (int u = 0; u < 8; u++) {
        const int y = y0 + u, qr = qr0 + (TR ? y : x), kc = kc0 + (TR ? x : y);
        const int i = q0 + qr, j = k0 + kc;
        const int lo = TR ? s.lo_s[qr] : lo_x;
        const float lse2 = TR ? s.lse2_s[qr] : lse2_x, D = TR ? s.D_s[qr] : D_x;
        const bool ok = i < p.T && j <= i && j >= lo;
        const float pr = ok ? exp2f(sv[u] * p.sl2 - lse2) : 0.f;
        const float ds = ok ? p.scale * pr * (dv[u] - D) : 0.f;
        const unsigned pb = cu_bf16_round(pr), dsb = cu_bf16_round(ds);
        if (u % 2 == 0) {
            pw[u / 2] = pb, dw[u / 2] = dsb;
        } else {
            pw[u / 2] |= pb << 16, dw[u / 2] |= dsb << 16;
        }
    }
    /* 8 bf16 a lane, 16 bytes (LDB and y0 multiples of 8) */
    if (WITHP)
        *reinterpret_cast<uint4 *>(s.P + x * LDB + y0) = make_uint4(pw[0], pw[1], pw[2], pw[3]);
    *reinterpret_cast<uint4 *>(s.dS + x * LDB + y0) = make_uint4(dw[0], dw[1], dw[2], dw[3]);
}

/* s, dp -> the warp's fp32 staging; then P, dS (bwd_p_ds) -> its bf16 staging. A warp call. */
template <bool TR, bool WITHP>
__device__ __forceinline__ void bwd_stage(const BwdS &s, const FragC &sf, const FragC &dpf, int qr0,
                                          int kc0, int q0, int k0, const Tc &p, int lane) {
    __syncwarp(); /* the previous chunk's reads of the staging are done */
    wmma::store_matrix_sync(s.S, sf, LDF, wmma::mem_row_major);
    wmma::store_matrix_sync(s.dP, dpf, LDF, wmma::mem_row_major);
    __syncwarp();
    bwd_p_ds<TR, WITHP>(s, qr0, kc0, q0, k0, p, lane);
    __syncwarp();
}

/* ---- backward: kernel A (dK, dV) ------------------------------------------------------------- */

/* One query block (rows q0.., head in the tiles) against the block's keys k0..: warp w, owning
 * keys 16 w.., runs the block's 16-query chunks in order: S^T, dP^T (keys x queries), P^T, dS^T
 * in bf16, then dv += P^T dO_c and dk += dS^T Q_c. Chunks wholly above the warp's diagonal are
 * skipped (their P and dS are 0). */
template <int HS>
__device__ __forceinline__ void dkv_block(FragC (&dk)[HS / 16], FragC (&dv)[HS / 16],
                                          const FragA (&wk)[nha(HS)], const FragA (&wv)[nha(HS)],
                                          const BwdS &s,
                                          int q0, int k0, const Tc &p, int warp, int lane) {
    constexpr int LDH = HS + 8;
    const uint16_t *Kw = s.Ks + 16 * warp * LDH, *Vw = s.Vs + 16 * warp * LDH;
#pragma unroll 1
    for (int c = 0; c < BR / 16; c++) {
        if (q0 + 16 * c + 15 < k0 + 16 * warp) continue; /* every query before every key */
        const uint16_t *Qc = s.Qs + 16 * c * LDH, *dOc = s.dOs + 16 * c * LDH;
        FragC sf, dpf;
        bwd_scores<HS>(sf, dpf, wk, wv, Kw, Vw, Qc, dOc);
        bwd_stage<true, true>(s, sf, dpf, 16 * c, 16 * warp, q0, k0, p, lane);
        FragA pa, dsa;
        wmma::load_matrix_sync(pa, bp(s.P), LDB);
        wmma::load_matrix_sync(dsa, bp(s.dS), LDB);
#pragma unroll
        for (int n = 0; n < HS / 16; n++) {
            FragB fb;
            wmma::load_matrix_sync(fb, bp(dOc + 16 * n), LDH);
            wmma::mma_sync(dv[n], pa, fb, dv[n]);
            wmma::load_matrix_sync(fb, bp(Qc + 16 * n), LDH);
            wmma::mma_sync(dk[n], dsa, fb, dk[n]);
        }
    }
}

/* The query block after (g, q0) in kernel A's order (g == G: none). */
__device__ __forceinline__ void dkv_next(int &g, int &q0, int k0, int kl, const Tc &p) {
    q0 += BR;
    if (q0 >= p.T || (p.doc ? p.doc[q0] : 0) > kl) g++, q0 = k0; /* k0's block: the diagonal */
}

/* Issues the loads of query block q0 of head h (Q, dO tiles; rows) into buffer b of kernel A. */
template <int HS>
__device__ __forceinline__ void dkv_load(unsigned char *smem, int b, int q0, int h, const Tc &p) {
    const BwdS s = bwd_smem<HS, false>(smem, 0, b);
    load_tile<HS, BR>(s.Qs, p.q, q0, h, p.NH, p);
    load_tile<HS, BR>(s.dOs, p.dout, q0, h, p.NH, p);
    load_rows(s.lo_s, s.lse2_s, s.D_s, q0, h, p);
    cp_commit();
}

/* Kernel A: dK, dV of a key block and KV head, over the G query heads and, per head, the query
 * blocks that see the key block (from the diagonal to the last whose first row's document starts
 * at or before the block's last key), in that order. Grid (NKV, key blocks): the first key blocks
 * (the most query blocks) of every KV head first (blocks start in x-fastest order: the longest
 * must not wait for the other heads). With two buffers the next query block's loads are issued
 * before the block computes on the current one. */
template <int HS>
__global__ void __launch_bounds__(NT, minb(HS)) bwd_dkv_kernel(Tc p) {
    using L = BwdL<HS>;
    extern __shared__ __align__(128) unsigned char smem_tc[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int k0 = blockIdx.y * BC, kvh = blockIdx.x, kl = min(k0 + BC - 1, p.T - 1);
    {
        const BwdS s = bwd_smem<HS, false>(smem_tc, warp, 0);
        load_tile<HS, BC>(s.Ks, p.k, k0, kvh, p.NKV, p);
        load_tile<HS, BC>(s.Vs, p.v, k0, kvh, p.NKV, p);
    }
    FragC dk[HS / 16], dv[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++) {
        wmma::fill_fragment(dk[n], 0.f);
        wmma::fill_fragment(dv[n], 0.f);
    }
    FragA wk[nha(HS)], wv[nha(HS)]; /* K_w, V_w where hoist(HS) */
    int g = 0, q0 = k0; /* the current query block: head kvh G + g, rows q0.. */
    if (L::NB == 2) dkv_load<HS>(smem_tc, 0, q0, kvh * p.G, p); /* with K and V, one group */
    for (int it = 0; g < p.G; it++) {
        const int b = L::NB == 2 ? it & 1 : 0, h = kvh * p.G + g;
        int gn = g, qn = q0;
        dkv_next(gn, qn, k0, kl, p);
        if (L::NB == 2) {
            if (gn < p.G) {
                dkv_load<HS>(smem_tc, b ^ 1, qn, kvh * p.G + gn, p); /* read two blocks ago */
                cp_wait_but_one();                                   /* block (g, q0) */
            } else {
                cp_wait();
            }
        } else {
            __syncthreads(); /* the previous query block is read */
            dkv_load<HS>(smem_tc, 0, q0, h, p);
            cp_wait();
        }
        __syncthreads();
        const BwdS s = bwd_smem<HS, false>(smem_tc, warp, b);
        if (it == 0) /* K and V have landed */
            bwd_hoist<HS>(wk, wv, s.Ks + 16 * warp * (HS + 8), s.Vs + 16 * warp * (HS + 8));
        dkv_block<HS>(dk, dv, wk, wv, s, q0, k0, p, warp, lane);
        if (L::NB == 2) __syncthreads(); /* buffer b is read: block it + 2 may land there */
        g = gn, q0 = qn;
    }
    const BwdS s = bwd_smem<HS, false>(smem_tc, warp, 0);
#pragma unroll
    for (int n = 0; n < HS / 16; n++) {
        store_frag<HS>(p.dk, dk[n], s.S, nullptr, 1.f, k0 + 16 * warp, 16 * n, kvh, p.NKV, p, lane);
        store_frag<HS>(p.dv, dv[n], s.S, nullptr, 1.f, k0 + 16 * warp, 16 * n, kvh, p.NKV, p, lane);
    }
}

/* ---- backward: kernel B (dQ) ----------------------------------------------------------------- */

/* One key tile (keys k0..) against the block's queries q0..: warp w, owning queries 16 w.., runs
 * the tile's 16-key chunks in order: S, dP, dS in bf16, then dq += dS K_c. Chunks wholly above the
 * warp's diagonal end the tile. */
template <int HS>
__device__ __forceinline__ void dq_block(FragC (&dq)[HS / 16], const FragA (&wq)[nha(HS)],
                                         const FragA (&wdo)[nha(HS)], const BwdS &s, int q0, int k0,
                                         const Tc &p, int warp, int lane) {
    constexpr int LDH = HS + 8;
    const uint16_t *Qw = s.Qs + 16 * warp * LDH, *dOw = s.dOs + 16 * warp * LDH;
#pragma unroll 1
    for (int c = 0; c < BC / 16; c++) {
        if (k0 + 16 * c > q0 + 16 * warp + 15) break; /* every key after every query */
        const uint16_t *Kc = s.Ks + 16 * c * LDH, *Vc = s.Vs + 16 * c * LDH;
        FragC sf, dpf;
        bwd_scores<HS>(sf, dpf, wq, wdo, Qw, dOw, Kc, Vc);
        bwd_stage<false, false>(s, sf, dpf, 16 * warp, 16 * c, q0, k0, p, lane);
        FragA dsa;
        wmma::load_matrix_sync(dsa, bp(s.dS), LDB);
#pragma unroll
        for (int n = 0; n < HS / 16; n++) {
            FragB fb;
            wmma::load_matrix_sync(fb, bp(Kc + 16 * n), LDH);
            wmma::mma_sync(dq[n], dsa, fb, dq[n]);
        }
    }
}

/* Issues the loads of key tile kb (K and V, KV head kvh) into buffer b of kernel B. */
template <int HS>
__device__ __forceinline__ void dq_load(unsigned char *smem, int b, int kb, int kvh, const Tc &p) {
    const BwdS s = bwd_smem<HS, true>(smem, 0, b);
    load_tile<HS, BC>(s.Ks, p.k, kb * BC, kvh, p.NKV, p);
    load_tile<HS, BC>(s.Vs, p.v, kb * BC, kvh, p.NKV, p);
    cp_commit();
}

/* Kernel B: dQ of a query block and head, over its key blocks in order. Grid (NH, query blocks),
 * the last query blocks of every head first. With two buffers the next key tile's loads are
 * issued before the block computes on the current one. */
template <int HS>
__global__ void __launch_bounds__(NT, minb(HS)) bwd_dq_kernel(Tc p) {
    using L = BwdL<HS>;
    extern __shared__ __align__(128) unsigned char smem_tc[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int q0 = ((int)gridDim.y - 1 - (int)blockIdx.y) * BR, h = blockIdx.x, kvh = h / p.G;
    {
        const BwdS s = bwd_smem<HS, true>(smem_tc, warp, 0);
        load_tile<HS, BR>(s.Qs, p.q, q0, h, p.NH, p);
        load_tile<HS, BR>(s.dOs, p.dout, q0, h, p.NH, p);
        load_rows(s.lo_s, s.lse2_s, s.D_s, q0, h, p);
    }
    FragC dq[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        wmma::fill_fragment(dq[n], 0.f);
    const int kb0 = (p.doc ? p.doc[q0] : 0) / BC, kb1 = min(q0 + BR - 1, p.T - 1) / BC;
    FragA wq[nha(HS)], wdo[nha(HS)]; /* Q_w, dO_w where hoist(HS) */
    if (L::NB == 2) dq_load<HS>(smem_tc, 0, kb0, kvh, p); /* with Q and dO, one group */
    for (int kb = kb0; kb <= kb1; kb++) {
        const int b = L::NB == 2 ? (kb - kb0) & 1 : 0;
        if (L::NB == 2) {
            if (kb < kb1) {
                dq_load<HS>(smem_tc, b ^ 1, kb + 1, kvh, p); /* read two tiles ago */
                cp_wait_but_one();                           /* tile kb */
            } else {
                cp_wait();
            }
        } else {
            __syncthreads(); /* the previous key tile is read */
            dq_load<HS>(smem_tc, 0, kb, kvh, p);
            cp_wait();
        }
        __syncthreads();
        const BwdS s = bwd_smem<HS, true>(smem_tc, warp, b);
        if (kb == kb0) /* Q and dO have landed */
            bwd_hoist<HS>(wq, wdo, s.Qs + 16 * warp * (HS + 8), s.dOs + 16 * warp * (HS + 8));
        dq_block<HS>(dq, wq, wdo, s, q0, kb * BC, p, warp, lane);
        if (L::NB == 2) __syncthreads(); /* buffer b is read: tile kb + 2 may land there */
    }
    const BwdS s = bwd_smem<HS, true>(smem_tc, warp, 0);
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        store_frag<HS>(p.dq, dq[n], s.S, nullptr, 1.f, q0 + 16 * warp, 16 * n, h, p.NH, p, lane);
}

/* ---- launches -------------------------------------------------------------------------------- */

/* Lets kernel use bytes of dynamic shared memory (beyond the default 48 KiB). */
template <typename K>
void allow_smem(K *kernel, size_t bytes) {
    CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    /* the most shared memory an SM has (minb blocks of the largest layouts need it) */
    CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  (int)cudaSharedmemCarveoutMaxShared));
}

/* Each head size's shared-memory limits, raised once (by init, or the first launch). */
template <int HS>
void prepare() {
    static bool ready;
    if (ready) return;
    allow_smem(fwd_kernel<HS>, FwdL<HS>::BYTES);
    allow_smem(bwd_dkv_kernel<HS>, BwdL<HS>::BYTES);
    allow_smem(bwd_dq_kernel<HS>, BwdL<HS>::BYTES);
    ready = true;
}

template <int HS>
void fwd_launch(const Tc &p) {
    prepare<HS>();
    dim3 grid((unsigned)p.NH, (unsigned)((p.T + BR - 1) / BR));
    fwd_kernel<HS><<<grid, NT, FwdL<HS>::BYTES, cu_stream>>>(p);
    CU_LAUNCHED("attention_tc_forward");
}

template <int HS>
void bwd_launch(const Tc &p) {
    prepare<HS>();
    dim3 gkv((unsigned)p.NKV, (unsigned)((p.T + BC - 1) / BC));
    bwd_dkv_kernel<HS><<<gkv, NT, BwdL<HS>::BYTES, cu_stream>>>(p);
    CU_LAUNCHED("attention_tc_backward (dk, dv)");
    dim3 gq((unsigned)p.NH, (unsigned)((p.T + BR - 1) / BR));
    bwd_dq_kernel<HS><<<gq, NT, BwdL<HS>::BYTES, cu_stream>>>(p);
    CU_LAUNCHED("attention_tc_backward (dq)");
}

/* f(std::integral_constant<int, HS>) for the supported head size HS (a multiple of 16 in
 * 16..128; every kernel is instantiated for each). */
template <typename F>
void with_hs(int HS, F &&f) {
    switch (HS) {
    case 16: f(std::integral_constant<int, 16>()); break;
    case 32: f(std::integral_constant<int, 32>()); break;
    case 48: f(std::integral_constant<int, 48>()); break;
    case 64: f(std::integral_constant<int, 64>()); break;
    case 80: f(std::integral_constant<int, 80>()); break;
    case 96: f(std::integral_constant<int, 96>()); break;
    case 112: f(std::integral_constant<int, 112>()); break;
    default: f(std::integral_constant<int, 128>()); break;
    }
}

bool al16(const void *x) {
    return x == nullptr || (uintptr_t)x % 16 == 0;
}

/* The common members of Tc, the sizes checked. */
Tc tc_make(const int32_t *doc_start, int T, int NH, int NKV, int HS, const char *op) {
    if (!cu_attention_tc_supported(HS) || NH < 1 || NKV < 1 || NH % NKV != 0)
        cu_fail(op, "head size not a multiple of 16 in 16..128, or NH not a multiple of NKV",
                __FILE__, __LINE__);
    if ((T + BR - 1) / BR > 65535) /* the grids' y: query or key blocks */
        cu_fail(op, "T over 65535 * 64", __FILE__, __LINE__);
    Tc p = {};
    p.doc = doc_start;
    p.T = T, p.NH = NH, p.NKV = NKV, p.G = NH / NKV;
    p.scale = 1.f / sqrtf((float)HS);
    p.sl2 = p.scale * LOG2E;
    return p;
}

/* p.vec: every tensor pointer 16-byte aligned (rows of HS bf16 are then too). */
void tc_align(Tc &p) {
    p.vec = al16(p.q) && al16(p.k) && al16(p.v) && al16(p.out) && al16(p.dout) && al16(p.o) &&
            al16(p.dq) && al16(p.dk) && al16(p.dv);
}

/* ---- scratch: D (NH, T) ---------------------------------------------------------------------- */

float *g_scr;
size_t g_scr_n;

float *scratch(size_t bytes) {
    if (bytes <= g_scr_n) return g_scr;
    size_t mib = (size_t)1 << 20, want = (bytes + mib - 1) / mib * mib;
    if (g_scr) {
        CU_CHECK(cudaStreamSynchronize(cu_stream)); /* ops issued may still read the old one */
        CU_CHECK(cudaFree(g_scr));
        g_scr = NULL;
        g_scr_n = 0;
    }
    CU_CHECK(cudaMalloc((void **)&g_scr, want));
    g_scr_n = want;
    return g_scr;
}

} // namespace

extern "C" int cu_attention_tc_supported(int HS) {
    return HS >= 16 && HS <= 128 && HS % 16 == 0;
}

extern "C" size_t cu_attention_tc_scratch_bytes(void) {
    return g_scr_n;
}

extern "C" void cu_attention_tc_forward(void *out, float *lse, const void *q, const void *k,
                                        const void *v, const int32_t *doc_start, int T, int NH,
                                        int NKV, int HS) {
    if (T < 1) return;
    Tc p = tc_make(doc_start, T, NH, NKV, HS, "attention_tc_forward");
    p.q = (const uint16_t *)q, p.k = (const uint16_t *)k, p.v = (const uint16_t *)v;
    p.o = (uint16_t *)out, p.lse = lse;
    tc_align(p);
    with_hs(HS, [&](auto hs) { fwd_launch<decltype(hs)::value>(p); });
}

extern "C" void cu_attention_tc_backward(void *dq, void *dk, void *dv, const void *dout,
                                         const void *q, const void *k, const void *v,
                                         const void *out, const float *lse,
                                         const int32_t *doc_start, int T, int NH, int NKV, int HS) {
    if (T < 1) return;
    Tc p = tc_make(doc_start, T, NH, NKV, HS, "attention_tc_backward");
    p.q = (const uint16_t *)q, p.k = (const uint16_t *)k, p.v = (const uint16_t *)v;
    p.out = (const uint16_t *)out, p.dout = (const uint16_t *)dout;
    p.dq = (uint16_t *)dq, p.dk = (uint16_t *)dk, p.dv = (uint16_t *)dv;
    p.lse = (float *)lse;
    tc_align(p);
    float *D = scratch((size_t)NH * T * sizeof(float));
    p.D = D;
    const size_t warps = (size_t)T * NH;
    bwd_d_kernel<<<(unsigned)((warps + NW - 1) / NW), NT, 0, cu_stream>>>(D, p, HS);
    CU_LAUNCHED("attention_tc_backward (D)");
    with_hs(HS, [&](auto hs) { bwd_launch<decltype(hs)::value>(p); });
}

/* Raises the shared-memory limit of every kernel once (the launches do it too when skipped). */
extern "C" void cu_attention_tc_init(void) {
    for (int hs = 16; hs <= 128; hs += 16)
        with_hs(hs, [](auto x) { prepare<decltype(x)::value>(); });
}
