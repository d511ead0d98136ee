/* attention_dp_body.h — the bf16 attention blocks on a bf16 dot product (VDPBF16PS), written over
 * the primitives of vec.h and the pair primitives of vec_avx512bf16.h (see attention.c for the
 * algorithm, attention_tiles.h for the contract of a block). Included by attention_avx512bf16.c
 * after its primitives header and these constants:
 *   ATTN_FQ, ATTN_BKB   queries per forward task, keys per backward task (the bf16 entries'
 *                       block sizes, attn_ops.fq_bf16 and bkb_bf16)
 *   ATTN_PAD            elements of padding per scratch tile row (L1 sets)
 *   ATTN_R              rows per register tile (2 ATTN_R accumulators; even, divides ATTN_QC)
 *
 * The algorithm and the schedule are attention_body.h's (FlashAttention-2; vectors along the
 * dimension a task keeps fixed, queries in the forward and keys in the backward; the same block
 * ranges, causal and document masks); the products are pair dot products: each operand is laid
 * out with pairs of bf16 along the reduction dimension, once per tile (the fixed operand once per
 * task), and every product is an fp32 accumulation of exact bf16 x bf16 products. What is summed
 * or exponentiated stays fp32 as in the fp32 kernel; FlashAttention-2's bf16 recipe decides what
 * is rounded to bf16:
 *   - forward: S^T = K_j Q_i^T on pairs of the head dimension (q, k are bf16), times scale in
 *     fp32 when stored; max, exp, sum, alpha and lse in fp32 (l sums the fp32 P, as the fp32
 *     kernel); O^T += V_j^T P^T with P rounded to bf16 (pairs of keys);
 *   - backward: S = Q_i K_j^T and dP = dO_i V_j^T on pairs of the head dimension; P =
 *     exp(scale S - lse) and dS = scale P (dP - D) in fp32; dV_j^T += dO_i^T P and dK_j^T +=
 *     Q_i^T dS with P and dS rounded to bf16 (pairs of queries), dQ_i += dS K_j with the same
 *     bf16 dS (pairs of keys).
 * So the bf16 results differ from bf16_round of the fp32 kernel by the rounding of P and dS (at
 * most 2^-8 of each term, DESIGN.md §5.1; test_attention_bf16 derives the bound). dK_j and dV_j
 * accumulate transposed, (HS, keys), so that their products run along keys like P and dS, and
 * are transposed when rounded into dk, dv. The sums run pairs ascending, one instruction per
 * pair, in the same schedule as the fp32 kernel: the same bits for any thread count where the
 * fp32 kernel's are. */
#ifndef UP_ATTENTION_DP_BODY_H
#define UP_ATTENTION_DP_BODY_H

#include "attention_tiles.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define ATTN_INLINE static inline __attribute__((always_inline))
enum { ATTN_QC = 2 * VEC_W }; // the chunk of a tile: two vectors
enum {
    ATTN_LDF = ATTN_FQ + ATTN_PAD,
    ATTN_LDB = ATTN_BKB + ATTN_PAD,
    ATTN_LDC = ATTN_QC + ATTN_PAD
};
#define ATTN_RCLAMP(r, R) ((r) <= (R) ? (r) : (R))

/* Deliberate faults, for test_attention_bf16 only: it compiles a copy of this unit with
 * ATTN_DP_FAULTS and shows that its check catches each (attn_dp_fault: 1 a pair of V swapped in
 * the forward, 2 a tile dropped from the backward, 3 the forward's pair straddling a chunk's
 * first visible key (a document start) takes the key before it unmasked). The library's unit
 * has none. */
#ifdef ATTN_DP_FAULTS
extern int attn_dp_fault;
#define ATTN_DP_FAULT(n) (attn_dp_fault == (n))
#else
#define ATTN_DP_FAULT(n) 0
#endif

/* Pairs of n = (HS + 1) / 2 along the head dimension. */
static inline int attn_pairs(int HS) {
    return (HS + 1) / 2;
}

/* Per-thread scratch (floats; a pair is one float's size, a bf16 half), the larger of:
 * forward Q_i^T (H2, LDF) pairs, O^T (HS, LDF), the chunk's S^T (B, LDC) and P^T (B/2, LDC)
 * pairs, two (FQ) vectors, K_j (B, H2) and V_j (B/2, HS) pairs; backward K_j^T, V_j^T (H2, LDB)
 * pairs, K_j (BKB/2, HS) pairs, dK_j^T, dV_j^T (HS, LDB), the chunk's S and dP (B, LDC), P and
 * dS (B/2, LDB) pairs, dS (B, LDB) bf16, Q_i and dO_i (B, H2) pairs and (B/2, HS) pairs, dQ_i
 * (B, HS). At HS = 64 with 512-query and 512-key blocks: 0.26 and 0.98 MiB. */
