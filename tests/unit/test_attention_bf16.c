/* test_attention_bf16.c — the attention kernels with bf16 operands (attention_forward_bf16,
 * attention_backward_bf16) against the fp32 kernels and the double reference.
 *
 * Inputs are random bf16 (uniform values rounded by bf16_from_f32); "widened" are their exact
 * fp32 values. Per kernel path this CPU runs, for T in {7, 300, 519} (none a multiple of 128;
 * and 1100 at GQA 4:2, HS 64: several blocks of 512, the dot-product path's),
 * (NH, NKV) in {(4, 4), (4, 2), (8, 2)} (G = 1, 2, 4), HS in {32, 64, 128} (and 24 and 25 at
 * T = 300: not a multiple of the vector width; odd, a pair of the head dimension with a zero
 * partner on the dot-product path), without documents
 * and with documents cut one off the tile boundaries:
 *  1. exact (the widening paths avx512, avx2, portable): the bf16 kernels' outputs are
 *     bf16_round of the same path's fp32 kernels on the widened inputs (the backward given the
 *     widened bf16 out), bit for bit, lse equal: the operands are widened exactly and every fp32
 *     sum is the fp32 kernel's (kernels.h).
 *  2. bound: against the double reference on the widened inputs, element-wise (derivation at
 *     bound_check); the dot-product path avx512bf16, which rounds P and dS to bf16 for its
 *     products, with the terms that rounding adds.
 *  3. threads: 1 vs 2 threads bit-identical where the fp32 kernels are (forward always; backward
 *     where NKV is a multiple of the thread count, the owner scheme), and a repeated call with
 *     3 threads (private dQ buffers) bit-identical to the first.
 *  4. paths: avx2 and avx512 give the same bf16 bits where their fp32 kernels do (forward; the
 *     backward in the owner scheme, see test_attention).
 *  5. faults (avx512bf16): a copy of that path compiled with deliberate faults (a swapped pair, a
 *     dropped tile, a document mask lost in a pair; attention_dp_body.h) fails check 2 on every
 *     problem of a set where the path itself passes it.
 * Every call gets NaN-filled workspace and outputs and guard values after each of them.
 * A path this CPU lacks is skipped with a line that says so.
 * Last line: "N passed, M failed"; exit 1 on any failure. */
#include "kernels/attention_tiles.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/kernels_ref.h"

#include "harness.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CANARY = 64 };

enum { NPATHS = 4 };
static const char *const path_names[NPATHS] = {"avx512bf16", "avx512", "avx2", "portable"};
/* The paths whose products run on a bf16 dot product (rounding P and dS): check 2 with the
 * terms of that rounding, no check 1. */
static int path_dot(int pi) {
    return pi == 0;
}

#if defined(__x86_64__)
/* tests/unit/attention_dp_faulty.c: the avx512bf16 path with deliberate faults. */
extern const attn_ops attn_ops_avx512bf16_faulty;
extern int attn_dp_fault;
#endif

static void *xalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test_attention_bf16: out of memory\n");
        exit(1);
    }
    return p;
}

/* Uniform in [-a, a), reproducible from the seed (test_attention's generator). */
static void fill_uniform(float *x, size_t n, uint64_t seed, float a) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = a * (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
}

static double max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)x[i]));
    return m;
}

/* doc_start (T): documents of lengths 127, 129, 255, 257 repeated (one off the boundaries). */
static int32_t *docs_make(int T) {
    static const int len[4] = {127, 129, 255, 257};
    int32_t *doc = xalloc((size_t)T * sizeof(int32_t));
    int start = 0, d = 0, left = len[0];
    for (int i = 0; i < T; i++) {
        if (left == 0) {
            start = i;
            d = (d + 1) % 4;
            left = len[d];
        }
        doc[i] = start;
        left--;
    }
    return doc;
}

/* One problem: bf16 inputs, their widened values, the reference on those. */
typedef struct {
    int T, NH, NKV, HS;
    const int32_t *doc;
    size_t nq, nk, nl;
    uint16_t *q, *k, *v, *dout;
    float *qf, *kf, *vf, *doutf;
    float *r_out, *r_lse, *r_dq, *r_dk, *r_dv;
} problem;

