/* test_kernels.c — the non-attention kernels of kernels.h except RoPE (test_rope.c).
 *
 * For every kernel: the fast version against its reference twin (kernels_ref.h) on random data
 * with odd shapes; for every differentiable kernel: the fast backward against central finite
 * differences of a double-precision forward written here (loss = sum(out * g) for a random
 * upstream g); plus hand-computed values (a two-step AdamW, learning-rate schedule points). One
 * line per check, then a summary line; exit status 1 on any failure. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_ref.h"

#include "harness.h"
#include "kernels_util.h"

/* ---- matmul --------------------------------------------------------------------------------- */

typedef struct {
    int N, IC, OC;
    double *x, *w, *g;
} mm_ctx;

static double mm_loss(const void *p) {
    const mm_ctx *c = p;
    double L = 0.0;
    for (int n = 0; n < c->N; n++)
        for (int o = 0; o < c->OC; o++) {
            double s = 0.0;
            for (int i = 0; i < c->IC; i++)
                s += c->x[n * c->IC + i] * c->w[o * c->IC + i];
            L += c->g[n * c->OC + o] * s;
        }
    return L;
}

static void test_matmul(void) {
    static const int shapes[][3] = {{1, 37, 19}, {37, 64, 33}, {64, 100, 130}, {5, 16, 1}};
    char name[128];
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int N = shapes[s][0], IC = shapes[s][1], OC = shapes[s][2];
        size_t nin = (size_t)N * IC, nw = (size_t)OC * IC, nout = (size_t)N * OC;
        float *inp = rand_f(nin, -1, 1), *w = rand_f(nw, -1, 1);
        float *ainp = abs_f(inp, nin), *aw = abs_f(w, nw);
        for (int acc = 0; acc <= 1; acc++) {
            // acc = 0 starts from NaN: the kernel must overwrite, never read, out
            float *init = acc ? rand_f(nout, -1, 1) : zeros_f(nout);
            float *fast = copy_f(init, nout), *ref = copy_f(init, nout);
            if (!acc)
                for (size_t i = 0; i < nout; i++)
                    fast[i] = NAN;
            matmul_forward(fast, inp, w, N, IC, OC, acc);
            ref_matmul_forward(ref, inp, w, N, IC, OC, acc);
            // Bound: a float dot product of K terms is within (K+1) u sum|x_i w_i| of the exact
            // value (Higham's gamma_K, u = eps/2), plus the rounding of the += on |init|; the
            // double twin is exact to 0.5 ulp. We allow (K+2) eps, twice that.
            float *bound = abs_f(init, nout);
            ref_matmul_forward(bound, ainp, aw, N, IC, OC, 1);
            for (size_t i = 0; i < nout; i++)
                bound[i] *= (float)((IC + 2) * FLT_EPSILON);
            snprintf(name, sizeof name, "matmul_forward N=%d IC=%d OC=%d acc=%d vs ref", N, IC, OC,
                     acc);
            check_bound(name, fast, ref, bound, nout);
            free(init), free(fast), free(ref), free(bound);
        }
        // backward, accumulating onto random gradients
        float *dout = rand_f(nout, -1, 1), *adout = abs_f(dout, nout);
        float *dinp0 = rand_f(nin, -1, 1), *dw0 = rand_f(nw, -1, 1);
        float *dinp = copy_f(dinp0, nin), *dw = copy_f(dw0, nw);
        float *rdinp = copy_f(dinp0, nin), *rdw = copy_f(dw0, nw);
        matmul_backward(dinp, dw, dout, inp, w, N, IC, OC);
        ref_matmul_backward(rdinp, rdw, dout, inp, w, N, IC, OC);
        float *bdinp = abs_f(dinp0, nin), *bdw = abs_f(dw0, nw); // same bound as the forward
        ref_matmul_backward(bdinp, bdw, adout, ainp, aw, N, IC, OC);
        for (size_t i = 0; i < nin; i++)
            bdinp[i] *= (float)((OC + 2) * FLT_EPSILON);
        for (size_t i = 0; i < nw; i++)
            bdw[i] *= (float)((N + 2) * FLT_EPSILON);
        snprintf(name, sizeof name, "matmul_backward N=%d IC=%d OC=%d dinp vs ref", N, IC, OC);
        check_bound(name, dinp, rdinp, bdinp, nin);
        snprintf(name, sizeof name, "matmul_backward N=%d IC=%d OC=%d dw vs ref", N, IC, OC);
        check_bound(name, dw, rdw, bdw, nw);
        // NULL skips that output and leaves the other one as it was (same sgemm call)
        float *dinp2 = copy_f(dinp0, nin), *dw2 = copy_f(dw0, nw);
        matmul_backward(dinp2, NULL, dout, inp, w, N, IC, OC);
        matmul_backward(NULL, dw2, dout, inp, w, N, IC, OC);
        snprintf(name, sizeof name, "matmul_backward N=%d IC=%d OC=%d with NULL outputs", N, IC,
                 OC);
        CHECK(!memcmp(dinp2, dinp, nin * sizeof(float)) && !memcmp(dw2, dw, nw * sizeof(float)),
              "%s: bit-exact", name);
        free(dinp2), free(dw2), free(bdinp), free(bdw), free(dout), free(adout);
        free(dinp0), free(dw0), free(dinp), free(dw), free(rdinp), free(rdw);
        free(inp), free(w), free(ainp), free(aw);
    }
    // finite differences (the loss is bilinear, so FD is exact up to rounding)
    int N = 4, IC = 7, OC = 5;
    float *inp = rand_f((size_t)N * IC, -1, 1), *w = rand_f((size_t)OC * IC, -1, 1);
    float *g = rand_f((size_t)N * OC, -1, 1);
    float *dinp = zeros_f((size_t)N * IC), *dw = zeros_f((size_t)OC * IC);
    matmul_backward(dinp, dw, g, inp, w, N, IC, OC);
    mm_ctx c = {
        N, IC, OC, to_d(inp, (size_t)N * IC), to_d(w, (size_t)OC * IC), to_d(g, (size_t)N * OC)};
    check_fd("matmul_backward dinp vs finite differences", mm_loss, &c, c.x, (size_t)N * IC, dinp);
    check_fd("matmul_backward dw vs finite differences", mm_loss, &c, c.w, (size_t)OC * IC, dw);
    free(c.x), free(c.w), free(c.g), free(inp), free(w), free(g), free(dinp), free(dw);
}

