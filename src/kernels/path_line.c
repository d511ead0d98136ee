/* path_line.c — kernel_path_name (kernels.h): the header line of what every kernel family runs,
 * read from the choice (kernel_path.h), the bf16 GEMM's route, the OpenBLAS core and the fp32
 * product's library. */
#include "kernels/kernel_path.h"
#include "kernels/kernels.h"

#include "kernels/gemm_bf16.h"

#include <stdio.h>

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
    gemm_bf16_route_name(route_name, sizeof route_name);
    if (kernel_cpu_get()->avx512bf16)
        snprintf(dot, sizeof dot, " (vdpbf16ps %.2fx fma%s)", kernel_dot_ratio(),
                 k->forced      ? ""
                 : k->row->wins ? ": used"
                                : ": not used");
    snprintf(line, sizeof line,
             "%s%s; attention %s, gemm %s, bf16 %s%s, bf16 gemm %s, element-wise %s (CPU), "
             "openblas %s (%s), fp32 gemm %s",
             k->row->label, dot, k->row->label, k->row->name, k->bf16->name,
             k->forced ? "" : " (CPU best)", route_name, clones_name(kernel_cpu_get()->level),
             core ? core : "unknown", blas_core_reason(), sgemm_route());
    return line;
}
