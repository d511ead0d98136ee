/* attention_avx512.c — the attention blocks with our own AVX-512 micro-kernels (see attention.c
 * for the algorithm and attention_tiles.h for the contract of a block). Compiled with AVX-512
 * F/BW/DQ/VL (CMakeLists.txt) and run only where the CPU has them (dispatch.c). */
#include "attention_tiles.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Blocks. The vector dimension is widened to 256: the forward takes 256-query blocks against
 * 128-key blocks, the backward 256-key blocks against 128-query blocks, so each streamed block
 * (K_j, V_j in the forward; Q_i, dO_i, dQ_i in the backward, from L3 or memory at long T) serves
 * twice the work. A task's working set (at HS = 64 about 0.4 MiB) stays inside the 1 MiB L2 of
 * a Zen 4 core. Scratch tile rows are padded by 16 floats so that rows 512 B or 1 KiB apart do
 * not fall into the same few L1 sets. */
enum { ATTN_FQ = 256, ATTN_BKB = 256, ATTN_PAD = 16 };
enum { ATTN_LDF = ATTN_FQ + ATTN_PAD, ATTN_LDB = ATTN_BKB + ATTN_PAD };

/* Per-thread scratch, the larger of the forward's and the backward's needs (exact, so that the
 * guard test can catch an overrun): forward two (HS, FQ) panels, a (B, FQ) tile and two (FQ)
 * vectors, backward two (HS, BKB) panels and two (B, BKB) tiles. */
static size_t attn_thread_floats(int HS) {
    size_t fwd = up_add(up_mul3(2, (size_t)HS, ATTN_LDF), (size_t)ATTN_B * ATTN_LDF + 2 * ATTN_FQ);
    size_t bwd = up_add(up_mul3(2, (size_t)HS, ATTN_LDB), 2 * (size_t)ATTN_B * ATTN_LDB);
    return attn_round16(fwd > bwd ? fwd : bwd);
}

/* The bf16 kernels' scratch: the above plus the widened blocks of attention_tiles.h, forward
 * K_j and V_j (B, HS), backward K_j (BKB, HS), Q_i and dO_i (B, HS), the fp32 dK_j and dV_j
 * (BKB, HS) and dQ_i (B, HS). */
static size_t attn_thread_floats_bf16(int HS) {
    size_t fwd = up_add(up_mul3(2, (size_t)HS, ATTN_LDF), (size_t)ATTN_B * ATTN_LDF + 2 * ATTN_FQ);
    size_t bwd = up_add(up_mul3(2, (size_t)HS, ATTN_LDB), 2 * (size_t)ATTN_B * ATTN_LDB);
    fwd = up_add(fwd, up_mul(2 * (size_t)ATTN_B, (size_t)HS));
    bwd = up_add(bwd, up_mul(3 * (size_t)ATTN_BKB + 3 * ATTN_B, (size_t)HS));
    return attn_round16(fwd > bwd ? fwd : bwd);
}

static inline __m512 attn_exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(ATTN_EXP_LO);
    const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    __m512 xc = _mm512_max_ps(lo, x); // max/min return the second operand on NaN: keeps NaN
    xc = _mm512_min_ps(_mm512_set1_ps(88.0f), xc);
    const __m512 fn = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(ATTN_EXP_C1), xc);
    r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(ATTN_EXP_C2), r);
    __m512 p = _mm512_set1_ps(ATTN_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_scalef_ps(p, fn)); // p * 2^n
}

/* attn_widen_rows (attention_tiles.h) in registers: 16 bf16 zero-extended to 32 bits and
 * shifted up per step (exact), a masked tail; no call per row. */
static inline void attn_widen_rows_v(float *dst, const uint16_t *src, size_t ld, int n, int HS) {
    const __mmask16 tail = (__mmask16)((1u << (HS % 16)) - 1);
    for (int r = 0; r < n; r++) {
        const uint16_t *s = src + (size_t)r * ld;
        float *d = dst + (size_t)r * HS;
        int e = 0;
        for (; e + 16 <= HS; e += 16)
            _mm512_storeu_si512(d + e, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                                             (const __m256i *)(s + e))),
                                                         16));
        if (tail)
            _mm512_mask_storeu_epi32(
                d + e, tail,
                _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(tail, s + e)),
                                  16));
    }
}

