/* options.c — the flags of `upipe train`: parsing, defaults and --help. */
#include "train/options.h"

#include "core/check.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void train_print_help(void) {
    printf(
        "usage: upipe train --config FILE --data FILE [flags]\n\n"
        "Trains a Llama-style model (HF config.json) on an llm.c token shard.\n\n"
        "model and data\n"
        "  --config FILE          HF LlamaForCausalLM config.json (required)\n"
        "  --data FILE            llm.c token shard (required; make one with `upipe data`)\n"
        "  --seq-len T            tokens per sequence (default 1024); step k reads the T+1\n"
        "                         tokens at k*T, wrapping around at the end of the shard\n"
        "                         (above the config's max_position_embeddings: a warning)\n"
        "  --doc-sep S            packed documents: every token S opens a document (like a BOS\n"
        "                         token); a token attends only within its document, RoPE\n"
        "                         positions restart at its start, targets equal to S are not\n"
        "                         counted. S must be below vocab_size (absent from --data: a\n"
        "                         warning)\n"
        "  --loss-mask FILE       a loss-mask shard aligned with --data (`upipe data jsonl\n"
        "                         --mask-output`): target t counts only where its byte is 1 (a\n"
        "                         step that counts no target: a warning, once)\n"
        "  --init FILE            start from these weights (safetensors, HF names, F32/BF16);\n"
        "                         default: random init from --seed\n"
        "  --seed S               seed of the random init (default 1234)\n"
        "  --dtype f32|bf16       element type of the stored tensors (default f32). bf16: master\n"
        "                         weights, gradients and AdamW moments fp32, a bf16 copy of the\n"
        "                         weights for the matmuls (gathered in bf16 under --fsdp),\n"
        "                         activations, checkpoints, the offload store and the attention's\n"
        "                         q/k/v/o and exchanges bf16; statistics and loss tiles fp32\n\n"
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
        "  --grad-clip X          clip the global gradient norm to X (default 1.0; 0 = off)\n"
        "  --on-nonfinite MODE    a step whose loss or gradient norm is NaN/Inf: stop (default;\n"
        "                         names the step and the first tensor with a bad gradient) or\n"
        "                         skip (no update for that step, logged as \"skipped\": 1)\n"
        "  --max-skips K          with skip: stop when K steps in a row were skipped (default "
        "5)\n\n"
        "validation (forward only, between steps; training's results do not change)\n"
        "  --val-data FILE        a token shard to validate on: the mean loss (and, on a recall\n"
        "                         corpus, the recall accuracy; see upipe eval --help) over its\n"
        "                         first windows of --seq-len tokens, with --doc-sep as in\n"
        "                         training (no --loss-mask: every target counts); on the terminal\n"
        "                         and in the --log record of that step (val_loss, val_perplexity,\n"
        "                         val_recall_accuracy, val_s); the closing line reports the last\n"
        "  --val-every N          validate after every N steps (default 0: after the last step)\n"
        "  --val-windows K        windows per validation (default: the shard's, at most %d)\n\n"
        "outputs\n"
        "  --save FILE            write the final weights (safetensors, HF names): the fp32\n"
        "                         master weights as F32, or BF16 with --save-dtype bf16\n"
        "  --save-dtype f32|bf16  tensor type of the --save file (default f32; bf16 rounds\n"
        "                         to nearest even, as the bf16 run's copy of the weights)\n"
        "  --save-grads FILE      write the raw gradients of the first step's loss (before\n"
        "                         clipping and before any update; safetensors, F32, HF names)\n"
        "  --log FILE             one JSON object per step (step, loss, lr, grad_norm,\n"
        "                         tokens_per_s, step_s, peak_bytes, rss_bytes); a resumed run\n"
        "                         cuts it back to its checkpoint's step, then continues it\n"
        "  --mem-report FILE      JSON memory report: peak_bytes, rss_peak_bytes,\n"
        "                         offloaded_peak_bytes, categories (max over ranks)\n"
        "  --trace FILE           a profiler trace (Chrome / Perfetto JSON: open it in\n"
        "                         ui.perfetto.dev): spans per rank and thread for the layers,\n"
        "                         UPipe stages, all-to-alls, FSDP, offload I/O, loss tiles and\n"
        "                         the optimizer, with bytes (cost: well under 1%% of a step);\n"
        "                         written as the run goes: a killed or failed run leaves the\n"
        "                         trace so far (a JSON array the viewers open as it is)\n"
        "  --quiet                no summary and no per-step lines on the terminal\n"
        "  --print-every N        the per-step terminal line every N steps, the first and the\n"
        "                         last (default 1; --log still records every step)\n"
        "  (every output path is checked for writability before the first step)\n\n"
        "checkpoints and resume\n"
        "  --ckpt-dir DIR         write checkpoints DIR/step-NNNNNNNN/ (weights, AdamW moments,\n"
        "                         step and data position, schedule, config): at the end, every\n"
        "                         --ckpt-every steps, at --stop-at and on SIGTERM/SIGINT (then\n"
        "                         exit; a second signal stops at once). Each appears atomically.\n"
        "                         One job per folder: a second one is refused (DIR/.lock)\n"
        "  --ckpt-every N         also every N steps (default 0: only at those moments)\n"
        "  --ckpt-keep K          keep the newest K checkpoints (default 2)\n"
        "  --resume               continue from the newest checkpoint in --ckpt-dir, on any\n"
        "                         number of ranks, --cp, --fsdp or --grad-accum split of the same\n"
        "                         global batch; start fresh when there is none (so one command\n"
        "                         line serves the first start and every requeue). The files'\n"
        "                         checksums are verified; a different --data (size or sampled\n"
        "                         contents; the same file at a new path is fine), --doc-sep or\n"
        "                         --loss-mask is refused\n"
        "  --data-changed         with --resume: continue on data other than the checkpoint's\n"
        "                         (one line says what changed)\n"
        "  --stop-at K            stop after step K as if preempted (checkpoint, exit 0); the\n"
        "                         schedule stays that of --steps. Resumed at step K or later:\n"
        "                         nothing to do (exit 0, nothing written)\n\n"
        "memory (each leaves the loss and gradients unchanged)\n"
        "  --checkpoint           keep only each layer's input, recompute the layer in backward\n"
        "  --offload DIR          move the layer inputs to a file in DIR (unlinked at once), back\n"
        "                         one layer ahead of backward; implies --checkpoint\n"
        "  --tile-mlp [N]         run the MLP over tiles of N tokens (default N: hidden_size)\n"
        "  --tile-loss [N]        final norm, LM head and loss over tiles of N tokens, the\n"
        "                         (T, vocab) logits never exist (default N: hidden_size)\n"
        "  --upipe-heads U        attention in stages of U query heads (UPipe; U/P per rank);\n"
        "                         attention memory shrinks by U/num_attention_heads\n"
        "  --upipe-overlap, --no-upipe-overlap\n"
        "                         with --upipe-heads and --cp > 1: exchange the next stage's\n"
        "                         inputs (q, k, v; o, do in backward) while this stage's\n"
        "                         attention runs, on one more set of stage buffers (category\n"
        "                         attention); same results to the bit (default: off)\n"
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
        "  --watchdog SECONDS     stop the job with a message naming the step and the collective "
        "a\n"
        "                         rank waits in when no progress came for max(SECONDS, 10 x the\n"
        "                         longest step) (default 600; 0 = off): a stalled rank or a\n"
        "                         hung collective ends the job instead of spinning forever\n"
        "  --threads N            OpenMP/OpenBLAS threads per rank (default: OMP_NUM_THREADS,\n"
        "                         else the cores divided by the ranks on this node); more\n"
        "                         threads on a node than cores gives a warning\n"
        "  --help                 this text\n",
        TRAIN_VAL_WINDOWS);
}

