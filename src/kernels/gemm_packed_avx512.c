/* gemm_packed_avx512.c — the packed bf16 GEMM's micro-kernel (gemm_packed_body.h) on AVX-512.
 * Compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl (CMakeLists.txt), run only on the
 * "avx512" kernel path. A 12 x 32 tile: 24 zmm accumulators, two B vectors and one broadcast of
 * the 32 registers (BLIS's SkylakeX sgemm tile, transposed to row-major C). */
#if defined(__x86_64__)
#include "kernels/vec_avx512.h"

enum { GEMM_MR = 12 };
#define GEMM_ATTR
#include "gemm_packed_body.h"

/* Blocks: BLIS's SkylakeX sgemm ones but kc 512 (384 measured slower here): K = 512, the
 * forward's depth, in one block, so C is written once; the (mc, kc) A block of 960 KiB sits in
 * L2, the (kc, nr) B panel of 64 KiB streams from L2 too; nc is cut to fit the workspace. */
const gemm_packed_ops gemm_packed_avx512 = GEMM_PACKED_INIT(480, 512, 3072);
#endif