/* ---- AVX-512 micro-kernels ------------------------------------------------------------------- */

#define ATTN_INLINE static inline __attribute__((always_inline))
enum { ATTN_QC = 32, ATTN_R = 8 }; // query chunk (2 vectors) and rows per register tile

/* Query-vector product on a chunk of 32 queries:
 *     C (M, 32) = or += A (M, K) B (K, 32),   A(m, k) = A[m*sam + k*sak] (any strides),
 * B and C rows strided by ld (they are 32-column slices of wider tiles). R rows at a time:
 * 2R accumulators, per k two B loads and R broadcasts. */
ATTN_INLINE void attn_kq_tile(float *C, const float *A, size_t sam, size_t sak, const float *B,
                              size_t ld, int K, int acc, const int R) {
    __m512 c0[ATTN_R], c1[ATTN_R];
    for (int i = 0; i < R; i++) {
        c0[i] = acc ? _mm512_loadu_ps(C + (size_t)i * ld) : _mm512_setzero_ps();
        c1[i] = acc ? _mm512_loadu_ps(C + (size_t)i * ld + 16) : _mm512_setzero_ps();
    }
    for (int k = 0; k < K; k++) {
        const __m512 b0 = _mm512_loadu_ps(B + (size_t)k * ld);
        const __m512 b1 = _mm512_loadu_ps(B + (size_t)k * ld + 16);
        const float *ak = A + (size_t)k * sak;
        for (int i = 0; i < R; i++) {
            const __m512 a = _mm512_set1_ps(ak[(size_t)i * sam]);
            c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
        }
    }
    for (int i = 0; i < R; i++) {
        _mm512_storeu_ps(C + (size_t)i * ld, c0[i]);
        _mm512_storeu_ps(C + (size_t)i * ld + 16, c1[i]);
    }
}

