/* evaluate.h — forward-only evaluation over windows of a token shard (DESIGN.md §10): the
 * token-weighted loss, the loss by position in the window (log-spaced buckets) and, on a recall
 * corpus, whether the top prediction answers each question (recall.h), by distance to its fact
 * and by position. Shared by `upipe eval` and training's validation (--val-data). */
#ifndef UP_EVALUATE_H
#define UP_EVALUATE_H

#include "eval/recall.h"
#include "io/mask.h"
#include "io/shard.h"
#include "model/model.h"

#include <stdint.h>

#define EVAL_MAX_BUCKETS 32
#define EVAL_FIRST_EDGE 8 /* buckets [0, 8), [8, 16), [16, 32), ... [2^k, T) */

/* What an evaluation measured; the same on every rank after eval_run. */
typedef struct {
    long T, windows;
    double seconds;    /* eval_run's, on rank 0 */
    double loss_sum;   /* sum of token losses, all windows */
    long long targets; /* targets counted in it */
    int nb;            /* buckets of positions (and of distances): [edge[k], edge[k+1]) */
    long edge[EVAL_MAX_BUCKETS + 1];
    double b_loss[EVAL_MAX_BUCKETS], b_n[EVAL_MAX_BUCKETS]; /* loss sums and targets by position */
    int recall;                                             /* questions scored */
    double q_n[EVAL_MAX_BUCKETS][EVAL_MAX_BUCKETS];  /* questions by [distance][position] bucket */
    double q_ok[EVAL_MAX_BUCKETS][EVAL_MAX_BUCKETS]; /* right answers, the same */
} eval_stats;

/* What eval_run reads and its scratch. m: a forward-only model or a training one between steps. */
typedef struct {
    model *m;
    const token_shard *shard;
    const mask_shard *mask; /* NULL: every target counts */
    long doc_sep;           /* -1: no documents */
    int recall;             /* score the recall questions */
    /* scratch (eval_alloc): per-position loss and prediction, the window, the scorer's */
    uint8_t *mask_buf;
    double *loss;
    int32_t *pred, *tok;
    void *scratch;
    recall_question *q;
} eval_source;

/* Windows of T tokens a shard holds whole (window w is the T + 1 tokens at w * T). */
long eval_windows_available(const token_shard *s, long T);
/* 1 when the shard's first tokens look like a recall corpus (recall_detect). */
int eval_detect_recall(const token_shard *s);
/* The scratch of e (category workspace; counted, not allocated, under mem plan mode). e->m,
 * e->mask and e->recall must be set. */
void eval_alloc(eval_source *e);
void eval_free(eval_source *e);
/* Evaluates windows 0 .. windows-1 (at most eval_windows_available), replica d of D taking
 * windows d, d + D, ...; s is overwritten and reduced over the ranks. Collective. */
void eval_run(eval_source *e, long windows, eval_stats *s);

/* The mean loss (0 without targets), its perplexity, recall questions and accuracy (all, or of
 * distance bucket k over every position), from reduced stats. */
double eval_loss(const eval_stats *s);
double eval_perplexity(const eval_stats *s);
double eval_questions(const eval_stats *s, int k); /* k < 0: all */
double eval_accuracy(const eval_stats *s, int k);  /* k < 0: all; 0 without questions */

#endif