static size_t attn_dp_thread_floats(int HS) {
    // (the forward's output row and the backward's transposed rows use a chunk tile)
    UP_CHECK(HS <= ATTN_B * ATTN_LDC, "attention: HS=%d exceeds %d (avx512bf16 path)", HS,
             ATTN_B * ATTN_LDC);
    const size_t B = ATTN_B, hs = (size_t)HS, h2 = (size_t)attn_pairs(HS);
    size_t fwd = up_mul(up_add(h2, hs), ATTN_LDF);
    fwd = up_add(fwd, B * ATTN_LDC + B / 2 * ATTN_LDC + 2 * (size_t)ATTN_FQ);
    fwd = up_add(fwd, up_mul(B, h2) + up_mul(B / 2, hs));
    size_t bwd = up_mul(up_add(up_mul(2, h2), up_mul(2, hs)), ATTN_LDB);
    bwd = up_add(bwd, up_mul((size_t)ATTN_BKB / 2, hs));
    bwd = up_add(bwd, 2 * B * ATTN_LDC + 2 * (B / 2) * ATTN_LDB + B * ATTN_LDB / 2);
    bwd = up_add(bwd, up_mul(2 * B, h2) + up_mul(2 * (B / 2), hs) + up_mul(B, hs));
    return attn_round16(fwd > bwd ? fwd : bwd);
}

/* ---- packing --------------------------------------------------------------------------------- */

/* Pair p of row src: elements 2p and 2p+1 (0 past HS). */
static inline uint32_t attn_pair_at(const uint16_t *src, int p, int HS) {
    const uint32_t lo = src[2 * p], hi = 2 * p + 1 < HS ? src[2 * p + 1] : 0;
    return lo | hi << 16;
}

/* Transposed pairs dst (H2, width): dst[p * width + r] = pair p of row r of src (rows 0 .. n-1,
 * HS bf16 each, strided by ld), 0 in columns n .. width-1. */
static inline void attn_dp_pack_t(uint32_t *dst, int width, const uint16_t *src, size_t ld, int n,
                                  int HS) {
    const int h2 = attn_pairs(HS);
    for (int r = 0; r < n; r++) {
        const uint16_t *s = src + (size_t)r * ld;
        for (int p = 0; p < h2; p++)
            dst[(size_t)p * width + r] = attn_pair_at(s, p, HS);
    }
    for (int p = 0; p < h2; p++)
        memset(dst + (size_t)p * width + n, 0, (size_t)(width - n) * sizeof(uint32_t));
}

/* Rows 0 .. n-1 of src (HS bf16, strided by ld) packed contiguous as pairs of the head
 * dimension, dst (n, H2), with a 0 after an odd HS. The products broadcast a pair of each of 8
 * rows per step: in place, rows 0.5-2 KiB apart fall into a few L1 sets and evict each other
 * (packed K_j made the forward 1.1x faster than in place). */
static inline void attn_dp_pack_rows(uint32_t *dst, const uint16_t *src, size_t ld, int n, int HS) {
    const int h2 = attn_pairs(HS);
    for (int r = 0; r < n; r++)
        for (int p = 0; p < h2; p += VEC_W)
            vbp_store_m(dst + (size_t)r * h2 + p, vm_below(h2 - p),
                        vbp_load_bf16_n(src + (size_t)r * ld + 2 * p, HS - 2 * p));
}

/* Pairs along rows dst (np, HS): dst[p * HS + e] = (row 2p, row 2p+1) of src at column e, rows
 * n and past as 0. */
static inline void attn_dp_pack_pairs(uint32_t *dst, const uint16_t *src, size_t ld, int n, int np,
                                      int HS, int swap) {
    for (int p = 0; p < np; p++) {
        const uint16_t *a = src + (size_t)(2 * p) * ld, *b = 2 * p + 1 < n ? a + ld : a;
        vm ma = 2 * p < n ? vm_all() : 0, mb = 2 * p + 1 < n ? vm_all() : 0;
        if (swap) { // (fault 1 only)
            const uint16_t *t = a;
            const vm tm = ma;
            a = b, b = t, ma = mb, mb = tm;
        }
        uint32_t *d = dst + (size_t)p * HS;
        int e = 0;
        if (ma == vm_all() && mb == vm_all())
            for (; e + VEC_W <= HS; e += VEC_W)
                vbp_store(d + e, vbp_interleave(a + e, b + e));
        for (; e < HS; e += VEC_W) {
            const vm t = vm_below(HS - e);
            vbp_store_m(d + e, t, vbp_interleave_m(a + e, vm_and(ma, t), b + e, vm_and(mb, t)));
        }
    }
}

/* ---- micro-kernels --------------------------------------------------------------------------- */

/* Pair product on a chunk of ATTN_QC columns:
 *     C (M, QC) = mul * A (M, K) B (K, QC)  (acc = 0)  or  C += A B  (acc = 1),
 * K pairs; A(m, k) the pair of bf16 at A + m*sam + k*sak (strides in bf16 elements, so that
 * one kernel reads pairs along either dimension of a tile), B rows of pairs strided by ldb, C
 * rows by ldc. R rows at a time: 2R accumulators, per pair two B loads and R broadcasts. */
