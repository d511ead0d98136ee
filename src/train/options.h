/* options.h — the flags of `upipe train`. */
#ifndef UP_TRAIN_OPTIONS_H
#define UP_TRAIN_OPTIONS_H

#include "model/model.h"

#include <stdint.h>

typedef struct {
    const char *config, *data, *init, *save, *save_grads, *log, *mem_report;
    mem_dtype save_dtype;  /* --save-dtype: F32 (default) or BF16 file */
    long doc_sep;          /* --doc-sep: the token id that opens a document; -1: none */
    const char *loss_mask; /* --loss-mask: a mask shard aligned with --data; NULL: none */
    long T;
    long steps;
    double lr, min_lr_frac, weight_decay, beta1, beta2, adam_eps, grad_clip;
    long warmup; /* -1: default */
    uint64_t seed;
    int threads;        /* 0: default */
    int cp;             /* context-parallel degree; 0: all ranks */
    int accum;          /* sequences per replica per step (gradient accumulation) */
    model_options mopt; /* --checkpoint, --offload, --tile-mlp, --tile-loss, --upipe-heads,
                           --dtype */
    int dry_run;
    unsigned long long mem_limit; /* bytes, 0: none */
    int quiet;
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
    const char *trace;    /* --trace: a Chrome / Perfetto JSON trace of the run; NULL: none */
} train_options;
#define TRAIN_VAL_WINDOWS 4 /* the cap of the default --val-windows */
enum { NONFINITE_STOP = 0, NONFINITE_SKIP = 1 };

/* Parses argv (argv[0] == "train") into o (overwritten, defaults filled in). Returns 1 for --help
 * (nothing printed), 0 on success; a bad flag stops every rank with a message (up_die_all), so
 * call it on every rank. */
int train_parse_args(train_options *o, int argc, char **argv);
/* Prints the --help text on stdout. */
void train_print_help(void);

/* Flag values for every front end's getopt loop: a bad value stops every rank with a message
 * naming the flag and the range (up_die_all). */
long opt_long(const char *flag, const char *s, long lo, long hi);
/* After getopt_long returned a flag with a value: the flag's name when that value is itself a
 * flag ("--offload --tile-mlp" would take --tile-mlp as the directory), else NULL. */
const char *opt_flag_as_value(char **argv);
double opt_double(const char *flag, const char *s, double lo, double hi);
unsigned long long opt_size(const char *flag, const char *s); /* 6GiB, 512MiB, bytes */
/* --dtype: "f32" or "bf16". */
mem_dtype opt_dtype(const char *flag, const char *s);
/* The value of a flag whose size is optional (getopt_long optional_argument): --flag=N,
 * --flag N, or --flag alone (-1: the default). */
int opt_optional_count(const char *flag, int argc, char **argv);

#endif
