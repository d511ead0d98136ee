/* dispatch.c — the CPU probe (dispatch.h), the table of kernel paths and the choice made from it
 * (kernel_path.h; contract of the public part: kernel_path_* in kernels.h). */
#include "kernels/kernel_path.h"
#include "kernels/kernels.h"

#include "core/check.h"

#include <pthread.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the probe ------------------------------------------------------------------------------ */

static kernel_cpu cpu;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_probe(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    cpu.avx2 = __builtin_cpu_supports("avx2") != 0;
    cpu.fma = __builtin_cpu_supports("fma") != 0;
    cpu.avx512f = __builtin_cpu_supports("avx512f") != 0;
    cpu.avx512bw = __builtin_cpu_supports("avx512bw") != 0;
    cpu.avx512dq = __builtin_cpu_supports("avx512dq") != 0;
    cpu.avx512vl = __builtin_cpu_supports("avx512vl") != 0;
    cpu.avx512bf16 = __builtin_cpu_supports("avx512bf16") != 0;
    unsigned a, b, c, d;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1)) {
#if defined(__linux__)
        /* Linux hands out the AMX tile data state only on request (5.16 on) */
        cpu.amx_bf16 = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */,
                               18 /* XFEATURE_XTILEDATA */) == 0;
#endif
    }
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
    /* the test the loader's resolver of KERNEL_CLONES makes (dispatch.h) */
    cpu.level = __builtin_cpu_supports("x86-64-v4")   ? 4
                : __builtin_cpu_supports("x86-64-v3") ? 3
                                                      : 1;
#endif
}

const kernel_cpu *kernel_cpu_get(void) {
    pthread_once(&cpu_once, cpu_probe);
    return &cpu;
}

/* ---- the table ------------------------------------------------------------------------------ */

int kernel_cpu_any(void) {
    return 1;
}

#if defined(__x86_64__)
/* The instruction sets the row's files are compiled with (CMakeLists.txt). */
static int runs_avx512(void) {
    const kernel_cpu *c = kernel_cpu_get();
    return kernel_cpu_avx512(c) && c->avx2 && c->fma;
}

static int runs_avx512bf16(void) {
    return runs_avx512() && kernel_cpu_get()->avx512bf16;
}

/* VDPBF16PS retires more multiply-adds than FMA (calibrate.c). */
static int wins_avx512bf16(void) {
    return kernel_dot_ratio() >= KERNEL_DOT_MIN;
}

static int runs_avx2(void) {
    const kernel_cpu *c = kernel_cpu_get();
    return c->avx2 && c->fma;
}
#endif

/* Best first: UPIPE_KERNEL unset takes the first one the CPU runs. */
static const kernel_row rows[] = {
#if defined(__x86_64__)
    /* The bf16 products on VDPBF16PS; fp32 runs the avx512 row's kernels (the same bits). */
    {"avx512bf16", "avx512bf16", "AVX-512 F, BW, DQ, VL and AVX512_BF16", runs_avx512bf16,
     wins_avx512bf16, &attn_ops_avx512bf16, &gemm_packed_avx512bf16, &bf16_avx512bf16},
    {"avx512", "avx512", "AVX-512 F, BW, DQ and VL", runs_avx512, NULL, &attn_ops_avx512,
     &gemm_packed_avx512, &bf16_avx512},
    {"avx2", "avx2+fma", "AVX2 and FMA", runs_avx2, NULL, &attn_ops_avx2, &gemm_packed_avx2,
     &bf16_avx2},
#endif
    {"portable", "portable", "nothing", kernel_cpu_any, NULL, &attn_ops_portable,
     &gemm_packed_portable, &bf16_portable},
};
enum { NROWS = sizeof rows / sizeof rows[0] };

static const kernel_row *row_find(const char *name) {
    for (int i = 0; i < NROWS; i++)
        if (!strcmp(rows[i].name, name)) return &rows[i];
    return NULL;
}

