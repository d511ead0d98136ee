/* attention_body.h — the attention blocks of the vector paths, written once over the primitives
 * of vec.h (see attention.c for the algorithm and attention_tiles.h for the contract of a block).
 * Included by attention_avx512.c and attention_avx2.c after their primitives header and these
 * constants:
 *   ATTN_FQ, ATTN_BKB   queries per forward task, keys per backward task
 *   ATTN_PAD            floats of padding per scratch tile row (rows 512 B or 1 KiB apart would
 *                       fall into the same few L1 sets)
 *   ATTN_R, ATTN_RH     rows per register tile of attn_kq and of attn_kh (at most 8)
 *   ATTN_PACK_ROWS      1: the backward packs Q_i, dO_i and K_j contiguous before its products
 *   ATTN_MASK_CHEAP     1: masked loads cost what plain ones do (attn_kh always masks)
 * The vectors run along the dimension a task keeps fixed: in the forward VEC_W queries fill a
 * vector (scores are kept transposed, S^T (keys, queries)), so the online softmax needs no
 * horizontal reductions and the causal mask is a lane mask; in the backward VEC_W keys do. The
 * fixed operand is packed transposed once per task, the streamed ones are read in place. Chunks
 * are two vectors wide (ATTN_QC). Every sum runs k ascending, one fma per term (masked terms add
 * an exact 0), whatever the width: the paths give the same bits wherever their blocks agree. */
#ifndef UP_ATTENTION_BODY_H
#define UP_ATTENTION_BODY_H

#include "attention_tiles.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define ATTN_INLINE static inline __attribute__((always_inline))
enum { ATTN_QC = 2 * VEC_W }; // the chunk of a tile: two vectors
enum { ATTN_LDF = ATTN_FQ + ATTN_PAD, ATTN_LDB = ATTN_BKB + ATTN_PAD };
enum { ATTN_NOLIM = 1 << 29 }; // klo/khi of attn_kh that never limit
#define ATTN_RCLAMP(r, R) ((r) <= (R) ? (r) : (R))

/* Per-thread scratch, the larger of the forward's and the backward's needs (exact, so that the
 * guard test can catch an overrun): forward two (HS, FQ) panels, a (B, FQ) tile and two (FQ)
 * vectors; backward two (HS, BKB) panels and two (B, BKB) tiles, and with ATTN_PACK_ROWS a
 * packed (BKB, HS) block and two packed (B, HS) blocks. */
static size_t attn_scratch_floats(int HS, size_t fwd_rows, size_t bwd_rows) {
    size_t fwd = up_add(up_mul3(2, (size_t)HS, ATTN_LDF), (size_t)ATTN_B * ATTN_LDF + 2 * ATTN_FQ);
    size_t bwd = up_add(up_mul3(2, (size_t)HS, ATTN_LDB), 2 * (size_t)ATTN_B * ATTN_LDB);
    fwd = up_add(fwd, up_mul(fwd_rows, (size_t)HS)); // fwd_rows, bwd_rows more (., HS) blocks
    bwd = up_add(bwd, up_mul(bwd_rows, (size_t)HS));
    return attn_round16(fwd > bwd ? fwd : bwd);
}

static size_t attn_thread_floats(int HS) {
    return attn_scratch_floats(HS, 0, ATTN_PACK_ROWS ? (size_t)ATTN_BKB + 2 * ATTN_B : 0);
}

/* The bf16 kernels' scratch: the fp32 one (without the packed blocks) plus forward K_j and V_j
 * widened (B, HS), backward K_j (BKB), Q_i and dO_i (B) widened (they take the packed blocks'
 * place) and the fp32 dK_j and dV_j (BKB, HS) and dQ_i (B, HS). */
static size_t attn_thread_floats_bf16(int HS) {
    return attn_scratch_floats(HS, 2 * (size_t)ATTN_B, 3 * (size_t)ATTN_BKB + 3 * ATTN_B);
}

/* attn_widen_rows (attention_tiles.h) in registers, VEC_W per step, then the tail; exact. */
static inline void attn_widen_rows_v(float *dst, const uint16_t *src, size_t ld, int n, int HS) {
    for (int r = 0; r < n; r++) {
        const uint16_t *s = src + (size_t)r * ld;
        float *d = dst + (size_t)r * HS;
        int e = 0;
        for (; e + VEC_W <= HS; e += VEC_W)
            vf_store(d + e, vf_load_bf16(s + e));
        if (e < HS) vf_store_bf16_n(d + e, s + e, HS - e);
    }
}

