/* test_attention.c — the causal GQA attention kernels against their reference twins and against
 * finite differences.
 *
 * Checks
 *  1. fast vs ref: forward out and lse, backward dq, dk, dv, for T in {1, 7, 129, 300} (one token,
 *     less than a tile, a tile + 1, a partial last tile), (NH, NKV) in {(4,4), (4,2), (8,1)}
 *     (MHA, GQA, MQA), HS in {16, 24, 64, 128} (24: not a multiple of the vector width).
 *  2. thread counts 1, 2, 3 at T = 520: both backward schemes (KV heads owned by threads; private
 *     dQ buffers) give the ref's answer, and the backward is bit-for-bit reproducible.
 *  3. finite differences in double on T=5, NH=2, NKV=1, HS=4, loss = sum(out * g): the ref
 *     backward and the fast backward against central differences.
 *  4. large scores (q and k scaled by 30, scores ~ +-300, far beyond exp's fp32 range): finite,
 *     and equal to the ref within the fp32 score-error bound: proves the online softmax.
 *  5. attention_workspace_floats grows linearly in T (not quadratically).
 *  6. documents (doc_start): fast vs ref for layouts of documents shorter and longer than a tile,
 *     on tile boundaries (128, 256) and one off them, single-token documents, many tiny ones,
 *     a window that starts mid-document; T in {1, 7, 129, 300, 700}, MHA/GQA/MQA, HS 16..128.
 *     doc_start all 0 gives bit-for-bit the result of NULL.
 *  7. documents with 1, 2, 3 threads (both backward schemes) and reproducibility; finite
 *     differences of the masked backward (in 3.); large scores with documents (in 4.).
 *  8. a packed window equals its documents run one by one (doc_start NULL): out, lse, dq, dk, dv
 *     within fp32 rounding, bit-for-bit when every document starts on a 256 boundary.
 *  9. path selection: an unknown name is refused with a message; portable runs everywhere.
 * 10. avx2 and avx512 give the same bits where they share the schedule; avx512bf16's fp32
 *     kernels are avx512's (the same functions): the same bits everywhere.
 * Every call gets a workspace and outputs filled with NaN first ("any content" / overwrite), and
 * guard floats after each of them that must survive (the workspace covers all scratch).
 * Every check runs on each kernel path this CPU runs (avx512bf16, avx512, avx2, portable:
 * kernels.h), each
 * against the same double reference (computed once per problem) and finite differences; a path
 * the CPU lacks is reported as skipped. The paths are one algorithm on
 * different blocks and vector widths: the same fp32 error sources, hence the same tolerances.
 * Last line: "N passed, M failed"; exit 1 on any failure. */
#include "kernels/kernels.h"
#include "kernels/kernels_ref.h"

#include "harness.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CANARY = 64 }; // guard floats after outputs and workspace

/* The kernel paths (kernels.h). Every check runs on each path this CPU runs, against one
 * reference computed once per problem. */
enum { NPATHS = 4 };
static const char *const path_names[NPATHS] = {"avx512bf16", "avx512", "avx2", "portable"};
static const char *g_path = ""; // the path under test, for the messages
static int g_pi;                // and its index

/* Chooses the next path this CPU runs from index *i on; 0 when none is left. */
static int path_next(int *i) {
    for (; *i < NPATHS; (*i)++)
        if (kernel_path_supported(path_names[*i])) {
            char err[256];
            CHECK(kernel_path_set(path_names[*i], err, sizeof err) == 0, "%s", err);
            g_pi = *i;
            g_path = path_names[(*i)++];
            return 1;
        }
    return 0;
}
#define FOR_EACH_PATH for (int path_i_ = 0; path_next(&path_i_);)

static float *talloc(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "test_attention: out of memory\n");
        exit(1);
    }
    return p;
}

static void fill_nan(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
}

/* Uniform in [-a, a), reproducible from the seed. */
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

/* max |a - b| / max |b|; infinite if a holds a NaN or an Inf. */
static double rel_err(const float *a, const float *b, size_t n) {
    double e = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        e = fmax(e, fabs((double)a[i] - (double)b[i]));
    }
    double m = max_abs(b, n);
    return m > 0.0 ? e / m : e;
}

/* One problem: inputs, fast and ref outputs. */
typedef struct {
    int T, NH, NKV, HS;
    const int32_t *doc; // (T) doc_start or NULL (not owned)
    size_t nq, nk;
    float *q, *k, *v, *dout;
    float *out, *lse, *dq, *dk, *dv;           // fast
    float *r_out, *r_lse, *r_dq, *r_dk, *r_dv; // ref
} problem;

