/* test_rope.c — the rotary position embedding of kernels.h.
 *
 * Inverse frequencies, plain and llama3-scaled, against hand-computed values from HF
 * transformers / torch; the fast table-driven forward and backward against their reference twins
 * (kernels_ref.h) over head sizes, row counts and large positions; the backward undoing the
 * forward; and the backward against central finite differences of a double-precision forward
 * written here (loss = sum(out * g) for a random upstream g). One line per check, then a summary
 * line; exit status 1 on any failure. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "io/config.h"
#include "kernels/kernels.h"
#include "kernels/kernels_ref.h"

#include "harness.h"
#include "kernels_util.h"

/* ---- RoPE ----------------------------------------------------------------------------------- */

/* inv_freq against torch (HF transformers' code run in torch 1.13, float32). Tolerance 8 ulp:
 * powf of two libms may differ by 1 ulp, which the llama3 mid-band blend (1 - smooth) / factor
 * + smooth can amplify about 4x where old_ctx / wavelen - low_freq_factor cancels; a wrong band
 * or formula is off by percents. */
static void check_inv_freq(const char *name, int HS, float theta, const rope_scaling *sc,
                           const int *idx, const float *want, int n) {
    float inv[64];
    rope_inv_freq(inv, HS, theta);
    if (sc->type == ROPE_SCALING_LLAMA3)
        rope_llama3_scale(inv, HS, sc->factor, sc->low_freq_factor, sc->high_freq_factor,
                          sc->original_max_pos);
    float got[16], exp_[16], bound[16];
    for (int i = 0; i < n; i++) {
        got[i] = inv[idx[i]];
        exp_[i] = want[i];
        bound[i] = 8 * FLT_EPSILON * fabsf(want[i]);
    }
    check_bound(name, got, exp_, bound, (size_t)n);
}

/* per-element bound for a rotation of x (N, nh, HS): k eps (|x1| + |x2|) of the input pair */
static float *rope_bound(const float *x, int N, int nh, int HS, float k) {
    size_t n = (size_t)N * nh * HS;
    int half = HS / 2;
    float *b = xmalloc(n * sizeof(float));
    for (size_t r = 0; r < (size_t)N * nh; r++)
        for (int j = 0; j < half; j++) {
            float v = k * FLT_EPSILON * (fabsf(x[r * HS + j]) + fabsf(x[r * HS + j + half]));
            b[r * HS + j] = b[r * HS + j + half] = v;
        }
    return b;
}

typedef struct {
    int N, nh, HS;
    int64_t pos0;
    const float *inv_freq;
    double *x, *g;
} rope_ctx;

static double rope_loss(const void *p) {
    const rope_ctx *c = p;
    int half = c->HS / 2;
    double L = 0.0;
    for (int i = 0; i < c->N; i++)
        for (int h = 0; h < c->nh; h++)
            for (int j = 0; j < half; j++) {
                double a = (double)(c->pos0 + i) * (double)c->inv_freq[j];
                size_t o = ((size_t)i * c->nh + h) * c->HS + j;
                double x1 = c->x[o], x2 = c->x[o + half];
                L += c->g[o] * (x1 * cos(a) - x2 * sin(a)) +
                     c->g[o + half] * (x2 * cos(a) + x1 * sin(a));
            }
    return L;
}

