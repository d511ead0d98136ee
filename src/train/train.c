/* train.c — the `upipe train` loop: validate, plan, then one step after another (forward and
 * backward per micro-batch, gradient reduction, clip, AdamW), with a terminal line and a JSON log
 * record per step. Flags live in options.c, the memory plan and report in report.c. */
#include "train/train.h"

#include "comm/comm.h"
#include "core/check.h"
#include "core/fileio.h"
#include "core/mem.h"
#include "core/watchdog.h"
#include "io/config.h"
#include "io/mask.h"
#include "io/shard.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "train/ckpt.h"
#include "train/report.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One training job: what every rank holds from setup to the end. */
typedef struct {
    train_options o;
    int rank, world, threads;
    int P, T_loc; /* context-parallel degree, tokens of a sequence per rank (T / P) */
    model_config cfg;
    token_shard shard;
    mask_shard mask;         /* --loss-mask */
    uint8_t *mask_buf;       /* (T_loc) mask bytes of this rank's targets */
    comm_ctx comm;
    model m;
    FILE *logf; /* --log, rank 0 only */
    void *ckpt_stage; /* --ckpt-dir: the checkpoint writer's staging buffer */
    adamw_params hp;
    double flops, tokens; /* per step, over all replicas and micro-batches */
    long start_step;       /* steps done before this run (a resumed checkpoint's) */
    char resumed_from[4096]; /* the checkpoint resumed, "" for a fresh start */
    double t_start;
    /* the closing line compares the first loss with the mean of the last tail_n steps */
    long tail_n, tail_skipped; /* tail steps, and those skipped (not in tail_sum) */
    double first_loss, tail_sum;
    long skips_in_row, skips_total; /* --on-nonfinite skip */
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
} train_step_stats;

/* The first SIGTERM or SIGINT asks for a checkpoint and a clean exit after the current step; a
 * second one stops at once (default action). */
static volatile sig_atomic_t g_signal;

