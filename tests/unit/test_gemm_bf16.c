/* test_gemm_bf16.c — the bf16 GEMM of kernels.h (gemm_bf16) on every path this CPU runs.
 *
 * Each path, and the converted panels with small blocks (so that M, N and K split into several
 * blocks and the K blocks accumulate through C), against a double-precision reference on the
 * widened bf16 inputs: all four trans combinations, M, N, K in {1, 7, 33, 129, 300}, leading
 * dimensions past the row length (the gaps of C must stay untouched), alpha and beta from
 * {0, 1, 0.5} (and -2 for alpha), C full of NaN whenever beta is 0 (beta 0 must not read C).
 * Edge cases: K = 0 (C = beta C), M or N = 0 (nothing written), K = 2100 (several K blocks).
 * The packed path runs on every kernel path this CPU has (avx512bf16, avx512, avx2, portable: its
 * micro-kernel follows kernel_path_set), at its own and at small blocks, with fp32 A, through
 * gemm_bf16_io (cin, and cout equal to bf16_from_f32 of C bit for bit, its gaps untouched), and
 * its bits are compared for 1 and 2 threads and across the fp32 kernel paths (one summation
 * order: they must be equal). avx512bf16's dot-product kernel sums each pair of k in its own
 * order, so its bits differ by design: it meets the bound below like the other paths, its fp32-A
 * product (an fp32 kernel) must give avx512's bits, the checker must catch broken results of it
 * (a pair dropped, an element scaled), and whether its bits equal an emulation of VDPBF16PS is
 * reported (gemm_packed_avx512bf16.c). Where the CPU lacks AVX512_BF16 those cases are skipped
 * with a line that says so.
 *
 * The bound. A product of two bf16 values (8-bit significands) has at most 16 significant bits:
 * exact in fp32, so the only errors are the fp32 additions (VDPBF16PS is two fp32 FMAs per pair,
 * the avx512_core kernels widen and FMA, the converted path runs sgemm: fp32 sums in every case,
 * in some order). The packed avx512bf16 kernel runs VDPBF16PS, which on the CPU measured is two
 * fused multiply-adds per pair of k (the odd term's, then the even one's), each rounding once:
 * fp32 summation of exact terms in the order k+1, k, k+3, k+2, ...; were it to add a pair's two
 * products first or fuse them into one rounding, each term would still meet at most one rounding
 * per addition it takes part in, so the same bound holds. Any order of summing K terms in fp32
 * errs by at most (K-1) u sum|a b| (u =
 * 2^-24, to first order); the converted path sums blocks of kb terms and then adds the nblocks
 * block results into C one by one (nblocks more roundings of partial sums of the same terms), and
 * alpha's product and beta C's sum round once more each: (kb - 1 + nblocks + 2) u, below (K + 2)
 * u since kb + K/kb <= K + 1. So |err| <= (K + 2) 2^-23 (|alpha| sum|a b| + |beta c|), twice that
 * with room for the second-order terms. Values are uniform in [-1, 1): no products near the
 * denormals that VDPBF16PS flushes. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/gemm_bf16.h"
#include "kernels/kernels.h"

#include "harness.h"
#include "kernels_util.h"

static const int dims[] = {1, 7, 33, 129, 300};
enum { NDIMS = sizeof dims / sizeof dims[0] };
static const float alphas[] = {1.0f, 0.5f, 0.0f, -2.0f};
static const float betas[] = {0.0f, 1.0f, 0.5f};

static uint16_t *rand_bf16(size_t n) {
    uint16_t *x = xmalloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++)
        x[i] = bf16_round(rng_unif(-1.0f, 1.0f));
    return x;
}

/* A product under test: the path's function, or the converted panels at blocks b (b > 0), or the
 * packed path at small blocks (packed set); f32a: gemm_f32_bf16 on A widened to fp32 (the same
 * values, so the same reference). */
typedef struct {
    const char *name;
    int block, packed, f32a;
} variant;

