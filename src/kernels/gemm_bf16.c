/* gemm_bf16.c — C (fp32) = alpha op(A) op(B) + beta C with bf16 A and B (contract: kernels.h).
 *
 * Two paths, best first (DESIGN.md §5.1 has the measurements behind the order):
 *  - "converted": panels of A and B widened to fp32 in the caller's workspace, cblas_sgemm on
 *    them; any CPU. 0.74-1.0x of fp32 sgemm on the model's shapes (2 threads).
 *  - "onednn": oneDNN 2.6's dnnl_gemm_bf16bf16f32, JIT kernels from avx512_core up (VDPBF16PS on
 *    avx512_core_bf16); no workspace; below AVX-512 it is unimplemented. Measured at 0.6-0.85x of
 *    the converted panels on an AVX512_BF16 host, so never the default: tests and benchmarks run
 *    it (gemm_bf16_path_set) so that a faster oneDNN shows up and can take the lead.
 * Every CPU runs the first. The conversions inside follow UPIPE_KERNEL (bf16.h), OpenBLAS's
 * kernels the CPU (OPENBLAS_CORETYPE). */
#include "kernels/kernels.h"

#include "kernels/bf16.h"
#include "kernels/gemm_bf16.h"

#include <cblas.h>
#include <dnnl.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"

/* Exported by libdnnl (src/common/gemm.cpp) but left out of its public headers in 2.x; bf16 is
 * uint16_t there too (dnnl::impl::bfloat16_t holds one). Row-major, like dnnl_sgemm. */
extern dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                           dnnl_dim_t K, float alpha, const uint16_t *A,
                                           dnnl_dim_t lda, const uint16_t *B, dnnl_dim_t ldb,
                                           float beta, float *C, dnnl_dim_t ldc);

/* ---- onednn --------------------------------------------------------------------------------- */

static void gemm_onednn(int transa, int transb, int M, int N, int K, float alpha,
                        const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                        float *C, int ldc, float *ws) {
    (void)ws;
    dnnl_status_t st = dnnl_gemm_bf16bf16f32(transa ? 'T' : 'N', transb ? 'T' : 'N', M, N, K,
                                             alpha, A, lda, B, ldb, beta, C, ldc);
    UP_CHECK(st == dnnl_success, "gemm_bf16: dnnl_gemm_bf16bf16f32 failed (status %d)", (int)st);
}

/* ---- converted panels ----------------------------------------------------------------------- */

/* dst (rows, cols), rows packed = the bf16 block at src (row stride ld) widened. On the calling
 * thread: a panel feeds a product of 2 x its size x the other block's width in flops (>= 256 in
 * the model), so the widening is a few percent of the sgemm; an OpenMP region of its own would
 * add a barrier per panel, which costs milliseconds on a busy host (measured). */
static void widen_block(float *dst, const uint16_t *src, int ld, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        f32_from_bf16(src + (size_t)r * (size_t)ld, dst + (size_t)r * (size_t)cols, (size_t)cols);
}

static int imin(int a, int b) {
    return a < b ? a : b;
}

/* Loops n, k, m: a B panel (kb, nb) is widened once and serves every m block; the C block gets
 * beta from the first k block and adds (beta 1) the later ones. The panels keep the operands'
 * orientation (op(A) = A^T: the panel is (kb, mb) of A's rows), so sgemm takes the same trans. */
void gemm_bf16_converted_blocks(int transa, int transb, int M, int N, int K, float alpha,
                                const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                                float *C, int ldc, float *ws, int mb, int nb, int kb) {
    mb = imin(mb, M), nb = imin(nb, N), kb = imin(kb, K);
    float *pa = ws, *pb = ws + (size_t)mb * (size_t)kb;
    for (int n0 = 0; n0 < N; n0 += nb) {
        int nn = imin(nb, N - n0);
        for (int k0 = 0; k0 < K; k0 += kb) {
            int kk = imin(kb, K - k0);
            if (transb) // B (N, K): rows n0.., columns k0..
                widen_block(pb, B + (size_t)n0 * (size_t)ldb + k0, ldb, nn, kk);
            else // B (K, N): rows k0.., columns n0..
                widen_block(pb, B + (size_t)k0 * (size_t)ldb + n0, ldb, kk, nn);
            int ldpb = transb ? kk : nn;
            float b = k0 == 0 ? beta : 1.0f;
            for (int m0 = 0; m0 < M; m0 += mb) {
                int mm = imin(mb, M - m0);
                if (transa) // A (K, M)
                    widen_block(pa, A + (size_t)k0 * (size_t)lda + m0, lda, kk, mm);
                else // A (M, K)
                    widen_block(pa, A + (size_t)m0 * (size_t)lda + k0, lda, mm, kk);
                int ldpa = transa ? mm : kk;
                cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                            transb ? CblasTrans : CblasNoTrans, mm, nn, kk, alpha, pa, ldpa, pb,
                            ldpb, b, C + (size_t)m0 * (size_t)ldc + n0, ldc);
            }
        }
    }
}

