#include "core/check.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank = 0;
static int g_world = 1;
static void (*_Atomic g_on_stop)(void);
static up_stop_hooks g_stop_hooks; /* set once, on the main thread, before any other starts */

void up_on_stop(void (*fn)(void)) {
    atomic_store(&g_on_stop, fn);
}

void up_run_on_stop(void) {
    void (*fn)(void) = atomic_exchange(&g_on_stop, NULL); /* once, on one thread */
    if (fn) fn();
}

void up_set_rank(int rank, int world_size) {
    g_rank = rank;
    g_world = world_size;
}

int up_rank(void) {
    return g_rank;
}

void up_set_stop_hooks(const up_stop_hooks *hooks) {
    g_stop_hooks = hooks ? *hooks : (up_stop_hooks){NULL, NULL};
}

static UP_NORETURN void stop_all(int code) {
    up_run_on_stop();
    fflush(stdout);
    fflush(stderr);
    if (g_world > 1 && g_stop_hooks.abort_all) g_stop_hooks.abort_all(code);
    exit(code);
}

/* Formats prefix + message + newline and writes it with one call, so a rank killed by another
 * rank's MPI_Abort right after cannot leave half a line. */
static void write_line(const char *prefix, const char *fmt, va_list ap) {
    char buf[2048];
    int n = snprintf(buf, sizeof buf, "%s", prefix);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof buf) {
        int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
        if (m > 0) n += m;
    }
    if ((size_t)n >= sizeof buf - 1) n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    fflush(stdout);
    fwrite(buf, 1, (size_t)n, stderr);
    fflush(stderr);
}

static UP_NORETURN void finalize_exit(int code);

void up_fatal(const char *file, int line, const char *fmt, ...) {
    char prefix[256];
    snprintf(prefix, sizeof prefix, "[rank %d] %s:%d: ", g_rank, file, line);
    va_list ap;
    va_start(ap, fmt);
    write_line(prefix, fmt, ap);
    va_end(ap);
    stop_all(2);
}

void up_die(const char *fmt, ...) {
    char prefix[64];
    if (g_world > 1)
        snprintf(prefix, sizeof prefix, "upipe: error (rank %d): ", g_rank);
    else
        snprintf(prefix, sizeof prefix, "upipe: error: ");
    va_list ap;
    va_start(ap, fmt);
    write_line(prefix, fmt, ap);
    va_end(ap);
    stop_all(1);
}

void up_die_all(const char *fmt, ...) {
    if (g_rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        write_line("upipe: error: ", fmt, ap);
        va_end(ap);
    }
    finalize_exit(1);
}

static UP_NORETURN void finalize_exit(int code) {
    up_run_on_stop();
    fflush(stdout);
    fflush(stderr);
    if (g_stop_hooks.finalize) g_stop_hooks.finalize();
    exit(code);
}

static void print_line(const char *prefix, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    write_line(prefix, fmt, ap);
    va_end(ap);
}

void up_die_agreed(const char *msg) {
    if (msg) {
        char prefix[64];
        if (g_world > 1)
            snprintf(prefix, sizeof prefix, "upipe: error (rank %d): ", g_rank);
        else
            snprintf(prefix, sizeof prefix, "upipe: error: ");
        print_line(prefix, "%s", msg);
    }
    finalize_exit(1);
}

int up_errf(char *err, size_t errlen, const char *label, const char *fmt, ...) {
    if (err == NULL || errlen == 0) return -1;
    int k = label != NULL ? snprintf(err, errlen, "%s: ", label) : 0;
    if (k < 0 || (size_t)k >= errlen) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

size_t up_mul(size_t a, size_t b) {
    UP_CHECK(b == 0 || a <= SIZE_MAX / b, "size overflow: %zu * %zu", a, b);
    return a * b;
}

size_t up_mul3(size_t a, size_t b, size_t c) {
    return up_mul(up_mul(a, b), c);
}

size_t up_add(size_t a, size_t b) {
    UP_CHECK(a <= SIZE_MAX - b, "size overflow: %zu + %zu", a, b);
    return a + b;
}

char *up_fmt_bytes(char *buf, size_t len, double bytes) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%.0f B", bytes);
    else
        snprintf(buf, len, "%.2f %s", bytes, units[u]);
    return buf;
}

int up_parse_bytes(const char *s, unsigned long long *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},
                 {"B", 1},
                 {"KiB", 1024.0},
                 {"MiB", 1048576.0},
                 {"GiB", 1073741824.0},
                 {"TiB", 1099511627776.0},
                 {"KB", 1e3},
                 {"MB", 1e6},
                 {"GB", 1e9},
                 {"TB", 1e12},
                 {"K", 1024.0},
                 {"M", 1048576.0},
                 {"G", 1073741824.0}};
    if (errno == 0 && end != s && v > 0)
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
            if (!strcmp(end, units[i].suffix) && v * units[i].mult >= 1 &&
                v * units[i].mult < 1.8e19) {
                *out = (unsigned long long)(v * units[i].mult);
                return 0;
            }
    return -1;
}