static void call(const variant *v, int ta, int tb, int M, int N, int K, float alpha,
                 const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta, float *C,
                 int ldc, float *ws) {
    if (v->f32a) {
        size_t n = (size_t)(ta ? K : M) * (size_t)lda;
        float *Af = xmalloc((n + 1) * sizeof(float));
        f32_from_bf16(A, Af, n);
        gemm_f32_bf16(ta, tb, M, N, K, alpha, Af, lda, B, ldb, beta, C, ldc, ws);
        free(Af);
    } else if (v->packed && v->block > 0 && M > 0 && N > 0 && K > 0 && alpha != 0.0f)
        gemm_bf16_packed_blocks(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL, 0,
                                ws, v->block, v->block + 16, v->block - 8);
    else if (v->block > 0 && M > 0 && N > 0 && K > 0 && alpha != 0.0f)
        gemm_bf16_converted_blocks(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ws,
                                   v->block, v->block + 16, v->block - 8);
    else
        gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ws);
}

/* op(A) (M, K) and op(B) (K, N) widened into doubles, row-major: the reference's operands. */
static void widen_ops(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                      const uint16_t *B, int ldb, double **Ad, double **Bd) {
    *Ad = xmalloc(((size_t)M * K + 1) * sizeof(double));
    *Bd = xmalloc(((size_t)K * N + 1) * sizeof(double));
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++)
            (*Ad)[(size_t)i * K + k] =
                bf16_widen(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++)
            (*Bd)[(size_t)k * N + j] =
                bf16_widen(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
}

/* The check of one product: C (M, N; rows ldc apart) against alpha op(A) op(B) + beta C0 in
 * float64 on the same bf16 operands, with the bound of the file's head; the gaps of C past N
 * must hold 12345. Returns the largest err / bound (INFINITY for a NaN or a touched gap) and its
 * element in *bi, *bj. */
static double check_c(int ta, int tb, int M, int N, int K, float alpha, float beta,
                      const uint16_t *A, int lda, const uint16_t *B, int ldb, const float *C0,
                      const float *C, int ldc, int *bi, int *bj) {
    double *Ad, *Bd;
    widen_ops(ta, tb, M, N, K, A, lda, B, ldb, &Ad, &Bd);
    double worst = 0.0; // the largest err / bound
    *bi = *bj = -1;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double s = 0.0, sabs = 0.0;
            for (int k = 0; k < K; k++) {
                double ab = Ad[(size_t)i * K + k] * Bd[(size_t)k * N + j];
                s += ab, sabs += fabs(ab);
            }
            double c0 = beta == 0.0f ? 0.0 : C0[(size_t)i * ldc + j];
            double want = (double)alpha * s + (double)beta * c0;
            double bound = 2.0 * (K + 2) * 0x1p-23 * (fabs(alpha) * sabs + fabs(beta * c0));
            double got = C[(size_t)i * ldc + j], err = fabs(got - want);
            double r = bound > 0.0 ? err / bound : (err > 0.0 ? INFINITY : 0.0);
            if (!(r <= worst)) worst = r, *bi = i, *bj = j; // NaN counts as worst too
        }
        for (int j = N; j < ldc; j++)
            if (C[(size_t)i * ldc + j] != 12345.0f) worst = INFINITY, *bi = i, *bj = j;
    }
    free(Ad), free(Bd);
    return worst;
}

/* C0 (M, ldc): values in [-1, 1), 12345 in the gaps past N, NaN where beta 0 (must not be read). */
static float *c_start(int M, int N, int ldc, float beta) {
    float *C0 = xmalloc((size_t)M * ldc * sizeof(float));
    for (size_t i = 0; i < (size_t)M * ldc; i++)
        C0[i] = rng_unif(-1.0f, 1.0f);
    for (int i = 0; i < M; i++) // the gaps past N: a marker that must survive
        for (int j = N; j < ldc; j++)
            C0[(size_t)i * ldc + j] = 12345.0f;
    if (beta == 0.0f) // beta 0 must not read C
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C0[(size_t)i * ldc + j] = NAN;
    return C0;
}

