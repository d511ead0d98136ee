/* cuda_nccl.cu — the collectives between ranks that own their GPUs (backend.h's coll_*, DESIGN.md
 * §11 "Ranks on a GPU"): NCCL, read through dlopen on first use (libnccl.so.2), so the module
 * loads on machines without NCCL and a run that needs none never touches it. Every op is issued
 * on the module's stream, after the ops before it; the host's waits for that stream poll each
 * communicator's asynchronous error (cu_coll_poll), so a lost peer stops the run with NCCL's line
 * instead of a wait that never ends. */
#include "cuda/cuda_int.h"

#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

static struct {
    int tried, ok;
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*comm_abort)(ncclComm_t);
    ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t *);
    const char *(*get_error_string)(ncclResult_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                               cudaStream_t);
    ncclResult_t (*reduce_scatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                   ncclComm_t, cudaStream_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
} nc;

/* The communicators alive (the waits poll them). */
enum { NCCL_MAX_COMMS = 8 };
static ncclComm_t live[NCCL_MAX_COMMS];
static int nlive;

/* Loads NCCL once; 0 with err set when it is not there. */
static int nccl_load(char *err, size_t errlen) {
    if (nc.tried) {
        if (!nc.ok) snprintf(err, errlen, "NCCL (libnccl.so.2) is not there");
        return nc.ok;
    }
    nc.tried = 1;
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "NCCL (libnccl.so.2) cannot be loaded: %s", dlerror());
        return 0;
    }
#define NC_SYM(field, name)                                                                        \
    do {                                                                                           \
        *(void **)&nc.field = dlsym(h, name);                                                      \
        if (!nc.field) {                                                                           \
            snprintf(err, errlen, "NCCL (libnccl.so.2) lacks %s: too old a version", name);       \
            return 0;                                                                              \
        }                                                                                          \
    } while (0)
    NC_SYM(get_unique_id, "ncclGetUniqueId");
    NC_SYM(comm_init_rank, "ncclCommInitRank");
    NC_SYM(comm_destroy, "ncclCommDestroy");
    NC_SYM(comm_abort, "ncclCommAbort");
    NC_SYM(comm_get_async_error, "ncclCommGetAsyncError");
    NC_SYM(get_error_string, "ncclGetErrorString");
    NC_SYM(group_start, "ncclGroupStart");
    NC_SYM(group_end, "ncclGroupEnd");
    NC_SYM(send, "ncclSend");
    NC_SYM(recv, "ncclRecv");
    NC_SYM(all_gather, "ncclAllGather");
    NC_SYM(reduce_scatter, "ncclReduceScatter");
    NC_SYM(all_reduce, "ncclAllReduce");
#undef NC_SYM
    nc.ok = 1;
    return 1;
}

/* Every communicator aborted, then the run stopped with one line (cu_fail). */
static void nccl_fail(const char *op, ncclResult_t r) {
    const char *what = nc.get_error_string ? nc.get_error_string(r) : "?";
    for (int i = 0; i < nlive; i++)
        nc.comm_abort(live[i]);
    nlive = 0;
    char line[256];
    snprintf(line, sizeof line, "%s (NCCL; a peer may be lost: its own line says why)", what);
    cu_fail(op, line, __FILE__, __LINE__);
}

#define NC_CHECK(call)                                                                             \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) nccl_fail(#call, r_);                                               \
    } while (0)

extern "C" int cu_coll_unique_id(void *id, char *err, size_t errlen) {
    if (!nccl_load(err, errlen)) return -1;
    ncclUniqueId u;
    ncclResult_t r = nc.get_unique_id(&u);
    if (r != ncclSuccess) {
        snprintf(err, errlen, "ncclGetUniqueId: %s", nc.get_error_string(r));
        return -1;
    }
    memcpy(id, &u, sizeof u);
    return 0;
}

extern "C" void *cu_coll_init(const void *id, int nranks, int rank, char *err, size_t errlen) {
    if (!nccl_load(err, errlen)) return NULL;
    if (nlive == NCCL_MAX_COMMS) {
        snprintf(err, errlen, "too many NCCL communicators (%d)", NCCL_MAX_COMMS);
        return NULL;
    }
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t c = NULL;
    ncclResult_t r = nc.comm_init_rank(&c, nranks, u, rank);
    if (r != ncclSuccess) {
        snprintf(err, errlen, "ncclCommInitRank (%d ranks, rank %d): %s", nranks, rank,
                 nc.get_error_string(r));
        return NULL;
    }
    live[nlive++] = c;
    return c;
}

extern "C" void cu_coll_destroy(void *comm) {
    if (!comm) return;
    cu_wait_stream(cu_stream); /* nothing of it still queued */
    for (int i = 0; i < nlive; i++)
        if (live[i] == (ncclComm_t)comm) live[i] = live[--nlive];
    NC_CHECK(nc.comm_destroy((ncclComm_t)comm));
}

extern "C" void cu_coll_alltoall(void *comm, const void *send, void *recv, size_t bytes,
                                 int nranks) {
    ncclComm_t c = (ncclComm_t)comm;
    NC_CHECK(nc.group_start());
    for (int j = 0; j < nranks; j++) {
        NC_CHECK(nc.send((const char *)send + (size_t)j * bytes, bytes, ncclUint8, j, c, cu_stream));
        NC_CHECK(nc.recv((char *)recv + (size_t)j * bytes, bytes, ncclUint8, j, c, cu_stream));
    }
    NC_CHECK(nc.group_end());
}

extern "C" void cu_coll_allgather(void *comm, void *full, size_t bytes, int rank) {
    NC_CHECK(nc.all_gather((const char *)full + (size_t)rank * bytes, full, bytes, ncclUint8,
                           (ncclComm_t)comm, cu_stream));
}

extern "C" void cu_coll_reduce_scatter(void *comm, const float *full, float *shard, size_t n) {
    NC_CHECK(nc.reduce_scatter(full, shard, n, ncclFloat32, ncclSum, (ncclComm_t)comm, cu_stream));
}

extern "C" void cu_coll_allreduce(void *comm, float *x, size_t n) {
    NC_CHECK(nc.all_reduce(x, x, n, ncclFloat32, ncclSum, (ncclComm_t)comm, cu_stream));
}

/* Called by the host's waits while they poll: stops the run on a communicator's error. */
void cu_coll_poll(void) {
    for (int i = 0; i < nlive; i++) {
        ncclResult_t a = ncclSuccess;
        ncclResult_t r = nc.comm_get_async_error(live[i], &a);
        if (r != ncclSuccess) nccl_fail("ncclCommGetAsyncError", r);
        if (a != ncclSuccess && a != ncclInProgress) nccl_fail("an NCCL collective", a);
    }
}

int cu_coll_live(void) {
    return nlive;
}