/* Blocks of K and N up to GEMM_BF16_KB and _NB, and as many rows of A as the rest of the
 * workspace holds (at least GEMM_BF16_KB, since it is twice KB * NB): the fewest sgemm calls the
 * workspace allows. Few calls matter: each is an OpenMP region whose barrier costs milliseconds
 * when another process holds a core (measured, docs/BENCHMARKS.md). */
static void gemm_converted(int transa, int transb, int M, int N, int K, float alpha,
                           const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                           float *C, int ldc, float *ws) {
    int kb = imin(K, GEMM_BF16_KB), nb = imin(N, GEMM_BF16_NB);
    int mb = (GEMM_BF16_WS_FLOATS - kb * nb) / kb;
    gemm_bf16_converted_blocks(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ws,
                               mb, nb, kb);
}

/* ---- choice --------------------------------------------------------------------------------- */

/* oneDNN 2.6's bf16 gemm exists from avx512_core (AVX-512 F, BW, DQ, VL) up; below it returns
 * dnnl_unimplemented (measured: there is no reference fallback). The effective ISA is the CPU's
 * capped by DNNL_MAX_CPU_ISA / ONEDNN_MAX_CPU_ISA, so a cap below AVX-512 picks the converted
 * panels instead of failing. */
static int onednn_runs(void) {
    return ((unsigned)dnnl_get_effective_cpu_isa() & (unsigned)dnnl_cpu_isa_avx512_core) ==
           (unsigned)dnnl_cpu_isa_avx512_core;
}

static int cpu_any(void) {
    return 1;
}

static const gemm_bf16_ops paths[] = {
    {"converted", "nothing", cpu_any, gemm_converted},
    {"onednn", "AVX-512 F, BW, DQ and VL", onednn_runs, gemm_onednn},
};
enum { NPATHS = sizeof paths / sizeof paths[0] };

static const gemm_bf16_ops *chosen; // NULL until the first call

int gemm_bf16_path_count(void) {
    return NPATHS;
}

const gemm_bf16_ops *gemm_bf16_path_at(int i) {
    return i >= 0 && i < NPATHS ? &paths[i] : NULL;
}

int gemm_bf16_path_set(const char *name) {
    for (int i = 0; i < NPATHS; i++)
        if (!strcmp(paths[i].name, name) && paths[i].runs()) {
            __atomic_store_n(&chosen, &paths[i], __ATOMIC_RELEASE);
            return 0;
        }
    return -1;
}

/* The first path this CPU runs (the list is best first). */
static const gemm_bf16_ops *path_current(void) {
    const gemm_bf16_ops *p = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
    if (p) return p;
    for (int i = NPATHS - 1; i >= 0; i--)
        if (paths[i].runs()) p = &paths[i];
    __atomic_store_n(&chosen, p, __ATOMIC_RELEASE);
    return p;
}

/* oneDNN's name for the instruction set its JIT kernels use (dnnl_get_effective_cpu_isa). */
static const char *onednn_isa(void) {
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2: return "avx2";
    default: return "below avx2";
    }
}

const char *gemm_bf16_path(void) {
    static char label[96];
    const gemm_bf16_ops *p = path_current();
    if (p->fn == gemm_onednn) {
        const dnnl_version_t *v = dnnl_version();
        snprintf(label, sizeof label, "onednn %d.%d %s", v->major, v->minor, onednn_isa());
    } else {
        snprintf(label, sizeof label, "openblas sgemm on converted panels (bf16 %s)",
                 bf16_path_current()->name);
    }
    return label;
}

/* C rows get beta C: the product of an empty sum (K == 0), which the libraries' lda >= 1 rules
 * make awkward to pass on. beta 0 writes zeros (never reads C: NaN garbage is fine). */
static void scale_rows(float *C, int ldc, int M, int N, float beta) {
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * (size_t)ldc;
        if (beta == 0.0f) memset(c, 0, sizeof(float) * (size_t)N);
        else if (beta != 1.0f)
            for (int j = 0; j < N; j++) c[j] *= beta;
    }
}

void gemm_bf16(int transa, int transb, int M, int N, int K, float alpha, const uint16_t *A,
               int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc, float *ws) {
    UP_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_bf16: negative shape M=%d N=%d K=%d", M, N, K);
    int arow = transa ? M : K, brow = transb ? K : N;
    UP_CHECK(lda >= (arow > 1 ? arow : 1) && ldb >= (brow > 1 ? brow : 1) &&
                 ldc >= (N > 1 ? N : 1),
             "gemm_bf16: leading dimensions %d %d %d below the rows (%d %d %d)", lda, ldb, ldc,
             arow, brow, N);
    if (M == 0 || N == 0) return;
    if (K == 0 || alpha == 0.0f) {
        scale_rows(C, ldc, M, N, beta);
        return;
    }
    path_current()->fn(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ws);
}