/* One case; returns 1 if it passed (one CHECK). */
static int one_case(const variant *v, int ta, int tb, int M, int N, int K, float alpha, float beta,
                    float *ws) {
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
    int arows = ta ? K : M, brows = tb ? N : K;
    uint16_t *A = rand_bf16((size_t)arows * lda), *B = rand_bf16((size_t)brows * ldb);
    float *C = xmalloc((size_t)M * ldc * sizeof(float)), *C0 = c_start(M, N, ldc, beta);
    memcpy(C, C0, (size_t)M * ldc * sizeof(float));
    call(v, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ws);

    int bad_i, bad_j;
    double worst =
        check_c(ta, tb, M, N, K, alpha, beta, A, lda, B, ldb, C0, C, ldc, &bad_i, &bad_j);
    int ok = worst <= 1.0;
    CHECK(ok, "%s: trans %c%c M=%d N=%d K=%d alpha=%g beta=%g: err/bound %.3g at (%d, %d)", v->name,
          ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, beta, worst, bad_i, bad_j);
    free(A), free(B), free(C), free(C0);
    return ok;
}

/* Every shape and trans combination, the alpha and beta values dealt round so each shape gets
 * one pair and every pair meets every trans combination many times. */
static void run_variant(const variant *v, float *ws) {
    int n = 0, fails = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int im = 0; im < NDIMS; im++)
                for (int in = 0; in < NDIMS; in++)
                    for (int ik = 0; ik < NDIMS; ik++, n++) {
                        float alpha = alphas[n % 4], beta = betas[(n / 4) % 3];
                        fails +=
                            !one_case(v, ta, tb, dims[im], dims[in], dims[ik], alpha, beta, ws);
                    }
    // empty products: K = 0 gives beta C, M or N = 0 touches nothing
    fails += !one_case(v, 0, 1, 7, 33, 0, 1.0f, 0.5f, ws);
    fails += !one_case(v, 1, 0, 7, 33, 0, 1.0f, 0.0f, ws);
    fails += !one_case(v, 0, 0, 0, 33, 7, 1.0f, 0.5f, ws);
    fails += !one_case(v, 1, 1, 7, 0, 7, 1.0f, 0.5f, ws);
    // K past the paths' deepest blocks (1024): several B blocks in turn
    fails += !one_case(v, 0, 1, 37, 71, 2100, 0.5f, 1.0f, ws);
    fails += !one_case(v, 1, 0, 29, 40, 2100, 1.0f, 0.0f, ws);
    printf("%-24s %d cases, %d failed\n", v->name, n + 6, fails);
}

/* gemm_bf16_io on the packed path: C against the reference as above with cin's widening in
 * place of beta C, and cout exactly bf16_from_f32 of C (its gaps past N untouched; the kernels
 * round in registers, so NaN, Inf and overflow come in through cin). Returns 1 if
 * it passed. */
