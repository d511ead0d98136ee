/* attention.c — causal GQA attention, FlashAttention-2 style, fp32 CPU (contract: kernels.h).
 *
 * The algorithm, on blocks of queries (i) and keys (j) (sizes below):
 *
 * Forward, one task per (query head h, query block i):
 *     for the key blocks j from the one holding doc_start of the block's first query up to the
 *     block's last query (blocks above the diagonal, and wholly before the block's documents,
 *     skipped):
 *         S = scale * Q_i K_j^T                     masked on the diagonal and across documents
 *         m_new = max(m, rowmax S); P = exp(S - m_new); l = l * exp(m - m_new) + rowsum P
 *         O_i = O_i * exp(m - m_new) + P V_j
 *     out_i = O_i / l;  lse_i = m + log l
 *
 * Backward, one task per (KV head, key block j) in FlashAttention-2 order (K_j, V_j stay hot;
 * dK_j, dV_j belong to the task and sum over the G query heads of the group, which is GQA's
 * gradient):
 *     for the G query heads h of the group, for the query blocks i from the diagonal up to the
 *     end of the document of the block's last key (no later query sees these keys):
 *         P = exp(scale * Q_i K_j^T - lse_i)   (masked)          recompute of the forward
 *         dV_j += P^T dO_i
 *         dP = dO_i V_j^T
 *         dS = P * (dP - D_i),   D = rowsum(dO * O)              once per (h, t), in the workspace
 *         dK_j += scale * dS^T Q_i
 *         dQ_i += scale * dS K_j                                 the only output shared by tasks
 * dQ_i gets contributions from every key block, so tasks on different threads would race on it.
 * Two race-free schemes, chosen by the thread count nt the workspace is sized for:
 *   - NKV % nt == 0: each thread owns whole KV heads, hence the dQ rows of their G query heads;
 *     no extra memory, and the load is balanced (every KV head carries the same work).
 *   - otherwise: tasks (KV head, key block) are dealt to threads by a fixed greedy rule (longest
 *     first, to the least loaded thread); thread 0 accumulates dQ in dq itself, threads 1..nt-1 in
 *     private (T, NH, HS) buffers of the workspace, added to dq at the end in thread order.
 * Both are deterministic: the results do not depend on timing.
 *
 * Documents (doc_start): query i sees keys doc_start[i] .. i. Work ~ sum of the documents'
 * squares: the block ranges above skip whole tiles outside every document; a tile that a
 * document boundary cuts is masked element-wise (key j hidden from query i when j <
 * doc_start[i], as the diagonal hides j > i): scores -inf / probabilities 0. A query row with no
 * visible key in a tile leaves its softmax state alone; every query sees itself, so lse is
 * finite. Without documents (NULL) the code and the order of every sum are those of the plain
 * causal kernel, so results are bit-identical to it.
 *
 * Four implementations of the per-block work ("paths", one algorithm; DESIGN.md §8.1), reached
 * through the attn_ops table of attention_tiles.h that kernel_path.c chooses at run time:
 *   - avx512: our own register-blocked micro-kernels (attn_kq, attn_kh). The vectors run along
 *     the dimension a task keeps fixed: in the forward 16 queries fill a vector (scores are kept
 *     transposed, S^T (keys, queries)), so the online softmax (max, exp, sums, rescale) needs no
 *     horizontal reductions and the causal mask is a lane mask; in the backward 16 keys do. The
 *     fixed operand is packed transposed once per task (scale * Q_i^T, or scale * K_j^T and
 *     V_j^T), the streamed ones are read in place: faster than cblas_sgemm on the same tiles
 *     with its packing copies (docs/BENCHMARKS.md).
 *   - avx2: the same on 8-wide vectors, with the same sums in the same order. Both are one body,
 *     attention_body.h, over the primitives of vec.h (vec_avx512.h, vec_avx2.h).
 *   - portable: cblas_sgemm on (B, B) tiles (single-threaded inside our OpenMP region with
 *     Debian's OpenMP OpenBLAS) and plain loops that gcc vectorises; any CPU.
 *   - avx512bf16: fp32 the avx512 path's functions; bf16 the same blocks with the products on
 *     AVX512_BF16's dot product (attention_dp_body.h: operands in bf16 pairs, P and dS rounded
 *     to bf16 for the second products, statistics in fp32).
 * The schedule below reads a path's block sizes (fq queries per forward task, bkb keys per
 * backward task; each type its own) and scratch size from its table.
 *
 * Workspace (floats, attention_workspace_floats): per thread the path's scratch (avx512: two
 * (HS, 256) panels and two (128, 256) tiles, 0.4 MiB at HS = 64); D (NH, T); and, in the second
 * backward scheme, (nt-1) dQ buffers of T*NH*HS. Nothing grows with T*T. It is sized with
 * omp_get_max_threads() and the chosen path, and the kernels use at most that many threads: do
 * not raise the thread count or change the path between attention_workspace_floats and the
 * calls. */
