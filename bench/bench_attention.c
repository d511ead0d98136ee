/* bench_attention.c — micro-benchmark of the causal GQA attention kernels (kernels.h).
 *
 * Built with the project (build/bench_attention). UPIPE_KERNEL=avx512|avx2|portable runs one
 * kernel path (default: the CPU's best); the first line names it.
 * Usage: bench_attention [T=4096] [NH=8] [NKV=4] [HS=64] [threads=omp default] [reps=3] [docs=1]
 *
 * docs > 1: the window packs `docs` equal documents (the last one takes the remainder), passed
 * as doc_start; docs = 1 passes NULL (the plain causal kernel).
 * Prints the median time and rate of forward and backward over `reps` runs (after one warm-up),
 * and tokens per second (forward + backward). FLOPs count the work inside the documents, causal,
 * matmuls only: forward 2 matmuls = 4 * L*L/2 * HS * NH per document of L tokens, backward 5
 * (the recompute of S, dV, dP, dK, dQ) = 10 * L*L/2 * HS * NH; so with documents the GFLOP/s
 * show how well the skipped tiles are skipped (equal to one document's rate: perfect). */
#include "kernels/kernels.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char **argv) {
    blas_check_core(argv); /* the core upipe itself runs on */
    int T = argc > 1 ? atoi(argv[1]) : 4096;
    int NH = argc > 2 ? atoi(argv[2]) : 8;
    int NKV = argc > 3 ? atoi(argv[3]) : 4;
    int HS = argc > 4 ? atoi(argv[4]) : 64;
    int threads = argc > 5 ? atoi(argv[5]) : 0;
    int reps = argc > 6 ? atoi(argv[6]) : 3;
    int docs = argc > 7 ? atoi(argv[7]) : 1;
    if (T < 1 || NH < 1 || NKV < 1 || HS < 1 || NH % NKV != 0 || reps < 1 || reps > 100 ||
        docs < 1 || docs > T) {
        fprintf(stderr, "usage: bench_attention [T] [NH] [NKV] [HS] [threads] [reps] [docs]\n"
                        "       NH must be a multiple of NKV, reps in 1..100, docs in 1..T\n");
        return 1;
    }
    if (threads > 0) omp_set_num_threads(threads);
    threads = omp_get_max_threads();

    const size_t nq = (size_t)T * NH * HS, nk = (size_t)T * NKV * HS;
    float *q = bench_alloc(nq), *k = bench_alloc(nk), *v = bench_alloc(nk);
    float *out = bench_alloc(nq), *dout = bench_alloc(nq), *lse = bench_alloc((size_t)NH * T);
    float *dq = bench_alloc(nq), *dk = bench_alloc(nk), *dv = bench_alloc(nk);
    const size_t nws = attention_workspace_floats(T, NH, NKV, HS);
    float *ws = bench_alloc(nws);
    bench_fill(q, nq, 1);
    bench_fill(k, nk, 2);
    bench_fill(v, nk, 3);
    bench_fill(dout, nq, 4);
    for (size_t i = 0; i < nws; i++)
        ws[i] = 0.0f; // touch the pages outside the timing
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

    double tf[101], tb[101];
    for (int r = -1; r < reps; r++) { // r = -1: warm-up
        double t0 = omp_get_wtime();
        attention_forward(out, lse, q, k, v, doc_start, T, NH, NKV, HS, ws);
        double t1 = omp_get_wtime();
        attention_backward(dq, dk, dv, dout, q, k, v, out, lse, doc_start, T, NH, NKV, HS, ws);
        double t2 = omp_get_wtime();
        if (r >= 0) {
            tf[r] = t1 - t0;
            tb[r] = t2 - t1;
        }
    }
    qsort(tf, (size_t)reps, sizeof(double), bench_cmp);
    qsort(tb, (size_t)reps, sizeof(double), bench_cmp);
    const double mf = tf[reps / 2], mb = tb[reps / 2];
    printf("attention [%s] T=%d NH=%d NKV=%d HS=%d threads=%d docs=%d ws=%.1f MiB (median of %d)\n",
           kernel_path_name(), T, NH, NKV, HS, threads, docs, (double)nws * 4.0 / (1 << 20), reps);
    printf("  forward : %9.4f s  %7.1f GFLOP/s  (%.1f per thread)\n", mf, 4.0 * pairs / mf / 1e9,
           4.0 * pairs / mf / 1e9 / threads);
    printf("  backward: %9.4f s  %7.1f GFLOP/s  (%.1f per thread)\n", mb, 10.0 * pairs / mb / 1e9,
           10.0 * pairs / mb / 1e9 / threads);
    printf("  fwd+bwd : %9.4f s  %7.0f tokens/s\n", mf + mb, T / (mf + mb));
    double cs = 0.0;
    for (size_t i = 0; i < nq; i++)
        cs += dq[i];
    printf("  checksum dq %.6e\n", cs); // keeps the work observable
    free(doc_start);
    free(ws);
    free(dv);
    free(dk);
    free(dq);
    free(lse);
    free(dout);
    free(out);
    free(v);
    free(k);
    free(q);
    return 0;
}