/* ---- embedding ------------------------------------------------------------------------------ */

typedef struct {
    int N, C;
    const int32_t *tok;
    double *wte, *g;
} emb_ctx;

static double emb_loss(const void *p) {
    const emb_ctx *c = p;
    double L = 0.0;
    for (int i = 0; i < c->N; i++)
        for (int k = 0; k < c->C; k++)
            L += c->g[i * c->C + k] * c->wte[c->tok[i] * c->C + k];
    return L;
}

static void test_embedding(void) {
    static const int shapes[][2] = {{1, 37}, {37, 200}, {37, 1000}, {64, 16}}; // (N, C)
    const int V = 13; // small: tokens repeat, which is what embedding_backward must survive
    char name[128];
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int N = shapes[s][0], C = shapes[s][1];
        int32_t *tok = xmalloc((size_t)N * sizeof(int32_t));
        for (int i = 0; i < N; i++)
            tok[i] = rng_int(V);
        float *wte = rand_f((size_t)V * C, -1, 1);
        float *out = rand_f((size_t)N * C, -1, 1), *rout = rand_f((size_t)N * C, -1, 1);
        embedding_forward(out, tok, wte, N, C);
        ref_embedding_forward(rout, tok, wte, N, C);
        snprintf(name, sizeof name, "embedding_forward N=%d C=%d vs ref", N, C);
        check_exact(name, out, rout, (size_t)N * C); // a copy: must be exact
        float *dout = rand_f((size_t)N * C, -1, 1), *dwte = rand_f((size_t)V * C, -1, 1);
        float *rdwte = copy_f(dwte, (size_t)V * C);
        embedding_backward(dwte, dout, tok, N, C);
        ref_embedding_backward(rdwte, dout, tok, N, C);
        // both add in float in row order per element, so the bits must agree
        snprintf(name, sizeof name, "embedding_backward N=%d C=%d (repeated tokens) vs ref", N, C);
        check_exact(name, dwte, rdwte, (size_t)V * C);
        free(tok), free(wte), free(out), free(rout), free(dout), free(dwte), free(rdwte);
    }
    int N = 9, C = 19, Vs = 6;
    int32_t tok[9] = {0, 3, 3, 5, 1, 3, 0, 2, 5};
    float *wte = rand_f((size_t)Vs * C, -1, 1), *g = rand_f((size_t)N * C, -1, 1);
    float *dwte = zeros_f((size_t)Vs * C);
    embedding_backward(dwte, g, tok, N, C);
    emb_ctx c = {N, C, tok, to_d(wte, (size_t)Vs * C), to_d(g, (size_t)N * C)};
    check_fd("embedding_backward vs finite differences", emb_loss, &c, c.wte, (size_t)Vs * C, dwte);
    free(c.wte), free(c.g), free(wte), free(g), free(dwte);
}

