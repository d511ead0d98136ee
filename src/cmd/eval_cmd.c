/* eval_cmd.c — `upipe eval`: flags and --help, the checks and the memory plan (shared with
 * training: train/setup.h, train/report.h), the weights (--init or a checkpoint), the windows
 * (eval/evaluate.h) and what is shown (eval/summary.h). Forward only: no gradients, optimizer
 * state or saved activations, so the plan is smaller than training's for the same flags. */
#include "cmd/eval_cmd.h"

#include "core/check.h"
#include "core/fileio.h"
#include "core/mem.h"
#include "core/trace.h"
#include "eval/evaluate.h"
#include "eval/summary.h"
#include "train/ckpt.h"
#include "train/front.h"
#include "train/report.h"
#include "train/setup.h"

#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_DEFAULT_WINDOWS 64 /* the cap of the default --windows */

typedef struct {
    front_options front; /* the flags train and eval share (train/front.h) */
    const char *init, *ckpt, *report, *svg, *recall_svg;
    long windows;
    int recall; /* 1: --recall (score even when the shard does not look like the corpus) */
} eval_options;

#define AT(field) offsetof(eval_options, field)
#define WINDOWS_CAP FLAGS_STR(EVAL_DEFAULT_WINDOWS) /* in the help text */

static const flag_spec g_eval_flags[] = {
    {.name = "init",
     .arg = "W",
     .kind = FLAG_STRING,
     .off = AT(init),
     .help = "weights: a .safetensors file, an index or an HF folder"},
    {.name = "ckpt",
     .arg = "DIR",
     .kind = FLAG_STRING,
     .off = AT(ckpt),
     .help = "weights of a checkpoint: DIR/step-NNNNNNNN, or a --ckpt-dir\n"
             "(its newest complete checkpoint)"},
    {.name = "windows",
     .arg = "N",
     .kind = FLAG_LONG,
     .off = AT(windows),
     .lo = 1,
     .hi = INT_MAX,
     .help = "windows 0..N-1 (default: every whole window the shard holds,\n"
             "at most " WINDOWS_CAP "); with R/P replicas each takes every (R/P)-th"},
    {.name = "recall",
     .kind = FLAG_SET,
     .off = AT(recall),
     .help = "score recall questions even when the first tokens of the shard\n"
             "do not look like a recall corpus (detected otherwise); without\n"
             "questions it says so (accuracy null in the report)"},
    {.name = "report",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(report),
     .help = "JSON: {\"loss\", \"perplexity\", \"tokens\", \"windows\",\n"
             "\"buckets\": [{\"start\", \"end\", \"loss\"}], \"recall\":\n"
             "{\"questions\", \"accuracy\", \"by_distance\": [{\"lo\", \"hi\",\n"
             "\"n\", \"accuracy\"}]}} (recall on a recall corpus only;\n"
             "lo <= distance < hi)"},
    {.name = "svg",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(svg),
     .help = "the loss by position as an SVG line chart"},
    {.name = "recall-svg",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(recall_svg),
     .help = "recall accuracy by distance and position as an SVG heat-map\n"
             "(a recall corpus only)"},
    /* training's memory flags, hiding the shared rows: nothing to recompute or offload without
     * a backward */
    {.name = "checkpoint",
     .kind = FLAG_IGNORED,
     .help = "accepted so a training command line can be reused; nothing to\n"
             "do without a backward"},
    {.name = "offload", .arg = "DIR", .kind = FLAG_IGNORED, .help = NULL /* on --checkpoint's */},
    {.name = "offload-host-limit",
     .arg = "SIZE",
     .kind = FLAG_IGNORED,
     .help = NULL /* on --checkpoint's */},
    {.name = "offload-keep", .arg = "K", .kind = FLAG_IGNORED, .help = NULL /* the same */},
};

