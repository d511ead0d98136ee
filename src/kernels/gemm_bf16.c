/* gemm_bf16.c — C (fp32) = alpha op(A) op(B) + beta C with bf16 A and B (contract: kernels.h),
 * its routes and the choice of route.
 *
 * Three routes, best first (DESIGN.md §5.1 and docs/BENCHMARKS.md have the measurements behind
 * the order):
 *  - "packed": our own BLIS-style product (gemm_packed.c) whose packing widens bf16 to fp32, with
 *    the micro-kernel of the kernel path (avx512, avx2, portable); any CPU; the same bits for any
 *    thread count. On the avx512bf16 path its panels hold bf16 pairs and the micro-kernel is
 *    VDPBF16PS (its own bits, gemm_packed_avx512bf16.c).
 *  - "converted": panels of A and B widened to fp32 in the caller's workspace, cblas_sgemm on
 *    them; any CPU.
 *  - "onednn": oneDNN 2.6's dnnl_gemm_bf16bf16f32, JIT kernels from avx512_core up (VDPBF16PS on
 *    avx512_core_bf16); no workspace; below AVX-512 it is unimplemented. The default only where
 *    the CPU has AMX-BF16 and it measures faster (route_measured); tests and benchmarks run it
 *    (gemm_bf16_path_set).
 * Every CPU runs the first two. The conversions inside follow the kernel path (bf16.h), OpenBLAS's
 * kernels the CPU (OPENBLAS_CORETYPE). */
#include "kernels/kernels.h"

#include "kernels/bf16.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_bf16.h"
#include "kernels/kernel_path.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

/* Exported by libdnnl (src/common/gemm.cpp) but left out of its public headers in 2.x; bf16 is
 * uint16_t there too (dnnl::impl::bfloat16_t holds one). Row-major, like dnnl_sgemm. */
extern dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                           dnnl_dim_t K, float alpha, const uint16_t *A,
                                           dnnl_dim_t lda, const uint16_t *B, dnnl_dim_t ldb,
                                           float beta, float *C, dnnl_dim_t ldc);

/* ---- onednn --------------------------------------------------------------------------------- */

static void gemm_onednn(int transa, int transb, int M, int N, int K, float alpha, const uint16_t *A,
                        int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc,
                        float *ws) {
    (void)ws;
    dnnl_status_t st = dnnl_gemm_bf16bf16f32(transa ? 'T' : 'N', transb ? 'T' : 'N', M, N, K, alpha,
                                             A, lda, B, ldb, beta, C, ldc);
    UP_CHECK(st == dnnl_success, "gemm_bf16: dnnl_gemm_bf16bf16f32 failed (status %d)", (int)st);
}

/* ---- converted panels ----------------------------------------------------------------------- */

/* dst (rows, cols), rows packed = the bf16 block at src (row stride ld) widened. */
static void widen_block(float *dst, const uint16_t *src, int ld, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        f32_from_bf16(src + (size_t)r * (size_t)ld, dst + (size_t)r * (size_t)cols, (size_t)cols);
}

static int imin(int a, int b) {
    return a < b ? a : b;
}

/* One OpenMP region for the whole product, so that the conversions run on every thread and cost
 * no region of their own (each region's barrier costs a time slice on a busy host: measured,
 * docs/BENCHMARKS.md). Loops n, k: the threads widen a B panel (kb, nb) together (its rows split
 * between them), then each takes its own contiguous share of C's rows, mb at a time: it widens
 * its A block into its own part of ws and calls cblas_sgemm, which inside a parallel region runs
 * on the calling thread (OpenBLAS's OpenMP build). The C block gets beta, or the widened cin, from
 * the first k block and adds (beta 1) the later ones; after the last, cout = round(C) if given,
 * on the thread that computed those rows while they are in its cache. The panels keep the
 * operands' orientation (op(A) = A^T: the block is (kb, mb) of A's rows), so sgemm takes the
 * same trans. ws: kb*nb + mb*kb per thread (omp_get_max_threads()). */
