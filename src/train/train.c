/* train.c — the `upipe train` loop: set up and plan (setup.c), start or resume, then one step
 * after another (forward and backward per micro-batch, gradient reduction, clip, AdamW), a
 * terminal line and a JSON log record per step (output.c), checkpoints and stops (ckpt.c), and
 * the finish. Flags live in options.c, the memory plan and report in report.c. */
#include "train/train.h"

#include "train/run.h"

#include "core/check.h"
#include "core/fileio.h"
#include "core/mem.h"
#include "core/trace.h"
#include "core/watchdog.h"
#include "train/ckpt.h"

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Index of the b-th sequence of this replica at step k: ((k*D + d)*B + b). */
static unsigned long long step_seq(long step, const comm_ctx *comm, int accum, int b) {
    return ((unsigned long long)step * comm->D + comm->dp_rank) * accum + b;
}

/* Reads this rank's slice of sequence seq: the sequence is the T+1 tokens at seq*T (wrapping
 * around the shard; DESIGN.md §1). */
static void read_tokens(const train_run *r, unsigned long long seq, model *m) {
    size_t first = (size_t)((seq * (unsigned long long)r->o.front.T) % r->shard.ntok);
    model_read_window(m, &r->shard, r->o.front.loss_mask ? &r->mask : NULL, r->mask_buf,
                      r->o.front.doc_sep, first);
}

/* The mathematics of this run, for a checkpoint's state and the resume check. */
static ckpt_state run_state(const train_run *r, long step) {
    const train_options *o = &r->o;
    ckpt_state st = {.step = step,
                     .steps = o->steps,
                     .T = o->front.T,
                     .global_batch = (long)r->comm.D * o->accum,
                     .warmup = o->warmup,
                     .lr = o->lr,
                     .min_lr_frac = o->min_lr_frac,
                     .weight_decay = o->weight_decay,
                     .beta1 = o->beta1,
                     .beta2 = o->beta2,
                     .adam_eps = o->adam_eps,
                     .grad_clip = o->grad_clip,
                     .seed = o->seed,
                     .data = r->data_id};
    return st;
}

/* The checkpoint a --resume continues (r->resumed_from, r->start_step; none: "" and step 0),
 * read and compared with this run: every rank reads the same files, so the same verdict. */
static void run_resume_point(train_run *r) {
    const train_options *o = &r->o;
    if (o->ckpt_dir) { /* the data identity a checkpoint records: size and a sample of each file */
        ckpt_data *d = &r->data_id;
        ckpt_file_identify(&d->shard, o->front.data, r->shard.map, r->shard.map_bytes);
        d->tokens = r->shard.ntok;
        d->doc_sep = o->front.doc_sep;
        d->has_mask = o->front.loss_mask != NULL;
        if (o->front.loss_mask)
            ckpt_file_identify(&d->mask, o->front.loss_mask, r->mask.map, r->mask.map_bytes);
    }
    if (!o->resume || ckpt_find_latest(o->ckpt_dir, r->resumed_from, sizeof r->resumed_from) < 0)
        return;
    ckpt_state run = run_state(r, 0);
    r->start_step =
        ckpt_check(r->resumed_from, &run, &r->cfg, o->data_changed, r->rank == 0, &r->resumed);
}

/* A --stop-at that the resumed checkpoint has reached already (a requeued job that stopped there
 * before): 1, said on rank 0, and the run writes nothing (no step, checkpoint, log, trace or
 * --save); else 0. A --stop-at at --steps is the end of the run, which finishes as usual. */
static int run_stop_passed(const train_run *r) {
    const train_options *o = &r->o;
    if (!o->stop_at || o->stop_at >= o->steps || r->start_step < o->stop_at) return 0;
    if (r->rank == 0 && !o->front.quiet) {
        printf("already at step %ld (--stop-at %ld): nothing to do; %s is the checkpoint; to "
               "train on, run without --stop-at or with a later one\n",
               r->start_step, o->stop_at, r->resumed_from);
        fflush(stdout);
    }
    return 1;
}

