/* cuda_attention.cu — causal GQA flash attention with documents on the device (kernels.h's
 * contract; cuda_int.h's cu_attention_*): FlashAttention-2's tiling, fp32 FMA from shared memory
 * (no tensor cores), for f32 and bf16 tensors (widened on load, each output rounded once).
 *
 * Forward: a block per (query block, head) holds its Q tile in shared memory and runs the online
 * softmax over the key tiles it sees; O and the row statistics (max, sum) live in registers.
 * Backward: D = rowsum(dO * O) per (head, query) into module scratch; kernel A, a block per
 * (key block, KV head), sums dK and dV over the G query heads of the KV head and their query
 * blocks, in that order; kernel B, a block per (query block, head), sums dQ over its key blocks.
 * Deterministic: every sum runs in a fixed order (no atomics); each output element is written
 * once, by one thread. Masking: tiles above the diagonal, or wholly before the document of the
 * first row of their query block (doc_start is non-decreasing), are skipped; inside a tile a
 * score counts iff doc_start[i] <= j <= i < T. Rows past T and head columns past HS are zero in
 * shared memory (head sizes padded to 32, 64, 128 or 256; tiles per size in the dispatchers).
 * Threads: 256 per block as a 16 x 16 grid; thread (tr, tc) owns the tile rows tr + 16a, the score
 * columns tc + 16b and head columns in groups of VW (Cols). Scratch: D, grown on demand. */
#include "cuda/cuda_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

extern "C" size_t cu_attention_scratch_bytes(void);