static void problem_init(problem *p, int T, int NH, int NKV, int HS, uint64_t seed, float qk_amp) {
    p->T = T, p->NH = NH, p->NKV = NKV, p->HS = HS;
    p->doc = NULL;
    p->nq = (size_t)T * NH * HS;
    p->nk = (size_t)T * NKV * HS;
    p->q = talloc(p->nq), p->k = talloc(p->nk), p->v = talloc(p->nk), p->dout = talloc(p->nq);
    p->out = talloc(p->nq + CANARY), p->lse = talloc((size_t)NH * T + CANARY);
    p->dq = talloc(p->nq + CANARY), p->dk = talloc(p->nk + CANARY), p->dv = talloc(p->nk + CANARY);
    p->r_out = talloc(p->nq), p->r_lse = talloc((size_t)NH * T);
    p->r_dq = talloc(p->nq), p->r_dk = talloc(p->nk), p->r_dv = talloc(p->nk);
    fill_uniform(p->q, p->nq, seed * 4 + 0, qk_amp);
    fill_uniform(p->k, p->nk, seed * 4 + 1, qk_amp);
    fill_uniform(p->v, p->nk, seed * 4 + 2, 1.0f);
    fill_uniform(p->dout, p->nq, seed * 4 + 3, 1.0f);
}

static void problem_free(problem *p) {
    float *bufs[] = {p->q,  p->k,  p->v,     p->dout,  p->out,  p->lse,  p->dq,
                     p->dk, p->dv, p->r_out, p->r_lse, p->r_dq, p->r_dk, p->r_dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
}

static void problem_ref(problem *p) {
    ref_attention_forward(p->r_out, p->r_lse, p->q, p->k, p->v, p->doc, p->T, p->NH, p->NKV, p->HS);
    ref_attention_backward(p->r_dq, p->r_dk, p->r_dv, p->dout, p->q, p->k, p->v, p->doc, p->T,
                           p->NH, p->NKV, p->HS);
}

/* Canary floats after every output and after the workspace: the kernels must write only inside
 * their outputs and their workspace (which must therefore cover all their scratch). */
static const float canary_value = -12345.678f;

static void canary_set(float *x, size_t n) {
    for (size_t i = 0; i < CANARY; i++)
        x[n + i] = canary_value;
}

static int canary_ok(const float *x, size_t n) {
    for (size_t i = 0; i < CANARY; i++)
        if (x[n + i] != canary_value) return 0;
    return 1;
}

/* Fast forward + backward with `threads` OpenMP threads, NaN-filled workspace and outputs. */
static void problem_fast(problem *p, int threads) {
    omp_set_num_threads(threads);
    const size_t nws = attention_workspace_floats(p->T, p->NH, p->NKV, p->HS);
    const size_t nl = (size_t)p->NH * p->T;
    float *ws = talloc(nws + CANARY);
    fill_nan(ws, nws);
    fill_nan(p->out, p->nq);
    fill_nan(p->lse, nl);
    fill_nan(p->dq, p->nq);
    fill_nan(p->dk, p->nk);
    fill_nan(p->dv, p->nk);
    float *outs[] = {ws, p->out, p->lse, p->dq, p->dk, p->dv};
    const size_t ns[] = {nws, p->nq, nl, p->nq, p->nk, p->nk};
    for (int i = 0; i < 6; i++)
        canary_set(outs[i], ns[i]);
    attention_forward(p->out, p->lse, p->q, p->k, p->v, p->doc, p->T, p->NH, p->NKV, p->HS, ws);
    fill_nan(ws, nws);
    attention_backward(p->dq, p->dk, p->dv, p->dout, p->q, p->k, p->v, p->out, p->lse, p->doc, p->T,
                       p->NH, p->NKV, p->HS, ws);
    int ok = 1;
    for (int i = 0; i < 6; i++)
        ok &= canary_ok(outs[i], ns[i]);
    char what[160];
    snprintf(what, sizeof what,
             "%s: T=%d NH=%d NKV=%d HS=%d threads=%d: write past an output or the "
             "workspace",
             g_path, p->T, p->NH, p->NKV, p->HS, threads);
    CHECK(ok, "%s", what);
    free(ws);
}

/* Tolerance of fast vs ref for inputs in [-1, 1]. The ref accumulates in double and rounds once,
 * so the difference is the fast kernel's fp32 error: each score is an HS-term fp32 dot product
 * (relative error ~ sqrt(HS) * 6e-8 for random signs, |s| <= ~5 here), exp adds ~2 ulp, and every
 * output is a sum over up to T terms in fp32 plus the online-softmax rescales: ~1e-7 .. 1e-6
 * relative to the tensor's scale (measured worst over the grid: out 2e-7, lse 3e-7). 1e-5
 * relative to max|ref| leaves margin for other blockings (the sgemm path, other T), while a
 * wrong mask, a missed tile, a wrong KV head or a wrong scale gives errors of 1e-3 .. 1. */
#define TOL_FWD 1e-5
/* The backward has the same error sources plus the difference dP - D (D = dO . O is a sum of
 * HS fp32 products, both O(1)), whose fp32 rounding ~1e-7 absolute is relative to |dS| ~ p;
 * gradients sum up to T such terms (measured worst: dq 9e-7, dk 1.6e-6, dv 1.3e-6 relative to
 * max|ref|): the same 1e-5 keeps a 6x margin. */
#define TOL_BWD 1e-5

static void compare(problem *p, double tol_f, double tol_b, const char *tag, double *worst) {
    char what[256];
    const size_t nl = (size_t)p->NH * p->T;
    double e[5] = {rel_err(p->out, p->r_out, p->nq), rel_err(p->lse, p->r_lse, nl),
                   rel_err(p->dq, p->r_dq, p->nq), rel_err(p->dk, p->r_dk, p->nk),
                   rel_err(p->dv, p->r_dv, p->nk)};
    const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
        double tol = i < 2 ? tol_f : tol_b;
        snprintf(what, sizeof what, "%s: %s T=%d NH=%d NKV=%d HS=%d: %s rel err %.3g > %.1g",
                 g_path, tag, p->T, p->NH, p->NKV, p->HS, names[i], e[i], tol);
        CHECK(e[i] <= tol, "%s", what);
        if (worst && e[i] > worst[i]) worst[i] = e[i];
    }
}