/* ---- RMSNorm -------------------------------------------------------------------------------- */

typedef struct {
    int N, C;
    double eps;
    double *x, *w, *g;
} rms_ctx;

static double rms_loss(const void *p) {
    const rms_ctx *c = p;
    double L = 0.0;
    for (int i = 0; i < c->N; i++) {
        const double *x = c->x + (size_t)i * c->C;
        double ss = 0.0;
        for (int k = 0; k < c->C; k++)
            ss += x[k] * x[k];
        double r = 1.0 / sqrt(ss / c->C + c->eps);
        for (int k = 0; k < c->C; k++)
            L += c->g[(size_t)i * c->C + k] * x[k] * r * c->w[k];
    }
    return L;
}

static void test_rmsnorm(void) {
    static const int shapes[][2] = {{1, 37}, {37, 200}, {37, 1000}, {8, 64}}; // (N, C)
    const float eps = 1e-5f;
    char name[128];
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int N = shapes[s][0], C = shapes[s][1];
        size_t n = (size_t)N * C;
        float *x = rand_f(n, -2, 2), *w = rand_f((size_t)C, -1.5f, 1.5f);
        float *out = zeros_f(n), *rout = zeros_f(n), *rstd = zeros_f((size_t)N);
        float *rrstd = zeros_f((size_t)N);
        rmsnorm_forward(out, rstd, x, w, N, C, eps);
        ref_rmsnorm_forward(rout, rrstd, x, w, N, C, eps);
        // rstd: both round the same double expression once (sums differ only at 1e-16): 1 ulp.
        snprintf(name, sizeof name, "rmsnorm_forward N=%d C=%d rstd vs ref", N, C);
        check_close(name, rstd, rrstd, (size_t)N, 0.0, FLT_EPSILON);
        // out = (x * r) * w: r's rounding and two float products, <= 1.5 ulp; allow 4.
        snprintf(name, sizeof name, "rmsnorm_forward N=%d C=%d out vs ref", N, C);
        check_close(name, out, rout, n, 0.0, 4 * FLT_EPSILON);

        float *dout = rand_f(n, -1, 1), *dx0 = rand_f(n, -1, 1), *dw0 = rand_f((size_t)C, -1, 1);
        float *dx = copy_f(dx0, n), *dw = copy_f(dw0, (size_t)C);
        float *rdx = copy_f(dx0, n), *rdw = copy_f(dw0, (size_t)C);
        rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
        ref_rmsnorm_backward(rdx, rdw, dout, x, w, rstd, N, C);
        // dinp: init + two O(1) float terms with ~4 roundings each (~5e-7 absolute) and a
        // double dot; entries can cancel, so normwise: 1e-5 leaves a 20x margin.
        snprintf(name, sizeof name, "rmsnorm_backward N=%d C=%d dinp vs ref", N, C);
        check_norm_f(name, dx, rdx, n, 1e-5);
        // dw: double sums of float products (1 ulp each) + init; same normwise margin.
        snprintf(name, sizeof name, "rmsnorm_backward N=%d C=%d dw vs ref", N, C);
        check_norm_f(name, dw, rdw, (size_t)C, 1e-5);
        float *dx2 = copy_f(dx0, n);
        rmsnorm_backward(dx2, NULL, dout, x, w, rstd, N, C);
        snprintf(name, sizeof name, "rmsnorm_backward N=%d C=%d dw=NULL leaves dinp equal", N, C);
        check_exact(name, dx2, dx, n);
        free(x), free(w), free(out), free(rout), free(rstd), free(rrstd), free(dout), free(dx0);
        free(dw0), free(dx), free(dw), free(rdx), free(rdw), free(dx2);
    }
    int N = 3, C = 37;
    size_t n = (size_t)N * C;
    float *x = rand_f(n, -2, 2), *w = rand_f((size_t)C, -1.5f, 1.5f), *g = rand_f(n, -1, 1);
    float *out = zeros_f(n), *rstd = zeros_f((size_t)N), *dx = zeros_f(n), *dw = zeros_f(C);
    rmsnorm_forward(out, rstd, x, w, N, C, eps);
    rmsnorm_backward(dx, dw, g, x, w, rstd, N, C);
    rms_ctx c = {N, C, eps, to_d(x, n), to_d(w, (size_t)C), to_d(g, n)};
    check_fd("rmsnorm_backward dinp vs finite differences", rms_loss, &c, c.x, n, dx);
    check_fd("rmsnorm_backward dw vs finite differences", rms_loss, &c, c.w, (size_t)C, dw);
    free(c.x), free(c.w), free(c.g), free(x), free(w), free(g), free(out), free(rstd), free(dx);
    free(dw);
}

