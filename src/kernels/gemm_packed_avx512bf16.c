/* gemm_packed_avx512bf16.c — the packed bf16 GEMM's micro-kernel on AVX512_BF16's dot product
 * (VDPBF16PS), run only on the "avx512bf16" kernel path. Compiled with -mavx512f -mavx512bw
 * -mavx512dq -mavx512vl -mavx512bf16 -mavx2 -mfma (CMakeLists.txt).
 *
 * The panels hold bf16 pairs along k (gemm_packed.h's pair layout), packed without widening: a
 * row-major A panel is a copy of A's rows, the k-major layouts interleave rows k and k+1. The
 * sums are gemm_packed_body.h's, one step per pair of k: acc(i, j) = VDPBF16PS(acc(i, j), the pair
 * a(i, k..k+1) broadcast, the pairs b(k..k+1, j)), fp32 accumulators from 0, then the body's
 * epilogue (t = alpha acc; C = t or fma(beta, C, t); the bf16 rounding into cout from the
 * registers). A 12 x 32 tile: 24 zmm accumulators, two B vectors, A's pairs broadcast from memory.
 * Half the bytes per multiply-add of the fp32 panels, and twice the multiply-adds per instruction.
 *
 * The bits. Intel's pseudo-code for VDPBF16PS adds the odd pair's product first, then the even
 * one's, inputs denormal as zero, the result flushed to zero, rounding to nearest even whatever
 * MXCSR says. Measured on AMD Zen 5 (family 26; 96M lanes of random operands, wide exponents,
 * overflow and underflow included): the result equals, bit for bit (NaNs as NaNs),
 *     acc = ftz(fmaf(a[2k+1], b[2k+1], acc)); acc = ftz(fmaf(a[2k], b[2k], acc))
 * on operands with bf16 denormals read as zero: two fused multiply-adds, odd term first, each
 * rounding once with its product exact and unbounded (a product past fp32's range does not turn
 * into Inf before the add). Summing the pair first, the even term first, or rounding the product
 * first each differ. For products inside fp32's normal range (all of the model's) that is plain
 * fp32 summation of exact products in the order k+1, k, k+3, k+2, ...: so the bits differ from the
 * fp32 paths' (k ascending) by design, and test_gemm_bf16 bounds them against float64 and reports
 * whether they equal that emulation (on other CPUs they may not). Every element of C is summed
 * the same way wherever its tile falls, so 1 and 2 threads give the same bits. */
#if defined(__x86_64__)
#include "kernels/vec_avx512.h"

#include <string.h>

/* One step of the sums: the pair a(i, k..k+1) in every lane, times 16 columns' pairs of B. */
typedef __m512i gemm_vb;
#define gemm_load_b(p) _mm512_loadu_si512(p)
#define gemm_bcast_a(p) _mm512_broadcastd_epi32(_mm_loadu_si32(p))
#define gemm_madd(x, b, c) _mm512_dpbf16_ps(c, (__m512bh)(x), (__m512bh)(b))
#define GEMM_PAIRS 1
#define GEMM_F32_OPS (&gemm_packed_avx512)
enum { GEMM_MR = 12 };
#define GEMM_ATTR
#include "gemm_packed_body.h"

/* 32-bit words (pairs) of rows r0 and r1 (NULL: zeros), n <= 16 of each from p: r0's bf16 in the
 * low halves. */
static inline __m512i pair_rows16(const uint16_t *r0, const uint16_t *r1, int n) {
    __mmask16 m = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
    __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r0));
    if (!r1) return lo;
    __m512i hi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r1));
    return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

