/* attention_avx2.c — the attention blocks (attention_body.h) on AVX2 + FMA: 8 lanes, masks as
 * vectors. Compiled with -mavx2 -mfma (CMakeLists.txt) and run only where the CPU has them
 * (kernel_path.c). Every sum runs in the order of the AVX-512 path, so the results are that path's
 * bits: in the forward (same blocks) always, in the backward wherever each thread owns whole KV
 * heads (its key blocks are smaller, but every dQ, dK, dV element still adds the same terms in the
 * same order); test_attention checks both. */
#if defined(__x86_64__)
#include "kernels/vec_avx2.h"

/* Blocks. The forward widens its query block to 256 as the AVX-512 path does (each streamed
 * K_j, V_j block serves twice the work); the backward keeps square (128, 128) tiles: its task
 * holds four (HS, BKB) or (B, BKB) panels and tiles plus packed blocks, about 0.55 MiB at
 * HS = 64 with 256 keys against 0.3 MiB with 128, and the L2 of AVX2-only cores is 256-512 KiB
 * (on a 1 MiB L2 both measure the same). The forward's 0.3 MiB fits a 512 KiB L2.
 * 16 vector registers: attn_kq keeps 6 rows (12 accumulators), attn_kh 4 (a divisor of the
 * 16-key chunks, see attn_bwd_qblock). An 8-wide fma does half the work of an AVX-512 one per
 * cache line it reads, so the backward packs the blocks its products walk many times
 * (attn_pack_rows); maskload is slower than a load, so only partial chunks use it. */
enum { ATTN_FQ = 256, ATTN_BKB = 128, ATTN_PAD = 16 };
enum { ATTN_R = 6, ATTN_RH = 4, ATTN_PACK_ROWS = 1, ATTN_MASK_CHEAP = 0 };

#include "attention_body.h"

const attn_ops attn_ops_avx2 = ATTN_OPS_INIT(ATTN_FQ, ATTN_BKB);

#endif