static int io_case(int ta, int tb, int M, int N, int K, float alpha, int with_cin, float *ws) {
    int lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3, ldco = N + 4;
    int arows = ta ? K : M, brows = tb ? N : K;
    uint16_t *A = rand_bf16((size_t)arows * lda), *B = rand_bf16((size_t)brows * ldb);
    uint16_t *cio = rand_bf16((size_t)M * ldco), *cin0 = xmalloc((size_t)M * ldco * 2);
    /* cin's specials, so that cout's rounding meets NaN (quiet and signalling), Inf and the
     * overflow of the largest finite bf16 */
    static const uint16_t specials[] = {0x7fc1, 0xffa0, 0x7f80, 0xff80, 0x7f7f, 0xff7f};
    for (size_t e = 0; with_cin && e < (size_t)M * ldco; e += 17)
        cio[e] = specials[e % 6];
    memcpy(cin0, cio, (size_t)M * ldco * 2);
    float *C = xmalloc((size_t)M * ldc * sizeof(float));
    for (size_t i = 0; i < (size_t)M * ldc; i++)
        C[i] = NAN; // beta 0 or cin: never read
    gemm_bf16_io(ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc, with_cin ? cio : NULL, cio,
                 ldco, ws);
    double *Ad, *Bd;
    widen_ops(ta, tb, M, N, K, A, lda, B, ldb, &Ad, &Bd);
    double worst = 0.0;
    int same = 1;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double s = 0.0, sabs = 0.0;
            for (int k = 0; k < K; k++) {
                double ab = Ad[(size_t)i * K + k] * Bd[(size_t)k * N + j];
                s += ab, sabs += fabs(ab);
            }
            double c0 = with_cin ? bf16_widen(cin0[(size_t)i * ldco + j]) : 0.0;
            if (fabs(c0) > 1e38) c0 = NAN; // a special: only cout's bits are checked
            double want = (double)alpha * s + c0, got = C[(size_t)i * ldc + j];
            double bound = 2.0 * (K + 2) * 0x1p-23 * (fabs(alpha) * sabs + fabs(c0));
            double r = bound > 0.0 ? fabs(got - want) / bound : (got != want ? INFINITY : 0.0);
            if (!(r <= worst) && !isnan(c0)) worst = r;
            uint16_t rounded;
            bf16_from_f32(&C[(size_t)i * ldc + j], &rounded, 1);
            if (cio[(size_t)i * ldco + j] != rounded) same = 0;
        }
        for (int j = N; j < ldco; j++)
            if (cio[(size_t)i * ldco + j] != cin0[(size_t)i * ldco + j]) same = 0;
    }
    int ok = worst <= 1.0 && same;
    CHECK(ok, "packed io: trans %c%c M=%d N=%d K=%d alpha=%g cin=%d: err/bound %.3g, cout %s",
          ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, with_cin, worst,
          same ? "exact" : "WRONG");
    free(A), free(B), free(cio), free(cin0), free(C), free(Ad), free(Bd);
    return ok;
}

/* The packed path's bits with 1 and 2 OpenMP threads: the same (threads split M only). Shapes
 * with several K blocks and an M edge. */
static void thread_bits(float *ws) {
    static const int shapes[][3] = {{301, 67, 2100}, {97, 300, 513}, {4, 1, 2}};
    int fails = 0;
    for (int s = 0; s < 3; s++)
        for (int t = 0; t < 4; t++) {
            int ta = t & 1, tb = t >> 1, M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            int lda = ta ? M : K, ldb = tb ? K : N;
            uint16_t *A = rand_bf16((size_t)M * K), *B = rand_bf16((size_t)K * N);
            float *C1 = xmalloc((size_t)M * N * sizeof(float)),
                  *C2 = xmalloc((size_t)M * N * sizeof(float));
            omp_set_num_threads(1);
            gemm_bf16(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.0f, C1, N, ws);
            omp_set_num_threads(2);
            gemm_bf16(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.0f, C2, N, ws);
            int same = !memcmp(C1, C2, (size_t)M * N * sizeof(float));
            fails += !same;
            CHECK(same, "packed: 1 and 2 threads differ, trans %c%c M=%d N=%d K=%d", ta ? 'T' : 'N',
                  tb ? 'T' : 'N', M, N, K);
            free(A), free(B), free(C1), free(C2);
        }
    printf("%-24s 12 thread-count cases, %d failed\n", "packed, 1 vs 2 threads", fails);
}

/* The packed path on one kernel path: the cases, small blocks, gemm_bf16_io, thread counts. */
static void run_packed(const char *kpath, float *ws) {
    char err[256], name[64];
    CHECK(kernel_path_set(kpath, err, sizeof err) == 0, "%s", err);
    CHECK(gemm_bf16_path_set("packed") == 0, "gemm_bf16_path_set(packed)");
    snprintf(name, sizeof name, "packed %s", kpath);
    variant v = {name, 0, 1, 0};
    run_variant(&v, ws);
    snprintf(name, sizeof name, "packed %s, fp32 A", kpath);
    variant f = {name, 0, 1, 1};
    run_variant(&f, ws);
    // several blocks along M, N and K (24, 40 and 16 before rounding to whole micro-panels)
    snprintf(name, sizeof name, "packed %s, small blocks", kpath);
    variant small = {name, 24, 1, 0};
    run_variant(&small, ws);
    static const int io_dims[] = {1, 13, 97, 300};
    int n = 0, fails = 0;
    for (int t = 0; t < 4; t++)
        for (int im = 0; im < 4; im++)
            for (int in = 0; in < 4; in++, n++)
                fails += !io_case(t & 1, t >> 1, io_dims[im], io_dims[in], io_dims[(im + in) % 4],
                                  n % 3 ? 1.0f : -0.5f, n % 2, ws);
    printf("%-24s %d gemm_bf16_io cases, %d failed\n", name, n, fails);
    thread_bits(ws);
}

