/* collectives.c — the world's collectives (DESIGN.md §4.5, §8.3): the gradient and loss
 * reductions, FSDP's gathers and its reduce-scatter, the verdicts and small reductions, the
 * trace's point-to-point channel (comm.h). Each completes by the polled wait. */
#include "comm/comm_int.h"

#include "core/trace.h"

#include <stdlib.h>
#include <string.h>

/* In-place all-reduce over the world: MPI_Iallreduce, which sums in the same order as
 * MPI_Allreduce in MPICH (measured bit for bit, 1 to 2^20 floats and doubles, 2 to 4 ranks on
 * one node and across two), completed by comm_wait_polled. */
static void allreduce(comm_ctx *c, void *buf, int n, MPI_Datatype t, MPI_Op op, const char *func) {
    MPI_Request q;
    MPI_CALL_IN(func, MPI_Iallreduce(MPI_IN_PLACE, buf, n, t, op, c->world, &q));
    comm_wait_polled(c, GROUP_WORLD, 1, &q, func, "MPI_Iallreduce");
}

void comm_reduce_grads(comm_ctx *c, float *g, size_t n) {
    if (c->R == 1) return;
    double t0 = MPI_Wtime();
    uint64_t tt = trace_begin();
    for (size_t off = 0; off < n; off += COMM_REDUCE_CHUNK) {
        size_t m = n - off < COMM_REDUCE_CHUNK ? n - off : COMM_REDUCE_CHUNK;
        allreduce(c, g + off, (int)m, MPI_FLOAT, MPI_SUM, __func__);
    }
    comm_count(c, COMM_GRAD_REDUCE, t0, (double)n * sizeof(float));
    trace_end1(tt, "comm", "grad_all_reduce", "bytes", (int64_t)(n * sizeof(float)));
}

/* MPICH's all-reduce of a long message (reduce-scatter then all-gather) receives into a
 * temporary of the message's size; its reduce-scatter (pairwise exchange) into one of the
 * block's. Measured (RSS above the accounted buffers): half the message for 2 ranks, which the
 * whole message bounds for any rank count. */
size_t comm_reduce_temp_bytes(const comm_ctx *c, size_t n) {
    if (c->R == 1) return 0;
    return (n < COMM_REDUCE_CHUNK ? n : COMM_REDUCE_CHUNK) * sizeof(float);
}

void comm_reduce_loss(comm_ctx *c, double *loss_sum, long long *cnt) {
    double t0 = MPI_Wtime();
    uint64_t tt = trace_begin();
    double v[2] = {*loss_sum, (double)*cnt};
    if (c->R > 1) allreduce(c, v, 2, MPI_DOUBLE, MPI_SUM, __func__);
    *loss_sum = v[0];
    *cnt = (long long)(v[1] + 0.5);
    comm_count(c, COMM_LOSS_REDUCE, t0, sizeof v);
    trace_end1(tt, "comm", "loss_all_reduce", "bytes", (int64_t)sizeof v);
}

static int int_count(size_t n) {
    UP_CHECK(n <= INT_MAX, "a shard of %zu floats exceeds MPI's int count: use more ranks", n);
    return (int)n;
}

void comm_allgather_start(comm_ctx *c, const void *shard, void *full, size_t n, mem_dtype dt,
                          comm_req *req) {
    double t0 = MPI_Wtime();
    int k = int_count(n);
    /* shard NULL: rank i's shard is already in place in full (MPI_IN_PLACE) */
    MPI_CALL(MPI_Iallgather(shard ? shard : MPI_IN_PLACE, shard ? k : 0,
                            shard ? comm_mpi_type(dt) : MPI_DATATYPE_NULL, full, k,
                            comm_mpi_type(dt), c->world, &req->r));
    comm_count(c, COMM_FSDP_GATHER, t0, (double)mem_dtype_bytes(dt, n) * (c->R - 1));
    c->stats[COMM_FSDP_GATHER].calls--; /* counted once, at the wait */
}

void comm_wait(comm_ctx *c, comm_req *req, comm_kind kind) {
    double t0 = MPI_Wtime();
    comm_wait_polled(c, GROUP_WORLD, 1, &req->r, __func__,
                     kind == COMM_FSDP_GATHER ? "MPI_Iallgather" : "MPI_Wait");
    comm_count(c, kind, t0, 0);
}

