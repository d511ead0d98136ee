/* bench_gemm_bf16 — the bf16 GEMM candidates (kernels.h gemm_bf16, DESIGN.md §5.1) on the linear
 * layers of configs/bench.json (C 512, F 1408, NH*HS 512, NKV*HS 256, V 4096), the three products
 * of each layer (IC -> OC) with T tokens:
 *   fwd   out (T, OC) = inp (T, IC) @ W^T          (A plain, B transposed, beta 0)
 *   dinp  dinp (T, IC) = dout (T, OC) @ W          (plain, plain, beta 1)
 *   dW    dW (OC, IC) += dout^T (OC, T) @ inp      (transposed, plain, beta 1)
 * at T = 4096 and at a row tile of 256 unless told (bench.json's T is 16384). Columns, GFLOP/s
 * (2 M N K per product), the median of the repetitions after a warm-up, the methods taking turns:
 *   sgemm      cblas_sgemm on fp32 operands (the fp32 run's matmuls: the baseline)
 *   onednn     dnnl_gemm_bf16bf16f32 as the library picks its kernels (DNNL_MAX_CPU_ISA caps it)
 *   packed     gemm_bf16's packed path with the micro-kernel of the chosen kernel path
 *              (UPIPE_KERNEL, or this CPU's default)
 *   fma        the packed path on the avx512 row: bf16 widened while packing, fp32 FMA 12 x 32
 *   dp         the packed path on the avx512bf16 row: bf16 pairs, VDPBF16PS 12 x 32
 *   conv       gemm_bf16's converted panels (fp32 in its workspace, cblas_sgemm): K and N blocks
 *              up to 1024, A's rows filling the rest of the 8 MiB
 *   conv512, conv2048   the same with square 512 and 2048 blocks (the block size measurement)
 * and dp/fma, the ratio of those two columns. A row the CPU cannot run reads n/a. Then
 * determinism (bits of 1 against 2 threads, and of repeated calls; T = 4096) and the resident
 * memory oneDNN's first call adds. usage: bench_gemm_bf16 [threads (2)] [reps (7)] [T,T,...
 * (4096,256)] [methods (all), e.g. sgemm,fma,dp]. UPIPE_KERNEL and DNNL_MAX_CPU_ISA /
 * ONEDNN_MAX_CPU_ISA apply as in a run; UPIPE_BENCH_BLOCKS=mc,nc,kc runs packed, fma and dp at
 * those blocks (gemm_bf16_packed_blocks: the block measurement). libxsmm 1.17 is not here: its
 * libxsmm_xgemm refuses bf16 in, fp32 out ("unsupported data-type"), and its bf16 JIT kernels
 * (libxsmm_bsmmdispatch) are small column-major blocks that need A packed in VNNI pairs, so it
 * would need a GEMM of our own around them (DESIGN.md §5.1). */
#include "bench_util.h"
#include "kernels/bf16.h"
#include "kernels/gemm_bf16.h"
#include "kernels/kernel_path.h"
#include "kernels/kernels.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                           dnnl_dim_t K, float alpha, const uint16_t *A,
                                           dnnl_dim_t lda, const uint16_t *B, dnnl_dim_t ldb,
                                           float beta, float *C, dnnl_dim_t ldc);

/* VmRSS of this process in KiB. */
static long rss_kib(void) {
    char line[256];
    long kib = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kib = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kib;
}

typedef struct {
    int ta, tb, M, N, K;
    float beta;
    const uint16_t *A, *B;
    const float *Af, *Bf;
    int lda, ldb;
    float *C, *ws;
} product;

enum { M_SGEMM, M_ONEDNN, M_PACKED, M_FMA, M_DP, M_CONV, M_CONV512, M_CONV2048, NMETHODS };
static const char *const method_names[NMETHODS] = {"sgemm", "onednn", "packed",  "fma",
                                                   "dp",    "conv",   "conv512", "conv2048"};
/* The kernel path (dispatch row) each packed method runs; NULL: the chosen one. */
static const char *const method_row[NMETHODS] = {[M_FMA] = "avx512", [M_DP] = "avx512bf16"};