/* B micro-panel in pairs: word (kp, j) = op(B)(k0 + 2kp, j0 + j) | op(B)(k0 + 2kp + 1, .) << 16. */
static void gemm_mk_pack_b(float *dst, const uint16_t *B, int ldb, int transb, int k0, int j0,
                           int kc, int n) {
    const int kp_n = (kc + 1) / 2;
    uint32_t *d = (uint32_t *)dst;
    if (!transb) { // B (K, N): rows k and k+1 interleaved, 16 columns at a time
        for (int kp = 0; kp < kp_n; kp++) {
            const uint16_t *r0 = B + (size_t)(k0 + 2 * kp) * (size_t)ldb + j0;
            const uint16_t *r1 = 2 * kp + 1 < kc ? r0 + ldb : NULL;
            for (int j = 0; j < GEMM_NR; j += 16) {
                int w = n - j < 0 ? 0 : n - j;
                _mm512_storeu_si512(d + (size_t)kp * GEMM_NR + j,
                                    pair_rows16(r0 + j, r1 ? r1 + j : NULL, w));
            }
        }
        return;
    }
    /* B (N, K): row j0 + j of B holds column j's pairs as consecutive words, so the panel is a
     * transpose of 32-bit words; 8 x 8 blocks of whole words, as the fp32 packing does for
     * floats (gemm_packed_pack_b_generic; the shuffles move bits, they do no arithmetic). */
    int kp8 = 0;
    if (n == GEMM_NR)
        for (; 2 * (kp8 + 8) <= kc; kp8 += 8)
            for (int j = 0; j < GEMM_NR; j += 8) {
                __m256 r[8];
                for (int i = 0; i < 8; i++)
                    r[i] = _mm256_castsi256_ps(_mm256_loadu_si256(
                        (const __m256i *)(B + (size_t)(j0 + j + i) * (size_t)ldb + k0 + 2 * kp8)));
                gemm_transpose8_store(r, dst + (size_t)kp8 * GEMM_NR + j, GEMM_NR);
            }
    for (int j = 0; j < GEMM_NR; j++) { // the rest word by word; columns past n are zero
        const uint16_t *s = B + (size_t)(j0 + j) * (size_t)ldb + k0;
        for (int kp = kp8; kp < kp_n; kp++) {
            uint32_t lo = j < n ? s[2 * kp] : 0;
            uint32_t hi = j < n && 2 * kp + 1 < kc ? s[2 * kp + 1] : 0;
            d[(size_t)kp * GEMM_NR + j] = lo | hi << 16;
        }
    }
}

/* A micro-panel in pairs: row-major (A (M, K)) mr rows of (kc + 1) / 2 words, A's rows copied;
 * k-major (A (K, M)) (kc + 1) / 2 rows of mr words, A's rows k and k+1 interleaved. */
static void gemm_mk_pack_a(float *dst, const uint16_t *A, int lda, int transa, int i0, int k0,
                           int kc, int m) {
    const int kp_n = (kc + 1) / 2;
    if (transa) {
        uint32_t *d = (uint32_t *)dst;
        const __mmask16 keep = (__mmask16)((1u << GEMM_MR) - 1);
        for (int kp = 0; kp < kp_n; kp++) {
            const uint16_t *r0 = A + (size_t)(k0 + 2 * kp) * (size_t)lda + i0;
            _mm512_mask_storeu_epi32(d + (size_t)kp * GEMM_MR, keep,
                                     pair_rows16(r0, 2 * kp + 1 < kc ? r0 + lda : NULL, m));
        }
        return;
    }
    uint16_t *d = (uint16_t *)dst;
    for (int i = 0; i < GEMM_MR; i++) {
        uint16_t *row = d + (size_t)i * 2 * (size_t)kp_n;
        if (i < m)
            memcpy(row, A + (size_t)(i0 + i) * (size_t)lda + k0, sizeof(uint16_t) * (size_t)kc);
        else
            memset(row, 0, sizeof(uint16_t) * (size_t)kc);
        if (kc % 2) row[kc] = 0;
    }
}

/* Blocks: kc 1024, as deep in bytes as the fp32 paths' 512 (a B micro-panel of 64 KiB streams
 * from L2, K = 1408 runs in two blocks, dW's K = T makes half the passes over C), mc 240 (an A
 * block of 480 KiB in L2), nc as avx512's; the tile is avx512's (the kernel is not the limit).
 * The blocks and tiles measured against these: DESIGN.md §5.1. */
const gemm_packed_ops gemm_packed_avx512bf16 = GEMM_PACKED_INIT(240, 1024, 3072);
#endif