/* One line per path that ran: the worst errors of a group of problems. */
static void print_worst(const char *what, double worst[NPATHS][5]) {
    for (int i = 0; i < NPATHS; i++)
        if (kernel_path_supported(path_names[i]))
            printf("%s [%s]: worst rel err out %.2g lse %.2g dq %.2g dk %.2g dv %.2g\n", what,
                   path_names[i], worst[i][0], worst[i][1], worst[i][2], worst[i][3], worst[i][4]);
}

/* ---- documents ------------------------------------------------------------------------------ */

/* A layout: document lengths, repeated until T (the last document cut at T). */
typedef struct {
    const char *name;
    int n, len[6];
} doc_layout;

static const doc_layout layouts[] = {
    {"one document (all 0)", 1, {1 << 30}},
    {"shorter than a tile", 4, {50, 37, 90, 13}},
    {"longer than a tile", 3, {300, 170, 260}},
    {"on 128 boundaries", 1, {128}},
    {"on 256 boundaries", 3, {256, 128, 384}},
    {"one off the boundaries", 4, {127, 129, 255, 257}},
    {"single tokens", 5, {1, 200, 1, 1, 60}},
    {"many tiny", 5, {1, 2, 3, 4, 5}},
    {"window from mid-document", 3, {77, 129, 500}},
};
enum { NLAYOUTS = sizeof layouts / sizeof layouts[0] };

/* doc_start (T) of the layout. */
static int32_t *docs_make(const doc_layout *L, int T) {
    int32_t *doc = malloc((size_t)T * sizeof(int32_t));
    if (!doc) {
        fprintf(stderr, "test_attention: out of memory\n");
        exit(1);
    }
    int start = 0, d = 0, left = L->len[0];
    for (int i = 0; i < T; i++) {
        if (left == 0) {
            start = i;
            d = (d + 1) % L->n;
            left = L->len[d];
        }
        doc[i] = start;
        left--;
    }
    return doc;
}

/* 1. fast vs ref over the shape grid (default thread count). */
static void test_shapes(void) {
    const int Ts[] = {1, 7, 129, 300};
    const int heads[][2] = {{4, 4}, {4, 2}, {8, 1}};
    const int HSs[] = {16, 24, 64, 128};
    double worst[NPATHS][5] = {{0}};
    uint64_t seed = 1;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 4; c++) {
                problem p;
                problem_init(&p, Ts[a], heads[b][0], heads[b][1], HSs[c], seed++, 1.0f);
                problem_ref(&p);
                FOR_EACH_PATH {
                    problem_fast(&p, 2);
                    compare(&p, TOL_FWD, TOL_BWD, "shapes", worst[g_pi]);
                }
                problem_free(&p);
            }
    print_worst("shapes", worst);
}

/* 2. thread counts and reproducibility. 3 threads with NKV = 4 or 2 takes the private-dQ-buffer
 * scheme; 2 threads with NKV = 4 or 2 the owner scheme; NKV = 1 with 2 threads the buffers. */