namespace {

constexpr int NT = 256;                /* threads per block: 16 x 16 */
constexpr unsigned FULL = 0xffffffffu; /* shuffle mask */

/* Everything a kernel reads: one struct for the three kernels (unused members NULL). */
struct Att {
    const void *q, *k, *v, *out, *dout; /* inputs, t->dt */
    void *o, *dq, *dk, *dv;             /* outputs, t->dt */
    float *lse;                         /* (NH, T): the forward writes it, the backward reads it */
    const float *D;                     /* (NH, T): rowsum(dO * O) */
    const int32_t *doc;                 /* doc_start (T) or NULL */
    int T, NH, NKV, HS, G, bf16;
    float scale;
};

/* Head columns of a thread: NC of them, in NC / VW groups of VW consecutive columns. */
template <int HSP>
struct Cols {
    static constexpr int NC = HSP / 16;
    static constexpr int VW = NC >= 4 ? 4 : NC;
    __device__ static __forceinline__ int col(int tc, int n) {
        return VW * tc + 16 * VW * (n / VW) + n % VW;
    }
};

/* Blocks per SM a kernel's launch bounds ask for: 2 where the shared memory of two fits in an SM
 * (228 KiB, 1 KiB of it reserved per block), else 1 (registers up to 255 a thread). */
__host__ __device__ constexpr int minb(size_t smem) {
    return 2 * (smem + 1024) <= (size_t)228 * 1024 ? 2 : 1;
}

/* Elements a thread loads per tensor between stores (load_tiles): fewer registers at 2 blocks. */
__host__ __device__ constexpr int chunk(size_t smem) {
    return minb(smem) == 2 ? 8 : 16;
}

__device__ __forceinline__ float f4(const float4 &v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <int VW>
__device__ __forceinline__ void ldv(float *y, const float *s) {
    if constexpr (VW == 4) {
        float4 v = *reinterpret_cast<const float4 *>(s);
        y[0] = v.x, y[1] = v.y, y[2] = v.z, y[3] = v.w;
    } else {
        float2 v = *reinterpret_cast<const float2 *>(s);
        y[0] = v.x, y[1] = v.y;
    }
}

/* ---- tiles in shared memory ------------------------------------------------------------------ */

/* s0 (and s1 when g1 is not NULL) := ROWS x HSP tiles (row stride HSP + 4) of rows row0.. of
 * head hx of the (T, nhx, HS) tensors g0 (g1), zero past T and HS. The loads are issued CH
 * elements a tensor at a time, before their stores (latency paid N / CH times, 2 CH registers). */
template <int HSP, int ROWS, int CH>
__device__ __forceinline__ void load_tiles(float *s0, const void *g0, float *s1, const void *g1,
                                           int row0, int hx, int nhx, const Att &p) {
    constexpr int LD = HSP + 4, N = ROWS * HSP / NT, C = N < CH ? N : CH;
#pragma unroll 1
    for (int n0 = 0; n0 < N; n0 += C) {
        float x0[C], x1[C];
#pragma unroll
        for (int n = 0; n < C; n++) {
            int idx = (n0 + n) * NT + (int)threadIdx.x, d = idx % HSP, i = row0 + idx / HSP;
            bool in = i < p.T && d < p.HS;
            size_t e = ((size_t)i * nhx + hx) * p.HS + d;
            x0[n] = in ? cu_ld(g0, e, p.bf16) : 0.f;
            x1[n] = in && g1 ? cu_ld(g1, e, p.bf16) : 0.f;
        }
#pragma unroll
        for (int n = 0; n < C; n++) {
            int idx = (n0 + n) * NT + (int)threadIdx.x, at = (idx / HSP) * LD + idx % HSP;
            s0[at] = x0[n];
            if (g1) s1[at] = x1[n];
        }
    }
}

/* Per query row q0 + r (r < ROWS): the first key it sees (lo_s), and when lse_s is not NULL its
 * lse and D of head h; zeros past T. */
template <int ROWS>
__device__ __forceinline__ void load_rows(int *lo_s, float *lse_s, float *D_s, int q0, int h,
                                          const Att &p) {
    for (int r = threadIdx.x; r < ROWS; r += NT) {
        int i = q0 + r;
        bool in = i < p.T;
        size_t x = (size_t)h * p.T + i;
        lo_s[r] = in && p.doc ? p.doc[i] : 0;
        if (lse_s) {
            lse_s[r] = in ? p.lse[x] : 0.f;
            D_s[r] = in ? p.D[x] : 0.f;
        }
    }
}

/* Rows r0 + tr + 16a (< T) of head hx of a (T, nhx, HS) tensor := mul[a] * c[a][.]. */
template <int HSP, int MA>
__device__ __forceinline__ void store_tile(void *g, const float (&c)[MA][HSP / 16],
                                           const float (&mul)[MA], int r0, int hx, int nhx,
                                           const Att &p, int tr, int tc) {
#pragma unroll
    for (int a = 0; a < MA; a++) {
        int i = r0 + tr + 16 * a;
        if (i >= p.T) continue;
        size_t base = ((size_t)i * nhx + hx) * p.HS;
#pragma unroll
        for (int n = 0; n < HSP / 16; n++) {
            int d = Cols<HSP>::col(tc, n);
            if (d < p.HS) cu_st(g, base + d, mul[a] * c[a][n], p.bf16);
        }
    }
}

/* ---- products from shared memory ------------------------------------------------------------- */

/* c[a][b] = sum_d A[tr + 16a][d] * B[tc + 16b][d], d < HSP; A and B of row stride HSP + 4. */
template <int HSP, int MA, int MB>
__device__ __forceinline__ void mm_nt(float (&c)[MA][MB], const float *A, const float *B, int tr,
                                      int tc) {
    constexpr int LD = HSP + 4;
#pragma unroll
    for (int a = 0; a < MA; a++)
#pragma unroll
        for (int b = 0; b < MB; b++)
            c[a][b] = 0.f;
#pragma unroll 2
    for (int d = 0; d < HSP; d += 4) {
        float4 x[MA], y[MB];
#pragma unroll
        for (int a = 0; a < MA; a++)
            x[a] = *reinterpret_cast<const float4 *>(A + (tr + 16 * a) * LD + d);
#pragma unroll
        for (int b = 0; b < MB; b++)
            y[b] = *reinterpret_cast<const float4 *>(B + (tc + 16 * b) * LD + d);
#pragma unroll
        for (int a = 0; a < MA; a++)
#pragma unroll
            for (int b = 0; b < MB; b++) {
                c[a][b] = fmaf(x[a].x, y[b].x, c[a][b]);
                c[a][b] = fmaf(x[a].y, y[b].y, c[a][b]);
                c[a][b] = fmaf(x[a].z, y[b].z, c[a][b]);
                c[a][b] = fmaf(x[a].w, y[b].w, c[a][b]);
            }
    }
}

/* c[a][n] += sum_k A[tr + 16a][k] * B[k][col(n)], k < K (a multiple of 4); A of row stride lda,
 * B of row stride HSP + 4. */
template <int HSP, int MA, int K>
__device__ __forceinline__ void mm_nn(float (&c)[MA][HSP / 16], const float *A, int lda,
                                      const float *B, int tr, int tc) {
    constexpr int LD = HSP + 4, NC = Cols<HSP>::NC, VW = Cols<HSP>::VW;
#pragma unroll 2
    for (int k = 0; k < K; k += 4) {
        float4 x[MA];
#pragma unroll
        for (int a = 0; a < MA; a++)
            x[a] = *reinterpret_cast<const float4 *>(A + (tr + 16 * a) * lda + k);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            float y[NC];
            const float *b = B + (k + kk) * LD + VW * tc;
#pragma unroll
            for (int g = 0; g < NC / VW; g++)
                ldv<VW>(y + g * VW, b + 16 * VW * g);
#pragma unroll
            for (int a = 0; a < MA; a++)
#pragma unroll
                for (int n = 0; n < NC; n++)
                    c[a][n] = fmaf(f4(x[a], kk), y[n], c[a][n]);
        }
    }
}

/* ---- forward ---------------------------------------------------------------------------------- */

/* One key tile of the online softmax: s (raw scores of rows q0 + tr + 16a, keys k0 + tc + 16b)
 * masked and scaled; the row maxima m updated (all 16 lanes of a row agree), o and the lane's
 * partial sums l rescaled, P = exp(s - m) added to l and written to Ps (row stride ldp). */
template <int MA, int MB, int NC>
__device__ __forceinline__ void fwd_online(float (&s)[MA][MB], float (&m)[MA], float (&l)[MA],
                                           float (&o)[MA][NC], float *Ps, int ldp,
                                           const int *lo_s, int q0, int k0, const Att &p, int tr,
                                           int tc) {
#pragma unroll
    for (int a = 0; a < MA; a++) {
        const int r = tr + 16 * a, i = q0 + r, lo = lo_s[r];
        float mx = -INFINITY;
#pragma unroll
        for (int b = 0; b < MB; b++) {
            int j = k0 + tc + 16 * b;
            bool ok = i < p.T && j <= i && j >= lo;
            s[a][b] = ok ? s[a][b] * p.scale : -INFINITY;
            mx = fmaxf(mx, s[a][b]);
        }
#pragma unroll
        for (int off = 8; off > 0; off >>= 1)
            mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, off));
        const float mn = fmaxf(m[a], mx);
        const float mu = mn == -INFINITY ? 0.f : mn; /* a row with nothing seen yet */
        const float al = expf(m[a] - mu);
        m[a] = mn;
        l[a] *= al;
#pragma unroll
        for (int n = 0; n < NC; n++)
            o[a][n] *= al;
#pragma unroll
        for (int b = 0; b < MB; b++) {
            float e = expf(s[a][b] - mu);
            l[a] += e;
            Ps[r * ldp + tc + 16 * b] = e;
        }
    }
}

