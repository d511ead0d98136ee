/* attention_ref.c — plain reference twins of the causal GQA attention (contract: kernels_ref.h).
 *
 * Straight from the definition, one (head, query) row at a time, all sums in double:
 *     s_j = scale * q_i . k_j  (lo <= j <= i; lo = doc_start[i], 0 when doc_start is NULL),
 *     p_j = exp(s_j - max s) / sum,  out_i = sum_j p_j v_j,
 *     lse_i = max s + log(sum exp(s_j - max s)).
 * The backward recomputes everything (no saved out/lse):
 *     dv_j += p_j dO_i;  dp_j = dO_i . v_j;  D_i = dO_i . out_i;  ds_j = p_j (dp_j - D_i)
 *     dq_i = scale * sum_j ds_j k_j;  dk_j += scale * ds_j q_i
 * O(T^2 HS) time, O(T) scratch for the score row plus double accumulators for dk/dv. Slow. */
#include "kernels/kernels_ref.h"

#include "core/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void ref_attn_check(int T, int NH, int NKV, int HS) {
    UP_CHECK(T >= 1 && NH >= 1 && NKV >= 1 && HS >= 1 && NH % NKV == 0,
             "ref_attention: bad sizes T=%d NH=%d NKV=%d HS=%d", T, NH, NKV, HS);
}

static void *ref_attn_alloc(size_t n, size_t size) {
    void *p = calloc(n, size);
    UP_CHECK(p != NULL, "ref_attention: out of memory (%zu x %zu bytes)", n, size);
    return p;
}

/* First key query i sees. */
static int ref_attn_lo(const int32_t *doc_start, int i) {
    return doc_start ? doc_start[i] : 0;
}

/* Probabilities p[lo..i] of query i, head h; returns log-sum-exp of the scaled scores. */
static double ref_attn_probs(double *p, const float *q, const float *k, int lo, int i, int h,
                             int NH, int NKV, int HS) {
    const int G = NH / NKV;
    const double scale = 1.0 / sqrt((double)HS);
    const float *qi = q + ((size_t)i * NH + h) * HS;
    double mx = -INFINITY;
    for (int j = lo; j <= i; j++) {
        const float *kj = k + ((size_t)j * NKV + h / G) * HS;
        double s = 0.0;
        for (int e = 0; e < HS; e++)
            s += (double)qi[e] * kj[e];
        p[j] = s * scale;
        if (p[j] > mx) mx = p[j];
    }
    double sum = 0.0;
    for (int j = lo; j <= i; j++) {
        p[j] = exp(p[j] - mx);
        sum += p[j];
    }
    for (int j = lo; j <= i; j++)
        p[j] /= sum;
    return mx + log(sum);
}

void ref_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                           const int32_t *doc_start, int T, int NH, int NKV, int HS) {
    ref_attn_check(T, NH, NKV, HS);
    const int G = NH / NKV;
    double *p = ref_attn_alloc((size_t)T, sizeof(double));  // (T) one score row
    double *o = ref_attn_alloc((size_t)HS, sizeof(double)); // (HS)
    for (int h = 0; h < NH; h++) {
        for (int i = 0; i < T; i++) {
            const int lo = ref_attn_lo(doc_start, i);
            lse[(size_t)h * T + i] = (float)ref_attn_probs(p, q, k, lo, i, h, NH, NKV, HS);
            memset(o, 0, (size_t)HS * sizeof(double));
            for (int j = lo; j <= i; j++) {
                const float *vj = v + ((size_t)j * NKV + h / G) * HS;
                for (int e = 0; e < HS; e++)
                    o[e] += p[j] * vj[e];
            }
            float *oi = out + ((size_t)i * NH + h) * HS;
            for (int e = 0; e < HS; e++)
                oi[e] = (float)o[e];
        }
    }
    free(o);
    free(p);
}

void ref_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                            const float *k, const float *v, const int32_t *doc_start, int T, int NH,
                            int NKV, int HS) {
    ref_attn_check(T, NH, NKV, HS);
    const int G = NH / NKV;
    const double scale = 1.0 / sqrt((double)HS);
    const size_t nkv = (size_t)T * NKV * HS;
    double *p = ref_attn_alloc((size_t)T, sizeof(double));    // (T) probabilities of one row
    double *dsr = ref_attn_alloc((size_t)T, sizeof(double));  // (T) dS of one row
    double *o = ref_attn_alloc((size_t)HS, sizeof(double));   // (HS) recomputed output row
    double *dqr = ref_attn_alloc((size_t)HS, sizeof(double)); // (HS)
    double *dkd = ref_attn_alloc(nkv, sizeof(double));        // (T, NKV, HS) sums over the group
    double *dvd = ref_attn_alloc(nkv, sizeof(double));
    for (int h = 0; h < NH; h++) {
        const int kvh = h / G;
        for (int i = 0; i < T; i++) {
            const int lo = ref_attn_lo(doc_start, i);
            ref_attn_probs(p, q, k, lo, i, h, NH, NKV, HS);
            const float *qi = q + ((size_t)i * NH + h) * HS;
            const float *doi = dout + ((size_t)i * NH + h) * HS;
            memset(o, 0, (size_t)HS * sizeof(double));
            for (int j = lo; j <= i; j++) {
                const float *vj = v + ((size_t)j * NKV + kvh) * HS;
                for (int e = 0; e < HS; e++)
                    o[e] += p[j] * vj[e];
            }
            double D = 0.0; // dO_i . out_i
            for (int e = 0; e < HS; e++)
                D += (double)doi[e] * o[e];
            for (int j = lo; j <= i; j++) {
                const float *vj = v + ((size_t)j * NKV + kvh) * HS;
                double dp = 0.0;
                for (int e = 0; e < HS; e++)
                    dp += (double)doi[e] * vj[e];
                dsr[j] = p[j] * (dp - D);
                double *dvj = dvd + ((size_t)j * NKV + kvh) * HS;
                for (int e = 0; e < HS; e++)
                    dvj[e] += p[j] * doi[e];
            }
            memset(dqr, 0, (size_t)HS * sizeof(double));
            for (int j = lo; j <= i; j++) {
                const float *kj = k + ((size_t)j * NKV + kvh) * HS;
                double *dkj = dkd + ((size_t)j * NKV + kvh) * HS;
                for (int e = 0; e < HS; e++) {
                    dqr[e] += dsr[j] * kj[e];
                    dkj[e] += scale * dsr[j] * qi[e];
                }
            }
            float *dqi = dq + ((size_t)i * NH + h) * HS;
            for (int e = 0; e < HS; e++)
                dqi[e] = (float)(scale * dqr[e]);
        }
    }
    for (size_t e = 0; e < nkv; e++) {
        dk[e] = (float)dkd[e];
        dv[e] = (float)dvd[e];
    }
    free(dvd);
    free(dkd);
    free(dqr);
    free(o);
    free(dsr);
    free(p);
}