/* The help page: eval's flags and the shared ones, several worded for evaluation. */
static const flag_help_line g_eval_page[] = {
    {NULL,
     "usage: upipe eval --config FILE (--init W | --ckpt DIR) --data FILE [flags]\n\n"
     "Evaluates a model on windows of a token shard, forward only (no gradients, no optimizer\n"
     "state): the mean loss and perplexity, the loss by position in the window (log-spaced\n"
     "buckets [0,8), [8,16), [16,32) ... [2^k,T)) and, on a recall corpus (`upipe data\n"
     "recall`), for every question \"key?V;\" whose fact \"key=V;\" lies inside the window,\n"
     "whether the top prediction is V: accuracy overall and by distance to the fact (chance\n"
     "is 1/16). Window w is the T+1 tokens at w*T: what training step w reads on one\n"
     "replica without --grad-accum.\n"},
    {NULL, "model and data"},
    {"config", "HF LlamaForCausalLM config.json (default with --ckpt: the\n"
               "checkpoint's config.json)"},
    {"init", NULL},
    {"ckpt", NULL},
    {"data", "llm.c token shard to evaluate (required but with --dry-run;\n"
             "make one with `upipe data`)"},
    {"seq-len", "tokens per window (default 1024; above the config's\n"
                "max_position_embeddings: a warning)"},
    {"windows", NULL},
    {"doc-sep", "packed documents, as in training: attention and RoPE positions\n"
                "within a document, targets equal to S not counted"},
    {"loss-mask", "only targets whose mask byte is 1 count, as in training; no\n"
                  "counted target in the windows is an error (no loss to report)"},
    {"recall", NULL},
    {"dtype", "element type of the stored tensors (default f32); bf16 as in\n"
              "training (upipe train --help): weights fp32 with a bf16 copy\n"
              "for the matmuls, the residual stream and attention in bf16"},
    {"device", NULL},
    {"device-mem", NULL},
    {NULL, "\noutputs (the tables always go to the terminal unless --quiet)"},
    {"report", NULL},
    {"svg", NULL},
    {"recall-svg", NULL},
    {"mem-report", NULL},
    {"trace", "a profiler trace, as training's (upipe train --help)"},
    {"quiet", "nothing on the terminal"},
    {NULL, "\nparallelism and memory (as in training; the numbers do not change)"},
    {"cp", "context-parallel degree (Ulysses; default: all ranks)"},
    {"upipe-heads", NULL},
    {"upipe-overlap no-upipe-overlap",
     "where a context-parallel group spans nodes: exchange the next\n"
     "stage's q, k, v and the last stage's o while this stage's\n"
     "attention runs (more stage buffers; default: off)"},
    {"upipe-overlap-on-node", NULL},
    {"fsdp", "parameters sharded over all ranks, gathered layer by layer"},
    {"tile-mlp", NULL},
    {"tile-loss", "final norm, LM head, loss and top prediction over tiles of N\n"
                  "tokens: the (T, vocab) logits never exist (default N:\n"
                  "hidden_size)"},
    {"checkpoint offload offload-host-limit offload-keep", NULL},
    {"dry-run", NULL},
    {"mem-limit", NULL},
    {"host-mem-limit", NULL},
    {"threads", NULL},
    {"help", NULL},
};

static void eval_print_help(void) {
    eval_options o; /* the tables' base pointers; nothing is stored */
    flag_table tables[] = {{g_eval_flags, FLAGS_COUNT(g_eval_flags), &o}, front_table(&o.front)};
    flags_print_help(tables, FLAGS_COUNT(tables), g_eval_page, FLAGS_COUNT(g_eval_page));
}

/* Parses argv (argv[0] == "eval"); 1 for --help. Every rank (a bad flag stops them all). */
static int eval_parse_args(eval_options *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    flag_table tables[] = {{g_eval_flags, FLAGS_COUNT(g_eval_flags), o}, front_table(&o->front)};
    flags_defaults(tables, FLAGS_COUNT(tables));
    if (flags_parse("eval", tables, FLAGS_COUNT(tables), argc, argv) == 1) return 1;
    if (!o->init == !o->ckpt)
        up_die_all("%s: see upipe eval --help",
                   o->init ? "give --init or --ckpt, not both"
                           : "the weights are missing: give --init FILE (safetensors) or --ckpt "
                             "DIR (a checkpoint)");
    if (!o->front.dry_run) front_require_data(&o->front); /* a plan reads no data */
    if (!o->front.config && !o->ckpt)
        up_die_all("--config FILE is required with --init (an HF config.json)");
    front_finish(&o->front);
    o->front.mopt.forward_only = 1;
    return 0;
}

/* ---- the job ------------------------------------------------------------------------------- */

typedef struct {
    eval_options o;
    int rank, world, threads, P, T_loc;
    size_t runtime; /* the process's own resident bytes (the `runtime` category) */
    char weights[4096], config[4096]; /* resolved paths */
    model_config cfg;
    token_shard shard;
    mask_shard mask;
    comm_ctx comm;
    model *m;
    eval_source src;
    long windows;
} eval_job;

