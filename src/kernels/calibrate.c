/* calibrate.c — the thread clock of the start-up measurements, and the one behind the avx512bf16
 * row (kernel_path.h): does AVX512_BF16's dot product (VDPBF16PS) retire more multiply-adds per
 * second than fp32 FMA on this CPU? The instruction set alone does not say (DESIGN.md §8.1;
 * bench/bench_bf16dot.c runs the same loops longer).
 *
 * One thread, 16 independent accumulator chains in registers (no memory traffic), the two
 * instructions interleaved REPS times so both see the same load, the median of each: about 4 ms
 * in all. Thread CPU time, so that ranks starting together on shared cores measure what they would
 * alone; the threshold (KERNEL_DOT_MIN, 1.3) sits far from the ratios measured, so noise does not
 * flip the decision. */
#include "kernels/kernels.h"

#include "kernels/dispatch.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

enum { REPS = 9, ITERS = 25000 };

/* The asm barrier keeps the compiler from hoisting or folding the loop-invariant operands. */
__attribute__((target("avx512f"), noinline)) float kernel_loop_fma(int n) {
    __m512 a[KERNEL_LOOP_CHAINS];
    for (int i = 0; i < KERNEL_LOOP_CHAINS; i++)
        a[i] = _mm512_setzero_ps();
    __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1e-7f);
    for (int k = 0; k < n; k++) {
#pragma GCC unroll 16
        for (int i = 0; i < KERNEL_LOOP_CHAINS; i++)
            a[i] = _mm512_fmadd_ps(x, y, a[i]);
        __asm__ volatile("" : "+v"(x));
    }
    for (int i = 1; i < KERNEL_LOOP_CHAINS; i++)
        a[0] = _mm512_add_ps(a[0], a[i]);
    return _mm512_reduce_add_ps(a[0]);
}

__attribute__((target("avx512f,avx512bf16"), noinline)) float kernel_loop_dot(int n) {
    __m512 a[KERNEL_LOOP_CHAINS];
    for (int i = 0; i < KERNEL_LOOP_CHAINS; i++)
        a[i] = _mm512_setzero_ps();
    __m512bh x = (__m512bh)_mm512_set1_epi32(0x33d633d6),
             y = (__m512bh)_mm512_set1_epi32(0x3f803f80);
    for (int k = 0; k < n; k++) {
#pragma GCC unroll 16
        for (int i = 0; i < KERNEL_LOOP_CHAINS; i++)
            a[i] = _mm512_dpbf16_ps(a[i], x, y);
        __asm__ volatile("" : "+v"(x));
    }
    for (int i = 1; i < KERNEL_LOOP_CHAINS; i++)
        a[0] = _mm512_add_ps(a[0], a[i]);
    return _mm512_reduce_add_ps(a[0]);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
#endif

static double ratio;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void measure(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    const kernel_cpu *c = kernel_cpu_get();
    if (!c->avx512f || !c->avx512bf16) return;
    double tf[REPS], td[REPS];
    volatile float sink = 0.0f;
    sink += kernel_loop_fma(ITERS / 10) + kernel_loop_dot(ITERS / 10); /* wakes the vector units */
    for (int r = 0; r < REPS; r++) {
        double t0 = kernel_thread_seconds();
        sink += kernel_loop_fma(ITERS);
        double t1 = kernel_thread_seconds();
        sink += kernel_loop_dot(ITERS);
        double t2 = kernel_thread_seconds();
        tf[r] = t1 - t0, td[r] = t2 - t1;
    }
    qsort(tf, REPS, sizeof *tf, cmp);
    qsort(td, REPS, sizeof *td, cmp);
    /* VDPBF16PS does two multiply-adds per lane, FMA one */
    ratio = 2.0 * tf[REPS / 2] / td[REPS / 2];
    /* tests: a measurement that went another way on this rank (tests/scripts/ulysses.sh) */
    const char *t = getenv("UPIPE_TEST_DOT_RATIO");
    if (t && *t) ratio = atof(t);
#endif
}

double kernel_thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); /* another process on the core does not count */
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double kernel_dot_ratio(void) {
    pthread_once(&once, measure);
    return ratio;
}