/* The model (loaded or random), the summary, the log file and the per-step constants. */
static void run_start(train_run *r) {
    const train_options *o = &r->o;
    mem_count(MEM_RUNTIME, (long long)r->runtime); /* as in the plan */
    char err[1024];
    /* before the model: the offload store's I/O thread takes its track as it starts */
    if (o->front.trace && comm_trace_start(&r->comm, o->front.trace,
                                           o->front.mopt.offload_dir != NULL, err, sizeof err) != 0)
        up_die_agreed(r->rank == 0 ? err : NULL);
    run_alloc_all(r);
    double t0 = now_s(), read_bytes = 0;
    if (r->resumed_from[0]) {
        read_bytes = ckpt_load(r->m, &r->comm, r->resumed_from, &r->resumed);
    } else if (o->init) {
        model_load(r->m, o->init);
    } else {
        model_init_random(r->m, o->seed);
    }
    comm_sum_double(&r->comm, &read_bytes);
    if (r->rank == 0 && !o->front.quiet) {
        print_summary(r);
        if (r->resumed_from[0])
            printf("resumed from %s at step %ld (%.1f MiB read in %.2f s)\n", r->resumed_from,
                   r->start_step, read_bytes / 1048576.0, now_s() - t0);
        else if (o->resume)
            printf("no checkpoint in %s yet: starting at step 0\n", o->ckpt_dir);
        fflush(stdout);
    }

    if (o->log && r->rank == 0) {
        /* a resumed run continues the log from its checkpoint's step: the lines of the steps
         * after it (a crash's) go first, so every step is there once, in order */
        if (r->start_step > 0 && log_cut_to_step(o->log, r->start_step, err, sizeof err) != 0)
            up_die("%s", err);
        r->logf = fopen(o->log, r->start_step > 0 ? "a" : "w");
        if (!r->logf) up_die("--log %s: cannot create (%s)", o->log, strerror(errno));
    }
    r->hp = (adamw_params){(float)o->lr, (float)o->beta1, (float)o->beta2, (float)o->adam_eps,
                           (float)o->weight_decay};
    /* one step processes D * accum sequences of T tokens */
    r->flops = model_flops_per_step(&r->cfg, (int)o->front.T) * r->comm.D * o->accum;
    r->tokens = (double)o->front.T * r->comm.D * o->accum;
    r->t_start = now_s();
    r->tail_n = o->steps / 10 > 0 ? o->steps / 10 : 1;
    r->first_loss = 0;
    r->tail_sum = 0;
    r->tail_skipped = 0;
}

/* ---- one step ------------------------------------------------------------------------------- */

/* A step whose loss or gradient norm is NaN/Inf. Both are identical on every rank after the
 * reductions, so every rank comes here together. stop: every rank stops, naming the step and the
 * first tensor with a non-finite gradient (the smallest index over the ranks' owned parts). skip:
 * the step is marked skipped (no update); K skips in a row (--max-skips) stop. Collective. */
static void run_nonfinite(train_run *r, train_step_stats *s) {
    const train_options *o = &r->o;
    int t = model_first_nonfinite_grad(r->m);
    char where[160];
    if (t >= 0)
        snprintf(where, sizeof where, "first NaN/Inf gradient in %s", model_tensor_name(r->m, t));
    else
        snprintf(where, sizeof where, "every gradient finite");
    if (o->on_nonfinite == NONFINITE_STOP)
        up_die_all("step %ld: loss %g, gradient norm %g (%s): training diverged; lower --lr, "
                   "check the data, or pass --on-nonfinite skip to skip such steps",
                   s->step + 1, s->loss, s->norm, where);
    s->skipped = 1;
    r->skips_total++;
    if (++r->skips_in_row >= o->max_skips)
        up_die_all("step %ld: %ld steps in a row skipped (--max-skips %d), loss %g, gradient norm "
                   "%g (%s): training diverged; lower --lr or check the data",
                   s->step + 1, r->skips_in_row, o->max_skips, s->loss, s->norm, where);
}

/* Forward and backward of the accum micro-batches of this replica, the gradient reduction, the
 * clip and the AdamW update (skipped for --lr 0). Collective. */
