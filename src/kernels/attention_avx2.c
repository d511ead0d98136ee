/* attention_avx2.c — the attention blocks with AVX2 + FMA micro-kernels: the algorithm, blocking
 * and loop structure of attention_avx512.c on 8-wide vectors (see attention.c for the algorithm
 * and attention_tiles.h for the contract of a block). Compiled with -mavx2 -mfma
 * (CMakeLists.txt) and run only where the CPU has them (dispatch.c).
 *
 * What changes with the width: AVX2 has 16 vector registers (AVX-512: 32) and no mask
 * registers. The micro-kernels keep two vectors (16 columns) per row and 6 rows (attn_kq) or 4
 * rows (attn_kh) in registers; lane masks are vectors with all-ones lanes made by integer
 * compares, applied with blend (max) and and (exp). An 8-wide fma does half the work of an
 * AVX-512 one per cache line it reads, so the blocks that the backward's products walk many
 * times are first packed contiguous (attn_pack_rows). Every sum runs in the order of the AVX-512
 * path (k ascending, one fma per term; masked terms add an exact 0), so the results are that path's
 * bits: in the forward (same blocks) always, in the backward wherever each thread owns whole KV
 * heads (its key blocks are smaller, but every dQ, dK, dV element still adds the same terms in the
 * same order); test_attention checks both. */
#include "attention_tiles.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Blocks. The forward widens its query block to 256 as the AVX-512 path does (each streamed
 * K_j, V_j block serves twice the work); the backward keeps square (128, 128) tiles: its task
 * holds four (HS, BKB) or (B, BKB) panels and tiles plus packed blocks, about 0.55 MiB at
 * HS = 64 with 256 keys against 0.3 MiB with 128, and the L2 of AVX2-only cores is 256-512 KiB
 * (on a 1 MiB L2 both measure the same). The forward's 0.3 MiB fits a 512 KiB L2. Scratch
 * tile rows are padded by 16 floats (rows 512 B or 1 KiB apart would share L1 sets). */
enum { ATTN_FQ = 256, ATTN_BKB = 128, ATTN_PAD = 16 };
enum { ATTN_LDF = ATTN_FQ + ATTN_PAD, ATTN_LDB = ATTN_BKB + ATTN_PAD };

/* Per-thread scratch, the larger of the forward's and the backward's needs (exact, so that the
 * guard test can catch an overrun): forward two (HS, FQ) panels, a (B, FQ) tile and two (FQ)
 * vectors; backward two (HS, BKB) panels, two (B, BKB) tiles, a packed (BKB, HS) block and two
 * packed (B, HS) blocks. */
static size_t attn_thread_floats(int HS) {
    size_t fwd = up_add(up_mul3(2, (size_t)HS, ATTN_LDF), (size_t)ATTN_B * ATTN_LDF + 2 * ATTN_FQ);
    size_t bwd = up_add(up_mul3(2, (size_t)HS, ATTN_LDB), 2 * (size_t)ATTN_B * ATTN_LDB);
    bwd = up_add(bwd, up_mul((size_t)ATTN_BKB + 2 * ATTN_B, (size_t)HS));
    return attn_round16(fwd > bwd ? fwd : bwd);
}

/* The bf16 kernels' scratch: the above plus forward K_j and V_j widened (B, HS) and backward
 * the fp32 dK_j and dV_j (BKB, HS) and dQ_i (B, HS) (the packed K_j, Q_i, dO_i blocks take the
 * widened ones). */
static size_t attn_thread_floats_bf16(int HS) {
    size_t fwd = up_add(up_mul3(2, (size_t)HS, ATTN_LDF), (size_t)ATTN_B * ATTN_LDF + 2 * ATTN_FQ);
    size_t bwd = up_add(up_mul3(2, (size_t)HS, ATTN_LDB), 2 * (size_t)ATTN_B * ATTN_LDB);
    bwd = up_add(bwd, up_mul((size_t)ATTN_BKB + 2 * ATTN_B, (size_t)HS));
    fwd = up_add(fwd, up_mul(2 * (size_t)ATTN_B, (size_t)HS));
    bwd = up_add(bwd, up_mul(2 * (size_t)ATTN_BKB + ATTN_B, (size_t)HS));
    return attn_round16(fwd > bwd ? fwd : bwd);
}