const char *opt_flag_as_value(char **argv) {
    if (!optarg || strncmp(optarg, "--", 2) != 0) return NULL;
    return argv[optind - 1] == optarg ? argv[optind - 2] : argv[optind - 1]; /* --f v, --f=v */
}

long opt_long(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        up_die_all("%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
    return v;
}

double opt_double(const char *flag, const char *s, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        up_die_all("%s expects a number in [%g, %g], got '%s'", flag, lo, hi, s);
    return v;
}

unsigned long long opt_size(const char *flag, const char *s) {
    unsigned long long v;
    if (up_parse_bytes(s, &v) != 0)
        up_die_all("%s expects a size such as 6GiB, 512MiB or 1000000 (bytes), got '%s'", flag, s);
    return v;
}

mem_dtype opt_dtype(const char *flag, const char *s) {
    for (int dt = 0; dt < MEM_DTYPE_COUNT; dt++)
        if (strcmp(s, mem_dtype_name((mem_dtype)dt)) == 0) return (mem_dtype)dt;
    up_die_all("%s expects f32 or bf16, got '%s'", flag, s);
}

int opt_optional_count(const char *flag, int argc, char **argv) {
    if (optarg) return (int)opt_long(flag, optarg, 1, 1 << 30);
    if (optind < argc && argv[optind][0] >= '0' && argv[optind][0] <= '9')
        return (int)opt_long(flag, argv[optind++], 1, 1 << 30);
    return -1;
}

enum {
    OPT_CONFIG = 256,
    OPT_DATA,
    OPT_SEQ,
    OPT_STEPS,
    OPT_LR,
    OPT_WARMUP,
    OPT_MINLR,
    OPT_WD,
    OPT_B1,
    OPT_B2,
    OPT_EPS,
    OPT_CLIP,
    OPT_SEED,
    OPT_INIT,
    OPT_SAVE,
    OPT_SAVE_GRADS,
    OPT_LOG,
    OPT_MEMREP,
    OPT_THREADS,
    OPT_QUIET,
    OPT_HELP,
    OPT_CP,
    OPT_ACCUM,
    OPT_CKPT,
    OPT_OFFLOAD,
    OPT_TILE_MLP,
    OPT_TILE_LOSS,
    OPT_UPIPE,
    OPT_OVERLAP,
    OPT_NO_OVERLAP,
    OPT_DRY,
    OPT_MEMLIM,
    OPT_FSDP,
    OPT_CKPT_DIR,
    OPT_CKPT_EVERY,
    OPT_CKPT_KEEP,
    OPT_RESUME,
    OPT_DATA_CHANGED,
    OPT_STOP_AT,
    OPT_DOC_SEP,
    OPT_LOSS_MASK,
    OPT_WATCHDOG,
    OPT_NONFINITE,
    OPT_MAX_SKIPS,
    OPT_VAL_DATA,
    OPT_VAL_EVERY,
    OPT_PRINT_EVERY,
    OPT_VAL_WINDOWS,
    OPT_TRACE,
    OPT_DTYPE,
    OPT_SAVE_DTYPE
};

int train_parse_args(train_options *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    o->mopt.upipe_overlap = MODEL_UPIPE_OVERLAP_DEFAULT;
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
    o->ckpt_keep = 2;
    o->doc_sep = -1;
    o->watchdog = 600;
    o->on_nonfinite = NONFINITE_STOP;
    o->max_skips = 5;
    int max_skips_set = 0;
    static const struct option longopts[] = {{"config", required_argument, 0, OPT_CONFIG},
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
                                             {"upipe-overlap", no_argument, 0, OPT_OVERLAP},
                                             {"no-upipe-overlap", no_argument, 0, OPT_NO_OVERLAP},
                                             {"dry-run", no_argument, 0, OPT_DRY},
                                             {"fsdp", no_argument, 0, OPT_FSDP},
                                             {"mem-limit", required_argument, 0, OPT_MEMLIM},
                                             {"doc-sep", required_argument, 0, OPT_DOC_SEP},
                                             {"watchdog", required_argument, 0, OPT_WATCHDOG},
                                             {"loss-mask", required_argument, 0, OPT_LOSS_MASK},
                                             {"ckpt-dir", required_argument, 0, OPT_CKPT_DIR},
                                             {"ckpt-every", required_argument, 0, OPT_CKPT_EVERY},
                                             {"ckpt-keep", required_argument, 0, OPT_CKPT_KEEP},
                                             {"resume", no_argument, 0, OPT_RESUME},
                                             {"data-changed", no_argument, 0, OPT_DATA_CHANGED},
                                             {"stop-at", required_argument, 0, OPT_STOP_AT},
                                             {"on-nonfinite", required_argument, 0, OPT_NONFINITE},
                                             {"max-skips", required_argument, 0, OPT_MAX_SKIPS},
                                             {"val-data", required_argument, 0, OPT_VAL_DATA},
                                             {"val-every", required_argument, 0, OPT_VAL_EVERY},
                                             {"print-every", required_argument, 0, OPT_PRINT_EVERY},
                                             {"val-windows", required_argument, 0, OPT_VAL_WINDOWS},
                                             {"trace", required_argument, 0, OPT_TRACE},
                                             {"dtype", required_argument, 0, OPT_DTYPE},
                                             {"save-dtype", required_argument, 0, OPT_SAVE_DTYPE},
                                             {"help", no_argument, 0, OPT_HELP},
                                             {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        const char *flag = opt_flag_as_value(argv);
        if (flag)
            up_die_all("%s needs a value but is followed by the flag %s: see upipe train --help",
                       flag, optarg);
        switch (c) {
        case OPT_CONFIG:
            o->config = optarg;
            break;
        case OPT_DATA:
            o->data = optarg;
            break;
        case OPT_SEQ:
            o->T = opt_long("--seq-len", optarg, 1, 1L << 30);
            break;
        case OPT_STEPS:
            o->steps = opt_long("--steps", optarg, 1, INT_MAX);
            break;
        case OPT_LR:
            o->lr = opt_double("--lr", optarg, 0, 10);
            break;
        case OPT_WARMUP:
            o->warmup = opt_long("--warmup", optarg, 0, INT_MAX);
            break;
        case OPT_MINLR:
            o->min_lr_frac = opt_double("--min-lr-frac", optarg, 0, 1);
            break;
        case OPT_WD:
            o->weight_decay = opt_double("--weight-decay", optarg, 0, 10);
            break;
        case OPT_B1:
            o->beta1 = opt_double("--beta1", optarg, 0, 0.999999);
            break;
        case OPT_B2:
            o->beta2 = opt_double("--beta2", optarg, 0, 0.999999999);
            break;
        case OPT_EPS:
            o->adam_eps = opt_double("--adam-eps", optarg, 0, 1);
            break;
        case OPT_CLIP:
            o->grad_clip = opt_double("--grad-clip", optarg, 0, 1e30);
            break;
        case OPT_SEED:
            o->seed = (uint64_t)opt_long("--seed", optarg, 0, 0x7fffffffffffffffL);
            break;
        case OPT_INIT:
            o->init = optarg;
            break;
        case OPT_SAVE:
            o->save = optarg;
            break;
        case OPT_SAVE_GRADS:
            o->save_grads = optarg;
            break;
        case OPT_LOG:
            o->log = optarg;
            break;
        case OPT_MEMREP:
            o->mem_report = optarg;
            break;
        case OPT_THREADS:
            o->threads = (int)opt_long("--threads", optarg, 1, 1024);
            break;
        case OPT_QUIET:
            o->quiet = 1;
            break;
        case OPT_CP:
            o->cp = (int)opt_long("--cp", optarg, 1, 1 << 20);
            break;
        case OPT_ACCUM:
            o->accum = (int)opt_long("--grad-accum", optarg, 1, 1 << 20);
            break;
        case OPT_CKPT:
            o->mopt.checkpoint = 1;
            break;
        case OPT_OFFLOAD:
            o->mopt.offload_dir = optarg;
            break;
        case OPT_TILE_MLP:
            o->mopt.tile_mlp = opt_optional_count("--tile-mlp", argc, argv);
            break;
        case OPT_TILE_LOSS:
            o->mopt.tile_loss = opt_optional_count("--tile-loss", argc, argv);
            break;
        case OPT_UPIPE:
            o->mopt.U = (int)opt_long("--upipe-heads", optarg, 1, 1 << 20);
            break;
        case OPT_OVERLAP:
            o->mopt.upipe_overlap = 1;
            break;
        case OPT_NO_OVERLAP:
            o->mopt.upipe_overlap = 0;
            break;
        case OPT_DRY:
            o->dry_run = 1;
            break;
        case OPT_FSDP:
            o->mopt.fsdp = 1;
            break;
        case OPT_MEMLIM:
            o->mem_limit = opt_size("--mem-limit", optarg);
            break;
        case OPT_DOC_SEP:
            o->doc_sep = opt_long("--doc-sep", optarg, 0, INT32_MAX);
            break;
        case OPT_LOSS_MASK:
            o->loss_mask = optarg;
            break;
        case OPT_WATCHDOG:
            o->watchdog = opt_double("--watchdog", optarg, 0, 1e9);
            break;
        case OPT_CKPT_DIR:
            o->ckpt_dir = optarg;
            break;
        case OPT_CKPT_EVERY:
            o->ckpt_every = opt_long("--ckpt-every", optarg, 1, INT_MAX);
            break;
        case OPT_CKPT_KEEP:
            o->ckpt_keep = (int)opt_long("--ckpt-keep", optarg, 1, 1000);
            break;
        case OPT_RESUME:
            o->resume = 1;
            break;
        case OPT_DATA_CHANGED:
            o->data_changed = 1;
            break;
        case OPT_STOP_AT:
            o->stop_at = opt_long("--stop-at", optarg, 1, INT_MAX);
            break;
        case OPT_NONFINITE:
            if (strcmp(optarg, "stop") == 0)
                o->on_nonfinite = NONFINITE_STOP;
            else if (strcmp(optarg, "skip") == 0)
                o->on_nonfinite = NONFINITE_SKIP;
            else
                up_die_all("--on-nonfinite expects stop or skip, got '%s'", optarg);
            break;
        case OPT_MAX_SKIPS:
            o->max_skips = (int)opt_long("--max-skips", optarg, 1, INT_MAX);
            max_skips_set = 1;
            break;
        case OPT_VAL_DATA:
            o->val_data = optarg;
            break;
        case OPT_VAL_EVERY:
            o->val_every = opt_long("--val-every", optarg, 1, INT_MAX);
            break;
        case OPT_PRINT_EVERY:
            o->print_every = opt_long("--print-every", optarg, 1, INT_MAX);
            break;
        case OPT_VAL_WINDOWS:
            o->val_windows = opt_long("--val-windows", optarg, 1, INT_MAX);
            break;
        case OPT_TRACE:
            o->trace = optarg;
            break;
        case OPT_DTYPE:
            o->mopt.dtype = opt_dtype("--dtype", optarg);
            break;
        case OPT_SAVE_DTYPE:
            o->save_dtype = opt_dtype("--save-dtype", optarg);
            break;
        case OPT_HELP:
            return 1;
        case ':':
            up_die_all("%s needs a value: see upipe train --help", argv[optind - 1]);
        default:
            up_die_all("unknown flag '%s': see upipe train --help", argv[optind - 1]);
        }
    }
    if (optind < argc)
        up_die_all("unexpected argument '%s': flags are --name value (see upipe train --help)",
                   argv[optind]);
    if (!o->config)
        up_die_all("--config FILE is required (an HF config.json): see upipe train --help");
    if (!o->data)
        up_die_all("--data FILE is required (make a shard with `upipe data text --input FILE "
                   "--output data.bin`)");
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
    if (max_skips_set && o->on_nonfinite != NONFINITE_SKIP)
        up_die_all("--max-skips needs --on-nonfinite skip (with stop, the first bad step stops)");
    o->mopt.docs = o->doc_sep >= 0;
    if (o->warmup < 0) o->warmup = o->steps / 10 < 100 ? o->steps / 10 : 100;
    return 0;
}