ATTN_INLINE void attn_dp_kq_tile(float *C, size_t ldc, const uint16_t *A, size_t sam, size_t sak,
                                 const uint32_t *B, size_t ldb, int K, int acc, vf mul,
                                 const int R) {
    vf c0[ATTN_R], c1[ATTN_R];
    for (int i = 0; i < R; i++) {
        c0[i] = acc ? vf_load(C + (size_t)i * ldc) : vf_zero();
        c1[i] = acc ? vf_load(C + (size_t)i * ldc + VEC_W) : vf_zero();
    }
    for (int k = 0; k < K; k++) {
        const vbp b0 = vbp_load(B + (size_t)k * ldb);
        const vbp b1 = vbp_load(B + (size_t)k * ldb + VEC_W);
        const uint16_t *ak = A + (size_t)k * sak;
        for (int i = 0; i < R; i++) {
            const vbp a = vbp_bcast(ak + (size_t)i * sam);
            c0[i] = vf_dot2(c0[i], a, b0);
            c1[i] = vf_dot2(c1[i], a, b1);
        }
    }
    for (int i = 0; i < R; i++) {
        vf_store(C + (size_t)i * ldc, acc ? c0[i] : vf_mul(c0[i], mul));
        vf_store(C + (size_t)i * ldc + VEC_W, acc ? c1[i] : vf_mul(c1[i], mul));
    }
}

static void attn_dp_kq(float *C, size_t ldc, const uint16_t *A, size_t sam, size_t sak,
                       const uint32_t *B, size_t ldb, int M, int K, int acc, vf mul) {
    int m = 0;
    for (; m + ATTN_R <= M; m += ATTN_R)
        attn_dp_kq_tile(C + (size_t)m * ldc, ldc, A + (size_t)m * sam, sam, sak, B, ldb, K, acc,
                        mul, ATTN_R);
    float *Cm = C + (size_t)m * ldc;
    const uint16_t *Am = A + (size_t)m * sam;
    switch (M - m) { // remainder rows (< ATTN_R), each count its own unrolled instance
#define ATTN_KQ_CASE(r)                                                                            \
    case r:                                                                                        \
        attn_dp_kq_tile(Cm, ldc, Am, sam, sak, B, ldb, K, acc, mul, ATTN_RCLAMP(r, ATTN_R - 1));   \
        break;
        ATTN_KQ_CASE(7)
        ATTN_KQ_CASE(6)
        ATTN_KQ_CASE(5)
        ATTN_KQ_CASE(4)
        ATTN_KQ_CASE(3)
        ATTN_KQ_CASE(2)
        ATTN_KQ_CASE(1)
#undef ATTN_KQ_CASE
    default:
        break;
    }
}

/* Pair product, accumulate: C (M, N) += A (M, K) B (K, N), N = HS in chunks of ATTN_QC (NV = 1
 * or 2 vectors of the chunk in use, loaded and stored through the lane masks m0, m1), K pairs,
 * A(m, k) the pair at A + m*sam + 2k (bf16 rows strided by sam), B rows of pairs strided by
 * ldb, C rows by ldc; the register tile runs the pairs [0, k1). */
ATTN_INLINE void attn_dp_kh_tile(float *C, size_t ldc, const uint16_t *A, size_t sam,
                                 const uint32_t *B, size_t ldb, int k1, vm m0, vm m1, const int R,
                                 const int NV) {
    vf c0[ATTN_R], c1[ATTN_R];
    for (int i = 0; i < R; i++) {
        c0[i] = vf_load_m(C + (size_t)i * ldc, m0);
        if (NV == 2) c1[i] = vf_load_m(C + (size_t)i * ldc + VEC_W, m1);
    }
    for (int k = 0; k < k1; k++) {
        const uint32_t *bk = B + (size_t)k * ldb;
        const vbp b0 = vbp_load_m(bk, m0);
        const vbp b1 = NV == 2 ? vbp_load_m(bk + VEC_W, m1) : b0;
        for (int i = 0; i < R; i++) {
            const vbp a = vbp_bcast(A + (size_t)i * sam + 2 * (size_t)k);
            c0[i] = vf_dot2(c0[i], a, b0);
            if (NV == 2) c1[i] = vf_dot2(c1[i], a, b1);
        }
    }
    for (int i = 0; i < R; i++) {
        vf_store_m(C + (size_t)i * ldc, m0, c0[i]);
        if (NV == 2) vf_store_m(C + (size_t)i * ldc + VEC_W, m1, c1[i]);
    }
}

/* Causal limit per register tile of rows [m, m + r): its last row sees elements below
 * m + r + khi, so the pairs [0, min(K, (m + r + khi + 1) / 2)) (the entries past a row's limit
 * are zero by the mask). */
