/* setup.c — before the first step of `upipe train`: threads (and a warning when there are more
 * than cores), every check that can fail before anything large is allocated (flags against the
 * config and layout, the data and mask, every output path, the checkpoint folder), the signal
 * handlers, and the memory plan. */
#include "train/setup.h"
#include "train/run.h"

#include "core/check.h"
#include "core/fileio.h"
#include "core/mem.h"
#include "core/trace.h"
#include "kernels/kernels.h"
#include "train/ckpt.h"
#include "train/ckpt_lock.h"

#include <errno.h>
#include <mpi.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The first SIGTERM or SIGINT asks for a checkpoint and a clean exit after the current step; a
 * second SIGINT (Ctrl-C again) stops at once (default action). A repeated SIGTERM does not: batch
 * systems send it more than once (SLURM's preemption: twice, milliseconds apart, from the step's
 * slurmstepd, tests/slurm/slurm.sh) and end a job that outlives their grace with SIGKILL. */
static volatile sig_atomic_t g_signal;

int run_signal_pending(void) {
    return (int)g_signal;
}

static void on_signal(int sig) {
    if (g_signal && sig == SIGINT) {
        up_tmp_remove_all(); /* no temporary file survives */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    if (!g_signal) g_signal = sig;
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

int setup_threads(int requested, int rank) {
    int local = node_ranks();
    int threads = default_threads(requested, local);
    if (rank == 0) warn_oversubscribed(threads, local, requested > 0);
    omp_set_num_threads(threads);
    blas_set_threads(threads);
    return threads;
}

int setup_check_writable(const char *flag, const char *path, char *err, size_t len) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return up_errf(err, len, NULL, "%s %s is a folder: give a file name", flag, path);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return up_errf(err, len, NULL, "%s %s: the folder %s does not exist: create it first", flag,
                       path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return up_errf(err, len, NULL, "%s %s: the folder %s is not writable (%s)", flag, path, dir,
                       strerror(errno));
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
        const char *flags[] = {"--save", "--save-grads", "--log", "--mem-report", "--trace"};
        const char *paths[] = {o->save, o->save_grads, o->log, o->front.mem_report, o->front.trace};
        for (int i = 0; i < 5 && !bad; i++)
            if (paths[i]) bad = setup_check_writable(flags[i], paths[i], err, sizeof err) != 0;
    }
    if (o->ckpt_dir && !bad && !o->front.dry_run) {
        struct stat st;
        if (mkdir(o->ckpt_dir, 0755) != 0 && errno != EEXIST)
            bad = up_errf(err, sizeof err, NULL, "--ckpt-dir %s: cannot create the folder (%s)",
                          o->ckpt_dir, strerror(errno)) != 0;
        else if (stat(o->ckpt_dir, &st) != 0 || !S_ISDIR(st.st_mode))
            bad = up_errf(err, sizeof err, NULL, "--ckpt-dir %s is not a folder", o->ckpt_dir);
        else if (access(o->ckpt_dir, W_OK | X_OK) != 0)
            bad = up_errf(err, sizeof err, NULL, "--ckpt-dir %s is not writable (%s)", o->ckpt_dir,
                          strerror(errno)) != 0;
    }
    if (comm_any(&r->comm, bad)) up_die_agreed(bad ? err : NULL);
    if (!o->ckpt_dir || o->front.dry_run) return;
    /* one job per folder: a second one stops here, before anything is allocated */
    if (r->rank == 0) bad = ckpt_lock_take(o->ckpt_dir, err, sizeof err) != 0;
    if (comm_any(&r->comm, bad)) up_die_all("%s", err); /* rank 0's message, said once */
    char latest[4096];
    long step = ckpt_find_latest(o->ckpt_dir, latest, sizeof latest);
    if (step >= 0 && !o->resume)
        up_die_all("--ckpt-dir %s already holds checkpoints (newest %s): add --resume to continue "
                   "from it, or use an empty folder",
                   o->ckpt_dir, latest);
    /* a SIGXFSZ (file-size limit) becomes a write error with a message, not a kill */
    signal(SIGXFSZ, SIG_IGN);
    static const int graceful[] = {SIGTERM, SIGINT};
    up_catch_signals(on_signal, graceful, 2);
}

/* ---- setup ---------------------------------------------------------------------------------- */

void setup_config(model_config *cfg, const char *path, long T, int P, int world, long doc_sep) {
    char err[512];
    if (world % P)
        up_die_all("--cp %d does not divide the %d ranks: use a divisor of %d", P, world, world);
    if (config_load(cfg, path, err, sizeof err) != 0) up_die_all("%s", err);
    if (model_check_layout(cfg, T, P, world, err, sizeof err) != 0) up_die_all("%s", err);
    if (doc_sep >= cfg->V)
        up_die_all("--doc-sep %ld is outside the vocabulary (vocab_size %d): use a separator "
                   "below %d, or a config whose vocab_size holds it (at least %ld)",
                   doc_sep, cfg->V, cfg->V, doc_sep + 1);
}

void setup_shard(token_shard *s, const char *flag, const char *path, int V) {
    char err[512];
    if (shard_open(s, path, V, err, sizeof err) != 0) {
        if (strcmp(flag, "--data") == 0) up_die_all("%s", err);
        up_die_all("%s %s", flag, err);
    }
    static const int bus[] = {SIGBUS};
    up_catch_signals(on_sigbus, bus, 1);
}

void setup_warn_window(const model_config *cfg, long T, const token_shard *s, const char *path,
                       long doc_sep, int rank) {
    if (rank != 0) return;
    if (cfg->max_pos > 0 && T > cfg->max_pos) {
        char rope[128] = "none";
        if (cfg->rope.type == ROPE_SCALING_LLAMA3)
            snprintf(rope, sizeof rope, "llama3 factor %g, original_max_position_embeddings %d",
                     (double)cfg->rope.factor, cfg->rope.original_max_pos);
        fprintf(stderr,
                "upipe: warning: --seq-len %ld is above max_position_embeddings %ld of "
                "the config (rope_scaling: %s): positions beyond it were never trained\n",
                T, cfg->max_pos, rope);
    }
    if (doc_sep >= 0 && !shard_contains(s, (uint32_t)doc_sep))
        fprintf(stderr,
                "upipe: warning: --doc-sep %ld never occurs in %s: every window is one "
                "document; check the separator the shard was made with (upipe data --doc-sep)\n",
                doc_sep, path);
    fflush(stderr);
}

void setup_model_options(const model_config *cfg, int P, model_options *mopt) {
    char err[512];
    if (mopt->tile_mlp < 0) mopt->tile_mlp = cfg->C; /* flag without a size: ~C tokens */
    if (mopt->tile_loss < 0) mopt->tile_loss = cfg->C;
    if (model_check_options(cfg, P, mopt, err, sizeof err) != 0) up_die_all("%s", err);
}

/* --val-data: the shard, its windows of --seq-len tokens, and whether it is a recall corpus. */
static void setup_validation(train_run *r) {
    const train_options *o = &r->o;
    setup_shard(&r->val_shard, "--val-data", o->val_data, r->cfg.V);
    long avail = eval_windows_available(&r->val_shard, o->front.T);
    if (avail < 1)
        up_die_all("--val-data %s holds %zu tokens, fewer than one window of --seq-len %ld needs "
                   "(%ld): use a larger validation shard",
                   o->val_data, r->val_shard.ntok, o->front.T, o->front.T + 1);
    if (o->val_windows > avail)
        up_die_all("--val-windows %ld: %s holds %ld window%s of %ld tokens: use --val-windows %ld "
                   "or less",
                   o->val_windows, o->val_data, avail, avail == 1 ? "" : "s", o->front.T, avail);
    r->val_windows = o->val_windows              ? o->val_windows
                     : avail < TRAIN_VAL_WINDOWS ? avail
                                                 : TRAIN_VAL_WINDOWS;
    /* the model: run_alloc_all */
    r->val = (eval_source){.m = NULL,
                           .shard = &r->val_shard,
                           .doc_sep = o->front.doc_sep,
                           .recall = eval_detect_recall(&r->val_shard)};
}

/* --data and --loss-mask: the shards, long enough for a step, aligned with each other. */
static void setup_data(train_run *r) {
    const train_options *o = &r->o;
    char err[512];
    setup_shard(&r->shard, "--data", o->front.data, r->cfg.V);
    size_t ntok = r->shard.ntok;
    if (ntok < (size_t)o->front.T + 1)
        up_die_all("--seq-len %ld needs %ld tokens per step but %s holds %zu: use --seq-len %zu "
                   "or less, or a larger shard",
                   o->front.T, o->front.T + 1, o->front.data, ntok, ntok - 1);
    if (o->front.loss_mask && mask_open(&r->mask, o->front.loss_mask, ntok, err, sizeof err) != 0)
        up_die_all("--loss-mask %s", err);
    setup_warn_window(&r->cfg, o->front.T, &r->shard, o->front.data, o->front.doc_sep, r->rank);
}

/* Threads, then every check before any large allocation (every rank, same verdict), then the
 * communicator. */
void run_setup(train_run *r) {
    train_options *o = &r->o;
    r->threads = setup_threads(o->front.threads, r->rank);

    char err[512];
    /* the attention kernels' path (UPIPE_KERNEL or the CPU's best): it sizes the workspace of
     * the plan. A rank's own finding (its CPU), so a refusal aborts the job. */
    if (kernel_path_init(err, sizeof err) != 0) up_die("%s", err);
    int world = r->world, P = o->front.cp > 0 ? o->front.cp : world;
    r->P = P;
    setup_config(&r->cfg, o->front.config, o->front.T, P, world, o->front.doc_sep);
    if (o->front.data) setup_data(r); /* --dry-run plans without it */
    if (o->init && !up_file_readable(o->init))
        up_die_all("--init %s: cannot read the file (%s)", o->init, strerror(errno));
    if (o->val_data) setup_validation(r);

    setup_model_options(&r->cfg, P, &o->front.mopt);

    comm_init(&r->comm, MPI_COMM_WORLD, P);
    front_check_kernels(&r->comm);
    front_load_device(&o->front, &r->comm);
    r->T_loc = (int)(o->front.T / P);
    check_outputs(r);
}

/* The process's own resident memory, measured once before anything large is allocated: code,
 * libraries, MPI's shared segments, the OpenMP threads and their stacks, and OpenBLAS's
 * per-thread packing buffers, touched here as wide as the run's widest product will touch them:
 * OpenBLAS packs a block of the right operand (its depth, at most 1024 here, times the product's
 * width) into a 128 MiB buffer, which a width of 131072 fills (measured: 10 MiB at width 8192,
 * 40 MiB at 32000, 128 MiB at 131072). It is the `runtime` category of the plan and of the
 * report, so that they bound the process's real RSS (DESIGN.md §5). The peak RSS starts over
 * afterwards, so the touch itself is not in it. */
size_t setup_runtime(const model_config *c, int T_loc) {
    int widest = T_loc;
    const int dims[] = {c->C, c->F, c->V, c->NH * c->HS};
    for (int i = 0; i < 4; i++)
        widest = dims[i] > widest ? dims[i] : widest;
    widest = widest < 131072 ? widest : 131072;
#pragma omp parallel
    { /* starts the OpenMP threads: their stacks belong to the baseline */
    }
    if (blas_touch_buffers(widest, 1024) != 0) up_die("out of memory before the run started");
    mem_rss_reset_peak();
    return mem_rss_now();
}

/* The job's one allocation list: the model, the checkpoint writer's staging buffer, the mask
 * bytes, the validation scratch (and, under plan mode, the trace's buffers: trace_start
 * allocates them for real before the model, so the offload store's I/O thread has its track). */
void run_alloc_all(train_run *r) {
    const train_options *o = &r->o;
    if (o->front.trace && mem_planning()) trace_plan(o->front.mopt.offload_dir != NULL);
    r->m = model_init(&r->cfg, r->T_loc, &r->comm, &o->front.mopt);
    if (o->ckpt_dir) r->ckpt_stage = mem_alloc(MEM_WORKSPACE, ckpt_stage_bytes());
    if (o->front.loss_mask) r->mask_buf = mem_alloc(MEM_WORKSPACE, (size_t)r->T_loc);
    r->val.m = r->m;
    if (o->val_data) eval_alloc(&r->val);
}

void run_free_all(train_run *r) {
    eval_free(&r->val);
    mem_free(r->ckpt_stage);
    mem_free(r->mask_buf);
    model_free(r->m);
    r->ckpt_stage = NULL;
    r->mask_buf = NULL;
    r->m = NULL;
    r->val.m = NULL;
}

/* The plan: run_alloc_all under plan mode (counted, not allocated), before anything is. */
report_memory run_plan(train_run *r) {
    r->runtime = setup_runtime(&r->cfg, r->T_loc);
    mem_plan_begin();
    mem_count(MEM_RUNTIME, (long long)r->runtime);
    run_alloc_all(r);
    report_memory plan = report_capture();
    run_free_all(r);
    mem_plan_end();
    return plan;
}