#include "kernels/kernels.h"

#include "core/watchdog.h"

#include "attention_tiles.h"
#include "dispatch.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

static void (*g_progress)(void *);
static void *g_progress_arg;

void attention_set_progress(void (*fn)(void *), void *arg) {
    g_progress = fn;
    g_progress_arg = arg;
}

/* The progress hook, on thread 0 only (the main thread: MPI is initialised FUNNELED). */
static inline void attn_progress(int tid) {
    if (tid != 0) return;
    watchdog_tick(); /* a long attention is progress (core/watchdog.h) */
    if (g_progress) g_progress(g_progress_arg);
}

static const attn_ops *g_ops_override; // attention_ops_override (tests only)

void attention_ops_override(const attn_ops *ops) {
    g_ops_override = ops;
}

/* The path's table: the chosen one (kernel_path.c) unless a test overrides it. */
static const attn_ops *attn_ops_in_use(void) {
    return g_ops_override ? g_ops_override : attn_ops_current();
}

/* Second backward scheme (private dQ buffers) when the KV heads cannot be split evenly. */
static int attn_uses_dq_buffers(int NKV, int nt) {
    return nt > 1 && NKV % nt != 0;
}

/* ---- element types ----------------------------------------------------------------------------
 * One driver of each kind (workspace, forward, backward, greedy schedule) serves both element
 * types of q, k, v, out, dout, dq, dk, dv: bf = 0 fp32 (attention_forward, attention_backward),
 * bf = 1 bf16 (the _bf16 functions). A path's table has a block function per type; these hooks
 * pick it. The bf16 blocks of the widening paths widen their operands per tile and round their
 * outputs once (attention_tiles.h), the dot-product path's read them as bf16 pairs and round P
 * and dS too (attention_dp_body.h); what is summed stays fp32 here too: D is attn_row_dots on the
 * widened rows of out and dout (the fp32 kernel's D on those values, bit for bit), and dQ
 * accumulates in fp32 (every key block adds to it), rounded into dq once, after the last addition.
 * The fp32 dQ of the owner scheme (and of thread 0 in the second) is stored split (attn_dq,
 * attention_tiles.h): its top 16 bits in dq itself, which is free until the end, its low 16 in
 * the workspace, so it costs 2 bytes per element beyond dq rather than 4; the private buffers of
 * threads 1.. stay fp32 as in the fp32 kernel. Schedule, schemes and sums are the same for both
 * types: the widening paths' bf16 results are bf16_round of the fp32 kernel's on the widened
 * inputs, and every path's as reproducible across thread counts as the fp32 kernel's.
 *
 * Workspace (floats): per thread the path's scratch (bf16: its bf16 scratch and two widened
 * token rows, 2 NH*HS, for D); D (NH, T); bf16: the low halves of dQ (T*NH*HS uint16,
 * T*NH*HS/2 floats); in the second backward scheme (nt-1) fp32 dQ buffers. */

static size_t attn_rows_floats(int NH, int HS) {
    return attn_round16(up_mul(2, up_mul((size_t)NH, (size_t)HS)));
}

/* Floats of one thread's part of the workspace. */
static size_t attn_thread_part(const attn_ops *ops, int bf, int NH, int HS) {
    if (!bf) return ops->thread_floats(HS);
    return up_add(ops->thread_floats_bf16(HS), attn_rows_floats(NH, HS));
}

