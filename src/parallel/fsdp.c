/* fsdp.c — FSDP / ZeRO-3 shards and their collectives (DESIGN.md §4.5). */
#include "parallel/fsdp.h"

#include "core/trace.h"

size_t fsdp_shard_floats(size_t n, int R) {
    return (n + (size_t)R - 1) / (size_t)R;
}

void fsdp_kept(size_t n, int R, int rank, size_t *a, size_t *b) {
    size_t s = fsdp_shard_floats(n, R), x = (size_t)rank * s, y = x + s;
    *a = x < n ? x : n;
    *b = y < n ? y : n;
}

/* Bytes this rank sends in a gather or reduce-scatter of a shard (the spans' argument). */
static int64_t shard_bytes(const comm_ctx *c, size_t n, mem_dtype dt) {
    return (int64_t)mem_dtype_bytes(dt, n) * (c->R - 1);
}

void fsdp_gather_start(comm_ctx *c, void *full, size_t n, mem_dtype dt, comm_req *req) {
    comm_allgather_start(c, NULL, full, n, dt, req);
}

void fsdp_gather_wait(comm_ctx *c, comm_req *req, int u, size_t n, mem_dtype dt) {
    uint64_t tt = trace_begin(); /* the span: the wait for a gather started ahead */
    comm_wait(c, req, COMM_FSDP_GATHER);
    trace_end2(tt, "fsdp", "fsdp_gather", "unit", u, "bytes", shard_bytes(c, n, dt));
}

void fsdp_gather_now(comm_ctx *c, void *full, size_t n, mem_dtype dt) {
    comm_req req;
    comm_allgather_start(c, NULL, full, n, dt, &req);
    comm_wait(c, &req, COMM_FSDP_GATHER);
}

void fsdp_reduce_add(comm_ctx *c, const float *full, float *tmp, float *recv, float *shard,
                     size_t n, int u) {
    uint64_t tt = trace_begin();
    /* the reduce-scatter overwrites; the shard accumulates over micro-batches */
    comm_reduce_scatter(c, full, tmp, recv, n);
    for (size_t i = 0; i < n; i++)
        shard[i] += tmp[i];
    trace_end2(tt, "fsdp", "fsdp_reduce_scatter", "unit", u, "bytes",
               shard_bytes(c, n, MEM_DTYPE_F32));
}
