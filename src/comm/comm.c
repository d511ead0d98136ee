/* comm.c — start-up and topology: MPI's initialisation, the world ordered node by node and its
 * CP and DP groups (DESIGN.md §8.3), the statistics per kind of collective (comm.h). */
#include "comm/comm_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_kind_names[COMM_KIND_COUNT] = {"seq_to_head", "head_to_seq", "grad_reduce",
                                                    "loss_reduce", "fsdp_gather", "fsdp_reduce",
                                                    "other"};

const char *comm_kind_name(comm_kind k) {
    return g_kind_names[k];
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
    comm_install_stop_hooks(); /* a stop from here on reaches every rank */
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
    comm_probes_post(c);
}

void comm_split_nodes(const comm_ctx *c, comm_kind k, double per_rank, double *inside,
                      double *across) {
    double all = per_rank * c->R;
    double f = k == COMM_SEQ_TO_HEAD || k == COMM_HEAD_TO_SEQ ? c->cp_across : c->world_across;
    *across = all * f;
    *inside = all - *across;
}

void comm_free(comm_ctx *c) {
    comm_probes_free(c);
    if (c->a2a != MPI_COMM_NULL && c->a2a) MPI_Comm_free(&c->a2a);
    if (c->rs != MPI_COMM_NULL && c->rs) MPI_Comm_free(&c->rs);
    free(c->rs_req);
    free(c->a2a_req);
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

void comm_stat_add(comm_ctx *c, comm_kind k, double seconds, long calls) {
    c->stats[k].seconds += seconds;
    c->stats[k].calls += calls;
}