/* Rows 0 .. n-1 of src (HS floats each, strided by ld) packed contiguously into dst (n, HS).
 * The backward's head-vector products walk a block's rows once per register tile; in place,
 * their stride of NH*HS or NKV*HS floats (1-2 KiB) maps them onto a few L1 sets, which evict
 * each other, and an 8-wide fma does too little work per line fetched to hide it (packing Q_i,
 * dO_i and K_j made the backward 1.19x faster here; the forward's K_j, V_j gained nothing). */
static void attn_pack_rows(float *dst, const float *src, size_t ld, int n, int HS) {
    for (int r = 0; r < n; r++)
        memcpy(dst + (size_t)r * HS, src + (size_t)r * ld, (size_t)HS * sizeof(float));
}

/* The exp of attention_tiles.h on 8 lanes (the AVX-512 path's attn_exp16, bit for bit: the same
 * operations; 2^n is built in the exponent field instead of scalef, which is exact for the
 * n in [-126, 127] that the clamp leaves). NaN lanes: the conversion gives some n, p is NaN. */
static inline __m256 attn_exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(ATTN_EXP_LO);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    __m256 xc = _mm256_max_ps(lo, x); // max/min return the second operand on NaN: keeps NaN
    xc = _mm256_min_ps(_mm256_set1_ps(88.0f), xc);
    const __m256 fn = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(ATTN_EXP_C1), xc);
    r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(ATTN_EXP_C2), r);
    __m256 p = _mm256_set1_ps(ATTN_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    const __m256i two_n = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(fn), _mm256_set1_epi32(127)), 23); // p * 2^n
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(two_n)));
}

/* ---- lane masks (all-ones lanes are kept) ---------------------------------------------------- */

static inline __m256i attn_iota(void) {
    return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
}

/* Lanes >= thr (none for thr >= 8, all for thr <= 0). */
static inline __m256i attn_lanes_from(int thr) {
    return _mm256_cmpgt_epi32(attn_iota(), _mm256_set1_epi32(thr - 1));
}

/* Lanes <= thr. */
static inline __m256i attn_lanes_upto(int thr) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(thr + 1), attn_iota());
}

/* Lanes < n. */
static inline __m256i attn_lanes_below(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), attn_iota());
}

/* ---- micro-kernels --------------------------------------------------------------------------- */

/* attn_widen_rows (attention_tiles.h) in registers: 8 bf16 zero-extended to 32 bits and
 * shifted up per step (exact), the tail element by element; no call per row. */
static inline void attn_widen_rows_v(float *dst, const uint16_t *src, size_t ld, int n, int HS) {
    for (int r = 0; r < n; r++) {
        const uint16_t *s = src + (size_t)r * ld;
        float *d = dst + (size_t)r * HS;
        int e = 0;
        for (; e + 8 <= HS; e += 8)
            _mm256_storeu_si256(
                (__m256i *)(d + e),
                _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + e))),
                                  16));
        for (; e < HS; e++)
            d[e] = attn_widen(s[e]);
    }
}

#define ATTN_INLINE static inline __attribute__((always_inline))
enum { ATTN_QC = 16, ATTN_R = 6, ATTN_RH = 4 }; // chunk (2 vectors); rows per register tile

/* Query-vector product on a chunk of 16 columns (the AVX-512 path's attn_kq on 2 x 8 lanes):
 *     C (M, 16) = or += A (M, K) B (K, 16),   A(m, k) = A[m*sam + k*sak] (any strides),
 * B and C rows strided by ld. R rows at a time: 2R accumulators (12 of the 16 registers), per k
 * two B loads and R broadcasts. */