static int g_onednn_ok = 1;   // the last oneDNN call succeeded
static int g_use[NMETHODS];   // the methods timed
static char g_row[32];        // the kernel path chosen at the start
static int g_mc, g_nc, g_kc;  // UPIPE_BENCH_BLOCKS, or 0: the path's own
static int runs(int method) { // 1 if this CPU runs the method
    if (method == M_ONEDNN) return g_onednn_ok;
    return !method_row[method] || kernel_path_supported(method_row[method]);
}

static void set_row(const char *name) {
    char err[256];
    if (kernel_path_set(name, err, sizeof err))
        fprintf(stderr, "bench_gemm_bf16: %s\n", err), exit(1);
}

static void run(int method, const product *p) {
    switch (method) {
    case M_SGEMM:
        cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans,
                    p->tb ? CblasTrans : CblasNoTrans, p->M, p->N, p->K, 1.0f, p->Af, p->lda, p->Bf,
                    p->ldb, p->beta, p->C, p->N);
        break;
    case M_ONEDNN: // below avx512_core it returns dnnl_unimplemented: the column says n/a
        g_onednn_ok =
            dnnl_gemm_bf16bf16f32(p->ta ? 'T' : 'N', p->tb ? 'T' : 'N', p->M, p->N, p->K, 1.0f,
                                  p->A, p->lda, p->B, p->ldb, p->beta, p->C, p->N) == dnnl_success;
        break;
    case M_PACKED:
    case M_FMA:
    case M_DP:
        if (method_row[method]) set_row(method_row[method]);
        gemm_bf16_path_set("packed");
        if (g_mc || g_nc || g_kc)
            gemm_bf16_packed_blocks(p->ta, p->tb, p->M, p->N, p->K, 1.0f, p->A, p->lda, p->B,
                                    p->ldb, p->beta, p->C, p->N, NULL, NULL, 0, p->ws, g_mc, g_nc,
                                    g_kc);
        else
            gemm_bf16(p->ta, p->tb, p->M, p->N, p->K, 1.0f, p->A, p->lda, p->B, p->ldb, p->beta,
                      p->C, p->N, p->ws);
        if (method_row[method]) set_row(g_row);
        break;
    default: {
        int b = method == M_CONV ? 0 : method == M_CONV512 ? 512 : 2048;
        if (b == 0) {
            gemm_bf16_path_set("converted");
            gemm_bf16(p->ta, p->tb, p->M, p->N, p->K, 1.0f, p->A, p->lda, p->B, p->ldb, p->beta,
                      p->C, p->N, p->ws);
        } else
            gemm_bf16_converted_blocks(p->ta, p->tb, p->M, p->N, p->K, 1.0f, p->A, p->lda, p->B,
                                       p->ldb, p->beta, p->C, p->N, p->ws, b, b, b);
    }
    }
}

static int g_reps = 7;

/* GFLOP/s of every method timed on p: median of g_reps after a warm-up. The methods take turns
 * within each repetition, so that a busy host slows them alike. */
static void gflops_all(const product *p, double *out) {
    double r[NMETHODS][64];
    for (int k = -1; k < g_reps; k++)
        for (int m = 0; m < NMETHODS; m++) {
            if (!g_use[m] || !runs(m)) continue;
            double t0 = now_s();
            run(m, p);
            double t = now_s() - t0;
            if (k >= 0) r[m][k] = 2.0 * p->M * (double)p->N * p->K / t / 1e9;
        }
    for (int m = 0; m < NMETHODS; m++) {
        if (!g_use[m] || !runs(m)) continue;
        qsort(r[m], (size_t)g_reps, sizeof r[m][0], cmp_double);
        out[m] = r[m][g_reps / 2];
    }
}

/* Operands large enough for every product: bf16 values in [-1, 1) and their fp32 widening. */
static uint16_t *g_a, *g_b;
static float *g_af, *g_bf, *g_c, *g_ws;

