/* gemm_packed_avx2.c — the packed bf16 GEMM's AVX2 + FMA micro-kernel and packing (contract:
 * gemm_packed.h). Compiled with -mavx2 -mfma (CMakeLists.txt), run only on the "avx2" kernel
 * path. The 6 x 16 tile of BLIS's Haswell sgemm: 12 ymm accumulators, two B vectors and one
 * broadcast of the 16 registers. */
#include "kernels/bf16_simd.h"
#include "kernels/gemm_packed.h"

#if defined(__x86_64__)
#include <immintrin.h>

enum { MR = 6, NR = 16 };

/* The tile's sums into out (MR rows of NR), a(i, k) at a[i*rsa + k*csa]; with the strides
 * constant after inlining, the loop keeps its A addresses in registers. The accumulators are
 * named variables: an array of vectors, GCC kept in memory and stored in every iteration. */
#define ROW(i)                                                                                     \
    do {                                                                                           \
        __m256 x = _mm256_broadcast_ss(a + (i)*rsa + k * csa);                                     \
        c##i##_0 = _mm256_fmadd_ps(x, b0, c##i##_0);                                               \
        c##i##_1 = _mm256_fmadd_ps(x, b1, c##i##_1);                                               \
    } while (0)
#define STORE(i)                                                                                   \
    do {                                                                                           \
        _mm256_store_ps(out + (i)*NR, c##i##_0);                                                   \
        _mm256_store_ps(out + (i)*NR + 8, c##i##_1);                                               \
    } while (0)
static inline __attribute__((always_inline)) void sums(int kc, const float *a, ptrdiff_t rsa,
                                                       ptrdiff_t csa, const float *b, float *out) {
    __m256 z = _mm256_setzero_ps();
    __m256 c0_0 = z, c0_1 = z, c1_0 = z, c1_1 = z, c2_0 = z, c2_1 = z, c3_0 = z, c3_1 = z, c4_0 = z,
           c4_1 = z, c5_0 = z, c5_1 = z;
#pragma GCC unroll 4
    for (int k = 0; k < kc; k++, b += NR) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        ROW(0);
        ROW(1);
        ROW(2);
        ROW(3);
        ROW(4);
        ROW(5);
    }
    STORE(0);
    STORE(1);
    STORE(2);
    STORE(3);
    STORE(4);
    STORE(5);
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

/* 8 values rounded as bf16_from_f32 does, packed into 16-bit lanes. */
static inline __m128i round_bf16(__m256 x) {
    __m256i r = bf16_round_avx2(_mm256_castps_si256(x));
    r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08); // the two lanes' halves
    return _mm256_castsi256_si128(r);
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
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    for (int i = 0; i < MR; i++)
        for (int h = 0; h < NR; h += 8) {
            float *p = c + i * ldc + h;
            __m256 t = _mm256_mul_ps(va, _mm256_load_ps(acc + i * NR + h));
            if (beta != 0.0f) t = _mm256_fmadd_ps(vb, _mm256_loadu_ps(p), t);
            _mm256_storeu_ps(p, t);
            if (cout) _mm_storeu_si128((__m128i *)(cout + i * ldco + h), round_bf16(t));
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

/* Blocks: BLIS's Haswell sgemm ones but kc 512 (its 256 measured slower here): K = 512, the
 * forward's depth, in one block, so C is written once; a (kc, nr) B panel of 32 KiB in L1, the
 * (mc, kc) A block of 336 KiB in L2; nc is cut to fit the workspace (gemm_packed.c). */
const gemm_packed_ops gemm_packed_avx2 = {
    .name = "avx2",
    .mr = MR,
    .nr = NR,
    .mc = 168,
    .kc = 512,
    .nc = 4080,
    .kernel = kernel,
    .pack_b = pack_b,
    .pack_a = pack_a,
};
#endif
