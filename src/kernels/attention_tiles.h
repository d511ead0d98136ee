/* attention_tiles.h — private to the attention kernel: block sizes, the shape of a call, the
 * fp32 exp constants, and the per-block work that attention.c's drivers schedule. Exactly one
 * implementation of the blocks is compiled: attention_avx512.c when the compiler targets
 * AVX-512 (and ATTN_FORCE_BLAS is not defined), else attention_portable.c. */
#ifndef UP_ATTENTION_TILES_H
#define UP_ATTENTION_TILES_H

#include "core/check.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__AVX512F__) && !defined(ATTN_FORCE_BLAS)
#define ATTN_AVX512 1
#else
#define ATTN_AVX512 0
#endif

/* Blocks. B = 128 queries or keys. The AVX-512 path widens the block of the vector dimension
 * to 256: the forward takes 256-query blocks against 128-key blocks, the backward 256-key blocks
 * against 128-query blocks, so each streamed block (K_j, V_j in the forward; Q_i, dO_i, dQ_i in
 * the backward, from L3 or memory at long T) serves twice the work. A task's working set (at
 * HS = 64 about 0.4 MiB) stays inside the 1 MiB L2 of a Zen 4 core. Scratch tile rows are padded
 * by 16 floats so that rows 512 B or 1 KiB apart do not fall into the same few L1 sets.
 * The portable path uses square B blocks. */
enum { ATTN_B = 128 };
#if ATTN_AVX512
enum { ATTN_FQ = 256, ATTN_BKB = 256, ATTN_PAD = 16 };
#else
enum { ATTN_FQ = ATTN_B, ATTN_BKB = ATTN_B, ATTN_PAD = 0 };
#endif
enum { ATTN_LDF = ATTN_FQ + ATTN_PAD, ATTN_LDB = ATTN_BKB + ATTN_PAD };

static inline int attn_min(int a, int b) {
    return a < b ? a : b;
}

static inline int attn_max(int a, int b) {
    return a > b ? a : b;
}

static inline size_t attn_round16(size_t n) {
    return (n + 15) / 16 * 16;
}

/* Shared shape values of one call. */
typedef struct {
    int T, NH, NKV, HS, G;
    size_t ldq, ldk;    // row strides of q/out/dout/dq (NH*HS) and of k/v/dk/dv (NKV*HS)
    float scale;        // 1/sqrt(HS)
    const int32_t *doc; // (T) doc_start, or NULL: one document (the plain causal case)
} attn_shape;

/* Documents. doc[i] is non-decreasing (documents are contiguous), so the first query of a block
 * has the smallest start and the last one the largest. */

/* First key any query i >= i0 can see: doc[i0] (0 without documents). */
static inline int attn_doc_first_key(const attn_shape *sh, int i0) {
    return sh->doc ? sh->doc[i0] : 0;
}

/* Whether some query of [i0, i1) cannot see key j0 for its document (then a tile of queries
 * [i0, i1) and keys from j0 needs the element-wise document mask). */
static inline int attn_doc_cuts(const attn_shape *sh, int i1, int j0) {
    return sh->doc && sh->doc[i1 - 1] > j0;
}

/* End of the queries that can see key j - 1: the first i >= j whose document starts at or after
 * j (doc[i] >= j), T if none; T without documents. Binary search on the non-decreasing doc. */
static inline int attn_doc_query_end(const attn_shape *sh, int j) {
    if (!sh->doc) return sh->T;
    int lo = j, hi = sh->T; // the answer is in [lo, hi]
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (sh->doc[mid] >= j)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* ---- exp ------------------------------------------------------------------------------------- */
/* exp(x) in fp32, Cephes expf scheme: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two parts so
 * r is exact), exp(r) by a degree-7 polynomial, times 2^n. Relative error ~2 ulp. Inputs below
 * ln(FLT_MIN) give 0 (no denormals: a softmax weight 1e-38 below the row maximum is irrelevant),
 * inputs above 88 are clamped (arguments here are scores minus their running maximum or their
 * log-sum-exp, so <= ~0). NaN stays NaN. */
#define ATTN_EXP_LO (-87.3365447f) /* ln(FLT_MIN) */
#define ATTN_EXP_C1 0.693359375f
#define ATTN_EXP_C2 (-2.12194440e-4f)
#define ATTN_EXP_P0 1.9875691500e-4f
#define ATTN_EXP_P1 1.3981999507e-3f
#define ATTN_EXP_P2 8.3334519073e-3f
#define ATTN_EXP_P3 4.1665795894e-2f
#define ATTN_EXP_P4 1.6666665459e-1f
#define ATTN_EXP_P5 5.0000001201e-1f

/* Floats of one thread's scratch (the larger of the forward's and the backward's needs). */
size_t attn_thread_floats(int HS);
/* Forward of one (query head h, query block ib): rows of out and lse. tws: this thread's
 * scratch. */
void attn_fwd_block(float *out, float *lse, const float *q, const float *k, const float *v,
                    const attn_shape *sh, int h, int ib, float *tws);
/* Backward of one (KV head kvh, key block jb): dK_j, dV_j overwritten (owned by the task), dQ
 * accumulated into dqacc (dq itself or a private buffer, (T, NH, HS)). D (NH, T) = rowsum(dO*O). */
void attn_bwd_block(float *dqacc, float *dk, float *dv, const float *dout, const float *q,
                    const float *k, const float *v, const float *lse, const float *D,
                    const attn_shape *sh, int kvh, int jb, float *tws);

#endif