static train_step_stats run_step(train_run *r, long step) {
    const train_options *o = &r->o;
    comm_ctx *comm = &r->comm;
    model *m = r->m;
    train_step_stats s = {.step = step};
    comm_reset_stats(comm);
    uint64_t tt = trace_begin();
    double t0 = now_s();
    char err[1024];
    if (shard_check(&r->shard, err, sizeof err) != 0) up_die("--data %s", err);
    /* targets of all micro-batches first: the loss is token-weighted over the global batch,
     * so the gradient scale 1/(valid targets, all ranks) is known before the forward */
    long long valid = 0;
    for (int b = 0; b < o->accum; b++) {
        read_tokens(r, step_seq(step, comm, o->accum, b), m);
        const int32_t *targets = model_window_of(m).targets;
        for (int i = 0; i < r->T_loc; i++)
            valid += targets[i] >= 0;
    }
    double zero = 0;
    comm_reduce_loss(comm, &zero, &valid);
    float scale = valid > 0 ? 1.0f / (float)valid : 0.0f;

    model_set_step(m, step);
    model_zero_grads(m);
    double loss_sum = 0;
    for (int b = 0; b < o->accum; b++) {
        read_tokens(r, step_seq(step, comm, o->accum, b), m);
        if (o->front.doc_sep >= 0) {
            int nd = model_set_documents(m, (int32_t)o->front.doc_sep);
            if (comm->cp_rank == 0) s.docs += nd; /* each replica's windows once */
        }
        loss_sum += model_forward(m, scale);
        model_backward(m);
    }
    long long local = 0;
    comm_reduce_loss(comm, &loss_sum, &local); /* token-weighted over all ranks */
    s.targets = valid;
    if (o->front.doc_sep >= 0) comm_sum_double(comm, &s.docs);
    model_reduce_grads(m);
    s.loss = valid > 0 ? loss_sum / (double)valid : 0.0;

    if (step == 0 && o->save_grads) model_save_grads(m, o->save_grads);

    s.norm = model_grad_norm(m);
    if (!isfinite(s.loss) || !isfinite(s.norm))
        run_nonfinite(r, &s);
    else
        r->skips_in_row = 0;
    float clip = clip_factor(s.norm, (float)o->grad_clip);
    s.lr =
        lr_schedule((int)step, (int)o->steps, (float)o->lr, (int)o->warmup, (float)o->min_lr_frac);
    if (o->lr > 0 && !s.skipped) {
        r->hp.lr = s.lr;
        model_optimizer_step(m, &r->hp, (int)step + 1, clip);
    } else {
        s.lr = 0; /* no update: --lr 0, or a skipped step */
    }
    s.dt = now_s() - t0;
    s.comm_s = comm_seconds(comm);
    s.attn_s = model_attention_seconds(m, 1);
    trace_end1(tt, "step", "step", "step", step);
    return s;
}

/* Validation after a step when one is due (every --val-every steps and after the last): forward
 * only on the training model between steps, which changes nothing the next step computes
 * (model_evaluate). Collective. */
static void run_validate(train_run *r, train_step_stats *s) {
    const train_options *o = &r->o;
    long done = s->step + 1;
    if (!o->val_data || !(done == o->steps || (o->val_every && done % o->val_every == 0))) return;
    watchdog_phase_enter(WATCHDOG_VALIDATION, s->step);
    double t0 = now_s();
    uint64_t tt = trace_begin();
    eval_run(&r->val, r->val_windows, &r->val_last);
    trace_end1(tt, "step", "validation", "step", s->step);
    model_attention_seconds(r->m, 1); /* the next step's attention time is its own */
    r->val_step = done;
    s->val = &r->val_last;
    s->val_s = now_s() - t0;
}

/* A step whose global batch counts no target (a loss mask of zeros over its tokens, or targets
 * that are all the separator): its loss and gradient are zero, so AdamW applies only the weight
 * decay. One warning per run (rank 0); s->targets is already the count over all ranks. */
static void warn_no_target(train_run *r, const train_step_stats *s) {
    if (s->targets > 0 || r->warned_no_target || r->rank != 0) return;
    r->warned_no_target = 1;
    if (r->o.front.loss_mask)
        fprintf(stderr,
                "upipe: warning: step %ld counts no target (the loss mask is zero over "
                "its tokens): the step only applies weight decay; check --loss-mask %s\n",
                s->step + 1, r->o.front.loss_mask);
    else
        fprintf(stderr,
                "upipe: warning: step %ld counts no target (every target is the "
                "--doc-sep token %ld): the step only applies weight decay; check the data\n",
                s->step + 1, r->o.front.doc_sep);
    fflush(stderr);
}