static void test_rope(void) {
    // Llama 3.1: HS 128, theta 500000, factor 8, low 1, high 4, original 8192: indices from the
    // high band (0..28), the mid band (29..34) and the low band (35..63).
    rope_scaling l31 = {ROPE_SCALING_LLAMA3, 8.0f, 1.0f, 4.0f, 8192};
    static const int idx_a[] = {0, 1, 20, 28, 29, 31, 34, 35, 50, 63};
    static const float want_a[] = {
        0x1p+0f,         0x1.a11582p-1f,  0x1.0f5386p-6f,  0x1.a4ee4p-9f,   0x1.1bfa0cp-9f,
        0x1.c12f3cp-11f, 0x1.765ba4p-13f, 0x1.90d10cp-14f, 0x1.280d96p-18f, 0x1.4985fep-22f};
    check_inv_freq("rope_inv_freq llama3 HS=128 theta=5e5 vs torch", 128, 500000.0f, &l31, idx_a,
                   want_a, 10);
    static const int idx_b[] = {0, 1, 7, 31};
    static const float want_b[] = {0x1p+0f, 0x1.7ff222p-1f, 0x1.111aeep-3f, 0x1.17a8e4p-13f};
    rope_scaling none = {ROPE_SCALING_NONE, 0, 0, 0, 0};
    check_inv_freq("rope_inv_freq plain HS=64 theta=1e4 vs torch", 64, 10000.0f, &none, idx_b,
                   want_b, 4);
    // a small llama3 setting with two mid-band entries (1, 2): factor 32, low 1, high 4, ctx 64
    rope_scaling small = {ROPE_SCALING_LLAMA3, 32.0f, 1.0f, 4.0f, 64};
    static const int idx_c[] = {0, 1, 2, 3, 4, 5, 6, 7};
    static const float want_c[] = {0x1p+0f,         0x1.e4bc36p-3f,  0x1.e84a2cp-9f,
                                   0x1.030dc6p-10f, 0x1.47ae14p-12f, 0x1.9e7c7p-14f,
                                   0x1.0624dep-15f, 0x1.4b96cp-17f};
    check_inv_freq("rope_inv_freq llama3 HS=16 factor=32 ctx=64 vs torch", 16, 10000.0f, &small,
                   idx_c, want_c, 8);

    static const int hs_list[] = {16, 32, 64, 128};
    static const int n_list[] = {1, 37};
    static const int64_t pos_list[] = {0, 1000003};
    char name[160];
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 2; b++)
            for (int p = 0; p < 2; p++) {
                int HS = hs_list[a], N = n_list[b], nh = 3, half = HS / 2;
                int64_t pos0 = pos_list[p];
                size_t n = (size_t)N * nh * HS;
                float inv[64], *cos_t = zeros_f((size_t)N * half),
                               *sin_t = zeros_f((size_t)N * half);
                rope_inv_freq(inv, HS, 500000.0f);
                rope_llama3_scale(inv, HS, 8.0f, 1.0f, 4.0f, 8192);
                rope_tables(cos_t, sin_t, inv, pos0, N, HS);
                float *x = rand_f(n, -1, 1), *fast = copy_f(x, n), *ref = copy_f(x, n);
                rope_forward(fast, cos_t, sin_t, N, nh, HS);
                ref_rope_forward(ref, inv, pos0, N, nh, HS);
                // float tables (cos, sin each 0.5 ulp), two products and a sum (0.5 ulp each):
                // <= 2 eps (|x1| + |x2|) from the double twin; allow 4 eps.
                float *bound = rope_bound(x, N, nh, HS, 4.0f);
                snprintf(name, sizeof name, "rope_forward HS=%d N=%d nh=%d pos0=%lld vs ref", HS, N,
                         nh, (long long)pos0);
                check_bound(name, fast, ref, bound, n);
                float *dfast = copy_f(x, n), *dref = copy_f(x, n);
                rope_backward(dfast, cos_t, sin_t, N, nh, HS);
                ref_rope_backward(dref, inv, pos0, N, nh, HS);
                snprintf(name, sizeof name, "rope_backward HS=%d N=%d nh=%d pos0=%lld vs ref", HS,
                         N, nh, (long long)pos0);
                check_bound(name, dfast, dref, bound, n);
                // the backward undoes the forward (orthogonal rotation): two rotations' rounding
                // plus cos^2 + sin^2 = 1 +- eps in float; allow 8 eps
                rope_backward(fast, cos_t, sin_t, N, nh, HS);
                free(bound);
                bound = rope_bound(x, N, nh, HS, 8.0f);
                snprintf(name, sizeof name,
                         "rope_backward(rope_forward(x)) == x HS=%d N=%d pos0=%lld", HS, N,
                         (long long)pos0);
                check_bound(name, fast, x, bound, n);
                free(cos_t), free(sin_t), free(x), free(fast), free(ref), free(bound);
                free(dfast), free(dref);
            }
    // finite differences through the fast tables
    int N = 5, nh = 2, HS = 16, half = HS / 2;
    int64_t pos0 = 1000;
    size_t n = (size_t)N * nh * HS;
    float inv[8], *cos_t = zeros_f((size_t)N * half), *sin_t = zeros_f((size_t)N * half);
    rope_inv_freq(inv, HS, 10000.0f);
    rope_llama3_scale(inv, HS, 32.0f, 1.0f, 4.0f, 64);
    rope_tables(cos_t, sin_t, inv, pos0, N, HS);
    float *x = rand_f(n, -1, 1), *g = rand_f(n, -1, 1), *dx = copy_f(g, n);
    rope_backward(dx, cos_t, sin_t, N, nh, HS);
    rope_ctx c = {N, nh, HS, pos0, inv, to_d(x, n), to_d(g, n)};
    check_fd("rope_backward vs finite differences", rope_loss, &c, c.x, n, dx);
    free(c.x), free(c.g), free(cos_t), free(sin_t), free(x), free(g), free(dx);
}

int main(void) {
    harness.verbose = 1; /* one PASS line per check, with its error figures */
    test_rope();
    return harness_finish("test_rope");
}
