/* evaluate.c — forward-only evaluation over windows (evaluate.h). */
#include "eval/evaluate.h"

#include "core/check.h"
#include "core/mem.h"

#include <math.h>
#include <mpi.h>
#include <string.h>

long eval_windows_available(const token_shard *s, long T) {
    return s->ntok > (size_t)T ? (long)((s->ntok - 1) / (size_t)T) : 0;
}

int eval_detect_recall(const token_shard *s) {
    enum { FIRST = 4096 };
    size_t n = s->ntok < FIRST ? s->ntok : FIRST;
    int32_t tok[FIRST];
    shard_read(s, 0, n, tok);
    return recall_detect(tok, (long)n);
}

void eval_alloc(eval_source *e) {
    model_window win = model_window_of(e->m);
    long T_loc = win.T_loc, T = T_loc * win.P;
    if (e->mask) e->mask_buf = mem_alloc(MEM_WORKSPACE, (size_t)T_loc);
    e->loss = mem_alloc(MEM_WORKSPACE, up_mul((size_t)T_loc, sizeof(double)));
    e->pred = mem_alloc(MEM_WORKSPACE, up_mul((size_t)T_loc, sizeof(int32_t)));
    if (!e->recall) return;
    e->tok = mem_alloc(MEM_WORKSPACE, up_mul((size_t)T + 1, sizeof(int32_t)));
    e->scratch = mem_alloc(MEM_WORKSPACE, recall_scratch_bytes(T));
    e->q =
        mem_alloc(MEM_WORKSPACE, up_mul((size_t)recall_max_questions(T), sizeof(recall_question)));
}

void eval_free(eval_source *e) {
    void *bufs[] = {e->mask_buf, e->loss, e->pred, e->tok, e->scratch, e->q};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        mem_free(bufs[i]);
    e->mask_buf = NULL, e->loss = NULL, e->pred = NULL, e->tok = NULL, e->scratch = NULL;
    e->q = NULL;
}

/* Log-spaced bucket edges over [0, T): 0, 8, 16, 32, ..., T. */
static void stats_init(eval_stats *s, long T, long windows, int recall) {
    memset(s, 0, sizeof *s);
    s->T = T;
    s->windows = windows;
    s->recall = recall;
    s->edge[0] = 0;
    long e = EVAL_FIRST_EDGE;
    while (e < T && s->nb < EVAL_MAX_BUCKETS - 1) {
        s->edge[++s->nb] = e;
        e *= 2;
    }
    s->edge[++s->nb] = T;
}

static int bucket_of(const eval_stats *s, long x) {
    int k = 0;
    while (k + 1 < s->nb && x >= s->edge[k + 1])
        k++;
    return k;
}

/* The recall questions answered on this rank: by distance and position bucket. */
static void score_window(eval_source *e, size_t first, long p0, eval_stats *s) {
    model *m = e->m;
    long T = s->T;
    shard_read(e->shard, first, (size_t)T + 1, e->tok);
    model_window win = model_window_of(m);
    const int32_t *docs = e->doc_sep >= 0 ? win.doc_start : NULL;
    long nq = recall_score(e->tok, T, docs, e->pred, p0, win.T_loc, e->scratch, e->q);
    for (long i = 0; i < nq; i++) {
        int d = bucket_of(s, e->q[i].dist), p = bucket_of(s, e->q[i].pos);
        s->q_n[d][p] += 1;
        s->q_ok[d][p] += e->q[i].correct;
    }
}

/* One window's forward; its figures go into s unless s is NULL (a replica without a window of
 * its own in the last round still runs the collectives). */
static void eval_window(eval_source *e, long w, eval_stats *s, long T) {
    model *m = e->m;
    size_t first = (size_t)w * (size_t)T;
    model_read_window(m, e->shard, e->mask, e->mask_buf, e->doc_sep, first);
    if (e->doc_sep >= 0) model_set_documents(m, (int32_t)e->doc_sep);
    double sum = model_evaluate(m, e->loss, e->pred);
    if (!s) return;
    s->loss_sum += sum;
    model_window win = model_window_of(m);
    long p0 = win.pos0;
    for (int i = 0; i < win.T_loc; i++) {
        if (win.targets[i] < 0) continue;
        int k = bucket_of(s, p0 + i);
        s->b_loss[k] += e->loss[i];
        s->b_n[k] += 1;
        s->targets++;
    }
    if (e->recall) score_window(e, first, p0, s);
}

void eval_run(eval_source *e, long windows, eval_stats *s) {
    model *m = e->m;
    comm_ctx *c = model_comm(m);
    model_window win = model_window_of(m);
    long T = (long)win.T_loc * win.P;
    UP_CHECK(windows >= 1 && windows <= eval_windows_available(e->shard, T),
             "eval_run: %ld windows of %ld tokens in a shard of %zu", windows, T, e->shard->ntok);
    stats_init(s, T, windows, e->recall);
    double t0 = MPI_Wtime();
    long rounds = (windows + c->D - 1) / c->D;
    for (long k = 0; k < rounds; k++) {
        long w = k * c->D + c->dp_rank;
        eval_window(e, w < windows ? w : 0, w < windows ? s : NULL, T);
    }
    comm_reduce_loss(c, &s->loss_sum, &s->targets); /* as training's step loss */
    comm_sum_doubles(c, s->b_loss, s->nb);
    comm_sum_doubles(c, s->b_n, s->nb);
    s->seconds = MPI_Wtime() - t0;
    if (!e->recall) return;
    comm_sum_doubles(c, &s->q_n[0][0], EVAL_MAX_BUCKETS * EVAL_MAX_BUCKETS);
    comm_sum_doubles(c, &s->q_ok[0][0], EVAL_MAX_BUCKETS * EVAL_MAX_BUCKETS);
}

double eval_loss(const eval_stats *s) {
    return s->targets > 0 ? s->loss_sum / (double)s->targets : 0.0;
}

double eval_perplexity(const eval_stats *s) {
    return exp(eval_loss(s));
}

/* Sums of a grid over every position bucket, of distance bucket k (k < 0: all). */
static double grid_sum(const eval_stats *s, const double g[][EVAL_MAX_BUCKETS], int k) {
    double n = 0;
    for (int d = 0; d < s->nb; d++)
        for (int p = 0; p < s->nb; p++)
            if (k < 0 || d == k) n += g[d][p];
    return n;
}

double eval_questions(const eval_stats *s, int k) {
    return grid_sum(s, s->q_n, k);
}

double eval_accuracy(const eval_stats *s, int k) {
    double n = grid_sum(s, s->q_n, k);
    return n > 0 ? grid_sum(s, s->q_ok, k) / n : 0.0;
}