/* ---- SwiGLU --------------------------------------------------------------------------------- */

typedef struct {
    size_t n;
    double *a, *b, *g;
} swi_ctx;

static double swi_loss(const void *p) {
    const swi_ctx *c = p;
    double L = 0.0;
    for (size_t i = 0; i < c->n; i++)
        L += c->g[i] * c->a[i] / (1.0 + exp(-c->a[i])) * c->b[i];
    return L;
}

static void test_swiglu(void) {
    static const size_t sizes[] = {1, 37, 1000, 4099};
    char name[128];
    for (size_t s = 0; s < 4; s++) {
        size_t n = sizes[s];
        float *gate = rand_f(n, -12, 12), *up = rand_f(n, -2, 2), *dout = rand_f(n, -1, 1);
        float *out = zeros_f(n), *rout = zeros_f(n);
        swiglu_forward(out, gate, up, n);
        ref_swiglu_forward(rout, gate, up, n);
        // expf (scalar glibc < 1 ulp; libmvec vector <= 4 ulp), then +1, /, * (0.5 ulp each):
        // <= ~6 ulp of the result; allow 16.
        snprintf(name, sizeof name, "swiglu_forward n=%zu vs ref", n);
        check_close(name, out, rout, n, 0.0, 16 * FLT_EPSILON);
        float *dg = zeros_f(n), *du = zeros_f(n), *rdg = zeros_f(n), *rdu = zeros_f(n);
        swiglu_backward(dg, du, dout, gate, up, n);
        ref_swiglu_backward(rdg, rdu, dout, gate, up, n);
        snprintf(name, sizeof name, "swiglu_backward n=%zu dup vs ref", n);
        check_close(name, du, rdu, n, 0.0, 16 * FLT_EPSILON);
        // dgate = d u s (1 + g (1 - s)) has a true zero near g = -1.28 where the two terms
        // cancel: bound each term's error, 16 eps |d u| s (1 + |g| (1 - s)).
        float *bound = xmalloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            double gi = gate[i], si = 1.0 / (1.0 + exp(-gi));
            bound[i] = (float)(16 * FLT_EPSILON * fabs((double)dout[i] * up[i]) * si *
                               (1.0 + fabs(gi) * (1.0 - si)));
        }
        snprintf(name, sizeof name, "swiglu_backward n=%zu dgate vs ref", n);
        check_bound(name, dg, rdg, bound, n);
        // in place: dgate aliases gate, dup aliases up
        float *ag = copy_f(gate, n), *au = copy_f(up, n);
        swiglu_backward(ag, au, dout, ag, au, n);
        snprintf(name, sizeof name, "swiglu_backward n=%zu in place (aliased)", n);
        CHECK(!memcmp(ag, dg, n * sizeof(float)) && !memcmp(au, du, n * sizeof(float)),
              "%s: bit-exact with the out-of-place result", name);
        free(gate), free(up), free(dout), free(out), free(rout), free(dg), free(du), free(rdg);
        free(rdu), free(bound), free(ag), free(au);
    }
    // saturation: exp overflow / underflow must give silu -> 0 or g, never NaN
    float gate[] = {-100.0f, -30.0f, -0.0f, 0.0f, 30.0f, 100.0f, 88.5f, -88.5f};
    float up[] = {1, 1, 1, 1, 1, 1, 1, 1}, dout[] = {1, 1, 1, 1, 1, 1, 1, 1};
    float out[8], rout[8], dg[8], du[8], rdg[8], rdu[8];
    swiglu_forward(out, gate, up, 8);
    ref_swiglu_forward(rout, gate, up, 8);
    swiglu_backward(dg, du, dout, gate, up, 8);
    ref_swiglu_backward(rdg, rdu, dout, gate, up, 8);
    // atol 1e-30: silu(-100) = -3.7e-42 is a float denormal that the fast path may flush to -0
    check_close("swiglu_forward saturated inputs vs ref", out, rout, 8, 1e-30, 16 * FLT_EPSILON);
    check_close("swiglu_backward saturated inputs dgate vs ref", dg, rdg, 8, 1e-30,
                16 * FLT_EPSILON);
    check_close("swiglu_backward saturated inputs dup vs ref", du, rdu, 8, 1e-30, 16 * FLT_EPSILON);

    size_t n = 41;
    float *a = rand_f(n, -4, 4), *b = rand_f(n, -2, 2), *g = rand_f(n, -1, 1);
    float *da = zeros_f(n), *db = zeros_f(n);
    swiglu_backward(da, db, g, a, b, n);
    swi_ctx c = {n, to_d(a, n), to_d(b, n), to_d(g, n)};
    check_fd("swiglu_backward dgate vs finite differences", swi_loss, &c, c.a, n, da);
    check_fd("swiglu_backward dup vs finite differences", swi_loss, &c, c.b, n, db);
    free(c.a), free(c.b), free(c.g), free(a), free(b), free(g), free(da), free(db);
}

