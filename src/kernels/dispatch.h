/* dispatch.h — private to src/kernels: the one CPU probe (dispatch.c, a leaf: it calls nothing of
 * upipe), and plain C loops compiled for the CPU at hand. The table of kernel paths that the probe
 * feeds is kernel_path.h (DESIGN.md §8.1).
 *
 * The binary targets baseline x86-64 (one binary runs on every x86-64 host). KERNEL_CLONES before
 * a function definition has GCC compile it three times, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2,
 * FMA) and the baseline, and pick the CPU's clone when the program loads (target_clones, an
 * ifunc; the OpenMP bodies outlined from the function are cloned with it). The elementwise
 * kernels put it on their hot loops: `omp simd` reductions and libmvec's vector expf run as wide
 * as the CPU allows. The clone follows the CPU, not UPIPE_KERNEL (the loader picks it before
 * main; the kernels line names it, kernel_path_name). Empty off x86-64 and with other compilers:
 * the loops are then compiled for the target as given. */
#ifndef UP_KERNELS_DISPATCH_H
#define UP_KERNELS_DISPATCH_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define KERNEL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KERNEL_CLONES
#endif

/* What this CPU runs, as __builtin_cpu_supports reports it (an instruction set counts only where
 * the OS saves its registers too): read once, here and nowhere else, for every choice of a path
 * (kernel_path.h, the bf16 conversions, the OpenBLAS core check). All 0 off x86-64. */
typedef struct {
    int avx2, fma;
    int avx512f, avx512bw, avx512dq, avx512vl, avx512bf16;
    int amx_bf16; /* AMX tiles with BF16 (CPUID 7.0 EDX bits 22 and 24), and the kernel granted
                     this process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM) */
    int level;    /* the x86-64 level whose KERNEL_CLONES clone runs: 4, 3, or 1 (the baseline) */
} kernel_cpu;

/* The probe (made at the first call; any thread). */
const kernel_cpu *kernel_cpu_get(void);

/* 1: the CPU test of the entries that run anywhere (the portable row, conversions, routes). */
int kernel_cpu_any(void);

/* AVX-512 F, BW, DQ and VL: what the avx512 conversions and the OpenBLAS SkylakeX core need. */
static inline int kernel_cpu_avx512(const kernel_cpu *c) {
    return c->avx512f && c->avx512bw && c->avx512dq && c->avx512vl;
}

#endif