static void on_signal(int sig) {
    if (g_signal) {
        up_tmp_remove_all(); /* no temporary file survives */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_signal = sig;
}

/* A mapped file truncated under the job: reading its lost pages raises SIGBUS. shard_check
 * catches a change of size before each step; this catches one in the middle of a step. One
 * line, async-signal-safe (write, _exit). */
static void on_sigbus(int sig) {
    (void)sig;
    static const char msg[] =
        "upipe: error: SIGBUS: a mapped input file (the --data token shard or the --loss-mask) "
        "was truncated while the job runs; restore it and restart the job\n";
    ssize_t rc = write(2, msg, sizeof msg - 1);
    (void)rc;
    _exit(1);
}

/* ---- helpers -------------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fmt_duration(char *buf, size_t len, double s) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, len, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
}

/* Index of the b-th sequence of this replica at step k: ((k*D + d)*B + b). */
static unsigned long long step_seq(long step, const comm_ctx *comm, int accum, int b) {
    return ((unsigned long long)step * comm->D + comm->dp_rank) * accum + b;
}

/* Reads this rank's slice of sequence seq: the sequence is the T+1 tokens at seq*T (wrapping
 * around the shard); CP rank r holds inputs r*T_loc.. and the targets shifted by one before the
 * split (DESIGN.md §1). */
static void read_tokens(const train_run *r, unsigned long long seq, model *m) {
    const token_shard *shard = &r->shard;
    long T = r->o.T;
    size_t first = (size_t)((seq * (unsigned long long)T) % shard->ntok);
    size_t start = (first + (size_t)r->comm.cp_rank * r->T_loc) % shard->ntok;
    shard_read(shard, start, (size_t)r->T_loc, m->inputs);
    shard_read(shard, (start + 1) % shard->ntok, (size_t)r->T_loc, m->targets);
    if (r->o.loss_mask) { /* byte t says whether target token t counts */
        mask_read(&r->mask, (start + 1) % shard->ntok, (size_t)r->T_loc, r->mask_buf);
        for (int i = 0; i < r->T_loc; i++)
            if (!r->mask_buf[i]) m->targets[i] = -1;
    }
    if (r->o.doc_sep < 0) return;
    /* packed documents: every rank needs the whole window's boundaries; nobody can predict
     * where the next document starts, so a target equal to the separator does not count */
    shard_read(shard, first, (size_t)T, m->window);
    for (int i = 0; i < r->T_loc; i++)
        if (m->targets[i] == (int32_t)r->o.doc_sep) m->targets[i] = -1;
}

/* Ranks on this rank's node. Collective. */
static int node_ranks(void) {
    MPI_Comm node;
    int local = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
    return local;
}

/* Threads per rank: --threads, else OMP_NUM_THREADS, else this node's cores over its ranks. */
static int default_threads(int requested, int local) {
    if (requested > 0) return requested;
    if (getenv("OMP_NUM_THREADS")) return omp_get_max_threads();
    int t = omp_get_num_procs() / local;
    return t > 0 ? t : 1;
}

/* More threads on this node than cores (--threads or OMP_NUM_THREADS too high for the ranks
 * launched here): the threads take turns and every step slows down. A warning with the better
 * setting; the run goes on. One thread per rank is never flagged: there is nothing better. */
static void warn_oversubscribed(int threads, int local, int from_flag) {
    int procs = omp_get_num_procs();
    if (threads <= 1 || (long)threads * local <= procs) return;
    int better = procs / local > 0 ? procs / local : 1;
    const char *src = from_flag ? "--threads" : "OMP_NUM_THREADS=";
    fprintf(
        stderr,
        "upipe: warning: %s%s%d x %d rank%s on this node = %d threads on %d cores: use %s%s%d\n",
        src, from_flag ? " " : "", threads, local, local > 1 ? "s" : "", threads * local, procs,
        src, from_flag ? " " : "", better);
    fflush(stderr);
}

/* 0 when path can be created or replaced: its folder exists and is writable, and path itself is
 * not a folder; else -1 with a message. */
static int check_writable(const char *flag, const char *path, char *err, size_t len) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return up_errf(err, len, NULL, "%s %s is a folder: give a file name", flag, path);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return up_errf(err, len, NULL, "%s %s: the folder %s does not exist: create it first",
                       flag, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return up_errf(err, len, NULL, "%s %s: the folder %s is not writable (%s)", flag, path,
                       dir, strerror(errno));
    return 0;
}

/* Every output is checked before anything is allocated or trained, so no run works for hours
 * and then fails to save: rank 0's files on rank 0, the checkpoint folder on every rank (all of
 * them write into it under FSDP). Collective; all ranks stop together. */
static void check_outputs(train_run *r) {
    const train_options *o = &r->o;
    char err[1024] = "";
    int bad = 0;
    if (r->rank == 0) {
        const char *flags[] = {"--save", "--save-grads", "--log", "--mem-report"};
        const char *paths[] = {o->save, o->save_grads, o->log, o->mem_report};
        for (int i = 0; i < 4 && !bad; i++)
            if (paths[i]) bad = check_writable(flags[i], paths[i], err, sizeof err) != 0;
    }
    if (o->ckpt_dir && !bad && !o->dry_run) {
        struct stat st;
        if (mkdir(o->ckpt_dir, 0755) != 0 && errno != EEXIST)
            bad = up_errf(err, sizeof err, NULL, "--ckpt-dir %s: cannot create the folder (%s)",
                          o->ckpt_dir, strerror(errno)) != 0;
        else if (stat(o->ckpt_dir, &st) != 0 || !S_ISDIR(st.st_mode))
            bad = up_errf(err, sizeof err, NULL, "--ckpt-dir %s is not a folder", o->ckpt_dir);
        else if (access(o->ckpt_dir, W_OK | X_OK) != 0)
            bad = up_errf(err, sizeof err, NULL, "--ckpt-dir %s is not writable (%s)",
                          o->ckpt_dir, strerror(errno)) != 0;
    }
    if (comm_any(&r->comm, bad)) up_die_agreed(bad ? err : NULL);
    if (!o->ckpt_dir || o->dry_run) return;
    char latest[4096];
    long step = ckpt_find_latest(o->ckpt_dir, latest, sizeof latest);
    if (step >= 0 && !o->resume)
        up_die_all("--ckpt-dir %s already holds checkpoints (newest %s): add --resume to continue "
                   "from it, or use an empty folder", o->ckpt_dir, latest);
    /* a SIGXFSZ (file-size limit) becomes a write error with a message, not a kill */
    signal(SIGXFSZ, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

/* ---- setup ---------------------------------------------------------------------------------- */

/* Threads, then every check before any large allocation (every rank, same verdict), then the
 * communicator. */
static void run_setup(train_run *r) {
    train_options *o = &r->o;
    int local = node_ranks();
    r->threads = default_threads(o->threads, local);
    if (r->rank == 0) warn_oversubscribed(r->threads, local, o->threads > 0);
    omp_set_num_threads(r->threads);
    blas_set_threads(r->threads);

    char err[512];
    int world = r->world, P = o->cp > 0 ? o->cp : world;
    r->P = P;
    if (world % P)
        up_die_all("--cp %d does not divide the %d ranks: use a divisor of %d", P, world, world);
    if (config_load(&r->cfg, o->config, err, sizeof err) != 0) up_die_all("%s", err);
    if (model_check_layout(&r->cfg, o->T, P, world, err, sizeof err) != 0) up_die_all("%s", err);
    if (o->doc_sep >= r->cfg.V)
        up_die_all("--doc-sep %ld is outside the vocabulary (vocab_size %d): use a separator "
                   "below %d, or a config whose vocab_size holds it (at least %ld)", o->doc_sep,
                   r->cfg.V, r->cfg.V, o->doc_sep + 1);
    if (shard_open(&r->shard, o->data, r->cfg.V, err, sizeof err) != 0) up_die_all("%s", err);
    struct sigaction bus;
    memset(&bus, 0, sizeof bus);
    bus.sa_handler = on_sigbus;
    sigemptyset(&bus.sa_mask);
    sigaction(SIGBUS, &bus, NULL);
    size_t ntok = r->shard.ntok;
    if (ntok < (size_t)o->T + 1)
        up_die_all("--seq-len %ld needs %ld tokens per step but %s holds %zu: use --seq-len %zu "
                   "or less, or a larger shard",
                   o->T, o->T + 1, o->data, ntok, ntok - 1);
    if (o->loss_mask && mask_open(&r->mask, o->loss_mask, ntok, err, sizeof err) != 0)
        up_die_all("--loss-mask %s", err);
    if (o->init && !up_file_readable(o->init))
        up_die_all("--init %s: cannot read the file (%s)", o->init, strerror(errno));

    if (o->mopt.tile_mlp < 0) o->mopt.tile_mlp = r->cfg.C; /* flag without a size: ~C tokens */
    if (o->mopt.tile_loss < 0) o->mopt.tile_loss = r->cfg.C;
    if (model_check_options(&r->cfg, P, &o->mopt, err, sizeof err) != 0) up_die_all("%s", err);

    comm_init(&r->comm, MPI_COMM_WORLD, P);
    r->T_loc = (int)(o->T / P);
    check_outputs(r);
}

/* The plan: the model's own sizing code under plan mode, before anything is allocated. */
static report_memory run_plan(train_run *r) {
    mem_plan_begin();
    model_init(&r->m, &r->cfg, r->T_loc, &r->comm, &r->o.mopt);
    model_free(&r->m);
    if (r->o.ckpt_dir) mem_alloc(MEM_WORKSPACE, ckpt_stage_bytes()); /* counted, not allocated */
    if (r->o.loss_mask) mem_alloc(MEM_WORKSPACE, (size_t)r->T_loc);
    report_memory plan = report_capture();
    mem_plan_end();
    return plan;
}

static void print_summary(const train_run *r) {
    const train_options *o = &r->o;
    const model *m = &r->m;
    const model_config *c = &m->cfg;
    char b1[32], b2[32];
    printf("upipe train: %s\n", o->config);
    printf("  model   C=%d L=%d NH=%d NKV=%d HS=%d F=%d V=%d%s rope_theta=%g%s, %.2fM params\n",
           c->C, c->L, c->NH, c->NKV, c->HS, c->F, c->V, c->tied ? " tied" : "", c->rope_theta,
           c->rope.type == ROPE_SCALING_LLAMA3 ? " llama3-scaling" : "",
           (double)m->params.nparams / 1e6);
    printf("  data    %s, T=%ld tokens per step, %ld steps\n", o->data, o->T, o->steps);
    printf("  optim   AdamW lr=%g warmup=%ld cosine to %g x lr, wd=%g, betas=(%g, %g), clip=%g\n",
           o->lr, o->warmup, o->min_lr_frac, o->weight_decay, o->beta1, o->beta2, o->grad_clip);
    printf("  init    %s\n", r->resumed_from[0] ? r->resumed_from
                          : o->init                ? o->init
                                                   : "random (seed)");
    printf("  machine %d threads, %s\n", r->threads, blas_describe());
    printf("  memory  %s accounted after allocation (model state %s)\n",
           up_fmt_bytes(b1, sizeof b1, (double)mem_live_total()),
           up_fmt_bytes(b2, sizeof b2,
                        (double)(mem_live(MEM_PARAMS) + mem_live(MEM_GRADS) +
                                 mem_live(MEM_OPTIMIZER))));
    printf("  layout  %d ranks: %d replica(s) x context-parallel %d, T_loc=%d\n", r->world,
           r->comm.D, r->P, r->T_loc);
    fflush(stdout);
}

/* The mathematics of this run, for a checkpoint's state and the resume check. */
static ckpt_state run_state(const train_run *r, long step) {
    const train_options *o = &r->o;
    ckpt_state st = {step,         o->steps,     o->T,       (long)r->comm.D * o->accum,
                     o->warmup,    o->lr,        o->min_lr_frac, o->weight_decay,
                     o->beta1,     o->beta2,     o->adam_eps, o->grad_clip, o->seed};
    return st;
}

/* The model (loaded or random), the summary, the log file and the per-step constants. */
static void run_start(train_run *r) {
    const train_options *o = &r->o;
    model_init(&r->m, &r->cfg, r->T_loc, &r->comm, &o->mopt);
    if (o->ckpt_dir) r->ckpt_stage = mem_alloc(MEM_WORKSPACE, ckpt_stage_bytes());
    if (o->loss_mask) r->mask_buf = mem_alloc(MEM_WORKSPACE, (size_t)r->T_loc);
    double t0 = now_s(), read_bytes = 0;
    if (o->resume && ckpt_find_latest(o->ckpt_dir, r->resumed_from, sizeof r->resumed_from) >= 0) {
        ckpt_state run = run_state(r, 0);
        r->start_step = ckpt_check(r->resumed_from, &run, &r->cfg);
        read_bytes = ckpt_load(&r->m, r->resumed_from);
    } else if (o->init) {
        model_load(&r->m, o->init);
    } else {
        model_init_random(&r->m, o->seed);
    }
    comm_sum_double(&r->comm, &read_bytes);
    if (r->rank == 0 && !o->quiet) {
        print_summary(r);
        if (r->resumed_from[0])
            printf("resumed from %s at step %ld (%.1f MiB read in %.2f s)\n", r->resumed_from,
                   r->start_step, read_bytes / 1048576.0, now_s() - t0);
        else if (o->resume)
            printf("no checkpoint in %s yet: starting at step 0\n", o->ckpt_dir);
        fflush(stdout);
    }

    if (o->log && r->rank == 0) {
        r->logf = fopen(o->log, r->start_step > 0 ? "a" : "w"); /* a resumed run continues it */
        if (!r->logf) up_die("--log %s: cannot create (%s)", o->log, strerror(errno));
    }
    r->hp = (adamw_params){(float)o->lr, (float)o->beta1, (float)o->beta2, (float)o->adam_eps,
                           (float)o->weight_decay};
    /* one step processes D * accum sequences of T tokens */
    r->flops = model_flops_per_step(&r->cfg, (int)o->T) * r->comm.D * o->accum;
    r->tokens = (double)o->T * r->comm.D * o->accum;
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
    int t = model_first_nonfinite_grad(&r->m);
    char where[160];
    if (t >= 0)
        snprintf(where, sizeof where, "first NaN/Inf gradient in %s", r->m.params.tensors[t].name);
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
    model *m = &r->m;
    train_step_stats s = {.step = step};
    comm_reset_stats(comm);
    double t0 = now_s();
    char err[1024];
    if (shard_check(&r->shard, err, sizeof err) != 0) up_die("--data %s", err);
    /* targets of all micro-batches first: the loss is token-weighted over the global batch,
     * so the gradient scale 1/(valid targets, all ranks) is known before the forward */
    long long valid = 0;
    for (int b = 0; b < o->accum; b++) {
        read_tokens(r, step_seq(step, comm, o->accum, b), m);
        for (int i = 0; i < r->T_loc; i++) valid += m->targets[i] >= 0;
    }
    double zero = 0;
    comm_reduce_loss(comm, &zero, &valid);
    float scale = valid > 0 ? 1.0f / (float)valid : 0.0f;

    model_zero_grads(m);
    double loss_sum = 0;
    for (int b = 0; b < o->accum; b++) {
        read_tokens(r, step_seq(step, comm, o->accum, b), m);
        if (o->doc_sep >= 0) {
            int nd = model_set_documents(m, (int32_t)o->doc_sep);
            if (comm->cp_rank == 0) s.docs += nd; /* each replica's windows once */
        }
        loss_sum += model_forward(m, scale);
        model_backward(m);
    }
    long long local = 0;
    comm_reduce_loss(comm, &loss_sum, &local); /* token-weighted over all ranks */
    s.targets = valid;
    if (o->doc_sep >= 0) comm_sum_double(comm, &s.docs);
    model_reduce_grads(m);
    s.loss = valid > 0 ? loss_sum / (double)valid : 0.0;

    if (step == 0 && o->save_grads) model_save_grads(m, o->save_grads);

    s.norm = model_grad_norm(m);
    if (!isfinite(s.loss) || !isfinite(s.norm))
        run_nonfinite(r, &s);
    else
        r->skips_in_row = 0;
    float clip = clip_factor(s.norm, (float)o->grad_clip);
    s.lr = lr_schedule((int)step, (int)o->steps, (float)o->lr, (int)o->warmup,
                       (float)o->min_lr_frac);
    if (o->lr > 0 && !s.skipped) {
        r->hp.lr = s.lr;
        model_optimizer_step(m, &r->hp, (int)step + 1, clip);
    } else {
        s.lr = 0; /* no update: --lr 0, or a skipped step */
    }
    s.dt = now_s() - t0;
    s.comm_s = comm_seconds(comm);
    s.attn_s = cp_attention_seconds(m->attn, 1);
    return s;
}

/* ---- per-step output ------------------------------------------------------------------------ */

static void print_step_line(const train_run *r, const train_step_stats *s, double tps) {
    char pk[32], eta[32];
    double elapsed = now_s() - r->t_start;
    fmt_duration(eta, sizeof eta,
                 elapsed / (double)(s->step + 1 - r->start_step) *
                     (double)(r->o.steps - s->step - 1));
    printf("step %4ld/%ld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.1f GF/s | "
           "%.2f s (comm %.0f%%) | peak %s | eta %s%s\n",
           s->step + 1, r->o.steps, s->loss, s->lr, s->norm, tps, r->flops / s->dt / 1e9, s->dt,
           100.0 * s->comm_s / s->dt, up_fmt_bytes(pk, sizeof pk, (double)mem_peak_total()), eta,
           s->skipped ? " | skipped: not finite, no update" : "");
    fflush(stdout);
}

/* A JSON real rounded to `digits` significant digits (the log keeps the loss, lr and norm to 9
 * digits, the timings and rates to 6); null when not finite (JSON has no inf or nan). */
static json_t *json_real_digits(double x, int digits) {
    if (!isfinite(x)) return json_null();
    char buf[48];
    snprintf(buf, sizeof buf, "%.*g", digits, x);
    return json_real(strtod(buf, NULL));
}

/* One JSON object on one line of the --log file, keys in this order; flushed, so a crash
 * loses no finished step. */
static void write_log_record(const train_run *r, const train_step_stats *s, double tps) {
    const comm_stat *st = r->comm.stats;
    json_t *rec = json_object();
    json_object_set_new(rec, "step", json_integer((json_int_t)s->step + 1));
    json_object_set_new(rec, "loss", json_real_digits(s->loss, 9));
    json_object_set_new(rec, "lr", json_real_digits(s->lr, 9));
    json_object_set_new(rec, "grad_norm", json_real_digits(s->norm, 9));
    if (s->skipped) { /* --on-nonfinite skip; absent on steps that updated */
        json_object_set_new(rec, "skipped", json_integer(1));
        json_object_set_new(rec, "skipped_total", json_integer((json_int_t)r->skips_total));
    }
    json_object_set_new(rec, "targets", json_integer(s->targets));
    if (r->o.doc_sep >= 0) json_object_set_new(rec, "documents", json_integer((json_int_t)s->docs));
    json_object_set_new(rec, "tokens_per_s", json_real_digits(tps, 6));
    json_object_set_new(rec, "step_s", json_real_digits(s->dt, 6));
    json_object_set_new(rec, "compute_s", json_real_digits(s->dt - s->comm_s, 6));
    json_object_set_new(rec, "comm_s", json_real_digits(s->comm_s, 6));
    json_object_set_new(rec, "a2a_s",
                        json_real_digits(st[COMM_SEQ_TO_HEAD].seconds +
                                             st[COMM_HEAD_TO_SEQ].seconds, 6));
    json_object_set_new(rec, "a2a_mpi_s",
                        json_real_digits(st[COMM_SEQ_TO_HEAD].mpi_seconds +
                                             st[COMM_HEAD_TO_SEQ].mpi_seconds, 6));
    json_object_set_new(rec, "a2a_bytes",
                        json_real_digits(st[COMM_SEQ_TO_HEAD].bytes + st[COMM_HEAD_TO_SEQ].bytes,
                                         6));
    json_object_set_new(rec, "attn_s", json_real_digits(s->attn_s, 6));
    json_object_set_new(rec, "fsdp_s",
                        json_real_digits(st[COMM_FSDP_GATHER].seconds +
                                             st[COMM_FSDP_REDUCE].seconds, 6));
    json_object_set_new(rec, "grad_reduce_s", json_real_digits(st[COMM_GRAD_REDUCE].seconds, 6));
    json_object_set_new(rec, "flops_per_s", json_real_digits(r->flops / s->dt, 6));
    json_object_set_new(rec, "peak_bytes", json_integer((json_int_t)mem_peak_total()));
    json_object_set_new(rec, "rss_bytes", json_integer((json_int_t)mem_rss_now()));
    if (s->ckpt_bytes > 0) {
        json_object_set_new(rec, "ckpt_s", json_real_digits(s->ckpt_s, 6));
        json_object_set_new(rec, "ckpt_bytes", json_real_digits(s->ckpt_bytes, 12));
    }
    /* no JSON_INDENT, no JSON_COMPACT: one line of "key": value pairs */
    char *line = json_dumps(rec, JSON_REAL_PRECISION(9));
    json_decref(rec);
    UP_CHECK(line, "json_dumps failed");
    int failed = fprintf(r->logf, "%s\n", line) < 0 || fflush(r->logf) != 0;
    free(line);
    if (failed) up_die("--log %s: write failed (%s)", r->o.log, strerror(errno));
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
    if (r->rank != 0) return;
    double tps = r->tokens / s->dt;
    if (!r->o.quiet) print_step_line(r, s, tps);
    if (!r->o.quiet && s->ckpt_bytes > 0) {
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
    int sig = 0;
    if (comm_any(&r->comm, g_signal != 0)) { /* the same verdict on every rank */
        int mine = (int)g_signal;
        MPI_Allreduce(MPI_IN_PLACE, &mine, 1, MPI_INT, MPI_MAX, r->comm.world);
        sig = mine;
    }
    int stop = sig ? sig : done == o->stop_at ? -1 : 0;
    if (done == o->steps) stop = 0; /* the last step: finish normally (and --save) */
    if (!(stop || done == o->steps || (o->ckpt_every && done % o->ckpt_every == 0))) return 0;
    double t0 = now_s();
    ckpt_state st = run_state(r, done);
    s->ckpt_bytes =
        ckpt_write(&r->m, &r->comm, o->ckpt_dir, &st, &r->cfg, o->ckpt_keep, r->ckpt_stage);
    s->ckpt_s = now_s() - t0;
    return stop;
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
    mem_free(r->ckpt_stage);
    mem_free(r->mask_buf);
    model_free(&r->m);
}

/* ---- finish --------------------------------------------------------------------------------- */

/* Closes the log, writes the weights and the measured memory report, prints the closing line and
 * frees everything. Collective. */
static void run_finish(train_run *r) {
    const train_options *o = &r->o;
    if (r->logf && fclose(r->logf) != 0) up_die("--log %s: write failed", o->log);
    r->logf = NULL;
    if (o->save) model_save_params(&r->m, o->save);
    if (o->mem_report) {
        report_memory measured = report_capture();
        measured.rss = mem_rss_peak();
        report_write_memory(o->mem_report, &r->comm, &measured, 0);
    }
    if (r->rank == 0 && !o->quiet && r->start_step >= o->steps) {
        printf("nothing to train: %s is already at --steps %ld\n", r->resumed_from, o->steps);
    } else if (r->rank == 0 && !o->quiet) {
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
    }
    mem_free(r->ckpt_stage);
    mem_free(r->mask_buf);
    model_free(&r->m);
}

int train_main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    train_run r;
    memset(&r, 0, sizeof r);
    MPI_Comm_rank(MPI_COMM_WORLD, &r.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r.world);
    up_set_rank(r.rank, r.world);
    if (train_parse_args(&r.o, argc, argv) == 1) {
        if (r.rank == 0) train_print_help();
        MPI_Finalize();
        return 0;
    }

    run_setup(&r);
    report_memory plan = run_plan(&r);
    if (r.o.dry_run) {
        if (r.rank == 0) report_print_plan(&plan, &r.o, &r.cfg, r.P, r.T_loc);
        if (r.o.mem_report) report_write_memory(r.o.mem_report, &r.comm, &plan, 1);
    } else {
        report_check_mem_limit(&plan, &r.o);
        watchdog_start(r.o.watchdog);
        run_start(&r);
        int stopped = 0;
        for (long step = r.start_step; step < r.o.steps && !stopped; step++) {
            train_step_stats s = run_step(&r, step);
            watchdog_step(step, s.dt);
            stopped = run_checkpoint(&r, &s);
            run_record(&r, &s);
        }
        if (stopped) run_stop(&r, stopped);
        else run_finish(&r);
        watchdog_stop();
    }
    comm_free(&r.comm);
    shard_close(&r.shard);
    mask_close(&r.mask);
    MPI_Finalize();
    return 0;
}