/* out rows := o / l, lse := m + log l (l summed over the row's 16 lanes). */
template <int HSP, int MA>
__device__ __forceinline__ void fwd_store(const float (&o)[MA][HSP / 16], const float (&m)[MA],
                                          const float (&l)[MA], int q0, int h, const Att &p,
                                          int tr, int tc) {
    float inv[MA];
#pragma unroll
    for (int a = 0; a < MA; a++) {
        float s = l[a];
#pragma unroll
        for (int off = 8; off > 0; off >>= 1)
            s += __shfl_xor_sync(FULL, s, off);
        int i = q0 + tr + 16 * a;
        inv[a] = 1.f / s;
        if (tc == 0 && i < p.T) p.lse[(size_t)h * p.T + i] = m[a] + logf(s);
    }
    store_tile<HSP, MA>(p.o, o, inv, q0, h, p.NH, p, tr, tc);
}

template <int HSP, int BR, int BC>
__host__ __device__ constexpr size_t fwd_smem() {
    return ((size_t)(BR + 2 * BC) * (HSP + 4) + (size_t)BR * (BC + 4)) * 4 + (size_t)BR * 4;
}

/* Grid (query blocks, NH), the last query block first (the longest). */
template <int HSP, int BR, int BC>
__global__ void __launch_bounds__(NT, minb(fwd_smem<HSP, BR, BC>())) fwd_kernel(Att p) {
    constexpr int LD = HSP + 4, LDP = BC + 4, MA = BR / 16, MB = BC / 16, NC = HSP / 16;
    constexpr int CH = chunk(fwd_smem<HSP, BR, BC>());
    extern __shared__ float4 smem_[];
    float *Qs = reinterpret_cast<float *>(smem_), *Ks = Qs + BR * LD, *Vs = Ks + BC * LD;
    float *Ps = Vs + BC * LD;
    int *lo_s = reinterpret_cast<int *>(Ps + BR * LDP);
    const int q0 = ((int)gridDim.x - 1 - (int)blockIdx.x) * BR, h = blockIdx.y, kvh = h / p.G;
    const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
    load_tiles<HSP, BR, CH>(Qs, p.q, nullptr, nullptr, q0, h, p.NH, p);
    load_rows<BR>(lo_s, nullptr, nullptr, q0, h, p);
    float m[MA], l[MA], o[MA][NC];
#pragma unroll
    for (int a = 0; a < MA; a++) {
        m[a] = -INFINITY, l[a] = 0.f;
#pragma unroll
        for (int n = 0; n < NC; n++)
            o[a][n] = 0.f;
    }
    const int kb0 = (p.doc ? p.doc[q0] : 0) / BC, kb1 = min(q0 + BR - 1, p.T - 1) / BC;
    for (int kb = kb0; kb <= kb1; kb++) {
        load_tiles<HSP, BC, CH>(Ks, p.k, Vs, p.v, kb * BC, kvh, p.NKV, p);
        __syncthreads();
        float s[MA][MB];
        mm_nt<HSP, MA, MB>(s, Qs, Ks, tr, tc);
        fwd_online<MA, MB, NC>(s, m, l, o, Ps, LDP, lo_s, q0, kb * BC, p, tr, tc);
        __syncthreads();
        mm_nn<HSP, MA, BC>(o, Ps, LDP, Vs, tr, tc);
        __syncthreads();
    }
    fwd_store<HSP, MA>(o, m, l, q0, h, p, tr, tc);
}

