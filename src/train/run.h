/* run.h — private to src/train: the state of one training job and of one step, shared by the
 * loop (train.c), its setup (setup.c) and its terminal and log output (output.c). */
#ifndef UP_TRAIN_RUN_H
#define UP_TRAIN_RUN_H

#include "comm/comm.h"
#include "core/clock.h"
#include "eval/evaluate.h"
#include "io/config.h"
#include "io/mask.h"
#include "io/shard.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "train/ckpt.h"
#include "train/options.h"
#include "train/report.h"

#include <stdint.h>
#include <stdio.h>

/* One training job: what every rank holds from setup to the end. */
typedef struct {
    train_options o;
    int rank, world, threads;
    int P, T_loc;   /* context-parallel degree, tokens of a sequence per rank (T / P) */
    size_t runtime; /* the process's own resident bytes (the `runtime` category) */
    model_config cfg;
    token_shard shard;
    mask_shard mask;   /* --loss-mask */
    uint8_t *mask_buf; /* (T_loc) mask bytes of this rank's targets */
    comm_ctx comm;
    model *m;
    FILE *logf;       /* --log, rank 0 only */
    void *ckpt_stage; /* --ckpt-dir: the checkpoint writer's staging buffer */
    adamw_params hp;
    double flops, tokens;    /* per step, over all replicas and micro-batches */
    long start_step;         /* steps done before this run (a resumed checkpoint's) */
    char resumed_from[4096]; /* the checkpoint resumed, "" for a fresh start */
    ckpt_data data_id;   /* --ckpt-dir: what state.json records of --data, --doc-sep, --loss-mask */
    ckpt_record resumed; /* the resumed checkpoint's state.json: its files' sizes and CRC-32C */
    double t_start;
    /* the closing line compares the first loss with the mean of the last tail_n steps */
    long tail_n, tail_skipped; /* tail steps, and those skipped (not in tail_sum) */
    double first_loss, tail_sum;
    long skips_in_row, skips_total; /* --on-nonfinite skip */
    int warned_no_target;           /* a step without counted targets was reported */
    token_shard val_shard;          /* --val-data */
    eval_source val;                /* validation on the training model, its scratch */
    long val_windows;
    eval_stats val_last; /* the last validation (val_step > 0) */
    long val_step;
} train_run;

/* What one step measured: loss and norm agree on every rank, the timings are this rank's. */
typedef struct {
    long step; /* 0-based */
    double loss, norm;
    float lr; /* 0 when --lr 0 (no update) */
    double dt, comm_s;
    double ckpt_s, ckpt_bytes; /* a checkpoint written after this step (0: none) */
    double docs;               /* documents in the step's windows, all replicas (--doc-sep) */
    double attn_s;             /* this rank's seconds in the attention kernels */
    long long targets;         /* targets counted in the loss, all ranks */
    int skipped;               /* --on-nonfinite skip: non-finite loss or norm, no update */
    const eval_stats *val;     /* validation after this step, NULL: none */
    double val_s;              /* its seconds */
} train_step_stats;

/* ---- setup.c ---- */
/* Threads, then every check before any large allocation (every rank, same verdict; outputs
 * writable, --ckpt-dir usable, signal handlers), then the communicator. */
void run_setup(train_run *r);
/* The job's one allocation list, used by the plan and by the run: the model, then the buffers
 * of the options (checkpoint staging, mask bytes, validation scratch; the trace's under plan
 * mode). Under plan mode it only counts. run_free_all frees them all. */
void run_alloc_all(train_run *r);
void run_free_all(train_run *r);
/* The plan: run_alloc_all under plan mode, before anything is allocated. */
report_memory run_plan(train_run *r);
/* The signal a graceful stop was asked with (SIGTERM, SIGINT), 0 for none. */
int run_signal_pending(void);

/* ---- output.c ---- */
void print_summary(const train_run *r);
/* The step's terminal line and JSON log record (rank 0). */
void print_step_line(const train_run *r, const train_step_stats *s, double tps);
void write_log_record(const train_run *r, const train_step_stats *s, double tps);
/* The validation line after a step, and the closing line's (rank 0). */
void print_val_line(const train_run *r, const train_step_stats *s);
void print_val_closing(const train_run *r);
/* A resumed run's --log cut back to the checkpoint's step (rank 0, before it appends): the
 * records of later steps go (a crashed run logged them; they are trained again now), so the log
 * holds every step once, in order. A record whose step is not above the one before it starts a
 * later run of an older log: it replaces the records from its step on. A line that is not JSON
 * (the torn last line of a killed run) goes; a JSON line without a step stays with the record
 * before it. The kept lines are written atomically (path.tmp.<pid>, fsync, rename), and only
 * when something goes; no file: nothing to do. 0, or -1 with a message in err. */
int log_cut_to_step(const char *path, long step, char *err, size_t errlen);

#endif