static void test_threads(const doc_layout *L) {
    const int heads[][2] = {{8, 4}, {4, 2}, {8, 1}};
    for (int b = 0; b < 3; b++) {
        problem p;
        // T = 520: several 128- and 256-blocks and a partial one (all diagonal cases)
        problem_init(&p, 520, heads[b][0], heads[b][1], 24, 100 + (uint64_t)b, 1.0f);
        int32_t *doc = L ? docs_make(L, p.T) : NULL;
        p.doc = doc;
        problem_ref(&p);
        FOR_EACH_PATH
        for (int th = 1; th <= 3; th++) {
            char tag[128];
            snprintf(tag, sizeof tag, "threads=%d docs=%s", th, L ? L->name : "NULL");
            problem_fast(&p, th);
            compare(&p, TOL_FWD, TOL_BWD, tag, NULL);
            // same call again: the backward must be bit-for-bit identical (fixed assignment)
            float *dq1 = talloc(p.nq), *dk1 = talloc(p.nk), *dv1 = talloc(p.nk);
            memcpy(dq1, p.dq, p.nq * sizeof(float));
            memcpy(dk1, p.dk, p.nk * sizeof(float));
            memcpy(dv1, p.dv, p.nk * sizeof(float));
            problem_fast(&p, th);
            char what[256];
            snprintf(what, sizeof what, "%s NH=%d NKV=%d: backward not reproducible", tag,
                     heads[b][0], heads[b][1]);
            CHECK(memcmp(dq1, p.dq, p.nq * sizeof(float)) == 0 &&
                      memcmp(dk1, p.dk, p.nk * sizeof(float)) == 0 &&
                      memcmp(dv1, p.dv, p.nk * sizeof(float)) == 0,
                  "%s", what);
            free(dq1);
            free(dk1);
            free(dv1);
        }
        problem_free(&p);
        free(doc);
    }
    omp_set_num_threads(2);
}

/* Loss sum(out * g) of causal GQA attention, all in double (for finite differences); query i
 * sees keys doc[i] .. i (0 .. i when doc is NULL). */
static double fd_loss(const double *q, const double *k, const double *v, const double *g,
                      const int32_t *doc, int T, int NH, int NKV, int HS) {
    const int G = NH / NKV;
    const double scale = 1.0 / sqrt((double)HS);
    double loss = 0.0, s[64];
    for (int h = 0; h < NH; h++)
        for (int i = 0; i < T; i++) {
            const int lo = doc ? doc[i] : 0;
            double mx = -INFINITY, sum = 0.0;
            for (int j = lo; j <= i; j++) {
                s[j] = 0.0;
                for (int e = 0; e < HS; e++)
                    s[j] +=
                        q[((size_t)i * NH + h) * HS + e] * k[((size_t)j * NKV + h / G) * HS + e];
                s[j] *= scale;
                mx = fmax(mx, s[j]);
            }
            for (int j = lo; j <= i; j++)
                sum += (s[j] = exp(s[j] - mx));
            for (int e = 0; e < HS; e++) {
                double o = 0.0;
                for (int j = lo; j <= i; j++)
                    o += s[j] / sum * v[((size_t)j * NKV + h / G) * HS + e];
                loss += o * g[((size_t)i * NH + h) * HS + e];
            }
        }
    return loss;
}

/* 3. ref and fast backward vs central differences of fd_loss (dout = g), on T tokens without
 * documents (doc NULL) or with them. */
