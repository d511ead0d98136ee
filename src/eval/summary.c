/* summary.c — the tables, JSON report and pictures of an evaluation (summary.h). */
#include "eval/summary.h"

#include "core/check.h"
#include "core/fileio.h"
#include "eval/svg.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void bucket_label(const eval_stats *s, int k, char *b, size_t len) {
    snprintf(b, len, "[%ld, %ld)", s->edge[k], s->edge[k + 1]);
}

void eval_print_recall(const eval_stats *s) {
    if (eval_questions(s, -1) == 0) { /* an accuracy of 0.000 would read as a failed model */
        printf("recall: no question found in the evaluated windows: is this a recall corpus "
               "(upipe data recall)?\n");
        return;
    }
    printf("recall: %.0f questions, accuracy %.3f (chance %.3f)\n", eval_questions(s, -1),
           eval_accuracy(s, -1), RECALL_CHANCE);
    printf("  %-18s %10s %9s\n", "distance", "questions", "accuracy");
    for (int k = 0; k < s->nb; k++) {
        if (eval_questions(s, k) == 0) continue;
        char b[48];
        bucket_label(s, k, b, sizeof b);
        printf("  %-18s %10.0f %9.3f\n", b, eval_questions(s, k), eval_accuracy(s, k));
    }
}

void eval_print(const eval_stats *s) {
    printf("eval: %ld window%s of T=%ld, %lld targets: loss %.4f, perplexity %.3f (%.2f s, %.0f "
           "tokens/s)\n",
           s->windows, s->windows == 1 ? "" : "s", s->T, s->targets, eval_loss(s),
           eval_perplexity(s), s->seconds, (double)s->windows * (double)s->T / s->seconds);
    printf("  %-18s %10s %9s\n", "position", "targets", "loss");
    for (int k = 0; k < s->nb; k++) {
        char b[48];
        bucket_label(s, k, b, sizeof b);
        if (s->b_n[k] > 0)
            printf("  %-18s %10.0f %9.4f\n", b, s->b_n[k], s->b_loss[k] / s->b_n[k]);
        else
            printf("  %-18s %10.0f %9s\n", b, 0.0, "-");
    }
    if (s->recall) eval_print_recall(s);
    fflush(stdout);
}

/* A JSON real to 9 significant digits, null when not finite. */
static json_t *real9(double x) {
    if (!isfinite(x)) return json_null();
    char b[48];
    snprintf(b, sizeof b, "%.9g", x);
    return json_real(strtod(b, NULL));
}

static json_t *recall_json(const eval_stats *s) {
    json_t *r = json_object(), *by = json_array();
    json_object_set_new(r, "questions", json_integer((json_int_t)eval_questions(s, -1)));
    json_object_set_new(r, "accuracy", /* null without questions: no accuracy, not 0 */
                        eval_questions(s, -1) > 0 ? real9(eval_accuracy(s, -1)) : json_null());
    for (int k = 0; k < s->nb; k++) {
        if (eval_questions(s, k) == 0) continue;
        json_t *b = json_object();
        json_object_set_new(b, "lo", json_integer(s->edge[k]));
        json_object_set_new(b, "hi", json_integer(s->edge[k + 1]));
        json_object_set_new(b, "n", json_integer((json_int_t)eval_questions(s, k)));
        json_object_set_new(b, "accuracy", real9(eval_accuracy(s, k)));
        json_array_append_new(by, b);
    }
    json_object_set_new(r, "by_distance", by);
    return r;
}

