/* dispatch.c — which attention tile path runs (contract: kernel_path_* in kernels.h). */
#include "kernels/kernels.h"

#include "attention_tiles.h"

#include "core/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A path and what the CPU needs to run it: the instruction sets its file is compiled with
 * (CMakeLists.txt), which __builtin_cpu_supports reports only where the OS saves their
 * registers too. */
typedef struct {
    const attn_ops *ops;
    const char *needs; // for the message when the CPU lacks it
    int (*runs)(void);
} path_entry;

#if defined(__x86_64__)
static int cpu_has_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int cpu_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

static int cpu_any(void) {
    return 1;
}

/* Best first: the default is the first one the CPU runs. */
static const path_entry paths[] = {
#if defined(__x86_64__)
    {&attn_ops_avx512, "AVX-512 F, BW, DQ and VL", cpu_has_avx512},
    {&attn_ops_avx2, "AVX2 and FMA", cpu_has_avx2},
#endif
    {&attn_ops_portable, "nothing", cpu_any},
};
enum { NPATHS = sizeof paths / sizeof paths[0] };

static const attn_ops *chosen; // NULL until the first choice

static const path_entry *path_find(const char *name) {
    for (int i = 0; i < NPATHS; i++)
        if (!strcmp(paths[i].ops->name, name)) return &paths[i];
    return NULL;
}

/* "a, b or c": the names of the paths this binary has (runnable only: on this CPU). */
static void path_names(char *buf, size_t len, int runnable) {
    const char *names[NPATHS];
    int n = 0;
    for (int i = 0; i < NPATHS; i++)
        if (!runnable || paths[i].runs()) names[n++] = paths[i].ops->name;
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && off < len; i++) {
        const char *sep = i == 0 ? "" : i == n - 1 ? " or " : ", ";
        int w = snprintf(buf + off, len - off, "%s%s", sep, names[i]);
        if (w < 0) break;
        off += (size_t)w;
    }
}

int kernel_path_supported(const char *name) {
    const path_entry *p = path_find(name);
    return p && p->runs();
}

int kernel_path_set(const char *name, char *err, size_t len) {
    char names[96];
    const path_entry *p = path_find(name);
    if (!p) {
        path_names(names, sizeof names, 0);
        return up_errf(err, len, "UPIPE_KERNEL", "unknown kernel path '%s': use %s", name, names);
    }
    if (!p->runs()) {
        path_names(names, sizeof names, 1);
        return up_errf(err, len, "UPIPE_KERNEL",
                       "this CPU cannot run the '%s' kernels (they need %s): use %s, or unset "
                       "UPIPE_KERNEL for the best path of this CPU",
                       name, p->needs, names);
    }
    chosen = p->ops;
    return 0;
}

int kernel_path_init(char *err, size_t len) {
    if (chosen) return 0;
    const char *env = getenv("UPIPE_KERNEL");
    if (env && env[0]) return kernel_path_set(env, err, len);
    for (int i = 0; i < NPATHS; i++)
        if (paths[i].runs()) {
            chosen = paths[i].ops;
            break;
        }
    return 0;
}

const attn_ops *attn_ops_current(void) {
    if (!chosen) {
        char err[256];
        if (kernel_path_init(err, sizeof err) != 0) up_die("%s", err);
    }
    return chosen;
}

const char *kernel_path_name(void) {
    return attn_ops_current()->label;
}
