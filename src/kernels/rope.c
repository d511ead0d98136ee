/* rope.c — rotary position embedding, HF "rotate_half" layout, with the llama3 frequency rule. */
#include "kernels/kernels.h"

#include "dispatch.h"

#include <math.h>

#include "core/check.h"

void rope_inv_freq(float *inv_freq, int HS, float theta) {
    UP_CHECK(HS > 0 && HS % 2 == 0, "rope_inv_freq: head size %d must be even and positive", HS);
    UP_CHECK(theta > 0.0f, "rope_inv_freq: rope_theta must be positive (got %g)", (double)theta);
    int half = HS / 2;
    // HF: inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), all in float32
    for (int i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)HS;
        inv_freq[i] = 1.0f / powf(theta, e);
    }
}

void rope_llama3_scale(float *inv_freq, int HS, float factor, float low_freq_factor,
                       float high_freq_factor, int original_max_pos) {
    UP_CHECK(HS > 0 && HS % 2 == 0, "rope_llama3_scale: head size %d must be even and positive",
             HS);
    UP_CHECK(factor > 0.0f && original_max_pos > 0 && high_freq_factor > low_freq_factor &&
                 low_freq_factor > 0.0f,
             "rope_llama3_scale: bad llama3 rope_scaling (factor %g, low_freq_factor %g, "
             "high_freq_factor %g, original_max_position_embeddings %d)",
             (double)factor, (double)low_freq_factor, (double)high_freq_factor, original_max_pos);
    int half = HS / 2;
    // HF transformers _compute_llama3_parameters, op for op in float32 (Python scalars are
    // doubles, cast to float when they meet the float32 tensor; `s / t` is t.reciprocal() * s).
    double old_ctx = (double)original_max_pos;
    float low_wavelen = (float)(old_ctx / low_freq_factor);
    float high_wavelen = (float)(old_ctx / high_freq_factor);
    float two_pi = (float)(2.0 * M_PI);
    float band = (float)((double)high_freq_factor - (double)low_freq_factor);
    for (int i = 0; i < half; i++) {
        float inv = inv_freq[i];
        float wavelen = (1.0f / inv) * two_pi;
        if (wavelen > low_wavelen) {
            inv_freq[i] = inv / factor; // low frequencies: interpolate by factor
        } else if (!(wavelen < high_wavelen)) {
            // medium band: blend the scaled and unscaled frequency
            float smooth = ((1.0f / wavelen) * (float)old_ctx - low_freq_factor) / band;
            inv_freq[i] = (1.0f - smooth) * inv / factor + smooth * inv;
        } // high frequencies: unchanged
    }
}

void rope_tables(float *cos_t, float *sin_t, const float *inv_freq, int64_t pos0, int N, int HS) {
    UP_CHECK(N >= 0 && HS > 0 && HS % 2 == 0 && pos0 >= 0,
             "rope_tables: bad arguments N=%d HS=%d pos0=%lld", N, HS, (long long)pos0);
    int half = HS / 2;
    // Angle in double: at positions ~1e6 a float angle would be off by ~0.06 rad.
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        double pos = (double)(pos0 + i);
        for (int j = 0; j < half; j++) {
            double a = pos * (double)inv_freq[j];
            cos_t[(size_t)i * half + j] = (float)cos(a);
            sin_t[(size_t)i * half + j] = (float)sin(a);
        }
    }
}

/* Rotates every head of row x (nh, HS) by the table row (cos, sin); sign = +1 forward, -1
 * backward (the transpose of a rotation is the rotation by -angle). The body both drivers below
 * inline (so their bits agree). */
static inline void rope_row(float *x, const float *c, const float *s, int nh, int HS, float sign) {
    int half = HS / 2;
    for (int h = 0; h < nh; h++) {
        float *x1 = x + (size_t)h * HS; // (HS/2) first half
        float *x2 = x1 + half;          // (HS/2) second half
#pragma omp simd
        for (int j = 0; j < half; j++) {
            float a = x1[j], b = x2[j], sn = sign * s[j];
            x1[j] = a * c[j] - b * sn;
            x2[j] = b * c[j] + a * sn;
        }
    }
}

/* Every row i of x (N, nh, HS) by table row i, rows split between the threads, or (serial) on
 * the calling thread. */
KERNEL_CLONES
static void rope_apply(float *x, const float *cos_t, const float *sin_t, int N, int nh, int HS,
                       float sign, int serial) {
    UP_CHECK(N >= 0 && nh >= 0 && HS > 0 && HS % 2 == 0, "rope: bad shape N=%d nh=%d HS=%d", N, nh,
             HS);
    size_t half = (size_t)HS / 2, w = (size_t)nh * HS;
#pragma omp parallel for schedule(static) if (!serial)
    for (int i = 0; i < N; i++)
        rope_row(x + (size_t)i * w, cos_t + (size_t)i * half, sin_t + (size_t)i * half, nh, HS,
                 sign);
}

void rope_forward(float *x, const float *cos_t, const float *sin_t, int N, int nh, int HS) {
    // out1 = x1 cos - x2 sin; out2 = x2 cos + x1 sin
    rope_apply(x, cos_t, sin_t, N, nh, HS, 1.0f, 0);
}

void rope_backward(float *dx, const float *cos_t, const float *sin_t, int N, int nh, int HS) {
    // dx1 = d1 cos + d2 sin; dx2 = d2 cos - d1 sin
    rope_apply(dx, cos_t, sin_t, N, nh, HS, -1.0f, 0);
}

void rope_forward_serial(float *x, const float *cos_t, const float *sin_t, int N, int nh, int HS) {
    rope_apply(x, cos_t, sin_t, N, nh, HS, 1.0f, 1);
}

void rope_backward_serial(float *dx, const float *cos_t, const float *sin_t, int N, int nh,
                          int HS) {
    rope_apply(dx, cos_t, sin_t, N, nh, HS, -1.0f, 1);
}
