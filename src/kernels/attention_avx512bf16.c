/* attention_avx512bf16.c — the attention blocks with bf16 operands on AVX512_BF16's dot product
 * (VDPBF16PS, attention_dp_body.h over vec_avx512bf16.h); its fp32 blocks are the avx512 path's
 * (attention_avx512.c), the same functions. Compiled with AVX-512 F/BW/DQ/VL and BF16
 * (CMakeLists.txt) and run only where the CPU has them (dispatch.c), by default only where
 * VDPBF16PS retires more multiply-adds per second than FMA (kernel_dot_ratio). */
#if defined(__x86_64__)
#include "kernels/vec_avx512bf16.h"

#include "attention_tiles.h"

/* Blocks: the avx512 path's (one table holds one pair of sizes, and the fp32 entries are that
 * path's): 256-query forward blocks, 256-key backward blocks, 128 across. A backward task's
 * working set at HS = 64 is about 0.56 MiB (attn_dp_thread_floats), inside a 1 MiB L2.
 * Register tiles of 8 rows (16 accumulators of the 32 registers). */
enum { ATTN_FQ = ATTN_AVX512_FQ, ATTN_BKB = ATTN_AVX512_BKB, ATTN_PAD = 16 };
enum { ATTN_R = 8 };

#include "attention_dp_body.h"

#ifndef ATTN_DP_OPS
#define ATTN_DP_OPS attn_ops_avx512bf16 // (test_attention_bf16's faulty copy renames it)
#endif

const attn_ops ATTN_DP_OPS = {.fq = ATTN_FQ,
                              .bkb = ATTN_BKB,
                              .thread_floats = attn_avx512_thread_floats,
                              .fwd_block = attn_avx512_fwd_block,
                              .bwd_block = attn_avx512_bwd_block,
                              .thread_floats_bf16 = attn_dp_thread_floats,
                              .fwd_block_bf16 = attn_dp_fwd_block,
                              .bwd_block_bf16 = attn_dp_bwd_block};

#endif
