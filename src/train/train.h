/* train.h — the `upipe train` command: options, the training loop, logs and reports. */
#ifndef UP_TRAIN_H
#define UP_TRAIN_H

#include "model/model.h"

#include <stdint.h>

typedef struct {
    const char *config, *data, *init, *save, *save_grads, *log, *mem_report;
    long T;
    long steps;
    double lr, min_lr_frac, weight_decay, beta1, beta2, adam_eps, grad_clip;
    long warmup; /* -1: default */
    uint64_t seed;
    int threads; /* 0: default */
    int cp;      /* context-parallel degree; 0: all ranks */
    int accum;   /* sequences per replica per step (gradient accumulation) */
    model_options mopt; /* --checkpoint, --offload, --tile-mlp, --tile-loss, --upipe-heads */
    int dry_run;
    unsigned long long mem_limit; /* bytes, 0: none */
    int quiet;
} train_options;

/* Parses argv (argv[0] == "train"). Prints help and returns 1 for --help, returns 0 on success;
 * a bad flag stops every rank with a message (up_die_all). */
int train_parse_args(train_options *o, int argc, char **argv);
void train_print_help(void);
/* Runs the training job. Collective over MPI_COMM_WORLD. Returns the exit code. */
int train_main(int argc, char **argv);

#endif