/* --ckpt: the step folder's weights, and its config.json unless --config names one. */
static void resolve_weights(eval_job *j) {
    const eval_options *o = &j->o;
    if (o->init) {
        snprintf(j->weights, sizeof j->weights, "%s", o->init);
        snprintf(j->config, sizeof j->config, "%s", o->front.config);
        if (!up_file_readable(o->init))
            up_die_all("--init %s: cannot read the file (%s)", o->init, strerror(errno));
        return;
    }
    char step[4096], err[2600];
    if (ckpt_resolve(o->ckpt, step, sizeof step, err, sizeof err) != 0) up_die_all("%s", err);
    ckpt_record rec; /* every rank reads the same files: the same verdict */
    if (ckpt_read_record(step, &rec, err, sizeof err) != 0 ||
        ckpt_verify_file(step, CKPT_MODEL, &rec, err, sizeof err) != 0)
        up_die_all("--ckpt %s", err);
    up_path_join(j->weights, sizeof j->weights, step, "model.safetensors");
    if (o->front.config)
        snprintf(j->config, sizeof j->config, "%s", o->front.config);
    else
        up_path_join(j->config, sizeof j->config, step, "config.json");
}

/* The windows: --windows, else every whole window up to the cap; the shard must hold them. */
static long choose_windows(const eval_job *j) {
    const eval_options *o = &j->o;
    long avail = eval_windows_available(&j->shard, o->front.T);
    if (avail < 1)
        up_die_all("--seq-len %ld needs %ld tokens per window but %s holds %zu: use --seq-len "
                   "%zu or less, or a larger shard",
                   o->front.T, o->front.T + 1, o->front.data, j->shard.ntok,
                   j->shard.ntok > 1 ? j->shard.ntok - 1 : 1);
    if (o->windows > avail)
        up_die_all("--windows %ld needs %ld tokens (%ld windows of %ld and one more) but %s "
                   "holds %zu: use --windows %ld or less",
                   o->windows, o->windows * o->front.T + 1, o->windows, o->front.T, o->front.data,
                   j->shard.ntok, avail);
    if (o->windows > 0) return o->windows;
    return avail < EVAL_DEFAULT_WINDOWS ? avail : EVAL_DEFAULT_WINDOWS;
}

/* Every output is writable (rank 0), before anything is allocated. Collective. */
static void check_outputs(eval_job *j) {
    const eval_options *o = &j->o;
    if (o->recall_svg && !j->src.recall && o->front.data)
        up_die_all("--recall-svg %s: %s is not a recall corpus (`upipe data recall`); add "
                   "--recall to score it anyway",
                   o->recall_svg, o->front.data);
    char err[1024] = "";
    int bad = 0;
    if (j->rank == 0) {
        const char *flags[] = {"--report", "--svg", "--recall-svg", "--mem-report", "--trace"};
        const char *paths[] = {o->report, o->svg, o->recall_svg, o->front.mem_report,
                               o->front.trace};
        for (int i = 0; i < 5 && !bad; i++)
            if (paths[i]) bad = setup_check_writable(flags[i], paths[i], err, sizeof err) != 0;
    }
    if (comm_any(&j->comm, bad)) up_die_agreed(bad ? err : NULL);
}

/* Threads, weights, config, layout, data, options and outputs: all before anything large. */
static void eval_setup(eval_job *j) {
    eval_options *o = &j->o;
    j->threads = setup_threads(o->front.threads, j->rank);
    j->P = o->front.cp > 0 ? o->front.cp : j->world;
    resolve_weights(j);
    setup_config(&j->cfg, j->config, o->front.T, j->P, j->world, o->front.doc_sep);
    if (o->front.data) { /* --dry-run plans without it */
        setup_shard(&j->shard, "--data", o->front.data, j->cfg.V);
        j->windows = choose_windows(j);
        setup_warn_window(&j->cfg, o->front.T, &j->shard, o->front.data, o->front.doc_sep, j->rank);
        char err[512];
        if (o->front.loss_mask &&
            mask_open(&j->mask, o->front.loss_mask, j->shard.ntok, err, sizeof err) != 0)
            up_die_all("--loss-mask %s", err);
    }
    setup_model_options(&j->cfg, j->P, &o->front.mopt);
    comm_init(&j->comm, MPI_COMM_WORLD, j->P);
    front_check_kernels(&j->comm);
    front_load_device(&j->o.front, &j->comm);
    j->T_loc = (int)(o->front.T / j->P);
    j->src = (eval_source){.m = NULL /* eval_alloc_all */,
                           .shard = &j->shard,
                           .mask = o->front.loss_mask ? &j->mask : NULL,
                           .doc_sep = o->front.doc_sep,
                           .recall = o->recall || (o->front.data && eval_detect_recall(&j->shard))};
    check_outputs(j);
}

/* The forward-only model and the evaluation scratch, allocated (or only counted under plan). */
static void eval_alloc_all(eval_job *j) {
    if (j->o.front.trace && mem_planning()) trace_plan(0); /* trace_start allocates them for real */
    j->m = model_init(&j->cfg, j->T_loc, &j->comm, &j->o.front.mopt);
    j->src.m = j->m;
    eval_alloc(&j->src);
}

