/* rmsnorm.c — RMSNorm forward/backward (HF LlamaRMSNorm: w * (x * rsqrt(mean(x^2) + eps))). */
#include "kernels/kernels.h"

#include "dispatch.h"

#include <math.h>

#include "core/check.h"

/* Columns per task of the dw reduction: disjoint cache lines per task, and a small
 * double accumulator array that stays in registers / L1. */
enum { RMSNORM_COL_CHUNK = 64 };

/* One row: the body both drivers below inline (so their bits agree). */
static inline void rmsnorm_row(float *o, float *rstd, const float *x, const float *w, int C,
                               float eps) {
    double ss = 0.0; // double: mean of squares over C up to ~16k without float drift
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++)
        ss += (double)x[c] * x[c];
    float r = (float)(1.0 / sqrt(ss / C + (double)eps));
    *rstd = r;
    // HF order: weight * (x * rstd)
#pragma omp simd
    for (int c = 0; c < C; c++)
        o[c] = (x[c] * r) * w[c];
}

KERNEL_CLONES
void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                     float eps) {
    UP_CHECK(N >= 0 && C > 0, "rmsnorm_forward: bad shape N=%d C=%d", N, C);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++)
        rmsnorm_row(out + (size_t)i * C, rstd + i, inp + (size_t)i * C, w, C, eps);
}

KERNEL_CLONES
void rmsnorm_forward_serial(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                            float eps) {
    UP_CHECK(N >= 0 && C > 0, "rmsnorm_forward: bad shape N=%d C=%d", N, C);
    for (int i = 0; i < N; i++)
        rmsnorm_row(out + (size_t)i * C, rstd + i, inp + (size_t)i * C, w, C, eps);
}

KERNEL_CLONES
void rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                      const float *rstd, int N, int C) {
    UP_CHECK(N >= 0 && C > 0, "rmsnorm_backward: bad shape N=%d C=%d", N, C);
    // dinp: with r = rstd[i], out_c = x_c r w_c and dr/dx_k = -r^3 x_k / C:
    //   dx_k = r d_k w_k - x_k r^3 (sum_c d_c w_c x_c) / C
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;  // (C)
        const float *d = dout + (size_t)i * C; // (C)
        float *dx = dinp + (size_t)i * C;      // (C)
        double dot = 0.0;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; c++)
            dot += (double)(d[c] * w[c]) * x[c];
        double r = rstd[i];
        float rf = rstd[i];
        float k = (float)(dot / C * r * r * r);
#pragma omp simd
        for (int c = 0; c < C; c++)
            dx[c] += (d[c] * w[c]) * rf - x[c] * k;
    }
    if (!dw) return;
    // dw_c += sum_i d_ic (x_ic r_i): a reduction over rows, so parallel over column chunks
    // (each task owns its columns: no race, no per-thread buffers, fixed summation order).
    int nchunk = (C + RMSNORM_COL_CHUNK - 1) / RMSNORM_COL_CHUNK;
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < nchunk; ch++) {
        int c0 = ch * RMSNORM_COL_CHUNK;
        int c1 = c0 + RMSNORM_COL_CHUNK < C ? c0 + RMSNORM_COL_CHUNK : C;
        double acc[RMSNORM_COL_CHUNK] = {0};
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C;
            const float *d = dout + (size_t)i * C;
            float r = rstd[i];
#pragma omp simd
            for (int c = c0; c < c1; c++)
                acc[c - c0] += (double)(d[c] * (x[c] * r));
        }
        for (int c = c0; c < c1; c++)
            dw[c] += (float)acc[c - c0];
    }
}
