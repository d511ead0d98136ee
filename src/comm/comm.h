/* comm.h — every collective of upipe, one function per meaning (DESIGN.md §2, §4.5).
 *
 * comm_init orders the caller's ranks node by node (the library never uses MPI_COMM_WORLD; a
 * node is what MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) groups: the nodes in the order of their
 * lowest rank, each node's ranks in their order, so rank 0 stays rank 0 and a launch that already
 * placed ranks node by node keeps its order) and splits that world into context-parallel (CP)
 * groups of P consecutive ranks and data-parallel (DP) groups across them: world rank w = d * P + r
 * has CP rank r in replica d. So a CP group sits on one node whenever each node's rank count is a
 * multiple of P (DESIGN.md §8.3). Every function here is
 * collective over the group it names and must be called in the same order on all its ranks.
 * Errors of MPI calls stop every rank with the MPI error string. Bytes sent and seconds spent
 * are counted per kind of collective (comm_stats).
 *
 * A lost peer (DESIGN.md §8.3): the waits that can hang (the collectives of a step, the
 * all-to-alls and the pipe's exchange, FSDP's gathers) are non-blocking calls completed by
 * MPI_Test in a loop on the main thread. Past the watchdog's limit (core/watchdog.h) the rank sends
 * a probe (MPI_Issend) to each peer of the group it waits on; a probe completes only when the
 * peer's MPI matched it (every rank keeps one receive per peer posted for them), so the peers whose
 * probes are still pending after COMM_PROBE_S are the ones named in the rank's one line, with their
 * nodes, before it stops the job (up_die). FSDP's reduce-scatter is upipe's own, point to point
 * and polled (MPICH's non-blocking one sums in another order than its blocking one at some sizes);
 * only start-up's collectives block (a hang there is stopped by the watchdog thread, naming the
 * call but not the peer).
 *
 * The module's files: comm.c (start-up, the node layout, the statistics), errors.c (a failed MPI
 * call's line, the stops that reach every rank), liveness.c (the polled waits and the probes),
 * alltoall.c (the CP group's exchanges), collectives.c (the world's); comm_int.h is their private
 * header. core, parallel and model call no MPI function: they hold comm's handles (comm_ctx,
 * comm_req, comm_exchange) and call comm. */
#ifndef UP_COMM_H
#define UP_COMM_H

#include "core/mem.h"

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    COMM_SEQ_TO_HEAD,
    COMM_HEAD_TO_SEQ,
    COMM_GRAD_REDUCE,
    COMM_LOSS_REDUCE,
    COMM_FSDP_GATHER,
    COMM_FSDP_REDUCE,
    COMM_OTHER,
    COMM_KIND_COUNT
} comm_kind;

typedef struct {
    double seconds;     /* whole call: packing, waiting for the peers, the transfer, unpacking */
    double mpi_seconds; /* inside the MPI call alone */
    double bytes;       /* bytes this rank sent */
    long calls;
} comm_stat;

/* Seconds a rank whose wait passed the watchdog's limit gives its peers to answer a probe: a live
 * peer answers within milliseconds even on a loaded host (its main thread is inside MPI, or it
 * is stalled: then it is named). */
#define COMM_PROBE_S 2.0

typedef struct {
    MPI_Comm world;       /* duplicate of the caller's communicator */
    MPI_Comm cp;          /* the P ranks holding slices of one sequence */
    MPI_Comm a2a;         /* duplicate of cp for comm_seq_to_head and comm_head_to_seq */
    MPI_Request *a2a_req; /* 2 * P */
    MPI_Comm rs;          /* duplicate of world for comm_reduce_scatter */
    MPI_Request *rs_req;  /* R - 1 sends */
    MPI_Comm dp;          /* the D ranks with the same CP rank across replicas */
    int rank, R;          /* in world */
    int P, cp_rank;       /* context-parallel degree and rank */
    int D, dp_rank;       /* data-parallel replicas and replica index */
    int node, nodes;      /* this rank's node (0 .. nodes-1, in world order) and the job's nodes */
    int cp_nodes;         /* most nodes one CP group spans: 1 = every all-to-all inside a node */
    char node_desc[256];  /* e.g. "upn0 (ranks 0-1), upn1 (ranks 2-3)", cut with "..." */
    double cp_across;     /* of all (rank, CP peer) pairs, the share on different nodes */
    double world_across;  /* of all (rank, other rank) pairs, the share on different nodes */
    comm_stat stats[COMM_KIND_COUNT];
    /* for the line that names a lost peer: each world rank's rank in the caller's communicator
     * (messages use MPI's own ranks) and node, the nodes' names; the probes' communicator (a
     * duplicate of world) with one receive per peer posted from comm_init to comm_free */
    int *mpi_rank, *node_of;
    char *node_names; /* nodes x MPI_MAX_PROCESSOR_NAME */
    MPI_Comm probe;
    MPI_Request *probe_req; /* R, MPI_REQUEST_NULL for this rank */
    int *probe_buf;
    int probe_key; /* MPI_COMM_SELF's attribute that cancels them in MPI_Finalize */
    /* comm moves host memory. staged: the tensors its callers exchange live in a device's space
     * (ranks on a GPU, DESIGN.md §11 "Ranks on a GPU"), so parallel/ and model/ copy them
     * through host stages around each exchange, and the pipe is off; set by the front after
     * comm_init (or by UPIPE_COMM_STAGE=1 on the CPU: the same path, for the tests), not read by
     * comm itself. */
    int staged;
    /* The exchanges go through NCCL instead (ranks with GPUs of their own): the backend's
     * communicators of the world and of this rank's CP group (NULL: none), made by the front;
     * parallel/ and model/ call the backend's coll_* ops with them. */
    void *nccl_world, *nccl_cp;
} comm_ctx;

