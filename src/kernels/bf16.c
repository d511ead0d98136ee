/* bf16.c — the paths of the fp32 <-> bf16 conversions (contract and rounding rules: bf16.h; the
 * entries that run the chosen one are kernel_path.c's). Each x86-64 path is compiled for its
 * instruction sets with a function-level target attribute, so the file builds for baseline x86-64
 * and the CPU test picks the path at run time. */
#include "kernels/bf16.h"
#include "kernels/bf16_simd.h"
#include "kernels/dispatch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BF16_X86 1
#endif

/* ---- portable: the reference twin (core/dtype.h's element functions) ------------------------ */

static void from_f32_portable(const float *src, uint16_t *dst, size_t n) {
    bf16_round_n(dst, src, n);
}

static void to_f32_portable(const uint16_t *src, float *dst, size_t n) {
    bf16_widen_n(dst, src, n);
}

#ifdef BF16_X86

/* ---- avx2: 8 lanes, the same integer steps; tails element by element ------------------------- */

#define TARGET_AVX2 __attribute__((target("avx2")))

TARGET_AVX2 static void from_f32_avx2(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r0 = bf16_round_avx2(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m256i r1 = bf16_round_avx2(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
        // packus works per 128-bit half (r0 lo, r1 lo, r0 hi, r1 hi): put the quarters in order
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
    for (; i + 8 <= n; i += 8) {
        __m256i r = bf16_round_avx2(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(p));
    }
    for (; i < n; i++)
        dst[i] = bf16_round(src[i]);
}

TARGET_AVX2 static void to_f32_avx2(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(w, 16));
    }
    for (; i < n; i++)
        dst[i] = bf16_widen(src[i]);
}

static int cpu_has_avx2(void) {
    return kernel_cpu_get()->avx2;
}

/* ---- avx512: 16 lanes in integer ops; tails under a lane mask -------------------------------- */

#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

TARGET_AVX512 static void from_f32_avx512(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i r = bf16_round_avx512(_mm512_loadu_si512(src + i));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512i r = bf16_round_avx512(_mm512_maskz_loadu_epi32(m, src + i));
        _mm512_mask_cvtepi32_storeu_epi16(dst + i, m, r);
    }
}

TARGET_AVX512 static void to_f32_avx512(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(w, 16));
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i));
        _mm512_mask_storeu_epi32(dst + i, m, _mm512_slli_epi32(w, 16));
    }
}

static int cpu_has_avx512(void) {
    return kernel_cpu_avx512(kernel_cpu_get());
}

/* ---- avx512bf16: the instructions themselves; bf16 -> fp32 is the avx512 shift --------------- */

#define TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

TARGET_AVX512BF16 static void from_f32_avx512bf16(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        // VCVTNE2PS2BF16: the second operand fills the low 16 words
        __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512(dst + i, (__m512i)r);
    }
    for (; i < n; i += 16) {
        size_t left = n - i;
        __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        __m256bh r = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
        _mm256_mask_storeu_epi16(dst + i, m, (__m256i)r);
    }
}

static int cpu_has_avx512bf16(void) {
    return cpu_has_avx512() && kernel_cpu_get()->avx512bf16;
}

#endif /* BF16_X86 */

/* ---- the paths ------------------------------------------------------------------------------ */

#ifdef BF16_X86
const bf16_ops bf16_avx512bf16 = {"avx512bf16", "AVX-512 F, BW, DQ, VL and BF16",
                                  cpu_has_avx512bf16, from_f32_avx512bf16, to_f32_avx512};
const bf16_ops bf16_avx512 = {"avx512", "AVX-512 F, BW, DQ and VL", cpu_has_avx512, from_f32_avx512,
                              to_f32_avx512};
const bf16_ops bf16_avx2 = {"avx2", "AVX2", cpu_has_avx2, from_f32_avx2, to_f32_avx2};
#endif
const bf16_ops bf16_portable = {"portable", "nothing", kernel_cpu_any, from_f32_portable,
                                to_f32_portable};

static const bf16_ops *const paths[] = {
#ifdef BF16_X86
    &bf16_avx512bf16,
    &bf16_avx512,
    &bf16_avx2,
#endif
    &bf16_portable,
};
enum { NPATHS = sizeof paths / sizeof paths[0] };

int bf16_path_count(void) {
    return NPATHS;
}

const bf16_ops *bf16_path(int i) {
    return i >= 0 && i < NPATHS ? paths[i] : NULL;
}