static void attn_dp_kh(float *C, size_t ldc, const uint16_t *A, size_t sam, const uint32_t *B,
                       size_t ldb, int M, int N, int K, int khi) {
    for (int n0 = 0; n0 < N; n0 += ATTN_QC) {
        const int nn = attn_min(ATTN_QC, N - n0);
        const vm m0 = vm_below(nn), m1 = vm_below(nn - VEC_W);
        const uint32_t *Bn = B + n0;
        for (int m = 0; m < M; m += ATTN_R) {
            const int r = attn_min(ATTN_R, M - m);
            const int k1 = attn_min(K, (m + r + khi + 1) / 2);
            float *Cm = C + (size_t)m * ldc + n0;
            const uint16_t *Am = A + (size_t)m * sam;
            switch (r * 2 + (nn > VEC_W)) {
#define ATTN_KH_CASE(r)                                                                            \
    case 2 * r:                                                                                    \
        attn_dp_kh_tile(Cm, ldc, Am, sam, Bn, ldb, k1, m0, m1, ATTN_RCLAMP(r, ATTN_R), 1);         \
        break;                                                                                     \
    case 2 * r + 1:                                                                                \
        attn_dp_kh_tile(Cm, ldc, Am, sam, Bn, ldb, k1, m0, m1, ATTN_RCLAMP(r, ATTN_R), 2);         \
        break;
                ATTN_KH_CASE(8)
                ATTN_KH_CASE(7)
                ATTN_KH_CASE(6)
                ATTN_KH_CASE(5)
                ATTN_KH_CASE(4)
                ATTN_KH_CASE(3)
                ATTN_KH_CASE(2)
                ATTN_KH_CASE(1)
#undef ATTN_KH_CASE
            default:
                break;
            }
        }
    }
}

/* ---- forward --------------------------------------------------------------------------------- */

/* Lanes of the VEC_W queries i0+qv .. that see key j0+m (attention_body.h's attn_fwd_lanes). */
ATTN_INLINE vm attn_dp_fwd_lanes(int masked, int cut, vi dsv, int dk, int m, int qv, int j) {
    vm mk = masked ? vm_from(dk + m - qv) : vm_all();
    if (cut) mk = vm_and(mk, vm_le(dsv, j));
    return mk;
}

/* Softmax update of the VEC_W queries qv .. (column col of the chunk's tiles) over the keys
 * ml .. mc-1 of the key block, as attention_body.h's attn_fwd_softmax_v (fp32 max, P, sum,
 * alpha; O^T rescaled), except that P goes into the pair tile xp rounded to bf16: row m/2 holds
 * the keys (m, m+1), a key outside [ml, mc) as 0. */
ATTN_INLINE void attn_dp_fwd_softmax_v(const float *st, uint32_t *xp, float *ot, float *mrow,
                                       float *lrow, const attn_shape *sh, int i0, int j0, int bq,
                                       int qv, int col, int ml, int mc, int masked) {
    const int LC = ATTN_LDC, dk = j0 - i0;
    const int cut = qv < bq && attn_doc_cuts(sh, i0 + attn_min(qv + VEC_W, bq), j0 + ml);
    const vi dsv =
        cut ? vi_load_m(sh->doc + i0 + qv, vm_below(attn_min(VEC_W, bq - qv))) : vi_zero();
    const int any = masked || cut;
    const vf m_old = vf_load(mrow + qv);
    vf ma = m_old, mb = m_old; // two chains (rows m, m+1): a max is exact in any order
    int m = ml;
    for (; m + 1 < mc; m += 2) {
        const vf sa = vf_load(st + (size_t)m * LC + col),
                 sb = vf_load(st + (size_t)(m + 1) * LC + col);
        ma = any ? vf_max_m(ma, attn_dp_fwd_lanes(masked, cut, dsv, dk, m, qv, j0 + m), sa)
                 : vf_max(ma, sa);
        mb = any ? vf_max_m(mb, attn_dp_fwd_lanes(masked, cut, dsv, dk, m + 1, qv, j0 + m + 1), sb)
                 : vf_max(mb, sb);
    }
    if (m < mc) {
        const vf sa = vf_load(st + (size_t)m * LC + col);
        ma = any ? vf_max_m(ma, attn_dp_fwd_lanes(masked, cut, dsv, dk, m, qv, j0 + m), sa)
                 : vf_max(ma, sa);
    }
    const vf mx = vf_max(ma, mb);
    const vf mxe = sh->doc ? vf_neginf_to_zero(mx) : mx; // (attention_body.h says why)
    const vf alpha = vf_exp(vf_sub(m_old, mxe));
    vf sum = vf_zero();
    for (m = ml & ~1; m < mc; m += 2) {
        vf p[2] = {vf_zero(), vf_zero()};
        for (int e = 0; e < 2; e++) {
            const int below = m + e < ml; // the partner of key ml: 0 (fault 3: unmasked)
            if ((below && !ATTN_DP_FAULT(3)) || m + e >= mc) continue;
            p[e] = vf_exp(vf_sub(vf_load(st + (size_t)(m + e) * LC + col), mxe));
            if (any && !below)
                p[e] =
                    vf_maskz(attn_dp_fwd_lanes(masked, cut, dsv, dk, m + e, qv, j0 + m + e), p[e]);
            sum = vf_add(sum, p[e]);
        }
        vbp_store(xp + (size_t)(m / 2) * LC + col, vbp_round2(p[0], p[1]));
    }
    vf_store(lrow + qv, vf_fma(vf_load(lrow + qv), alpha, sum));
    vf_store(mrow + qv, mx);
    // alpha is exactly 1 where the max did not move (exp(0) = 1), and O^T is 0 where it stays
    // -inf (no key seen yet): then the rescale would change nothing
    if (j0 > 0 && !vf_same(mx, m_old))
        for (int d = 0; d < sh->HS; d++) {
            float *o = ot + (size_t)d * ATTN_LDF + qv;
            vf_store(o, vf_mul(vf_load(o), alpha));
        }
}