static void attn_kq(float *C, const float *A, size_t sam, size_t sak, const float *B, size_t ld,
                    int M, int K, int acc) {
    int m = 0;
    for (; m + ATTN_R <= M; m += ATTN_R)
        attn_kq_tile(C + (size_t)m * ld, A + (size_t)m * sam, sam, sak, B, ld, K, acc, ATTN_R);
    float *Cm = C + (size_t)m * ld;
    const float *Am = A + (size_t)m * sam;
    switch (M - m) { // remainder rows, each count its own unrolled instance
#define ATTN_KQ_CASE(r)                                                                            \
    case r:                                                                                        \
        attn_kq_tile(Cm, Am, sam, sak, B, ld, K, acc, r);                                          \
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
 * chunks of 32, the last one masked), A(m, k) = A[m*sam + k*sak], B rows strided by ldb, C rows
 * by ldc. Causal limits per register tile of rows [m, m+R): k runs over
 * [max(0, m + klo), min(K, m + R + khi)) (the entries outside are zero by the mask). */
ATTN_INLINE void attn_kh_tile(float *C, size_t ldc, const float *A, size_t sam, size_t sak,
                              const float *B, size_t ldb, int k0, int k1, __mmask16 mk0,
                              __mmask16 mk1, const int R, const int NV) {
    __m512 c0[ATTN_R], c1[ATTN_R];
    for (int i = 0; i < R; i++) {
        c0[i] = _mm512_maskz_loadu_ps(mk0, C + (size_t)i * ldc);
        if (NV == 2) c1[i] = _mm512_maskz_loadu_ps(mk1, C + (size_t)i * ldc + 16);
    }
    for (int k = k0; k < k1; k++) {
        const __m512 b0 = _mm512_maskz_loadu_ps(mk0, B + (size_t)k * ldb);
        const __m512 b1 = NV == 2 ? _mm512_maskz_loadu_ps(mk1, B + (size_t)k * ldb + 16) : b0;
        const float *ak = A + (size_t)k * sak;
        for (int i = 0; i < R; i++) {
            const __m512 a = _mm512_set1_ps(ak[(size_t)i * sam]);
            c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
            if (NV == 2) c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
        }
    }
    for (int i = 0; i < R; i++) {
        _mm512_mask_storeu_ps(C + (size_t)i * ldc, mk0, c0[i]);
        if (NV == 2) _mm512_mask_storeu_ps(C + (size_t)i * ldc + 16, mk1, c1[i]);
    }
}

#define ATTN_KH_CASE(r)                                                                            \
    case r:                                                                                        \
        if (nv == 2)                                                                               \
            attn_kh_tile(Cm, ldc, Am, sam, sak, Bn, ldb, k0, k1, mk0, mk1, r, 2);                  \
        else                                                                                       \
            attn_kh_tile(Cm, ldc, Am, sam, sak, Bn, ldb, k0, k1, mk0, mk1, r, 1);                  \
        break;

static void attn_kh(float *C, size_t ldc, const float *A, size_t sam, size_t sak, const float *B,
                    size_t ldb, int M, int N, int K, int klo, int khi) {
    for (int n0 = 0; n0 < N; n0 += 32) {
        const int nn = attn_min(32, N - n0);
        const int nv = nn > 16 ? 2 : 1;
        const __mmask16 mk0 = (__mmask16)(nn >= 16 ? 0xFFFF : (1u << nn) - 1);
        const __mmask16 mk1 = (__mmask16)(nn >= 32 ? 0xFFFF : nn > 16 ? (1u << (nn - 16)) - 1 : 0);
        const float *Bn = B + n0;
        for (int m = 0; m < M; m += ATTN_R) {
            const int r = attn_min(ATTN_R, M - m);
            const int k0 = m + klo > 0 ? m + klo : 0;
            const int k1 = m + r + khi < K ? m + r + khi : K;
            if (k0 >= k1) continue;
            float *Cm = C + (size_t)m * ldc + n0;
            const float *Am = A + (size_t)m * sam;
            switch (r) {
                ATTN_KH_CASE(8)
                ATTN_KH_CASE(7)
                ATTN_KH_CASE(6)
                ATTN_KH_CASE(5)
                ATTN_KH_CASE(4)
                ATTN_KH_CASE(3)
                ATTN_KH_CASE(2)
                ATTN_KH_CASE(1)
            default:
                break;
            }
        }
    }
}
#undef ATTN_KH_CASE

enum { ATTN_NOLIM = 1 << 29 }; // klo/khi of attn_kh that never limit

/* Lanes of the 16 queries i0+qv .. i0+qv+15 that see key j0+m, given dk = j0 - i0:
 * query >= key, i.e. lane >= dk + m - qv. */
static inline __mmask16 attn_causal_mask(int dk, int m, int qv) {
    const int thr = dk + m - qv;
    return thr <= 0 ? (__mmask16)0xFFFF : thr >= 16 ? (__mmask16)0 : (__mmask16)(0xFFFFu << thr);
}

/* Lanes whose query (doc start in dsv) sees key j for its document: doc <= j. */
static inline __mmask16 attn_doc_mask(__m512i dsv, int j) {
    return _mm512_cmple_epi32_mask(dsv, _mm512_set1_epi32(j));
}

/* Forward of one (query head h, query block ib of ATTN_FQ queries). tws: this thread's scratch.
 * The queries are the vector dimension: scale * Q_i^T is packed once, scores are S^T (keys,
 * queries) in 32-query chunks, the output accumulates transposed in O^T (HS, FQ).
 * Documents: key blocks start at the one holding doc[i0]; in a chunk, keys before the doc start
 * of its first query are skipped, and where a document boundary cuts the 16 queries of a vector,
 * key j0+m is masked off the lanes with doc > j0+m. */
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
        const size_t koff = (size_t)j0 * sh->ldk + kvoff;
        const float *kj, *vj; // (bk, HS) rows strided by kld
        size_t kld;
        // The next key block, into L2 while this one computes: K and V are shared by all tasks
        // of a KV head, read once per task, and at long T come from L3 or memory.
        if (bf) {
            const uint16_t *kb16 = (const uint16_t *)k + koff, *vb16 = (const uint16_t *)v + koff;
            if (j0 + B < i0 + bq) {
                const int nn = attn_min(B, T - j0 - B);
                attn_prefetch_rows_bf16(kb16 + (size_t)B * sh->ldk, nn, HS, sh->ldk);
                attn_prefetch_rows_bf16(vb16 + (size_t)B * sh->ldk, nn, HS, sh->ldk);
            }
            attn_widen_rows_v(kb, kb16, sh->ldk, bk, HS);
            attn_widen_rows_v(vb, vb16, sh->ldk, bk, HS);
            kj = kb;
            vj = vb;
            kld = (size_t)HS;
        } else {
            kj = (const float *)k + koff;
            vj = (const float *)v + koff;
            kld = sh->ldk;
            if (j0 + B < i0 + bq) {
                attn_prefetch_rows(kj + (size_t)B * kld, attn_min(B, T - j0 - B), HS, kld);
                attn_prefetch_rows(vj + (size_t)B * kld, attn_min(B, T - j0 - B), HS, kld);
            }
        }
        for (int q0 = 0; q0 < bq; q0 += ATTN_QC) {
            // keys of this block seen by some query of the chunk: j0 + m <= i0 + q0 + 31
            const int mc = attn_min(bk, q0 + ATTN_QC - dk);
            // and at or after the first query's document start (0 without documents)
            const int ml = sh->doc ? attn_max(0, sh->doc[i0 + q0] - j0) : 0;
            if (mc <= ml) continue;
            attn_kq(st + (size_t)ml * LD + q0, kj + (size_t)ml * kld, kld, 1, qt + q0, LD, mc - ml,
                    HS, 0); // S^T (rows ml .. mc-1, 32)
            for (int qv = q0; qv < q0 + ATTN_QC; qv += 16) {
                // doc starts of the vector's queries where a boundary cuts it (lanes past bq: 0)
                const int cut = qv < bq && attn_doc_cuts(sh, i0 + attn_min(qv + 16, bq), j0 + ml);
                const __m512i dsv =
                    cut ? _mm512_maskz_loadu_epi32((__mmask16)((1u << attn_min(16, bq - qv)) - 1),
                                                   sh->doc + i0 + qv)
                        : _mm512_setzero_si512();
                const __m512 m_old = _mm512_loadu_ps(mrow + qv);
                __m512 mx = m_old;
                for (int m = ml; m < mc; m++) {
                    __mmask16 mk = masked ? attn_causal_mask(dk, m, qv) : (__mmask16)0xFFFF;
                    if (cut) mk &= attn_doc_mask(dsv, j0 + m);
                    mx = _mm512_mask_max_ps(mx, mk, mx, _mm512_loadu_ps(st + (size_t)m * LD + qv));
                }
                // Without documents every query sees key 0 in block 0 (processed first): mx is
                // finite from there on. With documents a query may see no key of its first
                // tiles: mx stays -inf there, and 0 stands in for it in the exponents (p = 0 by
                // the mask, alpha = exp(-inf) = 0 on an O and l that are still 0).
                const __m512 mxe =
                    sh->doc ? _mm512_mask_mov_ps(
                                  mx, _mm512_cmp_ps_mask(mx, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ),
                                  _mm512_setzero_ps())
                            : mx;
                const __m512 alpha = attn_exp16(_mm512_sub_ps(m_old, mxe)); // 0 in block 0
                __m512 sum = _mm512_setzero_ps();
                for (int m = ml; m < mc; m++) {
                    float *sp = st + (size_t)m * LD + qv;
                    __mmask16 mk = masked ? attn_causal_mask(dk, m, qv) : (__mmask16)0xFFFF;
                    if (cut) mk &= attn_doc_mask(dsv, j0 + m);
                    const __m512 p = _mm512_maskz_mov_ps(
                        mk, attn_exp16(_mm512_sub_ps(_mm512_loadu_ps(sp), mxe)));
                    _mm512_storeu_ps(sp, p);
                    sum = _mm512_add_ps(sum, p);
                }
                _mm512_storeu_ps(lrow + qv,
                                 _mm512_fmadd_ps(_mm512_loadu_ps(lrow + qv), alpha, sum));
                _mm512_storeu_ps(mrow + qv, mx);
                if (j0 > 0)
                    for (int d = 0; d < HS; d++) {
                        float *o = ot + (size_t)d * LD + qv;
                        _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_loadu_ps(o), alpha));
                    }
            }
            // O^T (HS, 32) += V_j^T (HS, mc) P^T (mc, 32);  V^T(d, c) = V[c*ldk + d]
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
        if (bf) bf16_from_f32(orow, (uint16_t *)out + qoff + (size_t)r * sh->ldq, (size_t)HS);
        lse[(size_t)h * T + i0 + r] = mrow[r] + logf(lrow[r]);
    }
}