/* MPI_Init_thread for a command (not collective before it returns; MPI_Finalize is the
 * caller's): MPI_THREAD_FUNNELED, which upipe relies on (only the main thread calls MPI; the
 * offload I/O thread and the OpenMP threads never do). An MPI library that provides less stops
 * every rank with one line saying so (exit status 1). Sets the rank of messages (up_set_rank)
 * and returns the rank and size of MPI_COMM_WORLD. */
void comm_mpi_init(int *argc, char ***argv, int *rank, int *world);

/* P must divide R (validated by the caller with a user message first; checked here again).
 * Collective over parent. */
void comm_init(comm_ctx *c, MPI_Comm parent, int P);
void comm_free(comm_ctx *c);
/* The bytes per step of collective kind k (per_rank: what one rank sends, as comm_stats counts
 * it) as all ranks together move them inside a node and across nodes: the all-to-all of a CP
 * group sends equal blocks to each peer of the group, the world's collectives (gradient
 * all-reduce, FSDP's gathers and reduce-scatters) counted as the same exchange between every
 * pair of ranks. Which bytes the layout keeps off the network, not what MPI's algorithm puts on
 * it (a ring or a node-aware tree moves other amounts). */
void comm_split_nodes(const comm_ctx *c, comm_kind k, double per_rank, double *inside,
                      double *across);
void comm_reset_stats(comm_ctx *c);
double comm_seconds(const comm_ctx *c); /* sum over kinds */
const char *comm_kind_name(comm_kind k);

/* The all-to-all of the CP group (UPipe's and Ulysses' exchanges, DESIGN.md §2): P blocks of n
 * elements of dt, block j of send to CP rank j and block j of recv from it (this rank's own block
 * copied); what the blocks hold is the caller's (parallel/heads.h packs the heads). The two
 * directions move bytes alike and differ in the kind they are counted in, and in the name the
 * messages give them: comm_seq_to_head before attention, comm_head_to_seq after it. bf16 moves
 * its 16 bits: half the bytes of fp32 (DESIGN.md §5.1). overwrite recv. */
void comm_seq_to_head(comm_ctx *c, const void *send, void *recv, size_t n, mem_dtype dt);
void comm_head_to_seq(comm_ctx *c, const void *send, void *recv, size_t n, mem_dtype dt);
/* The same exchanges, non-blocking (UPipe's pipe, DESIGN.md §3): an exchange in flight is P-1
 * receives and P-1 sends posted at once over the CP group (tag: tells apart the exchanges in
 * flight together; every rank starts them in the same order). comm_exchange_init gives x room
 * for one exchange, comm_exchange_free releases it. The starts post the transfers; send, recv
 * belong to the exchange until comm_exchange_wait completes it. MPI advances it only inside MPI
 * calls: comm_exchange_test in between lets it progress (1 when complete). The start and the
 * wait are counted in the direction's kind (the time not hidden); the tests are not. P > 1. */
typedef struct {
    MPI_Request *req; /* 2 * P */
    int n;            /* requests in flight, 0: none */
    comm_kind kind;   /* the direction, where the wait's time is counted */
} comm_exchange;
void comm_exchange_init(const comm_ctx *c, comm_exchange *x);
void comm_exchange_free(comm_exchange *x);
void comm_seq_to_head_start(comm_ctx *c, const void *send, void *recv, size_t n, mem_dtype dt,
                            int tag, comm_exchange *x);