/* Rows 0 .. n-1 of src (HS floats each, strided by ld) packed contiguously into dst (n, HS).
 * The backward's head-vector products walk a block's rows once per register tile; in place,
 * their stride of NH*HS or NKV*HS floats (1-2 KiB) maps them onto a few L1 sets, which evict
 * each other, and an 8-wide fma does too little work per line fetched to hide it (packing Q_i,
 * dO_i and K_j made the AVX2 backward 1.19x faster; the forward's K_j, V_j gained nothing). */
static inline void attn_pack_rows(float *dst, const float *src, size_t ld, int n, int HS) {
    for (int r = 0; r < n; r++)
        memcpy(dst + (size_t)r * HS, src + (size_t)r * ld, (size_t)HS * sizeof(float));
}

/* ---- micro-kernels --------------------------------------------------------------------------- */

/* Query-vector product on a chunk of ATTN_QC columns:
 *     C (M, QC) = or += A (M, K) B (K, QC),   A(m, k) = A[m*sam + k*sak] (any strides),
 * B and C rows strided by ld (they are QC-column slices of wider tiles). R rows at a time:
 * 2R accumulators, per k two B loads and R broadcasts. */
ATTN_INLINE void attn_kq_tile(float *C, const float *A, size_t sam, size_t sak, const float *B,
                              size_t ld, int K, int acc, const int R) {
    vf c0[ATTN_R], c1[ATTN_R];
    for (int i = 0; i < R; i++) {
        c0[i] = acc ? vf_load(C + (size_t)i * ld) : vf_zero();
        c1[i] = acc ? vf_load(C + (size_t)i * ld + VEC_W) : vf_zero();
    }
    for (int k = 0; k < K; k++) {
        const vf b0 = vf_load(B + (size_t)k * ld);
        const vf b1 = vf_load(B + (size_t)k * ld + VEC_W);
        const float *ak = A + (size_t)k * sak;
        for (int i = 0; i < R; i++) {
            const vf a = vf_bcast(ak + (size_t)i * sam);
            c0[i] = vf_fma(a, b0, c0[i]);
            c1[i] = vf_fma(a, b1, c1[i]);
        }
    }
    for (int i = 0; i < R; i++) {
        vf_store(C + (size_t)i * ld, c0[i]);
        vf_store(C + (size_t)i * ld + VEC_W, c1[i]);
    }
}

