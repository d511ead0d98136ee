#include "train/train.h"

#include "comm/comm.h"
#include "core/check.h"
#include "core/fileio.h"
#include "core/mem.h"
#include "io/config.h"
#include "io/shard.h"
#include "kernels/kernels.h"
#include "model/model.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- options -------------------------------------------------------------------------------- */

void train_print_help(void) {
    printf(
        "usage: upipe train --config FILE --data FILE [flags]\n\n"
        "Trains a Llama-style model (HF config.json) on an llm.c token shard.\n\n"
        "model and data\n"
        "  --config FILE          HF LlamaForCausalLM config.json (required)\n"
        "  --data FILE            llm.c token shard (required; make one with `upipe data`)\n"
        "  --seq-len T            tokens per sequence (default 1024); step k reads the T+1\n"
        "                         tokens at k*T, wrapping around at the end of the shard\n"
        "  --init FILE            start from these weights (safetensors, HF names, F32/BF16);\n"
        "                         default: random init from --seed\n"
        "  --seed S               seed of the random init (default 1234)\n\n"
        "optimisation\n"
        "  --steps N              training steps (default 10)\n"
        "  --grad-accum B         sequences per replica per step, gradients accumulated\n"
        "                         (default 1); replica d's b-th sequence of step k starts at\n"
        "                         token ((k*D + d)*B + b)*T\n"
        "  --lr X                 peak learning rate (default 3e-4; 0 = no update)\n"
        "  --warmup N             linear warm-up steps (default: 10%% of --steps, at most 100)\n"
        "  --min-lr-frac X        cosine decay ends at lr * X (default 0.1)\n"
        "  --weight-decay X       AdamW decoupled weight decay on matrices (default 0.1)\n"
        "  --beta1 X, --beta2 X   AdamW moments (default 0.9, 0.95)\n"
        "  --adam-eps X           AdamW epsilon (default 1e-8)\n"
        "  --grad-clip X          clip the global gradient norm to X (default 1.0; 0 = off)\n\n"
        "outputs\n"
        "  --save FILE            write the final weights (safetensors, F32, HF names)\n"
        "  --save-grads FILE      write the raw gradients of the first step's loss (before\n"
        "                         clipping and before any update; safetensors, F32, HF names)\n"
        "  --log FILE             one JSON object per step (step, loss, lr, grad_norm,\n"
        "                         tokens_per_s, step_s, peak_bytes, rss_bytes)\n"
        "  --mem-report FILE      JSON memory report: peak_bytes, rss_peak_bytes,\n"
        "                         offloaded_peak_bytes, categories (max over ranks)\n"
        "  --quiet                no summary and no per-step lines on the terminal\n\n"
        "memory (each leaves the loss and gradients unchanged)\n"
        "  --checkpoint           keep only each layer's input, recompute the layer in backward\n"
        "  --offload DIR          move the layer inputs to a file in DIR (unlinked at once), back\n"
        "                         one layer ahead of backward; implies --checkpoint\n"
        "  --tile-mlp [N]         run the MLP over tiles of N tokens (default N: hidden_size)\n"
        "  --tile-loss [N]        final norm, LM head and loss over tiles of N tokens, the\n"
        "                         (T, vocab) logits never exist (default N: hidden_size)\n"
        "  --upipe-heads U        attention in stages of U query heads (UPipe; U/P per rank);\n"
        "                         attention memory shrinks by U/num_attention_heads\n"
        "  --dry-run              print the memory plan per category and exit (with\n"
        "                         --mem-report, write it in the report's JSON schema)\n"
        "  --mem-limit SIZE       refuse, before allocating, a run whose plan exceeds SIZE bytes\n"
        "                         per rank (suffixes KiB MiB GiB, KB MB GB: e.g. 6GiB)\n\n"
        "parallelism (launch with mpiexec -n R)\n"
        "  --cp P                 context-parallel degree: each sequence is split over P\n"
        "                         consecutive ranks (Ulysses); R/P replicas train on different\n"
        "                         sequences (default: P = R, one sequence over all ranks)\n"
        "  --fsdp                 shard parameters, gradients and AdamW state over all ranks\n"
        "                         (ZeRO-3): each layer is gathered before its forward and\n"
        "                         backward and its gradients reduce-scattered after\n\n"
        "machine\n"
        "  --threads N            OpenMP/OpenBLAS threads per rank (default: OMP_NUM_THREADS,\n"
        "                         else the cores divided by the ranks on this node)\n"
        "  --help                 this text\n");
}