/* ---- cross-entropy -------------------------------------------------------------------------- */

typedef struct {
    int N, V;
    double scale;
    const int32_t *t;
    double *x;
} ce_ctx;

static double ce_loss(const void *p) {
    const ce_ctx *c = p;
    double L = 0.0;
    for (int i = 0; i < c->N; i++) {
        if (c->t[i] < 0) continue;
        const double *x = c->x + (size_t)i * c->V;
        double mx = x[0], s = 0.0;
        for (int v = 1; v < c->V; v++)
            mx = x[v] > mx ? x[v] : mx;
        for (int v = 0; v < c->V; v++)
            s += exp(x[v] - mx);
        L += mx + log(s) - x[c->t[i]];
    }
    return c->scale * L;
}

static void test_cross_entropy(void) {
    static const int shapes[][2] = {{1, 37}, {37, 1000}, {5, 4099}}; // (N, V)
    char name[128];
    for (int s = 0; s < 3; s++) {
        int N = shapes[s][0], V = shapes[s][1];
        size_t n = (size_t)N * V;
        int32_t *t = xmalloc((size_t)N * sizeof(int32_t));
        int valid = 0;
        for (int i = 0; i < N; i++) {
            t[i] = (N > 1 && i % 4 == 1) ? -1 : rng_int(V); // every 4th row ignored
            valid += t[i] >= 0;
        }
        float *x = rand_f(n, -8, 8);
        // offsets of +-1000 on some rows: exp without the max subtraction would overflow
        for (int i = 0; i < N; i++)
            for (int v = 0; v < V; v++)
                x[(size_t)i * V + v] += (i % 3 == 0) ? 0 : (i % 3 == 1 ? 1000 : -1000);
        float gs = 1.0f / (float)valid;
        float *fast = copy_f(x, n), *ref = copy_f(x, n), *again = copy_f(x, n);
        double L = cross_entropy_fused(fast, t, N, V, gs);
        double RL = ref_cross_entropy_fused(ref, t, N, V, gs);
        double L2 = cross_entropy_fused(again, t, N, V, gs);
        // per row: x - max rounds by <= 0.5 ulp of |x - max| <= 16 (5e-7 in the exponent) and
        // expf is <= 4 ulp, so each log-sum-exp is within ~1e-6 of the double value.
        snprintf(name, sizeof name, "cross_entropy_fused N=%d V=%d (%d ignored) loss vs ref", N, V,
                 N - valid);
        check_scalar(name, L, RL, 2e-6 * valid);
        snprintf(name, sizeof name, "cross_entropy_fused N=%d V=%d loss repeatable", N, V);
        CHECK(memcmp(&L, &L2, sizeof L) == 0, "%s: bit-exact", name);
        // grads: p has relative error ~3e-6 from the same sources; at the target p - 1 cancels,
        // so also an absolute 4e-6 * grad_scale
        snprintf(name, sizeof name, "cross_entropy_fused N=%d V=%d grad vs ref", N, V);
        check_close(name, fast, ref, n, 4e-6 * gs, 4e-6);
        int zero = 1;
        for (int i = 0; i < N; i++)
            if (t[i] < 0)
                for (int v = 0; v < V; v++)
                    zero &= fast[(size_t)i * V + v] == 0.0f;
        snprintf(name, sizeof name, "cross_entropy_fused N=%d V=%d ignored rows", N, V);
        CHECK(zero, "%s: gradient exactly 0", name);
        free(t), free(x), free(fast), free(ref), free(again);
    }
    int N = 6, V = 37;
    size_t n = (size_t)N * V;
    int32_t t[6] = {3, -1, 0, 36, -1, 17};
    float *x = rand_f(n, -3, 3);
    for (int v = 0; v < V; v++)
        x[v] += 50.0f; // a shifted row
    float gs = 0.25f;  // 1 / (4 valid rows)
    float *grad = copy_f(x, n);
    double L = cross_entropy_fused(grad, t, N, V, gs);
    ce_ctx c = {N, V, gs, t, to_d(x, n)};
    // the returned sum covers valid rows only; both sides carry float rounding of ~1e-6 / row
    check_scalar("cross_entropy_fused loss vs double forward (ignored rows excluded)", L * gs,
                 ce_loss(&c), 1e-6);
    check_fd("cross_entropy_fused grad vs finite differences", ce_loss, &c, c.x, n, grad);
    free(c.x), free(x), free(grad);
}

