/* alltoall.c — the context-parallel all-to-all (DESIGN.md §2, §3): P blocks exchanged over the
 * CP group, blocking or in flight (comm_exchange); what the blocks hold is the caller's
 * (parallel/heads.h packs the heads). */
#include "comm/comm_int.h"

#include "core/trace.h"

#include <stdlib.h>
#include <string.h>

/* A block's element count as MPI's int count. */
static int block_count(size_t n) {
    UP_CHECK(n <= INT_MAX,
             "all-to-all block of %zu floats exceeds MPI's int count: use more "
             "context-parallel ranks or smaller stages",
             n);
    return (int)n;
}

/* Posts the P-1 receives (block j of recv from rank j) and P-1 sends (block j of send to rank j)
 * of an all-to-all of the CP group on comm with tag, into req, and copies this rank's own block;
 * returns the requests posted. n elements of t per block. */
static int post_blocks(comm_ctx *c, MPI_Comm comm, int tag, const void *send, void *recv, int n,
                       MPI_Datatype t, MPI_Request *req, const char *func) {
    int P = c->P, me = c->cp_rank, k = 0, size;
    MPI_Type_size(t, &size);
    for (int s = 1; s < P; s++) {
        int j = (me + P - s) % P;
        MPI_CALL_IN(func,
                    MPI_Irecv((char *)recv + (size_t)j * n * size, n, t, j, tag, comm, &req[k++]));
    }
    for (int s = 1; s < P; s++) {
        int j = (me + s) % P;
        MPI_CALL_IN(func, MPI_Isend((const char *)send + (size_t)j * n * size, n, t, j, tag, comm,
                                    &req[k++]));
    }
    memcpy((char *)recv + (size_t)me * n * size, (const char *)send + (size_t)me * n * size,
           (size_t)n * size);
    return k;
}

/* The blocking all-to-all of the CP group, counted in kind k: every receive and send posted at
 * once on the group's own duplicate (a2a: no tag of the pipe's exchanges in flight on cp can meet
 * these) and completed by the polled wait. Moves the same bytes as MPI_Alltoall, which cannot be
 * polled; measured faster on 2 ranks than both MPI_Alltoall and MPI_Ialltoall (5 against 9 and
 * 10 us for blocks of 8192 floats). */
static void alltoall(comm_ctx *c, comm_kind k, const void *send, void *recv, size_t n, mem_dtype dt,
                     const char *func) {
    double t0 = MPI_Wtime();
    int m = block_count(n);
    int nreq = post_blocks(c, c->a2a, 0, send, recv, m, comm_mpi_type(dt), c->a2a_req, func);
    comm_wait_polled(c, GROUP_CP, nreq, c->a2a_req, func, "MPI_Irecv/MPI_Isend");
    c->stats[k].mpi_seconds += MPI_Wtime() - t0;
    comm_count(c, k, t0, (double)mem_dtype_bytes(dt, n) * (c->P - 1));
}

void comm_seq_to_head(comm_ctx *c, const void *send, void *recv, size_t n, mem_dtype dt) {
    alltoall(c, COMM_SEQ_TO_HEAD, send, recv, n, dt, __func__);
}

void comm_head_to_seq(comm_ctx *c, const void *send, void *recv, size_t n, mem_dtype dt) {
    alltoall(c, COMM_HEAD_TO_SEQ, send, recv, n, dt, __func__);
}

void comm_exchange_init(const comm_ctx *c, comm_exchange *x) {
    x->n = 0;
    x->kind = COMM_SEQ_TO_HEAD;
    x->req = calloc((size_t)(2 * c->P), sizeof *x->req);
    UP_CHECK(x->req, "out of memory");
}

void comm_exchange_free(comm_exchange *x) {
    free(x->req);
    x->req = NULL;
    x->n = 0;
}

/* The pipe's exchanges in flight: x's transfers of kind k posted on cp with tag (blocks of n
 * elements), the bytes counted and the call left to the wait. Every receive and send posted at
 * once (MPI_Ialltoall's pairwise rounds over 4 ranks would each wait for both peers to enter
 * MPI: measured, hardly any finished during attention). */
static void exchange_post(comm_ctx *c, comm_kind k, int tag, const void *send, void *recv, size_t n,
                          mem_dtype dt, comm_exchange *x, const char *func) {
    double t0 = MPI_Wtime();
    UP_CHECK(x->req && x->n == 0, "%s: exchange not initialised or in use", func);
    UP_CHECK(c->P > 1, "%s: one rank has nothing to exchange", func);
    int m = block_count(n);
    x->kind = k;
    x->n = post_blocks(c, c->cp, tag, send, recv, m, comm_mpi_type(dt), x->req, func);
    c->stats[k].mpi_seconds += MPI_Wtime() - t0;
    comm_count(c, k, t0, (double)mem_dtype_bytes(dt, n) * (c->P - 1));
    c->stats[k].calls--; /* counted once, at the wait */
}

void comm_seq_to_head_start(comm_ctx *c, const void *send, void *recv, size_t n, mem_dtype dt,
                            int tag, comm_exchange *x) {
    exchange_post(c, COMM_SEQ_TO_HEAD, tag, send, recv, n, dt, x, __func__);
}

void comm_head_to_seq_start(comm_ctx *c, const void *send, void *recv, size_t n, mem_dtype dt,
                            int tag, comm_exchange *x) {
    exchange_post(c, COMM_HEAD_TO_SEQ, tag, send, recv, n, dt, x, __func__);
}

int comm_exchange_test(comm_ctx *c, comm_exchange *x) {
    (void)c;
    int done = 1;
    for (int i = 0; i < x->n && done; i++) /* the first pending one: progress for all */
        MPI_CALL(MPI_Test(&x->req[i], &done, MPI_STATUS_IGNORE));
    if (done) x->n = 0;
    return done;
}

void comm_exchange_wait(comm_ctx *c, comm_exchange *x) {
    double t0 = MPI_Wtime();
    uint64_t tt = x->n ? trace_begin() : 0; /* the wait for an exchange in flight */
    comm_wait_polled(c, GROUP_CP, x->n, x->req, __func__, "MPI_Irecv/MPI_Isend");
    x->n = 0;
    c->stats[x->kind].mpi_seconds += MPI_Wtime() - t0;
    comm_count(c, x->kind, t0, 0);
    trace_end(tt, "comm", "a2a_wait");
}