static void attn_fwd_block(float *out, float *lse, const float *q, const float *k, const float *v,
                           const attn_shape *sh, int h, int ib, float *tws) {
    attn_fwd_impl(out, lse, q, k, v, sh, h, ib, tws, 0);
}

static void attn_fwd_block_bf16(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k,
                                const uint16_t *v, const attn_shape *sh, int h, int ib,
                                float *tws) {
    attn_fwd_impl(out, lse, q, k, v, sh, h, ib, tws, 1);
}

/* Lanes of the 16 keys j0+cv .. j0+cv+15 seen by query i0+r, given dq = i0 - j0:
 * key <= query, i.e. lane <= dq + r - cv. */
static inline __mmask16 attn_causal_mask_keys(int dq, int r, int cv) {
    const int thr = dq + r - cv;
    return thr >= 15 ? (__mmask16)0xFFFF : thr < 0 ? (__mmask16)0 : (__mmask16)((2u << thr) - 1);
}

/* Lanes of 16 keys at or after lane thr (the query's doc start, relative to the first lane). */
static inline __mmask16 attn_doc_mask_keys(int thr) {
    return thr <= 0 ? (__mmask16)0xFFFF : thr >= 16 ? (__mmask16)0 : (__mmask16)(0xFFFFu << thr);
}

