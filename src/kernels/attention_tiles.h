/* attention_tiles.h — private to the attention kernel: the shape of a call, the fp32 exp
 * constants, helpers shared by the tile paths, and the table through which attention.c's drivers
 * run one path's per-block work. Four paths implement the blocks, each in its own unit compiled
 * with its own instruction-set flags (CMakeLists.txt): attention_avx512.c, attention_avx2.c
 * (x86-64 only; one body, attention_body.h, over their primitives header),
 * attention_avx512bf16.c (x86-64; the avx512 fp32 blocks, and bf16 blocks on VDPBF16PS,
 * attention_dp_body.h) and attention_portable.c (any CPU; sgemm on square tiles). kernel_path.c
 * chooses one at run time. */
#ifndef UP_ATTENTION_TILES_H
#define UP_ATTENTION_TILES_H

#include "core/check.h"
#include "kernels/bf16.h"
#include "kernels/vec.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* B = 128 queries or keys: the tile edge of every path. A path may widen the block of the
 * dimension its vectors run along (attn_ops.fq, attn_ops.bkb), see its file. */
enum { ATTN_B = 128 };

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
    size_t ldq, ldk;      // row strides of q/out/dout/dq (NH*HS) and of k/v/dk/dv (NKV*HS)
    float scale;          // 1/sqrt(HS)
    const int32_t *doc;   // (T) doc_start, or NULL: one document (the plain causal case)
    const bf16_ops *bf16; // the kernel path's conversions (bf16_path_current): the bf16 blocks
                          // round and widen through it
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

/* exp: the constants (ATTN_EXP_*) are in vec.h, with the vector primitives. */

/* Transposed panel dst (HS, width) = mul * src rows 0 .. n-1 (each HS floats, strided by ld),
 * zero in columns n .. width-1. Reads run down the columns of src (lines reused for 16 d's from
 * L1) so that the writes are contiguous vectors. */
static inline void attn_pack_t(float *dst, int width, const float *src, size_t ld, int n, int HS,
                               float mul) {
    for (int d = 0; d < HS; d++) {
        float *drow = dst + (size_t)d * width;
        for (int r = 0; r < n; r++)
            drow[r] = src[(size_t)r * ld + d] * mul;
        for (int r = n; r < width; r++)
            drow[r] = 0.0f;
    }
}

/* ---- bf16 operands (attention_forward_bf16, attention_backward_bf16) --------------------------
 * The widening paths (avx512, avx2, portable; the avx512bf16 path's products read bf16 pairs
 * instead, attention_dp_body.h) run their fp32 block code on fp32 copies of their bf16 operands,
 * made per tile in the thread's scratch: the packed panels widen as they pack, the streamed blocks
 * (K_j, V_j; Q_i, dO_i) are widened into contiguous (rows, HS) tiles once per tile, and the
 * outputs (out; dK_j, dV_j) accumulate in fp32 tiles that are rounded to bf16 once, at the end
 * (bf16.h's rounding). Widening is exact, so every fp32 sum is that of the fp32 kernel on the
 * widened inputs, term for term and in the same order: the bf16 results are bf16_round of the
 * fp32 kernel's results on those inputs, bit for bit (test_attention checks it). */

/* attn_pack_t on bf16 rows: the same values as attn_pack_t on the widened rows. */
static inline void attn_pack_t_bf16(float *dst, int width, const uint16_t *src, size_t ld, int n,
                                    int HS, float mul) {
    for (int d = 0; d < HS; d++) {
        float *drow = dst + (size_t)d * width;
        for (int r = 0; r < n; r++)
            drow[r] = bf16_widen(src[(size_t)r * ld + d]) * mul;
        for (int r = n; r < width; r++)
            drow[r] = 0.0f;
    }
}

/* Rows 0 .. n-1 of src (HS bf16 each, strided by ld) widened by cv into dst (n, HS) contiguous. */
static inline void attn_widen_rows(float *dst, const uint16_t *src, size_t ld, int n, int HS,
                                   const bf16_ops *cv) {
    for (int r = 0; r < n; r++)
        cv->to_f32(src + (size_t)r * ld, dst + (size_t)r * HS, (size_t)HS);
}

/* Rows 0 .. n-1 of src (n, HS) contiguous rounded by cv into dst (HS bf16 each, strided by ld). */
static inline void attn_round_rows(uint16_t *dst, size_t ld, const float *src, int n, int HS,
                                   const bf16_ops *cv) {
    for (int r = 0; r < n; r++)
        cv->from_f32(src + (size_t)r * HS, dst + (size_t)r * ld, (size_t)HS);
}

