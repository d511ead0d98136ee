#include "comm/comm.h"

#include "core/check.h"
#include "core/trace.h"
#include "core/watchdog.h"

#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { COMM_PROBE_TAG = 7 }; /* the probes' communicator carries nothing else */

static const char *g_kind_names[COMM_KIND_COUNT] = {"seq_to_head", "head_to_seq", "grad_reduce",
                                                    "loss_reduce", "fsdp_gather", "fsdp_reduce",
                                                    "other"};

const char *comm_kind_name(comm_kind k) {
    return g_kind_names[k];
}

/* One line for a failed MPI call: the phase and step (the watchdog's), the routine, the function
 * that called it, MPI's error class and the last line of its error stack (at run time a peer
 * that died or cannot be reached: a lost node, a killed rank). Stops every rank. */
static UP_NORETURN void mpi_failed(const char *file, int line, const char *func, const char *call,
                                   int rc) {
    char phase[96], stack[MPI_MAX_ERROR_STRING], cls[MPI_MAX_ERROR_STRING], routine[64];
    int len = 0, ec = 0;
    watchdog_phase_describe(phase, sizeof phase);
    MPI_Error_string(rc, stack, &len);
    MPI_Error_class(rc, &ec);
    MPI_Error_string(ec, cls, &len);
    snprintf(routine, sizeof routine, "%.*s", (int)strcspn(call, "("), call);
    /* the stack's last line that says something ("MPIR_Bcast_intra_binomial(174): Failure
     * during collective"; the first line repeats the class) */
    const char *last = NULL;
    char *p = strchr(stack, '\n');
    while (p) {
        char *ln = p + 1, *nl = strchr(ln, '\n'), *say;
        if (nl) *nl = 0;
        if ((say = strstr(ln, ": ")) != NULL && say[2]) last = say + 2;
        p = nl;
    }
    up_fatal(file, line, "%s%s%s in %s failed: %s%s%s%s", phase, phase[0] ? ": " : "", routine,
             func, cls, last ? " (" : "", last ? last : "", last ? ")" : "");
}

/* Stops every rank with one line when an MPI call fails; the watchdog knows which call the rank
 * is in (func: the function that called it). */
