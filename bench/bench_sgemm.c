/* bench_sgemm — the machine's cblas_sgemm rate on training shapes, the yardstick of the model
 * benchmark's "fraction of sgemm". usage: bench_sgemm [threads] [M K N] ; prints GFLOP/s
 * (median of 7 after a warm-up) as one JSON line. */
#include "bench_util.h"
#include "kernels/kernels.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    blas_check_core(argv); /* the core upipe itself runs on */
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int M = argc > 4 ? atoi(argv[2]) : 16384, K = argc > 4 ? atoi(argv[3]) : 512,
        N = argc > 4 ? atoi(argv[4]) : 1408;
    openblas_set_num_threads(threads);
    omp_set_num_threads(threads);
    float *a = malloc(sizeof(float) * (size_t)M * K), *b = malloc(sizeof(float) * (size_t)N * K),
          *c = malloc(sizeof(float) * (size_t)M * N);
    if (!a || !b || !c) return 1;
    for (size_t i = 0; i < (size_t)M * K; i++)
        a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)N * K; i++)
        b[i] = (float)(i % 5) * 0.1f;
    double rates[7];
    /* the model's forward shape: (M, K) x (N, K)^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, a, K, b, K, 0.f, c, N);
    for (int r = 0; r < 7; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, a, K, b, K, 0.f, c, N);
        rates[r] = 2.0 * M * N * K / (now_s() - t0) / 1e9;
    }
    qsort(rates, 7, sizeof rates[0], cmp_double);
    printf("{\"blas_core\": \"%s\", \"threads\": %d, \"M\": %d, \"K\": %d, \"N\": %d, \"gflops\": "
           "%.1f}\n",
           openblas_get_corename(), threads, M, K, N, rates[3]);
    free(a);
    free(b);
    free(c);
    return 0;
}
