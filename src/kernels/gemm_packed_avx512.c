/* gemm_packed_avx512.c — the packed bf16 GEMM's AVX-512 micro-kernel and packing (contract:
 * gemm_packed.h). Compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl (CMakeLists.txt),
 * run only on the "avx512" kernel path. A 12 x 32 tile: 24 zmm accumulators, two B vectors and
 * one broadcast of the 32 registers (BLIS's SkylakeX sgemm tile, transposed to row-major C). */
#include "kernels/gemm_packed.h"

#if defined(__x86_64__)
#include <immintrin.h>

enum { MR = 12, NR = 32 };

/* a(i, k) at a[i*rsa + k*csa]; with the strides constant after inlining, the loop keeps its A
 * addresses in registers. */
static inline __attribute__((always_inline)) void tile(int kc, const float *a, ptrdiff_t rsa,
                                                       ptrdiff_t csa, const float *b, float *c,
                                                       ptrdiff_t ldc, float alpha, float beta) {
    __m512 acc[MR][2];
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int k = 0; k < kc; k++, b += NR) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            __m512 x = _mm512_set1_ps(a[i * rsa + k * csa]);
            acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
        }
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int i = 0; i < MR; i++)
        for (int h = 0; h < 2; h++) {
            float *p = c + i * ldc + 16 * h;
            __m512 t = _mm512_mul_ps(va, acc[i][h]);
            _mm512_storeu_ps(p, beta == 0.0f ? t : _mm512_fmadd_ps(vb, _mm512_loadu_ps(p), t));
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

/* Blocks of BLIS's SkylakeX sgemm: a (kc, nr) B panel of 48 KiB streams through L1 while the
 * (mc, kc) A block of 720 KiB sits in L2; the (kc, nc) B block is 4.5 MiB. */
const gemm_packed_ops gemm_packed_avx512 = {
    .name = "avx512",
    .mr = MR,
    .nr = NR,
    .mc = 480,
    .kc = 384,
    .nc = 3072,
    .kernel = kernel,
    .pack_b = pack_b,
    .pack_a = pack_a,
};
#endif