static void eval_free_all(eval_job *j) {
    eval_free(&j->src);
    model_free(j->m);
}

static report_memory eval_plan(eval_job *j) {
    j->runtime = setup_runtime(&j->cfg, j->T_loc);
    mem_plan_begin();
    mem_count(MEM_RUNTIME, (long long)j->runtime);
    eval_alloc_all(j);
    eval_free_all(j);
    report_memory plan = report_capture();
    mem_plan_end();
    return plan;
}

/* Terminal, JSON and pictures (rank 0). */
static void eval_outputs(const eval_job *j, const eval_stats *s) {
    const eval_options *o = &j->o;
    if (j->rank != 0) return;
    if (!o->front.quiet) {
        printf("upipe eval: %s on %s (%ld window%s of T=%ld, %d rank%s: cp=%d, %d thread%s%s)\n",
               j->weights, o->front.data, j->windows, j->windows == 1 ? "" : "s", o->front.T,
               j->world, j->world == 1 ? "" : "s", j->P, j->threads, j->threads == 1 ? "" : "s",
               o->front.mopt.dtype == MEM_DTYPE_BF16 ? ", bf16" : "");
        eval_print(s);
    }
    char err[1024];
    if (o->report && eval_write_json(s, o->report, err, sizeof err) != 0) up_die("%s", err);
    if (o->svg && eval_write_loss_svg(s, o->svg, err, sizeof err) != 0) up_die("%s", err);
    if (o->recall_svg && eval_write_recall_svg(s, o->recall_svg, err, sizeof err) != 0)
        up_die("%s", err);
}

/* No counted target: the loss would read 0 and the perplexity 1, figures of nothing. The
 * evaluation's one result is missing, so it stops with status 1 and writes no report (as every
 * refused run): a script must not read a perplexity of 1.000 as a perfect model. Every rank has
 * the reduced count, so every rank stops here together. */
static void check_targets(const eval_job *j, const eval_stats *s) {
    if (s->targets > 0) return;
    if (j->o.front.loss_mask)
        up_die_all("no target counted: the loss mask is zero over the evaluated windows (%ld of "
                   "T=%ld): there is no loss or perplexity to report; check --loss-mask %s, or "
                   "evaluate other windows",
                   j->windows, j->o.front.T, j->o.front.loss_mask);
    up_die_all("no target counted: every target of the evaluated windows is the --doc-sep token "
               "%ld: there is no loss or perplexity to report; check --doc-sep and the data",
               j->o.front.doc_sep);
}

static void eval_run_job(eval_job *j) {
    mem_count(MEM_RUNTIME, (long long)j->runtime); /* as in the plan */
    char err[1024];
    if (j->o.front.trace && comm_trace_start(&j->comm, j->o.front.trace, 0, err, sizeof err) != 0)
        up_die_agreed(j->rank == 0 ? err : NULL);
    eval_alloc_all(j);
    model_load(j->m, j->weights);
    eval_stats s;
    eval_run(&j->src, j->windows, &s);
    check_targets(j, &s);
    eval_outputs(j, &s);
    if (j->o.front.mem_report) {
        report_memory measured = report_capture();
        measured.rss = mem_rss_peak();
        report_write_memory(j->o.front.mem_report, &j->comm, &measured, 0);
    }
    eval_free_all(j);
    if (j->o.front.trace && trace_finish(err, sizeof err) != 0)
        up_die_agreed(j->rank == 0 ? err : NULL);
}

int eval_main(int argc, char **argv) {
    int rank, world;
    comm_mpi_init(&argc, &argv, &rank, &world);
    eval_job *j = calloc(1, sizeof *j);
    UP_CHECK(j, "out of memory");
    j->rank = rank;
    j->world = world;
    if (eval_parse_args(&j->o, argc, argv) == 1) {
        if (j->rank == 0) eval_print_help();
        free(j);
        MPI_Finalize();
        return 0;
    }
    eval_setup(j);
    report_memory plan = eval_plan(j);
    if (j->o.front.dry_run) {
        if (j->rank == 0) {
            report_print_plan(&plan, j->o.front.T, &j->cfg, j->P, j->T_loc, j->o.front.mopt.dtype);
            report_print_fit(&plan, &j->o.front);
            printf("forward only: no gradients or optimizer state, one layer's activations at a "
                   "time\n");
        }
        if (j->o.front.mem_report) report_write_memory(j->o.front.mem_report, &j->comm, &plan, 1);
    } else {
        report_check_mem_limit(&plan, &j->o.front);
        eval_run_job(j);
    }
    front_release_device(&j->o.front, &j->comm);
    comm_free(&j->comm);
    shard_close(&j->shard);
    mask_close(&j->mask);
    free(j);
    MPI_Finalize();
    return 0;
}
