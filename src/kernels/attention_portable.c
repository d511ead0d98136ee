/* attention_portable.c — the attention blocks on any CPU: cblas_sgemm on (B, B) tiles and plain
 * loops that gcc vectorises (see attention.c for the algorithm, attention_tiles.h for the
 * contract of a block).
 *
 * Why this is not attention_body.h on vec_portable.h: its sums are cblas_sgemm's (OpenBLAS's own
 * blocking and accumulation order for S = Q K^T, O += P V, dV, dP, dK, dQ), its scores are
 * row-major (queries, keys) with horizontal max and sum reductions that `omp simd` orders by the
 * clone's vector width, and its softmax rescale is libm's expf, not the Cephes exp. The vector
 * body sums k ascending with one fma per term on transposed tiles, so expressing this path as
 * that body would change its bits (the guard records them). It shares the entry points and table
 * (ATTN_DEFINE_BLOCKS, ATTN_OPS_INIT) and the exp (vec_exp1, vec_portable.h). */
#include "attention_tiles.h"
#include "dispatch.h"
#include "kernels/vec_portable.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Square (B, B) tiles: the block of every dimension is ATTN_B. */

/* Per-thread scratch, the larger of the forward's and the backward's needs (exact, so that the
 * guard test can catch an overrun): forward a (B, B) tile and three (B) vectors, backward two
 * (B, B) tiles. */
static size_t attn_thread_floats(int HS) {
    (void)HS;
    size_t fwd = (size_t)ATTN_B * ATTN_B + 3 * ATTN_B;
    size_t bwd = 2 * (size_t)ATTN_B * ATTN_B;
    return attn_round16(fwd > bwd ? fwd : bwd);
}

/* The bf16 kernels' scratch: the above plus (B, HS) tiles, forward Q_i, K_j, V_j widened and
 * O_i in fp32, backward K_j, V_j, Q_i, dO_i widened and dK_j, dV_j, dQ_i in fp32. */
static size_t attn_thread_floats_bf16(int HS) {
    size_t fwd =
        up_add((size_t)ATTN_B * ATTN_B + 3 * ATTN_B, up_mul(4 * (size_t)ATTN_B, (size_t)HS));
    size_t bwd = up_add(2 * (size_t)ATTN_B * ATTN_B, up_mul(7 * (size_t)ATTN_B, (size_t)HS));
    return attn_round16(fwd > bwd ? fwd : bwd);
}

#define ATTN_INLINE static inline __attribute__((always_inline))

/* ---- portable path: cblas_sgemm on tiles ----------------------------------------------------- */

/* Forward of one (query head h, query block ib). tws: this thread's scratch. Documents: key
 * blocks start at the one holding doc[i0]; in a tile that a document boundary cuts, the scores
 * of keys before a query's doc start become -inf (exp gives 0, the row maximum ignores them),
 * and a row with no visible key keeps its softmax state (alpha 1, P row 0). */
