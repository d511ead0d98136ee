/* bench_util.h — the small helpers the C benchmarks share: a monotonic clock and the comparison
 * qsort needs for medians. Header-only (each benchmark is one file). */
#ifndef UP_BENCH_UTIL_H
#define UP_BENCH_UTIL_H

#include <time.h>

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