static void test_finite_differences(int T, const int32_t *doc) {
    const int NH = 2, NKV = 1, HS = 4;
    problem p;
    problem_init(&p, T, NH, NKV, HS, 7, 1.5f);
    p.doc = doc;
    problem_ref(&p);
    double *dq = malloc(p.nq * sizeof(double)), *dk = malloc(p.nk * sizeof(double));
    double *dv = malloc(p.nk * sizeof(double)), *g = malloc(p.nq * sizeof(double));
    double *fq = malloc(p.nq * sizeof(double)), *fk = malloc(p.nk * sizeof(double));
    double *fv = malloc(p.nk * sizeof(double));
    for (size_t i = 0; i < p.nq; i++)
        dq[i] = p.q[i], g[i] = p.dout[i];
    for (size_t i = 0; i < p.nk; i++)
        dk[i] = p.k[i], dv[i] = p.v[i];
    // the double loss agrees with the ref forward (so its derivative is the right oracle)
    double lref = 0.0;
    for (size_t i = 0; i < p.nq; i++)
        lref += (double)p.r_out[i] * g[i];
    double l0 = fd_loss(dq, dk, dv, g, doc, T, NH, NKV, HS);
    // ref out is rounded to fp32 (6e-8 relative per element, <= 64 terms of size ~1)
    CHECK(fabs(lref - l0) <= 1e-6 * (1.0 + fabs(l0)), "fd: double loss != ref forward");
    // Central differences with step 1e-5: truncation error ~h^2 * f''' ~ 1e-10 and cancellation
    // ~1e-16 / 1e-5 = 1e-11 for a loss of order 1: the FD gradient is good to ~1e-9.
    const double step = 1e-5;
    double *xs[3] = {dq, dk, dv}, *fd[3] = {fq, fk, fv};
    const size_t ns[3] = {p.nq, p.nk, p.nk};
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < ns[t]; i++) {
            double x0 = xs[t][i];
            xs[t][i] = x0 + step;
            double lp = fd_loss(dq, dk, dv, g, doc, T, NH, NKV, HS);
            xs[t][i] = x0 - step;
            double lm = fd_loss(dq, dk, dv, g, doc, T, NH, NKV, HS);
            xs[t][i] = x0;
            fd[t][i] = (lp - lm) / (2.0 * step);
        }
    // The ref gradient is exact up to its final rounding to fp32 (6e-8 relative), the fast one up
    // to fp32 accumulation over at most T = 8 terms (~8e-7): 2e-6 relative to the largest gradient
    // entry covers both with margin; a sign or factor error (e.g. a missing scale) is O(1).
    const float *refs[3] = {p.r_dq, p.r_dk, p.r_dv}, *fasts[3] = {p.dq, p.dk, p.dv};
    const char *names[3] = {"dq", "dk", "dv"};
    const char *tag = doc ? "documents" : "causal";
    double m[3] = {0};
    for (int t = 0; t < 3; t++) {
        double er = 0.0;
        for (size_t i = 0; i < ns[t]; i++)
            m[t] = fmax(m[t], fabs(fd[t][i]));
        for (size_t i = 0; i < ns[t]; i++)
            er = fmax(er, fabs(refs[t][i] - fd[t][i]) / m[t]);
        CHECK(er <= 2e-6, "fd %s: ref %s vs finite differences rel err %.3g", tag, names[t], er);
        printf("fd %s %s: ref err %.2g (max |grad| %.3g)\n", tag, names[t], er, m[t]);
    }
    FOR_EACH_PATH {
        problem_fast(&p, 2);
        for (int t = 0; t < 3; t++) {
            double ef = 0.0;
            for (size_t i = 0; i < ns[t]; i++)
                ef = fmax(ef,
                          isfinite(fasts[t][i]) ? fabs(fasts[t][i] - fd[t][i]) / m[t] : INFINITY);
            CHECK(ef <= 2e-6, "%s: fd %s: fast %s vs finite differences rel err %.3g", g_path, tag,
                  names[t], ef);
            printf("fd %s %s [%s]: fast err %.2g\n", tag, names[t], g_path, ef);
        }
    }
    free(dq), free(dk), free(dv), free(g), free(fq), free(fk), free(fv);
    problem_free(&p);
}

/* 4. large score magnitudes: q, k uniform in [-30, 30), scores ~ N(0, 300^2). A softmax without
 * the running maximum overflows exp (fp32 limit ~88) at once. Tolerance: the fp32 score error
 * is what moves the result, and it grows with the score magnitude. An HS-term fp32 dot product
 * errs by at most HS * eps * sum|q_e k_e| (worst case, all roundings aligned); with random
 * rounding it is ~sqrt(HS) * eps * sum|q_e k_e|. We take delta = 4 * HS * eps * scale * max|q|
 * max|k| (~3e-3 here): about sqrt(HS)/4 = 2x above the random-rounding estimate of sum|q_e k_e|
 * <= HS max|q| max|k|. A score error delta scales a softmax weight by exp(delta) ~ 1 + delta, so
 * out, dq, dk, dv move by ~delta relative to their scale, and lse by ~delta absolute (compared
 * relative to max|lse| ~ 1e3, generous). Measured: ~1e-5 .. 1e-4. Without the online maximum
 * the result is inf/NaN, which fails any tolerance. */
static void test_large_scores(const doc_layout *L) {
    problem p;
    problem_init(&p, 300, 4, 2, 64, 55, 30.0f);
    int32_t *doc = L ? docs_make(L, p.T) : NULL;
    p.doc = doc;
    problem_ref(&p);
    const double scale = 1.0 / sqrt(64.0);
    double delta = 4.0 * 64 * FLT_EPSILON * scale * max_abs(p.q, p.nq) * max_abs(p.k, p.nk);
    double worst[NPATHS][5] = {{0}};
    FOR_EACH_PATH {
        problem_fast(&p, 2);
        int finite = 1;
        for (size_t i = 0; i < p.nq; i++)
            finite &= isfinite(p.out[i]) && isfinite(p.dq[i]);
        for (size_t i = 0; i < (size_t)p.NH * p.T; i++)
            finite &= isfinite(p.lse[i]);
        CHECK(finite, "%s: large scores: non-finite output", g_path);
        compare(&p, delta, delta, "large scores", worst[g_pi]);
    }
    char what[128];
    snprintf(what, sizeof what, "large scores (docs %s, max|lse| %.0f, tolerance %.2g)",
             L ? L->name : "NULL", max_abs(p.r_lse, (size_t)p.NH * p.T), delta);
    print_worst(what, worst);
    problem_free(&p);
    free(doc);
}