/* "a, b or c": the names of the rows this binary has (runnable only: on this CPU). */
static void row_names(char *buf, size_t len, int runnable) {
    const char *names[NROWS];
    int n = 0;
    for (int i = 0; i < NROWS; i++)
        if (!runnable || rows[i].runs()) names[n++] = rows[i].name;
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && off < len; i++) {
        const char *sep = i == 0 ? "" : i == n - 1 ? " or " : ", ";
        int w = snprintf(buf + off, len - off, "%s%s", sep, names[i]);
        if (w < 0) break;
        off += (size_t)w;
    }
}

/* ---- the choice ----------------------------------------------------------------------------- */

static kernel_choice current;
static const kernel_choice *chosen; /* NULL until a choice succeeded */
static char refusal[256];           /* the default choice's refusal, if it failed */
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

/* The first entry of a path list this CPU runs (the lists end with one that runs anywhere). */
static const bf16_ops *bf16_best(void) {
    for (int i = 0; i < bf16_path_count(); i++)
        if (bf16_path(i)->runs()) return bf16_path(i);
    return &bf16_portable;
}

static const gemm_bf16_ops *route_best(void) {
    for (int i = 0; i < gemm_bf16_path_count(); i++)
        if (gemm_bf16_path_at(i)->runs()) return gemm_bf16_path_at(i);
    up_die("gemm_bf16: no route runs on this CPU");
}

/* oneDNN's bf16 gemm over our packed product where the CPU has AMX-BF16 (oneDNN's tile kernels;
 * ours have none): measured, as blas_core.c measures the fp32 products (thread CPU time on one
 * thread, the model's forward shape, the fastest of 5 each, taken at 1.5x). Elsewhere the packed
 * route measured ahead (oneDNN 0.6-0.85x on Emerald Rapids, DESIGN.md §5.1) and is kept without
 * measuring. UPIPE_BF16_CALIBRATE=1 measures on any CPU oneDNN's bf16 gemm runs on (tests). */
static double route_ratio; /* oneDNN's rate over packed's, 0 if not measured */

static double route_seconds(const gemm_bf16_ops *r, const uint16_t *a, const uint16_t *b, float *c,
                            float *ws, int M, int N, int K) {
    double best = 0.0;
    for (int i = -1; i < 5; i++) {
        double t0 = kernel_thread_seconds();
        r->fn(0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N, ws);
        double t = kernel_thread_seconds() - t0;
        if (i >= 0 && (best == 0.0 || t < best)) best = t;
    }
    return best;
}

static const gemm_bf16_ops *route_measured(const gemm_bf16_ops *packed) {
    const gemm_bf16_ops *onednn = NULL;
    for (int i = 0; i < gemm_bf16_path_count(); i++)
        if (!strcmp(gemm_bf16_path_at(i)->name, "onednn") && gemm_bf16_path_at(i)->runs())
            onednn = gemm_bf16_path_at(i);
    const char *force = getenv("UPIPE_BF16_CALIBRATE");
    if (!onednn || !(kernel_cpu_get()->amx_bf16 || (force && !strcmp(force, "1")))) return packed;
    enum { M = 256, K = 512, N = 1408 };
    uint16_t *a = malloc(sizeof(uint16_t) * M * K), *b = malloc(sizeof(uint16_t) * N * K);
    float *c = malloc(sizeof(float) * M * N), *ws = malloc(sizeof(float) * GEMM_BF16_WS_FLOATS);
    const gemm_bf16_ops *r = packed;
    if (a && b && c && ws) {
        for (size_t i = 0; i < (size_t)M * K; i++)
            a[i] = (uint16_t)(0x3f00 + i % 127);
        for (size_t i = 0; i < (size_t)N * K; i++)
            b[i] = (uint16_t)(0xbe00 + i % 113);
        int omp = omp_get_max_threads();
        omp_set_num_threads(1);
        double tp = route_seconds(packed, a, b, c, ws, M, N, K);
        double to = route_seconds(onednn, a, b, c, ws, M, N, K);
        omp_set_num_threads(omp);
        route_ratio = to > 0.0 ? tp / to : 0.0;
        if (route_ratio >= 1.5) r = onednn;
    }
    free(a), free(b), free(c), free(ws);
    return r;
}