/* Keeps the loss for the closing line, stops on divergence (every rank), and writes the step's
 * terminal line and log record (rank 0). */
static void run_record(train_run *r, const train_step_stats *s) {
    if (s->step == r->start_step) r->first_loss = s->loss;
    if (s->step >= r->o.steps - r->tail_n) {
        if (s->skipped)
            r->tail_skipped++;
        else
            r->tail_sum += s->loss;
    }
    if (!isfinite(s->loss) && !s->skipped) /* run_step stopped already; the last guard */
        up_die_all("loss is %f at step %ld: training diverged; lower --lr or check the data",
                   s->loss, s->step + 1);
    warn_no_target(r, s);
    if (r->rank != 0) return;
    double tps = r->tokens / s->dt;
    long done = s->step + 1;
    int print = r->o.print_every <= 1 || done % r->o.print_every == 0 || s->step == r->start_step ||
                done == r->o.steps;
    if (!r->o.front.quiet && print) print_step_line(r, s, tps);
    if (!r->o.front.quiet && s->val) print_val_line(r, s);
    if (!r->o.front.quiet && s->ckpt_bytes > 0) {
        printf("checkpoint %s/step-%08ld: %.1f MiB in %.2f s (%.2f GB/s)\n", r->o.ckpt_dir,
               s->step + 1, s->ckpt_bytes / 1048576.0, s->ckpt_s,
               s->ckpt_bytes / 1e9 / (s->ckpt_s > 0 ? s->ckpt_s : 1e-9));
        fflush(stdout);
    }
    if (r->logf) write_log_record(r, s, tps);
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

/* After a step: a checkpoint when one is due (every --ckpt-every, the last step, --stop-at, a
 * signal on any rank). Returns 0 to go on, else why the run stops here: -1 for --stop-at, the
 * signal number for a signal. Collective. */
static int run_checkpoint(train_run *r, train_step_stats *s) {
    const train_options *o = &r->o;
    if (!o->ckpt_dir) return 0;
    long done = s->step + 1;
    unsigned long long pending = (unsigned long long)run_signal_pending();
    comm_max_u64(&r->comm, &pending, 1); /* the same verdict on every rank */
    int sig = (int)pending;
    int stop = sig ? sig : done == o->stop_at ? -1 : 0;
    if (done == o->steps) stop = 0; /* the last step: finish normally (and --save) */
    if (!(stop || done == o->steps || (o->ckpt_every && done % o->ckpt_every == 0))) return 0;
    watchdog_phase_enter(WATCHDOG_CHECKPOINT, s->step);
    double t0 = now_s();
    ckpt_state st = run_state(r, done);
    uint64_t tt = trace_begin();
    s->ckpt_bytes =
        ckpt_write(r->m, &r->comm, o->ckpt_dir, &st, &r->cfg, o->ckpt_keep, r->ckpt_stage);
    trace_end2(tt, "step", "checkpoint", "step", done, "bytes", (int64_t)s->ckpt_bytes);
    s->ckpt_s = now_s() - t0;
    return stop;
}

/* Writes the --trace file after the model (and the offload store's I/O thread) is gone. All ranks
 * stop together when rank 0 could not write it. Collective. */
static void run_trace_finish(const train_run *r) {
    char err[1024];
    if (r->o.front.trace && trace_finish(err, sizeof err) != 0)
        up_die_agreed(r->rank == 0 ? err : NULL);
}

/* A stop before --steps (--stop-at or a signal): the checkpoint is written; say how to go on. */
static void run_stop(train_run *r, int why) {
    const train_options *o = &r->o;
    if (r->logf && fclose(r->logf) != 0) up_die("--log %s: write failed", o->log);
    r->logf = NULL;
    if (r->rank == 0) {
        char ck[4096];
        ckpt_find_latest(o->ckpt_dir, ck, sizeof ck);
        printf("stopped %s: checkpoint %s; to continue, run the same command with --resume\n",
               why > 0 ? (why == SIGTERM ? "on SIGTERM" : "on SIGINT") : "at --stop-at", ck);
        fflush(stdout);
    }
    run_free_all(r);
    run_trace_finish(r);
}

/* ---- finish --------------------------------------------------------------------------------- */

/* Closes the log, writes the weights and the measured memory report, prints the closing line and
 * frees everything. Collective. */
static void run_finish(train_run *r) {
    const train_options *o = &r->o;
    if (r->logf && fclose(r->logf) != 0) up_die("--log %s: write failed", o->log);
    r->logf = NULL;
    if (o->save) model_save_params(r->m, o->save, o->save_dtype);
    if (o->front.mem_report) {
        report_memory measured = report_capture();
        measured.rss = mem_rss_peak();
        report_write_memory(o->front.mem_report, &r->comm, &measured, 0);
    }
    if (r->rank == 0 && !o->front.quiet && r->start_step >= o->steps) {
        printf("nothing to train: %s is already at --steps %ld\n", r->resumed_from, o->steps);
    } else if (r->rank == 0 && !o->front.quiet) {
        char pk[32], rss[32];
        printf("done: loss %.4f (step %ld) -> %.4f (mean of the last %ld steps) in %.1f s, peak %s "
               "accounted, %s RSS\n",
               r->first_loss, r->start_step + 1,
               r->tail_sum / (double)(r->tail_n - r->tail_skipped), r->tail_n - r->tail_skipped,
               now_s() - r->t_start, up_fmt_bytes(pk, sizeof pk, (double)mem_peak_total()),
               up_fmt_bytes(rss, sizeof rss, (double)mem_rss_peak()));
        if (r->skips_total > 0)
            printf("skipped %ld step(s) whose loss or gradient norm was not finite "
                   "(--on-nonfinite skip)\n",
                   r->skips_total);
        if (r->val_step > 0) print_val_closing(r);
    }
    run_free_all(r);
    run_trace_finish(r);
}

/* Start, the steps, and the finish or the stop. Collective. */
static void run_train(train_run *r) {
    watchdog_start(r->o.watchdog);
    run_start(r);
    int stopped = 0;
    for (long step = r->start_step; step < r->o.steps && !stopped; step++) {
        watchdog_phase_enter(WATCHDOG_STEP, step);
        train_step_stats s = run_step(r, step);
        run_validate(r, &s);
        stopped = run_checkpoint(r, &s);
        run_record(r, &s);
        trace_step(); /* writes the trace so far when a buffer is half full or now and then */
    }
    watchdog_phase_enter(WATCHDOG_END, r->o.steps);
    if (stopped)
        run_stop(r, stopped);
    else
        run_finish(r);
    watchdog_stop();
}

int train_main(int argc, char **argv) {
    train_run r;
    memset(&r, 0, sizeof r);
    comm_mpi_init(&argc, &argv, &r.rank, &r.world);
    if (train_parse_args(&r.o, argc, argv) == 1) {
        if (r.rank == 0) train_print_help();
        MPI_Finalize();
        return 0;
    }

    run_setup(&r);
    report_memory plan = run_plan(&r);
    if (r.o.front.dry_run) {
        if (r.rank == 0) {
            report_print_plan(&plan, r.o.front.T, &r.cfg, r.P, r.T_loc, r.o.front.mopt.dtype);
            report_print_fit(&plan, &r.o.front);
            double bytes[COMM_KIND_COUNT];
            model_comm_per_step(&r.cfg, r.T_loc, &r.comm, &r.o.front.mopt, r.o.accum, bytes);
            report_print_comm(bytes, &r.comm, r.o.accum);
        }
        if (r.o.front.mem_report) report_write_memory(r.o.front.mem_report, &r.comm, &plan, 1);
    } else {
        report_check_mem_limit(&plan, &r.o.front);
        run_resume_point(&r);
        if (!run_stop_passed(&r)) run_train(&r);
    }
    front_release_device(&r.o.front, &r.comm);
    comm_free(&r.comm);
    shard_close(&r.shard);
    shard_close(&r.val_shard);
    mask_close(&r.mask);
    MPI_Finalize();
    return 0;
}
