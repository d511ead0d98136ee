/* cuda_attention_tc_bwd.cu — the backward of the tensor-core attention (cuda_attention_tc.cu has
 * the recipe, the split, the masking and the tiles): the D kernel, kernel A (dK, dV), kernel B
 * (dQ), their launches, and the module scratch that holds D. */
#include "cuda/cuda_attention_tc_int.h"

namespace {

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

/* Kernels A and B's shared-memory limits for head size HS, raised once (by init, or the first
 * launch). */
template <int HS>
void bwd_prepare() {
    static bool ready;
    if (ready) return;
    allow_smem(bwd_dkv_kernel<HS>, BwdL<HS>::BYTES);
    allow_smem(bwd_dq_kernel<HS>, BwdL<HS>::BYTES);
    ready = true;
}

template <int HS>
void bwd_launch(const Tc &p) {
    bwd_prepare<HS>();
    dim3 gkv((unsigned)p.NKV, (unsigned)((p.T + BC - 1) / BC));
    bwd_dkv_kernel<HS><<<gkv, NT, BwdL<HS>::BYTES, cu_stream>>>(p);
    CU_LAUNCHED("attention_tc_backward (dk, dv)");
    dim3 gq((unsigned)p.NH, (unsigned)((p.T + BR - 1) / BR));
    bwd_dq_kernel<HS><<<gq, NT, BwdL<HS>::BYTES, cu_stream>>>(p);
    CU_LAUNCHED("attention_tc_backward (dq)");
}

/* ---- scratch: D (NH, T) ---------------------------------------------------------------------- */

float *g_scr;
size_t g_scr_n;

float *scratch(size_t bytes) {
    if (bytes <= g_scr_n) return g_scr;
    size_t mib = (size_t)1 << 20, want = (bytes + mib - 1) / mib * mib;
    if (g_scr) {
        cu_wait_stream(cu_stream); /* ops issued may still read the old one */
        CU_CHECK(cudaFree(g_scr));
        g_scr = NULL;
        g_scr_n = 0;
    }
    CU_CHECK(cudaMalloc((void **)&g_scr, want));
    g_scr_n = want;
    return g_scr;
}

} // namespace

extern "C" size_t cu_attention_tc_scratch_bytes(void) {
    return g_scr_n;
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

extern "C" void cu_attention_tc_bwd_init(void) {
    for (int hs = 16; hs <= 128; hs += 16)
        with_hs(hs, [](auto x) { bwd_prepare<decltype(x)::value>(); });
}
