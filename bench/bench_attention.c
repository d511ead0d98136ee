/* bench_attention.c — micro-benchmark of the causal GQA attention kernels (kernels.h).
 *
 * Built with the project (build/bench_attention). UPIPE_KERNEL=avx512|avx2|portable runs one
 * kernel path (default: the CPU's best); the first line names it and the CPU model.
 * Usage: bench_attention [T=4096] [NH=8] [NKV=4] [HS=64] [threads=omp default] [reps=3] [docs=1]
 *                        [dtype=fp32|bf16|both]
 *
 * docs > 1: the window packs `docs` equal documents (the last one takes the remainder), passed
 * as doc_start; docs = 1 passes NULL (the plain causal kernel).
 * Prints the median time and rate of forward and backward over `reps` runs (after one warm-up),
 * and tokens per second (forward + backward). FLOPs count the work inside the documents, causal,
 * matmuls only: forward 2 matmuls = 4 * L*L/2 * HS * NH per document of L tokens, backward 5
 * (the recompute of S, dV, dP, dK, dQ) = 10 * L*L/2 * HS * NH; so with documents the GFLOP/s
 * show how well the skipped tiles are skipped (equal to one document's rate: perfect).
 *
 * dtype: fp32 (attention_forward/backward, the default), bf16 (attention_forward_bf16/
 * backward_bf16 on the same values rounded to bf16), or both (each rep fp32 then bf16, on one
 * input, and the bf16 / fp32 ratios of the median times: < 1 means bf16 is faster).
 * Each phase also reports the median CPU time of the process (all threads) during it: on a host
 * shared with other work the wall times include waiting for a core, the CPU times much less
 * (the ratios line gives both). */
#include "kernels/bf16.h"
#include "kernels/kernels.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

static float *bench_alloc(size_t n) {
    float *p = malloc(n * sizeof(float));
    if (!p) {
        fprintf(stderr, "bench_attention: out of memory (%zu floats)\n", n);
        exit(1);
    }
    return p;
}

static void bench_fill(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
}

static int bench_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Buffers of one run: fp32 ones, and their bf16 copies (inputs rounded, outputs bf16). */
typedef struct {
    float *q, *k, *v, *out, *dout, *lse, *dq, *dk, *dv, *ws;
    uint16_t *q16, *k16, *v16, *out16, *dout16, *dq16, *dk16, *dv16;
} bench_bufs;