/* The bf16 backward's dQ accumulator (attention.c): fp32 rows, either a private fp32 buffer
 * (f, the second backward scheme's threads 1..) or split exactly in two uint16 halves, the top
 * 16 bits in dq itself (the bf16 output, free until the end) and the low 16 in the workspace
 * (hi, lo): 2 bytes of workspace per element instead of 4, the same fp32 values. A block moves
 * its dQ_i rows into an fp32 tile, adds to them there and moves them back. */
typedef struct {
    float *f;
    uint16_t *hi, *lo;
} attn_dq;

/* Rows 0 .. n-1 of dQ at element offset off (rows strided by ld) into dst (n, HS). */
static inline void attn_dq_get(float *dst, const attn_dq *q, size_t off, size_t ld, int n, int HS) {
    for (int r = 0; r < n; r++) {
        const size_t o = off + (size_t)r * ld;
        float *d = dst + (size_t)r * HS;
        if (q->f) {
            memcpy(d, q->f + o, (size_t)HS * sizeof(float));
            continue;
        }
        const uint16_t *hi = q->hi + o, *lo = q->lo + o;
        for (int e = 0; e < HS; e++) {
            const uint32_t u = (uint32_t)hi[e] << 16 | lo[e];
            memcpy(d + e, &u, sizeof u);
        }
    }
}

/* The reverse: src (n, HS) into rows 0 .. n-1 of dQ at off. */
static inline void attn_dq_put(const attn_dq *q, size_t off, size_t ld, const float *src, int n,
                               int HS) {
    for (int r = 0; r < n; r++) {
        const size_t o = off + (size_t)r * ld;
        const float *s = src + (size_t)r * HS;
        if (q->f) {
            memcpy(q->f + o, s, (size_t)HS * sizeof(float));
            continue;
        }
        uint16_t *hi = q->hi + o, *lo = q->lo + o;
        for (int e = 0; e < HS; e++) {
            uint32_t u;
            memcpy(&u, s + e, sizeof u);
            hi[e] = (uint16_t)(u >> 16);
            lo[e] = (uint16_t)u;
        }
    }
}

/* Prefetch n rows of HS bf16 (strided by ld) into L2. */
static inline void attn_prefetch_rows_bf16(const uint16_t *a, int n, int HS, size_t ld) {
    for (int r = 0; r < n; r++)
        for (int d = 0; d < HS; d += 32)
            __builtin_prefetch(a + (size_t)r * ld + d, 0, 2);
}

/* Prefetch n rows of HS floats (strided by ld) into L2 (prefetcht1 on x86). */
static inline void attn_prefetch_rows(const float *a, int n, int HS, size_t ld) {
    for (int r = 0; r < n; r++)
        for (int d = 0; d < HS; d += 16)
            __builtin_prefetch(a + (size_t)r * ld + d, 0, 2);
}

/* One path: its block sizes and its per-block work (same algorithm and results up to fp32
 * rounding; attention.c schedules the blocks and sizes the workspace from these fields).
 *   fq             queries per forward task (query block)
 *   bkb            keys per backward task (key block); the other dimension of a tile is ATTN_B
 *                  (fq_bf16, bkb_bf16: the same for the bf16 entries)
 *   thread_floats  floats of one thread's scratch (the larger of the forward's and the
 *                  backward's needs; exact, so that the guard test can catch an overrun)
 *   fwd_block      forward of one (query head h, query block ib): rows of out and lse.
 *                  tws: this thread's scratch.
 *   bwd_block      backward of one (KV head kvh, key block jb): dK_j, dV_j overwritten (owned by
 *                  the task), dQ accumulated into dqacc (dq itself or a private buffer,
 *                  (T, NH, HS)). D (NH, T) = rowsum(dO * O). */
typedef struct {
    int fq, bkb; /* (the path's name and label are its row's in kernel_path.c) */
    size_t (*thread_floats)(int HS);
    void (*fwd_block)(float *out, float *lse, const float *q, const float *k, const float *v,
                      const attn_shape *sh, int h, int ib, float *tws);
    void (*bwd_block)(float *dqacc, float *dk, float *dv, const float *dout, const float *q,
                      const float *k, const float *v, const float *lse, const float *D,
                      const attn_shape *sh, int kvh, int jb, float *tws);
    /* The same on bf16 operands (see above), with their own block sizes: scratch of
     * thread_floats_bf16(HS) floats; dQ accumulates in fp32 (attn_dq), lse and D are fp32. */
    int fq_bf16, bkb_bf16;
    size_t (*thread_floats_bf16)(int HS);
    void (*fwd_block_bf16)(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, const attn_shape *sh, int h, int ib, float *tws);
    void (*bwd_block_bf16)(const attn_dq *dqacc, uint16_t *dk, uint16_t *dv, const uint16_t *dout,
                           const uint16_t *q, const uint16_t *k, const uint16_t *v,
                           const float *lse, const float *D, const attn_shape *sh, int kvh, int jb,
                           float *tws);
} attn_ops;

