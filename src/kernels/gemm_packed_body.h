/* gemm_packed_body.h — the packed bf16 GEMM's micro-kernel and packing (contract: gemm_packed.h),
 * written once over the primitives of vec.h. Included after a primitives header and GEMM_MR (rows
 * of the tile, at most 12), by gemm_packed_avx512.c (12 x 32), gemm_packed_avx2.c (6 x 16) and
 * gemm_packed.c's portable path (4 x 16); the tile is GEMM_MR rows of two vectors. GEMM_ATTR:
 * attributes of the out-of-line functions (the portable path's KERNEL_CLONES). Every element of
 * C sums k ascending, one fma per term, then alpha * sum (+ beta * C by an fma): the same bits on
 * every path. Defines gemm_mk_kernel, gemm_mk_pack_b and gemm_mk_pack_a for GEMM_PACKED_INIT.
 *
 * A unit whose panels hold bf16 pairs (gemm_packed.h's pair layout: gemm_packed_avx512bf16.c)
 * defines GEMM_PAIRS 1, the step of its sums (gemm_vb, the vector type of a B row of pairs;
 * gemm_load_b, gemm_bcast_a, gemm_madd: acc += a's pair times B's pairs), its own gemm_mk_pack_b
 * and gemm_mk_pack_a, and GEMM_F32_OPS (the ops of its fp32-A products); the sums then walk k
 * two rows at a time, and the epilogue is the same. */
#ifndef UP_KERNELS_GEMM_PACKED_BODY_H
#define UP_KERNELS_GEMM_PACKED_BODY_H

#include "kernels/gemm_packed.h"

#if !defined(GEMM_PAIRS) || !GEMM_PAIRS
#undef GEMM_PAIRS
#define GEMM_PAIRS 0
/* One step of the sums: an fp32 element of A broadcast times a vector of B's row, by an fma. */
typedef vf gemm_vb;
#define gemm_load_b(p) vf_load(p)
#define gemm_bcast_a(p) vf_bcast(p)
#define gemm_madd(x, b, c) vf_fma(x, b, c)
#define GEMM_F32_OPS NULL
#endif

enum { GEMM_NR = 2 * VEC_W };

/* The tile's sums into out (MR rows of NR), over ks steps (k rows, or pairs of them: then a step
 * is one word of A and a row of NR words of B); a(i, k) at a[i*rsa + k*csa]; with the strides
 * constant after inlining, the loop keeps its A addresses in registers. The accumulators are
 * named variables (rows past GEMM_MR compile to nothing): an array of vectors, GCC kept in
 * memory and stored in every iteration. */
#define GEMM_ROW(i)                                                                                \
    if (GEMM_MR > (i)) {                                                                           \
        gemm_vb x = gemm_bcast_a(a + (i)*rsa + k * csa);                                           \
        c##i##_0 = gemm_madd(x, b0, c##i##_0);                                                     \
        c##i##_1 = gemm_madd(x, b1, c##i##_1);                                                     \
    }
#define GEMM_STORE(i)                                                                              \
    if (GEMM_MR > (i)) {                                                                           \
        vf_storea(out + (i)*GEMM_NR, c##i##_0);                                                    \
        vf_storea(out + (i)*GEMM_NR + VEC_W, c##i##_1);                                            \
    }
static inline __attribute__((always_inline)) void
gemm_mk_sums(int ks, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b, float *out) {
    vf z = vf_zero();
    vf c0_0 = z, c0_1 = z, c1_0 = z, c1_1 = z, c2_0 = z, c2_1 = z, c3_0 = z, c3_1 = z, c4_0 = z,
       c4_1 = z, c5_0 = z, c5_1 = z, c6_0 = z, c6_1 = z, c7_0 = z, c7_1 = z, c8_0 = z, c8_1 = z,
       c9_0 = z, c9_1 = z, c10_0 = z, c10_1 = z, c11_0 = z, c11_1 = z;
#pragma GCC unroll 4
    for (int k = 0; k < ks; k++, b += GEMM_NR) {
        gemm_vb b0 = gemm_load_b(b), b1 = gemm_load_b(b + VEC_W);
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
GEMM_ATTR static __attribute__((noinline)) void gemm_mk_sums_kmajor(int ks, const float *a,
                                                                    const float *b, float *out) {
    gemm_mk_sums(ks, a, 1, GEMM_MR, b, out);
}

GEMM_ATTR static __attribute__((noinline)) void gemm_mk_sums_rowmajor(int ks, const float *a,
                                                                      const float *b, float *out) {
    gemm_mk_sums(ks, a, ks, 1, b, out);
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
    int ks = GEMM_PAIRS ? (kc + 1) / 2 : kc; // the panels' rows
    if (kmajor)
        gemm_mk_sums_kmajor(ks, a, b, acc);
    else
        gemm_mk_sums_rowmajor(ks, a, b, acc);
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

#if !GEMM_PAIRS
static void gemm_mk_pack_b(float *dst, const uint16_t *B, int ldb, int transb, int k0, int j0,
                           int kc, int n) {
    gemm_packed_pack_b_generic(dst, B, ldb, transb, k0, j0, kc, n, GEMM_NR);
}

static void gemm_mk_pack_a(float *dst, const uint16_t *A, int lda, int transa, int i0, int k0,
                           int kc, int m) {
    gemm_packed_pack_a_generic(dst, A, lda, transa, i0, k0, kc, m, GEMM_MR);
}
#endif

/* The path's table: `const gemm_packed_ops gemm_packed_<isa> = GEMM_PACKED_INIT(...)`. */
#define GEMM_PACKED_INIT(MC, KC, NC)                                                               \
    {                                                                                              \
        .mr = GEMM_MR, .nr = GEMM_NR, .mc = MC, .kc = KC, .nc = NC, .pairs = GEMM_PAIRS,           \
        .kernel = gemm_mk_kernel, .pack_b = gemm_mk_pack_b, .pack_a = gemm_mk_pack_a,              \
        .f32 = GEMM_F32_OPS                                                                        \
    }

#endif
