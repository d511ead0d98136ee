/* gemm_packed_avx2.c — the packed bf16 GEMM's AVX2 + FMA micro-kernel and packing (contract:
 * gemm_packed.h). Compiled with -mavx2 -mfma (CMakeLists.txt), run only on the "avx2" kernel
 * path. The 6 x 16 tile of BLIS's Haswell sgemm: 12 ymm accumulators, two B vectors and one
 * broadcast of the 16 registers. */
#include "kernels/gemm_packed.h"

#if defined(__x86_64__)
#include <immintrin.h>

enum { MR = 6, NR = 16 };

/* a(i, k) at a[i*rsa + k*csa]; with the strides constant after inlining, the loop keeps its A
 * addresses in registers. */
static inline __attribute__((always_inline)) void tile(int kc, const float *a, ptrdiff_t rsa,
                                                       ptrdiff_t csa, const float *b, float *c,
                                                       ptrdiff_t ldc, float alpha, float beta) {
    __m256 acc[MR][2];
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int k = 0; k < kc; k++, b += NR) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            __m256 x = _mm256_broadcast_ss(a + i * rsa + k * csa);
            acc[i][0] = _mm256_fmadd_ps(x, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(x, b1, acc[i][1]);
        }
    }
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    for (int i = 0; i < MR; i++)
        for (int h = 0; h < 2; h++) {
            float *p = c + i * ldc + 8 * h;
            __m256 t = _mm256_mul_ps(va, acc[i][h]);
            _mm256_storeu_ps(p, beta == 0.0f ? t : _mm256_fmadd_ps(vb, _mm256_loadu_ps(p), t));
        }
}

static void kernel(int kc, const float *a, int kmajor, const float *b, float *c, ptrdiff_t ldc,
                   float alpha, float beta) {
    if (kmajor)
        tile(kc, a, 1, MR, b, c, ldc, alpha, beta);
    else
        tile(kc, a, kc, 1, b, c, ldc, alpha, beta);
}

static void pack_b(float *dst, const uint16_t *B, int ldb, int transb, int k0, int j0, int kc,
                   int n) {
    gemm_packed_pack_b_generic(dst, B, ldb, transb, k0, j0, kc, n, NR);
}

static void pack_a(float *dst, const uint16_t *A, int lda, int transa, int i0, int k0, int kc,
                   int m) {
    gemm_packed_pack_a_generic(dst, A, lda, transa, i0, k0, kc, m, MR);
}

/* Blocks of BLIS's Haswell sgemm: a (kc, nr) B panel of 16 KiB in L1, the (mc, kc) A block of
 * 168 KiB in L2, the (kc, nc) B block of 4 MiB for L3. */
const gemm_packed_ops gemm_packed_avx2 = {
    .name = "avx2",
    .mr = MR,
    .nr = NR,
    .mc = 168,
    .kc = 256,
    .nc = 4080,
    .kernel = kernel,
    .pack_b = pack_b,
    .pack_a = pack_a,
};
#endif
