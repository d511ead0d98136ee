/* vec_portable.h — the primitives of vec.h in plain C, for any CPU: a "vector" is an array of
 * VEC_W = 8 floats and every primitive a loop over its lanes, in the lanes' order, with the
 * rounding of the scalar operation (fmaf: one rounding; libm's where the CPU has no FMA, which is
 * correctly rounded too), so a body compiled on it sums exactly as on the vector paths. The loops
 * are short and fixed: gcc vectorises them where the unit is cloned per CPU (dispatch.h).
 * A lane mask is a bit set (bit i: lane i). */
#ifndef UP_KERNELS_VEC_PORTABLE_H
#define UP_KERNELS_VEC_PORTABLE_H

#include "kernels/bf16.h"
#include "kernels/vec.h"

#include <math.h>
#include <string.h>

#define VEC_W 8
typedef struct {
    float v[VEC_W];
} vf;
typedef uint32_t vm;
typedef struct {
    int32_t v[VEC_W];
} vi;

#define VEC_LANES(i) for (int i = 0; i < VEC_W; i++)

VEC_FN vf vf_load(const float *p) {
    vf r;
    memcpy(r.v, p, sizeof r.v);
    return r;
}
VEC_FN void vf_store(float *p, vf x) {
    memcpy(p, x.v, sizeof x.v);
}
VEC_FN vf vf_loada(const float *p) {
    return vf_load(p);
}
VEC_FN void vf_storea(float *p, vf x) {
    vf_store(p, x);
}
VEC_FN vf vf_set1(float s) {
    vf r;
    VEC_LANES(i) r.v[i] = s;
    return r;
}
VEC_FN vf vf_zero(void) {
    return vf_set1(0.0f);
}
VEC_FN vf vf_bcast(const float *p) {
    return vf_set1(*p);
}
VEC_FN vf vf_add(vf a, vf b) {
    VEC_LANES(i) a.v[i] = a.v[i] + b.v[i];
    return a;
}
VEC_FN vf vf_sub(vf a, vf b) {
    VEC_LANES(i) a.v[i] = a.v[i] - b.v[i];
    return a;
}
VEC_FN vf vf_mul(vf a, vf b) {
    VEC_LANES(i) a.v[i] = a.v[i] * b.v[i];
    return a;
}
VEC_FN vf vf_fma(vf a, vf b, vf c) {
    VEC_LANES(i) c.v[i] = fmaf(a.v[i], b.v[i], c.v[i]);
    return c;
}
/* the x86 rule: the second operand unless the first is the larger (so NaN gives b) */
VEC_FN vf vf_max(vf a, vf b) {
    VEC_LANES(i) a.v[i] = a.v[i] > b.v[i] ? a.v[i] : b.v[i];
    return a;
}

/* The exp of vec.h on one float, in plain C (fmaf, round-to-nearest by the 1.5*2^23 trick) so
 * that gcc vectorises it under omp simd (attention_portable.c). */
#pragma omp declare simd notinbranch
static inline float vec_exp1(float x) {
    float xc = x < ATTN_EXP_LO ? ATTN_EXP_LO : x;
    xc = xc > 88.0f ? 88.0f : xc;
    float fn = xc * 1.44269504088896341f + 12582912.0f; // round(x / ln2) + 1.5*2^23
    fn -= 12582912.0f;
    float r = fmaf(fn, -ATTN_EXP_C1, xc);
    r = fmaf(fn, -ATTN_EXP_C2, r);
    float p = ATTN_EXP_P0;
    p = fmaf(p, r, ATTN_EXP_P1);
    p = fmaf(p, r, ATTN_EXP_P2);
    p = fmaf(p, r, ATTN_EXP_P3);
    p = fmaf(p, r, ATTN_EXP_P4);
    p = fmaf(p, r, ATTN_EXP_P5);
    p = fmaf(p, r * r, r) + 1.0f;
    // 2^n, n in [-126, 127]; a NaN x gives a NaN fn: any n does then (p is NaN), so the cast
    // and the shift see -127 instead of a NaN (undefined to convert)
    const float fc = fn >= -127.0f ? fn : -127.0f;
    uint32_t bits = (uint32_t)((int32_t)fc + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    float y = p * two_n;
    return x < ATTN_EXP_LO ? 0.0f : y;
}
VEC_FN vf vf_exp(vf x) {
    VEC_LANES(i) x.v[i] = vec_exp1(x.v[i]);
    return x;
}

/* ---- masks ----------------------------------------------------------------------------------- */

VEC_FN vm vm_all(void) {
    return (1u << VEC_W) - 1;
}
VEC_FN vm vm_below(int n) {
    return n >= VEC_W ? vm_all() : n <= 0 ? 0u : (1u << n) - 1;
}
VEC_FN vm vm_from(int t) {
    return vm_all() & ~vm_below(t);
}
VEC_FN vm vm_upto(int t) {
    return t >= VEC_W - 1 ? vm_all() : t < 0 ? 0u : vm_below(t + 1);
}
VEC_FN vm vm_and(vm a, vm b) {
    return a & b;
}
VEC_FN vf vf_load_m(const float *p, vm m) {
    vf r;
    VEC_LANES(i) r.v[i] = m >> i & 1 ? p[i] : 0.0f;
    return r;
}
VEC_FN void vf_store_m(float *p, vm m, vf x) {
    VEC_LANES(i) if (m >> i & 1) p[i] = x.v[i];
}
VEC_FN vf vf_maskz(vm m, vf x) {
    VEC_LANES(i) x.v[i] = m >> i & 1 ? x.v[i] : 0.0f;
    return x;
}
VEC_FN vf vf_max_m(vf mx, vm m, vf s) {
    VEC_LANES(i) mx.v[i] = m >> i & 1 && !(mx.v[i] > s.v[i]) ? s.v[i] : mx.v[i];
    return mx;
}
VEC_FN vf vf_neginf_to_zero(vf x) {
    VEC_LANES(i) x.v[i] = x.v[i] == -INFINITY ? 0.0f : x.v[i];
    return x;
}
VEC_FN vi vi_zero(void) {
    vi r;
    VEC_LANES(i) r.v[i] = 0;
    return r;
}
VEC_FN vi vi_load_m(const int32_t *p, vm m) {
    vi r;
    VEC_LANES(i) r.v[i] = m >> i & 1 ? p[i] : 0;
    return r;
}
VEC_FN vm vm_le(vi v, int j) {
    vm r = 0;
    VEC_LANES(i) r |= (vm)(v.v[i] <= j) << i;
    return r;
}

/* ---- bf16 ------------------------------------------------------------------------------------ */

VEC_FN vf vf_load_bf16(const uint16_t *p) {
    vf r;
    VEC_LANES(i) r.v[i] = bf16_widen(p[i]);
    return r;
}
VEC_FN void vf_store_bf16_n(float *d, const uint16_t *s, int n) {
    bf16_widen_n(d, s, (size_t)n);
}
VEC_FN void vbf_store_round(uint16_t *p, vf x) {
    VEC_LANES(i) p[i] = bf16_round(x.v[i]);
}

#define VEC_PIN(x) ((void)0)

VEC_FN void vec_prefetch_l1(const void *p) {
    __builtin_prefetch(p, 0, 3);
}

#endif
