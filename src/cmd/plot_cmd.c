/* plot_cmd.c — `upipe plot`: the training loss of a --log file (JSON lines, one per step) and,
 * where the run validated (--val-data), the validation loss, as an SVG line chart. No MPI. */
#include "cmd/plot_cmd.h"

#include "core/check.h"
#include "core/flags.h"
#include "eval/svg.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *log, *svg, *title;
} plot_args;

#define AT(field) offsetof(plot_args, field)

static const flag_spec g_plot_flags[] = {
    {.name = "log",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(log),
     .help = "the JSON lines log of a run (a resumed run's continues it; where\n"
             "the step goes back, a restart, the later run's points replace\n"
             "those of the steps it did again)"},
    {.name = "svg",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(svg),
     .help = "the picture to write (atomically)"},
    {.name = "title",
     .arg = "TEXT",
     .kind = FLAG_STRING,
     .off = AT(title),
     .help = "the chart's title (default: \"Loss of <log>\")"},
};

static const flag_help_line g_plot_page[] = {
    {NULL, "usage: upipe plot --log train.jsonl --svg loss.svg [--title TEXT]\n\n"
           "Draws the loss of every step of a training log (`upipe train --log`) and, on the\n"
           "steps that validated (--val-data), the validation loss, as an SVG line chart.\n"},
    {"log", NULL},
    {"svg", NULL},
    {"title", NULL},
    {"help", NULL},
};

/* Points of one curve, grown as the log is read. */
typedef struct {
    double *x, *y;
    int n, cap;
} curve;

static void curve_add(curve *c, double x, double y) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 256;
        c->x = realloc(c->x, sizeof *c->x * (size_t)c->cap);
        c->y = realloc(c->y, sizeof *c->y * (size_t)c->cap);
        UP_CHECK(c->x && c->y, "out of memory");
    }
    c->x[c->n] = x;
    c->y[c->n++] = y;
}

/* A step number that goes back (a resumed run's log from before resumes cut it, or two logs
 * joined): the points from that step on are of an earlier run, replaced by the later one. */
static void curve_restart(curve *c, double step) {
    while (c->n > 0 && c->x[c->n - 1] >= step)
        c->n--;
}

/* The number under key in rec, NAN when absent, null or not a number. */
static double number(const json_t *rec, const char *key) {
    const json_t *v = json_object_get(rec, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* One log line: its step's loss (unless skipped) and validation loss. A line that is not a JSON
 * object with a step stops with its number. */
static void read_record(const char *line, const char *path, long lineno, curve *train, curve *val) {
    json_error_t jerr;
    json_t *rec = json_loads(line, 0, &jerr);
    double step = rec ? number(rec, "step") : NAN;
    if (!json_is_object(rec) || !isfinite(step)) {
        json_decref(rec);
        up_die("--log %s: line %ld is not a record of `upipe train --log` (%s)", path, lineno,
               rec ? "no \"step\"" : jerr.text);
    }
    double loss = number(rec, "loss"), vl = number(rec, "val_loss");
    curve_restart(train, step);
    curve_restart(val, step);
    if (isfinite(loss) && !json_object_get(rec, "skipped")) curve_add(train, step, loss);
    if (isfinite(vl)) curve_add(val, step, vl);
    json_decref(rec);
}

static void read_log(const char *path, curve *train, curve *val) {
    FILE *f = fopen(path, "r");
    if (!f) up_die("--log %s: cannot open (%s)", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == (size_t)n) continue; /* blank */
        read_record(line, path, lineno, train, val);
    }
    free(line);
    fclose(f);
    if (train->n == 0 && val->n == 0)
        up_die("--log %s: no step with a loss in it: nothing to plot", path);
}

int plot_main(int argc, char **argv) {
    plot_args a = {0};
    flag_table table = {g_plot_flags, FLAGS_COUNT(g_plot_flags), &a};
    flags_defaults(&table, 1);
    if (flags_parse("plot", &table, 1, argc, argv) == 1) {
        flags_print_help(&table, 1, g_plot_page, FLAGS_COUNT(g_plot_page));
        return 0;
    }
    if (!a.log || !a.svg) up_die("--log FILE and --svg FILE are required: see upipe plot --help");
    const char *log = a.log, *svg = a.svg, *title = a.title;
    curve train = {0}, val = {0};
    read_log(log, &train, &val);
    char dflt[512];
    snprintf(dflt, sizeof dflt, "Loss of %s", log);
    svg_series s[2] = {{"training", train.x, train.y, train.n},
                       {"validation", val.x, val.y, val.n}};
    svg_doc d = {0};
    svg_line_chart(&d, title ? title : dflt, "step", "loss (nats)", s, val.n ? 2 : 1, 0);
    char err[1024];
    if (svg_write(&d, svg, err, sizeof err) != 0) up_die("%s", err);
    printf("upipe plot: %d training and %d validation points of %s -> %s\n", train.n, val.n, log,
           svg);
    free(train.x), free(train.y), free(val.x), free(val.y);
    return 0;
}