/* Outputs of one run. bf16 runs fill the uint16 ones, fp32 runs the float ones; lse is fp32. */
typedef struct {
    uint16_t *out, *dq, *dk, *dv;
    float *fout, *fdq, *fdk, *fdv, *lse;
} result;

static void bf16_random(uint16_t *b, float *f, size_t n, uint64_t seed, float a) {
    fill_uniform(f, n, seed, a);
    bf16_from_f32(f, b, n);
    f32_from_bf16(b, f, n);
}

static void problem_init(problem *p, int T, int NH, int NKV, int HS, const int32_t *doc,
                         uint64_t seed) {
    p->T = T, p->NH = NH, p->NKV = NKV, p->HS = HS, p->doc = doc;
    p->nq = (size_t)T * NH * HS, p->nk = (size_t)T * NKV * HS, p->nl = (size_t)NH * T;
    p->q = xalloc(p->nq * 2), p->dout = xalloc(p->nq * 2);
    p->k = xalloc(p->nk * 2), p->v = xalloc(p->nk * 2);
    p->qf = xalloc(p->nq * 4), p->doutf = xalloc(p->nq * 4);
    p->kf = xalloc(p->nk * 4), p->vf = xalloc(p->nk * 4);
    bf16_random(p->q, p->qf, p->nq, seed * 4 + 0, 1.0f);
    bf16_random(p->k, p->kf, p->nk, seed * 4 + 1, 1.0f);
    bf16_random(p->v, p->vf, p->nk, seed * 4 + 2, 1.0f);
    bf16_random(p->dout, p->doutf, p->nq, seed * 4 + 3, 1.0f);
    p->r_out = xalloc(p->nq * 4), p->r_lse = xalloc(p->nl * 4);
    p->r_dq = xalloc(p->nq * 4), p->r_dk = xalloc(p->nk * 4), p->r_dv = xalloc(p->nk * 4);
    ref_attention_forward(p->r_out, p->r_lse, p->qf, p->kf, p->vf, doc, T, NH, NKV, HS);
    ref_attention_backward(p->r_dq, p->r_dk, p->r_dv, p->doutf, p->qf, p->kf, p->vf, doc, T, NH,
                           NKV, HS);
}