/* Forward of one (query head h, query block ib of ATTN_FQ queries), attention_body.h's
 * attn_fwd_impl on pairs: Q_i^T is packed in pairs once per task, K_j in pairs of the head
 * dimension and V_j in pairs of keys once per key block; per ATTN_QC-query chunk S^T (keys,
 * queries) then P^T in pairs, and O^T (HS, FQ) accumulates. */
ATTN_INLINE void attn_dp_fwd_impl(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k,
                                  const uint16_t *v, const attn_shape *sh, int h, int ib,
                                  float *tws) {
    const int B = ATTN_B, FQ = ATTN_FQ, LD = ATTN_LDF, LC = ATTN_LDC, HS = sh->HS, T = sh->T;
    const int h2 = attn_pairs(HS);
    const int i0 = ib * FQ;
    const int bq = attn_min(FQ, T - i0);
    const size_t kvoff = (size_t)(h / sh->G) * HS;
    uint32_t *qt = (uint32_t *)tws;         // (H2, FQ) Q_i^T pairs, zero past bq; rows LD
    float *ot = tws + (size_t)h2 * LD;      // (HS, FQ) O_i^T, unnormalised; rows LD
    float *st = ot + (size_t)HS * LD;       // (B, QC) S^T then P^T of a chunk; rows LC
    uint32_t *xp = (uint32_t *)st + B * LC; // (B/2, QC) P^T rounded, pairs of keys; rows LC
    float *mrow = (float *)xp + B / 2 * LC; // (FQ) running max per query
    float *lrow = mrow + FQ;                // (FQ) running sum per query
    uint32_t *kp = (uint32_t *)(lrow + FQ); // (B, H2) K_j, pairs of the head dimension
    uint32_t *vp = kp + (size_t)B * h2;     // (B/2, HS) V_j, pairs of keys
    const vf vscale = vf_set1(sh->scale);
    const size_t qoff = (size_t)i0 * sh->ldq + (size_t)h * HS;
    attn_dp_pack_t(qt, LD, q + qoff, sh->ldq, bq, HS);
    memset(ot, 0, (size_t)HS * LD * sizeof(float));
    for (int r = 0; r < FQ; r++) {
        mrow[r] = -INFINITY;
        lrow[r] = 0.0f;
    }
    const int jfirst = attn_doc_first_key(sh, i0) / B * B; // 0 without documents
    for (int j0 = jfirst; j0 < i0 + bq; j0 += B) {         // key blocks up to the last query
        const int bk = attn_min(B, T - j0);
        const int dk = j0 - i0;
        const int masked = j0 + bk - 1 > i0; // some key of the block is after the first query
        const uint16_t *kj = k + (size_t)j0 * sh->ldk + kvoff,
                       *vj = v + (size_t)j0 * sh->ldk + kvoff;
        if (j0 + B < i0 + bq) { // the next key block into L2 while this one computes
            const int nn = attn_min(B, T - j0 - B);
            attn_prefetch_rows_bf16(kj + (size_t)B * sh->ldk, nn, HS, sh->ldk);
            attn_prefetch_rows_bf16(vj + (size_t)B * sh->ldk, nn, HS, sh->ldk);
        }
        attn_dp_pack_rows(kp, kj, sh->ldk, bk, HS);
        attn_dp_pack_pairs(vp, vj, sh->ldk, bk, (bk + 1) / 2, HS, ATTN_DP_FAULT(1));
        for (int q0 = 0; q0 < bq; q0 += ATTN_QC) {
            // keys of this block seen by some query of the chunk, from the first query's document
            const int mc = attn_min(bk, q0 + ATTN_QC - dk);
            const int ml = sh->doc ? attn_max(0, sh->doc[i0 + q0] - j0) : 0;
            if (mc <= ml) continue;
            // S^T (rows ml .. mc-1, QC) = scale K_j Q_i^T
            const int ms = ATTN_DP_FAULT(3) ? ml & ~1 : ml;
            attn_dp_kq(st + (size_t)ms * LC, LC, (const uint16_t *)(kp + (size_t)ms * h2),
                       2 * (size_t)h2, 2, qt + q0, LD, mc - ms, h2, 0, vscale);
            for (int c = 0; c < ATTN_QC; c += VEC_W)
                attn_dp_fwd_softmax_v(st, xp, ot, mrow, lrow, sh, i0, j0, bq, q0 + c, c, ml, mc,
                                      masked);
            // O^T (HS, QC) += V_j^T (HS, keys) P^T (keys, QC), over the key pairs of [ml, mc)
            const int p0 = ml / 2, p1 = (mc + 1) / 2;
            attn_dp_kq(ot + q0, LD, (const uint16_t *)(vp + (size_t)p0 * HS), 2, 2 * (size_t)HS,
                       xp + (size_t)p0 * LC, LC, HS, p1 - p0, 1, vscale);
        }
    }
    for (int r = 0; r < bq; r++) {
        const float inv = 1.0f / lrow[r]; // l >= 1: the row maximum contributes exp(0)
        for (int d = 0; d < HS; d++)      // the row in fp32 in the free score tile, rounded once
            st[d] = ot[(size_t)d * LD + r] * inv;
        sh->bf16->from_f32(st, out + qoff + (size_t)r * sh->ldq, (size_t)HS);
        lse[(size_t)h * T + i0 + r] = mrow[r] + logf(lrow[r]);
    }
}

