/* kernel_path.h — private to src/kernels: the one table of kernel paths and the choice made from
 * it (kernel_path.c; DESIGN.md §8.1). Public face: kernel_path_* in kernels.h.
 *
 * A row is what every kernel family runs when UPIPE_KERNEL names it: the attention tiles, the
 * packed GEMM's micro-kernel and the bf16 conversions. Rows best first; UPIPE_KERNEL unset takes
 * the first row this CPU runs and that wins where the row has a test of speed (the avx512bf16
 * row: VDPBF16PS measured faster than FMA, kernel_dot_ratio). Two explicit "best available"
 * rules:
 *  - bf16 conversions: UPIPE_KERNEL names a row: the row's conversions. Unset: the best
 *    conversions this CPU runs (bf16.h's list, best first), which on an AVX512_BF16 CPU is
 *    "avx512bf16" (VCVTNEPS2BF16), a variant no row names. Every variant gives the same bits.
 *  - GEMM route of the bf16 products (gemm_bf16.c chooses it): the first route this CPU runs
 *    ("packed", on every row); tests and benchmarks switch it (gemm_bf16_path_set).
 * Two families follow the CPU whatever UPIPE_KERNEL says, and the choice only reports them: the
 * element-wise loops' KERNEL_CLONES (the loader picks the clone, dispatch.h) and the OpenBLAS
 * core (its own CPU check, and blas_check_core, kernels.h). */
#ifndef UP_KERNELS_KERNEL_PATH_H
#define UP_KERNELS_KERNEL_PATH_H

#include "kernels/attention_tiles.h"
#include "kernels/bf16.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_packed.h"

typedef struct {
    const char *name;            /* the UPIPE_KERNEL value */
    const char *label;           /* for messages and headers ("avx2+fma") */
    const char *needs;           /* what the CPU needs, for the refusal */
    int (*runs)(void);           /* 1 if this CPU runs it (a test of kernel_cpu_get) */
    int (*wins)(void);           /* NULL, or 1 if it is faster here than the rows after it:
                                    the default choice skips a row that runs but does not win */
    const attn_ops *attn;        /* attention tiles */
    const gemm_packed_ops *gemm; /* the packed GEMM's micro-kernel */
    const bf16_ops *bf16;        /* conversions when UPIPE_KERNEL names the row */
} kernel_row;

/* The choice: a row and what the rules above made of it. */
typedef struct {
    const kernel_row *row;
    const bf16_ops *bf16;
    int forced; /* UPIPE_KERNEL (or kernel_path_set) named the row */
} kernel_choice;

/* The choice, made at the first call (any thread) from UPIPE_KERNEL and the probe; a refused
 * UPIPE_KERNEL stops the process with its message (front ends call kernel_path_init first). */
const kernel_choice *kernel_choice_get(void);

#endif
