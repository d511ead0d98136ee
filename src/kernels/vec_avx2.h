/* vec_avx2.h — the primitives of vec.h on AVX2 + FMA: 8 lanes; no mask registers, so a lane mask
 * is a vector with all-ones lanes (integer compares make it, blend and and apply it). Include
 * only from a unit compiled with -mavx2 -mfma (CMakeLists.txt). */
#ifndef UP_KERNELS_VEC_AVX2_H
#define UP_KERNELS_VEC_AVX2_H

#include "core/dtype.h"
#include "kernels/bf16_simd.h"
#include "kernels/vec.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define VEC_W 8
typedef __m256 vf;
typedef __m256i vm;
typedef __m256i vi;

VEC_FN vf vf_load(const float *p) {
    return _mm256_loadu_ps(p);
}
VEC_FN void vf_store(float *p, vf x) {
    _mm256_storeu_ps(p, x);
}
VEC_FN vf vf_loada(const float *p) {
    return _mm256_load_ps(p);
}
VEC_FN void vf_storea(float *p, vf x) {
    _mm256_store_ps(p, x);
}
VEC_FN vf vf_zero(void) {
    return _mm256_setzero_ps();
}
VEC_FN vf vf_set1(float s) {
    return _mm256_set1_ps(s);
}
VEC_FN vf vf_bcast(const float *p) {
    return _mm256_broadcast_ss(p);
}
VEC_FN vf vf_add(vf a, vf b) {
    return _mm256_add_ps(a, b);
}
VEC_FN vf vf_sub(vf a, vf b) {
    return _mm256_sub_ps(a, b);
}
VEC_FN vf vf_mul(vf a, vf b) {
    return _mm256_mul_ps(a, b);
}
VEC_FN vf vf_fma(vf a, vf b, vf c) {
    return _mm256_fmadd_ps(a, b, c);
}
VEC_FN vf vf_max(vf a, vf b) {
    return _mm256_max_ps(a, b);
}

/* The AVX-512 exp bit for bit: the same operations; 2^n is built in the exponent field instead
 * of scalef, which is exact for the n in [-126, 127] that the clamp leaves. NaN lanes: the
 * conversion gives some n, p is NaN. */
VEC_FN vf vf_exp(vf x) {
    const __m256 lo = _mm256_set1_ps(ATTN_EXP_LO);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    __m256 xc = _mm256_max_ps(lo, x); // max/min return the second operand on NaN: keeps NaN
    xc = _mm256_min_ps(_mm256_set1_ps(88.0f), xc);
    const __m256 fn = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(ATTN_EXP_C1), xc);
    r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(ATTN_EXP_C2), r);
    __m256 p = _mm256_set1_ps(ATTN_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    const __m256i two_n = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(fn), _mm256_set1_epi32(127)), 23); // p * 2^n
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(two_n)));
}

/* ---- masks (all-ones lanes are kept) --------------------------------------------------------- */

VEC_FN __m256i vec_iota(void) {
    return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
}
VEC_FN vm vm_all(void) {
    return _mm256_set1_epi32(-1);
}
VEC_FN vm vm_below(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), vec_iota());
}
VEC_FN vm vm_from(int t) {
    return _mm256_cmpgt_epi32(vec_iota(), _mm256_set1_epi32(t - 1));
}
VEC_FN vm vm_upto(int t) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(t + 1), vec_iota());
}
VEC_FN vm vm_and(vm a, vm b) {
    return _mm256_and_si256(a, b);
}
VEC_FN vf vf_load_m(const float *p, vm m) {
    return _mm256_maskload_ps(p, m);
}
VEC_FN void vf_store_m(float *p, vm m, vf x) {
    _mm256_maskstore_ps(p, m, x);
}
VEC_FN vf vf_maskz(vm m, vf x) {
    return _mm256_and_ps(_mm256_castsi256_ps(m), x);
}
/* masked lanes compare mx with itself */
VEC_FN vf vf_max_m(vf mx, vm m, vf s) {
    return _mm256_max_ps(mx, _mm256_blendv_ps(mx, s, _mm256_castsi256_ps(m)));
}
VEC_FN vf vf_neginf_to_zero(vf x) {
    return _mm256_blendv_ps(x, _mm256_setzero_ps(),
                            _mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
}
VEC_FN vi vi_load_m(const int32_t *p, vm m) {
    return _mm256_maskload_epi32((const int *)p, m);
}
VEC_FN vi vi_zero(void) {
    return _mm256_setzero_si256();
}
VEC_FN vm vm_le(vi v, int j) {
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(v, _mm256_set1_epi32(j)), vm_all());
}

/* ---- bf16 ------------------------------------------------------------------------------------ */

VEC_FN vf vf_load_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
/* element by element (AVX2 has no 16-bit masked load) */
VEC_FN void vf_store_bf16_n(float *d, const uint16_t *s, int n) {
    bf16_widen_n(d, s, (size_t)n);
}
VEC_FN void vbf_store_round(uint16_t *p, vf x) {
    __m256i r = bf16_round_avx2(_mm256_castps_si256(x));
    r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08); // the two lanes' halves
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(r));
}

/* gcc otherwise folds a loop-invariant vector's load into each of its uses */
#define VEC_PIN(x) __asm__("" : "+x"(x))

VEC_FN void vec_prefetch_l1(const void *p) {
    _mm_prefetch((const char *)p, _MM_HINT_T0);
}

#endif
