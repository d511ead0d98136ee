/* dispatch.c — the CPU probe (dispatch.h), the table of kernel paths and the choice made from it
 * (kernel_path.h; contract of the public part: kernel_path_* in kernels.h). */
#include "kernels/kernel_path.h"
#include "kernels/kernels.h"

#include "core/check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void kernel_choice_set_route(const gemm_bf16_ops *route) {
    kernel_choice_get();
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
    char dot[64] = "";
    if (kernel_cpu_get()->avx512bf16)
        snprintf(dot, sizeof dot, " (vdpbf16ps %.2fx fma%s)", kernel_dot_ratio(),
                 k->forced                              ? ""
                 : kernel_dot_ratio() >= KERNEL_DOT_MIN ? ": used"
                                                        : ": not used");
    snprintf(line, sizeof line,
             "%s%s; attention %s, gemm %s, bf16 %s%s, bf16 gemm %s, element-wise %s (CPU), "
             "openblas %s (%s), fp32 gemm %s",
             k->row->label, dot, k->row->label, k->row->name, k->bf16->name,
             k->forced ? "" : " (CPU best)", k->route->name, clones_name(kernel_cpu_get()->level),
             core ? core : "unknown", blas_core_reason(), sgemm_route());
    return line;
}