static void problem_free(problem *p) {
    void *bufs[] = {p->q,     p->k,     p->v,     p->dout, p->qf,   p->kf,  p->vf,
                    p->doutf, p->r_out, p->r_lse, p->r_dq, p->r_dk, p->r_dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
}

static void result_init(result *r, const problem *p) {
    r->out = xalloc((p->nq + CANARY) * 2), r->dq = xalloc((p->nq + CANARY) * 2);
    r->dk = xalloc((p->nk + CANARY) * 2), r->dv = xalloc((p->nk + CANARY) * 2);
    r->fout = xalloc(p->nq * 4), r->fdq = xalloc(p->nq * 4);
    r->fdk = xalloc(p->nk * 4), r->fdv = xalloc(p->nk * 4);
    r->lse = xalloc((p->nl + CANARY) * 4);
}

static void result_free(result *r) {
    void *bufs[] = {r->out, r->dq, r->dk, r->dv, r->fout, r->fdq, r->fdk, r->fdv, r->lse};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
}

/* Guards: 0xBEEF after bf16 outputs, a float after the fp32 ones; NaN bits (0xFFFF, NaN) in the
 * outputs and the workspace before the calls ("any content" / overwrite). */
static const float canary_f = -12345.678f;

static void guard16(uint16_t *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = 0xFFFF;
    for (size_t i = 0; i < CANARY; i++)
        x[n + i] = 0xBEEF;
}

static int guard16_ok(const uint16_t *x, size_t n) {
    for (size_t i = 0; i < CANARY; i++)
        if (x[n + i] != 0xBEEF) return 0;
    return 1;
}

static void guardf(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
    for (size_t i = 0; i < CANARY; i++)
        x[n + i] = canary_f;
}

static int guardf_ok(const float *x, size_t n) {
    for (size_t i = 0; i < CANARY; i++)
        if (x[n + i] != canary_f) return 0;
    return 1;
}

static void set_path(const char *name) {
    char err[256];
    CHECK(kernel_path_set(name, err, sizeof err) == 0, "%s", err);
}

/* The bf16 kernels with `threads` threads: r->out, lse, dq, dk, dv. */
static void run_bf16(const problem *p, result *r, int threads, const char *tag) {
    omp_set_num_threads(threads);
    const size_t nws = attention_workspace_floats_bf16(p->T, p->NH, p->NKV, p->HS);
    float *ws = xalloc((nws + CANARY) * 4);
    guardf(ws, nws);
    guard16(r->out, p->nq);
    guardf(r->lse, p->nl);
    attention_forward_bf16(r->out, r->lse, p->q, p->k, p->v, p->doc, p->T, p->NH, p->NKV, p->HS,
                           ws);
    int ok = guardf_ok(ws, nws) && guard16_ok(r->out, p->nq) && guardf_ok(r->lse, p->nl);
    guardf(ws, nws);
    guard16(r->dq, p->nq);
    guard16(r->dk, p->nk);
    guard16(r->dv, p->nk);
    attention_backward_bf16(r->dq, r->dk, r->dv, p->dout, p->q, p->k, p->v, r->out, r->lse, p->doc,
                            p->T, p->NH, p->NKV, p->HS, ws);
    ok &= guardf_ok(ws, nws) && guard16_ok(r->dq, p->nq) && guard16_ok(r->dk, p->nk) &&
          guard16_ok(r->dv, p->nk);
    CHECK(ok, "%s threads=%d: write past an output or the workspace", tag, threads);
    free(ws);
}

/* The fp32 kernels on the widened inputs; the backward gets the widened bf16 out of `b` (what
 * the bf16 backward reads) and the fp32 lse. */
static void run_fp32(const problem *p, result *r, const result *b, int threads) {
    omp_set_num_threads(threads);
    const size_t nws = attention_workspace_floats(p->T, p->NH, p->NKV, p->HS);
    float *ws = xalloc(nws * 4);
    float *lse = xalloc(p->nl * 4), *outw = xalloc(p->nq * 4);
    attention_forward(r->fout, lse, p->qf, p->kf, p->vf, p->doc, p->T, p->NH, p->NKV, p->HS, ws);
    memcpy(r->lse, lse, p->nl * 4);
    f32_from_bf16(b->out, outw, p->nq);
    attention_backward(r->fdq, r->fdk, r->fdv, p->doutf, p->qf, p->kf, p->vf, outw, b->lse, p->doc,
                       p->T, p->NH, p->NKV, p->HS, ws);
    free(ws);
    free(lse);
    free(outw);
}

/* Index of the first element where bf16 b differs from bf16_round(f), or -1. */
static long first_unrounded(const uint16_t *b, const float *f, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != bf16_round(f[i])) return (long)i;
    return -1;
}

/* 1. exact: the bf16 results are the fp32 kernel's rounded once. */
static void exact_check(const problem *p, const result *b, const result *f, const char *tag) {
    const uint16_t *bs[4] = {b->out, b->dq, b->dk, b->dv};
    const float *fs[4] = {f->fout, f->fdq, f->fdk, f->fdv};
    const size_t ns[4] = {p->nq, p->nq, p->nk, p->nk};
    const char *names[4] = {"out", "dq", "dk", "dv"};
    for (int t = 0; t < 4; t++) {
        const long i = first_unrounded(bs[t], fs[t], ns[t]);
        CHECK(i < 0, "%s: %s[%ld] = 0x%04x, not bf16_round of the fp32 kernel's %.9g", tag,
              names[t], i, i < 0 ? 0 : bs[t][i], i < 0 ? 0.0 : (double)fs[t][i]);
    }
    CHECK(memcmp(b->lse, f->lse, p->nl * 4) == 0, "%s: lse differs from the fp32 kernel's", tag);
}

