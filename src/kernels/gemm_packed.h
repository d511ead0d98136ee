/* gemm_packed.h — private to src/kernels: the "packed" bf16 GEMM path (gemm_bf16.c), a
 * BLIS-style product whose packing widens bf16 to fp32 (gemm_packed.c has the driver), or packs
 * bf16 pairs for a dot-product micro-kernel.
 *
 * Per kernel path (UPIPE_KERNEL, kernels.h) a micro-kernel and its packing routines, each file
 * compiled with its instruction sets (CMakeLists.txt): gemm_packed_avx512bf16.c (pairs),
 * gemm_packed_avx512.c, gemm_packed_avx2.c, and the plain C one in gemm_packed.c.
 *
 * Packed layouts (fp32, zero-padded to whole panels so the kernel never reads garbage):
 *  - B micro-panel: kc rows of nr floats, p[k*nr + j] = B(k, j) (op(B), k-major).
 *  - A micro-panel: mr rows of op(A); "row-major" p[i*kc + k] when A is (M, K) (a widening copy of
 *    contiguous rows), "k-major" p[k*mr + i] when A is (K, M) (also contiguous reads). The
 *    micro-kernel broadcasts A's elements, so both layouts cost it the same and no packing
 *    transposes A.
 * Micro-kernel: acc(i, j) = sum over k ascending of a(i, k) b(k, j), fp32 FMA from 0; then
 * t = alpha acc and C = t (beta 0: C never read) or fma(beta, C, t). Every path sums in this
 * order with the same kc (the K blocks through which C accumulates), so every path gives the same
 * bits (test_gemm_bf16 checks).
 *
 * Pair layouts (ops.pairs): the same panels with k in pairs, each 32-bit word of the workspace
 * holding two bf16, op(X)(k, .) in its low half and op(X)(k + 1, .) in its high half (k even,
 * counted from the block's k0), a block of kc rows padded with a zero row when kc is odd: so a
 * panel of kc rows takes ceil(kc/2) words per row of the fp32 layout (B: ceil(kc/2) * nr; A
 * row-major: mr rows of ceil(kc/2) words, a plain copy of A's rows; k-major: ceil(kc/2) rows of mr
 * words, rows k and k+1 interleaved). The driver keeps block starts even (kc even unless one
 * block is all of K). The micro-kernel adds a(i, k) b(k, j) + a(i, k+1) b(k+1, j) per step (a dot
 * product instruction: its own order within a pair, gemm_packed_avx512bf16.c), the same epilogue;
 * its bits differ from the fp32 paths'. The products with fp32 A (gemm_f32_bf16) run the ops in
 * .f32 instead, which keep A exact. */
#ifndef UP_KERNELS_GEMM_PACKED_H
#define UP_KERNELS_GEMM_PACKED_H

#include "core/dtype.h"

#include <stddef.h>
#include <stdint.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

typedef struct gemm_packed_ops {
    int mr, nr;     // micro-tile
    int mc, kc, nc; // blocks (largest; the driver shrinks them to fit the workspace); kc
                    // fixes the bits, so every fp32 path has the same
    int pairs;      // the panels hold bf16 pairs (above), not fp32
    /* The full mr x nr tile at c (rows ldc apart), A panel k-major if kmajor else row-major;
     * cout not NULL: the tile also rounded into it (rows ldco apart, bf16_from_f32's bits) from
     * the registers, so that C is not read back. */
    void (*kernel)(int kc, const float *a, int kmajor, const float *b, float *c, ptrdiff_t ldc,
                   float alpha, float beta, uint16_t *cout, ptrdiff_t ldco);
    /* B micro-panel of n <= nr columns of op(B) from column j0, kc rows from k0. */
    void (*pack_b)(float *dst, const uint16_t *B, int ldb, int transb, int k0, int j0, int kc,
                   int n);
    /* A micro-panel of m <= mr rows of op(A) from row i0, kc columns from k0; its layout is
     * k-major exactly when transa. */
    void (*pack_a)(float *dst, const uint16_t *A, int lda, int transa, int i0, int k0, int kc,
                   int m);
    /* NULL, or the ops that run the products with fp32 A (a pairs kernel would round A to bf16):
     * all of such a product, B's packing included, so it has that path's bits. */
    const struct gemm_packed_ops *f32;
} gemm_packed_ops;

extern const gemm_packed_ops gemm_packed_portable;
#if defined(__x86_64__)
extern const gemm_packed_ops gemm_packed_avx512bf16, gemm_packed_avx512, gemm_packed_avx2;
#endif