/* 5. workspace linear in T: with T a multiple of the tile, the increments from T to 2T and from
 * 2T to 4T must be in ratio 2 (quadratic growth would give 4). Small slack for rounding. */
static void test_workspace(void) {
    FOR_EACH_PATH
    for (int th = 1; th <= 3; th++) {
        omp_set_num_threads(th);
        const int heads[][2] = {{8, 4}, {8, 1}};
        for (int b = 0; b < 2; b++) {
            size_t w1 = attention_workspace_floats(4096, heads[b][0], heads[b][1], 64);
            size_t w2 = attention_workspace_floats(8192, heads[b][0], heads[b][1], 64);
            size_t w4 = attention_workspace_floats(16384, heads[b][0], heads[b][1], 64);
            char what[160];
            snprintf(what, sizeof what, "workspace threads=%d NKV=%d: %zu %zu %zu not linear in T",
                     th, heads[b][1], w1, w2, w4);
            CHECK(w2 > w1 && w4 - w2 <= 2 * (w2 - w1) + 64, "%s", what);
            // and far below one (T, T) score matrix per head
            CHECK(w4 < (size_t)16384 * 16384 / 8, "workspace: quadratic size at T=16384");
        }
    }
    omp_set_num_threads(2);
}

/* doc_start all 0 gives bit for bit the result of NULL: after a run with p->doc all 0, the
 * same run with NULL. */
static void check_zero_docs_same(problem *p) {
    const size_t nl = (size_t)p->NH * p->T;
    float *keep = talloc(2 * p->nq + nl + 2 * p->nk);
    float *srcs[5] = {p->out, p->lse, p->dq, p->dk, p->dv};
    const size_t ns[5] = {p->nq, nl, p->nq, p->nk, p->nk};
    size_t off = 0;
    for (int t = 0; t < 5; off += ns[t], t++)
        memcpy(keep + off, srcs[t], ns[t] * sizeof(float));
    const int32_t *doc = p->doc;
    p->doc = NULL;
    problem_fast(p, 2);
    p->doc = doc;
    int same = 1;
    off = 0;
    for (int t = 0; t < 5; off += ns[t], t++)
        same &= memcmp(keep + off, srcs[t], ns[t] * sizeof(float)) == 0;
    CHECK(same, "%s: docs all 0 vs NULL T=%d NH=%d NKV=%d HS=%d: not bit-identical", g_path, p->T,
          p->NH, p->NKV, p->HS);
    free(keep);
}

/* 6. documents: fast vs ref over layouts x T x heads (HS cycling over 16, 24, 64, 128); with
 * doc_start all 0 also bit-for-bit equal to doc_start NULL (same code path and sums). Same
 * tolerances as the causal grid: the masked kernels do the same fp32 work on fewer keys. */
static void test_docs(void) {
    const int Ts[] = {1, 7, 129, 300, 700};
    const int heads[][2] = {{4, 4}, {4, 2}, {8, 1}};
    const int HSs[] = {16, 24, 64, 128};
    int n = 0;
    for (int l = 0; l < NLAYOUTS; l++) {
        double worst[NPATHS][5] = {{0}};
        for (int a = 0; a < 5; a++)
            for (int b = 0; b < 3; b++, n++) {
                problem p;
                problem_init(&p, Ts[a], heads[b][0], heads[b][1], HSs[n % 4], 300 + (uint64_t)n,
                             1.0f);
                int32_t *doc = docs_make(&layouts[l], p.T);
                p.doc = doc;
                problem_ref(&p);
                char tag[96];
                snprintf(tag, sizeof tag, "docs=%s", layouts[l].name);
                FOR_EACH_PATH {
                    problem_fast(&p, 2);
                    compare(&p, TOL_FWD, TOL_BWD, tag, worst[g_pi]);
                    if (l == 0) check_zero_docs_same(&p);
                }
                problem_free(&p);
                free(doc);
            }
        char what[64];
        snprintf(what, sizeof what, "docs %-26s", layouts[l].name);
        print_worst(what, worst);
    }
}

/* Copy rows [s, e) of x (rows of w floats) to dst. */
static void rows_copy(float *dst, const float *x, int s, int e, size_t w) {
    memcpy(dst, x + (size_t)s * w, (size_t)(e - s) * w * sizeof(float));
}

