/* dispatch.h — private to src/kernels: plain C loops compiled for the CPU at hand.
 *
 * The binary targets baseline x86-64 (no -march=native: one binary runs on every x86-64 host).
 * KERNEL_CLONES before a function definition has GCC compile it three times, for x86-64-v4
 * (AVX-512), x86-64-v3 (AVX2, FMA) and the baseline, and pick the CPU's clone when the program
 * loads (target_clones, an ifunc; the OpenMP bodies outlined from the function are cloned with
 * it). The elementwise kernels put it on their hot loops: `omp simd` reductions and libmvec's
 * vector expf run as wide as the CPU allows, and on an AVX-512 host they are the code (hence the
 * bits) of the former -march=native build. The clone follows the CPU, not UPIPE_KERNEL, which
 * chooses the attention tiles only (kernels.h). Empty off x86-64 and with other compilers: the
 * loops are then compiled for the target as given. */
#ifndef UP_KERNELS_DISPATCH_H
#define UP_KERNELS_DISPATCH_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define KERNEL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KERNEL_CLONES
#endif

#endif
