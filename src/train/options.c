/* options.c — the flags of `upipe train`: its own table, its help page, and the checks across
 * flags (the shared flags: train/front.c). */
#include "train/options.h"

#include "core/check.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>

#define AT(field) offsetof(train_options, field)
#define VAL_WINDOWS_CAP FLAGS_STR(TRAIN_VAL_WINDOWS) /* in the help text */

static const char *const g_nonfinite_modes[] = {"stop", "skip", NULL}; /* NONFINITE_* */

static const flag_spec g_train_flags[] = {
    /* model and data */
    {.name = "init",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(init),
     .help = "start from these weights (safetensors, HF names, F32/BF16);\n"
             "default: random init from --seed"},
    {.name = "seed",
     .arg = "S",
     .kind = FLAG_U64,
     .off = AT(seed),
     .lo = 0,
     .hi = 0x7fffffffffffffffL,
     .def = 1234,
     .help = "seed of the random init (default 1234)"},
    /* optimisation */
    {.name = "steps",
     .arg = "N",
     .kind = FLAG_LONG,
     .off = AT(steps),
     .lo = 1,
     .hi = INT_MAX,
     .def = 10,
     .help = "training steps (default 10)"},
    {.name = "grad-accum",
     .arg = "B",
     .kind = FLAG_INT,
     .off = AT(accum),
     .lo = 1,
     .hi = 1 << 20,
     .def = 1,
     .help = "sequences per replica per step, gradients accumulated\n"
             "(default 1); replica d's b-th sequence of step k starts at\n"
             "token ((k*D + d)*B + b)*T"},
    {.name = "lr",
     .arg = "X",
     .kind = FLAG_DOUBLE,
     .off = AT(lr),
     .min = 0,
     .max = 10,
     .def = 3e-4,
     .help = "peak learning rate (default 3e-4; 0 = no update)"},
    {.name = "warmup",
     .arg = "N",
     .kind = FLAG_LONG,
     .off = AT(warmup),
     .lo = 0,
     .hi = INT_MAX,
     .def = -1 /* train_parse_args: 10% of --steps, at most 100 */,
     .help = "linear warm-up steps (default: 10% of --steps, at most 100)"},
    {.name = "min-lr-frac",
     .arg = "X",
     .kind = FLAG_DOUBLE,
     .off = AT(min_lr_frac),
     .min = 0,
     .max = 1,
     .def = 0.1,
     .help = "cosine decay ends at lr * X (default 0.1)"},
    {.name = "weight-decay",
     .arg = "X",
     .kind = FLAG_DOUBLE,
     .off = AT(weight_decay),
     .min = 0,
     .max = 10,
     .def = 0.1,
     .help = "AdamW decoupled weight decay on matrices (default 0.1)"},
    {.name = "beta1",
     .arg = "X",
     .kind = FLAG_DOUBLE,
     .off = AT(beta1),
     .min = 0,
     .max = 0.999999,
     .def = 0.9,
     .help = "AdamW moments (default 0.9, 0.95)"},
    {.name = "beta2",
     .arg = "X",
     .kind = FLAG_DOUBLE,
     .off = AT(beta2),
     .min = 0,
     .max = 0.999999999,
     .def = 0.95,
     .help = NULL /* on --beta1's line */},
    {.name = "adam-eps",
     .arg = "X",
     .kind = FLAG_DOUBLE,
     .off = AT(adam_eps),
     .min = 0,
     .max = 1,
     .def = 1e-8,
     .help = "AdamW epsilon (default 1e-8)"},
    {.name = "grad-clip",
     .arg = "X",
     .kind = FLAG_DOUBLE,
     .off = AT(grad_clip),
     .min = 0,
     .max = 1e30,
     .def = 1.0,
     .help = "clip the global gradient norm to X (default 1.0; 0 = off)"},
    {.name = "on-nonfinite",
     .arg = "MODE",
     .kind = FLAG_CHOICE,
     .off = AT(on_nonfinite),
     .choices = g_nonfinite_modes,
     .def = NONFINITE_STOP,
     .help = "a step whose loss or gradient norm is NaN/Inf: stop (default;\n"
             "names the step and the first tensor with a bad gradient) or\n"
             "skip (no update for that step, logged as \"skipped\": 1)"},
    {.name = "max-skips",
     .arg = "K",
     .kind = FLAG_INT,
     .off = AT(max_skips),
     .lo = 1,
     .hi = INT_MAX,
     .def = 0 /* not given; train_parse_args: 5 */,
     .help = "with skip: stop when K steps in a row were skipped (default 5)"},
    /* validation */
    {.name = "val-data",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(val_data),
     .help = "a token shard to validate on: the mean loss (and, on a recall\n"
             "corpus, the recall accuracy; see upipe eval --help) over its\n"
             "first windows of --seq-len tokens, with --doc-sep as in\n"
             "training (no --loss-mask: every target counts); on the terminal\n"
             "and in the --log record of that step (val_loss, val_perplexity,\n"
             "val_recall_accuracy, val_s); the closing line reports the last"},
    {.name = "val-every",
     .arg = "N",
     .kind = FLAG_LONG,
     .off = AT(val_every),
     .lo = 1,
     .hi = INT_MAX,
     .help = "validate after every N steps (default 0: after the last step)"},
    {.name = "val-windows",
     .arg = "K",
     .kind = FLAG_LONG,
     .off = AT(val_windows),
     .lo = 1,
     .hi = INT_MAX,
     .help = "windows per validation (default: the shard's, at most " VAL_WINDOWS_CAP ")"},
    /* memory */
    {.name = "offload-optimizer",
     .kind = FLAG_SET,
     .off = AT(front.mopt.offload_opt),
     .help = "keep the fp32 master weights, gradients and AdamW moments in\n"
             "host memory (pinned) and run AdamW on the CPU cores; the GPU\n"
             "holds the weights of the layers at hand and one layer's\n"
             "gradients (same weights to the bit; on --device cpu it runs\n"
             "the same path, where all of it is host memory anyway)"},
    {.name = "grads-on-device",
     .kind = FLAG_SET,
     .off = AT(front.mopt.grads_on_device),
     .help = "with --offload-optimizer: the fp32 gradients stay in GPU\n"
             "memory (4 bytes a parameter there) and go to the host one layer\n"
             "at a time for AdamW, so the host holds the masters and moments\n"
             "only (for Llama-3-8B 90 GiB instead of 120; same weights to the\n"
             "bit)"},
    /* outputs */
    {.name = "save",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(save),
     .help = "write the final weights (safetensors, HF names): the fp32\n"
             "master weights as F32, or BF16 with --save-dtype bf16"},
    {.name = "save-dtype",
     .arg = "f32|bf16",
     .kind = FLAG_DTYPE,
     .off = AT(save_dtype),
     .def = MEM_DTYPE_F32,
     .help = "tensor type of the --save file (default f32; bf16 rounds\n"
             "to nearest even, as the bf16 run's copy of the weights)"},
    {.name = "save-grads",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(save_grads),
     .help = "write the raw gradients of the first step's loss (before\n"
             "clipping and before any update; safetensors, F32, HF names)"},
    {.name = "log",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(log),
     .help = "one JSON object per step (step, loss, lr, grad_norm,\n"
             "tokens_per_s, step_s, peak_bytes, rss_bytes); a resumed run\n"
             "cuts it back to its checkpoint's step, then continues it"},
    {.name = "print-every",
     .arg = "N",
     .kind = FLAG_LONG,
     .off = AT(print_every),
     .lo = 1,
     .hi = INT_MAX,
     .help = "the per-step terminal line every N steps, the first and the\n"
             "last (default 1; --log still records every step)"},
    /* checkpoints and resume */
    {.name = "ckpt-dir",
     .arg = "DIR",
     .kind = FLAG_STRING,
     .off = AT(ckpt_dir),
     .help = "write checkpoints DIR/step-NNNNNNNN/ (weights, AdamW moments,\n"
             "step and data position, schedule, config): at the end, every\n"
             "--ckpt-every steps, at --stop-at and on SIGTERM/SIGINT (then\n"
             "exit; a second SIGINT stops at once). Each appears atomically.\n"
             "One job per folder: a second one is refused (DIR/.lock)"},
    {.name = "ckpt-every",
     .arg = "N",
     .kind = FLAG_LONG,
     .off = AT(ckpt_every),
     .lo = 1,
     .hi = INT_MAX,
     .help = "also every N steps (default 0: only at those moments)"},
    {.name = "ckpt-keep",
     .arg = "K",
     .kind = FLAG_INT,
     .off = AT(ckpt_keep),
     .lo = 1,
     .hi = 1000,
     .def = 2,
     .help = "keep the newest K checkpoints (default 2)"},
    {.name = "resume",
     .kind = FLAG_SET,
     .off = AT(resume),
     .help = "continue from the newest checkpoint in --ckpt-dir, on any\n"
             "number of ranks, --cp, --fsdp or --grad-accum split of the same\n"
             "global batch; start fresh when there is none (so one command\n"
             "line serves the first start and every requeue). The files'\n"
             "checksums are verified; a different --data (size or sampled\n"
             "contents; the same file at a new path is fine), --doc-sep or\n"
             "--loss-mask is refused"},
    {.name = "data-changed",
     .kind = FLAG_SET,
     .off = AT(data_changed),
     .help = "with --resume: continue on data other than the checkpoint's\n"
             "(one line says what changed)"},
    {.name = "stop-at",
     .arg = "K",
     .kind = FLAG_LONG,
     .off = AT(stop_at),
     .lo = 1,
     .hi = INT_MAX,
     .help = "stop after step K as if preempted (checkpoint, exit 0); the\n"
             "schedule stays that of --steps. Resumed at step K or later:\n"
             "nothing to do (exit 0, nothing written)"},
    /* the machine */
    {.name = "watchdog",
     .arg = "SECONDS",
     .kind = FLAG_DOUBLE,
     .off = AT(watchdog),
     .min = 0,
     .max = 1e9,
     .def = 600,
     .help = "stop the job with a message naming the step and the collective a\n"
             "rank waits in when no progress came for max(SECONDS, 10 x the\n"
             "longest step) (default 600; 0 = off): a stalled rank or a\n"
             "hung collective ends the job instead of spinning forever"},
};

