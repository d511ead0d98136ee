/* heads.c — the heads between sequence and head layout (heads.h, DESIGN.md §2): the packing into
 * and out of the blocks of comm's all-to-all. */
#include "parallel/heads.h"

#include "core/check.h"
#include "core/clock.h"
#include "core/dtype.h"
#include "core/trace.h"

#include <string.h>

/* Heads each rank holds in head layout, and the source head of slot i on rank j. */
static int heads_out(int nh, int P) {
    return nh >= P ? nh / P : 1;
}
static int src_head(int nh, int P, int j, int i) {
    return nh >= P ? j * (nh / P) + i : j * nh / P;
}

static size_t block_floats(int T_loc, int nh_out, int HS) {
    return up_mul3((size_t)T_loc, (size_t)nh_out, (size_t)HS);
}

size_t heads_pack_floats(const comm_ctx *c, int T_loc, int nh, int HS) {
    return up_mul3((size_t)T_loc, (size_t)heads_out(nh, c->P) * (size_t)c->P, (size_t)HS);
}

/* nh heads spread over the group's ranks: one rank's share, or several ranks per head */
static void check_heads(const comm_ctx *c, int nh) {
    UP_CHECK(nh % c->P == 0 || c->P % nh == 0, "%d heads cannot be spread over %d ranks", nh, c->P);
}

/* The part both directions share: the layout check, and with P == 1 (one layout) a plain copy,
 * counted as the call (calls: 1) or as time only (0: the wait counts the call). Returns 1 when
 * that finished the exchange. */
static int exchange_trivial(comm_ctx *c, comm_kind kind, const void *send, void *recv, int T_loc,
                            int nh, int HS, mem_dtype dt, double t0, long calls) {
    check_heads(c, nh);
    if (c->P > 1) return 0;
    memcpy(recv, send, mem_dtype_bytes(dt, block_floats(T_loc, nh, HS)));
    comm_stat_add(c, kind, now_s() - t0, calls);
    return 1;
}

/* Packs send (T_loc, nh, HS) for the exchange to head layout: block j (T_loc, nh_out, HS) holds
 * the heads rank j owns. Returns the elements of one block. */
static size_t seq_to_head_pack(const comm_ctx *c, const void *send, int T_loc, int nh, int HS,
                               mem_dtype dt, void *pack) {
    int P = c->P, nh_out = heads_out(nh, P);
    size_t n = block_floats(T_loc, nh_out, HS);
    size_t row = (size_t)nh * HS, blk = (size_t)nh_out * HS;
#pragma omp parallel for collapse(2) schedule(static)
    for (int j = 0; j < P; j++)
        for (int t = 0; t < T_loc; t++)
            for (int i = 0; i < nh_out; i++)
                memcpy(dtype_at(dt, pack, (size_t)j * n + (size_t)t * blk + (size_t)i * HS),
                       dtype_at(dt, send, (size_t)t * row + (size_t)src_head(nh, P, j, i) * HS),
                       mem_dtype_bytes(dt, (size_t)HS));
    return n;
}

/* Unpacks the blocks received from head layout: pack (P blocks of (T_loc, nh_out, HS), block j
 * from rank j) -> recv (T_loc, nh, HS); replicated heads (nh < P) summed in rank order. */
static void head_to_seq_unpack(const comm_ctx *c, const void *pack, void *recv, int T_loc, int nh,
                               int HS, mem_dtype dt) {
    int P = c->P, nh_out = heads_out(nh, P);
    size_t n = block_floats(T_loc, nh_out, HS);
    size_t row = (size_t)nh * HS, blk = (size_t)nh_out * HS;
    if (nh >= P) {
#pragma omp parallel for collapse(2) schedule(static)
        for (int j = 0; j < P; j++)
            for (int t = 0; t < T_loc; t++)
                memcpy(dtype_at(dt, recv, (size_t)t * row + (size_t)src_head(nh, P, j, 0) * HS),
                       dtype_at(dt, pack, (size_t)j * n + (size_t)t * blk),
                       mem_dtype_bytes(dt, blk));
    } else {
        // replicated heads: rank j held a copy of head j*nh/P; the gradient is the sum of the
        // copies, added in rank order (the same order on every run); in fp32, stored once in dt
        // (core/dtype.h: bf16 copies widened, the sum rounded once)
        int rep = P / nh;
#pragma omp parallel for schedule(static)
        for (int t = 0; t < T_loc; t++)
            for (int h = 0; h < nh; h++) {
                size_t d0 = (size_t)t * row + (size_t)h * HS;
                for (int x = 0; x < HS; x++) {
                    float acc = 0;
                    for (int r = 0; r < rep; r++) {
                        size_t i = (size_t)(h * rep + r) * n + (size_t)t * HS + (size_t)x;
                        float v = dtype_load(dt, pack, i);
                        acc = r ? acc + v : v;
                    }
                    dtype_store(dt, recv, d0 + x, acc);
                }
            }
    }
}