/* The packed path's bits on every fp32 kernel path this CPU runs: the same (one summation order,
 * gemm_packed.h), edges and several K blocks included; avx512bf16's products with fp32 A run
 * avx512's kernel, so they give its bits too. */
static void kernel_path_bits(const char *const *kpaths, int n, float *ws) {
    enum { M = 53, N = 71, K = 1100 };
    uint16_t *A = rand_bf16((size_t)M * K), *B = rand_bf16((size_t)N * K);
    float *C0 = xmalloc((size_t)M * N * sizeof(float)), *C = xmalloc((size_t)M * N * sizeof(float));
    char err[256];
    int first = 1, fails = 0;
    const char *ref = NULL;
    for (int i = 0; i < n; i++) {
        if (!kernel_path_supported(kpaths[i]) || !strcmp(kpaths[i], "avx512bf16")) continue;
        CHECK(kernel_path_set(kpaths[i], err, sizeof err) == 0, "%s", err);
        gemm_bf16_packed_blocks(0, 1, M, N, K, 0.75f, A, K, B, K, 0.0f, first ? C0 : C, N, NULL,
                                NULL, 0, ws, 0, 0, 0);
        if (!first) {
            int same = !memcmp(C0, C, (size_t)M * N * sizeof(float));
            fails += !same;
            CHECK(same, "packed: %s gives other bits than %s", kpaths[i], ref);
        } else
            ref = kpaths[i];
        first = 0;
    }
    if (kernel_path_supported("avx512bf16")) { // fp32 A: avx512's kernel, avx512's bits
        float *Af = xmalloc((size_t)M * K * sizeof(float));
        f32_from_bf16(A, Af, (size_t)M * K);
        CHECK(gemm_bf16_path_set("packed") == 0, "gemm_bf16_path_set(packed)");
        for (int p = 0; p < 2; p++) {
            CHECK(kernel_path_set(p ? "avx512bf16" : "avx512", err, sizeof err) == 0, "%s", err);
            gemm_f32_bf16(0, 1, M, N, K, 0.75f, Af, K, B, K, 0.0f, p ? C : C0, N, ws);
        }
        int same = !memcmp(C0, C, (size_t)M * N * sizeof(float));
        fails += !same;
        CHECK(same, "packed: avx512bf16's fp32-A product gives other bits than avx512's");
        free(Af);
    }
    printf("%-24s %d failed\n", "packed, kernel paths' bits", fails);
    free(A), free(B), free(C0), free(C);
}

/* The checker against broken results of the avx512bf16 kernel (the current kernel path): for each
 * trans combination a product it passes, then the same product with its last pair of k left out
 * (K - 2 on the same operands), with one element missing one pair of terms, and with one element
 * scaled by 1 + 2^-8: the check of one_case must fail on each. Returns the failures. */
