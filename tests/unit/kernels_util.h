/* kernels_util.h — random data, comparisons and finite differences shared by the kernel unit
 * tests (test_kernels.c, test_rope.c). Each check counts one CHECK of harness.h.
 *
 *   rng_*, rand_f, copy_f, zeros_f, abs_f, to_d   data (one splitmix64 stream per program)
 *   check_bound / check_close / check_norm(_f) / check_exact / check_scalar   comparisons
 *   fd_grad, check_fd                              central finite differences of a double loss */
#ifndef UP_TEST_KERNELS_UTIL_H
#define UP_TEST_KERNELS_UTIL_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ---- data ----------------------------------------------------------------------------------- */

static uint64_t g_rng = 0x243F6A8885A308D3ull;

static inline uint64_t rng_next(void) { // splitmix64
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline float rng_unif(float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(rng_next() >> 40) * 0x1p-24);
}

static inline int rng_int(int n) {
    return (int)(rng_next() % (uint64_t)n);
}

static inline void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static inline float *rand_f(size_t n, float lo, float hi) {
    float *x = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = rng_unif(lo, hi);
    return x;
}

static inline float *copy_f(const float *x, size_t n) {
    float *y = xmalloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

static inline float *zeros_f(size_t n) {
    float *y = xmalloc(n * sizeof(float));
    memset(y, 0, n * sizeof(float));
    return y;
}

static inline float *abs_f(const float *x, size_t n) {
    float *y = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        y[i] = fabsf(x[i]);
    return y;
}

static inline double *to_d(const float *x, size_t n) {
    double *y = xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        y[i] = x[i];
    return y;
}

/* ---- comparisons (NaN anywhere fails) ------------------------------------------------------- */

/* |got - want| <= bound elementwise. Prints the worst ratio. */
static inline void check_bound(const char *name, const float *got, const float *want,
                               const float *bound, size_t n) {
    double worst = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double b = bound[i] > FLT_MIN ? bound[i] : FLT_MIN;
        double r = d / b;
        if (!(r <= 1.0)) bad++;
        if (!(r <= worst)) worst = isnan(r) ? INFINITY : r;
    }
    CHECK(bad == 0, "%s: max err/bound %.3g (%zu of %zu outside)", name, worst, bad, n);
}

/* |got - want| <= atol + rtol * |want| elementwise. */
static inline void check_close(const char *name, const float *got, const float *want, size_t n,
                               double atol, double rtol) {
    float *bound = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        bound[i] = (float)(atol + rtol * fabs((double)want[i]));
    check_bound(name, got, want, bound, n);
    free(bound);
}

/* max |got - want| <= tol * max |want| (normwise). */
static inline void check_norm(const char *name, const float *got, const double *want, size_t n,
                              double tol) {
    double maxd = 0.0, maxw = 0.0;
    int nan = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (isnan(d)) nan = 1;
        if (d > maxd) maxd = d;
        if (fabs(want[i]) > maxw) maxw = fabs(want[i]);
    }
    double rel = maxw > 0.0 ? maxd / maxw : maxd;
    CHECK(!nan && rel <= tol && maxw > 0.0, "%s: normwise rel err %.3g (tol %.1g, max|ref| %.3g)",
          name, rel, tol, maxw);
}

static inline void check_norm_f(const char *name, const float *got, const float *want, size_t n,
                                double tol) {
    double *w = to_d(want, n);
    check_norm(name, got, w, n, tol);
    free(w);
}

static inline void check_exact(const char *name, const float *got, const float *want, size_t n) {
    CHECK(memcmp(got, want, n * sizeof(float)) == 0, "%s: bit-exact", name);
}

static inline void check_scalar(const char *name, double got, double want, double tol) {
    double d = fabs(got - want);
    CHECK(d <= tol, "%s: got %.12g want %.12g (|diff| %.3g, tol %.3g)", name, got, want, d, tol);
}

/* ---- finite differences --------------------------------------------------------------------- */

/* Central differences of a double loss w.r.t. the n doubles at x (x is perturbed in place and
 * restored). h = 1e-4: truncation error ~h^2 |f'''| ~ 1e-8, rounding ~1e-16 |L| / h ~ 1e-10. */
typedef double (*loss_fn)(const void *ctx);
static const double FD_H = 1e-4;

static inline void fd_grad(loss_fn f, const void *ctx, double *x, size_t n, double *grad) {
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + FD_H;
        double lp = f(ctx);
        x[i] = x0 - FD_H;
        double lm = f(ctx);
        x[i] = x0;
        grad[i] = (lp - lm) / (2.0 * FD_H);
    }
}

/* FD tolerance for all backward checks: the float analytic gradient is off by ~1e-6 relative
 * (a few roundings of O(1) terms), the double FD by ~1e-8 (see FD_H); a wrong formula is off
 * by O(1). 1e-4 of the largest gradient entry sits well between. */
static const double FD_TOL = 1e-4;

static inline void check_fd(const char *name, loss_fn f, const void *ctx, double *x, size_t n,
                            const float *analytic) {
    double *fd = xmalloc(n * sizeof(double));
    fd_grad(f, ctx, x, n, fd);
    check_norm(name, analytic, fd, n, FD_TOL);
    free(fd);
}

#endif
