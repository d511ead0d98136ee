/* summary.h — what an evaluation shows (call on rank 0): the terminal tables, the JSON report and
 * the SVG pictures of reduced eval_stats. */
#ifndef UP_EVAL_SUMMARY_H
#define UP_EVAL_SUMMARY_H

#include "eval/evaluate.h"

#include <stddef.h>

/* The loss line and the loss-by-position table, then (on a recall corpus) the recall line and
 * the accuracy-by-distance table, on stdout. */
void eval_print(const eval_stats *s);
/* The recall lines alone (what a script greps): "recall: N questions, accuracy A (chance C)" and
 * one row per distance bucket with questions; without questions one line that says so. */
void eval_print_recall(const eval_stats *s);
/* The JSON report, atomically: {"loss", "perplexity", "tokens", "windows", "buckets": [{"start",
 * "end", "loss"}], "recall": {"questions", "accuracy", "by_distance": [{"lo", "hi", "n",
 * "accuracy"}]}} (recall only on a recall corpus, accuracy null without questions; a bucket
 * without targets has loss null; only distance buckets with questions are listed, lo <=
 * distance < hi). 0, or -1 with a message. */
int eval_write_json(const eval_stats *s, const char *path, char *err, size_t errlen);
/* The loss by position as a line chart (log x), and recall accuracy by distance and position as a
 * heat-map. 0, or -1 with a message. */
int eval_write_loss_svg(const eval_stats *s, const char *path, char *err, size_t errlen);
int eval_write_recall_svg(const eval_stats *s, const char *path, char *err, size_t errlen);

#endif