/* The help page: train's flags and the shared ones (their text from train/front.c). */
static const flag_help_line g_train_page[] = {
    {NULL, "usage: upipe train --config FILE --data FILE [flags]\n\n"
           "Trains a Llama-style model (HF config.json) on an llm.c token shard.\n"},
    {NULL, "model and data"},
    {"config", NULL},
    {"data", NULL},
    {"seq-len", NULL},
    {"doc-sep", NULL},
    {"loss-mask", NULL},
    {"init", NULL},
    {"seed", NULL},
    {"dtype", NULL},
    {"device", NULL},
    {"device-mem", NULL},
    {NULL, "\noptimisation"},
    {"steps", NULL},
    {"grad-accum", NULL},
    {"lr", NULL},
    {"warmup", NULL},
    {"min-lr-frac", NULL},
    {"weight-decay", NULL},
    {"beta1 beta2", NULL},
    {"adam-eps", NULL},
    {"grad-clip", NULL},
    {"on-nonfinite", NULL},
    {"max-skips", NULL},
    {NULL, "\nvalidation (forward only, between steps; training's results do not change)"},
    {"val-data", NULL},
    {"val-every", NULL},
    {"val-windows", NULL},
    {NULL, "\noutputs"},
    {"save", NULL},
    {"save-dtype", NULL},
    {"save-grads", NULL},
    {"log", NULL},
    {"mem-report", NULL},
    {"trace", NULL},
    {"quiet", NULL},
    {"print-every", NULL},
    {NULL, "  (every output path is checked for writability before the first step)"},
    {NULL, "\ncheckpoints and resume"},
    {"ckpt-dir", NULL},
    {"ckpt-every", NULL},
    {"ckpt-keep", NULL},
    {"resume", NULL},
    {"data-changed", NULL},
    {"stop-at", NULL},
    {NULL, "\nmemory (each leaves the loss and gradients unchanged)"},
    {"checkpoint", NULL},
    {"offload", NULL},
    {"offload-host-limit", NULL},
    {"offload-keep", NULL},
    {"offload-optimizer", NULL},
    {"grads-on-device", NULL},
    {"tile-mlp", NULL},
    {"tile-loss", NULL},
    {"upipe-heads", NULL},
    {"upipe-overlap no-upipe-overlap", NULL},
    {"upipe-overlap-on-node", NULL},
    {"dry-run", NULL},
    {"mem-limit", NULL},
    {"host-mem-limit", NULL},
    {NULL, "\nparallelism (launch with mpiexec -n R)"},
    {"cp", NULL},
    {"fsdp", NULL},
    {NULL, "\nmachine"},
    {"watchdog", NULL},
    {"threads", NULL},
    {"help", NULL},
    {NULL,
     "\nenvironment (the kernels: line of `upipe --version` and of the run header shows the\n"
     "choices)\n"
     "  UPIPE_KERNEL=NAME      force a kernel path: avx512bf16, avx512, avx2 or portable\n"
     "                         (default: the CPU's best; avx512bf16 only where VDPBF16PS\n"
     "                         measures faster than FMA at start)\n"
     "  UPIPE_BLAS_CORE=NAME   force OpenBLAS's kernels (SkylakeX, Haswell, ...); by default\n"
     "                         a core narrower than the CPU (OPENBLAS_CORETYPE=Haswell on an\n"
     "                         AVX-512 host) is measured against the CPU's and the faster\n"
     "                         kept\n"
     "  UPIPE_COMM=nccl|host   --device cuda with ranks: how they exchange (default: NCCL\n"
     "                         where every rank owns its GPU, else host: pinned host\n"
     "                         memory over MPI, which ranks sharing a GPU need)\n"
     "  UPIPE_COMM_STAGE=1     a CPU run's exchanges go through host stages as those of\n"
     "                         ranks on a GPU do (for tests: the same bits as without)\n"
     "  UPIPE_CUDA_DEVICE=I    --device cuda: GPU I for every rank (default: the local\n"
     "                         rank modulo the node's GPUs)"},
};