ATTN_INLINE void attn_kq_tile(float *C, const float *A, size_t sam, size_t sak, const float *B,
                              size_t ld, int K, int acc, const int R) {
    __m256 c0[ATTN_R], c1[ATTN_R];
    for (int i = 0; i < R; i++) {
        c0[i] = acc ? _mm256_loadu_ps(C + (size_t)i * ld) : _mm256_setzero_ps();
        c1[i] = acc ? _mm256_loadu_ps(C + (size_t)i * ld + 8) : _mm256_setzero_ps();
    }
    for (int k = 0; k < K; k++) {
        const __m256 b0 = _mm256_loadu_ps(B + (size_t)k * ld);
        const __m256 b1 = _mm256_loadu_ps(B + (size_t)k * ld + 8);
        const float *ak = A + (size_t)k * sak;
        for (int i = 0; i < R; i++) {
            const __m256 a = _mm256_broadcast_ss(ak + (size_t)i * sam);
            c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
        }
    }
    for (int i = 0; i < R; i++) {
        _mm256_storeu_ps(C + (size_t)i * ld, c0[i]);
        _mm256_storeu_ps(C + (size_t)i * ld + 8, c1[i]);
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
 * chunks of 16; a partial last chunk (tail) loads and stores through lane masks m0, m1), A(m, k)
 * = A[m*sam + k*sak], B rows strided by ldb, C rows by ldc. Causal limits per register tile of
 * rows [m, m+R): k runs over [max(0, m + klo), min(K, m + R + khi)) (the entries outside are
 * zero by the mask). R = 4 rows (8 accumulators), a divisor of the 16-key chunks of the
 * backward's tiles: the limits of a register tile then read only entries of chunks that the
 * tile computation filled for those rows (see attn_bwd_block). */
ATTN_INLINE void attn_kh_tile(float *C, size_t ldc, const float *A, size_t sam, size_t sak,
                              const float *B, size_t ldb, int k0, int k1, __m256i m0, __m256i m1,
                              const int R, const int tail) {
    __m256 c0[ATTN_RH], c1[ATTN_RH];
    for (int i = 0; i < R; i++) {
        const float *ci = C + (size_t)i * ldc;
        c0[i] = tail ? _mm256_maskload_ps(ci, m0) : _mm256_loadu_ps(ci);
        c1[i] = tail ? _mm256_maskload_ps(ci + 8, m1) : _mm256_loadu_ps(ci + 8);
    }
    for (int k = k0; k < k1; k++) {
        const float *bk = B + (size_t)k * ldb;
        __m256 b0 = tail ? _mm256_maskload_ps(bk, m0) : _mm256_loadu_ps(bk);
        __m256 b1 = tail ? _mm256_maskload_ps(bk + 8, m1) : _mm256_loadu_ps(bk + 8);
        // Keep b0, b1 in registers: gcc otherwise folds their loads into each of the R fmas,
        // and 2R + R loads per 2R fmas leave the loop waiting on the load ports.
        __asm__("" : "+x"(b0), "+x"(b1));
        const float *ak = A + (size_t)k * sak;
        for (int i = 0; i < R; i++) {
            const __m256 a = _mm256_broadcast_ss(ak + (size_t)i * sam);
            c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
        }
    }
    for (int i = 0; i < R; i++) {
        float *ci = C + (size_t)i * ldc;
        if (tail) {
            _mm256_maskstore_ps(ci, m0, c0[i]);
            _mm256_maskstore_ps(ci + 8, m1, c1[i]);
        } else {
            _mm256_storeu_ps(ci, c0[i]);
            _mm256_storeu_ps(ci + 8, c1[i]);
        }
    }
}

#define ATTN_KH_CASE(r)                                                                            \
    case r:                                                                                        \
        if (tail)                                                                                  \
            attn_kh_tile(Cm, ldc, Am, sam, sak, Bn, ldb, k0, k1, m0, m1, r, 1);                    \
        else                                                                                       \
            attn_kh_tile(Cm, ldc, Am, sam, sak, Bn, ldb, k0, k1, m0, m1, r, 0);                    \
        break;

static void attn_kh(float *C, size_t ldc, const float *A, size_t sam, size_t sak, const float *B,
                    size_t ldb, int M, int N, int K, int klo, int khi) {
    for (int n0 = 0; n0 < N; n0 += 16) {
        const int nn = attn_min(16, N - n0);
        const int tail = nn < 16;
        const __m256i m0 = attn_lanes_below(nn), m1 = attn_lanes_below(nn - 8);
        const float *Bn = B + n0;
        for (int m = 0; m < M; m += ATTN_RH) {
            const int r = attn_min(ATTN_RH, M - m);
            const int k0 = m + klo > 0 ? m + klo : 0;
            const int k1 = m + r + khi < K ? m + r + khi : K;
            if (k0 >= k1) continue;
            float *Cm = C + (size_t)m * ldc + n0;
            const float *Am = A + (size_t)m * sam;
            switch (r) {
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

/* ---- forward --------------------------------------------------------------------------------- */

/* Lanes of the 8 queries i0+qv .. i0+qv+7 that see key j0+m, given dk = j0 - i0 (query >= key,
 * i.e. lane >= dk + m - qv), and, where a document boundary cuts the vector (cut; doc starts in
 * dsv), whose document holds key j0+m (doc <= j0+m). */
static inline __m256i attn_fwd_lanes(int masked, int cut, __m256i dsv, int dk, int m, int qv,
                                     int j) {
    __m256i mk = masked ? attn_lanes_from(dk + m - qv) : _mm256_set1_epi32(-1);
    if (cut) mk = _mm256_andnot_si256(_mm256_cmpgt_epi32(dsv, _mm256_set1_epi32(j)), mk);
    return mk;
}

/* Softmax update of 8 queries (lanes qv .. qv+7 of the block) over the keys ml .. mc-1 of the
 * current key block: S^T rows become P^T, running max and sum move on, O^T is rescaled. */
static void attn_fwd_softmax8(float *st, float *ot, float *mrow, float *lrow, const attn_shape *sh,
                              int i0, int j0, int bq, int qv, int ml, int mc, int masked) {
    const int LD = ATTN_LDF, dk = j0 - i0;
    // doc starts of the vector's queries where a boundary cuts it (lanes past bq: 0)
    const int cut = qv < bq && attn_doc_cuts(sh, i0 + attn_min(qv + 8, bq), j0 + ml);
    const __m256i dsv = cut ? _mm256_maskload_epi32((const int *)sh->doc + i0 + qv,
                                                    attn_lanes_below(attn_min(8, bq - qv)))
                            : _mm256_setzero_si256();
    const int any = masked || cut;
    const __m256 m_old = _mm256_loadu_ps(mrow + qv);
    __m256 mx = m_old;
    for (int m = ml; m < mc; m++) {
        __m256 s = _mm256_loadu_ps(st + (size_t)m * LD + qv);
        if (any) // masked lanes compare mx with itself
            s = _mm256_blendv_ps(
                mx, s, _mm256_castsi256_ps(attn_fwd_lanes(masked, cut, dsv, dk, m, qv, j0 + m)));
        mx = _mm256_max_ps(mx, s);
    }
    // As in the AVX-512 path: with documents a query may see no key of its first tiles, mx stays
    // -inf there and 0 stands in for it in the exponents (p = 0 by the mask, alpha =
    // exp(-inf) = 0 on an O and l that are still 0).
    const __m256 mxe =
        sh->doc ? _mm256_blendv_ps(mx, _mm256_setzero_ps(),
                                   _mm256_cmp_ps(mx, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ))
                : mx;
    const __m256 alpha = attn_exp8(_mm256_sub_ps(m_old, mxe)); // 0 in block 0
    __m256 sum = _mm256_setzero_ps();
    for (int m = ml; m < mc; m++) {
        float *sp = st + (size_t)m * LD + qv;
        __m256 p = attn_exp8(_mm256_sub_ps(_mm256_loadu_ps(sp), mxe));
        if (any)
            p = _mm256_and_ps(
                _mm256_castsi256_ps(attn_fwd_lanes(masked, cut, dsv, dk, m, qv, j0 + m)), p);
        _mm256_storeu_ps(sp, p);
        sum = _mm256_add_ps(sum, p);
    }
    _mm256_storeu_ps(lrow + qv, _mm256_fmadd_ps(_mm256_loadu_ps(lrow + qv), alpha, sum));
    _mm256_storeu_ps(mrow + qv, mx);
    if (j0 > 0)
        for (int d = 0; d < sh->HS; d++) {
            float *o = ot + (size_t)d * LD + qv;
            _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_loadu_ps(o), alpha));
        }
}

/* Forward of one (query head h, query block ib of ATTN_FQ queries), as in the AVX-512 path: the
 * queries are the vector dimension, scale * Q_i^T is packed once, scores are S^T (keys,
 * queries) in 16-query chunks, the output accumulates transposed in O^T (HS, FQ). Documents:
 * key blocks start at the one holding doc[i0]; in a chunk, keys before the doc start of its
 * first query are skipped, and cut vectors are masked lane by lane. */
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
        // the next key block, into L2 while this one computes (see the AVX-512 path)
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
            // keys of this block seen by some query of the chunk: j0 + m <= i0 + q0 + 15
            const int mc = attn_min(bk, q0 + ATTN_QC - dk);
            // and at or after the first query's document start (0 without documents)
            const int ml = sh->doc ? attn_max(0, sh->doc[i0 + q0] - j0) : 0;
            if (mc <= ml) continue;
            attn_kq(st + (size_t)ml * LD + q0, kj + (size_t)ml * kld, kld, 1, qt + q0, LD, mc - ml,
                    HS, 0); // S^T (rows ml .. mc-1, 16)
            for (int qv = q0; qv < q0 + ATTN_QC; qv += 8)
                attn_fwd_softmax8(st, ot, mrow, lrow, sh, i0, j0, bq, qv, ml, mc, masked);
            // O^T (HS, 16) += V_j^T (HS, mc) P^T (mc, 16);  V^T(d, c) = V[c*ldk + d]
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

/* ---- backward -------------------------------------------------------------------------------- */

/* P and scale * dS of one query row r over the 8 keys j0+cv .. j0+cv+7, in place of S and dP.
 * Masked keys: after the query (key > query: lane > dq + r - cv) and, where a document boundary
 * cuts the tile, before its doc start (lanes below doc - j0 - cv). */
static inline void attn_bwd_row8(float *pp, float *dp, float lse_r, float D_r, __m256 vscale,
                                 int masked, int cut, int dq, int r, int cv, int doc_rel) {
    __m256 p = attn_exp8(_mm256_sub_ps(_mm256_loadu_ps(pp), _mm256_set1_ps(lse_r)));
    if (masked || cut) {
        __m256i mk = masked ? attn_lanes_upto(dq + r - cv) : _mm256_set1_epi32(-1);
        if (cut) mk = _mm256_and_si256(mk, attn_lanes_from(doc_rel));
        p = _mm256_and_ps(_mm256_castsi256_ps(mk), p);
    }
    const __m256 ds = _mm256_mul_ps(
        _mm256_mul_ps(p, _mm256_sub_ps(_mm256_loadu_ps(dp), _mm256_set1_ps(D_r))), vscale);
    _mm256_storeu_ps(pp, p);
    _mm256_storeu_ps(dp, ds);
}

/* Backward of one (KV head kvh, key block jb of ATTN_BKB keys), as in the AVX-512 path: the key
 * block is fixed, the vectors run along keys; scale * K_j^T and V_j^T are packed once per task,
 * Q_i and dO_i are read in place, the tiles are (queries, keys) in 16-key chunks. Documents:
 * query blocks stop at the end of the document of the block's last key; cut tiles are masked
 * per query row. */
ATTN_INLINE void attn_bwd_impl(void *dqacc, void *dk, void *dv, const void *dout, const void *q,
                               const void *k, const void *v, const float *lse, const float *D,
                               const attn_shape *sh, int kvh, int jb, float *tws, const int bf) {
    const int B = ATTN_B, BK = ATTN_BKB, LD = ATTN_LDB, HS = sh->HS, T = sh->T;
    const int j0 = jb * BK;
    const int bk = attn_min(BK, T - j0);
    const size_t koff = (size_t)j0 * sh->ldk + (size_t)kvh * HS;
    float *kt = tws;                   // (HS, BK) scale * K_j^T, zero past bk; rows strided by LD
    float *vt = kt + (size_t)HS * LD;  // (HS, BK) V_j^T, zero past bk
    float *pt = vt + (size_t)HS * LD;  // (B, BK) S, then P: (queries, keys)
    float *dst = pt + (size_t)B * LD;  // (B, BK) dP, then scale * dS
    float *kp = dst + (size_t)B * LD;  // (BK, HS) K_j packed
    float *qp = kp + (size_t)BK * HS;  // (B, HS) Q_i packed
    float *dop = qp + (size_t)B * HS;  // (B, HS) dO_i packed
    float *dka = dop + (size_t)B * HS; // bf16 operands: (BK, HS) dK_j and dV_j in fp32
    float *dva = dka + (size_t)BK * HS;
    float *dqt = dva + (size_t)BK * HS; // (B, HS) dQ_i in fp32
    float *dkj, *dvj;                   // dK_j, dV_j rows strided by dld
    size_t dld;
    if (bf) {
        const uint16_t *kb16 = (const uint16_t *)k + koff, *vb16 = (const uint16_t *)v + koff;
        attn_pack_t_bf16(kt, LD, kb16, sh->ldk, bk, HS, sh->scale);
        attn_pack_t_bf16(vt, LD, vb16, sh->ldk, bk, HS, 1.0f);
        attn_widen_rows_v(kp, kb16, sh->ldk, bk, HS);
        dkj = dka;
        dvj = dva;
        dld = (size_t)HS;
    } else {
        const float *kj = (const float *)k + koff; // (bk, HS) rows strided by ldk
        attn_pack_t(kt, LD, kj, sh->ldk, bk, HS, sh->scale);
        attn_pack_t(vt, LD, (const float *)v + koff, sh->ldk, bk, HS, 1.0f);
        attn_pack_rows(kp, kj, sh->ldk, bk, HS);
        dkj = (float *)dk + koff;
        dvj = (float *)dv + koff;
        dld = sh->ldk;
    }
    const __m256 vscale = _mm256_set1_ps(sh->scale);
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
            // the next query block's Q, dO and dQ rows, into L2 while this one computes
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
            } else {
                const float *qi = (const float *)q + qoff; // (bq, HS) rows strided by ldq
                const float *doi = (const float *)dout + qoff;
                if (nn > 0) {
                    attn_prefetch_rows(qi + nxt, nn, HS, sh->ldq);
                    attn_prefetch_rows(doi + nxt, nn, HS, sh->ldq);
                    attn_prefetch_rows((float *)dqacc + qoff + nxt, nn, HS, sh->ldq);
                }
                attn_pack_rows(qp, qi, sh->ldq, bq, HS);
                attn_pack_rows(dop, doi, sh->ldq, bq, HS);
            }
            for (int c0 = 0; c0 < bk; c0 += ATTN_QC) {
                // queries seeing some key of the chunk: i0 + r >= j0 + c0
                const int r0 = c0 - dq > 0 ? c0 - dq : 0;
                if (r0 >= bq) break; // and so for the later chunks
                const int nr = bq - r0;
                attn_kq(pt + (size_t)r0 * LD + c0, qp + (size_t)r0 * HS, (size_t)HS, 1, kt + c0, LD,
                        nr, HS, 0); // S (nr, 16)
                attn_kq(dst + (size_t)r0 * LD + c0, dop + (size_t)r0 * HS, (size_t)HS, 1, vt + c0,
                        LD, nr, HS, 0); // dP = dO_i V_j^T (nr, 16)
                // Lanes past the block's last key (zero-padded K^T, V^T) get finite values
                // that no product reads (they stop at bk keys).
                for (int cv = c0; cv < c0 + ATTN_QC; cv += 8)
                    for (int r = r0; r < bq; r++)
                        attn_bwd_row8(pt + (size_t)r * LD + cv, dst + (size_t)r * LD + cv, lse_i[r],
                                      D_i[r], vscale, masked, cut, dq, r, cv,
                                      cut ? sh->doc[i0 + r] - j0 - cv : 0);
            }
            // Row r of the tiles holds valid (masked) entries for the keys of every chunk with
            // j0 + c0 <= i0 + r. attn_kh's register tiles of 4 rows never straddle a 16-key
            // chunk (4 divides 16 and dq is a multiple of 16), so its causal limits read only
            // computed entries: query r >= key c - dq for dV/dK (rows c), key c < r + 4 + dq for
            // dQ (rows r).
            // dV_j (bk, HS) += P^T (bk, bq) dO_i (bq, HS);  P^T(c, r) = P[r*LD + c]
            attn_kh(dvj, dld, pt, 1, LD, dop, (size_t)HS, bk, HS, bq, -dq, ATTN_NOLIM);
            // dK_j (bk, HS) += scale dS^T (bk, bq) Q_i (bq, HS)
            attn_kh(dkj, dld, dst, 1, LD, qp, (size_t)HS, bk, HS, bq, -dq, ATTN_NOLIM);
            // dQ_i (bq, HS) += scale dS (bq, bk) K_j (bk, HS)
            if (bf) {
                attn_dq_get(dqt, dqacc, qoff, sh->ldq, bq, HS);
                attn_kh(dqt, (size_t)HS, dst, LD, 1, kp, (size_t)HS, bq, HS, bk, -ATTN_NOLIM, dq);
                attn_dq_put(dqacc, qoff, sh->ldq, dqt, bq, HS);
            } else {
                attn_kh((float *)dqacc + qoff, sh->ldq, dst, LD, 1, kp, (size_t)HS, bq, HS, bk,
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

const attn_ops attn_ops_avx2 = {.name = "avx2",
                                .label = "avx2+fma",
                                .fq = ATTN_FQ,
                                .bkb = ATTN_BKB,
                                .thread_floats = attn_thread_floats,
                                .fwd_block = attn_fwd_block,
                                .bwd_block = attn_bwd_block,
                                .thread_floats_bf16 = attn_thread_floats_bf16,
                                .fwd_block_bf16 = attn_fwd_block_bf16,
                                .bwd_block_bf16 = attn_bwd_block_bf16};

#endif
