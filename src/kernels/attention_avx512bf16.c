/* attention_avx512bf16.c — the attention blocks with bf16 operands on AVX512_BF16's dot product
 * (VDPBF16PS, attention_dp_body.h over vec_avx512bf16.h); its fp32 blocks are the avx512 path's
 * (attention_avx512.c), the same functions. Compiled with AVX-512 F/BW/DQ/VL and BF16
 * (CMakeLists.txt) and run only where the CPU has them (kernel_path.c), by default only where
 * VDPBF16PS retires more multiply-adds per second than FMA (kernel_dot_ratio). */
#if defined(__x86_64__)
#include "kernels/vec_avx512bf16.h"

#include "attention_tiles.h"

/* Blocks of the bf16 entries: 512-query forward blocks, 512-key backward blocks, 128 across
 * (the fp32 entries keep the avx512 path's 256). With products twice as fast, what a task costs
 * per streamed block weighs twice as much: forward K_j and V_j packed in pairs, backward Q_i and
 * dO_i packed and dQ_i moved in and out, each from L3 or memory at long T. Twice the block halves
 * those (DESIGN.md §5.1 has the measurement); a backward task's working set at HS = 64 is then
 * about 1 MiB (attn_dp_thread_floats), the L2 of a Zen 4 or 5 core. Register tiles of 8 rows (16
 * accumulators of the 32 registers). */
enum { ATTN_FQ = 512, ATTN_BKB = 512, ATTN_PAD = 16 };
enum { ATTN_R = 8 };

#include "attention_dp_body.h"

#ifndef ATTN_DP_OPS
#define ATTN_DP_OPS attn_ops_avx512bf16 // (test_attention_bf16's faulty copy renames it)
#endif

const attn_ops ATTN_DP_OPS = {.fq = ATTN_AVX512_FQ,
                              .bkb = ATTN_AVX512_BKB,
                              .thread_floats = attn_avx512_thread_floats,
                              .fwd_block = attn_avx512_fwd_block,
                              .bwd_block = attn_avx512_bwd_block,
                              .fq_bf16 = ATTN_FQ,
                              .bkb_bf16 = ATTN_BKB,
                              .thread_floats_bf16 = attn_dp_thread_floats,
                              .fwd_block_bf16 = attn_dp_fwd_block,
                              .bwd_block_bf16 = attn_dp_bwd_block};

#endif
