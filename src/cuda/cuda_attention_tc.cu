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
 * KiB, kernels A and B 72 / 85 KiB each. Scratch: D (NH, T) fp32, grown on demand.
 *
 * This file: the forward and the entry points; the backward is cuda_attention_tc_bwd.cu, what the
 * two share cuda_attention_tc_int.h. */
#include "cuda/cuda_attention_tc_int.h"

namespace {

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

/* ---- launch ---------------------------------------------------------------------------------- */

/* The forward kernel's shared-memory limit for head size HS, raised once (by init, or the first
 * launch). */
template <int HS>
void fwd_prepare() {
    static bool ready;
    if (ready) return;
    allow_smem(fwd_kernel<HS>, FwdL<HS>::BYTES);
    ready = true;
}

template <int HS>
void fwd_launch(const Tc &p) {
    fwd_prepare<HS>();
    dim3 grid((unsigned)p.NH, (unsigned)((p.T + BR - 1) / BR));
    fwd_kernel<HS><<<grid, NT, FwdL<HS>::BYTES, cu_stream>>>(p);
    CU_LAUNCHED("attention_tc_forward");
}

} // namespace

extern "C" int cu_attention_tc_supported(int HS) {
    return HS >= 16 && HS <= 128 && HS % 16 == 0;
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

/* Raises the shared-memory limit of every kernel once (the launches do it too when skipped). */
extern "C" void cu_attention_tc_init(void) {
    for (int hs = 16; hs <= 128; hs += 16)
        with_hs(hs, [](auto x) { fwd_prepare<decltype(x)::value>(); });
    cu_attention_tc_bwd_init();
}