static long parse_long(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        up_die_all("%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
    return v;
}

static double parse_double(const char *flag, const char *s, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        up_die_all("%s expects a number in [%g, %g], got '%s'", flag, lo, hi, s);
    return v;
}

/* "6GiB", "512MiB", "1.5GB", "1000000": bytes. */
static unsigned long long parse_size(const char *flag, const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},          {"B", 1},           {"KiB", 1024.0},  {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6},
                 {"GB", 1e9},      {"TB", 1e12},       {"K", 1024.0},    {"M", 1048576.0},
                 {"G", 1073741824.0}};
    if (errno == 0 && end != s && v > 0)
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
            if (!strcmp(end, units[i].suffix) && v * units[i].mult >= 1 &&
                v * units[i].mult < 1.8e19)
                return (unsigned long long)(v * units[i].mult);
    up_die_all("%s expects a size such as 6GiB, 512MiB or 1000000 (bytes), got '%s'", flag, s);
}

/* Value of a flag whose size is optional: --flag=N, --flag N, or --flag alone (-1: default). */
static int optional_count(const char *flag, int argc, char **argv) {
    if (optarg) return (int)parse_long(flag, optarg, 1, 1 << 30);
    if (optind < argc && argv[optind][0] >= '0' && argv[optind][0] <= '9')
        return (int)parse_long(flag, argv[optind++], 1, 1 << 30);
    return -1;
}

enum {
    OPT_CONFIG = 256, OPT_DATA, OPT_SEQ, OPT_STEPS, OPT_LR, OPT_WARMUP, OPT_MINLR, OPT_WD,
    OPT_B1, OPT_B2, OPT_EPS, OPT_CLIP, OPT_SEED, OPT_INIT, OPT_SAVE, OPT_SAVE_GRADS, OPT_LOG,
    OPT_MEMREP, OPT_THREADS, OPT_QUIET, OPT_HELP, OPT_CP, OPT_ACCUM, OPT_CKPT, OPT_OFFLOAD, OPT_TILE_MLP,
    OPT_TILE_LOSS, OPT_UPIPE, OPT_DRY, OPT_MEMLIM, OPT_FSDP
};