static void converted(int transa, int transb, int M, int N, int K, float alpha, const void *A,
                      int a_f32, int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc,
                      const uint16_t *cin, uint16_t *cout, int ldco, float *ws, int mb, int nb,
                      int kb) {
    mb = imin(mb, M), nb = imin(nb, N), kb = imin(kb, K);
    float *pb = ws;
    bf16_path_current(); /* chooses the conversion path outside the parallel region */
#pragma omp parallel
    {
        int nth = omp_get_num_threads(), tid = omp_get_thread_num();
        int r0 = (int)((long long)M * tid / nth), r1 = (int)((long long)M * (tid + 1) / nth);
        float *pa = ws + (size_t)kb * (size_t)nb + (size_t)tid * (size_t)mb * (size_t)kb;
        for (int n0 = 0; n0 < N; n0 += nb) {
            int nn = imin(nb, N - n0);
            for (int k0 = 0; k0 < K; k0 += kb) {
                int kk = imin(kb, K - k0);
                int brows = transb ? nn : kk, bcols = transb ? kk : nn;
                const uint16_t *b0 =
                    transb ? B + (size_t)n0 * (size_t)ldb + k0 : B + (size_t)k0 * (size_t)ldb + n0;
#pragma omp barrier /* every thread is done with the previous panel */
#pragma omp for schedule(static)
                for (int r = 0; r < brows; r++)
                    f32_from_bf16(b0 + (size_t)r * (size_t)ldb, pb + (size_t)r * (size_t)bcols,
                                  (size_t)bcols);
                /* the for's barrier: the panel is whole */
                for (int m0 = r0; m0 < r1; m0 += mb) {
                    int mm = imin(mb, r1 - m0);
                    float *c = C + (size_t)m0 * (size_t)ldc + n0;
                    float b = k0 == 0 ? beta : 1.0f;
                    if (k0 == 0 && cin) {
                        for (int i = 0; i < mm; i++)
                            f32_from_bf16(cin + (size_t)(m0 + i) * (size_t)ldco + n0,
                                          c + (size_t)i * (size_t)ldc, (size_t)nn);
                        b = 1.0f;
                    }
                    /* A (M, K), or transposed (K, M): the block at rows m0, columns k0 */
                    size_t at = transa ? (size_t)k0 * (size_t)lda + (size_t)m0
                                       : (size_t)m0 * (size_t)lda + (size_t)k0;
                    const float *a = (const float *)A + at; /* fp32 A: read in place */
                    int ldpa = lda;
                    if (!a_f32) {
                        widen_block(pa, (const uint16_t *)A + at, lda, transa ? kk : mm,
                                    transa ? mm : kk);
                        a = pa, ldpa = transa ? mm : kk;
                    }
                    cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                                transb ? CblasTrans : CblasNoTrans, mm, nn, kk, alpha, a, ldpa, pb,
                                transb ? kk : nn, b, c, ldc);
                    if (cout && k0 + kk == K)
                        for (int i = 0; i < mm; i++)
                            bf16_from_f32(c + (size_t)i * (size_t)ldc,
                                          cout + (size_t)(m0 + i) * (size_t)ldco + n0, (size_t)nn);
                }
            }
        }
    }
}

void gemm_bf16_converted_blocks(int transa, int transb, int M, int N, int K, float alpha,
                                const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                                float *C, int ldc, float *ws, int mb, int nb, int kb) {
    converted(transa, transb, M, N, K, alpha, A, 0, lda, B, ldb, beta, C, ldc, NULL, NULL, 0, ws,
              mb, nb, kb);
}

/* Blocks of K and N up to GEMM_BF16_KB and _NB, and as many rows of A per thread as the rest of
 * the workspace holds (at least GEMM_BF16_KB * GEMM_BF16_NB floats, so 1024 / threads rows). */
static int rows_per_thread(int K, int N) {
    int kb = imin(K, GEMM_BF16_KB), nb = imin(N, GEMM_BF16_NB), nth = omp_get_max_threads();
    int mb = (int)(((size_t)GEMM_BF16_WS_FLOATS - (size_t)kb * nb) / ((size_t)kb * (size_t)nth));
    return mb > 0 ? mb : 1;
}

static void gemm_converted_io(int transa, int transb, int M, int N, int K, float alpha,
                              const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                              float *C, int ldc, const uint16_t *cin, uint16_t *cout, int ldco,
                              float *ws) {
    converted(transa, transb, M, N, K, alpha, A, 0, lda, B, ldb, beta, C, ldc, cin, cout, ldco, ws,
              rows_per_thread(K, N), GEMM_BF16_NB, GEMM_BF16_KB);
}

