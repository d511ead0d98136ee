/* attention_avx512.c — the attention blocks (attention_body.h) on AVX-512 F/BW/DQ/VL: 16 lanes,
 * mask registers. Compiled with those flags (CMakeLists.txt) and run only where the CPU has them
 * (kernel_path.c). */
#if defined(__x86_64__)
#include "kernels/vec_avx512.h"

#include "attention_tiles.h"

/* Blocks. The vector dimension is widened to 256: the forward takes 256-query blocks against
 * 128-key blocks, the backward 256-key blocks against 128-query blocks, so each streamed block
 * (K_j, V_j in the forward; Q_i, dO_i, dQ_i in the backward, from L3 or memory at long T) serves
 * twice the work. A task's working set (at HS = 64 about 0.4 MiB) stays inside the 1 MiB L2 of
 * a Zen 4 core. 32 vector registers: register tiles of 8 rows (16 accumulators); Q_i, dO_i and
 * K_j are read in place; masked loads cost what plain ones do. */
enum { ATTN_FQ = ATTN_AVX512_FQ, ATTN_BKB = ATTN_AVX512_BKB, ATTN_PAD = 16 };
enum { ATTN_R = 8, ATTN_RH = 8, ATTN_PACK_ROWS = 0, ATTN_MASK_CHEAP = 1 };

#include "attention_body.h"

const attn_ops attn_ops_avx512 = ATTN_OPS_INIT(ATTN_FQ, ATTN_BKB);

/* The fp32 entries under the names the avx512bf16 path's table takes (attention_avx512bf16.c):
 * aliases of these very functions, so that path's fp32 runs are this code, bit for bit. */
size_t attn_avx512_thread_floats(int HS) __attribute__((alias("attn_thread_floats")));
void attn_avx512_fwd_block(float *out, float *lse, const float *q, const float *k, const float *v,
                           const attn_shape *sh, int h, int ib, float *tws)
    __attribute__((alias("attn_fwd_block")));
void attn_avx512_bwd_block(float *dqacc, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *lse, const float *D,
                           const attn_shape *sh, int kvh, int jb, float *tws)
    __attribute__((alias("attn_bwd_block")));

#endif