/* 2. bound against the double reference on the widened inputs (per element, x = bf16 result,
 * r = reference rounded to fp32, y = the fp32 value that x rounds):
 *   - rounding: bf16 keeps 8 significant bits, so round-to-nearest moves y by at most half an
 *     ulp, |x - y| <= u |y| with u = 2^-8 (half an ulp is 2^-8 of the power of two below |y|,
 *     which is <= |y|; the worst case is y just above a power of two).
 *   - fp32: |y - r| <= e32, the fp32 kernel's error, which test_attention bounds by 1e-5 of
 *     max|r| for these inputs in [-1, 1] (TOL_FWD, TOL_BWD there, with their derivation);
 *     the reference's own rounding to fp32 (2^-24 |r|) is inside it.
 *   Hence |x - r| <= u |y| + e32 <= u |r| + (1 + u) e32.
 *   - the backward also reads the bf16 out (D = rowsum(dO * O) from the rounded O, as training
 *     stores it), where the reference uses the exact one: D_i moves by dD_i = dO_i . (O_bf16 -
 *     O_ref)_i (computed here in double), dS by p_ij dD_i, so dq_i moves by at most
 *     scale |dD_i| max|k| (the p_ij of a row sum to 1), dk_j by at most scale max|q| sum_{h, i}
 *     p_hij |dD_hi| (W_j below, p from the reference's lse), and dv not at all. That term is
 *     added (times 1 + u) to e32 for dq and dk.
 *   - dot (the avx512bf16 path): the products P V, P^T dO, dS^T Q and dS K take P and dS rounded
 *     to bf16 (each bf16 x bf16 product is then exact in fp32, and the sums are fp32 sums as in
 *     the fp32 kernel, inside e32). A rounded term t (1 + d), |d| <= u, moves its sum by at most
 *     u |t|, so the sums move by at most u times the sums of the absolute terms:
 *         out_i:  u sum_j P_ij |v_j|                  (P_ij = p_ij / l_i, a row sums to 1)
 *         dv_j:   u sum_{h,i} P_hij |dO_hi|
 *         dk_j:   u sum_{h,i} |dS_hij| |q_hi|,   dq_i:  u sum_j |dS_hij| |k_j|
 *     element by element (A below, in double from the reference's P), with the kernel's
 *     |dS_hij| = scale P_hij |dP_hij - D_hi| <= scale P_hij (|dP_hij - D_hi,ref| + |dD_hi|)
 *     (its D carries dD). The second-order terms (u times the fp32 errors of P and dS, about
 *     2^-8 * 1e-6 relative) are inside the factor 1 + u on e32. The bound becomes
 *         |x - r| <= u |r| + (1 + u) (e32 + D term + u A).
 *     These four terms are 2^-8 of a sum of absolute values, which the errors of random signs
 *     reach only in part: the check is a bound, and check 5 shows it is tight enough to catch
 *     a wrong pair, a lost tile or a wrong rounding.
 * The bound is checked element by element, lse (fp32) against e32 alone. Returns 1 if it holds
 * (else why says where it first fails); worst[] gets the largest |x - r| / bound. */
#define E32_REL 1e-5