/* Queries per forward task and keys per backward task of the path for the type. */
static int attn_fq(const attn_ops *ops, int bf) {
    return bf ? ops->fq_bf16 : ops->fq;
}

static int attn_bkb(const attn_ops *ops, int bf) {
    return bf ? ops->bkb_bf16 : ops->bkb;
}

static void attn_fwd_call(const attn_ops *ops, int bf, void *out, float *lse, const void *q,
                          const void *k, const void *v, const attn_shape *sh, int h, int ib,
                          float *tws) {
    if (bf)
        ops->fwd_block_bf16(out, lse, q, k, v, sh, h, ib, tws);
    else
        ops->fwd_block(out, lse, q, k, v, sh, h, ib, tws);
}

/* dQ accumulates into acc: fp32 in acc->f, bf16 in acc (split or fp32). */
static void attn_bwd_call(const attn_ops *ops, int bf, const attn_dq *acc, void *dk, void *dv,
                          const void *dout, const void *q, const void *k, const void *v,
                          const float *lse, const float *D, const attn_shape *sh, int kvh, int jb,
                          float *tws) {
    if (bf)
        ops->bwd_block_bf16(acc, dk, dv, dout, q, k, v, lse, D, sh, kvh, jb, tws);
    else
        ops->bwd_block(acc->f, dk, dv, dout, q, k, v, lse, D, sh, kvh, jb, tws);
}

static size_t attn_workspace(int T, int NH, int NKV, int HS, int bf) {
    UP_CHECK(T >= 1 && NH >= 1 && NKV >= 1 && HS >= 1,
             "attention: bad sizes T=%d NH=%d NKV=%d HS=%d", T, NH, NKV, HS);
    const int nt = omp_get_max_threads();
    const size_t nq = up_mul3((size_t)T, (size_t)NH, (size_t)HS);
    size_t n = up_mul((size_t)nt, attn_thread_part(attn_ops_in_use(), bf, NH, HS));
    n = up_add(n, attn_round16(up_mul((size_t)NH, (size_t)T))); // D (NH, T)
    if (bf) n = up_add(n, attn_round16((nq + 1) / 2));          // dQ's low halves (uint16)
    if (attn_uses_dq_buffers(NKV, nt)) n = up_add(n, up_mul((size_t)(nt - 1), nq));
    return n;
}

size_t attention_workspace_floats(int T, int NH, int NKV, int HS) {
    return attn_workspace(T, NH, NKV, HS, 0);
}

size_t attention_workspace_floats_bf16(int T, int NH, int NKV, int HS) {
    return attn_workspace(T, NH, NKV, HS, 1);
}

static attn_shape attn_shape_of(int T, int NH, int NKV, int HS, const int32_t *doc_start) {
    attn_shape s = {.T = T,
                    .NH = NH,
                    .NKV = NKV,
                    .HS = HS,
                    .G = NH / NKV,
                    .ldq = (size_t)NH * HS,
                    .ldk = (size_t)NKV * HS,
                    .scale = 1.0f / sqrtf((float)HS),
                    .doc = doc_start,
                    .bf16 = bf16_path_current()};
    return s;
}

/* D[h, t] = dO[t, h, :] . O[t, h, :] for the NH heads of token t. A plain loop compiled per CPU
 * (KERNEL_CLONES), as the other elementwise kernels; its lanes set the order of the fp32 sum. */
KERNEL_CLONES
static void attn_row_dots(float *D, const float *orow, const float *drow, long ti, int T, int NH,
                          int HS) {
    for (int h = 0; h < NH; h++) {
        const float *o = orow + (size_t)h * HS;
        const float *d = drow + (size_t)h * HS;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int e = 0; e < HS; e++)
            acc += o[e] * d[e];
        D[(size_t)h * T + ti] = acc;
    }
}

/* ---- drivers --------------------------------------------------------------------------------- */

