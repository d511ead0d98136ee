/* dispatch.c — the CPU probe (dispatch.h): the one reader of __builtin_cpu_supports. */
#include "kernels/dispatch.h"

#include <pthread.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

int kernel_cpu_any(void) {
    return 1;
}