ATTN_INLINE void attn_fwd_impl(void *out, float *lse, const void *q, const void *k, const void *v,
                               const attn_shape *sh, int h, int ib, float *tws, const int bf) {
    const int B = ATTN_B, HS = sh->HS, T = sh->T;
    const int i0 = ib * B;
    const int bq = attn_min(B, T - i0);
    const size_t qoff = (size_t)i0 * sh->ldq + (size_t)h * HS;
    const size_t kvoff = (size_t)(h / sh->G) * HS;
    float *s = tws;                 // (bq, bk) scores, then probabilities
    float *m = tws + (size_t)B * B; // (bq) running max
    float *l = m + B;               // (bq) running sum
    float *alpha = l + B;           // (bq) rescale factor of this step
    float *qf = alpha + B;          // bf16 operands: (B, HS) Q_i, K_j, V_j widened, O_i in fp32
    float *kf = qf + (size_t)B * HS;
    float *vfl = kf + (size_t)B * HS;
    float *of = vfl + (size_t)B * HS;
    // Q_i and O_i (bq, HS) rows strided by ldq (ldo); K, V of the KV head rows strided by ldk
    const float *qi;
    float *oi;
    int ldq, ldo;
    const int ldk = bf ? HS : (int)sh->ldk;
    if (bf) {
        attn_widen_rows(qf, (const uint16_t *)q + qoff, sh->ldq, bq, HS, sh->bf16);
        qi = qf;
        oi = of;
        ldq = ldo = HS;
    } else {
        qi = (const float *)q + qoff;
        oi = (float *)out + qoff;
        ldq = ldo = (int)sh->ldq;
    }
    for (int r = 0; r < bq; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    const int jfirst = attn_doc_first_key(sh, i0) / B * B; // 0 without documents
    for (int j0 = jfirst; j0 <= i0; j0 += B) {
        const int bk = attn_min(B, T - j0);
        const int diag = j0 == i0;                      // then bk == bq
        const int cut = attn_doc_cuts(sh, i0 + bq, j0); // a document boundary in the tile
        const float *kj, *vj;                           // (bk, HS) rows strided by ldk
        if (bf) {
            attn_widen_rows(kf, (const uint16_t *)k + (size_t)j0 * sh->ldk + kvoff, sh->ldk, bk, HS,
                            sh->bf16);
            attn_widen_rows(vfl, (const uint16_t *)v + (size_t)j0 * sh->ldk + kvoff, sh->ldk, bk,
                            HS, sh->bf16);
            kj = kf;
            vj = vfl;
        } else {
            kj = (const float *)k + (size_t)j0 * sh->ldk + kvoff;
            vj = (const float *)v + (size_t)j0 * sh->ldk + kvoff;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, HS, sh->scale, qi, ldq, kj,
                    ldk, 0.0f, s, B);
        for (int r = 0; r < bq; r++) {
            float *row = s + (size_t)r * B;
            const int n = diag ? r + 1 : bk; // causal: query i0+r sees keys up to i0+r
            if (cut) {                       // and from its doc start on
                const int lo = sh->doc[i0 + r] - j0;
                if (lo >= n) { // no key of this tile
                    memset(row, 0, (size_t)bk * sizeof(float));
                    alpha[r] = 1.0f;
                    continue;
                }
                for (int c = 0; c < lo; c++)
                    row[c] = -INFINITY;
            }
            float mx = m[r];
#pragma omp simd reduction(max : mx)
            for (int c = 0; c < n; c++)
                mx = row[c] > mx ? row[c] : mx;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int c = 0; c < n; c++) {
                const float e = vec_exp1(row[c] - mx);
                row[c] = e;
                sum += e;
            }
            for (int c = n; c < bk; c++)
                row[c] = 0.0f;
            alpha[r] = expf(m[r] - mx); // 0 on the first block (m = -inf)
            l[r] = l[r] * alpha[r] + sum;
            m[r] = mx;
        }
        if (j0 > jfirst)
            for (int r = 0; r < bq; r++) {
                float *orow = oi + (size_t)r * ldo;
                const float a = alpha[r];
#pragma omp simd
                for (int d = 0; d < HS; d++)
                    orow[d] *= a;
            }
        // O_i (bq, HS) = alpha O_i + P (bq, bk) V_j (bk, HS); out holds anything before the first
        // block: beta 0 there (BLAS does not read C when beta is 0).
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, HS, bk, 1.0f, s, B, vj, ldk,
                    j0 > jfirst ? 1.0f : 0.0f, oi, ldo);
    }
    for (int r = 0; r < bq; r++) {
        float *orow = oi + (size_t)r * ldo;
        const float inv = 1.0f / l[r]; // l >= 1: the row maximum contributes exp(0)
#pragma omp simd
        for (int d = 0; d < HS; d++)
            orow[d] *= inv;
        lse[(size_t)h * T + i0 + r] = m[r] + logf(l[r]);
    }
    if (bf) attn_round_rows((uint16_t *)out + qoff, sh->ldq, of, bq, HS, sh->bf16);
}

/* Backward of one (KV head kvh, key block jb): dK_j, dV_j overwritten (owned by the task), dQ
 * accumulated into dqacc (dq itself or a private buffer, (T, NH, HS); an attn_dq in bf16).
 * Documents: query blocks stop at the end of the document of the block's last key; in a tile that a
 * document boundary cuts, P is 0 for the keys before a query's doc start. */