static void attn_check_args(const void *a, const void *b, const void *c, const void *d,
                            const void *e, int T, int NH, int NKV, int HS, const float *ws) {
    UP_CHECK(a && b && c && d && e && ws, "attention: NULL buffer");
    UP_CHECK(T >= 1 && NH >= 1 && NKV >= 1 && HS >= 1,
             "attention: bad sizes T=%d NH=%d NKV=%d HS=%d", T, NH, NKV, HS);
    UP_CHECK(NH % NKV == 0, "attention: NH=%d is not a multiple of NKV=%d", NH, NKV);
    // sgemm takes int leading dimensions; T itself only enters sizes as size_t.
    UP_CHECK((size_t)NH * HS <= INT32_MAX / 2, "attention: NH*HS=%zu too large", (size_t)NH * HS);
}

/* doc_start as the contract says: doc[0] = 0 and each doc[i] either continues the document of
 * token i-1 (doc[i] == doc[i-1]) or starts one at i (doc[i] == i). O(T), against O(T^2) work. */
static void attn_check_docs(const int32_t *doc, int T) {
    if (!doc) return;
    for (int i = 0; i < T; i++)
        UP_CHECK(doc[i] == i || (i > 0 && doc[i] == doc[i - 1]),
                 "attention: doc_start[%d] = %d: must be %d (a document starts there) or "
                 "doc_start[%d] (the same document as token %d); documents are contiguous",
                 i, (int)doc[i], i, i - 1, i - 1);
}

static void attn_forward_run(int bf, void *out, float *lse, const void *q, const void *k,
                             const void *v, const int32_t *doc_start, int T, int NH, int NKV,
                             int HS, float *ws) {
    attn_check_args(out, lse, q, k, v, T, NH, NKV, HS, ws);
    attn_check_docs(doc_start, T);
    const attn_shape sh = attn_shape_of(T, NH, NKV, HS, doc_start);
    const attn_ops *ops = attn_ops_in_use();
    const int fq = attn_fq(ops, bf), nb = (T + fq - 1) / fq; // query blocks
    const long ntasks = (long)NH * nb;
    const int nt = omp_get_max_threads();
    const size_t per_thread = attn_thread_part(ops, bf, NH, HS);
#pragma omp parallel num_threads(nt)
    {
        float *tws = ws + (size_t)omp_get_thread_num() * per_thread;
        // Largest tasks (last query blocks: the most key blocks) first for load balance. Each
        // task writes its own rows of out and lse, so the schedule does not affect results.
#pragma omp for schedule(dynamic, 1)
        for (long t = 0; t < ntasks; t++) {
            attn_fwd_call(ops, bf, out, lse, q, k, v, &sh, (int)(t % NH), nb - 1 - (int)(t / NH),
                          tws);
            attn_progress(omp_get_thread_num());
        }
    }
}

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       const int32_t *doc_start, int T, int NH, int NKV, int HS, float *ws) {
    attn_forward_run(0, out, lse, q, k, v, doc_start, T, NH, NKV, HS, ws);
}

void attention_forward_bf16(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k,
                            const uint16_t *v, const int32_t *doc_start, int T, int NH, int NKV,
                            int HS, float *ws) {
    attn_forward_run(1, out, lse, q, k, v, doc_start, T, NH, NKV, HS, ws);
}

/* The greedy assignment both backward drivers replay on every thread: tasks in order, each to the
 * thread with the least work so far (ties to the lowest index). */
enum { ATTN_MAX_THREADS = 512 };
typedef struct {
    long load[ATTN_MAX_THREADS];
    int nth;
} attn_greedy;

static void attn_greedy_init(attn_greedy *g, int nth) {
    UP_CHECK(nth <= ATTN_MAX_THREADS, "attention: %d threads exceed %d", nth, ATTN_MAX_THREADS);
    g->nth = nth;
    for (int t = 0; t < nth; t++)
        g->load[t] = 0;
}

/* The thread that runs the next task, of `work` units. */
static int attn_greedy_take(attn_greedy *g, long work) {
    int best = 0;
    for (int t = 1; t < g->nth; t++)
        if (g->load[t] < g->load[best]) best = t;
    g->load[best] += work;
    return best;
}

/* Second scheme's greedy assignment: tasks (kvh, jb) in order of increasing jb (decreasing work
 * without documents), each to the least loaded thread (lowest id on a tie). Work of key block jb:
 * the queries from its first key to the end of the document of its last key (T - jb*BKB without
 * documents). Every thread replays the same rule and runs its own tasks: a fixed,
 * timing-independent assignment, so the dQ sums are reproducible. */
