/* loss.c — fused cross-entropy forward + backward over rows of logits. */
#include "kernels/kernels.h"

#include "dispatch.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/check.h"

#if defined(__GLIBC__) && defined(__x86_64__) && defined(_OPENMP)
/* glibc declares its vector expf (libmvec, <= 4 ulp) only under -ffast-math, which we never use.
 * Declaring the SIMD variants here lets `omp simd` loops call them; N*V exps make this the
 * hottest elementwise loop of a step. -lm pulls libmvec in as needed. */
#pragma omp declare simd notinbranch
extern float expf(float);
#endif

/* Upper bound on threads for the per-thread partial sums (a stack array). */
enum { CE_MAX_THREADS = 256 };

/* One row x (V): returns -log softmax(x)[target] and leaves grad_scale * (softmax - onehot)
 * in x. Stable: exponents are taken of x - max(x) <= 0. */
KERNEL_CLONES
static double ce_row(float *x, int32_t target, int V, float grad_scale) {
    float mx = x[0];
#pragma omp simd reduction(max : mx)
    for (int v = 0; v < V; v++)
        mx = x[v] > mx ? x[v] : mx;
    float xt = x[target];
    double sum = 0.0; // double: V ~ 128k terms of size <= 1
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; v++) {
        float e = expf(x[v] - mx);
        x[v] = e;
        sum += (double)e;
    }
    float scale = (float)((double)grad_scale / sum);
#pragma omp simd
    for (int v = 0; v < V; v++)
        x[v] *= scale;
    x[target] -= grad_scale;
    // -log softmax[target] = log-sum-exp - x[target] = mx + log(sum) - x[target]
    return ((double)mx - (double)xt) + log(sum);
}

double cross_entropy_fused(float *logits, const int32_t *targets, int N, int V, float grad_scale) {
    UP_CHECK(N >= 0 && V > 0, "cross_entropy_fused: bad shape N=%d V=%d", N, V);
    for (int i = 0; i < N; i++)
        UP_CHECK(targets[i] < V,
                 "cross_entropy_fused: target %d at row %d is outside the vocabulary (V=%d)",
                 (int)targets[i], i, V);
    // Per-thread partial sums added in thread order after the region: the loss is the same
    // bits run after run for a fixed thread count (an OpenMP reduction adds in arrival order).
    double part[CE_MAX_THREADS];
    int nt_req = omp_get_max_threads();
    if (nt_req > CE_MAX_THREADS) nt_req = CE_MAX_THREADS;
    if (nt_req > N) nt_req = N > 0 ? N : 1;
    int nt_used = 1;
#pragma omp parallel num_threads(nt_req)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        if (t == 0) nt_used = nt;
        int i0 = (int)((int64_t)N * t / nt), i1 = (int)((int64_t)N * (t + 1) / nt);
        double loss = 0.0;
        for (int i = i0; i < i1; i++) {
            float *x = logits + (size_t)i * V; // (V)
            if (targets[i] < 0) {
                memset(x, 0, (size_t)V * sizeof(float)); // ignored row: no loss, no gradient
                continue;
            }
            loss += ce_row(x, targets[i], V, grad_scale);
        }
        part[t] = loss;
    }
    double total = 0.0;
    for (int t = 0; t < nt_used; t++)
        total += part[t];
    return total;
}

/* The top prediction of one row: the first index of its largest value. */
static int32_t row_argmax(const float *x, int V) {
    int32_t best = 0;
    for (int v = 1; v < V; v++)
        if (x[v] > x[best]) best = v;
    return best;
}

/* ce_row's loss without touching the row: the same operations in the same order, and the same
 * per-CPU clones, so that evaluation's loss is training's to the bit. */
KERNEL_CLONES
static double row_loss(const float *x, int32_t target, int V) {
    float mx = x[0];
#pragma omp simd reduction(max : mx)
    for (int v = 0; v < V; v++)
        mx = x[v] > mx ? x[v] : mx;
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; v++)
        sum += (double)expf(x[v] - mx);
    return ((double)mx - (double)x[target]) + log(sum);
}

void cross_entropy_rows(const float *logits, const int32_t *targets, int N, int V, double *loss,
                        int32_t *pred) {
    UP_CHECK(N >= 0 && V > 0, "cross_entropy_rows: bad shape N=%d V=%d", N, V);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * V; // (V)
        int32_t t = targets[i];
        UP_CHECK(t < V, "cross_entropy_rows: target %d at row %d is outside the vocabulary (V=%d)",
                 (int)t, i, V);
        if (loss) loss[i] = t < 0 ? 0.0 : row_loss(x, t, V);
        if (pred) pred[i] = row_argmax(x, V);
    }
}