static void gemm_converted(int transa, int transb, int M, int N, int K, float alpha,
                           const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                           float *C, int ldc, float *ws) {
    gemm_converted_io(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL, 0,
                      ws);
}

static void gemm_converted_f32(int transa, int transb, int M, int N, int K, float alpha,
                               const float *A, int lda, const uint16_t *B, int ldb, float beta,
                               float *C, int ldc, float *ws) {
    converted(transa, transb, M, N, K, alpha, A, 1, lda, B, ldb, beta, C, ldc, NULL, NULL, 0, ws,
              rows_per_thread(K, N), GEMM_BF16_NB, GEMM_BF16_KB);
}

static void describe_converted(char *buf, size_t len) {
    snprintf(buf, len, "openblas sgemm on converted panels (bf16 %s)", bf16_path_current()->name);
}

/* ---- packed (gemm_packed.c) ---------------------------------------------------------------- */

static void gemm_packed(int transa, int transb, int M, int N, int K, float alpha, const uint16_t *A,
                        int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc,
                        float *ws) {
    gemm_bf16_packed_blocks(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL,
                            NULL, 0, ws, 0, 0, 0);
}

static void gemm_packed_io(int transa, int transb, int M, int N, int K, float alpha,
                           const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                           float *C, int ldc, const uint16_t *cin, uint16_t *cout, int ldco,
                           float *ws) {
    gemm_bf16_packed_blocks(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, cin, cout,
                            ldco, ws, 0, 0, 0);
}

static void describe_packed(char *buf, size_t len) {
    const kernel_choice *k = kernel_choice_get();
    snprintf(buf, len, "packed, %s micro-kernel (bf16 %s)", k->row->label, k->bf16->name);
}

/* ---- the routes ----------------------------------------------------------------------------- */

/* oneDNN 2.6's bf16 gemm exists from avx512_core (AVX-512 F, BW, DQ, VL) up; below it returns
 * dnnl_unimplemented (measured: there is no reference fallback). The effective ISA is the CPU's
 * capped by DNNL_MAX_CPU_ISA / ONEDNN_MAX_CPU_ISA, so a cap below AVX-512 picks the converted
 * panels instead of failing. */
static int onednn_runs(void) {
    return ((unsigned)dnnl_get_effective_cpu_isa() & (unsigned)dnnl_cpu_isa_avx512_core) ==
           (unsigned)dnnl_cpu_isa_avx512_core;
}

/* oneDNN's name for the instruction set its JIT kernels use (dnnl_get_effective_cpu_isa). */
static const char *onednn_isa(void) {
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx512_core_amx:
        return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16:
        return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni:
        return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core:
        return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni:
        return "avx2_vnni";
    case dnnl_cpu_isa_avx2:
        return "avx2";
    default:
        return "below avx2";
    }
}

static void describe_onednn(char *buf, size_t len) {
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, len, "onednn %d.%d %s", v->major, v->minor, onednn_isa());
}

static void gemm_widen_round_io(int transa, int transb, int M, int N, int K, float alpha,
                                const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                                float *C, int ldc, const uint16_t *cin, uint16_t *cout, int ldco,
                                float *ws);

/* Best first (the choice takes the first this CPU runs, kernel_path.h). oneDNN has no fused
 * bf16 C and no fp32 A: its gemm_bf16_io widens, multiplies and rounds one after another, and its
 * gemm_f32_bf16 is the converted panels'. */
static const gemm_bf16_ops paths[] = {
    {"packed", "nothing", kernel_cpu_any, gemm_packed, gemm_packed_io, gemm_f32_bf16_packed,
     describe_packed},
    {"converted", "nothing", kernel_cpu_any, gemm_converted, gemm_converted_io, gemm_converted_f32,
     describe_converted},
    {"onednn", "AVX-512 F, BW, DQ and VL", onednn_runs, gemm_onednn, gemm_widen_round_io,
     gemm_converted_f32, describe_onednn},
};
enum { NPATHS = sizeof paths / sizeof paths[0] };