/* ---- backward -------------------------------------------------------------------------------- */

/* P and scale * dS of query row r over the VEC_W keys j0+cv .. of a chunk (attention_body.h's
 * attn_bwd_row_v): s, dp the row's S (scaled) and dP; masked keys after the query, before its
 * document's start (cut; doc_rel = doc - j0 - cv) and at or past the block's end (lanes from
 * kend = bk - cv: the pairs read them, so they must be 0). */
ATTN_INLINE void attn_dp_bwd_row_v(vf *p, vf *ds, const float *s, const float *dp, float lse_r,
                                   float D_r, vf vscale, int masked, int cut, int edge, int dq,
                                   int r, int cv, int doc_rel, int kend) {
    vf pv = vf_exp(vf_sub(vf_load(s), vf_set1(lse_r)));
    if (masked || cut || edge) {
        vm mk = masked ? vm_upto(dq + r - cv) : vm_all();
        if (cut) mk = vm_and(mk, vm_from(doc_rel));
        if (edge) mk = vm_and(mk, vm_below(kend));
        pv = vf_maskz(mk, pv);
    }
    *p = pv;
    *ds = vf_mul(vf_mul(pv, vf_sub(vf_load(dp), vf_set1(D_r))), vscale);
}

/* One (query head h, query block i0) of the backward's task: per ATTN_QC-key chunk S and dP,
 * then P and dS rounded into their pair tiles (xp, xs: pairs of queries, rows of LDB; ys: dS
 * bf16 rows of LDB, pairs of keys); then dV_j^T, dK_j^T (rows strided by LDB) and dQ_i. kt, vt:
 * K_j^T, V_j^T in pairs of the head dimension; kr: K_j in pairs of keys. */