/* Makes row (named: forced) the choice, with the rules of kernel_path.h. */
static void choose(const kernel_row *row, int forced) {
    current.row = row;
    current.forced = forced;
    current.bf16 = forced ? row->bf16 : bf16_best();
    if (!current.route) current.route = route_best();
    chosen = &current;
}

int kernel_path_set(const char *name, char *err, size_t len) {
    char names[96];
    const kernel_row *r = row_find(name);
    if (!r) {
        row_names(names, sizeof names, 0);
        return up_errf(err, len, "UPIPE_KERNEL", "unknown kernel path '%s': use %s", name, names);
    }
    if (!r->runs()) {
        row_names(names, sizeof names, 1);
        return up_errf(err, len, "UPIPE_KERNEL",
                       "this CPU cannot run the '%s' kernels (they need %s): use %s, or unset "
                       "UPIPE_KERNEL for the best path of this CPU",
                       name, r->needs, names);
    }
    choose(r, 1);
    return 0;
}

static void choose_default(void) {
    if (chosen) return; /* kernel_path_set came first */
    const char *env = getenv("UPIPE_KERNEL");
    if (env && env[0]) {
        kernel_path_set(env, refusal, sizeof refusal);
        return;
    }
    for (int i = 0; i < NROWS; i++)
        if (rows[i].runs() && (!rows[i].wins || rows[i].wins())) {
            choose(&rows[i], 0);
            return;
        }
}

int kernel_path_init(char *err, size_t len) {
    pthread_once(&default_once, choose_default);
    if (chosen) return 0;
    snprintf(err, len, "%s", refusal);
    return -1;
}

const kernel_choice *kernel_choice_get(void) {
    pthread_once(&default_once, choose_default);
    if (!chosen) up_die("%s", refusal);
    return chosen;
}

static pthread_once_t route_once = PTHREAD_ONCE_INIT;
static int route_set; /* kernel_choice_set_route named one: nothing to measure */

static void route_measure(void) {
    if (!route_set) current.route = route_measured(current.route);
}

const gemm_bf16_ops *kernel_choice_route(void) {
    kernel_choice_get();
    pthread_once(&route_once, route_measure);
    return current.route;
}

void kernel_choice_set_route(const gemm_bf16_ops *route) {
    kernel_choice_get();
    route_set = 1;
    current.route = route;
}

int kernel_path_supported(const char *name) {
    const kernel_row *r = row_find(name);
    return r && r->runs();
}

const attn_ops *attn_ops_current(void) {
    return kernel_choice_get()->row->attn;
}

/* ---- the header line ------------------------------------------------------------------------ */

static const char *clones_name(int level) {
    switch (level) {
    case 4:
        return "x86-64-v4";
    case 3:
        return "x86-64-v3";
    case 1:
        return "x86-64";
    default:
        return "target";
    }
}

const char *kernel_path_name(void) {
    static char line[384];
    const kernel_choice *k = kernel_choice_get();
    const char *core = blas_core();
    /* where the CPU has the dot product: how fast it measured, which decided the row */
    char dot[64] = "", route_name[64];
    const gemm_bf16_ops *route = kernel_choice_route();
    if (route_ratio > 0.0)
        snprintf(route_name, sizeof route_name, "%s (onednn %.2fx packed, measured)", route->name,
                 route_ratio);
    else
        snprintf(route_name, sizeof route_name, "%s", route->name);
    if (kernel_cpu_get()->avx512bf16)
        snprintf(dot, sizeof dot, " (vdpbf16ps %.2fx fma%s)", kernel_dot_ratio(),
                 k->forced                              ? ""
                 : kernel_dot_ratio() >= KERNEL_DOT_MIN ? ": used"
                                                        : ": not used");
    snprintf(line, sizeof line,
             "%s%s; attention %s, gemm %s, bf16 %s%s, bf16 gemm %s, element-wise %s (CPU), "
             "openblas %s (%s), fp32 gemm %s",
             k->row->label, dot, k->row->label, k->row->name, k->bf16->name,
             k->forced ? "" : " (CPU best)", route_name, clones_name(kernel_cpu_get()->level),
             core ? core : "unknown", blas_core_reason(), sgemm_route());
    return line;
}
