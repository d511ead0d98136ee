/* gemm_packed_avx512.c — the packed bf16 GEMM's AVX-512 micro-kernel and packing (contract:
 * gemm_packed.h). Compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl (CMakeLists.txt),
 * run only on the "avx512" kernel path. A 12 x 32 tile: 24 zmm accumulators, two B vectors and
 * one broadcast of the 32 registers (BLIS's SkylakeX sgemm tile, transposed to row-major C). */
#include "kernels/bf16_simd.h"
#include "kernels/gemm_packed.h"

#if defined(__x86_64__)
#include <immintrin.h>

enum { MR = 12, NR = 32 };

/* The tile's sums into out (MR rows of NR), a(i, k) at a[i*rsa + k*csa]; with the strides
 * constant after inlining, the loop keeps its A addresses in registers. The accumulators are
 * named variables: an array of vectors, GCC kept in memory and stored in every iteration. */
#define ROW(i)                                                                                     \
    do {                                                                                           \
        __m512 x = _mm512_set1_ps(a[(i)*rsa + k * csa]);                                           \
        c##i##_0 = _mm512_fmadd_ps(x, b0, c##i##_0);                                               \
        c##i##_1 = _mm512_fmadd_ps(x, b1, c##i##_1);                                               \
    } while (0)
#define STORE(i)                                                                                   \
    do {                                                                                           \
        _mm512_store_ps(out + (i)*NR, c##i##_0);                                                   \
        _mm512_store_ps(out + (i)*NR + 16, c##i##_1);                                              \
    } while (0)
static inline __attribute__((always_inline)) void sums(int kc, const float *a, ptrdiff_t rsa,
                                                       ptrdiff_t csa, const float *b, float *out) {
    __m512 z = _mm512_setzero_ps();
    __m512 c0_0 = z, c0_1 = z, c1_0 = z, c1_1 = z, c2_0 = z, c2_1 = z, c3_0 = z, c3_1 = z, c4_0 = z,
           c4_1 = z, c5_0 = z, c5_1 = z, c6_0 = z, c6_1 = z, c7_0 = z, c7_1 = z, c8_0 = z, c8_1 = z,
           c9_0 = z, c9_1 = z, c10_0 = z, c10_1 = z, c11_0 = z, c11_1 = z;
#pragma GCC unroll 4
    for (int k = 0; k < kc; k++, b += NR) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        ROW(0);
        ROW(1);
        ROW(2);
        ROW(3);
        ROW(4);
        ROW(5);
        ROW(6);
        ROW(7);
        ROW(8);
        ROW(9);
        ROW(10);
        ROW(11);
    }
    STORE(0);
    STORE(1);
    STORE(2);
    STORE(3);
    STORE(4);
    STORE(5);
    STORE(6);
    STORE(7);
    STORE(8);
    STORE(9);
    STORE(10);
    STORE(11);
}
#undef ROW
#undef STORE

/* The loops out of line, away from alpha, beta and C's pointers: inlined into the kernel, GCC
 * kept those in registers and spilled accumulators to the stack in every iteration. */
static __attribute__((noinline)) void sums_kmajor(int kc, const float *a, const float *b,
                                                  float *out) {
    sums(kc, a, 1, MR, b, out);
}

static __attribute__((noinline)) void sums_rowmajor(int kc, const float *a, const float *b,
                                                    float *out) {
    sums(kc, a, kc, 1, b, out);
}

static void kernel(int kc, const float *a, int kmajor, const float *b, float *c, ptrdiff_t ldc,
                   float alpha, float beta, uint16_t *cout, ptrdiff_t ldco) {
    /* C's rows are far apart, so no hardware prefetcher brings them: ask for them now and the
     * k loop hides the memory latency. */
    for (int i = 0; i < MR; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + NR - 1), _MM_HINT_T0);
    }
    _Alignas(64) float acc[MR * NR];
    if (kmajor)
        sums_kmajor(kc, a, b, acc);
    else
        sums_rowmajor(kc, a, b, acc);
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int i = 0; i < MR; i++)
        for (int h = 0; h < NR; h += 16) {
            float *p = c + i * ldc + h;
            __m512 t = _mm512_mul_ps(va, _mm512_load_ps(acc + i * NR + h));
            if (beta != 0.0f) t = _mm512_fmadd_ps(vb, _mm512_loadu_ps(p), t);
            _mm512_storeu_ps(p, t);
            if (cout)
                _mm256_storeu_si256(
                    (__m256i *)(cout + i * ldco + h),
                    _mm512_cvtepi32_epi16(bf16_round_avx512(_mm512_castps_si512(t))));
        }
}

static void pack_b(float *dst, const uint16_t *B, int ldb, int transb, int k0, int j0, int kc,
                   int n) {
    gemm_packed_pack_b_generic(dst, B, ldb, transb, k0, j0, kc, n, NR);
}

static void pack_a(float *dst, const uint16_t *A, int lda, int transa, int i0, int k0, int kc,
                   int m) {
    gemm_packed_pack_a_generic(dst, A, lda, transa, i0, k0, kc, m, MR);
}

/* Blocks: BLIS's SkylakeX sgemm ones but kc 512 (384 measured slower here): K = 512, the
 * forward's depth, in one block, so C is written once; the (mc, kc) A block of 960 KiB sits in
 * L2, the (kc, nr) B panel of 64 KiB streams from L2 too; nc is cut to fit the workspace. */
const gemm_packed_ops gemm_packed_avx512 = {
    .name = "avx512",
    .mr = MR,
    .nr = NR,
    .mc = 480,
    .kc = 512,
    .nc = 3072,
    .kernel = kernel,
    .pack_b = pack_b,
    .pack_a = pack_a,
};
#endif