#if defined(__AVX2__)
/* The 8 x 8 transpose of 32-bit words behind the transposed B packings: r[i] holds source row i,
 * and row k of the result (word k of every source row) is stored at dst + k * stride. The
 * shuffles move bits; they do no arithmetic. */
static inline void gemm_transpose8_store(__m256 r[8], float *dst, size_t stride) {
    __m256 t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    /* r[0..3]: columns 0-3 of rows 0-3 (low lane) and 4-7 (high); r[4..7] the same for rows 4-7 */
    static const int order[8] = {0, 1, 2, 3, 0, 1, 2, 3};
    for (int k = 0; k < 8; k++) {
        __m256 lo = r[order[k]], hi = r[order[k] + 4];
        __m256 row =
            k < 4 ? _mm256_permute2f128_ps(lo, hi, 0x20) : _mm256_permute2f128_ps(lo, hi, 0x31);
        _mm256_storeu_ps(dst + (size_t)k * stride, row);
    }
}
#endif

/* The generic packing loops, inlined into each kernel file with its constant mr / nr (so that
 * each compiles with that file's instruction sets). */
static inline void gemm_packed_pack_b_generic(float *dst, const uint16_t *B, int ldb, int transb,
                                              int k0, int j0, int kc, int n, int nr) {
    if (!transb) { // B (K, N): each k row of the panel is contiguous
        for (int k = 0; k < kc; k++) {
            const uint16_t *s = B + (size_t)(k0 + k) * (size_t)ldb + j0;
            float *d = dst + (size_t)k * (size_t)nr;
            for (int j = 0; j < n; j++)
                d[j] = bf16_widen(s[j]);
            for (int j = n; j < nr; j++)
                d[j] = 0.0f;
        }
        return;
    }
    int k8 = 0;
#if defined(__AVX2__)
    /* B (N, K): a transpose. 8 x 8 blocks, so that the stores are whole rows of 8 (the
     * element-wise loop costs the forward's small products a tenth of their time). */
    if (n == nr && nr % 8 == 0)
        for (; k8 + 8 <= kc; k8 += 8)
            for (int j = 0; j < nr; j += 8) {
                __m256 r[8];
                for (int i = 0; i < 8; i++) {
                    __m128i h = _mm_loadu_si128(
                        (const __m128i *)(B + (size_t)(j0 + j + i) * (size_t)ldb + k0 + k8));
                    r[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
                }
                gemm_transpose8_store(r, dst + (size_t)k8 * (size_t)nr + j, (size_t)nr);
            }
#endif
    for (int j = 0; j < n; j++) { // B (N, K): column j of the panel is B's row j0 + j
        const uint16_t *s = B + (size_t)(j0 + j) * (size_t)ldb + k0;
        for (int k = k8; k < kc; k++)
            dst[(size_t)k * (size_t)nr + j] = bf16_widen(s[k]);
    }
    for (int j = n; j < nr; j++)
        for (int k = k8; k < kc; k++)
            dst[(size_t)k * (size_t)nr + j] = 0.0f;
}

static inline void gemm_packed_pack_a_generic(float *dst, const uint16_t *A, int lda, int transa,
                                              int i0, int k0, int kc, int m, int mr) {
    if (transa && m == mr) { // A (K, M), a whole panel: loops of constant length, vectorised
        for (int k = 0; k < kc; k++) {
            const uint16_t *s = A + (size_t)(k0 + k) * (size_t)lda + i0;
            for (int i = 0; i < mr; i++)
                dst[(size_t)k * (size_t)mr + i] = bf16_widen(s[i]);
        }
        return;
    }
    if (transa) { // A (K, M): k-major panel, mr contiguous values per k
        for (int k = 0; k < kc; k++) {
            const uint16_t *s = A + (size_t)(k0 + k) * (size_t)lda + i0;
            float *d = dst + (size_t)k * (size_t)mr;
            for (int i = 0; i < m; i++)
                d[i] = bf16_widen(s[i]);
            for (int i = m; i < mr; i++)
                d[i] = 0.0f;
        }
        return;
    }
    for (int i = 0; i < mr; i++) { // A (M, K): row-major panel, one widened row of A per row
        float *d = dst + (size_t)i * (size_t)kc;
        if (i < m) {
            const uint16_t *s = A + (size_t)(i0 + i) * (size_t)lda + k0;
            for (int k = 0; k < kc; k++)
                d[k] = bf16_widen(s[k]);
        } else {
            for (int k = 0; k < kc; k++)
                d[k] = 0.0f;
        }
    }
}

#endif
