/* liveness.c — the polled waits and the probes that name a lost peer (DESIGN.md §8.3, comm.h):
 * every wait that can hang completes by MPI_Test in a loop, and past the watchdog's limit the
 * rank probes the peers of the group it waits on. */
#include "comm/comm_int.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { COMM_PROBE_TAG = 7 }; /* the probes' communicator carries nothing else */

static int group_size(const comm_ctx *c, comm_group g) {
    return g == GROUP_CP ? c->P : c->R;
}

static int group_member(const comm_ctx *c, comm_group g, int i) {
    return g == GROUP_CP ? c->dp_rank * c->P + i : i;
}

/* Posts again the probes' receives that a peer's probe matched (comm_probes_post), so that a rank
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

/* comm_int.h; past the watchdog's limit, wait_hung. */
void comm_wait_polled(comm_ctx *c, comm_group g, int n, MPI_Request *req, const char *func,
                      const char *routine) {
    double first[2] = {0, 0}; /* the wait and its limit when every peer answered, 0: not yet */
    watchdog_enter_polled(func, routine);
    for (int i = 0, polls = 0; i < n;) {
        int done = 0;
        int rc = MPI_Test(&req[i], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) comm_mpi_failed(__FILE__, __LINE__, func, routine, rc);
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
void comm_probes_post(comm_ctx *c) {
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

void comm_probes_free(comm_ctx *c) {
    if (c->probe_req) { /* cancels the probes' receives (probes_at_finalize) */
        MPI_Comm_delete_attr(MPI_COMM_SELF, c->probe_key);
        MPI_Comm_free_keyval(&c->probe_key);
    }
    if (c->probe != MPI_COMM_NULL && c->probe) MPI_Comm_free(&c->probe);
    free(c->probe_req);
    free(c->probe_buf);
    c->probe_req = NULL;
    c->probe_buf = NULL;
}