/* Per-row losses and top predictions (evaluation): against the double twin, and the rows' sum
 * against cross_entropy_fused on the same logits. */
static void test_cross_entropy_rows(void) {
    static const int shapes[][2] = {{1, 37}, {37, 1000}, {5, 4099}}; // (N, V)
    char name[128];
    for (int s = 0; s < 3; s++) {
        int N = shapes[s][0], V = shapes[s][1];
        size_t n = (size_t)N * V;
        int32_t *t = xmalloc((size_t)N * sizeof(int32_t)), *p = xmalloc((size_t)N * 4);
        int32_t *rp = xmalloc((size_t)N * 4);
        double *l = xmalloc((size_t)N * sizeof(double)), *rl = xmalloc((size_t)N * sizeof(double));
        for (int i = 0; i < N; i++)
            t[i] = (N > 1 && i % 4 == 1) ? -1 : rng_int(V);
        float *x = rand_f(n, -8, 8);
        for (int i = 0; i < N; i++)
            for (int v = 0; v < V; v++)
                x[(size_t)i * V + v] += (i % 3 == 0) ? 0 : (i % 3 == 1 ? 1000 : -1000);
        float *keep = copy_f(x, n);
        cross_entropy_rows(x, t, N, V, l, p);
        ref_cross_entropy_rows(x, t, N, V, rl, rp);
        CHECK(memcmp(x, keep, n * sizeof(float)) == 0,
              "cross_entropy_rows N=%d V=%d: logits unchanged", N, V);
        double worst = 0, sum = 0;
        int same = 1;
        for (int i = 0; i < N; i++) {
            double d = fabs(l[i] - rl[i]);
            worst = d > worst ? d : worst;
            same &= p[i] == rp[i];
            sum += l[i];
        }
        // the bound of cross_entropy_fused's loss per row (see test_cross_entropy)
        snprintf(name, sizeof name, "cross_entropy_rows N=%d V=%d loss vs ref", N, V);
        CHECK(worst <= 2e-6, "%s: max |diff| %.3g", name, worst);
        CHECK(same, "cross_entropy_rows N=%d V=%d: argmax = ref", N, V);
        // the same per-row values as the fused kernel, summed in another order
        double fused = cross_entropy_fused(keep, t, N, V, 1.0f);
        CHECK(fabs(sum - fused) <= 1e-12 * fabs(fused),
              "cross_entropy_rows N=%d V=%d: sum of rows %.17g = fused %.17g", N, V, sum, fused);
        free(t), free(p), free(rp), free(l), free(rl), free(x), free(keep);
    }
    // ties: the first index of the largest value; ignored rows: loss 0, a prediction all the same
    float x[8] = {1, 3, 3, 0, -1, -1, -1, -1};
    int32_t t[2] = {2, -1}, p[2];
    double l[2];
    cross_entropy_rows(x, t, 2, 4, l, p);
    CHECK(p[0] == 1 && p[1] == 0 && l[1] == 0.0,
          "cross_entropy_rows ties and ignored rows: %d %d %g", (int)p[0], (int)p[1], l[1]);
}

/* ---- optimizer ------------------------------------------------------------------------------ */