/* A path's entry points from its static attn_fwd_impl and attn_bwd_impl (the per-block bodies
 * with an fp32 / bf16 switch bf, always inlined, so each entry is compiled for its element type),
 * each entry with the function attributes ATTR (the portable path's KERNEL_CLONES), and its
 * table: `const attn_ops attn_ops_<isa> = ATTN_OPS_INIT(fq, bkb);` (the same blocks for both
 * types). */
#define ATTN_DEFINE_BLOCKS(ATTR)                                                                   \
    ATTR static void attn_fwd_block(float *out, float *lse, const float *q, const float *k,        \
                                    const float *v, const attn_shape *sh, int h, int ib,           \
                                    float *tws) {                                                  \
        attn_fwd_impl(out, lse, q, k, v, sh, h, ib, tws, 0);                                       \
    }                                                                                              \
    ATTR static void attn_fwd_block_bf16(uint16_t *out, float *lse, const uint16_t *q,             \
                                         const uint16_t *k, const uint16_t *v,                     \
                                         const attn_shape *sh, int h, int ib, float *tws) {        \
        attn_fwd_impl(out, lse, q, k, v, sh, h, ib, tws, 1);                                       \
    }                                                                                              \
    ATTR static void attn_bwd_block(float *dqacc, float *dk, float *dv, const float *dout,         \
                                    const float *q, const float *k, const float *v,                \
                                    const float *lse, const float *D, const attn_shape *sh,        \
                                    int kvh, int jb, float *tws) {                                 \
        attn_bwd_impl(dqacc, dk, dv, dout, q, k, v, lse, D, sh, kvh, jb, tws, 0);                  \
    }                                                                                              \
    ATTR static void attn_bwd_block_bf16(                                                          \
        const attn_dq *dqacc, uint16_t *dk, uint16_t *dv, const uint16_t *dout, const uint16_t *q, \
        const uint16_t *k, const uint16_t *v, const float *lse, const float *D,                    \
        const attn_shape *sh, int kvh, int jb, float *tws) {                                       \
        attn_bwd_impl((void *)dqacc, dk, dv, dout, q, k, v, lse, D, sh, kvh, jb, tws, 1);          \
    }

#define ATTN_OPS_INIT(FQ, BKB)                                                                     \
    {                                                                                              \
        .fq = FQ, .bkb = BKB, .thread_floats = attn_thread_floats, .fwd_block = attn_fwd_block,    \
        .bwd_block = attn_bwd_block, .fq_bf16 = FQ, .bkb_bf16 = BKB,                               \
        .thread_floats_bf16 = attn_thread_floats_bf16, .fwd_block_bf16 = attn_fwd_block_bf16,      \
        .bwd_block_bf16 = attn_bwd_block_bf16                                                      \
    }

extern const attn_ops attn_ops_portable;
#if defined(__x86_64__)
extern const attn_ops attn_ops_avx512, attn_ops_avx2, attn_ops_avx512bf16;

/* The avx512 path's blocks and fp32 entries (attention_avx512.c), which the avx512bf16 path's
 * table takes as its own fp32 entries. */
enum { ATTN_AVX512_FQ = 256, ATTN_AVX512_BKB = 256 };
size_t attn_avx512_thread_floats(int HS);
void attn_avx512_fwd_block(float *out, float *lse, const float *q, const float *k, const float *v,
                           const attn_shape *sh, int h, int ib, float *tws);
void attn_avx512_bwd_block(float *dqacc, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *lse, const float *D,
                           const attn_shape *sh, int kvh, int jb, float *tws);
#endif

/* Tests only: the drivers of attention.c run `ops` instead of the chosen path's until called
 * with NULL (test_attention_bf16 runs a deliberately broken copy of a path through them). Call
 * between attention calls, from one thread; size the workspace after it. */
void attention_ops_override(const attn_ops *ops);

/* The path in use (kernel_path.c): chosen at the first call, see kernel_path_init in kernels.h. */
const attn_ops *attn_ops_current(void);

#endif
