/* vec_avx512.h — the primitives of vec.h on AVX-512 F/BW/DQ/VL: 16 lanes, mask registers.
 * Include only from a unit compiled with those flags (CMakeLists.txt). */
#ifndef UP_KERNELS_VEC_AVX512_H
#define UP_KERNELS_VEC_AVX512_H

#include "kernels/bf16_simd.h"
#include "kernels/vec.h"

#include <immintrin.h>
#include <math.h>

#define VEC_W 16
typedef __m512 vf;
typedef __mmask16 vm;
typedef __m512i vi;

VEC_FN vf vf_load(const float *p) {
    return _mm512_loadu_ps(p);
}
VEC_FN void vf_store(float *p, vf x) {
    _mm512_storeu_ps(p, x);
}
VEC_FN vf vf_loada(const float *p) {
    return _mm512_load_ps(p);
}
VEC_FN void vf_storea(float *p, vf x) {
    _mm512_store_ps(p, x);
}
VEC_FN vf vf_zero(void) {
    return _mm512_setzero_ps();
}
VEC_FN vf vf_set1(float s) {
    return _mm512_set1_ps(s);
}
VEC_FN vf vf_bcast(const float *p) {
    return _mm512_set1_ps(*p);
}
VEC_FN vf vf_add(vf a, vf b) {
    return _mm512_add_ps(a, b);
}
VEC_FN vf vf_sub(vf a, vf b) {
    return _mm512_sub_ps(a, b);
}
VEC_FN vf vf_mul(vf a, vf b) {
    return _mm512_mul_ps(a, b);
}
VEC_FN vf vf_fma(vf a, vf b, vf c) {
    return _mm512_fmadd_ps(a, b, c);
}
VEC_FN vf vf_max(vf a, vf b) {
    return _mm512_max_ps(a, b);
}

VEC_FN vf vf_exp(vf x) {
    const __m512 lo = _mm512_set1_ps(ATTN_EXP_LO);
    const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    __m512 xc = _mm512_max_ps(lo, x); // max/min return the second operand on NaN: keeps NaN
    xc = _mm512_min_ps(_mm512_set1_ps(88.0f), xc);
    const __m512 fn = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(ATTN_EXP_C1), xc);
    r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(ATTN_EXP_C2), r);
    __m512 p = _mm512_set1_ps(ATTN_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_scalef_ps(p, fn)); // p * 2^n
}

/* ---- masks ----------------------------------------------------------------------------------- */

VEC_FN vm vm_all(void) {
    return (vm)0xFFFF;
}
VEC_FN vm vm_below(int n) {
    return n >= 16 ? (vm)0xFFFF : n <= 0 ? (vm)0 : (vm)((1u << n) - 1);
}
VEC_FN vm vm_from(int t) {
    return t <= 0 ? (vm)0xFFFF : t >= 16 ? (vm)0 : (vm)(0xFFFFu << t);
}
VEC_FN vm vm_upto(int t) {
    return t >= 15 ? (vm)0xFFFF : t < 0 ? (vm)0 : (vm)((2u << t) - 1);
}
VEC_FN vm vm_and(vm a, vm b) {
    return a & b;
}
VEC_FN vf vf_load_m(const float *p, vm m) {
    return _mm512_maskz_loadu_ps(m, p);
}
VEC_FN void vf_store_m(float *p, vm m, vf x) {
    _mm512_mask_storeu_ps(p, m, x);
}
VEC_FN vf vf_maskz(vm m, vf x) {
    return _mm512_maskz_mov_ps(m, x);
}
VEC_FN vf vf_max_m(vf mx, vm m, vf s) {
    return _mm512_mask_max_ps(mx, m, mx, s);
}
VEC_FN vf vf_neginf_to_zero(vf x) {
    return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ),
                              _mm512_setzero_ps());
}
VEC_FN vi vi_load_m(const int32_t *p, vm m) {
    return _mm512_maskz_loadu_epi32(m, p);
}
VEC_FN vi vi_zero(void) {
    return _mm512_setzero_si512();
}
VEC_FN vm vm_le(vi v, int j) {
    return _mm512_cmple_epi32_mask(v, _mm512_set1_epi32(j));
}

/* ---- bf16 ------------------------------------------------------------------------------------ */

VEC_FN vf vf_load_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
VEC_FN void vf_store_bf16_n(float *d, const uint16_t *s, int n) {
    const __mmask16 tail = vm_below(n);
    _mm512_mask_storeu_epi32(
        d, tail, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(tail, s)), 16));
}
VEC_FN void vbf_store_round(uint16_t *p, vf x) {
    _mm256_storeu_si256((__m256i *)p,
                        _mm512_cvtepi32_epi16(bf16_round_avx512(_mm512_castps_si512(x))));
}

#define VEC_PIN(x) ((void)0)

VEC_FN void vec_prefetch_l1(const void *p) {
    _mm_prefetch((const char *)p, _MM_HINT_T0);
}

#endif