/* ---- backward --------------------------------------------------------------------------------- */

/* D[h * T + i] = sum_d dout[i, h, d] * out[i, h, d]: a warp per (i, h). */
__global__ void __launch_bounds__(NT) bwd_d_kernel(float *D, Att p) {
    const size_t w = ((size_t)blockIdx.x * NT + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (w >= (size_t)p.T * p.NH) return; /* the whole warp */
    const size_t base = w * p.HS;
    float s = 0.f;
    for (int d = lane; d < p.HS; d += 32)
        s = fmaf(cu_ld(p.dout, base + d, p.bf16), cu_ld(p.out, base + d, p.bf16), s);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        s += __shfl_xor_sync(FULL, s, off);
    if (lane == 0) D[(size_t)(w % p.NH) * p.T + w / p.NH] = s;
}

/* From the raw scores s and dp = dO . v of the tile (rows q0 + tr + 16a, keys k0 + tc + 16b):
 * s := P = exp(scale s - lse) (0 where masked), dp := dS = P (dp - D). */
template <int MA, int MB>
__device__ __forceinline__ void bwd_p_ds(float (&s)[MA][MB], float (&dp)[MA][MB], const int *lo_s,
                                         const float *lse_s, const float *D_s, int q0, int k0,
                                         const Att &p, int tr, int tc) {
#pragma unroll
    for (int a = 0; a < MA; a++) {
        const int r = tr + 16 * a, i = q0 + r, lo = lo_s[r];
        const float L = lse_s[r], Dr = D_s[r];
#pragma unroll
        for (int b = 0; b < MB; b++) {
            int j = k0 + tc + 16 * b;
            bool ok = i < p.T && j <= i && j >= lo;
            float pr = ok ? expf(s[a][b] * p.scale - L) : 0.f;
            s[a][b] = pr;
            dp[a][b] = pr * (dp[a][b] - Dr);
        }
    }
}

template <int HSP, int BR, int BC>
__host__ __device__ constexpr size_t dq_smem() {
    return ((size_t)(2 * BR + 2 * BC) * (HSP + 4) + (size_t)BR * (BC + 4) + 3 * (size_t)BR) * 4;
}

/* Kernel B: dQ of a query block and head, over its key blocks in order. Grid (query blocks, NH),
 * the last query block first. */
template <int HSP, int BR, int BC>
__global__ void __launch_bounds__(NT, minb(dq_smem<HSP, BR, BC>())) bwd_dq_kernel(Att p) {
    constexpr int LD = HSP + 4, LDP = BC + 4, MA = BR / 16, MB = BC / 16, NC = HSP / 16;
    constexpr int CH = chunk(dq_smem<HSP, BR, BC>());
    extern __shared__ float4 smem_[];
    float *Qs = reinterpret_cast<float *>(smem_), *dOs = Qs + BR * LD, *Ks = dOs + BR * LD;
    float *Vs = Ks + BC * LD, *dSs = Vs + BC * LD, *lse_s = dSs + BR * LDP, *D_s = lse_s + BR;
    int *lo_s = reinterpret_cast<int *>(D_s + BR);
    const int q0 = ((int)gridDim.x - 1 - (int)blockIdx.x) * BR, h = blockIdx.y, kvh = h / p.G;
    const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
    load_tiles<HSP, BR, CH>(Qs, p.q, dOs, p.dout, q0, h, p.NH, p);
    load_rows<BR>(lo_s, lse_s, D_s, q0, h, p);
    float dq[MA][NC], sc[MA];
#pragma unroll
    for (int a = 0; a < MA; a++) {
        sc[a] = p.scale;
#pragma unroll
        for (int n = 0; n < NC; n++)
            dq[a][n] = 0.f;
    }
    const int kb0 = (p.doc ? p.doc[q0] : 0) / BC, kb1 = min(q0 + BR - 1, p.T - 1) / BC;
    for (int kb = kb0; kb <= kb1; kb++) {
        load_tiles<HSP, BC, CH>(Ks, p.k, Vs, p.v, kb * BC, kvh, p.NKV, p);
        __syncthreads();
        float s[MA][MB], dp[MA][MB];
        mm_nt<HSP, MA, MB>(s, Qs, Ks, tr, tc);
        mm_nt<HSP, MA, MB>(dp, dOs, Vs, tr, tc);
        bwd_p_ds<MA, MB>(s, dp, lo_s, lse_s, D_s, q0, kb * BC, p, tr, tc);
#pragma unroll
        for (int a = 0; a < MA; a++)
#pragma unroll
            for (int b = 0; b < MB; b++)
                dSs[(tr + 16 * a) * LDP + tc + 16 * b] = dp[a][b];
        __syncthreads();
        mm_nn<HSP, MA, BC>(dq, dSs, LDP, Ks, tr, tc);
        __syncthreads();
    }
    store_tile<HSP, MA>(p.dq, dq, sc, q0, h, p.NH, p, tr, tc);
}

template <int HSP, int BR, int BC>
__host__ __device__ constexpr size_t dkv_smem() {
    return ((size_t)(2 * BR + 2 * BC) * (HSP + 4) + 2 * (size_t)BC * (BR + 4) + 3 * (size_t)BR) *
           4;
}

/* Shared buffers of kernel A. */
struct DkvSmem {
    float *Ks, *Vs, *Qs, *dOs, *PT, *dST, *lse_s, *D_s;
    int *lo_s;
};

/* One (query block q0, head h) tile of kernel A: dv += P^T dO, dk += dS^T Q (P^T and dS^T through
 * shared memory, row stride BR + 4). */
template <int HSP, int BR, int BC>
__device__ __forceinline__ void dkv_tile(float (&dk)[BC / 16][HSP / 16],
                                         float (&dv)[BC / 16][HSP / 16], const DkvSmem &sm, int q0,
                                         int k0, int h, const Att &p, int tr, int tc) {
    constexpr int LDT = BR + 4, MA = BR / 16, MB = BC / 16, CH = chunk(dkv_smem<HSP, BR, BC>());
    load_tiles<HSP, BR, CH>(sm.Qs, p.q, sm.dOs, p.dout, q0, h, p.NH, p);
    load_rows<BR>(sm.lo_s, sm.lse_s, sm.D_s, q0, h, p);
    __syncthreads();
    float s[MA][MB], dp[MA][MB];
    mm_nt<HSP, MA, MB>(s, sm.Qs, sm.Ks, tr, tc);
    mm_nt<HSP, MA, MB>(dp, sm.dOs, sm.Vs, tr, tc);
    bwd_p_ds<MA, MB>(s, dp, sm.lo_s, sm.lse_s, sm.D_s, q0, k0, p, tr, tc);
#pragma unroll
    for (int a = 0; a < MA; a++)
#pragma unroll
        for (int b = 0; b < MB; b++) {
            sm.PT[(tc + 16 * b) * LDT + tr + 16 * a] = s[a][b];
            sm.dST[(tc + 16 * b) * LDT + tr + 16 * a] = dp[a][b];
        }
    __syncthreads();
    mm_nn<HSP, MB, BR>(dv, sm.PT, LDT, sm.dOs, tr, tc);
    mm_nn<HSP, MB, BR>(dk, sm.dST, LDT, sm.Qs, tr, tc);
    __syncthreads();
}

/* Kernel A: dK, dV of a key block and KV head, over the G query heads and, per head, the query
 * blocks that see the key block (from the diagonal to the last whose first row's document starts
 * at or before the block's last key), in order. Grid (key blocks, NKV). */
template <int HSP, int BR, int BC>
__global__ void __launch_bounds__(NT, minb(dkv_smem<HSP, BR, BC>())) bwd_dkv_kernel(Att p) {
    constexpr int LD = HSP + 4, LDT = BR + 4, MB = BC / 16, NC = HSP / 16;
    constexpr int CH = chunk(dkv_smem<HSP, BR, BC>());
    extern __shared__ float4 smem_[];
    DkvSmem sm;
    sm.Ks = reinterpret_cast<float *>(smem_), sm.Vs = sm.Ks + BC * LD, sm.Qs = sm.Vs + BC * LD;
    sm.dOs = sm.Qs + BR * LD, sm.PT = sm.dOs + BR * LD, sm.dST = sm.PT + BC * LDT;
    sm.lse_s = sm.dST + BC * LDT, sm.D_s = sm.lse_s + BR;
    sm.lo_s = reinterpret_cast<int *>(sm.D_s + BR);
    const int k0 = blockIdx.x * BC, kvh = blockIdx.y, kl = min(k0 + BC - 1, p.T - 1);
    const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
    load_tiles<HSP, BC, CH>(sm.Ks, p.k, sm.Vs, p.v, k0, kvh, p.NKV, p);
    float dk[MB][NC], dv[MB][NC], sc[MB], one[MB];
#pragma unroll
    for (int b = 0; b < MB; b++) {
        sc[b] = p.scale, one[b] = 1.f;
#pragma unroll
        for (int n = 0; n < NC; n++)
            dk[b][n] = dv[b][n] = 0.f;
    }
    for (int g = 0; g < p.G; g++)
        for (int q0 = k0 / BR * BR; q0 < p.T && (p.doc ? p.doc[q0] : 0) <= kl; q0 += BR)
            dkv_tile<HSP, BR, BC>(dk, dv, sm, q0, k0, kvh * p.G + g, p, tr, tc);
    store_tile<HSP, MB>(p.dk, dk, sc, k0, kvh, p.NKV, p, tr, tc);
    store_tile<HSP, MB>(p.dv, dv, one, k0, kvh, p.NKV, p, tr, tc);
}

/* ---- launches ----------------------------------------------------------------------------------- */

/* Lets kernel use bytes of dynamic shared memory (beyond the default 48 KiB). */
template <typename K>
void allow_smem(K *kernel, size_t bytes) {
    CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

/* Each instantiation's shared-memory limits, raised once (by init, or the first launch). */
template <int HSP, int BR, int BC>
void fwd_prepare() {
    static bool ready;
    if (!ready) allow_smem(fwd_kernel<HSP, BR, BC>, fwd_smem<HSP, BR, BC>()), ready = true;
}

template <int HSP, int BR, int BC>
void bwd_prepare() {
    static bool ready;
    if (ready) return;
    allow_smem(bwd_dkv_kernel<HSP, BR, BC>, dkv_smem<HSP, BR, BC>());
    allow_smem(bwd_dq_kernel<HSP, BR, BC>, dq_smem<HSP, BR, BC>());
    ready = true;
}

template <int HSP, int BR, int BC>
void fwd_launch(const Att &p) {
    fwd_prepare<HSP, BR, BC>();
    dim3 grid((unsigned)((p.T + BR - 1) / BR), (unsigned)p.NH);
    fwd_kernel<HSP, BR, BC><<<grid, NT, fwd_smem<HSP, BR, BC>(), cu_stream>>>(p);
    CU_LAUNCHED("attention_forward");
}

template <int HSP, int BR, int BC>
void bwd_launch(const Att &p) {
    bwd_prepare<HSP, BR, BC>();
    dim3 gkv((unsigned)((p.T + BC - 1) / BC), (unsigned)p.NKV);
    bwd_dkv_kernel<HSP, BR, BC><<<gkv, NT, dkv_smem<HSP, BR, BC>(), cu_stream>>>(p);
    CU_LAUNCHED("attention_backward (dk, dv)");
    dim3 gq((unsigned)((p.T + BR - 1) / BR), (unsigned)p.NH);
    bwd_dq_kernel<HSP, BR, BC><<<gq, NT, dq_smem<HSP, BR, BC>(), cu_stream>>>(p);
    CU_LAUNCHED("attention_backward (dq)");
}

/* Tiles (BR query rows, BC keys) per padded head size. */
void fwd_dispatch(const Att &p) {
    if (p.HS <= 32)
        fwd_launch<32, 64, 64>(p);
    else if (p.HS <= 64)
        fwd_launch<64, 64, 64>(p);
    else if (p.HS <= 128)
        fwd_launch<128, 64, 64>(p);
    else
        fwd_launch<256, 64, 32>(p);
}

void bwd_dispatch(const Att &p) {
    if (p.HS <= 32)
        bwd_launch<32, 64, 64>(p);
    else if (p.HS <= 64)
        bwd_launch<64, 64, 64>(p);
    else if (p.HS <= 128)
        bwd_launch<128, 64, 64>(p);
    else
        bwd_launch<256, 32, 32>(p);
}

/* The common members of Att, the sizes checked. */
Att att_make(const typed_ctx *t, const int32_t *doc_start, int T, int NH, int NKV, int HS,
             const char *op) {
    if (HS < 1 || HS > 256 || NH < 1 || NKV < 1 || NH % NKV != 0)
        cu_fail(op, "head size above 256, or NH not a multiple of NKV", __FILE__, __LINE__);
    Att p = {};
    p.doc = doc_start;
    p.T = T, p.NH = NH, p.NKV = NKV, p.HS = HS, p.G = NH / NKV;
    p.bf16 = t->dt == MEM_DTYPE_BF16;
    p.scale = 1.f / sqrtf((float)HS);
    return p;
}

/* ---- scratch: D (NH, T) ----------------------------------------------------------------------- */

float *g_scr;
size_t g_scr_n;

float *scratch(size_t bytes) {
    return (float *)cu_scratch_grow((void **)&g_scr, &g_scr_n, bytes);
}

} // namespace

extern "C" size_t cu_attention_scratch_bytes(void) {
    return g_scr_n;
}

/* The tensor-core route (cuda_attention_tc.cu) for this call: bf16, a head size it runs, and
 * UPIPE_CUDA_ATTENTION=tc (read once). */
static int tc_route(const typed_ctx *t, int HS) {
    static int want = -1;
    if (want < 0) {
        const char *e = getenv("UPIPE_CUDA_ATTENTION");
        want = e && !strcmp(e, "tc");
    }
    return want && t->dt == MEM_DTYPE_BF16 && cu_attention_tc_supported(HS);
}

extern "C" void cu_attention_forward(const typed_ctx *t, void *out, float *lse, const void *q,
                                     const void *k, const void *v, const int32_t *doc_start,
                                     int T, int NH, int NKV, int HS, float *ws) {
    (void)ws;
    if (T < 1) return;
    if (tc_route(t, HS)) {
        cu_attention_tc_forward(out, lse, q, k, v, doc_start, T, NH, NKV, HS);
        return;
    }
    Att p = att_make(t, doc_start, T, NH, NKV, HS, "attention_forward");
    p.q = q, p.k = k, p.v = v, p.o = out, p.lse = lse;
    fwd_dispatch(p);
}

extern "C" void cu_attention_backward(const typed_ctx *t, void *dq, void *dk, void *dv,
                                      const void *dout, const void *q, const void *k,
                                      const void *v, const void *out, const float *lse,
                                      const int32_t *doc_start, int T, int NH, int NKV, int HS,
                                      float *ws) {
    (void)ws;
    if (T < 1) return;
    if (tc_route(t, HS)) {
        cu_attention_tc_backward(dq, dk, dv, dout, q, k, v, out, lse, doc_start, T, NH, NKV, HS);
        return;
    }
    Att p = att_make(t, doc_start, T, NH, NKV, HS, "attention_backward");
    p.q = q, p.k = k, p.v = v, p.out = out, p.dout = dout;
    p.dq = dq, p.dk = dk, p.dv = dv, p.lse = (float *)lse;
    float *D = scratch((size_t)NH * T * sizeof(float));
    p.D = D;
    size_t warps = (size_t)T * NH;
    bwd_d_kernel<<<(unsigned)((warps + NT / 32 - 1) / (NT / 32)), NT, 0, cu_stream>>>(D, p);
    CU_LAUNCHED("attention_backward (D)");
    bwd_dispatch(p);
}

/* Raises the shared-memory limit of every kernel once (the launches do it too when skipped);
 * the tiles are those of fwd_dispatch and bwd_dispatch. */
extern "C" void cu_attention_init(void) {
    fwd_prepare<32, 64, 64>(), fwd_prepare<64, 64, 64>();
    fwd_prepare<128, 64, 64>(), fwd_prepare<256, 64, 32>();
    bwd_prepare<32, 64, 64>(), bwd_prepare<64, 64, 64>();
    bwd_prepare<128, 64, 64>(), bwd_prepare<256, 32, 32>();
    cu_attention_tc_init();
}