void comm_reduce_scatter(comm_ctx *c, const float *full, float *shard, float *recv, size_t n) {
    double t0 = MPI_Wtime();
    int R = c->R, me = c->rank, k = int_count(n);
    const float *own = full + (size_t)me * n;
    if (R == 1) {
        memcpy(shard, own, n * sizeof *shard);
        comm_count(c, COMM_FSDP_REDUCE, t0, 0);
        return;
    }
    // every send posted at once (block j of full to rank j); the blocks this rank receives are
    // summed in rank order, x_0 + x_1 + ... + x_{R-1}, one receive at a time into recv (the first
    // straight into shard): the same bits on every network and every MPI, unlike
    // MPI_Reduce_scatter_block, whose order follows its algorithm and cannot be polled
    MPI_Request *sreq = c->rs_req, first = MPI_REQUEST_NULL;
    for (int s = 1; s < R; s++) {
        int j = (me + s) % R;
        MPI_CALL(MPI_Isend(full + (size_t)j * n, k, MPI_FLOAT, j, 0, c->rs, &sreq[s - 1]));
    }
    if (me == 0)
        memcpy(shard, own, n * sizeof *shard);
    else
        MPI_CALL(MPI_Irecv(shard, k, MPI_FLOAT, 0, 0, c->rs, &first));
    for (int j = 1; j < R; j++) {
        const float *x = own;
        if (j != me) {
            MPI_Request q;
            MPI_CALL(MPI_Irecv(recv, k, MPI_FLOAT, j, 0, c->rs, &q));
            comm_wait_polled(c, GROUP_WORLD, 1, &q, __func__, "MPI_Irecv");
            x = recv;
        }
        if (first != MPI_REQUEST_NULL)
            comm_wait_polled(c, GROUP_WORLD, 1, &first, __func__, "MPI_Irecv");
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            shard[i] += x[i];
    }
    comm_wait_polled(c, GROUP_WORLD, R - 1, sreq, __func__, "MPI_Isend");
    comm_count(c, COMM_FSDP_REDUCE, t0, (double)n * sizeof(float) * (R - 1));
}

void comm_sum_double(comm_ctx *c, double *v) {
    if (c->R == 1) return;
    double t0 = MPI_Wtime();
    allreduce(c, v, 1, MPI_DOUBLE, MPI_SUM, __func__);
    comm_count(c, COMM_OTHER, t0, sizeof(double));
}

void comm_sum_doubles(comm_ctx *c, double *v, int n) {
    if (c->R == 1) return;
    double t0 = MPI_Wtime();
    allreduce(c, v, n, MPI_DOUBLE, MPI_SUM, __func__);
    comm_count(c, COMM_OTHER, t0, sizeof(double) * (double)n);
}

int comm_any(comm_ctx *c, int flag) {
    int v = flag != 0;
    if (c->R > 1) allreduce(c, &v, 1, MPI_INT, MPI_LOR, __func__);
    return v;
}

int comm_min_int(comm_ctx *c, int v) {
    if (c->R > 1) allreduce(c, &v, 1, MPI_INT, MPI_MIN, __func__);
    return v;
}

void comm_max_u64(comm_ctx *c, unsigned long long *v, int n) {
    if (c->R == 1) return;
    allreduce(c, v, n, MPI_UNSIGNED_LONG_LONG, MPI_MAX, __func__);
}

void comm_xor_u32(comm_ctx *c, uint32_t *v, int n) {
    if (c->R == 1) return;
    allreduce(c, v, n, MPI_UINT32_T, MPI_BXOR, __func__);
}

static int byte_count(size_t n) {
    UP_CHECK(n <= INT_MAX, "a message of %zu bytes exceeds MPI's int count", n);
    return (int)n;
}

void comm_bcast_bytes(comm_ctx *c, int cp_group, void *buf, size_t n) {
    MPI_CALL(MPI_Bcast(buf, byte_count(n), MPI_BYTE, 0, cp_group ? c->cp : c->world));
}

void comm_send_bytes(comm_ctx *c, const void *buf, size_t n, int dest, int tag) {
    MPI_Request q;
    MPI_CALL(MPI_Isend(buf, byte_count(n), MPI_BYTE, dest, tag, c->world, &q));
    comm_wait_polled(c, GROUP_WORLD, 1, &q, __func__, "MPI_Isend");
}

void comm_recv_bytes(comm_ctx *c, void *buf, size_t n, int src, int tag) {
    MPI_Request q;
    MPI_CALL(MPI_Irecv(buf, byte_count(n), MPI_BYTE, src, tag, c->world, &q));
    comm_wait_polled(c, GROUP_WORLD, 1, &q, __func__, "MPI_Irecv");
}

/* The trace's channel (core/trace.h's trace_link) over a comm_ctx of its own. */
static int link_any(void *ctx, int flag) {
    return comm_any(ctx, flag);
}
static void link_send(void *ctx, const void *buf, size_t n, int dest, int tag) {
    comm_send_bytes(ctx, buf, n, dest, tag);
}
static void link_recv(void *ctx, void *buf, size_t n, int src, int tag) {
    comm_recv_bytes(ctx, buf, n, src, tag);
}
static void link_close(void *ctx) {
    comm_free(ctx);
    free(ctx);
}

int comm_trace_start(comm_ctx *c, const char *path, int io_track, char *err, size_t errlen) {
    comm_ctx *t = malloc(sizeof *t);
    UP_CHECK(t, "out of memory");
    comm_init(t, c->world, 1); /* its messages never mix with the run's */
    trace_link link = {t, t->rank, t->R, link_any, link_send, link_recv, link_close};
    return trace_start(path, &link, io_track, err, errlen);
}
