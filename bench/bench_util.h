/* bench_util.h — the small helpers the C benchmarks share: the comparison qsort needs and the
 * median, and the CPU model for the headers; the clock is core/clock.h's now_s. Header-only (each
 * benchmark is one file). */
#ifndef UP_BENCH_UTIL_H
#define UP_BENCH_UTIL_H

#include "core/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (v is sorted in place). */
static inline double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* "model name (family F, model M)" of the first CPU in /proc/cpuinfo, for benchmark headers. */
static inline void cpu_model(char *buf, size_t len) {
    char name[128] = "unknown", family[16] = "?", model[16] = "?", line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *v = colon + 1 + (colon[1] == ' ');
        v[strcspn(v, "\n")] = '\0';
        if (!strncmp(line, "model name", 10))
            snprintf(name, sizeof name, "%s", v);
        else if (!strncmp(line, "cpu family", 10))
            snprintf(family, sizeof family, "%s", v);
        else if (!strncmp(line, "model\t", 6))
            snprintf(model, sizeof model, "%s", v);
        else if (!strncmp(line, "processor", 9) && strcmp(v, "0"))
            break; // the first CPU only
    }
    if (f) fclose(f);
    snprintf(buf, len, "%s (family %s, model %s)", name, family, model);
}

#endif