static void attn_bwd_greedy(const attn_ops *ops, int bf, const attn_dq *dqacc, void *dk, void *dv,
                            const void *dout, const void *q, const void *k, const void *v,
                            const float *lse, const float *D, const attn_shape *sh, float *tws,
                            int tid, int nth) {
    attn_greedy g;
    attn_greedy_init(&g, nth);
    const int bkb = attn_bkb(ops, bf), nb = (sh->T + bkb - 1) / bkb;
    for (int jb = 0; jb < nb; jb++) {
        const int j0 = jb * bkb, j1 = attn_min(sh->T, j0 + bkb);
        const long work = attn_doc_query_end(sh, j1) - j0;
        for (int kvh = 0; kvh < sh->NKV; kvh++) {
            if (attn_greedy_take(&g, work) == tid) {
                attn_bwd_call(ops, bf, dqacc, dk, dv, dout, q, k, v, lse, D, sh, kvh, jb, tws);
                attn_progress(tid);
            }
        }
    }
}

/* Where the backward's dQ accumulates, from the workspace after D (attn_workspace's layout). */
typedef struct {
    attn_dq split;  // fp32: {.f = dq}; bf16: dq's top halves and the low halves
    float *buf;     // (nt - 1) x (T, NH, HS) private fp32 buffers, second scheme only
    uint16_t *dqlo; // bf16: the low halves (T, NH, HS)
} attn_dq_store;

static attn_dq_store attn_dq_store_of(int bf, void *dq, float *after_D, size_t nq) {
    attn_dq_store s = {.split = {.f = bf ? NULL : (float *)dq}, .buf = after_D, .dqlo = NULL};
    if (bf) {
        s.dqlo = (uint16_t *)after_D;
        s.split.hi = dq;
        s.split.lo = s.dqlo;
        s.buf = after_D + attn_round16((nq + 1) / 2);
    }
    return s;
}

/* Token ti before the tasks: D[:, ti] (bf16: on out and dout widened into orow, drow) and dQ's
 * accumulators zeroed (dq and its low halves, the private buffers of threads 1..nth-1). */
static void attn_bwd_row_init(int bf, float *D, const void *out, const void *dout, void *dq,
                              const attn_dq_store *s, float *orow, float *drow, long ti, int T,
                              int NH, int HS, int nbuf, size_t nq) {
    const size_t row = (size_t)NH * HS, o = (size_t)ti * row;
    if (bf) {
        f32_from_bf16((const uint16_t *)out + o, orow, row);
        f32_from_bf16((const uint16_t *)dout + o, drow, row);
        attn_row_dots(D, orow, drow, ti, T, NH, HS);
        memset((uint16_t *)dq + o, 0, row * sizeof(uint16_t));
        memset(s->dqlo + o, 0, row * sizeof(uint16_t));
    } else {
        attn_row_dots(D, (const float *)out + o, (const float *)dout + o, ti, T, NH, HS);
        memset((float *)dq + o, 0, row * sizeof(float));
    }
    for (int t = 0; t < nbuf; t++)
        memset(s->buf + (size_t)t * nq + o, 0, row * sizeof(float));
}

/* Token ti after the tasks: dQ += the buffers of threads 1..nth-1 in thread order (nbuf of them),
 * bf16: from its halves into acc (a free fp32 row), then rounded into dq once per element. */
static void attn_bwd_row_finish(int bf, void *dq, const attn_dq_store *s, float *acc, long ti,
                                size_t row, int nbuf, size_t nq) {
    const size_t o = (size_t)ti * row;
    if (bf)
        attn_dq_get(acc, &s->split, o, row, 1, (int)row);
    else
        acc = (float *)dq + o;
    for (int t = 0; t < nbuf; t++) {
        const float *src = s->buf + (size_t)t * nq + o;
#pragma omp simd
        for (size_t e = 0; e < row; e++)
            acc[e] += src[e];
    }
    if (bf) bf16_from_f32(acc, (uint16_t *)dq + o, row);
}