static int bound_check(const problem *p, const result *b, int dot, const char *tag, double worst[5],
                       char *why, size_t len) {
    const int T = p->T, NH = p->NH, NKV = p->NKV, HS = p->HS, G = NH / NKV;
    const double scale = 1.0 / sqrt((double)HS), u = 1.0 / 256.0, c = 1.0 + u;
    const size_t row = (size_t)NH * HS, krow = (size_t)NKV * HS;
    // dD (NH, T) from the bf16 out, Dr (NH, T) from the reference's, and W (NKV, T)
    double *dD = xalloc(p->nl * sizeof(double)), *Dr = xalloc(p->nl * sizeof(double));
    double *W = calloc((size_t)NKV * T, sizeof(double));
    // dot: the sums of absolute terms A of out, dq (T, NH, HS) and dk, dv (T, NKV, HS)
    double *A[4] = {NULL, NULL, NULL, NULL};
    for (int t = 0; dot && t < 4; t++)
        A[t] = calloc(t < 2 ? p->nq : p->nk, sizeof(double));
    if (!W || (dot && (!A[0] || !A[1] || !A[2] || !A[3]))) exit(1);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NH; h++) {
            double s = 0.0, sr = 0.0;
            for (int e = 0; e < HS; e++) {
                const size_t i = (size_t)t * row + (size_t)h * HS + e;
                s += (double)p->doutf[i] * ((double)bf16_widen(b->out[i]) - (double)p->r_out[i]);
                sr += (double)p->doutf[i] * p->r_out[i];
            }
            dD[(size_t)h * T + t] = s;
            Dr[(size_t)h * T + t] = sr;
        }
    for (int h = 0; h < NH; h++)
        for (int i = 0; i < T; i++) {
            const int lo = p->doc ? p->doc[i] : 0;
            const size_t qo = (size_t)i * row + (size_t)h * HS;
            const float *qi = p->qf + qo, *di = p->doutf + qo;
            const double dDi = fabs(dD[(size_t)h * T + i]), Di = Dr[(size_t)h * T + i];
            for (int j = lo; j <= i; j++) {
                const size_t ko = (size_t)j * krow + (size_t)(h / G) * HS;
                const float *kj = p->kf + ko, *vj = p->vf + ko;
                double s = 0.0, dP = 0.0;
                for (int e = 0; e < HS; e++) {
                    s += (double)qi[e] * kj[e];
                    dP += (double)di[e] * vj[e];
                }
                const double pij = exp(s * scale - p->r_lse[(size_t)h * T + i]);
                W[(size_t)(h / G) * T + j] += pij * dDi;
                if (!dot) continue;
                const double g = scale * pij * (fabs(dP - Di) + dDi); // >= the kernel's |dS|
                for (int e = 0; e < HS; e++) {
                    A[0][qo + e] += pij * fabs(vj[e]);
                    A[1][qo + e] += g * fabs(kj[e]);
                    A[2][ko + e] += g * fabs(qi[e]);
                    A[3][ko + e] += pij * fabs(di[e]);
                }
            }
        }
    const double maxq = max_abs(p->qf, p->nq), maxk = max_abs(p->kf, p->nk);
    const uint16_t *bs[4] = {b->out, b->dq, b->dk, b->dv};
    const float *rs[4] = {p->r_out, p->r_dq, p->r_dk, p->r_dv};
    const size_t ns[4] = {p->nq, p->nq, p->nk, p->nk};
    const char *names[4] = {"out", "dq", "dk", "dv"};
    int ok = 1;
    for (int t = 0; t < 4; t++) {
        const double e32 = E32_REL * max_abs(rs[t], ns[t]);
        long bad = -1;
        double excess = 0.0, bad_bound = 0.0; // worst |x - r| / bound
        for (size_t i = 0; i < ns[t]; i++) {
            const double x = bf16_widen(bs[t][i]), r = rs[t][i];
            double extra = dot ? u * A[t][i] : 0.0;
            if (t == 1) { // dq: token i / row, head (i % row) / HS
                const size_t tok = i / row, h = (i % row) / HS;
                extra += scale * fabs(dD[h * T + tok]) * maxk;
            } else if (t == 2) { // dk: token i / krow, KV head (i % krow) / HS
                const size_t tok = i / krow, kvh = (i % krow) / HS;
                extra += scale * maxq * W[kvh * T + tok];
            }
            const double bound = u * fabs(r) + c * (e32 + extra);
            const double d = fabs(x - r);
            if (!(d <= bound) && bad < 0) bad = (long)i, bad_bound = bound;
            if (bound > 0 && d / bound > excess) excess = d / bound;
        }
        if (bad >= 0 && ok) {
            snprintf(why, len, "%s: %s[%ld] = %.9g vs reference %.9g: outside the bound %.3g", tag,
                     names[t], bad, (double)bf16_widen(bs[t][bad]), rs[t][bad], bad_bound);
            ok = 0;
        }
        if (excess > worst[t + (t > 0)]) worst[t + (t > 0)] = excess;
    }
    double e = 0.0;
    for (size_t i = 0; i < p->nl; i++)
        e = fmax(e, fabs((double)b->lse[i] - p->r_lse[i]));
    const double lb = E32_REL * max_abs(p->r_lse, p->nl);
    if (!(e <= lb) && ok) {
        snprintf(why, len, "%s: lse err %.3g > %.3g", tag, e, lb);
        ok = 0;
    }
    if (lb > 0 && e / lb > worst[1]) worst[1] = e / lb;
    free(dD);
    free(Dr);
    free(W);
    for (int t = 0; t < 4; t++)
        free(A[t]);
    return ok;
}

