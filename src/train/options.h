/* options.h — the flags of `upipe train`: the ones shared with eval (train/front.h) and its own
 * (optimisation, validation, outputs, checkpoints, the watchdog). */
#ifndef UP_TRAIN_OPTIONS_H
#define UP_TRAIN_OPTIONS_H

#include "train/front.h"

#include <stdint.h>

typedef struct {
    front_options front; /* the flags train and eval share (train/front.h) */
    const char *init, *save, *save_grads, *log;
    mem_dtype save_dtype; /* --save-dtype: F32 (default) or BF16 file */
    long steps;
    double lr, min_lr_frac, weight_decay, beta1, beta2, adam_eps, grad_clip;
    long warmup; /* the default (10% of --steps, at most 100) once parsed */
    uint64_t seed;
    int accum;            /* sequences per replica per step (gradient accumulation) */
    long print_every;     /* the per-step terminal line every N steps (and the first and last) */
    const char *ckpt_dir; /* --ckpt-dir: checkpoints; NULL: none */
    long ckpt_every;      /* write one every N steps (0: only at the end, --stop-at, a signal) */
    int ckpt_keep;        /* complete checkpoints kept (default 2) */
    int resume;           /* continue from the newest checkpoint in ckpt_dir (if any) */
    int data_changed;     /* --data-changed: resume on data other than the checkpoint's */
    long stop_at;         /* stop after this step as if preempted (0: run to --steps) */
    double watchdog;      /* seconds without progress before a stalled job stops (0: off) */
    int on_nonfinite;     /* a step whose loss or gradient norm is not finite: NONFINITE_* */
    int max_skips;        /* NONFINITE_SKIP: stop when this many steps in a row were skipped */
    const char *val_data; /* --val-data: a shard to validate on; NULL: no validation */
    long val_every;       /* validate after every N steps (0: after the last step only) */
    long val_windows;     /* windows per validation (0: default) */
} train_options;
#define TRAIN_VAL_WINDOWS 4 /* the cap of the default --val-windows */
enum { NONFINITE_STOP = 0, NONFINITE_SKIP = 1 };

/* Parses argv (argv[0] == "train") into o (overwritten, defaults filled in). Returns 1 for --help
 * (nothing printed), 0 on success; a bad flag stops every rank with a message (up_die_all), so
 * call it on every rank. */
int train_parse_args(train_options *o, int argc, char **argv);
/* Prints the --help text on stdout. */
void train_print_help(void);

#endif