void train_print_help(void) {
    train_options o; /* the tables' base pointers; nothing is stored */
    flag_table tables[] = {{g_train_flags, FLAGS_COUNT(g_train_flags), &o}, front_table(&o.front)};
    flags_print_help(tables, FLAGS_COUNT(tables), g_train_page, FLAGS_COUNT(g_train_page));
}

/* The checks across flags, the order of their messages kept; the defaults that depend on
 * other flags. */
static void train_check_options(train_options *o) {
    if (!o->front.config)
        up_die_all("--config FILE is required (an HF config.json): see upipe train --help");
    if (!o->front.dry_run) front_require_data(&o->front); /* a plan reads no data */
    if ((o->resume || o->stop_at || o->ckpt_every) && !o->ckpt_dir)
        up_die_all("%s needs --ckpt-dir DIR (where the checkpoints are)", o->resume ? "--resume"
                                                                          : o->stop_at
                                                                              ? "--stop-at"
                                                                              : "--ckpt-every");
    if (o->data_changed && !o->resume)
        up_die_all("--data-changed goes with --resume (it lets a resume continue on other data)");
    if (o->stop_at > o->steps)
        up_die_all("--stop-at %ld is past --steps %ld: use a step in 1..%ld", o->stop_at, o->steps,
                   o->steps);
    if (o->ckpt_dir && strlen(o->ckpt_dir) > 3000)
        up_die_all("--ckpt-dir is %zu characters long: use a shorter path", strlen(o->ckpt_dir));
    if ((o->val_every || o->val_windows) && !o->val_data)
        up_die_all("%s needs --val-data FILE (the shard to validate on)",
                   o->val_every ? "--val-every" : "--val-windows");
    if (o->max_skips && o->on_nonfinite != NONFINITE_SKIP)
        up_die_all("--max-skips needs --on-nonfinite skip (with stop, the first bad step stops)");
    if (o->front.mopt.grads_on_device && !o->front.mopt.offload_opt)
        up_die_all("--grads-on-device goes with --offload-optimizer (without it the gradients "
                   "are on the device already)");
    if (o->front.mopt.offload_opt && o->front.mopt.fsdp)
        up_die_all("--offload-optimizer does not go with --fsdp yet (the sharded state stays "
                   "where the step runs): drop one of them");
    if (!o->max_skips) o->max_skips = 5;
    if (o->warmup < 0) o->warmup = o->steps / 10 < 100 ? o->steps / 10 : 100;
}

int train_parse_args(train_options *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    flag_table tables[] = {{g_train_flags, FLAGS_COUNT(g_train_flags), o}, front_table(&o->front)};
    flags_defaults(tables, FLAGS_COUNT(tables));
    if (flags_parse("train", tables, FLAGS_COUNT(tables), argc, argv) == 1) return 1;
    train_check_options(o);
    front_finish(&o->front);
    return 0;
}