void comm_head_to_seq_start(comm_ctx *c, const void *send, void *recv, size_t n, mem_dtype dt,
                            int tag, comm_exchange *x);
int comm_exchange_test(comm_ctx *c, comm_exchange *x);
void comm_exchange_wait(comm_ctx *c, comm_exchange *x);
/* Adds to kind k's statistics the work of an exchange done outside comm (parallel/heads.c's
 * packing, or the copy that is the whole exchange on one rank): seconds, and calls (1 when no
 * collective ran and counted the call). */
void comm_stat_add(comm_ctx *c, comm_kind k, double seconds, long calls);

/* Sum of g (n floats) over all ranks of the world, in place, in pieces of at most
 * COMM_REDUCE_CHUNK floats: MPI's all-reduce holds a temporary as large as its message, so the
 * pieces bound it (each element's sum has the same order whatever the piece). */
enum { COMM_REDUCE_CHUNK = 1 << 20 };
void comm_reduce_grads(comm_ctx *c, float *g, size_t n);
/* Sum of the loss sum and the valid-target count over all ranks, in place. */
void comm_reduce_loss(comm_ctx *c, double *loss_sum, long long *count);
/* A collective in flight (comm_allgather_start), completed by comm_wait. */
typedef struct {
    MPI_Request r;
} comm_req;
#define COMM_REQ_NULL ((comm_req){MPI_REQUEST_NULL})

/* FSDP over the whole world (DESIGN.md §4.5). All-gather of equal shards of n floats:
 * full (R * n elements of dt) receives rank i's shard at i * n; shard NULL: each rank's shard is
 * already in its place in full (the gather runs in place). The start variant returns at once; the
 * gather is complete after comm_wait (time is counted there). */
void comm_allgather_start(comm_ctx *c, const void *shard, void *full, size_t n, mem_dtype dt,
                          comm_req *req);
void comm_wait(comm_ctx *c, comm_req *req, comm_kind kind);
/* Reduce-scatter: full (R * n) summed over ranks, this rank's block i = rank lands in shard (n),
 * overwriting it; each element summed in rank order (x_0 + x_1 + ... + x_{R-1}: the same bits
 * on any network). recv (n floats) is the caller's buffer for the blocks received. Polled: a
 * lost peer is named (see above). */
void comm_reduce_scatter(comm_ctx *c, const float *full, float *shard, float *recv, size_t n);
/* Bytes MPI holds inside the collectives above for a gradient reduction of n floats (plain or
 * data parallel): counted in the `comm` category so that the plan bounds the real RSS
 * (DESIGN.md §5). 0 on one rank. */
size_t comm_reduce_temp_bytes(const comm_ctx *c, size_t n);
/* Sum of one double over the world, in place (e.g. the squared gradient norm of shards). */
void comm_sum_double(comm_ctx *c, double *v);
/* Sum of n doubles over the world, in place (evaluation statistics: counts and loss sums). */
void comm_sum_doubles(comm_ctx *c, double *v, int n);

/* Rank 0's n bytes to every rank of the world (cp_group 0) or of this rank's CP group (1), in
 * place. Blocking: for start-up (e.g. an NCCL communicator's id). */
void comm_bcast_bytes(comm_ctx *c, int cp_group, void *buf, size_t n);

/* 1 when flag is non-zero on any rank of the world (a collective verdict). */
int comm_any(comm_ctx *c, int flag);

/* Min over the world of one int (e.g. the first tensor some rank found bad). */
int comm_min_int(comm_ctx *c, int v);

/* Max over the world of n unsigned 64-bit values, in place (memory reports). */
void comm_max_u64(comm_ctx *c, unsigned long long *v, int n);

/* Point to point over the world (not collective), for a stream that rank 0 gathers piece by
 * piece (the trace, core/trace.h): n bytes to rank dest, or from rank src, with tag. Blocking;
 * n must fit MPI's int count. Not counted in the statistics. */
void comm_send_bytes(comm_ctx *c, const void *buf, size_t n, int dest, int tag);
void comm_recv_bytes(comm_ctx *c, void *buf, size_t n, int src, int tag);

/* Starts the profiler trace (trace_start, core/trace.h) on a comm_ctx of its own, a duplicate of
 * c's world, so its messages never mix with the run's; trace_finish frees it. Collective over
 * the world; returns what trace_start returns. */
int comm_trace_start(comm_ctx *c, const char *path, int io_track, char *err, size_t errlen);

/* Bitwise XOR over the world of n unsigned 32-bit values, in place (the placed CRCs of the
 * ranges each rank wrote or read of a checkpoint file, core/crc32c.h). */
void comm_xor_u32(comm_ctx *c, uint32_t *v, int n);

#endif
