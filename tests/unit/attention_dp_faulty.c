/* attention_dp_faulty.c — for test_attention_bf16 only: a copy of the avx512bf16 attention path
 * (attention_avx512bf16.c, the same source) compiled with its deliberate faults
 * (ATTN_DP_FAULTS, attention_dp_body.h), as the table attn_ops_avx512bf16_faulty; attn_dp_fault
 * chooses the fault (0: none, the path's own code). */
#if defined(__x86_64__)
#define ATTN_DP_FAULTS 1
#define ATTN_DP_OPS attn_ops_avx512bf16_faulty
int attn_dp_fault;
#include "kernels/attention_avx512bf16.c"
#endif