int eval_write_json(const eval_stats *s, const char *path, char *err, size_t errlen) {
    json_t *root = json_object(), *buckets = json_array();
    json_object_set_new(root, "loss", real9(eval_loss(s)));
    json_object_set_new(root, "perplexity", real9(eval_perplexity(s)));
    json_object_set_new(root, "tokens", json_integer(s->targets));
    json_object_set_new(root, "windows", json_integer(s->windows));
    for (int k = 0; k < s->nb; k++) {
        json_t *b = json_object();
        json_object_set_new(b, "start", json_integer(s->edge[k]));
        json_object_set_new(b, "end", json_integer(s->edge[k + 1]));
        json_object_set_new(b, "loss",
                            s->b_n[k] > 0 ? real9(s->b_loss[k] / s->b_n[k]) : json_null());
        json_array_append_new(buckets, b);
    }
    json_object_set_new(root, "buckets", buckets);
    if (s->recall) json_object_set_new(root, "recall", recall_json(s));
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(root);
    UP_CHECK(text, "json_dumps failed");
    int rc = up_write_line_atomic(path, text, err, errlen);
    free(text);
    return rc;
}

int eval_write_loss_svg(const eval_stats *s, const char *path, char *err, size_t errlen) {
    double x[EVAL_MAX_BUCKETS], y[EVAL_MAX_BUCKETS];
    for (int k = 0; k < s->nb; k++) { /* the bucket's middle on a log axis */
        x[k] = s->edge[k] > 0 ? sqrt((double)s->edge[k] * (double)s->edge[k + 1])
                              : (double)s->edge[k + 1] / 2.0;
        y[k] = s->b_n[k] > 0 ? s->b_loss[k] / s->b_n[k] : NAN;
    }
    char title[160], name[64];
    snprintf(title, sizeof title, "Loss by position in the window (T=%ld, %ld windows)", s->T,
             s->windows);
    snprintf(name, sizeof name, "loss %.3f", eval_loss(s));
    svg_series ser = {name, x, y, s->nb};
    svg_doc d = {0};
    svg_line_chart(&d, title, "position in the window (tokens, log scale)", "mean loss (nats)",
                   &ser, 1, 1);
    return svg_write(&d, path, err, errlen);
}

/* The distance buckets that hold questions: [lo, hi] of their indices; -1 when none. */
static int distance_rows(const eval_stats *s, int *lo) {
    int hi = -1;
    *lo = -1;
    for (int k = 0; k < s->nb; k++)
        if (eval_questions(s, k) > 0) {
            if (*lo < 0) *lo = k;
            hi = k;
        }
    return hi;
}

int eval_write_recall_svg(const eval_stats *s, const char *path, char *err, size_t errlen) {
    int lo, hi = distance_rows(s, &lo), ny = hi < 0 ? 0 : hi - lo + 1, nx = s->nb;
    char xl[EVAL_MAX_BUCKETS][48], yl[EVAL_MAX_BUCKETS][48];
    const char *xp[EVAL_MAX_BUCKETS], *yp[EVAL_MAX_BUCKETS];
    double v[EVAL_MAX_BUCKETS * EVAL_MAX_BUCKETS];
    for (int c = 0; c < nx; c++) {
        bucket_label(s, c, xl[c], sizeof xl[c]);
        xp[c] = xl[c];
    }
    for (int r = 0; r < ny; r++) {
        bucket_label(s, lo + r, yl[r], sizeof yl[r]);
        yp[r] = yl[r];
        for (int c = 0; c < nx; c++) {
            double n = s->q_n[lo + r][c];
            v[r * nx + c] = n > 0 ? s->q_ok[lo + r][c] / n : NAN;
        }
    }
    char title[160], note[160];
    snprintf(title, sizeof title, "Recall accuracy by distance and position (T=%ld)", s->T);
    if (eval_questions(s, -1) == 0)
        snprintf(note, sizeof note, "no question found in the evaluated windows");
    else
        snprintf(note, sizeof note,
                 "%.0f questions, accuracy %.3f (chance %.3f); grey: no "
                 "question",
                 eval_questions(s, -1), eval_accuracy(s, -1), RECALL_CHANCE);
    svg_doc d = {0};
    svg_heatmap(&d, title, note, "position of the question in the window (tokens)",
                "distance to the fact (tokens)", xp, nx, yp, ny, v);
    return svg_write(&d, path, err, errlen);
}