static void test_adamw(void) {
    adamw_params hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    const size_t n = 1003;
    const int steps = 3;
    char name[128];
    for (int decay = 0; decay <= 1; decay++) {
        float *p = rand_f(n, -1, 1), *m = zeros_f(n), *v = zeros_f(n);
        float *rp = copy_f(p, n), *rm = zeros_f(n), *rv = zeros_f(n);
        for (int s = 1; s <= steps; s++) {
            float *g = rand_f(n, -1, 1);
            for (size_t i = 0; i < n; i += 7)
                g[i] = 0.0f;
            adamw_update(p, g, m, v, n, &hp, s, 0.7f, decay);
            ref_adamw_update(rp, g, rm, rv, n, &hp, s, 0.7f, decay);
            free(g);
        }
        // per step: both round p to float (the two may land 1 ulp apart) and the float update
        // term carries a few eps relative of lr; m and v are convex mixes of |g| <= 0.7 and
        // g^2 <= 0.49 with ~2 ulp per step.
        snprintf(name, sizeof name, "adamw_update decay=%d %d steps param vs ref", decay, steps);
        check_close(name, p, rp, n, steps * 8 * FLT_EPSILON * hp.lr, steps * FLT_EPSILON);
        snprintf(name, sizeof name, "adamw_update decay=%d %d steps m vs ref", decay, steps);
        check_close(name, m, rm, n, steps * 2 * FLT_EPSILON * 0.7, 0.0);
        snprintf(name, sizeof name, "adamw_update decay=%d %d steps v vs ref", decay, steps);
        check_close(name, v, rv, n, steps * 2 * FLT_EPSILON * 0.49, 0.0);
        free(p), free(m), free(v), free(rp), free(rm), free(rv);
    }
    // Two steps by hand (python, double, the header's formula): lr 1e-2, betas (0.9, 0.95),
    // eps 1e-8, wd 0.1, grads g1 = (0.1, -0.2, 0) at scale 1, g2 = (0.3, 0.1, -0.5) at scale 0.5.
    // Step 1 moves each p by lr * sign(g) (mhat / sqrt(vhat) = +-1) plus lr * wd * p:
    // 0.5 - 0.01 * (1 + 0.05) = 0.4895, -1 + 0.01 * (1 - 0.1) = -0.989, 2 - 0.01 * 0.2 = 1.998.
    adamw_params h2 = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
    const float g1[3] = {0.1f, -0.2f, 0.0f}, g2[3] = {0.3f, 0.1f, -0.5f};
    const float want1[3] = {0.4895f, -0.989f, 1.998f};
    const float want2[3] = {0.479149978613f, -0.983263341532f, 2.00335159961f};
    const float wantm[3] = {0.024f, -0.013f, -0.025f}, wantv[3] = {0.0016f, 0.002025f, 0.003125f};
    for (int r = 0; r < 2; r++) {
        float p[3] = {0.5f, -1.0f, 2.0f}, m[3] = {0}, v[3] = {0};
        void (*upd)(float *, const float *, float *, float *, size_t, const adamw_params *, int,
                    float, int) = r ? ref_adamw_update : adamw_update;
        const char *who = r ? "ref_adamw_update" : "adamw_update";
        // each step rounds p to float (0.5 ulp) and the update (~1e-2) carries ~1e-9 of error:
        // <= 1 ulp per step; allow 4 ulp; m and v likewise
        upd(p, g1, m, v, 3, &h2, 1, 1.0f, 1);
        snprintf(name, sizeof name, "%s hand example step 1 param", who);
        check_close(name, p, want1, 3, 0.0, 4 * FLT_EPSILON);
        upd(p, g2, m, v, 3, &h2, 2, 0.5f, 1);
        snprintf(name, sizeof name, "%s hand example step 2 param", who);
        check_close(name, p, want2, 3, 0.0, 4 * FLT_EPSILON);
        snprintf(name, sizeof name, "%s hand example step 2 m, v", who);
        float got[6] = {m[0], m[1], m[2], v[0], v[1], v[2]};
        float want[6] = {wantm[0], wantm[1], wantm[2], wantv[0], wantv[1], wantv[2]};
        check_close(name, got, want, 6, 0.0, 4 * FLT_EPSILON);
    }
}

/* backend.h's BACKEND_SUMSQ order, element by element: lane j of a chunk holds the elements
 * whose index in the chunk is j mod LANES; the lanes fold pairwise; chunks add up in groups, the
 * groups in order. */