/* max |a - b| over n floats into *e; max |b| into *m. */
static void diff_acc(const float *a, const float *b, size_t n, double *e, double *m) {
    for (size_t i = 0; i < n; i++) {
        *e = isfinite(a[i]) ? fmax(*e, fabs((double)a[i] - (double)b[i])) : INFINITY;
        *m = fmax(*m, fabs((double)b[i]));
    }
}

/* 8. a packed window equals its documents run one by one without doc_start. The two runs do the
 * same fp32 arithmetic on the same scores, only blocked differently (a document's tiles start
 * at its own position in the window), so they differ by a few fp32 roundings of the online
 * softmax and of the block sums: each is within ~1e-6 of the double ref (test 6), and we ask
 * 2e-6 of max |tensor| (measured worst 3.4e-7; a key leaked from a neighbouring document
 * moves the output by ~1e-2).
 * When every document starts on a multiple of 256 (of every path's blocks) the blocking is the
 * same, and with the owner backward scheme (NKV % threads == 0: no private dQ buffers) so are
 * the sums: bit-for-bit. */
#define TOL_CONCAT 2e-6
static void test_concat(const doc_layout *L, int T, int NH, int NKV, int HS, int threads,
                        int exact) {
    problem p;
    problem_init(&p, T, NH, NKV, HS, 900 + (uint64_t)T + (uint64_t)HS, 1.0f);
    int32_t *doc = docs_make(L, T);
    p.doc = doc;
    problem_fast(&p, threads);
    double e[5] = {0}, m[5] = {0};
    int same = 1;
    for (int s = 0; s < T;) {
        int t = s + 1;
        while (t < T && doc[t] == s)
            t++;
        problem d; // the document [s, t) alone
        problem_init(&d, t - s, NH, NKV, HS, 1, 1.0f);
        const size_t wq = (size_t)NH * HS, wk = (size_t)NKV * HS;
        rows_copy(d.q, p.q, s, t, wq);
        rows_copy(d.k, p.k, s, t, wk);
        rows_copy(d.v, p.v, s, t, wk);
        rows_copy(d.dout, p.dout, s, t, wq);
        problem_fast(&d, threads);
        const size_t off_q = (size_t)s * wq, off_k = (size_t)s * wk;
        diff_acc(p.out + off_q, d.out, d.nq, &e[0], &m[0]);
        for (int h = 0; h < NH; h++)
            diff_acc(p.lse + (size_t)h * T + s, d.lse + (size_t)h * d.T, (size_t)d.T, &e[1], &m[1]);
        diff_acc(p.dq + off_q, d.dq, d.nq, &e[2], &m[2]);
        diff_acc(p.dk + off_k, d.dk, d.nk, &e[3], &m[3]);
        diff_acc(p.dv + off_k, d.dv, d.nk, &e[4], &m[4]);
        if (exact) {
            same &= memcmp(p.out + off_q, d.out, d.nq * sizeof(float)) == 0;
            same &= memcmp(p.dq + off_q, d.dq, d.nq * sizeof(float)) == 0;
            same &= memcmp(p.dk + off_k, d.dk, d.nk * sizeof(float)) == 0;
            same &= memcmp(p.dv + off_k, d.dv, d.nk * sizeof(float)) == 0;
            for (int h = 0; h < NH; h++)
                same &= memcmp(p.lse + (size_t)h * T + s, d.lse + (size_t)h * d.T,
                               (size_t)d.T * sizeof(float)) == 0;
        }
        problem_free(&d);
        s = t;
    }
    const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
        const double r = m[i] > 0.0 ? e[i] / m[i] : e[i];
        CHECK(r <= TOL_CONCAT,
              "%s: concat docs=%s T=%d NH=%d NKV=%d HS=%d threads=%d: %s packed vs one by one "
              "rel err %.3g > %.1g",
              g_path, L->name, T, NH, NKV, HS, threads, names[i], r, TOL_CONCAT);
        e[i] = r;
    }
    if (exact)
        CHECK(same, "%s: concat docs=%s T=%d NH=%d NKV=%d HS=%d threads=%d: not bit-identical",
              g_path, L->name, T, NH, NKV, HS, threads);
    printf("concat [%s] %-26s T=%d NH=%d NKV=%d HS=%d threads=%d: rel err out %.2g lse %.2g "
           "dq %.2g dk %.2g dv %.2g%s\n",
           g_path, L->name, T, NH, NKV, HS, threads, e[0], e[1], e[2], e[3], e[4],
           exact ? (same ? " (bit-identical)" : " (NOT bit-identical)") : "");
    problem_free(&p);
    free(doc);
    omp_set_num_threads(2);
}

