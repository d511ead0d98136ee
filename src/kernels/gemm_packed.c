/* gemm_packed.c — the "packed" bf16 GEMM path (gemm_bf16.c): the driver; the micro-kernels are
 * the kernel path's (gemm_packed_portable.c, _avx2.c, _avx512.c, _avx512bf16.c).
 *
 * GotoBLAS / BLIS loops in one OpenMP region per product (each region and barrier costs a time
 * slice on a busy host): jc over N in nc blocks; over K in blocks of up to KB_DEPTH, where the
 * threads pack that B block together as (kc, nc) blocks, widening bf16 to fp32 on the way (a
 * shift by 16) or, for a kernel on bf16 pairs (ops.pairs), interleaving them (the panels then
 * take half the words: depth()), and meet at a barrier; then, for each kc block (pc) in it, each
 * thread walks its own rows of C (a contiguous share of A's mr-row panels), mc rows at a time: it
 * packs that A block into its part of the workspace and runs the micro-kernel over the tiles, B
 * panel outer (reused from L1 or L2), A panel inner (the A block in L2). Threads split M only, and
 * every tile is summed the same way wherever it falls, so the bits do not depend on the thread
 * count. The first kc block starts C from beta C (or the widened cin), the later ones add to it; in
 * the last, the kernel rounds each tile into cout from its registers (rounding C afterwards reads
 * it back from memory). Edge tiles (m < mr or n < nr) run the kernel into a scratch tile with beta
 * 0 and apply C = fma(beta, C, t) element by element: the kernel's own formula, so they give its
 * bits. */
#include "kernels/gemm_packed.h"

#include "kernels/bf16.h"
#include "kernels/gemm_bf16.h"
#include "kernels/kernel_path.h"
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/check.h"

/* ---- driver --------------------------------------------------------------------------------- */

/* The micro-kernel of the chosen kernel path (kernel_path.h, UPIPE_KERNEL). */
static const gemm_packed_ops *ops_current(void) {
    return kernel_choice_get()->row->gemm;
}

static int imin(int a, int b) {
    return a < b ? a : b;
}

enum {
    WS_ALIGN = 16,   // floats: panels start on cache lines
    KB_DEPTH = 1024, // the depth of K that one packed B block covers, at most (pairs: twice)
};

static size_t round_up(size_t x, size_t to) {
    return (x + to - 1) / to * to;
}

/* One tile of C (m rows, n columns at c), and of cout if not NULL: the kernel, through a scratch
 * tile at the edges. */
static void tile(const gemm_packed_ops *o, int kc, const float *a, int kmajor, const float *b,
                 float *c, int ldc, int m, int n, float alpha, float beta, uint16_t *cout,
                 int ldco) {
    if (m == o->mr && n == o->nr) {
        o->kernel(kc, a, kmajor, b, c, ldc, alpha, beta, cout, ldco);
        return;
    }
    float t[32 * 32]; // the largest tile of any path
    o->kernel(kc, a, kmajor, b, t, o->nr, alpha, 0.0f, NULL, 0);
    for (int i = 0; i < m; i++) {
        float *p = c + (size_t)i * (size_t)ldc;
        for (int j = 0; j < n; j++)
            p[j] = beta == 0.0f ? t[i * o->nr + j] : fmaf(beta, p[j], t[i * o->nr + j]);
        if (cout) bf16_from_f32(p, cout + (size_t)i * (size_t)ldco, (size_t)n);
    }
}

/* An A micro-panel from an fp32 A (gemm_f32_bf16): the layouts of the bf16 packing, copied. */
static void pack_a_f32(float *dst, const float *A, int lda, int transa, int i0, int k0, int kc,
                       int m, int mr) {
    if (transa) { // A (K, M): k-major panel
        for (int k = 0; k < kc; k++) {
            const float *s = A + (size_t)(k0 + k) * (size_t)lda + i0;
            float *d = dst + (size_t)k * (size_t)mr;
            memcpy(d, s, sizeof(float) * (size_t)m);
            memset(d + m, 0, sizeof(float) * (size_t)(mr - m));
        }
        return;
    }
    for (int i = 0; i < mr; i++) { // A (M, K): row-major panel
        float *d = dst + (size_t)i * (size_t)kc;
        if (i < m)
            memcpy(d, A + (size_t)(i0 + i) * (size_t)lda + k0, sizeof(float) * (size_t)kc);
        else
            memset(d, 0, sizeof(float) * (size_t)kc);
    }
}