static int same16(const uint16_t *a, const uint16_t *b, size_t n) {
    return memcmp(a, b, n * 2) == 0;
}

/* All bf16 outputs and lse of a and b equal; fwd_only: out and lse only. */
static int same_result(const problem *p, const result *a, const result *b, int fwd_only) {
    int ok = same16(a->out, b->out, p->nq) && memcmp(a->lse, b->lse, p->nl * 4) == 0;
    if (!fwd_only)
        ok = ok && same16(a->dq, b->dq, p->nq) && same16(a->dk, b->dk, p->nk) &&
             same16(a->dv, b->dv, p->nk);
    return ok;
}

/* 5. The avx512bf16 path's faults (attention_dp_body.h; the copy in attention_dp_faulty.c, run
 * through the same drivers): without a fault the copy passes check 2 (it is the path's code),
 * and each fault fails it on every problem of the set (GQA, odd T, with and without documents,
 * HS 64, 24 and 32) where it changes the arithmetic (fault 3: with documents). */
static void test_faults(void) {
#if defined(__x86_64__)
    if (!kernel_path_supported("avx512bf16")) {
        printf("faults of avx512bf16: skipped (this CPU lacks AVX512_BF16)\n");
        return;
    }
    static const char *const fault_names[4] = {"none", "a pair of V swapped (forward)",
                                               "a tile dropped (backward)",
                                               "a document's previous key unmasked in a pair"};
    const int shapes[][4] = {{300, 4, 2, 64}, {519, 8, 2, 24}, {300, 4, 4, 32}};
    double worst[5] = {0};
    uint64_t seed = 1000;
    for (int sh = 0; sh < 3; sh++)
        for (int d = 0; d < 2; d++) {
            const int T = shapes[sh][0];
            int32_t *doc = d ? docs_make(T) : NULL;
            problem p;
            problem_init(&p, T, shapes[sh][1], shapes[sh][2], shapes[sh][3], doc, seed++);
            result r;
            result_init(&r, &p);
            for (int f = 0; f < 4; f++) {
                char tag[160], why[320] = "";
                snprintf(tag, sizeof tag,
                         "avx512bf16 fault %d (%s) T=%d NH=%d NKV=%d HS=%d docs=%s", f,
                         fault_names[f], T, p.NH, p.NKV, p.HS, d ? "yes" : "NULL");
                attn_dp_fault = f;
                attention_ops_override(&attn_ops_avx512bf16_faulty);
                run_bf16(&p, &r, 2, tag);
                attention_ops_override(NULL);
                const int ok = bound_check(&p, &r, 1, tag, worst, why, sizeof why);
                if (f == 0)
                    CHECK(ok, "%s", why);
                else if (f != 3 || doc) // (fault 3 needs a document start inside a block)
                    CHECK(!ok, "%s: passes the bound check", tag);
                if (f > 0 && !ok && sh == 0 && d == 1) printf("caught: %s\n", why);
            }
            result_free(&r);
            problem_free(&p);
            free(doc);
        }
    attn_dp_fault = 0;
#endif
}