int train_parse_args(train_options *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    o->T = 1024;
    o->steps = 10;
    o->lr = 3e-4;
    o->warmup = -1;
    o->min_lr_frac = 0.1;
    o->weight_decay = 0.1;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->adam_eps = 1e-8;
    o->grad_clip = 1.0;
    o->seed = 1234;
    o->accum = 1;
    static const struct option longopts[] = {
        {"config", required_argument, 0, OPT_CONFIG},
        {"data", required_argument, 0, OPT_DATA},
        {"seq-len", required_argument, 0, OPT_SEQ},
        {"steps", required_argument, 0, OPT_STEPS},
        {"lr", required_argument, 0, OPT_LR},
        {"warmup", required_argument, 0, OPT_WARMUP},
        {"min-lr-frac", required_argument, 0, OPT_MINLR},
        {"weight-decay", required_argument, 0, OPT_WD},
        {"beta1", required_argument, 0, OPT_B1},
        {"beta2", required_argument, 0, OPT_B2},
        {"adam-eps", required_argument, 0, OPT_EPS},
        {"grad-clip", required_argument, 0, OPT_CLIP},
        {"seed", required_argument, 0, OPT_SEED},
        {"init", required_argument, 0, OPT_INIT},
        {"save", required_argument, 0, OPT_SAVE},
        {"save-grads", required_argument, 0, OPT_SAVE_GRADS},
        {"log", required_argument, 0, OPT_LOG},
        {"mem-report", required_argument, 0, OPT_MEMREP},
        {"threads", required_argument, 0, OPT_THREADS},
        {"quiet", no_argument, 0, OPT_QUIET},
        {"cp", required_argument, 0, OPT_CP},
        {"grad-accum", required_argument, 0, OPT_ACCUM},
        {"checkpoint", no_argument, 0, OPT_CKPT},
        {"offload", required_argument, 0, OPT_OFFLOAD},
        {"tile-mlp", optional_argument, 0, OPT_TILE_MLP},
        {"tile-loss", optional_argument, 0, OPT_TILE_LOSS},
        {"upipe-heads", required_argument, 0, OPT_UPIPE},
        {"dry-run", no_argument, 0, OPT_DRY},
        {"fsdp", no_argument, 0, OPT_FSDP},
        {"mem-limit", required_argument, 0, OPT_MEMLIM},
        {"help", no_argument, 0, OPT_HELP},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_CONFIG: o->config = optarg; break;
        case OPT_DATA: o->data = optarg; break;
        case OPT_SEQ: o->T = parse_long("--seq-len", optarg, 1, 1L << 30); break;
        case OPT_STEPS: o->steps = parse_long("--steps", optarg, 1, INT_MAX); break;
        case OPT_LR: o->lr = parse_double("--lr", optarg, 0, 10); break;
        case OPT_WARMUP: o->warmup = parse_long("--warmup", optarg, 0, INT_MAX); break;
        case OPT_MINLR: o->min_lr_frac = parse_double("--min-lr-frac", optarg, 0, 1); break;
        case OPT_WD: o->weight_decay = parse_double("--weight-decay", optarg, 0, 10); break;
        case OPT_B1: o->beta1 = parse_double("--beta1", optarg, 0, 0.999999); break;
        case OPT_B2: o->beta2 = parse_double("--beta2", optarg, 0, 0.999999999); break;
        case OPT_EPS: o->adam_eps = parse_double("--adam-eps", optarg, 0, 1); break;
        case OPT_CLIP: o->grad_clip = parse_double("--grad-clip", optarg, 0, 1e30); break;
        case OPT_SEED: o->seed = (uint64_t)parse_long("--seed", optarg, 0, 0x7fffffffffffffffL); break;
        case OPT_INIT: o->init = optarg; break;
        case OPT_SAVE: o->save = optarg; break;
        case OPT_SAVE_GRADS: o->save_grads = optarg; break;
        case OPT_LOG: o->log = optarg; break;
        case OPT_MEMREP: o->mem_report = optarg; break;
        case OPT_THREADS: o->threads = (int)parse_long("--threads", optarg, 1, 1024); break;
        case OPT_QUIET: o->quiet = 1; break;
        case OPT_CP: o->cp = (int)parse_long("--cp", optarg, 1, 1 << 20); break;
        case OPT_ACCUM: o->accum = (int)parse_long("--grad-accum", optarg, 1, 1 << 20); break;
        case OPT_CKPT: o->mopt.checkpoint = 1; break;
        case OPT_OFFLOAD: o->mopt.offload_dir = optarg; break;
        case OPT_TILE_MLP: o->mopt.tile_mlp = optional_count("--tile-mlp", argc, argv); break;
        case OPT_TILE_LOSS: o->mopt.tile_loss = optional_count("--tile-loss", argc, argv); break;
        case OPT_UPIPE: o->mopt.U = (int)parse_long("--upipe-heads", optarg, 1, 1 << 20); break;
        case OPT_DRY: o->dry_run = 1; break;
        case OPT_FSDP: o->mopt.fsdp = 1; break;
        case OPT_MEMLIM: o->mem_limit = parse_size("--mem-limit", optarg); break;
        case OPT_HELP: return 1;
        case ':': up_die_all("%s needs a value: see upipe train --help", argv[optind - 1]);
        default: up_die_all("unknown flag '%s': see upipe train --help", argv[optind - 1]);
        }
    }
    if (optind < argc)
        up_die_all("unexpected argument '%s': flags are --name value (see upipe train --help)",
                   argv[optind]);
    if (!o->config) up_die_all("--config FILE is required (an HF config.json): see upipe train --help");
    if (!o->data)
        up_die_all("--data FILE is required (make a shard with `upipe data text --input FILE "
                   "--output data.bin`)");
    if (o->warmup < 0) o->warmup = o->steps / 10 < 100 ? o->steps / 10 : 100;
    return 0;
}

/* ---- run ------------------------------------------------------------------------------------ */

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