ATTN_INLINE void attn_bwd_impl(void *dqacc, void *dk, void *dv, const void *dout, const void *q,
                               const void *k, const void *v, const float *lse, const float *D,
                               const attn_shape *sh, int kvh, int jb, float *tws, const int bf) {
    const int B = ATTN_B, HS = sh->HS, T = sh->T;
    const int ldqo = (int)sh->ldq; // of dQ
    const int j0 = jb * B;
    const int bk = attn_min(B, T - j0);
    const size_t koff = (size_t)j0 * sh->ldk + (size_t)kvh * HS;
    float *p = tws;                  // (bq, bk) probabilities, then dS
    float *dp = tws + (size_t)B * B; // (bq, bk) dP
    float *kf = dp + (size_t)B * B;  // bf16 operands: (B, HS) K_j, V_j, Q_i, dO_i widened,
    float *vfl = kf + (size_t)B * HS;
    float *qf = vfl + (size_t)B * HS;
    float *dof = qf + (size_t)B * HS;
    float *dka = dof + (size_t)B * HS; // dK_j and dV_j in fp32
    float *dva = dka + (size_t)B * HS;
    float *dqt = dva + (size_t)B * HS; // dQ_i in fp32
    // K_j, V_j, dK_j, dV_j rows strided by ldk; Q_i, dO_i rows by ldq
    const float *kj, *vj;
    float *dkj, *dvj;
    const int ldk = bf ? HS : (int)sh->ldk, ldq = bf ? HS : (int)sh->ldq;
    if (bf) {
        attn_widen_rows(kf, (const uint16_t *)k + koff, sh->ldk, bk, HS, sh->bf16);
        attn_widen_rows(vfl, (const uint16_t *)v + koff, sh->ldk, bk, HS, sh->bf16);
        kj = kf;
        vj = vfl;
        dkj = dka;
        dvj = dva;
    } else {
        kj = (const float *)k + koff;
        vj = (const float *)v + koff;
        dkj = (float *)dk + koff;
        dvj = (float *)dv + koff;
    }
    int first = 1; // first contribution to dK_j, dV_j: overwrite (beta 0)
    const int qend = attn_doc_query_end(sh, j0 + bk); // T without documents
    for (int g = 0; g < sh->G; g++) {
        const int h = kvh * sh->G + g;
        for (int i0 = j0; i0 < qend; i0 += B) {
            const int bq = attn_min(B, T - i0);
            const int diag = i0 == j0;                      // then bq == bk
            const int cut = attn_doc_cuts(sh, i0 + bq, j0); // a document boundary in the tile
            const size_t qoff = (size_t)i0 * sh->ldq + (size_t)h * HS;
            const float *qi, *doi; // (bq, HS) rows strided by ldq
            if (bf) {
                attn_widen_rows(qf, (const uint16_t *)q + qoff, sh->ldq, bq, HS, sh->bf16);
                attn_widen_rows(dof, (const uint16_t *)dout + qoff, sh->ldq, bq, HS, sh->bf16);
                qi = qf;
                doi = dof;
            } else {
                qi = (const float *)q + qoff;
                doi = (const float *)dout + qoff;
            }
            const float *lse_i = lse + (size_t)h * T + i0;
            const float *D_i = D + (size_t)h * T + i0;
            // P = exp(scale * Q_i K_j^T - lse) with the causal mask (recompute)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, HS, sh->scale, qi, ldq, kj,
                        ldk, 0.0f, p, B);
            for (int r = 0; r < bq; r++) {
                float *row = p + (size_t)r * B;
                const int n = diag ? r + 1 : bk;
                const float ls = lse_i[r];
#pragma omp simd
                for (int c = 0; c < n; c++)
                    row[c] = vec_exp1(row[c] - ls);
                for (int c = n; c < bk; c++)
                    row[c] = 0.0f;
                if (cut) // keys before the query's doc start
                    for (int c = 0; c < attn_min(sh->doc[i0 + r] - j0, bk); c++)
                        row[c] = 0.0f;
            }
            // dV_j (bk, HS) += P^T (bk, bq) dO_i (bq, HS)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk, HS, bq, 1.0f, p, B, doi, ldq,
                        first ? 0.0f : 1.0f, dvj, ldk);
            // dP (bq, bk) = dO_i (bq, HS) V_j^T (HS, bk)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, HS, 1.0f, doi, ldq, vj,
                        ldk, 0.0f, dp, B);
            // dS = P * (dP - D_i), in place of P (masked entries stay 0 since P is 0 there)
            for (int r = 0; r < bq; r++) {
                float *prow = p + (size_t)r * B;
                const float *dprow = dp + (size_t)r * B;
                const float dr = D_i[r];
#pragma omp simd
                for (int c = 0; c < bk; c++)
                    prow[c] *= dprow[c] - dr;
            }
            // dK_j (bk, HS) += scale * dS^T (bk, bq) Q_i (bq, HS)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk, HS, bq, sh->scale, p, B, qi,
                        ldq, first ? 0.0f : 1.0f, dkj, ldk);
            // dQ_i (bq, HS) += scale * dS (bq, bk) K_j (bk, HS)
            if (bf) {
                attn_dq_get(dqt, dqacc, qoff, sh->ldq, bq, HS);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, HS, bk, sh->scale, p, B,
                            kj, ldk, 1.0f, dqt, HS);
                attn_dq_put(dqacc, qoff, sh->ldq, dqt, bq, HS);
            } else {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, HS, bk, sh->scale, p, B,
                            kj, ldk, 1.0f, (float *)dqacc + qoff, ldqo);
            }
            first = 0;
        }
    }
    if (bf) {
        attn_round_rows((uint16_t *)dk + koff, sh->ldk, dka, bk, HS, sh->bf16);
        attn_round_rows((uint16_t *)dv + koff, sh->ldk, dva, bk, HS, sh->bf16);
    }
}

ATTN_DEFINE_BLOCKS(KERNEL_CLONES)

const attn_ops attn_ops_portable = ATTN_OPS_INIT(ATTN_B, ATTN_B);