static void fill(size_t maxe) {
    g_a = malloc(maxe * sizeof(uint16_t)), g_b = malloc(maxe * sizeof(uint16_t));
    g_af = malloc(maxe * sizeof(float)), g_bf = malloc(maxe * sizeof(float));
    g_c = malloc(maxe * sizeof(float));
    g_ws = malloc((size_t)2 * 2048 * 2048 * sizeof(float)); // the largest blocks timed
    if (!g_a || !g_b || !g_af || !g_bf || !g_c || !g_ws)
        fprintf(stderr, "bench_gemm_bf16: out of memory\n"), exit(1);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < maxe; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        g_af[i] = (float)((double)(s >> 11) * 0x1p-53 * 2.0 - 1.0);
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        g_bf[i] = (float)((double)(s >> 11) * 0x1p-53 * 2.0 - 1.0);
    }
    bf16_from_f32(g_af, g_a, maxe), bf16_from_f32(g_bf, g_b, maxe);
    f32_from_bf16(g_a, g_af, maxe), f32_from_bf16(g_b, g_bf, maxe);
    memset(g_c, 0, maxe * sizeof(float));
}

/* The product `kind` (0 fwd, 1 dinp, 2 dW) of a layer IC -> OC over T rows. */
static product layer_product(int kind, int T, int IC, int OC) {
    product p = {0};
    p.A = g_a, p.B = g_b, p.Af = g_af, p.Bf = g_bf, p.C = g_c, p.ws = g_ws;
    if (kind == 0) p.ta = 0, p.tb = 1, p.M = T, p.N = OC, p.K = IC, p.beta = 0.0f;
    if (kind == 1) p.ta = 0, p.tb = 0, p.M = T, p.N = IC, p.K = OC, p.beta = 1.0f;
    if (kind == 2) p.ta = 1, p.tb = 0, p.M = OC, p.N = IC, p.K = T, p.beta = 1.0f;
    p.lda = p.ta ? p.M : p.K;
    p.ldb = p.tb ? p.K : p.N;
    return p;
}

static const struct {
    const char *name;
    int ic, oc;
} layers[] = {
    {"wq/wo 512->512", 512, 512},     {"wk/wv 512->256", 512, 256},
    {"gate/up 512->1408", 512, 1408}, {"down 1408->512", 1408, 512},
    {"lm_head 512->4096", 512, 4096},
};
enum { NLAYERS = sizeof layers / sizeof layers[0], VMAX = 4096 }; // VMAX: the widest layer

static const char *const kinds[] = {"fwd", "dinp", "dW"};

static void table(int T) {
    int ratio = g_use[M_FMA] && g_use[M_DP] && runs(M_FMA) && runs(M_DP);
    printf("\nT = %d rows\n%-18s %-5s %5s %5s %5s", T, "layer", "prod", "M", "N", "K");
    for (int m = 0; m < NMETHODS; m++)
        if (g_use[m]) printf(" %9s", method_names[m]);
    if (ratio) printf(" %7s", "dp/fma");
    printf("\n");
    for (int l = 0; l < NLAYERS; l++)
        for (int k = 0; k < 3; k++) {
            product p = layer_product(k, T, layers[l].ic, layers[l].oc);
            printf("%-18s %-5s %5d %5d %5d", layers[l].name, kinds[k], p.M, p.N, p.K);
            double g[NMETHODS];
            gflops_all(&p, g);
            for (int m = 0; m < NMETHODS; m++)
                if (!g_use[m])
                    continue;
                else if (!runs(m))
                    printf(" %9s", "n/a");
                else
                    printf(" %9.1f", g[m]);
            if (ratio) printf(" %7.2f", g[M_DP] / g[M_FMA]);
            printf("\n");
            fflush(stdout);
        }
}

/* 1 if the method gives the same bits with 1 and nthreads threads and over repeated calls. */
static void determinism(int method, int nthreads) {
    size_t n = (size_t)4096 * VMAX;
    float *c1 = malloc(n * sizeof(float)), *c2 = malloc(n * sizeof(float));
    int same_threads = 1, same_calls = 1;
    for (int l = 0; l < NLAYERS; l++)
        for (int k = 0; k < 3; k++) {
            product p = layer_product(k, 4096, layers[l].ic, layers[l].oc);
            p.beta = 0.0f; // plain products: the C left by earlier timings does not matter
            size_t cn = (size_t)p.M * (size_t)p.N;
            omp_set_num_threads(1), blas_set_threads(1);
            run(method, &p), memcpy(c1, p.C, cn * sizeof(float));
            omp_set_num_threads(nthreads), blas_set_threads(nthreads);
            run(method, &p), memcpy(c2, p.C, cn * sizeof(float));
            if (memcmp(c1, c2, cn * sizeof(float))) same_threads = 0;
            run(method, &p);
            if (memcmp(c2, p.C, cn * sizeof(float))) same_calls = 0;
        }
    printf("%-8s 1 vs %d threads: %s; repeated calls: %s\n", method_names[method], nthreads,
           same_threads ? "bit-identical" : "DIFFER", same_calls ? "bit-identical" : "DIFFER");
    free(c1), free(c2);
}