/* Backward of one (KV head kvh, key block jb of ATTN_BKB keys): dK_j, dV_j overwritten (owned by
 * the task), dQ accumulated into dqacc (dq itself or a private buffer, (T, NH, HS); an attn_dq in
 * bf16). Here the key block is fixed, so the vectors run along keys: scale * K_j^T and V_j^T are
 * packed once per task, Q_i and dO_i are read in place, and the tiles are (queries, keys) in 32-key
 * chunks. Query blocks have B rows; 2B keys per task halve the traffic of Q, dO and dQ, which
 * stream from L3 or memory once per task. Documents: the query blocks stop at the end of the
 * document of the block's last key; in a query block that a document boundary cuts, query i0+r is
 * masked off the keys before its doc start (lanes below doc - j0 - cv). */
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
    float *kp = dst + (size_t)B * LD; // bf16 operands: (BK, HS) K_j widened,
    float *qp = kp + (size_t)BK * HS; // (B, HS) Q_i and dO_i widened,
    float *dop = qp + (size_t)B * HS;
    float *dka = dop + (size_t)B * HS; // (BK, HS) dK_j and dV_j in fp32
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
    }
    const __m512 vscale = _mm512_set1_ps(sh->scale);
    const int qend = attn_doc_query_end(sh, j0 + bk); // T without documents
    for (int c = 0; c < bk; c++) {
        memset(dkj + (size_t)c * dld, 0, (size_t)HS * sizeof(float));
        memset(dvj + (size_t)c * dld, 0, (size_t)HS * sizeof(float));
    }
    for (int g = 0; g < sh->G; g++) {
        const int h = kvh * sh->G + g;
        // query blocks from the first one seeing key j0 to the last one seeing key j0 + bk - 1
        for (int i0 = j0; i0 < qend; i0 += B) {
            const int bq = attn_min(B, T - i0);
            const int dq = i0 - j0;              // >= 0, a multiple of B
            const int masked = j0 + bk - 1 > i0; // some key of the block is after the first query
            const int cut = attn_doc_cuts(sh, i0 + bq, j0); // a document boundary in the tile
            const size_t qoff = (size_t)i0 * sh->ldq + (size_t)h * HS;
            const float *lse_i = lse + (size_t)h * T + i0;
            const float *D_i = D + (size_t)h * T + i0;
            const float *qi, *doi; // (bq, HS) rows strided by qld
            size_t qld;
            // The next query block's Q, dO and dQ rows, into L2 while this one computes.
            const int nn = i0 + B < qend ? attn_min(B, T - i0 - B) : 0;
            const size_t nxt = (size_t)B * sh->ldq;
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
                qi = qp;
                doi = dop;
                qld = (size_t)HS;
            } else {
                qi = (const float *)q + qoff;
                doi = (const float *)dout + qoff;
                qld = sh->ldq;
                if (nn > 0) {
                    attn_prefetch_rows(qi + nxt, nn, HS, sh->ldq);
                    attn_prefetch_rows(doi + nxt, nn, HS, sh->ldq);
                    attn_prefetch_rows((float *)dqacc + qoff + nxt, nn, HS, sh->ldq);
                }
            }
            for (int c0 = 0; c0 < bk; c0 += ATTN_QC) {
                // queries seeing some key of the chunk: i0 + r >= j0 + c0
                const int r0 = c0 - dq > 0 ? c0 - dq : 0;
                if (r0 >= bq) break; // and so for the later chunks
                const int nr = bq - r0;
                attn_kq(pt + (size_t)r0 * LD + c0, qi + (size_t)r0 * qld, qld, 1, kt + c0, LD, nr,
                        HS, 0); // S (nr, 32)
                attn_kq(dst + (size_t)r0 * LD + c0, doi + (size_t)r0 * qld, qld, 1, vt + c0, LD, nr,
                        HS, 0); // dP = dO_i V_j^T (nr, 32)
                // Lanes past the block's last key (zero-padded K^T, V^T) get finite values
                // that no product reads (they stop at bk keys).
                for (int cv = c0; cv < c0 + ATTN_QC; cv += 16) {
                    for (int r = r0; r < bq; r++) {
                        __mmask16 mk =
                            masked ? attn_causal_mask_keys(dq, r, cv) : (__mmask16)0xFFFF;
                        if (cut) mk &= attn_doc_mask_keys(sh->doc[i0 + r] - j0 - cv);
                        float *pp = pt + (size_t)r * LD + cv;
                        float *dp = dst + (size_t)r * LD + cv;
                        const __m512 p = _mm512_maskz_mov_ps(
                            mk, attn_exp16(
                                    _mm512_sub_ps(_mm512_loadu_ps(pp), _mm512_set1_ps(lse_i[r]))));
                        const __m512 ds =
                            _mm512_mul_ps(_mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(dp),
                                                                         _mm512_set1_ps(D_i[r]))),
                                          vscale);
                        _mm512_storeu_ps(pp, p);
                        _mm512_storeu_ps(dp, ds);
                    }
                }
            }
            // Row r of the tiles holds valid (masked) entries for the keys of every chunk with
            // j0 + c0 <= i0 + r, so the causal limits of attn_kh read only computed entries:
            // query r >= key c - dq for dV/dK (rows c), key c < r + R + dq for dQ (rows r).
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
                attn_kh((float *)dqacc + qoff, sh->ldq, dst, LD, 1, kj, kld, bq, HS, bk,
                        -ATTN_NOLIM, dq);
            }
        }
    }
    if (bf) {
        attn_round_rows((uint16_t *)dk + koff, sh->ldk, dka, bk, HS);
        attn_round_rows((uint16_t *)dv + koff, sh->ldk, dva, bk, HS);
    }
}