static double sumsq_spec(const float *x, size_t n) {
    const size_t CH = BACKEND_SUMSQ_CHUNK, NL = BACKEND_SUMSQ_LANES, GR = BACKEND_SUMSQ_GROUP;
    double total = 0.0, group = 0.0;
    for (size_t c0 = 0, c = 0; c0 < n; c0 += CH, c++) {
        double lane[BACKEND_SUMSQ_LANES] = {0};
        for (size_t i = c0; i < n && i < c0 + CH; i++)
            lane[(i - c0) % NL] += (double)x[i] * (double)x[i];
        for (size_t w = NL / 2; w > 0; w /= 2)
            for (size_t j = 0; j < w; j++)
                lane[j] = lane[j] + lane[j + w];
        group += lane[0];
        if ((c + 1) % GR == 0 || c0 + CH >= n) { /* the group's last chunk */
            total += group;
            group = 0.0;
        }
    }
    return total;
}

static void test_norm_and_schedule(void) {
    // sum_squares: the order backend.h fixes, bit for bit, for any thread count (one group, many
    // groups, a last chunk and a last group cut short); and, as a check of the spec itself,
    // squares of floats are exact in double and a double sum of n terms is within n u of the
    // exact sum, so it and a serial sum differ by <= n eps relative
    const size_t G = (size_t)BACKEND_SUMSQ_CHUNK * BACKEND_SUMSQ_GROUP;
    const size_t sizes[] = {0, 37, 100003, 2 * G, 2 * G + 4097};
    char name[128];
    int nt0 = omp_get_max_threads();
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        float *x = rand_f(n, -3, 3);
        double ref = 0.0;
        for (size_t i = 0; i < n; i++)
            ref += (double)x[i] * x[i];
        double spec = sumsq_spec(x, n);
        snprintf(name, sizeof name, "sum_squares n=%zu vs serial double", n);
        check_scalar(name, sum_squares(x, n), ref, (double)n * DBL_EPSILON * ref);
        for (int nt = 1; nt <= 3; nt++) {
            omp_set_num_threads(nt);
            snprintf(name, sizeof name, "sum_squares n=%zu, %d threads, vs the fixed order", n, nt);
            check_scalar(name, sum_squares(x, n), spec, 0.0);
        }
        omp_set_num_threads(nt0);
        free(x);
    }
    // clip_factor: float result of a double expression, 0.5 ulp; tol 1e-6 relative
    check_scalar("clip_factor(norm 2, max 1)", clip_factor(2.0, 1.0f), 1.0 / (2.0 + 1e-6), 1e-6);
    check_scalar("clip_factor(norm 0.5, max 1)", clip_factor(0.5, 1.0f), 1.0, 0.0);
    check_scalar("clip_factor(max 0 = off)", clip_factor(5.0, 0.0f), 1.0, 0.0);
    // lr_schedule: values by hand (python); float result of a double expression: 1e-6 relative
    struct {
        int step, total, warmup;
        double want;
    } pts[] = {
        {0, 101, 10, 1e-4},                // warm-up starts at lr / warmup
        {9, 101, 10, 1e-3},                // and reaches lr at its last step
        {10, 101, 10, 1e-3},               // cosine starts at lr
        {30, 101, 10, 8.9471999940354e-4}, // progress 20/90
        {55, 101, 10, 5.5e-4},             // progress 1/2: halfway between lr and lr_min
        {100, 101, 10, 1e-4},              // last step: lr_min = lr * 0.1
        {0, 50, 0, 1e-3},                  // no warm-up: starts at lr
        {49, 50, 0, 1e-4},                 // ends at lr_min
        {0, 1, 0, 1e-3},                   // a single step
    };
    for (size_t i = 0; i < sizeof(pts) / sizeof(pts[0]); i++) {
        snprintf(name, sizeof name, "lr_schedule step=%d total=%d warmup=%d", pts[i].step,
                 pts[i].total, pts[i].warmup);
        check_scalar(name, lr_schedule(pts[i].step, pts[i].total, 1e-3f, pts[i].warmup, 0.1f),
                     pts[i].want, 1e-6 * pts[i].want);
    }
}

int main(void) {
    harness.verbose = 1; /* one PASS line per check, with its error figures */
    test_matmul();
    test_embedding();
    test_rmsnorm();
    test_swiglu();
    test_cross_entropy();
    test_cross_entropy_rows();
    test_adamw();
    test_norm_and_schedule();
    return harness_finish("test_kernels");
}