ATTN_INLINE void attn_dp_bwd_qblock(const attn_dq *dqacc, float *dkt, float *dvt,
                                    const uint16_t *dout, const uint16_t *q, const uint32_t *kt,
                                    const uint32_t *vt, const uint32_t *kr, const float *lse,
                                    const float *D, const attn_shape *sh, int h, int i0, int j0,
                                    int bk, int qend, float *sc, float *dpc, uint32_t *xp,
                                    uint32_t *xs, uint16_t *ys, uint32_t *qp, uint32_t *dop,
                                    uint32_t *qr, uint32_t *dor, float *dqt) {
    const int B = ATTN_B, LD = ATTN_LDB, LC = ATTN_LDC, HS = sh->HS, T = sh->T;
    const int h2 = attn_pairs(HS);
    const int bq = attn_min(B, T - i0), np = (bq + 1) / 2;
    const int dq = i0 - j0;              // >= 0, a multiple of B
    const int masked = j0 + bk - 1 > i0; // some key of the block is after the first query
    const int cut = attn_doc_cuts(sh, i0 + bq, j0); // a document boundary in the tile
    const size_t qoff = (size_t)i0 * sh->ldq + (size_t)h * HS;
    const float *lse_i = lse + (size_t)h * T + i0;
    const float *D_i = D + (size_t)h * T + i0;
    const vf vscale = vf_set1(sh->scale), one = vf_set1(1.0f);
    const uint16_t *qi = q + qoff, *doi = dout + qoff;
    if (i0 + B < qend) { // the next query block's Q, dO and dQ rows into L2
        const int nn = attn_min(B, T - i0 - B);
        const size_t nxt = (size_t)B * sh->ldq;
        attn_prefetch_rows_bf16(qi + nxt, nn, HS, sh->ldq);
        attn_prefetch_rows_bf16(doi + nxt, nn, HS, sh->ldq);
        if (dqacc->f) {
            attn_prefetch_rows(dqacc->f + qoff + nxt, nn, HS, sh->ldq);
        } else {
            attn_prefetch_rows_bf16(dqacc->hi + qoff + nxt, nn, HS, sh->ldq);
            attn_prefetch_rows_bf16(dqacc->lo + qoff + nxt, nn, HS, sh->ldq);
        }
    }
    attn_dp_pack_rows(qp, qi, sh->ldq, bq, HS);
    attn_dp_pack_rows(dop, doi, sh->ldq, bq, HS);
    const uint16_t *qa = (const uint16_t *)qp, *da = (const uint16_t *)dop;
    const size_t qst = 2 * (size_t)h2, dst = qst;
    attn_dp_pack_pairs(qr, qi, sh->ldq, bq, np, HS, 0);
    attn_dp_pack_pairs(dor, doi, sh->ldq, bq, np, HS, 0);
    for (int c0 = 0; c0 < bk; c0 += ATTN_QC) {
        // queries seeing some key of the chunk: i0 + r >= j0 + c0 (r0 even: c0 and dq are)
        const int r0 = c0 - dq > 0 ? c0 - dq : 0;
        if (r0 >= bq) break; // and so for the later chunks
        const int nr = bq - r0;
        attn_dp_kq(sc + (size_t)r0 * LC, LC, qa + (size_t)r0 * qst, qst, 2, kt + c0, LD, nr, h2, 0,
                   vscale); // S = scale Q_i K_j^T (nr, QC)
        attn_dp_kq(dpc + (size_t)r0 * LC, LC, da + (size_t)r0 * dst, dst, 2, vt + c0, LD, nr, h2, 0,
                   one); // dP = dO_i V_j^T (nr, QC)
        for (int c = 0; c < ATTN_QC; c += VEC_W) {
            const int cv = c0 + c, edge = cv + VEC_W > bk;
            for (int r = r0; r < bq; r += 2) {
                vf p[2] = {vf_zero(), vf_zero()}, ds[2] = {vf_zero(), vf_zero()};
                for (int e = 0; e < 2 && r + e < bq; e++)
                    attn_dp_bwd_row_v(p + e, ds + e, sc + (size_t)(r + e) * LC + c,
                                      dpc + (size_t)(r + e) * LC + c, lse_i[r + e], D_i[r + e],
                                      vscale, masked, cut, edge, dq, r + e, cv,
                                      cut ? sh->doc[i0 + r + e] - j0 - cv : 0, bk - cv);
                vbp_store(xp + (size_t)(r / 2) * LD + cv, vbp_round2(p[0], p[1]));
                const vbp d = vbp_round2(ds[0], ds[1]);
                vbp_store(xs + (size_t)(r / 2) * LD + cv, d);
                vbp_store_halves(ys + (size_t)r * LD + cv, ys + (size_t)(r + 1) * LD + cv, d);
            }
        }
    }
    // dV_j^T (HS, QC) += dO_i^T P and dK_j^T += Q_i^T dS per key chunk, over the query pairs
    // from the chunk's first query
    for (int c0 = 0; c0 < bk; c0 += ATTN_QC) {
        const int r0 = c0 - dq > 0 ? c0 - dq : 0;
        if (r0 >= bq) break;
        const int p0 = r0 / 2;
        const size_t po = (size_t)p0 * HS;
        attn_dp_kq(dvt + c0, LD, (const uint16_t *)(dor + po), 2, 2 * (size_t)HS,
                   xp + (size_t)p0 * LD + c0, LD, HS, np - p0, 1, one);
        attn_dp_kq(dkt + c0, LD, (const uint16_t *)(qr + po), 2, 2 * (size_t)HS,
                   xs + (size_t)p0 * LD + c0, LD, HS, np - p0, 1, one);
    }
    // dQ_i (bq, HS) += dS (bq, bk) K_j (bk, HS): row r sees the keys below r + 1 + dq (the
    // register tile's rows never straddle two chunks: ATTN_R divides ATTN_QC, dq is a multiple)
    attn_dq_get(dqt, dqacc, qoff, sh->ldq, bq, HS);
    attn_dp_kh(dqt, (size_t)HS, ys, LD, kr, (size_t)HS, bq, HS, (bk + 1) / 2, dq);
    attn_dq_put(dqacc, qoff, sh->ldq, dqt, bq, HS);
}

/* Backward of one (KV head kvh, key block jb of ATTN_BKB keys), attention_body.h's attn_bwd_impl
 * on pairs: K_j^T and V_j^T in pairs of the head dimension and K_j in pairs of keys are packed
 * once per task; dK_j^T, dV_j^T accumulate in fp32 and are rounded into dk, dv at the end. */
