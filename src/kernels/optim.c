/* optim.c — AdamW, gradient norm helpers and the learning-rate schedule. */
#include "kernels/kernels.h"

#include "dispatch.h"

#include <math.h>
#include <omp.h>

#include "core/check.h"

/* Upper bound on threads for the per-thread partial sums (a stack array). */
enum { OPTIM_MAX_THREADS = 256 };
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

KERNEL_CLONES
double sum_squares(const float *x, size_t n) {
    // Per-thread partials added in thread order: the same bits run after run for a fixed thread
    // count (the clip factor, hence every parameter, depends on this sum).
    double part[OPTIM_MAX_THREADS];
    int nt_req = n >= OPTIM_PAR_MIN ? omp_get_max_threads() : 1;
    if (nt_req > OPTIM_MAX_THREADS) nt_req = OPTIM_MAX_THREADS;
    int nt_used = 1;
#pragma omp parallel num_threads(nt_req)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        if (t == 0) nt_used = nt;
        size_t chunk = n / (size_t)nt, rem = n % (size_t)nt;
        size_t i0 = (size_t)t * chunk + ((size_t)t < rem ? (size_t)t : rem);
        size_t i1 = i0 + chunk + ((size_t)t < rem ? 1 : 0);
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++)
            s += (double)x[i] * x[i];
        part[t] = s;
    }
    double total = 0.0;
    for (int t = 0; t < nt_used; t++)
        total += part[t];
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
