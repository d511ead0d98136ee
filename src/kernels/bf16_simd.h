/* bf16_simd.h — private to src/kernels: bf16_from_f32's rounding (bf16.h: nearest even, NaN kept
 * and made quiet, zero and denormals to a zero of their sign) on the lanes of a vector, for the
 * conversion paths (bf16.c) and the kernels that round in registers (the packed GEMM). Each takes
 * fp32 bit patterns and returns the 16-bit results in the low halves of the 32-bit lanes. */
#ifndef UP_KERNELS_BF16_SIMD_H
#define UP_KERNELS_BF16_SIMD_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define BF16_SIMD_AVX2 __attribute__((target("avx2")))
#define BF16_SIMD_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

BF16_SIMD_AVX2 static inline __m256i bf16_round_avx2(__m256i u) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), one = _mm256_set1_epi32(1);
    __m256i a = _mm256_and_si256(u, abs_mask);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i r =
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, one)));
    r = _mm256_srli_epi32(r, 16);
    // a is non-negative, so the signed compares order it as unsigned ones would
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
    __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x00800000), a);
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x0040)), nan);
    r = _mm256_blendv_epi8(r, _mm256_and_si256(hi, _mm256_set1_epi32(0x8000)), tiny);
    return r; // 16-bit results in the low halves of the lanes
}

BF16_SIMD_AVX512 static inline __m512i bf16_round_avx512(__m512i u) {
    __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_add_epi32(
        u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1))));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000));
    __mmask16 tiny = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x00800000));
    r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x0040));
    r = _mm512_mask_and_epi32(r, tiny, hi, _mm512_set1_epi32(0x8000));
    return r;
}

#endif

#endif
