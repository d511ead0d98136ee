/* bench_bf16dot — does AVX512_BF16's dot product (VDPBF16PS) beat fp32 FMA on this CPU? PLAN.md
 * 4d's question before an avx512bf16 attention path: the attention's products are
 * register-blocked FMA loops running near the FMA peak (DESIGN.md §8.1), so VDPBF16PS helps only
 * if it retires more multiply-adds per second than VFMADD231PS does.
 * One thread, N independent accumulator chains (enough to hide either instruction's latency),
 * all in registers (no memory traffic): instructions per second and GFLOP/s of each (FMA 16
 * lanes x 2 = 32 flops, VDPBF16PS 16 lanes x 2 products x 2 = 64), the median of 7 runs, the two
 * interleaved so both see the same load. usage: bench_bf16dot (x86-64 with AVX-512 F only; the
 * dot product where the CPU has AVX512_BF16). */
#include "bench_util.h"
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

enum { CHAINS = KERNEL_LOOP_CHAINS, REPS = 7 };
static const int ITERS = 20 * 1000 * 1000; // x CHAINS instructions per run

/* The loops are upipe's own start-up calibration's (src/kernels/calibrate.c), run longer. */
static float run_fma(int n) {
    return kernel_loop_fma(n);
}
static float run_dpbf16(int n) {
    return kernel_loop_dot(n);
}

int main(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) {
        printf("bench_bf16dot: this CPU lacks AVX-512 F\n");
        return 0;
    }
    const int bf = __builtin_cpu_supports("avx512bf16") != 0; // a flag bit, not 0 or 1
    char model[256];
    cpu_model(model, sizeof model);
    printf("bench_bf16dot on %s, one thread, %d chains\n", model, CHAINS);
    double t[2][REPS];
    volatile float sink = 0.0f;
    for (int r = 0; r < REPS; r++) {
        double t0 = now_s();
        sink += run_fma(ITERS);
        double t1 = now_s();
        if (bf) sink += run_dpbf16(ITERS);
        double t2 = now_s();
        t[0][r] = t1 - t0;
        t[1][r] = t2 - t1;
    }
    const double ins = (double)ITERS * CHAINS;
    const char *names[2] = {"vfmadd231ps zmm", "vdpbf16ps zmm  "};
    const double flops[2] = {32.0, 64.0};
    double rate[2] = {0.0, 0.0};
    for (int i = 0; i < 1 + bf; i++) {
        qsort(t[i], REPS, sizeof(double), cmp_double);
        const double m = t[i][REPS / 2];
        rate[i] = ins * flops[i] / m / 1e9;
        printf("  %s: %6.2f G instructions/s  %7.1f GFLOP/s\n", names[i], ins / m / 1e9, rate[i]);
    }
    if (bf)
        printf("  vdpbf16ps / fma GFLOP/s: %.2f\n", rate[1] / rate[0]);
    else
        printf("  vdpbf16ps: skipped (this CPU lacks AVX512_BF16)\n");
    return 0;
}
#else
int main(void) {
    printf("bench_bf16dot: x86-64 only\n");
    return 0;
}
#endif
