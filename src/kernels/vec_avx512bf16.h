/* vec_avx512bf16.h — vec_avx512.h plus the bf16 dot product of AVX512_BF16 (VDPBF16PS) and the
 * pair layout it reads. Include only from a unit compiled with AVX-512 F/BW/DQ/VL and BF16
 * (CMakeLists.txt: attention_avx512bf16.c).
 *
 * A pair vector `vbp` holds VEC_W pairs of bf16, lane i the elements 2i (low 16 bits) and 2i+1
 * (high 16 bits) of 2 VEC_W; in memory a pair is one uint32_t. vf_dot2 adds to each fp32 lane
 * the two products of its pairs: the operands of a product are laid out with their pairs along
 * the reduction dimension (element k in the low half, k+1 in the high half), see
 * attention_dp_body.h. Each bf16 x bf16 product is exact in fp32 (8 + 8 significant bits); the
 * instruction adds the two to the accumulator with fp32 rounding, denormal inputs and results
 * flushed to zero (Intel SDM, VDPBF16PS: "DAZ, FTZ, RNE, no exceptions").
 *   vbp_load(p) vbp_store(p, x)  VEC_W pairs, unaligned; vbp_load_m: the lanes of m, 0 elsewhere
 *   vbp_load_bf16_n(p, n)        the pairs of the first n <= 2 VEC_W bf16 at p (any alignment),
 *                                0 after them (and no read there)
 *   vbp_bcast(p)                 the pair p[0], p[1] (bf16) in every lane
 *   vbp_store_m(p, m, x)         the lanes of m stored, memory of the others untouched
 *   vbp_interleave(a, b)         lane i = (a[i], b[i]): VEC_W bf16 of two rows made pairs;
 *                                vbp_interleave_m(a, ma, b, mb): a[i] on the lanes of ma and
 *                                b[i] on those of mb, 0 elsewhere (and no read there)
 *   vbp_round2(a, b)             lane i = (bf16 of a_i, bf16 of b_i), bf16.h's rounding
 *                                (VCVTNE2PS2BF16: nearest even, denormals to zero)
 *   vbp_store_halves(pa, pb, x)  the VEC_W low halves of x to pa, the high halves to pb (bf16)
 *   vf_dot2(acc, a, b)           acc + a.lo * b.lo + a.hi * b.hi, lane by lane
 *   vf_same(a, b)                1 if every lane of a equals b's (an ordered compare) */
#ifndef UP_KERNELS_VEC_AVX512BF16_H
#define UP_KERNELS_VEC_AVX512BF16_H

#include "kernels/vec_avx512.h"

#include <string.h>

typedef __m512bh vbp;

VEC_FN vbp vbp_load(const uint32_t *p) {
    return (vbp)_mm512_loadu_si512(p);
}
VEC_FN vbp vbp_load_m(const uint32_t *p, vm m) {
    return (vbp)_mm512_maskz_loadu_epi32(m, p);
}
VEC_FN void vbp_store(uint32_t *p, vbp x) {
    _mm512_storeu_si512(p, (__m512i)x);
}
VEC_FN void vbp_store_m(uint32_t *p, vm m, vbp x) {
    _mm512_mask_storeu_epi32(p, m, (__m512i)x);
}
VEC_FN vbp vbp_load_bf16_n(const uint16_t *p, int n) {
    if (n >= 32) return (vbp)_mm512_loadu_si512(p);
    return (vbp)_mm512_maskz_loadu_epi16((__mmask32)((1u << n) - 1), p);
}
VEC_FN vbp vbp_bcast(const uint16_t *p) {
    uint32_t x;
    memcpy(&x, p, sizeof x);
    return (vbp)_mm512_set1_epi32((int)x);
}
VEC_FN vbp vbp_interleave(const uint16_t *a, const uint16_t *b) {
    const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)a));
    const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)b));
    return (vbp)_mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}
VEC_FN vbp vbp_interleave_m(const uint16_t *a, vm ma, const uint16_t *b, vm mb) {
    const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(ma, a));
    const __m512i hi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mb, b));
    return (vbp)_mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}
VEC_FN vbp vbp_round2(vf a, vf b) {
    // [a_0 .. a_15, b_0 .. b_15] as 32 bf16, then a_i and b_i side by side
    const __m512i r = (__m512i)_mm512_cvtne2ps_pbh(b, a);
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return (vbp)_mm512_permutexvar_epi16(idx, r);
}
VEC_FN void vbp_store_halves(uint16_t *pa, uint16_t *pb, vbp x) {
    const __m512i u = (__m512i)x;
    _mm256_storeu_si256((__m256i *)pa, _mm512_cvtepi32_epi16(u));
    _mm256_storeu_si256((__m256i *)pb, _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
}
VEC_FN int vf_same(vf a, vf b) {
    return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ) == 0xFFFF;
}
VEC_FN vf vf_dot2(vf acc, vbp a, vbp b) {
    return _mm512_dpbf16_ps(acc, a, b);
}

#endif