static void attn_backward_run(int bf, void *dq, void *dk, void *dv, const void *dout, const void *q,
                              const void *k, const void *v, const void *out, const float *lse,
                              const int32_t *doc_start, int T, int NH, int NKV, int HS, float *ws) {
    attn_check_args(dq, dk, dv, dout, q, T, NH, NKV, HS, ws);
    UP_CHECK(k && v && out && lse, "attention: NULL buffer");
    attn_check_docs(doc_start, T);
    const attn_shape sh = attn_shape_of(T, NH, NKV, HS, doc_start);
    const attn_ops *ops = attn_ops_in_use();
    const int nt = omp_get_max_threads();
    const int buffered = attn_uses_dq_buffers(NKV, nt);
    const size_t tile_floats = bf ? ops->thread_floats_bf16(HS) : ops->thread_floats(HS);
    const size_t per_thread = attn_thread_part(ops, bf, NH, HS);
    const size_t row = (size_t)NH * HS; // elements per token of q, dq, dout, out
    const size_t nq = (size_t)T * row;
    float *D = ws + (size_t)nt * per_thread; // (NH, T)
    const attn_dq_store st = attn_dq_store_of(bf, dq, D + attn_round16((size_t)NH * T), nq);
    const int bkb = attn_bkb(ops, bf), nb = (T + bkb - 1) / bkb; // key blocks
#pragma omp parallel num_threads(nt)
    {
        const int tid = omp_get_thread_num();
        const int nth = omp_get_num_threads(); // <= nt; fewer if the runtime decides so
        const int nbuf = buffered ? nth - 1 : 0;
        float *tws = ws + (size_t)tid * per_thread;
        float *orow = bf ? tws + tile_floats : NULL; // bf16: widened token rows for D (then
        float *drow = bf ? orow + row : NULL;        // the row dQ sums in)
        // D (FlashAttention-2's rowsum(dO * O)); the accumulators start at 0 (the tasks
        // accumulate into them).
#pragma omp for schedule(static)
        for (long ti = 0; ti < (long)T; ti++)
            attn_bwd_row_init(bf, D, out, dout, dq, &st, orow, drow, ti, T, NH, HS, nbuf, nq);
        // (implicit barrier: D and the zeroed accumulators are visible to every thread)
        if (!buffered) {
            // Owner scheme: thread tid takes KV heads tid, tid + nth, ...; the dQ rows of their
            // query heads are written by this thread only.
            for (int kvh = tid; kvh < NKV; kvh += nth)
                for (int jb = 0; jb < nb; jb++) {
                    attn_bwd_call(ops, bf, &st.split, dk, dv, dout, q, k, v, lse, D, &sh, kvh, jb,
                                  tws);
                    attn_progress(tid);
                }
        } else {
            const attn_dq own = {.f = tid > 0 ? st.buf + (size_t)(tid - 1) * nq : NULL};
            attn_bwd_greedy(ops, bf, tid == 0 ? &st.split : &own, dk, dv, dout, q, k, v, lse, D,
                            &sh, tws, tid, nth);
        }
        if (bf || buffered) { // (uniform across the threads)
#pragma omp barrier
            // dq (+)= buffers of threads 1..nth-1, in thread order (reproducible sums)
#pragma omp for schedule(static)
            for (long ti = 0; ti < (long)T; ti++)
                attn_bwd_row_finish(bf, dq, &st, orow, ti, row, nbuf, nq);
        }
    }
}

void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                        const float *k, const float *v, const float *out, const float *lse,
                        const int32_t *doc_start, int T, int NH, int NKV, int HS, float *ws) {
    attn_backward_run(0, dq, dk, dv, dout, q, k, v, out, lse, doc_start, T, NH, NKV, HS, ws);
}

void attention_backward_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout,
                             const uint16_t *q, const uint16_t *k, const uint16_t *v,
                             const uint16_t *out, const float *lse, const int32_t *doc_start, int T,
                             int NH, int NKV, int HS, float *ws) {
    attn_backward_run(1, dq, dk, dv, dout, q, k, v, out, lse, doc_start, T, NH, NKV, HS, ws);
}
