/* gemm_packed_avx2.c — the packed bf16 GEMM's micro-kernel (gemm_packed_body.h) on AVX2 + FMA.
 * Compiled with -mavx2 -mfma (CMakeLists.txt), run only on the "avx2" kernel path. The 6 x 16
 * tile of BLIS's Haswell sgemm: 12 ymm accumulators, two B vectors and one broadcast of the 16
 * registers. */
#if defined(__x86_64__)
#include "kernels/vec_avx2.h"

enum { GEMM_MR = 6 };
#define GEMM_ATTR
#include "gemm_packed_body.h"

/* Blocks: BLIS's Haswell sgemm ones but kc 512 (its 256 measured slower here): K = 512, the
 * forward's depth, in one block, so C is written once; a (kc, nr) B panel of 32 KiB in L1, the
 * (mc, kc) A block of 336 KiB in L2; nc is cut to fit the workspace (gemm_packed.c). */
const gemm_packed_ops gemm_packed_avx2 = GEMM_PACKED_INIT(168, 512, 4080);
#endif
