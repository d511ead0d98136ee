/* kernel_path.c — the table of kernel paths and the choice made from it (kernel_path.h; contract
 * of the public part: kernel_path_* in kernels.h), and the entries that run the chosen row's
 * conversions and attention tiles. */
#include "kernels/kernel_path.h"
#include "kernels/kernels.h"

#include "core/check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the table ------------------------------------------------------------------------------ */

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

/* Makes row (named: forced) the choice, with the rules of kernel_path.h. */
static void choose(const kernel_row *row, int forced) {
    current.row = row;
    current.forced = forced;
    current.bf16 = forced ? row->bf16 : bf16_best();
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

/* The first row this CPU runs whose measurement, if it has one, won (measured 0: the first
 * without one). The last row runs anywhere and has none. */
static const kernel_row *first_row(int measured) {
    for (int i = 0; i < NROWS; i++)
        if (rows[i].runs() && (!rows[i].wins || (measured && rows[i].wins()))) return &rows[i];
    return &rows[NROWS - 1];
}

static void choose_default(void) {
    if (chosen) return; /* kernel_path_set came first */
    const char *env = getenv("UPIPE_KERNEL");
    if (env && env[0]) {
        kernel_path_set(env, refusal, sizeof refusal);
        return;
    }
    choose(first_row(1), 0);
}

int kernel_path_init(char *err, size_t len) {
    pthread_once(&default_once, choose_default);
    if (chosen) return 0;
    snprintf(err, len, "%s", refusal);
    return -1;
}

void kernel_path_agree(int all_win) {
    const kernel_choice *k = kernel_choice_get();
    if (!k->forced && !all_win && k->row->wins) choose(first_row(0), 0);
}

int kernel_path_won(void) {
    const kernel_choice *k = kernel_choice_get();
    return !k->forced && k->row->wins != NULL;
}

const kernel_choice *kernel_choice_get(void) {
    pthread_once(&default_once, choose_default);
    if (!chosen) up_die("%s", refusal);
    return chosen;
}

int kernel_path_supported(const char *name) {
    const kernel_row *r = row_find(name);
    return r && r->runs();
}

const attn_ops *attn_ops_current(void) {
    return kernel_choice_get()->row->attn;
}

/* ---- the chosen row's conversions ----------------------------------------------------------- */

const bf16_ops *bf16_path_current(void) {
    return kernel_choice_get()->bf16;
}

void bf16_from_f32(const float *src, uint16_t *dst, size_t n) {
    bf16_path_current()->from_f32(src, dst, n);
}

void f32_from_bf16(const uint16_t *src, float *dst, size_t n) {
    bf16_path_current()->to_f32(src, dst, n);
}