static void print_summary(const train_options *o, const model *m, int threads) {
    const model_config *c = &m->cfg;
    char b1[32], b2[32];
    printf("upipe train: %s\n", o->config);
    printf("  model   C=%d L=%d NH=%d NKV=%d HS=%d F=%d V=%d%s rope_theta=%g%s, %.2fM params\n",
           c->C, c->L, c->NH, c->NKV, c->HS, c->F, c->V, c->tied ? " tied" : "", c->rope_theta,
           c->rope.type == ROPE_SCALING_LLAMA3 ? " llama3-scaling" : "",
           (double)m->nparams / 1e6);
    printf("  data    %s, T=%ld tokens per step, %ld steps\n", o->data, o->T, o->steps);
    printf("  optim   AdamW lr=%g warmup=%ld cosine to %g x lr, wd=%g, betas=(%g, %g), clip=%g\n",
           o->lr, o->warmup, o->min_lr_frac, o->weight_decay, o->beta1, o->beta2, o->grad_clip);
    printf("  init    %s\n", o->init ? o->init : "random (seed)");
    printf("  machine %d threads, %s\n", threads, blas_describe());
    printf("  memory  %s accounted after allocation (model state %s)\n",
           up_fmt_bytes(b1, sizeof b1, (double)mem_live_total()),
           up_fmt_bytes(b2, sizeof b2,
                        (double)(mem_live(MEM_PARAMS) + mem_live(MEM_GRADS) +
                                 mem_live(MEM_OPTIMIZER))));
    fflush(stdout);
}

/* Per-category bytes of a run: the plan (from plan mode) or the measured peaks. */
typedef struct {
    unsigned long long cat[MEM_COUNT], peak, offloaded, rss;
} mem_plan;

static mem_plan plan_capture(void) {
    mem_plan p;
    memset(&p, 0, sizeof p);
    for (int c = 0; c < MEM_COUNT; c++) p.cat[c] = mem_peak((mem_category)c);
    p.peak = mem_peak_total();
    p.offloaded = mem_offloaded_peak();
    return p;
}

/* Flags that shrink each category (for --mem-limit's refusal). */
static const char *g_shrink[MEM_COUNT] = {
    "more ranks (FSDP shards model state)", "more ranks (FSDP shards model state)",
    "more ranks (FSDP shards model state)", "--offload DIR",
    "--checkpoint",                          "--upipe-heads U (smaller U) or more --cp ranks",
    "--tile-mlp / --tile-loss",              "fewer ranks per group"};

static void print_plan(const mem_plan *p, const train_options *o, const model_config *c, int P,
                       int T_loc) {
    char b[32];
    printf("memory plan per rank: T=%ld (T_loc=%d, cp=%d), C=%d L=%d NH=%d NKV=%d F=%d V=%d\n",
           o->T, T_loc, P, c->C, c->L, c->NH, c->NKV, c->F, c->V);
    printf("  %-12s %12s\n", "category", "bytes");
    for (int k = 0; k < MEM_COUNT; k++)
        printf("  %-12s %12s\n", mem_category_name((mem_category)k),
               up_fmt_bytes(b, sizeof b, (double)p->cat[k]));
    printf("  %-12s %12s\n", "peak", up_fmt_bytes(b, sizeof b, (double)p->peak));
    printf("  %-12s %12s\n", "offloaded", up_fmt_bytes(b, sizeof b, (double)p->offloaded));
    fflush(stdout);
}

static UP_NORETURN void refuse_plan(const mem_plan *p, const train_options *o) {
    /* the two largest categories and what shrinks them */
    int a = 0, b = 1;
    for (int k = 0; k < MEM_COUNT; k++)
        if (p->cat[k] > p->cat[a]) a = k;
    if (a == b) b = 0;
    for (int k = 0; k < MEM_COUNT; k++)
        if (k != a && p->cat[k] > p->cat[b]) b = k;
    char s1[32], s2[32], s3[32], s4[32];
    up_die_all("the run needs %s per rank but --mem-limit is %s: largest are %s (%s: try %s) and "
               "%s (%s: try %s), or use a shorter --seq-len than %ld",
               up_fmt_bytes(s1, sizeof s1, (double)p->peak),
               up_fmt_bytes(s2, sizeof s2, (double)o->mem_limit),
               mem_category_name((mem_category)a), up_fmt_bytes(s3, sizeof s3, (double)p->cat[a]),
               g_shrink[a], mem_category_name((mem_category)b),
               up_fmt_bytes(s4, sizeof s4, (double)p->cat[b]), g_shrink[b], o->T);
}