static int usage(void) {
    fprintf(stderr, "usage: bench_gemm_bf16 [threads] [reps <= 64] [T,T,...] [method,...]\n");
    return 2;
}

int main(int argc, char **argv) {
    blas_check_core(argv); /* the core upipe itself runs on */
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (argc > 2) g_reps = atoi(argv[2]);
    int Ts[16], nT = 0;
    for (char *t = strtok(argc > 3 ? argv[3] : (char[]){"4096,256"}, ","); t && nT < 16;
         t = strtok(NULL, ","))
        Ts[nT++] = atoi(t);
    for (int m = 0; m < NMETHODS; m++)
        g_use[m] = argc <= 4;
    for (char *t = argc > 4 ? strtok(argv[4], ",") : NULL; t; t = strtok(NULL, ",")) {
        int m = 0;
        while (m < NMETHODS && strcmp(method_names[m], t))
            m++;
        if (m == NMETHODS) return fprintf(stderr, "bench_gemm_bf16: no method '%s'\n", t), usage();
        g_use[m] = 1;
    }
    if (threads < 1 || g_reps < 1 || g_reps > 64 || nT == 0) return usage();
    int Tmax = 4096; // the determinism products
    for (int i = 0; i < nT; i++) {
        if (Ts[i] < 1) return usage();
        Tmax = Ts[i] > Tmax ? Ts[i] : Tmax;
    }
    const char *blocks = getenv("UPIPE_BENCH_BLOCKS");
    if (blocks && sscanf(blocks, "%d,%d,%d", &g_mc, &g_nc, &g_kc) != 3)
        return fprintf(stderr, "bench_gemm_bf16: UPIPE_BENCH_BLOCKS wants mc,nc,kc\n"), 2;
    snprintf(g_row, sizeof g_row, "%s", kernel_choice_get()->row->name);
    char model[192];
    cpu_model(model, sizeof model);
    omp_set_num_threads(threads), blas_set_threads(threads);
    fill((size_t)Tmax * VMAX);
    const char *isa =
        getenv("DNNL_MAX_CPU_ISA") ? getenv("DNNL_MAX_CPU_ISA") : getenv("ONEDNN_MAX_CPU_ISA");
    // oneDNN's first call: its JIT kernels, thread-local buffers; resident memory it adds
    long rss0 = rss_kib();
    product p = layer_product(0, 4096, 512, 4096);
    run(M_ONEDNN, &p);
    long rss1 = rss_kib();
    p = layer_product(2, 4096, 1408, 512);
    run(M_ONEDNN, &p);
    long rss2 = rss_kib();
    printf("cpu: %s\n%d threads; GFLOP/s, median of %d after a warm-up\n", model, threads, g_reps);
    printf("gemm_bf16 chooses: %s\nkernels: %s\nonednn max ISA: %s\nblas: %s\n", gemm_bf16_path(),
           kernel_path_name(), isa ? isa : "(library default)", blas_describe());
    if (g_mc || g_nc || g_kc)
        printf("packed methods at blocks mc %d, nc %d, kc %d (UPIPE_BENCH_BLOCKS)\n", g_mc, g_nc,
               g_kc);
    if (!g_onednn_ok) printf("onednn: dnnl_gemm_bf16bf16f32 returns unimplemented at this ISA\n");
    printf("resident memory oneDNN's first calls added: %ld KiB (first), %ld KiB (after a dW)\n",
           rss1 - rss0, rss2 - rss0);
    for (int i = 0; i < nT; i++)
        table(Ts[i]);
    printf("\ndeterminism on the T = 4096 products (beta 0):\n");
    for (int m = 0; m < NMETHODS; m++)
        if (g_use[m] && m != M_CONV512 && m != M_CONV2048 && runs(m)) determinism(m, threads);
    printf("resident memory now: %ld KiB above the start of the measurement\n", rss_kib() - rss0);
    return 0;
}
