/* optim.c — AdamW, gradient norm helpers and the learning-rate schedule. */
#include "kernels/kernels.h"

#include "dispatch.h"

#include <math.h>
#include <stdlib.h>

#include "core/check.h"

/* Below this many elements one thread is faster than waking the team. */
enum { OPTIM_PAR_MIN = 1 << 15 };

KERNEL_CLONES
void adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                  const adamw_params *hp, int step, float grad_scale, int decay) {
    UP_CHECK(step >= 1, "adamw_update: step is 1-based (got %d)", step);
    // torch.optim.AdamW order (single-tensor path): p *= 1 - lr*wd; update m, v;
    // p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps). The same math as the header's
    // p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p) with the old p in the decay term;
    // scalars in double as torch does in Python, elementwise in float.
    double bc1 = 1.0 - pow((double)hp->beta1, step);
    double bc2 = 1.0 - pow((double)hp->beta2, step);
    float step_size = (float)((double)hp->lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float decay_mul = decay ? (float)(1.0 - (double)hp->lr * (double)hp->weight_decay) : 1.0f;
    float b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps;
    float one_b1 = (float)(1.0 - (double)hp->beta1), one_b2 = (float)(1.0 - (double)hp->beta2);
#pragma omp parallel for simd schedule(static) if (n >= OPTIM_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        float mi = b1 * m[i] + one_b1 * g;
        float vi = b2 * v[i] + one_b2 * (g * g);
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        param[i] = param[i] * decay_mul - step_size * (mi / denom);
    }
}

enum { SQ_CHUNK = BACKEND_SUMSQ_CHUNK, SQ_LANES = BACKEND_SUMSQ_LANES };

/* One chunk (len <= SQ_CHUNK) in BACKEND_SUMSQ's order: the lanes, then their pairwise sum. */
static inline double sumsq_chunk(const float *x, size_t len) {
    double acc[SQ_LANES] = {0};
    size_t i = 0;
    for (; i + SQ_LANES <= len; i += SQ_LANES)
        for (int j = 0; j < SQ_LANES; j++)
            acc[j] += (double)x[i + j] * x[i + j];
    for (size_t j = 0; i + j < len; j++)
        acc[j] += (double)x[i + j] * x[i + j];
    for (int w = SQ_LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            acc[j] += acc[j + w];
    return acc[0];
}

/* One group (len <= SQ_CHUNK * BACKEND_SUMSQ_GROUP): its chunks' sums in order. */
static double sumsq_group(const float *x, size_t len) {
    double s = 0.0;
    for (size_t c = 0; c < len; c += SQ_CHUNK)
        s += sumsq_chunk(x + c, len - c < SQ_CHUNK ? len - c : SQ_CHUNK);
    return s;
}

KERNEL_CLONES
double sum_squares(const float *x, size_t n) {
    // The groups are the unit of work: threads take whole groups, and their sums are added in
    // order here, so the thread count never shows in the bits (backend.h, BACKEND_SUMSQ).
    const size_t G = (size_t)SQ_CHUNK * BACKEND_SUMSQ_GROUP;
    size_t ng = (n + G - 1) / G;
    if (ng <= 1) return n ? sumsq_group(x, n) : 0.0;
    double *part = malloc(ng * sizeof *part); /* 8 bytes per million floats */
    UP_CHECK(part, "out of memory");
#pragma omp parallel for schedule(static) if (n >= OPTIM_PAR_MIN)
    for (size_t g = 0; g < ng; g++)
        part[g] = sumsq_group(x + g * G, n - g * G < G ? n - g * G : G);
    double total = 0.0;
    for (size_t g = 0; g < ng; g++)
        total += part[g];
    free(part);
    return total;
}

float clip_factor(double norm, float max_norm) {
    if (max_norm <= 0.0f) return 1.0f;
    double f = (double)max_norm / (norm + 1e-6);
    return f < 1.0 ? (float)f : 1.0f;
}

float lr_schedule(int step, int total, float lr, int warmup, float min_frac) {
    UP_CHECK(total > 0 && step >= 0 && step < total && warmup >= 0,
             "lr_schedule: step %d outside [0, %d) or negative warm-up %d", step, total, warmup);
    if (warmup > 0 && step < warmup) return (float)((double)lr * (step + 1) / warmup);
    int span = total - warmup - 1;
    double progress = (double)(step - warmup) / (span > 1 ? span : 1);
    if (progress < 0.0) progress = 0.0;
    if (progress > 1.0) progress = 1.0;
    double lr_min = (double)lr * min_frac;
    return (float)(lr_min + 0.5 * ((double)lr - lr_min) * (1.0 + cos(M_PI * progress)));
}