/* The memory report (DESIGN.md §5), max over ranks; predicted: from the plan (no RSS). */
static void write_report(const char *path, comm_ctx *comm, const mem_plan *p, int predicted) {
    unsigned long long glob[MEM_COUNT + 3];
    for (int c = 0; c < MEM_COUNT; c++) glob[c] = p->cat[c];
    glob[MEM_COUNT] = p->peak;
    glob[MEM_COUNT + 1] = p->rss;
    glob[MEM_COUNT + 2] = p->offloaded;
    comm_max_u64(comm, glob, MEM_COUNT + 3);
    if (comm->rank != 0) return;
    json_t *root = json_object(), *cats = json_object();
    json_object_set_new(root, "peak_bytes", json_integer((json_int_t)glob[MEM_COUNT]));
    json_object_set_new(root, "rss_peak_bytes", json_integer((json_int_t)glob[MEM_COUNT + 1]));
    json_object_set_new(root, "offloaded_peak_bytes",
                        json_integer((json_int_t)glob[MEM_COUNT + 2]));
    for (int c = 0; c < MEM_COUNT; c++)
        json_object_set_new(cats, mem_category_name((mem_category)c),
                            json_integer((json_int_t)glob[c]));
    json_object_set_new(root, "categories", cats);
    json_object_set_new(root, "predicted", json_boolean(predicted));
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    UP_CHECK(text, "json_dumps failed");
    size_t n = strlen(text);
    char *buf = malloc(n + 2);
    UP_CHECK(buf, "out of memory");
    memcpy(buf, text, n);
    buf[n] = '\n';
    free(text);
    char err[512];
    int rc = up_write_file_atomic(path, buf, n + 1, err, sizeof err);
    free(buf);
    if (rc != 0) up_die("%s", err);
}

/* Index of the b-th sequence of this replica at step k: ((k*D + d)*B + b). */
static unsigned long long step_seq(long step, const comm_ctx *comm, int accum, int b) {
    return ((unsigned long long)step * comm->D + comm->dp_rank) * accum + b;
}

/* Reads this rank's slice of sequence seq: the sequence is the T+1 tokens at seq*T (wrapping
 * around the shard); CP rank r holds inputs r*T_loc.. and the targets shifted by one before the
 * split (DESIGN.md §1). */
static void read_tokens(const token_shard *shard, const comm_ctx *comm, long T, int T_loc,
                        unsigned long long seq, model *m) {
    size_t start = (size_t)((seq * (unsigned long long)T +
                             (unsigned long long)comm->cp_rank * T_loc) % shard->ntok);
    shard_read(shard, start, (size_t)T_loc, m->inputs);
    shard_read(shard, (start + 1) % shard->ntok, (size_t)T_loc, m->targets);
}

/* Threads per rank: --threads, else OMP_NUM_THREADS, else this node's cores over its ranks. */
static int default_threads(int requested) {
    if (requested > 0) return requested;
    if (getenv("OMP_NUM_THREADS")) return omp_get_max_threads();
    MPI_Comm node;
    int local = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
    int t = omp_get_num_procs() / local;
    return t > 0 ? t : 1;
}