int gemm_bf16_path_count(void) {
    return NPATHS;
}

const gemm_bf16_ops *gemm_bf16_path_at(int i) {
    return i >= 0 && i < NPATHS ? &paths[i] : NULL;
}

/* ---- the choice of route -------------------------------------------------------------------- */

/* The first route this CPU runs (the list ends with ones that run anywhere). */
static const gemm_bf16_ops *route_best(void) {
    for (int i = 0; i < NPATHS; i++)
        if (paths[i].runs()) return &paths[i];
    up_die("gemm_bf16: no route runs on this CPU");
}

/* oneDNN's bf16 gemm over our packed product where the CPU has AMX-BF16 (oneDNN's tile kernels;
 * ours have none): measured, as blas_core.c measures the fp32 products (thread CPU time on one
 * thread, the model's forward shape, the fastest of 5 each, taken at 1.5x). Elsewhere the packed
 * route is kept without measuring (DESIGN.md §8.1). UPIPE_BF16_CALIBRATE=1 measures on any CPU
 * oneDNN's bf16 gemm runs on (tests). */
static double route_ratio; /* oneDNN's rate over packed's, 0 if not measured */

static double route_seconds(const gemm_bf16_ops *r, const uint16_t *a, const uint16_t *b, float *c,
                            float *ws, int M, int N, int K) {
    double best = 0.0;
    for (int i = -1; i < 5; i++) {
        double t0 = kernel_thread_seconds();
        r->fn(0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N, ws);
        double t = kernel_thread_seconds() - t0;
        if (i >= 0 && (best == 0.0 || t < best)) best = t;
    }
    return best;
}

static const gemm_bf16_ops *route_measured(const gemm_bf16_ops *packed) {
    const gemm_bf16_ops *onednn = NULL;
    for (int i = 0; i < NPATHS; i++)
        if (!strcmp(paths[i].name, "onednn") && paths[i].runs()) onednn = &paths[i];
    const char *force = getenv("UPIPE_BF16_CALIBRATE");
    if (!onednn || !(kernel_cpu_get()->amx_bf16 || (force && !strcmp(force, "1")))) return packed;
    enum { M = 256, K = 512, N = 1408 };
    uint16_t *a = malloc(sizeof(uint16_t) * M * K), *b = malloc(sizeof(uint16_t) * N * K);
    float *c = malloc(sizeof(float) * M * N), *ws = malloc(sizeof(float) * GEMM_BF16_WS_FLOATS);
    const gemm_bf16_ops *r = packed;
    if (a && b && c && ws) {
        for (size_t i = 0; i < (size_t)M * K; i++)
            a[i] = (uint16_t)(0x3f00 + i % 127);
        for (size_t i = 0; i < (size_t)N * K; i++)
            b[i] = (uint16_t)(0xbe00 + i % 113);
        int omp = omp_get_max_threads();
        omp_set_num_threads(1);
        double tp = route_seconds(packed, a, b, c, ws, M, N, K);
        double to = route_seconds(onednn, a, b, c, ws, M, N, K);
        omp_set_num_threads(omp);
        route_ratio = to > 0.0 ? tp / to : 0.0;
        if (route_ratio >= 1.5) r = onednn;
    }
    free(a), free(b), free(c), free(ws);
    return r;
}

static const gemm_bf16_ops *route_chosen;
static int route_named; /* gemm_bf16_path_set named one: nothing to measure */
static pthread_once_t route_once = PTHREAD_ONCE_INIT;

static void route_choose(void) {
    if (!route_named) route_chosen = route_measured(route_best());
}

/* The route of the products: the first this CPU runs, where the CPU has AMX-BF16 measured
 * against oneDNN's at the first call. Main thread only. */
static const gemm_bf16_ops *route(void) {
    kernel_choice_get(); /* the kernel path first: a refused UPIPE_KERNEL stops here */
    pthread_once(&route_once, route_choose);
    return route_chosen;
}

int gemm_bf16_path_set(const char *name) {
    for (int i = 0; i < NPATHS; i++)
        if (!strcmp(paths[i].name, name) && paths[i].runs()) {
            kernel_choice_get();
            route_named = 1;
            route_chosen = &paths[i];
            return 0;
        }
    return -1;
}