/* Bytes this rank sends in one exchange of blocks of n elements (the spans' argument). */
static int64_t sent_bytes(const comm_ctx *c, size_t n, mem_dtype dt) {
    return (int64_t)((double)mem_dtype_bytes(dt, n) * (c->P - 1));
}

void heads_seq_to_head(comm_ctx *c, const void *send, void *recv, int T_loc, int nh, int HS,
                       mem_dtype dt, void *pack) {
    double t0 = now_s();
    uint64_t tt = trace_begin(); /* P == 1: a copy, not traced */
    if (exchange_trivial(c, COMM_SEQ_TO_HEAD, send, recv, T_loc, nh, HS, dt, t0, 1)) return;
    size_t n = seq_to_head_pack(c, send, T_loc, nh, HS, dt, pack);
    comm_stat_add(c, COMM_SEQ_TO_HEAD, now_s() - t0, 0);
    // block i received from rank i covers tokens i*T_loc..: the blocks in rank order are
    // already (T, nh_out, HS)
    comm_seq_to_head(c, pack, recv, n, dt);
    trace_end2(tt, "comm", "a2a_seq_to_head", "bytes", sent_bytes(c, n, dt), "heads", nh);
}

void heads_seq_to_head_start(comm_ctx *c, const void *send, void *recv, int T_loc, int nh, int HS,
                             mem_dtype dt, void *pack, int tag, comm_exchange *x) {
    double t0 = now_s();
    if (exchange_trivial(c, COMM_SEQ_TO_HEAD, send, recv, T_loc, nh, HS, dt, t0, 0)) return;
    size_t n = seq_to_head_pack(c, send, T_loc, nh, HS, dt, pack);
    comm_stat_add(c, COMM_SEQ_TO_HEAD, now_s() - t0, 0);
    comm_seq_to_head_start(c, pack, recv, n, dt, tag, x);
}

void heads_head_to_seq(comm_ctx *c, const void *send, void *recv, int T_loc, int nh, int HS,
                       mem_dtype dt, void *pack) {
    double t0 = now_s();
    uint64_t tt = trace_begin(); /* P == 1: a copy, not traced */
    if (exchange_trivial(c, COMM_HEAD_TO_SEQ, send, recv, T_loc, nh, HS, dt, t0, 1)) return;
    size_t n = block_floats(T_loc, heads_out(nh, c->P), HS);
    // block j of send (tokens j*T_loc..) goes to rank j as is
    comm_head_to_seq(c, send, pack, n, dt);
    double t1 = now_s();
    head_to_seq_unpack(c, pack, recv, T_loc, nh, HS, dt);
    comm_stat_add(c, COMM_HEAD_TO_SEQ, now_s() - t1, 0);
    trace_end2(tt, "comm", "a2a_head_to_seq", "bytes", sent_bytes(c, n, dt), "heads", nh);
}

void heads_head_to_seq_start(comm_ctx *c, const void *send, int T_loc, int nh, int HS, mem_dtype dt,
                             void *pack, int tag, comm_exchange *x) {
    check_heads(c, nh);
    size_t n = block_floats(T_loc, heads_out(nh, c->P), HS);
    // block j of send goes to rank j as is
    comm_head_to_seq_start(c, send, pack, n, dt, tag, x);
}

void heads_head_to_seq_finish(comm_ctx *c, const void *pack, void *recv, int T_loc, int nh, int HS,
                              mem_dtype dt) {
    double t0 = now_s();
    head_to_seq_unpack(c, pack, recv, T_loc, nh, HS, dt);
    comm_stat_add(c, COMM_HEAD_TO_SEQ, now_s() - t0, 0);
}