/* The whole suite on the current path. */
/* 9. path selection: unknown names are refused with a message; portable runs everywhere. */
static void test_selection(void) {
    char err[256] = "";
    CHECK(kernel_path_set("avx9000", err, sizeof err) != 0 && strstr(err, "avx9000") &&
              strstr(err, "portable"),
          "an unknown path name is refused with a message naming it and the valid ones: '%s'", err);
    CHECK(kernel_path_supported("portable"), "the portable path runs on every CPU");
    CHECK(!kernel_path_supported(""), "the empty name is no path");
}

/* 10. avx2 and avx512 run the same sums in the same order (attention_avx2.c): where they share
 * the schedule, in the forward always and in the backward when each thread owns whole KV heads
 * (NKV % threads == 0), their results are the same bits. T = 700 (several blocks of either
 * size, a partial last one), GQA, HS 64 and 24 (masked column tails), with and without
 * documents, 1 and 2 threads. A lane mask off by one changes bits at once. The avx512bf16
 * path's fp32 kernels are the avx512 path's functions (attention_avx512bf16.c): the same bits
 * in every one of these cases, 3 threads (the private dQ buffers) included. */
static void paths_agree(const char *a, const char *b, int threads_max) {
    if (!kernel_path_supported(a) || !kernel_path_supported(b)) {
        printf("%s vs %s: skipped (this CPU lacks one of them)\n", a, b);
        return;
    }
    const int HSs[] = {64, 24};
    for (int c = 0; c < 2; c++)
        for (int d = 0; d < 2; d++)
            for (int th = 1; th <= threads_max; th++) {
                problem p;
                problem_init(&p, 700, 8, 4, HSs[c], 1000 + (uint64_t)c, 1.0f);
                int32_t *doc = d ? docs_make(&layouts[5], p.T) : NULL;
                p.doc = doc;
                const char *paths[2] = {a, b};
                float *res[2];
                const size_t nl = (size_t)p.NH * p.T;
                for (int i = 0; i < 2; i++) {
                    char err[256];
                    CHECK(kernel_path_set(paths[i], err, sizeof err) == 0, "%s", err);
                    problem_fast(&p, th);
                    res[i] = talloc(2 * p.nq + nl + 2 * p.nk);
                    float *srcs[5] = {p.out, p.lse, p.dq, p.dk, p.dv};
                    const size_t ns[5] = {p.nq, nl, p.nq, p.nk, p.nk};
                    size_t off = 0;
                    for (int t = 0; t < 5; off += ns[t], t++)
                        memcpy(res[i] + off, srcs[t], ns[t] * sizeof(float));
                }
                CHECK(memcmp(res[0], res[1], (2 * p.nq + nl + 2 * p.nk) * sizeof(float)) == 0,
                      "%s vs %s HS=%d docs=%s threads=%d: not bit-identical", a, b, p.HS,
                      d ? layouts[5].name : "NULL", th);
                free(res[0]);
                free(res[1]);
                problem_free(&p);
                free(doc);
            }
    omp_set_num_threads(2);
    printf("%s vs %s: bit-identical where they share the schedule\n", a, b);
}

static void test_paths_agree(void) {
    paths_agree("avx512", "avx2", 2);
    paths_agree("avx512bf16", "avx512", 3);
}

int main(void) {
    double t0 = omp_get_wtime();
    for (int i = 0; i < NPATHS; i++)
        printf("path %s: %s\n", path_names[i],
               kernel_path_supported(path_names[i]) ? "tested" : "skipped (this CPU lacks it)");
    test_selection();
    test_shapes();
    test_threads(NULL);
    test_threads(&layouts[5]); // one off the boundaries
    test_finite_differences(5, NULL);
    const int32_t fd_doc[8] = {0, 0, 2, 3, 3, 3, 3, 3}; // documents of 2, 1 and 5 tokens
    test_finite_differences(8, fd_doc);
    test_large_scores(NULL);
    test_large_scores(&layouts[1]); // shorter than a tile
    test_workspace();
    test_docs();
    const doc_layout aligned = {"on 256 boundaries only", 2, {256, 512}};
    FOR_EACH_PATH
    for (int th = 1; th <= 3; th++) {
        test_concat(&layouts[1], 700, 4, 2, 64, th, 0);
        test_concat(&layouts[5], 700, 8, 1, 24, th, 0);
        test_concat(&layouts[7], 300, 4, 4, 16, th, 0);
        test_concat(&aligned, 1100, 4, 2, 64, th, th != 3);
        test_concat(&aligned, 1100, 8, 1, 32, th, th == 1);
    }
    test_paths_agree();
    printf("test_attention: %.1f s\n", omp_get_wtime() - t0);
    return harness_finish("test_attention");
}