static uint16_t *bench_alloc16(size_t n) {
    uint16_t *p = malloc(n * sizeof(uint16_t));
    if (!p) {
        fprintf(stderr, "bench_attention: out of memory (%zu bf16)\n", n);
        exit(1);
    }
    return p;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One forward and one backward of one dtype: their wall times and CPU times. */
static void bench_once(const bench_bufs *b, int bf, const int32_t *doc_start, int T, int NH,
                       int NKV, int HS, double *tf, double *tb, double *cf, double *cb) {
    double c0 = cpu_s(), t0 = omp_get_wtime();
    if (bf)
        attention_forward_bf16(b->out16, b->lse, b->q16, b->k16, b->v16, doc_start, T, NH, NKV, HS,
                               b->ws);
    else
        attention_forward(b->out, b->lse, b->q, b->k, b->v, doc_start, T, NH, NKV, HS, b->ws);
    double t1 = omp_get_wtime(), c1 = cpu_s();
    if (bf)
        attention_backward_bf16(b->dq16, b->dk16, b->dv16, b->dout16, b->q16, b->k16, b->v16,
                                b->out16, b->lse, doc_start, T, NH, NKV, HS, b->ws);
    else
        attention_backward(b->dq, b->dk, b->dv, b->dout, b->q, b->k, b->v, b->out, b->lse,
                           doc_start, T, NH, NKV, HS, b->ws);
    double t2 = omp_get_wtime(), c2 = cpu_s();
    *tf = t1 - t0;
    *tb = t2 - t1;
    *cf = c1 - c0;
    *cb = c2 - c1;
}

int main(int argc, char **argv) {
    blas_check_core(argv); /* the core upipe itself runs on */
    int T = argc > 1 ? atoi(argv[1]) : 4096;
    int NH = argc > 2 ? atoi(argv[2]) : 8;
    int NKV = argc > 3 ? atoi(argv[3]) : 4;
    int HS = argc > 4 ? atoi(argv[4]) : 64;
    int threads = argc > 5 ? atoi(argv[5]) : 0;
    int reps = argc > 6 ? atoi(argv[6]) : 3;
    int docs = argc > 7 ? atoi(argv[7]) : 1;
    const char *dtype = argc > 8 ? argv[8] : "fp32";
    const int do32 = !strcmp(dtype, "fp32") || !strcmp(dtype, "both");
    const int do16 = !strcmp(dtype, "bf16") || !strcmp(dtype, "both");
    if (T < 1 || NH < 1 || NKV < 1 || HS < 1 || NH % NKV != 0 || reps < 1 || reps > 100 ||
        docs < 1 || docs > T || (!do32 && !do16)) {
        fprintf(stderr, "usage: bench_attention [T] [NH] [NKV] [HS] [threads] [reps] [docs] "
                        "[fp32|bf16|both]\n"
                        "       NH must be a multiple of NKV, reps in 1..100, docs in 1..T\n");
        return 1;
    }
    if (threads > 0) omp_set_num_threads(threads);
    threads = omp_get_max_threads();

    const size_t nq = (size_t)T * NH * HS, nk = (size_t)T * NKV * HS;
    bench_bufs b;
    b.q = bench_alloc(nq), b.k = bench_alloc(nk), b.v = bench_alloc(nk);
    b.out = bench_alloc(nq), b.dout = bench_alloc(nq), b.lse = bench_alloc((size_t)NH * T);
    b.dq = bench_alloc(nq), b.dk = bench_alloc(nk), b.dv = bench_alloc(nk);
    b.q16 = bench_alloc16(nq), b.k16 = bench_alloc16(nk), b.v16 = bench_alloc16(nk);
    b.out16 = bench_alloc16(nq), b.dout16 = bench_alloc16(nq);
    b.dq16 = bench_alloc16(nq), b.dk16 = bench_alloc16(nk), b.dv16 = bench_alloc16(nk);
    const size_t nws32 = attention_workspace_floats(T, NH, NKV, HS);
    const size_t nws16 = attention_workspace_floats_bf16(T, NH, NKV, HS);
    const size_t nws = nws32 > nws16 ? nws32 : nws16;
    b.ws = bench_alloc(nws);
    bench_fill(b.q, nq, 1);
    bench_fill(b.k, nk, 2);
    bench_fill(b.v, nk, 3);
    bench_fill(b.dout, nq, 4);
    bf16_from_f32(b.q, b.q16, nq);
    bf16_from_f32(b.k, b.k16, nk);
    bf16_from_f32(b.v, b.v16, nk);
    bf16_from_f32(b.dout, b.dout16, nq);
    for (size_t i = 0; i < nws; i++)
        b.ws[i] = 0.0f; // touch the pages outside the timing
    // doc_start of `docs` documents of T / docs tokens (the last one to T); pairs: the (query,
    // key, channel) triples inside the documents, causal
    int32_t *doc_start = NULL;
    double pairs = 0.0;
    if (docs > 1) {
        doc_start = malloc((size_t)T * sizeof(int32_t));
        if (!doc_start) {
            fprintf(stderr, "bench_attention: out of memory\n");
            return 1;
        }
    }
    const int len = T / docs;
    for (int d = 0; d < docs; d++) {
        const int s = d * len, e = d == docs - 1 ? T : s + len;
        for (int i = s; doc_start && i < e; i++)
            doc_start[i] = s;
        pairs += (double)(e - s) * (e - s) / 2.0 * HS * NH;
    }

    char model[256];
    cpu_model(model, sizeof model);
    printf("attention [%s] on %s\n", kernel_path_name(), model);
    printf("T=%d NH=%d NKV=%d HS=%d threads=%d docs=%d (median of %d)\n", T, NH, NKV, HS, threads,
           docs, reps);
    // Each rep runs the dtypes back to back (fp32 then bf16), so that both see the same load
    // on a shared machine; one warm-up rep first. Medians per dtype and phase.
    double t[2][2][101], c[2][2][101]; // [fp32, bf16][forward, backward][rep]: wall, CPU
    for (int r = -1; r < reps; r++)
        for (int bf = 0; bf < 2; bf++) {
            if (!(bf ? do16 : do32)) continue;
            double tf, tb, cf, cb;
            bench_once(&b, bf, doc_start, T, NH, NKV, HS, &tf, &tb, &cf, &cb);
            if (r >= 0) t[bf][0][r] = tf, t[bf][1][r] = tb, c[bf][0][r] = cf, c[bf][1][r] = cb;
        }
    double m[2][2] = {{0}}, mc[2][2] = {{0}}; // [fp32, bf16][forward, backward] medians
    for (int bf = 0; bf < 2; bf++) {
        if (!(bf ? do16 : do32)) continue;
        for (int ph = 0; ph < 2; ph++) {
            qsort(t[bf][ph], (size_t)reps, sizeof(double), bench_cmp);
            qsort(c[bf][ph], (size_t)reps, sizeof(double), bench_cmp);
            m[bf][ph] = t[bf][ph][reps / 2];
            mc[bf][ph] = c[bf][ph][reps / 2];
        }
        const double mf = m[bf][0], mb = m[bf][1];
        printf(" %s ws=%.1f MiB\n", bf ? "bf16" : "fp32",
               (double)(bf ? nws16 : nws32) * 4.0 / (1 << 20));
        printf("  forward : %9.4f s  %7.1f GFLOP/s  (%.1f per thread)  cpu %.4f s\n", mf,
               4.0 * pairs / mf / 1e9, 4.0 * pairs / mf / 1e9 / threads, mc[bf][0]);
        printf("  backward: %9.4f s  %7.1f GFLOP/s  (%.1f per thread)  cpu %.4f s\n", mb,
               10.0 * pairs / mb / 1e9, 10.0 * pairs / mb / 1e9 / threads, mc[bf][1]);
        printf("  fwd+bwd : %9.4f s  %7.0f tokens/s\n", mf + mb, T / (mf + mb));
    }
    if (do32 && do16) {
        printf(" bf16/fp32 time: forward %.3f backward %.3f fwd+bwd %.3f\n", m[1][0] / m[0][0],
               m[1][1] / m[0][1], (m[1][0] + m[1][1]) / (m[0][0] + m[0][1]));
        printf(" bf16/fp32 cpu:  forward %.3f backward %.3f fwd+bwd %.3f\n", mc[1][0] / mc[0][0],
               mc[1][1] / mc[0][1], (mc[1][0] + mc[1][1]) / (mc[0][0] + mc[0][1]));
    }
    double cs = 0.0;
    for (size_t i = 0; i < nq; i++)
        cs += do32 ? b.dq[i] : bf16_widen(b.dq16[i]);
    printf("  checksum dq %.6e\n", cs); // keeps the work observable
    free(doc_start);
    float *fb[] = {b.ws, b.dv, b.dk, b.dq, b.lse, b.dout, b.out, b.v, b.k, b.q};
    for (size_t i = 0; i < sizeof fb / sizeof fb[0]; i++)
        free(fb[i]);
    uint16_t *hb[] = {b.q16, b.k16, b.v16, b.out16, b.dout16, b.dq16, b.dk16, b.dv16};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++)
        free(hb[i]);
    return 0;
}