/* Workspace words per row of a panel kk deep: floats, or bf16 pairs (gemm_packed.h). */
static size_t depth(const gemm_packed_ops *o, size_t kk) {
    return o->pairs ? (kk + 1) / 2 : kk;
}

/* The product, A bf16 or (a_f32) fp32. */
static void packed(int transa, int transb, int M, int N, int K, float alpha, const void *A,
                   int a_f32, int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc,
                   const uint16_t *cin, uint16_t *cout, int ldco, float *ws, int mc, int nc,
                   int kc) {
    const gemm_packed_ops *o = ops_current();
    if (a_f32 && o->f32) o = o->f32; /* fp32 A stays exact: a pairs kernel would round it */
    UP_CHECK(!(a_f32 && o->pairs), "gemm_f32_bf16 packed: a pairs kernel without fp32 ops");
    const int MR = o->mr, NR = o->nr, nth = omp_get_max_threads();
    UP_CHECK(MR * NR <= 32 * 32, "gemm_bf16 packed: tile %dx%d too large", MR, NR);
    /* Blocks that fit the workspace for any thread count: kc first, then nc leaving every thread
     * at least one A panel, then mc from what is left (whole panels). */
    size_t avail = GEMM_BF16_WS_FLOATS - WS_ALIGN;
    /* K in equal blocks of at most kc (multiples of 8): at kc 384, K = 512 as 2 x 256 rather than
     * 384 + 128, whose short block would pay a whole pass over C for little work. Only a block
     * that is all of K can be odd, so pair panels start on even k. */
    kc = kc > 0 ? kc : o->kc;
    int kblocks = (K + kc - 1) / kc;
    kc = imin(K, (int)round_up((size_t)((K + kblocks - 1) / kblocks), 8));
    /* B is packed kb = S kc deep at a time (S kc blocks per pair of barriers: a barrier waits
     * for the slowest thread, and on a shared host that is often a descheduled one). */
    const int kb_max = o->pairs ? 2 * KB_DEPTH : KB_DEPTH; // the same bytes
    int S = imin(kblocks, imin(K, kb_max) / kc > 1 ? imin(K, kb_max) / kc : 1);
    size_t kb = (size_t)S * (size_t)kc;
    size_t panels_a = (size_t)nth * ((size_t)MR * depth(o, (size_t)kc) + WS_ALIGN);
    UP_CHECK(avail > panels_a + (size_t)NR * depth(o, kb) + WS_ALIGN,
             "gemm_bf16 packed: the workspace cannot hold the panels of %d threads", nth);
    size_t nc_fit = (avail - panels_a - WS_ALIGN) / depth(o, kb) / (size_t)NR * (size_t)NR;
    /* N in equal blocks of at most nc too (whole micro-panels): N = 4096 as 2 x 2048, not
     * 4080 + 16, whose thin block would pack all of A again for 16 columns. */
    nc = (int)(nc > 0 ? (size_t)nc : (size_t)o->nc);
    if ((size_t)nc > nc_fit) nc = (int)nc_fit;
    int nblocks = (N + nc - 1) / nc;
    nc = (int)round_up((size_t)((N + nblocks - 1) / nblocks), (size_t)NR);
    size_t bfloats = round_up(depth(o, kb) * (size_t)nc, WS_ALIGN);
    size_t a_fit = ((avail - bfloats) / (size_t)nth - WS_ALIGN) /
                   ((size_t)MR * depth(o, (size_t)kc)) * (size_t)MR;
    mc = (int)round_up((size_t)(mc > 0 ? mc : o->mc), (size_t)MR);
    if ((size_t)mc > a_fit) mc = (int)a_fit;
    size_t afloats = round_up((size_t)mc * depth(o, (size_t)kc), WS_ALIGN);

    float *pb = (float *)round_up((size_t)ws, WS_ALIGN * sizeof(float));
    (void)bf16_path_current(); /* the conversions' path, chosen before the threads use it */
    const int npanels = (M + MR - 1) / MR;
#pragma omp parallel
    {
        int th = omp_get_num_threads(), tid = omp_get_thread_num();
        int r0 = (int)((long long)npanels * tid / th) * MR;
        int r1 = imin(M, (int)((long long)npanels * (tid + 1) / th) * MR);
        float *pa = pb + bfloats + (size_t)tid * afloats;
        for (int jc = 0; jc < N; jc += nc) {
            int nn = imin(nc, N - jc), nbp = (nn + NR - 1) / NR;
            for (int p0 = 0; p0 < K; p0 += (int)kb) {
                if (jc > 0 || p0 > 0) {
#pragma omp barrier /* every thread is done with the previous B block */
                }
                for (int pc = p0; pc < imin(K, p0 + (int)kb); pc += kc) {
                    int kk = imin(kc, K - pc);
                    float *pbs = pb + depth(o, (size_t)(pc - p0)) * (size_t)nc;
                    for (int q = nbp * tid / th; q < nbp * (tid + 1) / th; q++)
                        o->pack_b(pbs + (size_t)q * (size_t)NR * depth(o, (size_t)kk), B, ldb,
                                  transb, pc, jc + q * NR, kk, imin(NR, nn - q * NR));
                }
#pragma omp barrier /* the B block is whole */
                for (int pc = p0; pc < imin(K, p0 + (int)kb); pc += kc) {
                    int kk = imin(kc, K - pc);
                    int first = pc == 0, last = pc + kk == K;
                    const float *pbs = pb + depth(o, (size_t)(pc - p0)) * (size_t)nc;
                    const size_t kd = depth(o, (size_t)kk); // words per panel row
                    for (int ic = r0; ic < r1; ic += mc) {
                        int mm = imin(mc, r1 - ic);
                        for (int ir = 0; ir < mm; ir += MR)
                            if (a_f32)
                                pack_a_f32(pa + (size_t)ir * kd, A, lda, transa, ic + ir, pc, kk,
                                           imin(MR, mm - ir), MR);
                            else
                                o->pack_a(pa + (size_t)ir * kd, A, lda, transa, ic + ir, pc, kk,
                                          imin(MR, mm - ir));
                        /* cin into this block of C (beta 1 then), whole rows at a time */
                        float b = first ? beta : 1.0f;
                        if (first && cin) {
                            for (int i = ic; i < ic + mm; i++)
                                f32_from_bf16(cin + (size_t)i * (size_t)ldco + jc,
                                              C + (size_t)i * (size_t)ldc + jc, (size_t)nn);
                            b = 1.0f;
                        }
                        for (int jr = 0; jr < nn; jr += NR)
                            for (int ir = 0; ir < mm; ir += MR) {
                                size_t row = (size_t)(ic + ir), col = (size_t)(jc + jr);
                                tile(o, kk, pa + (size_t)ir * kd, transa, pbs + (size_t)jr * kd,
                                     C + row * (size_t)ldc + col, ldc, imin(MR, mm - ir),
                                     imin(NR, nn - jr), alpha, b,
                                     last && cout ? cout + row * (size_t)ldco + col : NULL, ldco);
                            }
                    }
                }
            }
        }
    }
}

void gemm_bf16_packed_blocks(int transa, int transb, int M, int N, int K, float alpha,
                             const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                             float *C, int ldc, const uint16_t *cin, uint16_t *cout, int ldco,
                             float *ws, int mc, int nc, int kc) {
    packed(transa, transb, M, N, K, alpha, A, 0, lda, B, ldb, beta, C, ldc, cin, cout, ldco, ws, mc,
           nc, kc);
}

void gemm_f32_bf16_packed(int transa, int transb, int M, int N, int K, float alpha, const float *A,
                          int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc,
                          float *ws) {
    packed(transa, transb, M, N, K, alpha, A, 1, lda, B, ldb, beta, C, ldc, NULL, NULL, 0, ws, 0, 0,
           0);
}