int main(void) {
    double t0 = omp_get_wtime();
    for (int i = 0; i < NPATHS; i++)
        printf("path %s: %s\n", path_names[i],
               kernel_path_supported(path_names[i]) ? "tested" : "skipped (this CPU lacks it)");
    const int Ts[] = {7, 300, 519, 1100};
    const int heads[][2] = {{4, 4}, {4, 2}, {8, 2}};
    const int HSs[] = {32, 64, 128, 24, 25}; // 24, 25 (T = 300 only): tails, an odd HS
    /* UPIPE_TEST_QUICK (the sanitizer run, tools/ci-sanitize.sh, where the double reference is
     * tens of times slower): T = 7 and 300, HS = 32 and 24 only; every path, GQA shape, document
     * case and check still runs */
    const int quick = getenv("UPIPE_TEST_QUICK") != NULL;
    double worst[NPATHS][5] = {{0}}; // worst |err| / bound: out, lse, dq, dk, dv
    uint64_t seed = 1;
    for (int a = 0; a < 4; a++)
        for (int hb = 0; hb < 3; hb++)
            for (int c = 0; c < 5; c++)
                for (int d = 0; d < 2; d++) {
                    if (c >= 3 && a != 1) continue;
                    if (a == 3 && (hb != 1 || c != 1)) continue;
                    if (quick && (a >= 2 || c == 1 || c == 2)) continue;
                    const int T = Ts[a];
                    int32_t *doc = d ? docs_make(T) : NULL;
                    problem p;
                    problem_init(&p, T, heads[hb][0], heads[hb][1], HSs[c], doc, seed++);
                    result b1, b2, f, avx512;
                    result_init(&b1, &p), result_init(&b2, &p), result_init(&f, &p);
                    result_init(&avx512, &p);
                    int have512 = 0;
                    for (int pi = 0; pi < NPATHS; pi++) {
                        if (!kernel_path_supported(path_names[pi])) continue;
                        set_path(path_names[pi]);
                        char tag[160];
                        snprintf(tag, sizeof tag, "%s T=%d NH=%d NKV=%d HS=%d docs=%s",
                                 path_names[pi], T, p.NH, p.NKV, p.HS, d ? "yes" : "NULL");
                        const int dot = path_dot(pi);
                        char why[320];
                        run_bf16(&p, &b2, 2, tag);
                        if (!dot) {
                            run_fp32(&p, &f, &b2, 2);
                            exact_check(&p, &b2, &f, tag);
                        }
                        CHECK(bound_check(&p, &b2, dot, tag, worst[pi], why, sizeof why), "%s",
                              why);
                        // 3. threads: 1 vs 2 (the owner scheme at both counts: NKV even)
                        run_bf16(&p, &b1, 1, tag);
                        CHECK(same_result(&p, &b1, &b2, 0), "%s: 1 vs 2 threads differ", tag);
                        if (a >= 2) { // 3 threads: private dQ buffers; reproducible
                            run_bf16(&p, &b1, 3, tag);
                            run_bf16(&p, &b2, 3, tag);
                            CHECK(same_result(&p, &b1, &b2, 0), "%s: 3 threads not reproducible",
                                  tag);
                            if (!dot) {
                                run_fp32(&p, &f, &b2, 3);
                                exact_check(&p, &b2, &f, tag);
                            } else {
                                CHECK(bound_check(&p, &b2, dot, tag, worst[pi], why, sizeof why),
                                      "%s (3 threads)", why);
                            }
                            run_bf16(&p, &b2, 2, tag);
                        }
                        // 4. avx2 vs avx512 (owner scheme at 2 threads: all outputs)
                        if (!strcmp(path_names[pi], "avx512")) {
                            have512 = 1;
                            memcpy(avx512.out, b2.out, p.nq * 2);
                            memcpy(avx512.lse, b2.lse, p.nl * 4);
                            memcpy(avx512.dq, b2.dq, p.nq * 2);
                            memcpy(avx512.dk, b2.dk, p.nk * 2);
                            memcpy(avx512.dv, b2.dv, p.nk * 2);
                        } else if (!strcmp(path_names[pi], "avx2") && have512) {
                            CHECK(same_result(&p, &b2, &avx512, 0), "%s: avx2 vs avx512 differ",
                                  tag);
                        }
                    }
                    result_free(&b1), result_free(&b2), result_free(&f), result_free(&avx512);
                    problem_free(&p);
                    free(doc);
                }
    test_faults();
    for (int i = 0; i < NPATHS; i++)
        if (kernel_path_supported(path_names[i]))
            printf("bf16 [%s]: worst |err|/bound out %.2g lse %.2g dq %.2g dk %.2g dv %.2g\n",
                   path_names[i], worst[i][0], worst[i][1], worst[i][2], worst[i][3], worst[i][4]);
    printf("test_attention_bf16: %.1f s\n", omp_get_wtime() - t0);
    return harness_finish("test_attention_bf16");
}