static void attn_bwd_block(float *dqacc, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *lse, const float *D,
                           const attn_shape *sh, int kvh, int jb, float *tws) {
    attn_bwd_impl(dqacc, dk, dv, dout, q, k, v, lse, D, sh, kvh, jb, tws, 0);
}

static void attn_bwd_block_bf16(const attn_dq *dqacc, uint16_t *dk, uint16_t *dv,
                                const uint16_t *dout, const uint16_t *q, const uint16_t *k,
                                const uint16_t *v, const float *lse, const float *D,
                                const attn_shape *sh, int kvh, int jb, float *tws) {
    attn_bwd_impl((void *)dqacc, dk, dv, dout, q, k, v, lse, D, sh, kvh, jb, tws, 1);
}

const attn_ops attn_ops_avx512 = {.name = "avx512",
                                  .label = "avx512",
                                  .fq = ATTN_FQ,
                                  .bkb = ATTN_BKB,
                                  .thread_floats = attn_thread_floats,
                                  .fwd_block = attn_fwd_block,
                                  .bwd_block = attn_bwd_block,
                                  .thread_floats_bf16 = attn_thread_floats_bf16,
                                  .fwd_block_bf16 = attn_fwd_block_bf16,
                                  .bwd_block_bf16 = attn_bwd_block_bf16};

#endif
