/* bench_convert — the fp32 <-> bf16 conversions (kernels/bf16.h) on every path this CPU runs,
 * one thread. usage: bench_convert [n ...] (default 16M elements, from memory, and 32K, which
 * stays in L1/L2); prints the CPU model, then per size, path and direction GB/s of bytes read
 * plus written (6 per element), the median of 15 after a warm-up (calls of a small n are
 * repeated to about 16M elements per timing). */
#include "bench_util.h"
#include "kernels/bf16.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { REPS = 15 };

/* GB/s of one direction of one path: median of REPS after a warm-up. */
static double rate(const bf16_ops *p, int to_bf16, float *f, uint16_t *b, size_t n) {
    double r[REPS];
    for (int k = -1; k < REPS; k++) {
        double t0 = now_s();
        if (to_bf16)
            p->from_f32(f, b, n);
        else
            p->to_f32(b, f, n);
        double t = now_s() - t0;
        if (k >= 0) r[k] = 6.0 * (double)n / t / 1e9;
    }
    qsort(r, REPS, sizeof r[0], cmp_double);
    return r[REPS / 2];
}

static int bench_size(size_t n) {
    float *f = malloc(n * sizeof(float));
    uint16_t *b = malloc(n * sizeof(uint16_t));
    if (!f || !b) return 1;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) { // values in [-4, 4): plain normal numbers
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        f[i] = (float)((double)(s >> 11) * 0x1p-53 * 8.0 - 4.0);
    }
    printf("\nn = %zu elements\n%-12s %14s %14s\n", n, "path", "fp32 -> bf16", "bf16 -> fp32");
    for (int k = 0; k < bf16_path_count(); k++) {
        const bf16_ops *p = bf16_path(k);
        if (!p->runs()) {
            printf("%-12s %14s %14s\n", p->name, "(not on this CPU)", "");
            continue;
        }
        double down = rate(p, 1, f, b, n), up = rate(p, 0, f, b, n);
        printf("%-12s %14.1f %14.1f\n", p->name, down, up);
    }
    free(f);
    free(b);
    return 0;
}

int main(int argc, char **argv) {
    char model[192];
    cpu_model(model, sizeof model);
    printf("cpu: %s\n1 thread; GB/s of bytes read + written (6 per element), median of %d\n", model,
           REPS);
    if (argc < 2) return bench_size((size_t)16 << 20) || bench_size((size_t)32 << 10);
    for (int i = 1; i < argc; i++)
        if (bench_size((size_t)strtoull(argv[i], NULL, 10))) return 1;
    return 0;
}