int train_main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    up_set_rank(rank, world);

    train_options o;
    if (train_parse_args(&o, argc, argv) == 1) {
        if (rank == 0) train_print_help();
        MPI_Finalize();
        return 0;
    }
    int threads = default_threads(o.threads);
    omp_set_num_threads(threads);
    blas_set_threads(threads);

    /* ---- validate everything before any large allocation (every rank, same verdict) ---- */
    char err[512];
    int P = o.cp > 0 ? o.cp : world;
    if (world % P)
        up_die_all("--cp %d does not divide the %d ranks: use a divisor of %d", P, world, world);
    model_config cfg;
    if (config_load(&cfg, o.config, err, sizeof err) != 0) up_die_all("%s", err);
    if (model_check_layout(&cfg, o.T, P, world, err, sizeof err) != 0) up_die_all("%s", err);
    token_shard shard;
    if (shard_open(&shard, o.data, cfg.V, err, sizeof err) != 0) up_die_all("%s", err);
    if (shard.ntok < (size_t)o.T + 1)
        up_die_all("--seq-len %ld needs %ld tokens per step but %s holds %zu: use --seq-len %zu "
                   "or less, or a larger shard", o.T, o.T + 1, o.data, shard.ntok,
                   shard.ntok - 1);
    if (o.init && !up_file_readable(o.init))
        up_die_all("--init %s: cannot read the file (%s)", o.init, strerror(errno));

    if (o.mopt.tile_mlp < 0) o.mopt.tile_mlp = cfg.C; /* flag without a size: ~C tokens */
    if (o.mopt.tile_loss < 0) o.mopt.tile_loss = cfg.C;
    if (model_check_options(&cfg, P, &o.mopt, err, sizeof err) != 0) up_die_all("%s", err);

    comm_ctx comm;
    comm_init(&comm, MPI_COMM_WORLD, P);
    int T_loc = (int)(o.T / P);
    model m;

    /* the plan: the model's own sizing code under plan mode, before anything is allocated */
    mem_plan_begin();
    model_init(&m, &cfg, T_loc, &comm, &o.mopt);
    model_free(&m);
    mem_plan plan = plan_capture();
    mem_plan_end();
    if (o.dry_run) {
        if (rank == 0) print_plan(&plan, &o, &cfg, P, T_loc);
        if (o.mem_report) write_report(o.mem_report, &comm, &plan, 1);
        comm_free(&comm);
        shard_close(&shard);
        MPI_Finalize();
        return 0;
    }
    if (o.mem_limit && plan.peak > o.mem_limit) refuse_plan(&plan, &o);

    model_init(&m, &cfg, T_loc, &comm, &o.mopt);
    if (o.init) model_load(&m, o.init);
    else model_init_random(&m, o.seed);
    if (rank == 0 && !o.quiet) {
        print_summary(&o, &m, threads);
        printf("  layout  %d ranks: %d replica(s) x context-parallel %d, T_loc=%d\n", world,
               comm.D, P, T_loc);
        fflush(stdout);
    }

    FILE *logf = NULL;
    if (o.log && rank == 0) {
        logf = fopen(o.log, "w");
        if (!logf) up_die("--log %s: cannot create (%s)", o.log, strerror(errno));
    }

    adamw_params hp = {(float)o.lr, (float)o.beta1, (float)o.beta2, (float)o.adam_eps,
                       (float)o.weight_decay};
    /* one step processes D sequences of T tokens */
    double flops = model_flops_per_step(&cfg, (int)o.T) * comm.D * o.accum;
    double tokens = (double)o.T * comm.D * o.accum;
    double t_start = now_s();
    /* the closing line compares the first loss with the mean of the last tenth of the steps */
    long tail_n = o.steps / 10 > 0 ? o.steps / 10 : 1;
    double first_loss = 0, tail_sum = 0;
    for (long step = 0; step < o.steps; step++) {
        comm_reset_stats(&comm);
        double t0 = now_s();
        /* targets of all micro-batches first: the loss is token-weighted over the global batch,
         * so the gradient scale 1/(valid targets, all ranks) is known before the forward */
        long long valid = 0;
        for (int b = 0; b < o.accum; b++) {
            read_tokens(&shard, &comm, o.T, T_loc, step_seq(step, &comm, o.accum, b), &m);
            for (int i = 0; i < T_loc; i++) valid += m.targets[i] >= 0;
        }
        double zero = 0;
        comm_reduce_loss(&comm, &zero, &valid);
        float scale = valid > 0 ? 1.0f / (float)valid : 0.0f;

        model_zero_grads(&m);
        double loss_sum = 0;
        for (int b = 0; b < o.accum; b++) {
            read_tokens(&shard, &comm, o.T, T_loc, step_seq(step, &comm, o.accum, b), &m);
            loss_sum += model_forward(&m, scale);
            model_backward(&m);
        }
        long long local = 0;
        comm_reduce_loss(&comm, &loss_sum, &local); /* token-weighted over all ranks */
        model_reduce_grads(&m);
        double loss = valid > 0 ? loss_sum / (double)valid : 0.0;

        if (step == 0 && o.save_grads) model_save_grads(&m, o.save_grads);

        double norm = model_grad_norm(&m);
        float clip = clip_factor(norm, (float)o.grad_clip);
        float lr = lr_schedule((int)step, (int)o.steps, (float)o.lr, (int)o.warmup,
                               (float)o.min_lr_frac);
        if (o.lr > 0) {
            hp.lr = lr;
            model_optimizer_step(&m, &hp, (int)step + 1, clip);
        } else {
            lr = 0;
        }
        double dt = now_s() - t0;
        double comm_s = comm_seconds(&comm);
        if (step == 0) first_loss = loss;
        if (step >= o.steps - tail_n) tail_sum += loss;
        if (!isfinite(loss))
            up_die_all("loss is %f at step %ld: training diverged; lower --lr or check the data",
                       loss, step + 1);

        if (rank == 0) {
            double tps = tokens / dt;
            if (!o.quiet) {
                char pk[32], eta[32];
                double elapsed = now_s() - t_start;
                fmt_duration(eta, sizeof eta,
                             elapsed / (double)(step + 1) * (double)(o.steps - step - 1));
                printf("step %4ld/%ld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.1f GF/s | "
                       "%.2f s (comm %.0f%%) | peak %s | eta %s\n",
                       step + 1, o.steps, loss, lr, norm, tps, flops / dt / 1e9, dt,
                       100.0 * comm_s / dt, up_fmt_bytes(pk, sizeof pk, (double)mem_peak_total()),
                       eta);
                fflush(stdout);
            }
            if (logf) {
                fprintf(logf,
                        "{\"step\": %ld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, "
                        "\"tokens_per_s\": %.6g, \"step_s\": %.6g, \"compute_s\": %.6g, "
                        "\"comm_s\": %.6g, \"a2a_s\": %.6g, \"a2a_mpi_s\": %.6g, "
                        "\"a2a_bytes\": %.6g, "
                        "\"fsdp_s\": %.6g, \"grad_reduce_s\": %.6g, "
                        "\"flops_per_s\": %.6g, \"peak_bytes\": %zu, \"rss_bytes\": %zu}\n",
                        step + 1, loss, lr, norm, tps, dt, dt - comm_s, comm_s,
                        comm.stats[COMM_SEQ_TO_HEAD].seconds + comm.stats[COMM_HEAD_TO_SEQ].seconds,
                        comm.stats[COMM_SEQ_TO_HEAD].mpi_seconds +
                            comm.stats[COMM_HEAD_TO_SEQ].mpi_seconds,
                        comm.stats[COMM_SEQ_TO_HEAD].bytes + comm.stats[COMM_HEAD_TO_SEQ].bytes,
                        comm.stats[COMM_FSDP_GATHER].seconds + comm.stats[COMM_FSDP_REDUCE].seconds,
                        comm.stats[COMM_GRAD_REDUCE].seconds,
                        flops / dt, mem_peak_total(), mem_rss_now());
                fflush(logf);
            }
        }
    }
    if (logf && fclose(logf) != 0) up_die("--log %s: write failed", o.log);
    if (o.save) model_save_params(&m, o.save);
    if (o.mem_report) {
        mem_plan measured = plan_capture();
        measured.rss = mem_rss_peak();
        write_report(o.mem_report, &comm, &measured, 0);
    }
    if (rank == 0 && !o.quiet) {
        char pk[32], rss[32];
        printf("done: loss %.4f (step 1) -> %.4f (mean of the last %ld steps) in %.1f s, peak %s "
               "accounted, %s RSS\n", first_loss, tail_sum / (double)tail_n, tail_n,
               now_s() - t_start, up_fmt_bytes(pk, sizeof pk, (double)mem_peak_total()),
               up_fmt_bytes(rss, sizeof rss, (double)mem_rss_peak()));
    }
    model_free(&m);
    comm_free(&comm);
    shard_close(&shard);
    MPI_Finalize();
    return 0;
}