ATTN_INLINE void attn_dp_bwd_impl(const attn_dq *dqacc, uint16_t *dk, uint16_t *dv,
                                  const uint16_t *dout, const uint16_t *q, const uint16_t *k,
                                  const uint16_t *v, const float *lse, const float *D,
                                  const attn_shape *sh, int kvh, int jb, float *tws) {
    const int B = ATTN_B, BK = ATTN_BKB, LD = ATTN_LDB, LC = ATTN_LDC, HS = sh->HS;
    const int h2 = attn_pairs(HS);
    const int j0 = jb * BK;
    const int bk = attn_min(BK, sh->T - j0);
    const size_t koff = (size_t)j0 * sh->ldk + (size_t)kvh * HS;
    uint32_t *kt = (uint32_t *)tws;                  // (H2, BK) K_j^T pairs, zero past bk; rows LD
    uint32_t *vt = kt + (size_t)h2 * LD;             // (H2, BK) V_j^T pairs
    uint32_t *kr = vt + (size_t)h2 * LD;             // (BK/2, HS) K_j, pairs of keys
    float *dkt = (float *)kr + (size_t)BK / 2 * HS;  // (HS, BK) dK_j^T in fp32; rows LD
    float *dvt = dkt + (size_t)HS * LD;              // (HS, BK) dV_j^T
    float *sc = dvt + (size_t)HS * LD;               // (B, QC) S of a chunk; rows LC
    float *dpc = sc + (size_t)B * LC;                // (B, QC) dP of a chunk
    uint32_t *xp = (uint32_t *)dpc + (size_t)B * LC; // (B/2, BK) P, pairs of queries; rows LD
    uint32_t *xs = xp + (size_t)B / 2 * LD;          // (B/2, BK) scale * dS, pairs of queries
    uint16_t *ys = (uint16_t *)(xs + (size_t)B / 2 * LD); // (B, BK) the same dS bf16; rows LD
    uint32_t *qp = (uint32_t *)ys + (size_t)B * LD / 2;   // (B, H2) Q_i, pairs of the head dim
    uint32_t *dop = qp + (size_t)B * h2;                  // (B, H2) dO_i
    uint32_t *qr = dop + (size_t)B * h2;                  // (B/2, HS) Q_i, pairs of queries
    uint32_t *dor = qr + (size_t)B / 2 * HS;              // (B/2, HS) dO_i
    float *dqt = (float *)dor + (size_t)B / 2 * HS;       // (B, HS) dQ_i in fp32
    attn_dp_pack_t(kt, LD, k + koff, sh->ldk, bk, HS);
    attn_dp_pack_t(vt, LD, v + koff, sh->ldk, bk, HS);
    attn_dp_pack_pairs(kr, k + koff, sh->ldk, bk, (bk + 1) / 2, HS, 0);
    memset(dkt, 0, 2 * (size_t)HS * LD * sizeof(float)); // dkt and dvt
    const int qend = attn_doc_query_end(sh, j0 + bk);    // T without documents
    for (int g = 0; g < sh->G; g++) // query blocks from the first one seeing key j0 to the last
        for (int i0 = j0; i0 < qend; i0 += B) { // one seeing key j0 + bk - 1
            if (ATTN_DP_FAULT(2) && g == 0 && i0 == j0 + B) continue;
            attn_dp_bwd_qblock(dqacc, dkt, dvt, dout, q, kt, vt, kr, lse, D, sh, kvh * sh->G + g,
                               i0, j0, bk, qend, sc, dpc, xp, xs, ys, qp, dop, qr, dor, dqt);
        }
    for (int c = 0; c < bk; c++) { // transposed into dk, dv, each rounded once (sc: free)
        for (int t = 0; t < 2; t++) {
            const float *src = t ? dvt : dkt;
            for (int d = 0; d < HS; d++)
                sc[d] = src[(size_t)d * LD + c];
            sh->bf16->from_f32(sc, (t ? dv : dk) + koff + (size_t)c * sh->ldk, (size_t)HS);
        }
    }
}

#define ATTN_DP_DEFINE_BLOCKS()                                                                    \
    static void attn_dp_fwd_block(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k, \
                                  const uint16_t *v, const attn_shape *sh, int h, int ib,          \
                                  float *tws) {                                                    \
        attn_dp_fwd_impl(out, lse, q, k, v, sh, h, ib, tws);                                       \
    }                                                                                              \
    static void attn_dp_bwd_block(const attn_dq *dqacc, uint16_t *dk, uint16_t *dv,                \
                                  const uint16_t *dout, const uint16_t *q, const uint16_t *k,      \
                                  const uint16_t *v, const float *lse, const float *D,             \
                                  const attn_shape *sh, int kvh, int jb, float *tws) {             \
        attn_dp_bwd_impl(dqacc, dk, dv, dout, q, k, v, lse, D, sh, kvh, jb, tws);                  \
    }

ATTN_DP_DEFINE_BLOCKS()
#endif
