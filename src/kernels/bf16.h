/* bf16.h — fp32 <-> bf16 conversion of arrays (DESIGN.md §5.1), chosen at run time (§8.1).
 *
 * Every path gives the bits of core/dtype.h's bf16_round and bf16_widen (its rules are those of
 * the AVX512_BF16 instruction VCVTNEPS2BF16, Intel SDM), which are the portable path's body.
 *
 * Paths, best first: "avx512bf16" (AVX-512 F, BW, VL and BF16: VCVTNE2PS2BF16), "avx512"
 * (AVX-512 F, BW, DQ, VL: the rounding in integer ops), "avx2", "portable" (plain C, any CPU:
 * the reference twin and the oracle in tests). The kernel path chooses (kernel_path.h): the
 * conversions of the row UPIPE_KERNEL names, or unset the best path this CPU runs (so
 * UPIPE_KERNEL=avx2 measures an AVX2 host's conversions too). Any length n >= 0; src and dst need
 * no alignment and must not overlap. Single-threaded: callers own the threads. */
#ifndef UP_KERNELS_BF16_H
#define UP_KERNELS_BF16_H

#include "core/dtype.h" /* bf16_round, bf16_widen: one element */

#include <stddef.h>
#include <stdint.h>

/* dst[i] = bf16_round(src[i]), i < n. overwrite. */
void bf16_from_f32(const float *src, uint16_t *dst, size_t n);
/* dst[i] = bf16_widen(src[i]), i < n: exact. overwrite. */
void f32_from_bf16(const uint16_t *src, float *dst, size_t n);

/* A conversion path: its name, what the CPU needs for it, and its two functions. */
typedef struct {
    const char *name;
    const char *needs;
    int (*runs)(void); // 1 if this CPU (and OS) runs it
    void (*from_f32)(const float *src, uint16_t *dst, size_t n);
    void (*to_f32)(const uint16_t *src, float *dst, size_t n);
} bf16_ops;

/* The paths this binary has, best first (tests and benchmarks walk them), and the chosen one
 * (the kernel path's choice, made at the first call). */
extern const bf16_ops bf16_portable;
#if defined(__x86_64__) && defined(__GNUC__)
extern const bf16_ops bf16_avx512bf16, bf16_avx512, bf16_avx2;
#endif
int bf16_path_count(void);
const bf16_ops *bf16_path(int i);
const bf16_ops *bf16_path_current(void);

#endif
