/* attn_ws — the attention kernels' fp32 workspace for a shape, in floats, fp32 and bf16 operands
 * (kernels.h), as a run with the same kernel path (UPIPE_KERNEL) and thread count sizes it: the
 * plan checks of tests/scripts/dtype.sh take the kernel workspace from here, since it depends on
 * the path's tiles and the threads rather than on the config alone.
 *
 *   attn_ws T NH NKV HS THREADS     prints "F32_FLOATS BF16_FLOATS" */
#include "kernels/kernels.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: attn_ws T NH NKV HS THREADS\n");
        return 2;
    }
    int v[5];
    for (int i = 0; i < 5; i++)
        v[i] = atoi(argv[i + 1]);
    char err[256];
    if (kernel_path_init(err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    omp_set_num_threads(v[4]);
    printf("%zu %zu\n", attention_workspace_floats(v[0], v[1], v[2], v[3]),
           attention_workspace_floats_bf16(v[0], v[1], v[2], v[3]));
    return 0;
}
