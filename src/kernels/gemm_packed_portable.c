/* gemm_packed_portable.c — the packed bf16 GEMM's micro-kernel (gemm_packed_body.h) in plain C on
 * vec_portable.h's 8-float arrays: the twin of the vector paths, run on the "portable" kernel path.
 * A 4 x 16 tile, cloned per CPU (dispatch.h) so that fmaf is an instruction where the CPU has one
 * (on the baseline it is libm's, correctly rounded too, hence the same bits). */
#include "kernels/dispatch.h"
#include "kernels/vec_portable.h"

enum { GEMM_MR = 4 };
#define GEMM_ATTR KERNEL_CLONES
#include "kernels/gemm_packed_body.h"

/* kc as on the other paths, so that the bits are theirs; mc and nc not measured (no CPU here runs
 * this path for speed). */
const gemm_packed_ops gemm_packed_portable = GEMM_PACKED_INIT(128, 512, 4096);