void gemm_bf16_route_name(char *buf, size_t len) {
    const gemm_bf16_ops *r = route();
    if (route_ratio > 0.0)
        snprintf(buf, len, "%s (onednn %.2fx packed, measured)", r->name, route_ratio);
    else
        snprintf(buf, len, "%s", r->name);
}

const char *gemm_bf16_path(void) {
    static char label[96];
    route()->describe(label, sizeof label);
    return label;
}

/* C rows get beta C: the product of an empty sum (K == 0), which the libraries' lda >= 1 rules
 * make awkward to pass on. beta 0 writes zeros (never reads C: NaN garbage is fine). */
static void scale_rows(float *C, int ldc, int M, int N, float beta) {
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * (size_t)ldc;
        if (beta == 0.0f)
            memset(c, 0, sizeof(float) * (size_t)N);
        else if (beta != 1.0f)
            for (int j = 0; j < N; j++)
                c[j] *= beta;
    }
}

static void check_args(int transa, int transb, int M, int N, int K, int lda, int ldb, int ldc) {
    UP_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_bf16: negative shape M=%d N=%d K=%d", M, N, K);
    int arow = transa ? M : K, brow = transb ? K : N;
    UP_CHECK(lda >= (arow > 1 ? arow : 1) && ldb >= (brow > 1 ? brow : 1) && ldc >= (N > 1 ? N : 1),
             "gemm_bf16: leading dimensions %d %d %d below the rows (%d %d %d)", lda, ldb, ldc,
             arow, brow, N);
}

/* Checks the arguments; 1 if there is no product to run (C got beta C already, or is empty). */
static int no_product(int transa, int transb, int M, int N, int K, float alpha, int lda, int ldb,
                      float beta, float *C, int ldc) {
    check_args(transa, transb, M, N, K, lda, ldb, ldc);
    if (M == 0 || N == 0) return 1;
    if (K == 0 || alpha == 0.0f) {
        scale_rows(C, ldc, M, N, beta);
        return 1;
    }
    return 0;
}

void gemm_bf16(int transa, int transb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
               const uint16_t *B, int ldb, float beta, float *C, int ldc, float *ws) {
    if (no_product(transa, transb, M, N, K, alpha, lda, ldb, beta, C, ldc)) return;
    route()->fn(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ws);
}

/* gemm_bf16_io as three steps: widen cin into C, multiply, round C into cout (oneDNN's route,
 * and every route's empty product). */
static void gemm_widen_round_io(int transa, int transb, int M, int N, int K, float alpha,
                                const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                                float *C, int ldc, const uint16_t *cin, uint16_t *cout, int ldco,
                                float *ws) {
    for (int i = 0; cin && i < M; i++)
        f32_from_bf16(cin + (size_t)i * (size_t)ldco, C + (size_t)i * (size_t)ldc, (size_t)N);
    gemm_bf16(transa, transb, M, N, K, alpha, A, lda, B, ldb, cin ? 1.0f : beta, C, ldc, ws);
    for (int i = 0; cout && i < M; i++)
        bf16_from_f32(C + (size_t)i * (size_t)ldc, cout + (size_t)i * (size_t)ldco, (size_t)N);
}

void gemm_bf16_io(int transa, int transb, int M, int N, int K, float alpha, const uint16_t *A,
                  int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc,
                  const uint16_t *cin, uint16_t *cout, int ldco, float *ws) {
    UP_CHECK(!(cin || cout) || ldco >= (N > 1 ? N : 1),
             "gemm_bf16_io: leading dimension %d of the bf16 C below its %d columns", ldco, N);
    if (M > 0 && N > 0 && K > 0 && alpha != 0.0f) {
        check_args(transa, transb, M, N, K, lda, ldb, ldc);
        route()->io(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, cin, cout, ldco,
                    ws);
        return;
    }
    gemm_widen_round_io(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, cin, cout,
                        ldco, ws);
}

void gemm_f32_bf16(int transa, int transb, int M, int N, int K, float alpha, const float *A,
                   int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc, float *ws) {
    if (no_product(transa, transb, M, N, K, alpha, lda, ldb, beta, C, ldc)) return;
    route()->f32(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ws);
}