#define MPI_CALL_IN(func, call)                                                                    \
    do {                                                                                           \
        watchdog_enter(func, #call);                                                               \
        int rc_ = (call);                                                                          \
        watchdog_leave();                                                                          \
        if (rc_ != MPI_SUCCESS) mpi_failed(__FILE__, __LINE__, func, #call, rc_);                  \
    } while (0)
#define MPI_CALL(call) MPI_CALL_IN(__func__, call)

/* The groups a wait runs over, as world ranks (no MPI call needed to list them). */
typedef enum { GROUP_WORLD, GROUP_CP } comm_group;

static int group_size(const comm_ctx *c, comm_group g) {
    return g == GROUP_CP ? c->P : c->R;
}

static int group_member(const comm_ctx *c, comm_group g, int i) {
    return g == GROUP_CP ? c->dp_rank * c->P + i : i;
}

/* Posts again the probes' receives that a peer's probe matched (probes_post), so that a rank
 * answers every round of probes (wait_hung probes twice), not only the first. Errors are left to
 * the probe that meets them. */
static void probes_repost(comm_ctx *c) {
    for (int j = 0; c->probe_req && j < c->R; j++) {
        int done = 0;
        if (c->probe_req[j] == MPI_REQUEST_NULL) continue;
        if (MPI_Test(&c->probe_req[j], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) continue;
        if (done && MPI_Irecv(&c->probe_buf[j], 1, MPI_INT, j, COMM_PROBE_TAG, c->probe,
                              &c->probe_req[j]) != MPI_SUCCESS)
            c->probe_req[j] = MPI_REQUEST_NULL;
    }
}

/* Marks in lost (one per member of g) the peers that do not match a probe within COMM_PROBE_S
 * and returns their count. A probe that fails (MPI could not reach the peer) counts as no answer.
 * The requests still pending are left: the process stops right after. */
static int find_lost(comm_ctx *c, comm_group g, char *lost) {
    static const int token = 1; /* an MPI_Issend's buffer, unchanged until it completes */
    int n = group_size(c, g), nlost = 0, pending = 1;
    MPI_Request *req = malloc((size_t)n * sizeof *req);
    UP_CHECK(req, "out of memory");
    probes_repost(c);
    for (int i = 0; i < n; i++) {
        int w = group_member(c, g, i);
        req[i] = MPI_REQUEST_NULL;
        lost[i] = w != c->rank && MPI_Issend(&token, 1, MPI_INT, w, COMM_PROBE_TAG, c->probe,
                                             &req[i]) != MPI_SUCCESS;
    }
    for (double t0 = MPI_Wtime(); pending && MPI_Wtime() - t0 < COMM_PROBE_S;) {
        pending = 0;
        for (int i = 0; i < n; i++) {
            int done = 0;
            if (req[i] == MPI_REQUEST_NULL) continue;
            if (MPI_Test(&req[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                lost[i] = 1;
                req[i] = MPI_REQUEST_NULL;
            } else if (!done) {
                pending = 1;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        lost[i] |= req[i] != MPI_REQUEST_NULL;
        nlost += lost[i];
    }
    free(req);
    return nlost;
}

/* Formats at buf + at, cut at len; returns where the text ends (at most len - 1). */
static UP_PRINTF(4, 5) size_t append(char *buf, size_t len, size_t at, const char *fmt, ...) {
    if (at + 1 >= len) return at;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + at, len - at, fmt, ap);
    va_end(ap);
    return n < 0 ? at : at + (size_t)n < len ? at + (size_t)n : len - 1;
}

/* Writes into buf the MPI ranks of the lost members of g in order, runs of three or more as
 * ranges ("ranks 2, 3", "ranks 8-15"), and their nodes ("(node upn1)"). */
static void describe_lost(const comm_ctx *c, comm_group g, const char *lost, int nlost, char *buf,
                          size_t len) {
    int n = group_size(c, g), k = 0, *r = malloc((size_t)nlost * sizeof *r);
    char *seen = calloc((size_t)c->nodes, 1);
    UP_CHECK(r && seen, "out of memory");
    int nodes = 0;
    for (int i = 0; i < n; i++)
        if (lost[i]) {
            r[k++] = c->mpi_rank[group_member(c, g, i)];
            nodes += !seen[c->node_of[group_member(c, g, i)]]++;
        }
    for (int a = 1; a < k; a++) /* sorted: MPI's ranks need not follow the layout's */
        for (int b = a; b > 0 && r[b - 1] > r[b]; b--) {
            int t = r[b];
            r[b] = r[b - 1];
            r[b - 1] = t;
        }
    size_t at = append(buf, len, 0, "rank%s", k > 1 ? "s" : "");
    for (int a = 0, b; a < k; a = b) {
        for (b = a + 1; b < k && r[b] == r[b - 1] + 1; b++) {
        }
        if (b - a < 3) b = a + 1; /* a run of two is listed one by one */
        if (b - a == 1)
            at = append(buf, len, at, "%s %d", a ? "," : "", r[a]);
        else
            at = append(buf, len, at, "%s %d-%d", a ? "," : "", r[a], r[b - 1]);
    }
    const char *sep = nodes > 1 ? " (nodes " : " (node ";
    for (int m = 0; m < c->nodes; m++)
        if (seen[m]) {
            at = append(buf, len, at, "%s%s", sep,
                        c->node_names + (size_t)m * MPI_MAX_PROCESSOR_NAME);
            sep = ", ";
        }
    append(buf, len, at, ")");
    free(r);
    free(seen);
}

/* A wait on group g past the watchdog's limit: the peers that do not answer a probe are named in
 * one line (the phase, the routine, the calling function, the wait and its limit) and the job
 * stops (up_die: MPI_Abort, status 1). When every peer answers, one of them most likely waits
 * itself, on a rank that is lost, and names it once its own probes (COMM_PROBE_S) are done: a
 * rank that stopped the job at once would win that race with a line that names no one (measured:
 * a rank waiting on its node's peer, in an all-to-all, while that peer probed a node whose link
 * was down). So the first time (first[0] == 0) the wait goes on for max(limit, 2 x COMM_PROBE_S)
 * more and this returns, keeping in first the seconds waited and the limit; the second time the
 * line says the ranks are alive but one waits elsewhere. */
static void wait_hung(comm_ctx *c, comm_group g, const char *func, const char *routine, double idle,
                      double limit, double first[2]) {
    char phase[96], who[512];
    int n = group_size(c, g);
    char *lost = calloc((size_t)n, 1);
    UP_CHECK(lost, "out of memory");
    watchdog_phase_describe(phase, sizeof phase);
    int nlost = find_lost(c, g, lost);
    if (nlost == 0 && first[0] == 0) {
        free(lost);
        first[0] = idle;
        first[1] = limit;
        watchdog_wait_again(2.0 * COMM_PROBE_S);
        return;
    }
    if (nlost == 0) {
        snprintf(who, sizeof who,
                 "every peer answered a probe after %.1f s and again now: the ranks are alive but "
                 "one waits elsewhere (a collective called out of order) or MPI itself hangs",
                 first[0]);
    } else {
        char ranks[400];
        describe_lost(c, g, lost, nlost, ranks, sizeof ranks);
        snprintf(who, sizeof who,
                 "no answer from %s within %.0f s: the link to %s is down, or %s lost or stalled",
                 ranks, COMM_PROBE_S, nlost > 1 ? "them" : "it", nlost > 1 ? "they are" : "it is");
    }
    free(lost);
    up_die("watchdog: %s: no progress for %.1f s in %s (%s, %d ranks; limit %.1f s, --watchdog "
           "%g): %s; resume from the last checkpoint",
           phase, first[0] + idle, routine, func, n, first[0] > 0 ? first[1] : limit,
           watchdog_floor(), who);
}

/* Completes the n requests of a wait on group g by testing them in a loop: MPI_Wait would hold
 * the main thread inside MPI, where nothing could find out which peer is missing. Past the
 * watchdog's limit the wait stops the job naming the peers that do not answer (wait_hung). func:
 * the calling function, routine: the MPI routine that started the requests. */
static void wait_polled(comm_ctx *c, comm_group g, int n, MPI_Request *req, const char *func,
                        const char *routine) {
    double first[2] = {0, 0}; /* the wait and its limit when every peer answered, 0: not yet */
    watchdog_enter_polled(func, routine);
    for (int i = 0, polls = 0; i < n;) {
        int done = 0;
        int rc = MPI_Test(&req[i], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) mpi_failed(__FILE__, __LINE__, func, routine, rc);
        double idle, limit;
        if (done)
            i++;
        else if (watchdog_overdue(&idle, &limit))
            wait_hung(c, g, func, routine, idle, limit, first);
        else if (++polls % 1000 == 0) {
            sched_yield(); /* as MPICH's own busy waits do (MPIR_CVAR_POLLS_BEFORE_YIELD): a
                            * rank sharing its core lets the peer it waits for run */
            if (polls % 16000 == 0) probes_repost(c); /* a peer may probe this rank again */
        }
    }
    watchdog_leave();
}

/* In-place all-reduce over the world: MPI_Iallreduce, which sums in the same order as
 * MPI_Allreduce in MPICH (measured bit for bit, 1 to 2^20 floats and doubles, 2 to 4 ranks on
 * one node and across two), completed by wait_polled. */
static void allreduce(comm_ctx *c, void *buf, int n, MPI_Datatype t, MPI_Op op, const char *func) {
    MPI_Request q;
    MPI_CALL_IN(func, MPI_Iallreduce(MPI_IN_PLACE, buf, n, t, op, c->world, &q));
    wait_polled(c, GROUP_WORLD, 1, &q, func, "MPI_Iallreduce");
}

static const char *thread_level_name(int level) {
    return level == MPI_THREAD_SINGLE       ? "MPI_THREAD_SINGLE"
           : level == MPI_THREAD_FUNNELED   ? "MPI_THREAD_FUNNELED"
           : level == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
           : level == MPI_THREAD_MULTIPLE   ? "MPI_THREAD_MULTIPLE"
                                            : "an unknown level";
}

void comm_mpi_init(int *argc, char ***argv, int *rank, int *world) {
    int provided = MPI_THREAD_SINGLE;
    MPI_CALL(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    MPI_CALL(MPI_Comm_rank(MPI_COMM_WORLD, rank));
    MPI_CALL(MPI_Comm_size(MPI_COMM_WORLD, world));
    up_set_rank(*rank, *world);
    /* every rank runs the same library: the same verdict everywhere, rank 0 says it */
    if (provided < MPI_THREAD_FUNNELED)
        up_die_all("the MPI library provides %s (%d) but upipe needs MPI_THREAD_FUNNELED (the "
                   "main thread calls MPI while the offload I/O and OpenMP threads run): use an "
                   "MPI built with thread support",
                   thread_level_name(provided), provided);
}

/* This rank's place in the node-by-node order of parent (comm.h): the nodes ordered by their
 * lowest rank, each node's ranks in parent's order. Sets c->node and c->nodes. */
static int node_order(comm_ctx *c, MPI_Comm parent) {
    int prank, R, leader;
    MPI_Comm node;
    MPI_CALL(MPI_Comm_rank(parent, &prank));
    MPI_CALL(MPI_Comm_size(parent, &R));
    MPI_CALL(MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, prank, MPI_INFO_NULL, &node));
    MPI_CALL(MPI_Allreduce(&prank, &leader, 1, MPI_INT, MPI_MIN, node));
    MPI_Comm_free(&node);
    int *leaders = calloc((size_t)R, sizeof *leaders);
    UP_CHECK(leaders, "out of memory");
    MPI_CALL(MPI_Allgather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, parent));
    int key = 0;
    c->node = c->nodes = 0;
    for (int j = 0; j < R; j++) {
        if (leaders[j] < leader || (leaders[j] == leader && j < prank)) key++;
        if (leaders[j] == j) { /* j leads its node */
            c->nodes++;
            if (j < leader) c->node++;
        }
    }
    free(leaders);
    return key;
}

/* The nodes' names (MPI_Get_processor_name) with their world ranks, and how many nodes the
 * widest CP group spans. */
static void node_describe(comm_ctx *c) {
    char me[MPI_MAX_PROCESSOR_NAME] = {0};
    int len = 0;
    MPI_CALL(MPI_Get_processor_name(me, &len));
    char *names = calloc((size_t)c->R, MPI_MAX_PROCESSOR_NAME);
    int *nodes = calloc((size_t)c->R, sizeof *nodes);
    UP_CHECK(names && nodes, "out of memory");
    MPI_CALL(MPI_Allgather(me, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME,
                           MPI_CHAR, c->world));
    MPI_CALL(MPI_Allgather(&c->node, 1, MPI_INT, nodes, 1, MPI_INT, c->world));
    size_t at = 0, cap = sizeof c->node_desc;
    for (int a = 0, b; a < c->R && at < cap; a = b) {
        for (b = a; b < c->R && nodes[b] == nodes[a]; b++) {
        }
        if (nodes[a] >= 3 && c->nodes > 4) { /* the first three and the last node */
            if (nodes[a] != c->nodes - 1) continue;
            at += (size_t)snprintf(c->node_desc + at, cap - at, ", ...");
        }
        char ranks[48];
        if (b - a == 1)
            snprintf(ranks, sizeof ranks, "rank %d", a);
        else
            snprintf(ranks, sizeof ranks, "ranks %d-%d", a, b - 1);
        if (at < cap)
            at += (size_t)snprintf(c->node_desc + at, cap - at, "%s%s (%s)", a ? ", " : "",
                                   names + (size_t)a * MPI_MAX_PROCESSOR_NAME, ranks);
    }
    if (at >= cap) memcpy(c->node_desc + cap - 4, "...", 4); /* cut */
    /* CP group d holds world ranks d*P .. d*P+P-1: count the node changes along it */
    int widest = 1;
    for (int d = 0; d < c->D; d++) {
        int spans = 1;
        for (int r = 1; r < c->P; r++)
            spans += nodes[d * c->P + r] != nodes[d * c->P + r - 1];
        widest = spans > widest ? spans : widest;
    }
    c->cp_nodes = widest;
    /* pairs on different nodes: CP peers (within each group), and any two ranks */
    double cp_pairs = 0, cp_cross = 0, pairs = 0, cross = 0;
    for (int a = 0; a < c->R; a++)
        for (int b = 0; b < c->R; b++) {
            if (a == b) continue;
            int apart = nodes[a] != nodes[b];
            pairs++;
            cross += apart;
            if (a / c->P == b / c->P) {
                cp_pairs++;
                cp_cross += apart;
            }
        }
    c->cp_across = cp_pairs > 0 ? cp_cross / cp_pairs : 0;
    c->world_across = pairs > 0 ? cross / pairs : 0;
    /* kept for the line that names a lost peer: each rank's node, each node's name */
    c->node_names = calloc((size_t)c->nodes, MPI_MAX_PROCESSOR_NAME);
    UP_CHECK(c->node_names, "out of memory");
    for (int a = c->R - 1; a >= 0; a--)
        memcpy(c->node_names + (size_t)nodes[a] * MPI_MAX_PROCESSOR_NAME,
               names + (size_t)a * MPI_MAX_PROCESSOR_NAME, MPI_MAX_PROCESSOR_NAME);
    c->node_of = nodes;
    free(names);
}

/* Cancels the probes' receives nobody sent to: from comm_free, or from MPI_Finalize, which deletes
 * MPI_COMM_SELF's attributes first, when a stop finalizes without comm_free (up_die_all; UCX
 * would warn of requests never returned). */
static int probes_at_finalize(MPI_Comm self, int key, void *ctx, void *extra) {
    (void)self, (void)key, (void)extra;
    comm_ctx *c = ctx;
    for (int j = 0; j < c->R; j++)
        if (c->probe_req[j] != MPI_REQUEST_NULL) {
            MPI_Cancel(&c->probe_req[j]);
            MPI_Wait(&c->probe_req[j], MPI_STATUS_IGNORE);
        }
    return MPI_SUCCESS;
}

/* One receive posted per peer on a duplicate of world, for the probes of a rank whose wait
 * passed the watchdog's limit (find_lost): MPI completes an MPI_Issend only once a receive
 * matched it, so a peer answers whenever its MPI makes progress, whatever it waits in. */
static void probes_post(comm_ctx *c) {
    c->probe = MPI_COMM_NULL;
    if (c->R == 1) return;
    MPI_CALL(MPI_Comm_dup(c->world, &c->probe));
    MPI_CALL(MPI_Comm_set_errhandler(c->probe, MPI_ERRORS_RETURN));
    c->probe_req = malloc((size_t)c->R * sizeof *c->probe_req);
    c->probe_buf = calloc((size_t)c->R, sizeof *c->probe_buf);
    UP_CHECK(c->probe_req && c->probe_buf, "out of memory");
    for (int j = 0; j < c->R; j++) {
        c->probe_req[j] = MPI_REQUEST_NULL;
        if (j != c->rank)
            MPI_CALL(MPI_Irecv(&c->probe_buf[j], 1, MPI_INT, j, COMM_PROBE_TAG, c->probe,
                               &c->probe_req[j]));
    }
    MPI_CALL(
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, probes_at_finalize, &c->probe_key, NULL));
    MPI_CALL(MPI_Comm_set_attr(MPI_COMM_SELF, c->probe_key, c));
}

void comm_init(comm_ctx *c, MPI_Comm parent, int P) {
    memset(c, 0, sizeof *c);
    int key = node_order(c, parent);
    MPI_CALL(MPI_Comm_split(parent, 0, key, &c->world));
    /* errors come back to us (and are explained) instead of aborting inside MPI */
    MPI_CALL(MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN));
    MPI_CALL(MPI_Comm_rank(c->world, &c->rank));
    MPI_CALL(MPI_Comm_size(c->world, &c->R));
    UP_CHECK(P >= 1 && c->R % P == 0, "context-parallel degree %d does not divide %d ranks", P,
             c->R);
    c->P = P;
    c->D = c->R / P;
    c->cp_rank = c->rank % P;
    c->dp_rank = c->rank / P;
    MPI_CALL(MPI_Comm_split(c->world, c->dp_rank, c->cp_rank, &c->cp));
    MPI_CALL(MPI_Comm_split(c->world, c->cp_rank, c->dp_rank, &c->dp));
    MPI_CALL(MPI_Comm_set_errhandler(c->cp, MPI_ERRORS_RETURN));
    MPI_CALL(MPI_Comm_set_errhandler(c->dp, MPI_ERRORS_RETURN));
    MPI_CALL(MPI_Comm_dup(c->cp, &c->a2a));
    MPI_CALL(MPI_Comm_set_errhandler(c->a2a, MPI_ERRORS_RETURN));
    c->a2a_req = calloc((size_t)(2 * P), sizeof *c->a2a_req);
    UP_CHECK(c->a2a_req, "out of memory");
    node_describe(c);
    int prank;
    MPI_CALL(MPI_Comm_rank(parent, &prank));
    c->mpi_rank = calloc((size_t)c->R, sizeof *c->mpi_rank);
    UP_CHECK(c->mpi_rank, "out of memory");
    MPI_CALL(MPI_Allgather(&prank, 1, MPI_INT, c->mpi_rank, 1, MPI_INT, c->world));
    /* comm_reduce_scatter's point-to-point messages, on a duplicate of world of their own */
    MPI_CALL(MPI_Comm_dup(c->world, &c->rs));
    MPI_CALL(MPI_Comm_set_errhandler(c->rs, MPI_ERRORS_RETURN));
    c->rs_req = calloc((size_t)c->R, sizeof *c->rs_req);
    UP_CHECK(c->rs_req, "out of memory");
    probes_post(c);
}

void comm_split_nodes(const comm_ctx *c, comm_kind k, double per_rank, double *inside,
                      double *across) {
    double all = per_rank * c->R;
    double f = k == COMM_SEQ_TO_HEAD || k == COMM_HEAD_TO_SEQ ? c->cp_across : c->world_across;
    *across = all * f;
    *inside = all - *across;
}

void comm_free(comm_ctx *c) {
    if (c->probe_req) { /* cancels the probes' receives (probes_at_finalize) */
        MPI_Comm_delete_attr(MPI_COMM_SELF, c->probe_key);
        MPI_Comm_free_keyval(&c->probe_key);
    }
    if (c->probe != MPI_COMM_NULL && c->probe) MPI_Comm_free(&c->probe);
    if (c->a2a != MPI_COMM_NULL && c->a2a) MPI_Comm_free(&c->a2a);
    if (c->rs != MPI_COMM_NULL && c->rs) MPI_Comm_free(&c->rs);
    free(c->rs_req);
    free(c->a2a_req);
    free(c->probe_req);
    free(c->probe_buf);
    free(c->mpi_rank);
    free(c->node_of);
    free(c->node_names);
    if (c->cp != MPI_COMM_NULL && c->cp) MPI_Comm_free(&c->cp);
    if (c->dp != MPI_COMM_NULL && c->dp) MPI_Comm_free(&c->dp);
    if (c->world != MPI_COMM_NULL && c->world) MPI_Comm_free(&c->world);
    memset(c, 0, sizeof *c);
}

void comm_reset_stats(comm_ctx *c) {
    memset(c->stats, 0, sizeof c->stats);
}

double comm_seconds(const comm_ctx *c) {
    double s = 0;
    for (int k = 0; k < COMM_KIND_COUNT; k++)
        s += c->stats[k].seconds;
    return s;
}

static void count(comm_ctx *c, comm_kind k, double t0, double bytes) {
    c->stats[k].seconds += MPI_Wtime() - t0;
    c->stats[k].bytes += bytes;
    c->stats[k].calls++;
}

/* Heads each rank holds in head layout, and the source head of slot i on rank j. */
static int heads_out(int nh, int P) {
    return nh >= P ? nh / P : 1;
}
static int src_head(int nh, int P, int j, int i) {
    return nh >= P ? j * (nh / P) + i : j * nh / P;
}

/* The MPI type that moves an element of dt: its bytes as one unit of their size (a bf16 as its
 * 16 bits). */
static MPI_Datatype mpi_type(mem_dtype dt) {
    size_t size = mem_dtype_size(dt);
    UP_CHECK(size == 2 || size == 4, "comm: no MPI type moves elements of %zu bytes", size);
    return size == 2 ? MPI_UINT16_T : MPI_FLOAT;
}

size_t comm_pack_floats(const comm_ctx *c, int T_loc, int nh, int HS) {
    return up_mul3((size_t)T_loc, (size_t)heads_out(nh, c->P) * (size_t)c->P, (size_t)HS);
}

static size_t block_floats(int T_loc, int nh_out, int HS) {
    return up_mul3((size_t)T_loc, (size_t)nh_out, (size_t)HS);
}

static int block_count(size_t n) {
    UP_CHECK(n <= INT_MAX,
             "all-to-all block of %zu floats exceeds MPI's int count: use more "
             "context-parallel ranks or smaller stages",
             n);
    return (int)n;
}

/* The part both exchanges share: the layout check, and with P == 1 (one layout) a plain copy.
 * Returns 1 when that finished the exchange. */
static int exchange_trivial(comm_ctx *c, comm_kind kind, const void *send, void *recv, int T_loc,
                            int nh, int HS, mem_dtype dt, double t0) {
    UP_CHECK(nh % c->P == 0 || c->P % nh == 0, "%d heads cannot be spread over %d ranks", nh, c->P);
    if (c->P > 1) return 0;
    memcpy(recv, send, mem_dtype_bytes(dt, block_floats(T_loc, nh, HS)));
    count(c, kind, t0, 0);
    return 1;
}

/* Packs send (T_loc, nh, HS) for comm_seq_to_head: block j (T_loc, nh_out, HS) holds the heads
 * rank j owns. Returns the floats of one block (an MPI int count). */
static int seq_to_head_pack(const comm_ctx *c, const void *send, int T_loc, int nh, int HS,
                            mem_dtype dt, void *pack) {
    int P = c->P, nh_out = heads_out(nh, P);
    int n = block_count(block_floats(T_loc, nh_out, HS));
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

/* The blocking all-to-all of the CP group: block j of send (n elements of t) to rank j, block j of
 * recv from it, every receive and send posted at once on the group's own duplicate (a2a: no tag
 * of the pipe's exchanges in flight on cp can meet these) and completed by wait_polled. Moves
 * the same bytes as MPI_Alltoall, which cannot be polled; measured faster on 2 ranks than both
 * MPI_Alltoall and MPI_Ialltoall (5 against 9 and 10 us for blocks of 8192 floats). */
static void alltoall(comm_ctx *c, const void *send, void *recv, int n, MPI_Datatype t,
                     const char *func) {
    int k = post_blocks(c, c->a2a, 0, send, recv, n, t, c->a2a_req, func);
    wait_polled(c, GROUP_CP, k, c->a2a_req, func, "MPI_Irecv/MPI_Isend");
}

void comm_seq_to_head(comm_ctx *c, const void *send, void *recv, int T_loc, int nh, int HS,
                      mem_dtype dt, void *pack) {
    double t0 = MPI_Wtime();
    uint64_t tt = trace_begin(); /* P == 1: a copy, not traced */
    if (exchange_trivial(c, COMM_SEQ_TO_HEAD, send, recv, T_loc, nh, HS, dt, t0)) return;
    int n = seq_to_head_pack(c, send, T_loc, nh, HS, dt, pack);
    // block i received from rank i covers tokens i*T_loc..: the blocks in rank order are
    // already (T, nh_out, HS)
    double t1 = MPI_Wtime();
    alltoall(c, pack, recv, n, mpi_type(dt), __func__);
    c->stats[COMM_SEQ_TO_HEAD].mpi_seconds += MPI_Wtime() - t1;
    double bytes = (double)mem_dtype_bytes(dt, (size_t)n) * (c->P - 1);
    count(c, COMM_SEQ_TO_HEAD, t0, bytes);
    trace_end2(tt, "comm", "a2a_seq_to_head", "bytes", (int64_t)bytes, "heads", nh);
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
 * elements), the bytes counted from t0 and the call left to the wait. */
static void exchange_post(comm_ctx *c, comm_kind k, int tag, const void *send, void *recv, int n,
                          mem_dtype dt, comm_exchange *x, double t0, const char *func) {
    x->kind = k;
    double t1 = MPI_Wtime();
    x->n = post_blocks(c, c->cp, tag, send, recv, n, mpi_type(dt), x->req, func);
    c->stats[k].mpi_seconds += MPI_Wtime() - t1;
    count(c, k, t0, (double)mem_dtype_bytes(dt, (size_t)n) * (c->P - 1));
    c->stats[k].calls--; /* counted once, at the wait */
}

void comm_seq_to_head_start(comm_ctx *c, const void *send, void *recv, int T_loc, int nh, int HS,
                            mem_dtype dt, void *pack, int tag, comm_exchange *x) {
    double t0 = MPI_Wtime();
    UP_CHECK(x->req && x->n == 0, "comm_seq_to_head_start: exchange not initialised or in use");
    if (exchange_trivial(c, COMM_SEQ_TO_HEAD, send, recv, T_loc, nh, HS, dt, t0)) {
        c->stats[COMM_SEQ_TO_HEAD].calls--; /* counted once, at the wait */
        return;
    }
    int n = seq_to_head_pack(c, send, T_loc, nh, HS, dt, pack);
    // every receive and send posted at once (MPI_Ialltoall's pairwise rounds over 4 ranks would
    // each wait for both peers to enter MPI: measured, hardly any finished during attention)
    exchange_post(c, COMM_SEQ_TO_HEAD, tag, pack, recv, n, dt, x, t0, __func__);
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
    wait_polled(c, GROUP_CP, x->n, x->req, __func__, "MPI_Irecv/MPI_Isend");
    x->n = 0;
    c->stats[x->kind].mpi_seconds += MPI_Wtime() - t0;
    count(c, x->kind, t0, 0);
    trace_end(tt, "comm", "a2a_wait");
}

/* Unpacks comm_head_to_seq's received blocks: pack (P blocks of (T_loc, nh_out, HS), block j
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

void comm_head_to_seq(comm_ctx *c, const void *send, void *recv, int T_loc, int nh, int HS,
                      mem_dtype dt, void *pack) {
    double t0 = MPI_Wtime();
    uint64_t tt = trace_begin(); /* P == 1: a copy, not traced */
    if (exchange_trivial(c, COMM_HEAD_TO_SEQ, send, recv, T_loc, nh, HS, dt, t0)) return;
    int n = block_count(block_floats(T_loc, heads_out(nh, c->P), HS));
    // block j of send (tokens j*T_loc..) goes to rank j as is
    double t1 = MPI_Wtime();
    alltoall(c, send, pack, n, mpi_type(dt), __func__);
    c->stats[COMM_HEAD_TO_SEQ].mpi_seconds += MPI_Wtime() - t1;
    head_to_seq_unpack(c, pack, recv, T_loc, nh, HS, dt);
    double bytes = (double)mem_dtype_bytes(dt, (size_t)n) * (c->P - 1);
    count(c, COMM_HEAD_TO_SEQ, t0, bytes);
    trace_end2(tt, "comm", "a2a_head_to_seq", "bytes", (int64_t)bytes, "heads", nh);
}

void comm_head_to_seq_start(comm_ctx *c, const void *send, int T_loc, int nh, int HS, mem_dtype dt,
                            void *pack, int tag, comm_exchange *x) {
    double t0 = MPI_Wtime();
    UP_CHECK(x->req && x->n == 0, "comm_head_to_seq_start: exchange not initialised or in use");
    UP_CHECK(c->P > 1, "comm_head_to_seq_start: one rank has nothing to exchange");
    UP_CHECK(nh % c->P == 0 || c->P % nh == 0, "%d heads cannot be spread over %d ranks", nh, c->P);
    int n = block_count(block_floats(T_loc, heads_out(nh, c->P), HS));
    // as comm_seq_to_head_start: every transfer posted at once; block j of send goes to rank j
    exchange_post(c, COMM_HEAD_TO_SEQ, tag, send, pack, n, dt, x, t0, __func__);
}

void comm_head_to_seq_finish(comm_ctx *c, const void *pack, void *recv, int T_loc, int nh, int HS,
                             mem_dtype dt) {
    double t0 = MPI_Wtime();
    head_to_seq_unpack(c, pack, recv, T_loc, nh, HS, dt);
    count(c, COMM_HEAD_TO_SEQ, t0, 0);
    c->stats[COMM_HEAD_TO_SEQ].calls--; /* the wait counted the call */
}

void comm_reduce_grads(comm_ctx *c, float *g, size_t n) {
    if (c->R == 1) return;
    double t0 = MPI_Wtime();
    uint64_t tt = trace_begin();
    for (size_t off = 0; off < n; off += COMM_REDUCE_CHUNK) {
        size_t m = n - off < COMM_REDUCE_CHUNK ? n - off : COMM_REDUCE_CHUNK;
        allreduce(c, g + off, (int)m, MPI_FLOAT, MPI_SUM, __func__);
    }
    count(c, COMM_GRAD_REDUCE, t0, (double)n * sizeof(float));
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
    count(c, COMM_LOSS_REDUCE, t0, sizeof v);
    trace_end1(tt, "comm", "loss_all_reduce", "bytes", (int64_t)sizeof v);
}

static int int_count(size_t n) {
    UP_CHECK(n <= INT_MAX, "a shard of %zu floats exceeds MPI's int count: use more ranks", n);
    return (int)n;
}

void comm_allgather_start(comm_ctx *c, const void *shard, void *full, size_t n, mem_dtype dt,
                          MPI_Request *req) {
    double t0 = MPI_Wtime();
    int k = int_count(n);
    /* shard NULL: rank i's shard is already in place in full (MPI_IN_PLACE) */
    MPI_CALL(MPI_Iallgather(shard ? shard : MPI_IN_PLACE, shard ? k : 0,
                            shard ? mpi_type(dt) : MPI_DATATYPE_NULL, full, k, mpi_type(dt),
                            c->world, req));
    count(c, COMM_FSDP_GATHER, t0, (double)mem_dtype_bytes(dt, n) * (c->R - 1));
    c->stats[COMM_FSDP_GATHER].calls--; /* counted once, at the wait */
}

void comm_wait(comm_ctx *c, MPI_Request *req, comm_kind kind) {
    double t0 = MPI_Wtime();
    wait_polled(c, GROUP_WORLD, 1, req, __func__,
                kind == COMM_FSDP_GATHER ? "MPI_Iallgather" : "MPI_Wait");
    count(c, kind, t0, 0);
}

void comm_reduce_scatter(comm_ctx *c, const float *full, float *shard, float *recv, size_t n) {
    double t0 = MPI_Wtime();
    int R = c->R, me = c->rank, k = int_count(n);
    const float *own = full + (size_t)me * n;
    if (R == 1) {
        memcpy(shard, own, n * sizeof *shard);
        count(c, COMM_FSDP_REDUCE, t0, 0);
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
            wait_polled(c, GROUP_WORLD, 1, &q, __func__, "MPI_Irecv");
            x = recv;
        }
        if (first != MPI_REQUEST_NULL)
            wait_polled(c, GROUP_WORLD, 1, &first, __func__, "MPI_Irecv");
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            shard[i] += x[i];
    }
    wait_polled(c, GROUP_WORLD, R - 1, sreq, __func__, "MPI_Isend");
    count(c, COMM_FSDP_REDUCE, t0, (double)n * sizeof(float) * (R - 1));
}

void comm_sum_double(comm_ctx *c, double *v) {
    if (c->R == 1) return;
    double t0 = MPI_Wtime();
    allreduce(c, v, 1, MPI_DOUBLE, MPI_SUM, __func__);
    count(c, COMM_OTHER, t0, sizeof(double));
}

void comm_sum_doubles(comm_ctx *c, double *v, int n) {
    if (c->R == 1) return;
    double t0 = MPI_Wtime();
    allreduce(c, v, n, MPI_DOUBLE, MPI_SUM, __func__);
    count(c, COMM_OTHER, t0, sizeof(double) * (double)n);
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

void comm_send_bytes(comm_ctx *c, const void *buf, size_t n, int dest, int tag) {
    MPI_Request q;
    MPI_CALL(MPI_Isend(buf, byte_count(n), MPI_BYTE, dest, tag, c->world, &q));
    wait_polled(c, GROUP_WORLD, 1, &q, __func__, "MPI_Isend");
}

void comm_recv_bytes(comm_ctx *c, void *buf, size_t n, int src, int tag) {
    MPI_Request q;
    MPI_CALL(MPI_Irecv(buf, byte_count(n), MPI_BYTE, src, tag, c->world, &q));
    wait_polled(c, GROUP_WORLD, 1, &q, __func__, "MPI_Irecv");
}