static int dp_checker_catches(float *ws) {
    enum { M = 29, N = 45, K = 300 };
    const float alpha = 0.5f, beta = 0.5f;
    int fails = 0;
    for (int t = 0; t < 4; t++) {
        int ta = t & 1, tb = t >> 1, lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        uint16_t *A = rand_bf16((size_t)(ta ? K : M) * lda),
                 *B = rand_bf16((size_t)(tb ? N : K) * ldb);
        float *C0 = c_start(M, N, ldc, beta), *C = xmalloc((size_t)M * ldc * sizeof(float)),
              *Cd = xmalloc((size_t)M * ldc * sizeof(float));
        int bi, bj;
        memcpy(C, C0, (size_t)M * ldc * sizeof(float));
        gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ws);
        double good = check_c(ta, tb, M, N, K, alpha, beta, A, lda, B, ldb, C0, C, ldc, &bi, &bj);
        CHECK(good <= 1.0, "avx512bf16 checker: the product itself fails (%.3g)", good);
        // the last pair dropped everywhere: a product over K - 2, checked as one over K
        memcpy(Cd, C0, (size_t)M * ldc * sizeof(float));
        gemm_bf16(ta, tb, M, N, K - 2, alpha, A, lda, B, ldb, beta, Cd, ldc, ws);
        double r_k = check_c(ta, tb, M, N, K, alpha, beta, A, lda, B, ldb, C0, Cd, ldc, &bi, &bj);
        // one element without its largest pair (k, k+1), and the largest element scaled
        int ei = 0, ej = 0, ek = 0;
        double big = -1.0, cbig = -1.0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                if (fabs(C[(size_t)i * ldc + j]) > cbig)
                    cbig = fabs(C[(size_t)i * ldc + j]), ei = i, ej = j;
            }
        double pair[K / 2];
        for (int k = 0; k < K; k += 2) {
            double s = 0.0;
            for (int h = 0; h < 2; h++) {
                double a =
                    bf16_widen(ta ? A[(size_t)(k + h) * lda + ei] : A[(size_t)ei * lda + k + h]);
                double b =
                    bf16_widen(tb ? B[(size_t)ej * ldb + k + h] : B[(size_t)(k + h) * ldb + ej]);
                s += a * b;
            }
            pair[k / 2] = s;
            if (fabs(s) > big) big = fabs(s), ek = k;
        }
        memcpy(Cd, C, (size_t)M * ldc * sizeof(float));
        Cd[(size_t)ei * ldc + ej] -= (float)(alpha * pair[ek / 2]);
        double r_pair =
            check_c(ta, tb, M, N, K, alpha, beta, A, lda, B, ldb, C0, Cd, ldc, &bi, &bj);
        memcpy(Cd, C, (size_t)M * ldc * sizeof(float));
        Cd[(size_t)ei * ldc + ej] *= 1.0f + 0x1p-8f;
        double r_scale =
            check_c(ta, tb, M, N, K, alpha, beta, A, lda, B, ldb, C0, Cd, ldc, &bi, &bj);
        int ok = good <= 1.0 && r_k > 1.0 && r_pair > 1.0 && r_scale > 1.0;
        fails += !ok;
        CHECK(
            ok,
            "avx512bf16 checker, trans %c%c: err/bound %.3g correct, %.3g without the last pair, "
            "%.3g without one pair of (%d, %d), %.3g with it scaled: the broken ones must exceed 1",
            ta ? 'T' : 'N', tb ? 'T' : 'N', good, r_k, r_pair, ei, ej, r_scale);
        printf("avx512bf16 checker %c%c: err/bound %.3f correct; broken: %.3g last pair dropped, "
               "%.3g one element's pair dropped, %.3g one element scaled by 1+2^-8\n",
               ta ? 'T' : 'N', tb ? 'T' : 'N', good, r_k, r_pair, r_scale);
        free(A), free(B), free(C0), free(C), free(Cd);
    }
    return fails;
}

/* Reported, not checked: whether the avx512bf16 product's bits equal the emulation of VDPBF16PS
 * measured on AMD Zen 5 (gemm_packed_avx512bf16.c): per pair of k, acc = fmaf(a(k+1) b(k+1), acc)
 * then fmaf(a(k) b(k), acc) from 0 (an odd K's last pair padded with zeros), t = alpha acc, C = t
 * or fmaf(beta, C, t). K <= 512 is one K block. The operands are far from fp32's denormals and
 * overflow, where the instruction's flushes would matter. Another CPU's VDPBF16PS may round
 * otherwise (a pair's sum first, one rounding for both) and still meet the bound: hence no
 * failure here. */