static void attn_kq(float *C, const float *A, size_t sam, size_t sak, const float *B, size_t ld,
                    int M, int K, int acc) {
    int m = 0;
    for (; m + ATTN_R <= M; m += ATTN_R)
        attn_kq_tile(C + (size_t)m * ld, A + (size_t)m * sam, sam, sak, B, ld, K, acc, ATTN_R);
    float *Cm = C + (size_t)m * ld;
    const float *Am = A + (size_t)m * sam;
    switch (M - m) { // remainder rows (< ATTN_R), each count its own unrolled instance
#define ATTN_KQ_CASE(r)                                                                            \
    case r:                                                                                        \
        attn_kq_tile(Cm, Am, sam, sak, B, ld, K, acc, ATTN_RCLAMP(r, ATTN_R - 1));                 \
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

/* Head-vector product, accumulate: C (M, N) += A (M, K) B (K, N) with N = HS (any: columns in
 * chunks of ATTN_QC; NV = 1 vector or 2 of the chunk in use, TAIL: a partial chunk, loaded and
 * stored through the lane masks m0, m1), A(m, k) = A[m*sam + k*sak], B rows strided by ldb, C
 * rows by ldc. Causal limits per register tile of rows [m, m+R): k runs over
 * [max(0, m + klo), min(K, m + R + khi)) (the entries outside are zero by the mask). */
ATTN_INLINE void attn_kh_tile(float *C, size_t ldc, const float *A, size_t sam, size_t sak,
                              const float *B, size_t ldb, int k0, int k1, vm m0, vm m1, const int R,
                              const int NV, const int TAIL) {
    vf c0[ATTN_RH], c1[ATTN_RH];
    for (int i = 0; i < R; i++) {
        const float *ci = C + (size_t)i * ldc;
        c0[i] = TAIL ? vf_load_m(ci, m0) : vf_load(ci);
        if (NV == 2) c1[i] = TAIL ? vf_load_m(ci + VEC_W, m1) : vf_load(ci + VEC_W);
    }
    for (int k = k0; k < k1; k++) {
        const float *bk = B + (size_t)k * ldb;
        vf b0 = TAIL ? vf_load_m(bk, m0) : vf_load(bk);
        vf b1 = NV == 2 ? (TAIL ? vf_load_m(bk + VEC_W, m1) : vf_load(bk + VEC_W)) : b0;
        VEC_PIN(b0); // 2R + R loads per 2R fmas would leave the loop waiting on the load ports
        if (NV == 2) VEC_PIN(b1);
        const float *ak = A + (size_t)k * sak;
        for (int i = 0; i < R; i++) {
            const vf a = vf_bcast(ak + (size_t)i * sam);
            c0[i] = vf_fma(a, b0, c0[i]);
            if (NV == 2) c1[i] = vf_fma(a, b1, c1[i]);
        }
    }
    for (int i = 0; i < R; i++) {
        float *ci = C + (size_t)i * ldc;
        if (TAIL) {
            vf_store_m(ci, m0, c0[i]);
            if (NV == 2) vf_store_m(ci + VEC_W, m1, c1[i]);
        } else {
            vf_store(ci, c0[i]);
            if (NV == 2) vf_store(ci + VEC_W, c1[i]);
        }
    }
}

/* attn_kh_tile's four instances for R rows. */
ATTN_INLINE void attn_kh_rows(float *C, size_t ldc, const float *A, size_t sam, size_t sak,
                              const float *B, size_t ldb, int k0, int k1, vm m0, vm m1, const int R,
                              int nv, int tail) {
    if (nv == 2 && tail)
        attn_kh_tile(C, ldc, A, sam, sak, B, ldb, k0, k1, m0, m1, R, 2, 1);
    else if (nv == 2)
        attn_kh_tile(C, ldc, A, sam, sak, B, ldb, k0, k1, m0, m1, R, 2, 0);
    else if (tail)
        attn_kh_tile(C, ldc, A, sam, sak, B, ldb, k0, k1, m0, m1, R, 1, 1);
    else
        attn_kh_tile(C, ldc, A, sam, sak, B, ldb, k0, k1, m0, m1, R, 1, 0);
}

static void attn_kh(float *C, size_t ldc, const float *A, size_t sam, size_t sak, const float *B,
                    size_t ldb, int M, int N, int K, int klo, int khi) {
    for (int n0 = 0; n0 < N; n0 += ATTN_QC) {
        const int nn = attn_min(ATTN_QC, N - n0);
        const int nv = nn > VEC_W ? 2 : 1;
        const int tail = ATTN_MASK_CHEAP || nn < nv * VEC_W;
        const vm m0 = vm_below(nn), m1 = vm_below(nn - VEC_W);
        const float *Bn = B + n0;
        for (int m = 0; m < M; m += ATTN_RH) {
            const int r = attn_min(ATTN_RH, M - m);
            const int k0 = m + klo > 0 ? m + klo : 0;
            const int k1 = m + r + khi < K ? m + r + khi : K;
            if (k0 >= k1) continue;
            float *Cm = C + (size_t)m * ldc + n0;
            const float *Am = A + (size_t)m * sam;
            switch (r) {
#define ATTN_KH_CASE(r)                                                                            \
    case r:                                                                                        \
        attn_kh_rows(Cm, ldc, Am, sam, sak, Bn, ldb, k0, k1, m0, m1, ATTN_RCLAMP(r, ATTN_RH), nv,  \
                     tail);                                                                        \
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

/* Lanes of the VEC_W queries i0+qv .. that see key j0+m, given dk = j0 - i0 (query >= key, i.e.
 * lane >= dk + m - qv), and, where a document boundary cuts the vector (cut; doc starts in dsv),
 * whose document holds key j = j0+m (doc <= j). */
ATTN_INLINE vm attn_fwd_lanes(int masked, int cut, vi dsv, int dk, int m, int qv, int j) {
    vm mk = masked ? vm_from(dk + m - qv) : vm_all();
    if (cut) mk = vm_and(mk, vm_le(dsv, j));
    return mk;
}

/* Softmax update of the VEC_W queries qv .. of the block over the keys ml .. mc-1 of the current
 * key block: S^T rows become P^T, running max and sum move on, O^T is rescaled. */
ATTN_INLINE void attn_fwd_softmax_v(float *st, float *ot, float *mrow, float *lrow,
                                    const attn_shape *sh, int i0, int j0, int bq, int qv, int ml,
                                    int mc, int masked) {
    const int LD = ATTN_LDF, dk = j0 - i0;
    // doc starts of the vector's queries where a boundary cuts it (lanes past bq: 0)
    const int cut = qv < bq && attn_doc_cuts(sh, i0 + attn_min(qv + VEC_W, bq), j0 + ml);
    const vi dsv =
        cut ? vi_load_m(sh->doc + i0 + qv, vm_below(attn_min(VEC_W, bq - qv))) : vi_zero();
    const int any = masked || cut;
    const vf m_old = vf_load(mrow + qv);
    vf mx = m_old;
    for (int m = ml; m < mc; m++) {
        const vf s = vf_load(st + (size_t)m * LD + qv);
        mx = any ? vf_max_m(mx, attn_fwd_lanes(masked, cut, dsv, dk, m, qv, j0 + m), s)
                 : vf_max(mx, s);
    }
    // Without documents every query sees key 0 in block 0 (processed first): mx is finite from
    // there on. With documents a query may see no key of its first tiles: mx stays -inf there,
    // and 0 stands in for it in the exponents (p = 0 by the mask, alpha = exp(-inf) = 0 on an O
    // and l that are still 0).
    const vf mxe = sh->doc ? vf_neginf_to_zero(mx) : mx;
    const vf alpha = vf_exp(vf_sub(m_old, mxe)); // 0 in block 0
    vf sum = vf_zero();
    for (int m = ml; m < mc; m++) {
        float *sp = st + (size_t)m * LD + qv;
        vf p = vf_exp(vf_sub(vf_load(sp), mxe));
        if (any) p = vf_maskz(attn_fwd_lanes(masked, cut, dsv, dk, m, qv, j0 + m), p);
        vf_store(sp, p);
        sum = vf_add(sum, p);
    }
    vf_store(lrow + qv, vf_fma(vf_load(lrow + qv), alpha, sum));
    vf_store(mrow + qv, mx);
    if (j0 > 0)
        for (int d = 0; d < sh->HS; d++) {
            float *o = ot + (size_t)d * LD + qv;
            vf_store(o, vf_mul(vf_load(o), alpha));
        }
}

/* Key block j0 of the forward as fp32 rows: *kj, *vj (bk, HS) strided by the returned stride, in
 * place or (bf16) widened into kb, vb; the next key block into L2 while this one computes (K and
 * V are shared by all tasks of a KV head, read once per task, and at long T come from L3 or
 * memory). */
ATTN_INLINE size_t attn_fwd_kv(const float **kj, const float **vj, float *kb, float *vb,
                               const void *k, const void *v, size_t koff, const attn_shape *sh,
                               int j0, int bk, int next, const int bf) {
    const int B = ATTN_B, HS = sh->HS, nn = next ? attn_min(B, sh->T - j0 - B) : 0;
    if (bf) {
        const uint16_t *kb16 = (const uint16_t *)k + koff, *vb16 = (const uint16_t *)v + koff;
        if (next) {
            attn_prefetch_rows_bf16(kb16 + (size_t)B * sh->ldk, nn, HS, sh->ldk);
            attn_prefetch_rows_bf16(vb16 + (size_t)B * sh->ldk, nn, HS, sh->ldk);
        }
        attn_widen_rows_v(kb, kb16, sh->ldk, bk, HS);
        attn_widen_rows_v(vb, vb16, sh->ldk, bk, HS);
        *kj = kb;
        *vj = vb;
        return (size_t)HS;
    }
    *kj = (const float *)k + koff;
    *vj = (const float *)v + koff;
    if (next) {
        attn_prefetch_rows(*kj + (size_t)B * sh->ldk, nn, HS, sh->ldk);
        attn_prefetch_rows(*vj + (size_t)B * sh->ldk, nn, HS, sh->ldk);
    }
    return sh->ldk;
}

/* Forward of one (query head h, query block ib of ATTN_FQ queries). tws: this thread's scratch.
 * scale * Q_i^T is packed once, scores are S^T (keys, queries) in ATTN_QC-query chunks, the
 * output accumulates transposed in O^T (HS, FQ). Documents: key blocks start at the one holding
 * doc[i0]; in a chunk, keys before the doc start of its first query are skipped, and vectors that
 * a document boundary cuts are masked lane by lane. */
ATTN_INLINE void attn_fwd_impl(void *out, float *lse, const void *q, const void *k, const void *v,
                               const attn_shape *sh, int h, int ib, float *tws, const int bf) {
    const int B = ATTN_B, FQ = ATTN_FQ, LD = ATTN_LDF, HS = sh->HS, T = sh->T;
    const int i0 = ib * FQ;
    const int bq = attn_min(FQ, T - i0);
    const size_t kvoff = (size_t)(h / sh->G) * HS;
    float *qt = tws;                   // (HS, FQ) scale * Q_i^T, zero past bq; rows strided by LD
    float *ot = qt + (size_t)HS * LD;  // (HS, FQ) O_i^T, unnormalised
    float *st = ot + (size_t)HS * LD;  // (B, FQ)  S^T then P^T: (keys, queries)
    float *mrow = st + (size_t)B * LD; // (FQ) running max per query
    float *lrow = mrow + FQ;           // (FQ) running sum per query
    float *kb = lrow + FQ;             // bf16 operands: (B, HS) K_j and V_j widened
    float *vb = kb + (size_t)B * HS;
    const size_t qoff = (size_t)i0 * sh->ldq + (size_t)h * HS;
    if (bf)
        attn_pack_t_bf16(qt, LD, (const uint16_t *)q + qoff, sh->ldq, bq, HS, sh->scale);
    else
        attn_pack_t(qt, LD, (const float *)q + qoff, sh->ldq, bq, HS, sh->scale);
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
        const float *kj, *vj;
        const size_t kld = attn_fwd_kv(&kj, &vj, kb, vb, k, v, (size_t)j0 * sh->ldk + kvoff, sh, j0,
                                       bk, j0 + B < i0 + bq, bf);
        for (int q0 = 0; q0 < bq; q0 += ATTN_QC) {
            // keys of this block seen by some query of the chunk: j0 + m <= i0 + q0 + QC - 1
            const int mc = attn_min(bk, q0 + ATTN_QC - dk);
            // and at or after the first query's document start (0 without documents)
            const int ml = sh->doc ? attn_max(0, sh->doc[i0 + q0] - j0) : 0;
            if (mc <= ml) continue;
            attn_kq(st + (size_t)ml * LD + q0, kj + (size_t)ml * kld, kld, 1, qt + q0, LD, mc - ml,
                    HS, 0); // S^T (rows ml .. mc-1, QC)
            for (int qv = q0; qv < q0 + ATTN_QC; qv += VEC_W)
                attn_fwd_softmax_v(st, ot, mrow, lrow, sh, i0, j0, bq, qv, ml, mc, masked);
            // O^T (HS, QC) += V_j^T (HS, mc) P^T (mc, QC);  V^T(d, c) = V[c*ldk + d]
            attn_kq(ot + q0, vj + (size_t)ml * kld, 1, kld, st + (size_t)ml * LD + q0, LD, HS,
                    mc - ml, 1);
        }
    }
    for (int r = 0; r < bq; r++) {
        const float inv = 1.0f / lrow[r]; // l >= 1: the row maximum contributes exp(0)
        // bf16: the row in fp32 in the free score tile, then rounded once
        float *orow = bf ? st : (float *)out + qoff + (size_t)r * sh->ldq;
        for (int d = 0; d < HS; d++)
            orow[d] = ot[(size_t)d * LD + r] * inv;
        if (bf) sh->bf16->from_f32(orow, (uint16_t *)out + qoff + (size_t)r * sh->ldq, (size_t)HS);
        lse[(size_t)h * T + i0 + r] = mrow[r] + logf(lrow[r]);
    }
}

/* ---- backward -------------------------------------------------------------------------------- */

/* P and scale * dS of query row r over the VEC_W keys j0+cv .., in place of S and dP. Masked
 * keys: after the query (key > query: lane > dq + r - cv) and, where a document boundary cuts
 * the tile, before its doc start (lanes below doc_rel = doc - j0 - cv). */
ATTN_INLINE void attn_bwd_row_v(float *pp, float *dp, float lse_r, float D_r, vf vscale, int masked,
                                int cut, int dq, int r, int cv, int doc_rel) {
    vf p = vf_exp(vf_sub(vf_load(pp), vf_set1(lse_r)));
    if (masked || cut) {
        vm mk = masked ? vm_upto(dq + r - cv) : vm_all();
        if (cut) mk = vm_and(mk, vm_from(doc_rel));
        p = vf_maskz(mk, p);
    }
    const vf ds = vf_mul(vf_mul(p, vf_sub(vf_load(dp), vf_set1(D_r))), vscale);
    vf_store(pp, p);
    vf_store(dp, ds);
}

/* Query block i0 of head h for the backward as fp32 rows: *qi, *doi (bq, HS) strided by the
 * returned stride, in place, packed (ATTN_PACK_ROWS) or (bf16) widened into qp, dop; the next
 * query block's Q, dO and dQ rows into L2 while this one computes (nn rows; 0: none). */
ATTN_INLINE size_t attn_bwd_q(const float **qi, const float **doi, float *qp, float *dop,
                              const void *q, const void *dout, const void *dqacc, size_t qoff,
                              const attn_shape *sh, int bq, int nn, const int bf) {
    const int HS = sh->HS;
    const size_t nxt = (size_t)ATTN_B * sh->ldq;
    if (bf) {
        const uint16_t *qb16 = (const uint16_t *)q + qoff;
        const uint16_t *db16 = (const uint16_t *)dout + qoff;
        if (nn > 0) {
            attn_prefetch_rows_bf16(qb16 + nxt, nn, HS, sh->ldq);
            attn_prefetch_rows_bf16(db16 + nxt, nn, HS, sh->ldq);
            const attn_dq *dqs = dqacc;
            if (dqs->f) {
                attn_prefetch_rows(dqs->f + qoff + nxt, nn, HS, sh->ldq);
            } else {
                attn_prefetch_rows_bf16(dqs->hi + qoff + nxt, nn, HS, sh->ldq);
                attn_prefetch_rows_bf16(dqs->lo + qoff + nxt, nn, HS, sh->ldq);
            }
        }
        attn_widen_rows_v(qp, qb16, sh->ldq, bq, HS);
        attn_widen_rows_v(dop, db16, sh->ldq, bq, HS);
        *qi = qp;
        *doi = dop;
        return (size_t)HS;
    }
    *qi = (const float *)q + qoff;
    *doi = (const float *)dout + qoff;
    if (nn > 0) {
        attn_prefetch_rows(*qi + nxt, nn, HS, sh->ldq);
        attn_prefetch_rows(*doi + nxt, nn, HS, sh->ldq);
        attn_prefetch_rows((const float *)dqacc + qoff + nxt, nn, HS, sh->ldq);
    }
    if (!ATTN_PACK_ROWS) return sh->ldq;
    attn_pack_rows(qp, *qi, sh->ldq, bq, HS);
    attn_pack_rows(dop, *doi, sh->ldq, bq, HS);
    *qi = qp;
    *doi = dop;
    return (size_t)HS;
}

/* One (query head h, query block i0) of the backward's task: the tiles, in ATTN_QC-key chunks,
 * then dV_j, dK_j (rows strided by dld) and dQ_i. kt, vt: the packed scale * K_j^T and V_j^T;
 * kj (rows strided by kld): K_j; ws: the tiles and the Q_i, dO_i, dQ_i blocks (attn_bwd_impl). */
ATTN_INLINE void attn_bwd_qblock(void *dqacc, float *dkj, float *dvj, size_t dld, const void *dout,
                                 const void *q, const float *kt, const float *vt, const float *kj,
                                 size_t kld, const float *lse, const float *D, const attn_shape *sh,
                                 int h, int i0, int j0, int bk, int qend, float *pt, float *dst,
                                 float *qp, float *dop, float *dqt, const int bf) {
    const int B = ATTN_B, LD = ATTN_LDB, HS = sh->HS, T = sh->T;
    const int bq = attn_min(B, T - i0);
    const int dq = i0 - j0;              // >= 0, a multiple of B
    const int masked = j0 + bk - 1 > i0; // some key of the block is after the first query
    const int cut = attn_doc_cuts(sh, i0 + bq, j0); // a document boundary in the tile
    const size_t qoff = (size_t)i0 * sh->ldq + (size_t)h * HS;
    const float *lse_i = lse + (size_t)h * T + i0;
    const float *D_i = D + (size_t)h * T + i0;
    const vf vscale = vf_set1(sh->scale);
    const float *qi, *doi; // (bq, HS) rows strided by qld
    const size_t qld = attn_bwd_q(&qi, &doi, qp, dop, q, dout, dqacc, qoff, sh, bq,
                                  i0 + B < qend ? attn_min(B, T - i0 - B) : 0, bf);
    for (int c0 = 0; c0 < bk; c0 += ATTN_QC) {
        // queries seeing some key of the chunk: i0 + r >= j0 + c0
        const int r0 = c0 - dq > 0 ? c0 - dq : 0;
        if (r0 >= bq) break; // and so for the later chunks
        const int nr = bq - r0;
        attn_kq(pt + (size_t)r0 * LD + c0, qi + (size_t)r0 * qld, qld, 1, kt + c0, LD, nr, HS,
                0); // S (nr, QC)
        attn_kq(dst + (size_t)r0 * LD + c0, doi + (size_t)r0 * qld, qld, 1, vt + c0, LD, nr, HS,
                0); // dP = dO_i V_j^T (nr, QC)
        // Lanes past the block's last key (zero-padded K^T, V^T) get finite values that no
        // product reads (they stop at bk keys).
        for (int cv = c0; cv < c0 + ATTN_QC; cv += VEC_W)
            for (int r = r0; r < bq; r++)
                attn_bwd_row_v(pt + (size_t)r * LD + cv, dst + (size_t)r * LD + cv, lse_i[r],
                               D_i[r], vscale, masked, cut, dq, r, cv,
                               cut ? sh->doc[i0 + r] - j0 - cv : 0);
    }
    // Row r of the tiles holds valid (masked) entries for the keys of every chunk with
    // j0 + c0 <= i0 + r, so the causal limits of attn_kh read only computed entries: query
    // r >= key c - dq for dV/dK (rows c), key c < r + R + dq for dQ (rows r). (ATTN_RH divides
    // the chunk and dq is a multiple of it: a register tile never straddles two chunks.)
    // dV_j (bk, HS) += P^T (bk, bq) dO_i (bq, HS);  P^T(c, r) = P[r*LD + c]
    attn_kh(dvj, dld, pt, 1, LD, doi, qld, bk, HS, bq, -dq, ATTN_NOLIM);
    // dK_j (bk, HS) += scale dS^T (bk, bq) Q_i (bq, HS)
    attn_kh(dkj, dld, dst, 1, LD, qi, qld, bk, HS, bq, -dq, ATTN_NOLIM);
    // dQ_i (bq, HS) += scale dS (bq, bk) K_j (bk, HS)
    if (bf) {
        attn_dq_get(dqt, dqacc, qoff, sh->ldq, bq, HS);
        attn_kh(dqt, (size_t)HS, dst, LD, 1, kj, kld, bq, HS, bk, -ATTN_NOLIM, dq);
        attn_dq_put(dqacc, qoff, sh->ldq, dqt, bq, HS);
    } else {
        attn_kh((float *)dqacc + qoff, sh->ldq, dst, LD, 1, kj, kld, bq, HS, bk, -ATTN_NOLIM, dq);
    }
}

/* Backward of one (KV head kvh, key block jb of ATTN_BKB keys): dK_j, dV_j overwritten (owned by
 * the task), dQ accumulated into dqacc (dq itself or a private buffer, (T, NH, HS); an attn_dq in
 * bf16). Here the key block is fixed, so the vectors run along keys: scale * K_j^T and V_j^T are
 * packed once per task, Q_i and dO_i are read in place (or packed), and the tiles are (queries,
 * keys). Query blocks have B rows; wider key blocks cut the traffic of Q, dO and dQ, which stream
 * from L3 or memory once per task. Documents: the query blocks stop at the end of the document
 * of the block's last key; in a query block that a document boundary cuts, query i0+r is masked
 * off the keys before its doc start. */
ATTN_INLINE void attn_bwd_impl(void *dqacc, void *dk, void *dv, const void *dout, const void *q,
                               const void *k, const void *v, const float *lse, const float *D,
                               const attn_shape *sh, int kvh, int jb, float *tws, const int bf) {
    const int B = ATTN_B, BK = ATTN_BKB, LD = ATTN_LDB, HS = sh->HS, T = sh->T;
    const int j0 = jb * BK;
    const int bk = attn_min(BK, T - j0);
    const size_t koff = (size_t)j0 * sh->ldk + (size_t)kvh * HS;
    float *kt = tws;                  // (HS, BK) scale * K_j^T, zero past bk; rows strided by LD
    float *vt = kt + (size_t)HS * LD; // (HS, BK) V_j^T, zero past bk
    float *pt = vt + (size_t)HS * LD; // (B, BK) S, then P: (queries, keys)
    float *dst = pt + (size_t)B * LD; // (B, BK) dP, then scale * dS
    float *kp = dst + (size_t)B * LD; // (BK, HS) K_j widened (bf16) or packed
    float *qp = kp + (size_t)BK * HS; // (B, HS) Q_i and dO_i widened or packed
    float *dop = qp + (size_t)B * HS;
    float *dka = dop + (size_t)B * HS; // bf16 operands: (BK, HS) dK_j and dV_j in fp32
    float *dva = dka + (size_t)BK * HS;
    float *dqt = dva + (size_t)BK * HS; // (B, HS) dQ_i in fp32
    // K_j (bk, HS) rows strided by kld; dK_j, dV_j rows strided by dld
    const float *kj;
    float *dkj, *dvj;
    size_t kld, dld;
    if (bf) {
        const uint16_t *kb16 = (const uint16_t *)k + koff, *vb16 = (const uint16_t *)v + koff;
        attn_pack_t_bf16(kt, LD, kb16, sh->ldk, bk, HS, sh->scale);
        attn_pack_t_bf16(vt, LD, vb16, sh->ldk, bk, HS, 1.0f);
        attn_widen_rows_v(kp, kb16, sh->ldk, bk, HS);
        kj = kp;
        dkj = dka;
        dvj = dva;
        kld = dld = (size_t)HS;
    } else {
        kj = (const float *)k + koff;
        dkj = (float *)dk + koff;
        dvj = (float *)dv + koff;
        kld = dld = sh->ldk;
        attn_pack_t(kt, LD, kj, sh->ldk, bk, HS, sh->scale);
        attn_pack_t(vt, LD, (const float *)v + koff, sh->ldk, bk, HS, 1.0f);
        if (ATTN_PACK_ROWS) {
            attn_pack_rows(kp, kj, sh->ldk, bk, HS);
            kj = kp;
            kld = (size_t)HS;
        }
    }
    const int qend = attn_doc_query_end(sh, j0 + bk); // T without documents
    for (int c = 0; c < bk; c++) {
        memset(dkj + (size_t)c * dld, 0, (size_t)HS * sizeof(float));
        memset(dvj + (size_t)c * dld, 0, (size_t)HS * sizeof(float));
    }
    for (int g = 0; g < sh->G; g++) // query blocks from the first one seeing key j0 to the last
        for (int i0 = j0; i0 < qend; i0 += B) // one seeing key j0 + bk - 1
            attn_bwd_qblock(dqacc, dkj, dvj, dld, dout, q, kt, vt, kj, kld, lse, D, sh,
                            kvh * sh->G + g, i0, j0, bk, qend, pt, dst, qp, dop, dqt, bf);
    if (bf) {
        attn_round_rows((uint16_t *)dk + koff, sh->ldk, dka, bk, HS, sh->bf16);
        attn_round_rows((uint16_t *)dv + koff, sh->ldk, dva, bk, HS, sh->bf16);
    }
}

ATTN_DEFINE_BLOCKS()
#endif
