/* gemm_packed_body.h — the packed bf16 GEMM's micro-kernel and packing (contract: gemm_packed.h),
 * written once over the primitives of vec.h. Included after a primitives header and GEMM_MR (rows
 * of the tile, at most 12), by gemm_packed_avx512.c (12 x 32), gemm_packed_avx2.c (6 x 16) and
 * gemm_packed.c's portable path (4 x 16); the tile is GEMM_MR rows of two vectors. GEMM_ATTR:
 * attributes of the out-of-line functions (the portable path's KERNEL_CLONES). Every element of
 * C sums k ascending, one fma per term, then alpha * sum (+ beta * C by an fma): the same bits on
 * every path. Defines gemm_mk_kernel, gemm_mk_pack_b and gemm_mk_pack_a for GEMM_PACKED_INIT. */
#ifndef UP_KERNELS_GEMM_PACKED_BODY_H
#define UP_KERNELS_GEMM_PACKED_BODY_H

#include "kernels/gemm_packed.h"

enum { GEMM_NR = 2 * VEC_W };

/* The tile's sums into out (MR rows of NR), a(i, k) at a[i*rsa + k*csa]; with the strides
 * constant after inlining, the loop keeps its A addresses in registers. The accumulators are
 * named variables (rows past GEMM_MR compile to nothing): an array of vectors, GCC kept in
 * memory and stored in every iteration. */
#define GEMM_ROW(i)                                                                                \
    if (GEMM_MR > (i)) {                                                                           \
        vf x = vf_bcast(a + (i)*rsa + k * csa);                                                    \
        c##i##_0 = vf_fma(x, b0, c##i##_0);                                                        \
        c##i##_1 = vf_fma(x, b1, c##i##_1);                                                        \
    }
#define GEMM_STORE(i)                                                                              \
    if (GEMM_MR > (i)) {                                                                           \
        vf_storea(out + (i)*GEMM_NR, c##i##_0);                                                    \
        vf_storea(out + (i)*GEMM_NR + VEC_W, c##i##_1);                                            \
    }
static inline __attribute__((always_inline)) void
gemm_mk_sums(int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b, float *out) {
    vf z = vf_zero();
    vf c0_0 = z, c0_1 = z, c1_0 = z, c1_1 = z, c2_0 = z, c2_1 = z, c3_0 = z, c3_1 = z, c4_0 = z,
       c4_1 = z, c5_0 = z, c5_1 = z, c6_0 = z, c6_1 = z, c7_0 = z, c7_1 = z, c8_0 = z, c8_1 = z,
       c9_0 = z, c9_1 = z, c10_0 = z, c10_1 = z, c11_0 = z, c11_1 = z;
#pragma GCC unroll 4
    for (int k = 0; k < kc; k++, b += GEMM_NR) {
        vf b0 = vf_load(b), b1 = vf_load(b + VEC_W);
        GEMM_ROW(0)
        GEMM_ROW(1)
        GEMM_ROW(2)
        GEMM_ROW(3)
        GEMM_ROW(4)
        GEMM_ROW(5)
        GEMM_ROW(6)
        GEMM_ROW(7)
        GEMM_ROW(8)
        GEMM_ROW(9)
        GEMM_ROW(10)
        GEMM_ROW(11)
    }
    GEMM_STORE(0)
    GEMM_STORE(1)
    GEMM_STORE(2)
    GEMM_STORE(3)
    GEMM_STORE(4)
    GEMM_STORE(5)
    GEMM_STORE(6)
    GEMM_STORE(7)
    GEMM_STORE(8)
    GEMM_STORE(9)
    GEMM_STORE(10)
    GEMM_STORE(11)
}
#undef GEMM_ROW
#undef GEMM_STORE

/* The loops out of line, away from alpha, beta and C's pointers: inlined into the kernel, GCC
 * kept those in registers and spilled accumulators to the stack in every iteration. */
GEMM_ATTR static __attribute__((noinline)) void gemm_mk_sums_kmajor(int kc, const float *a,
                                                                    const float *b, float *out) {
    gemm_mk_sums(kc, a, 1, GEMM_MR, b, out);
}

GEMM_ATTR static __attribute__((noinline)) void gemm_mk_sums_rowmajor(int kc, const float *a,
                                                                      const float *b, float *out) {
    gemm_mk_sums(kc, a, kc, 1, b, out);
}

GEMM_ATTR static void gemm_mk_kernel(int kc, const float *a, int kmajor, const float *b, float *c,
                                     ptrdiff_t ldc, float alpha, float beta, uint16_t *cout,
                                     ptrdiff_t ldco) {
    /* C's rows are far apart, so no hardware prefetcher brings them: ask for them now and the
     * k loop hides the memory latency. */
    for (int i = 0; i < GEMM_MR; i++) {
        vec_prefetch_l1(c + i * ldc);
        vec_prefetch_l1(c + i * ldc + GEMM_NR - 1);
    }
    _Alignas(64) float acc[GEMM_MR * GEMM_NR];
    if (kmajor)
        gemm_mk_sums_kmajor(kc, a, b, acc);
    else
        gemm_mk_sums_rowmajor(kc, a, b, acc);
    vf va = vf_set1(alpha), vb = vf_set1(beta);
    for (int i = 0; i < GEMM_MR; i++)
        for (int h = 0; h < GEMM_NR; h += VEC_W) {
            float *p = c + i * ldc + h;
            vf t = vf_mul(va, vf_loada(acc + i * GEMM_NR + h));
            if (beta != 0.0f) t = vf_fma(vb, vf_load(p), t);
            vf_store(p, t);
            if (cout) vbf_store_round(cout + i * ldco + h, t);
        }
}

static void gemm_mk_pack_b(float *dst, const uint16_t *B, int ldb, int transb, int k0, int j0,
                           int kc, int n) {
    gemm_packed_pack_b_generic(dst, B, ldb, transb, k0, j0, kc, n, GEMM_NR);
}

static void gemm_mk_pack_a(float *dst, const uint16_t *A, int lda, int transa, int i0, int k0,
                           int kc, int m) {
    gemm_packed_pack_a_generic(dst, A, lda, transa, i0, k0, kc, m, GEMM_MR);
}

/* The path's table: `const gemm_packed_ops gemm_packed_<isa> = GEMM_PACKED_INIT(...)`. */
#define GEMM_PACKED_INIT(MC, KC, NC)                                                               \
    {                                                                                              \
        .mr = GEMM_MR, .nr = GEMM_NR, .mc = MC, .kc = KC, .nc = NC, .kernel = gemm_mk_kernel,      \
        .pack_b = gemm_mk_pack_b, .pack_a = gemm_mk_pack_a                                         \
    }

#endif