static void dp_emulation(float *ws) {
    enum { M = 31, N = 37 };
    static const int Ks[] = {33, 300};
    int equal = 1;
    for (int t = 0; t < 8; t++) {
        int ta = t & 1, tb = (t >> 1) & 1, K = Ks[t >> 2];
        float beta = t % 3 ? 0.5f : 0.0f;
        int lda = ta ? M : K, ldb = tb ? K : N;
        uint16_t *A = rand_bf16((size_t)M * K), *B = rand_bf16((size_t)K * N);
        float *C0 = c_start(M, N, N, beta), *C = xmalloc((size_t)M * N * sizeof(float));
        memcpy(C, C0, (size_t)M * N * sizeof(float));
        gemm_bf16(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, beta, C, N, ws);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float acc = 0.0f;
                for (int k = 0; k < K; k += 2) {
                    float a0 = bf16_widen(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
                    float b0 = bf16_widen(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                    float a1 = 0.0f, b1 = 0.0f;
                    if (k + 1 < K) {
                        a1 = bf16_widen(ta ? A[(size_t)(k + 1) * lda + i]
                                           : A[(size_t)i * lda + k + 1]);
                        b1 = bf16_widen(tb ? B[(size_t)j * ldb + k + 1]
                                           : B[(size_t)(k + 1) * ldb + j]);
                    }
                    acc = fmaf(a1, b1, acc);
                    acc = fmaf(a0, b0, acc);
                }
                float tt = 0.75f * acc;
                float want = beta == 0.0f ? tt : fmaf(beta, C0[(size_t)i * N + j], tt);
                if (memcmp(&want, &C[(size_t)i * N + j], sizeof want)) equal = 0;
            }
        free(A), free(B), free(C0), free(C);
    }
    if (equal)
        printf(
            "avx512bf16: bits equal the emulation of VDPBF16PS (two fmas per pair, odd k first)\n");
    else
        printf("avx512bf16: bits differ from the emulation of VDPBF16PS (two fmas per pair, odd k "
               "first): this CPU rounds a pair otherwise (not an error; the bound holds)\n");
}

int main(void) {
    float *ws = xmalloc((size_t)GEMM_BF16_WS_FLOATS * sizeof(float));
    printf("gemm_bf16 default: %s\n", gemm_bf16_path());
    for (int i = 0; i < gemm_bf16_path_count(); i++) {
        const gemm_bf16_ops *p = gemm_bf16_path_at(i);
        if (!p->runs()) {
            printf("%-24s skipped: this CPU lacks %s\n", p->name, p->needs);
            continue;
        }
        if (!strcmp(p->name, "packed")) continue; // below, on every kernel path
        CHECK(gemm_bf16_path_set(p->name) == 0, "gemm_bf16_path_set(%s)", p->name);
        variant v = {p->name, 0, 0, 0};
        run_variant(&v, ws);
        char name[64]; // fp32 A: the converted panels' product (also where the path is oneDNN)
        snprintf(name, sizeof name, "%s, fp32 A", p->name);
        variant f = {name, 0, 0, 1};
        run_variant(&f, ws);
    }
    // several blocks along M, N and K (24, 40 and 16: 300 splits into 13, 8 and 19)
    variant small = {"converted, small blocks", 24, 0, 0};
    run_variant(&small, ws);
    static const char *const kpaths[] = {"avx512bf16", "avx512", "avx2", "portable"};
    enum { NKPATHS = sizeof kpaths / sizeof kpaths[0] };
    for (int i = 0; i < NKPATHS; i++)
        if (kernel_path_supported(kpaths[i]))
            run_packed(kpaths[i], ws);
        else
            printf("packed %-17s skipped: this CPU lacks it\n", kpaths[i]);
    if (kernel_path_supported("avx512bf16")) {
        char err[256];
        CHECK(kernel_path_set("avx512bf16", err, sizeof err) == 0, "%s", err);
        CHECK(gemm_bf16_path_set("packed") == 0, "gemm_bf16_path_set(packed)");
        int fails = dp_checker_catches(ws);
        printf("%-24s 4 broken-result cases, %d missed\n", "avx512bf16 checker", fails);
        dp_emulation(ws);
    } else
        printf(
            "avx512bf16 checker and emulation skipped: this CPU lacks AVX512_BF16 (or AVX-512)\n");
    kernel_path_bits(kpaths, NKPATHS, ws);
    free(ws);
    return harness_finish("test_gemm_bf16");
}
