/* output.c — what `upipe train` shows: the run summary, the per-step terminal line and the JSON
 * log record (through jansson; every line flushed and checked). */
#include "train/run.h"

#include "core/check.h"
#include "core/fileio.h"
#include "core/mem.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fmt_duration(char *buf, size_t len, double s) {
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
}

void print_summary(const train_run *r) {
    const train_options *o = &r->o;
    const model *m = r->m;
    const model_config *c = &r->cfg;
    char b1[32], b2[32];
    printf("upipe train: %s\n", o->front.config);
    printf("  model   C=%d L=%d NH=%d NKV=%d HS=%d F=%d V=%d%s rope_theta=%g%s, %.2fM params\n",
           c->C, c->L, c->NH, c->NKV, c->HS, c->F, c->V, c->tied ? " tied" : "", c->rope_theta,
           c->rope.type == ROPE_SCALING_LLAMA3 ? " llama3-scaling" : "",
           (double)model_nparams(m) / 1e6);
    printf("  data    %s, T=%ld tokens per step, %ld steps\n", o->front.data, o->front.T, o->steps);
    printf("  optim   AdamW lr=%g warmup=%ld cosine to %g x lr, wd=%g, betas=(%g, %g), clip=%g\n",
           o->lr, o->warmup, o->min_lr_frac, o->weight_decay, o->beta1, o->beta2, o->grad_clip);
    printf("  init    %s\n", r->resumed_from[0] ? r->resumed_from
                             : o->init          ? o->init
                                                : "random (seed)");
    printf("  machine %d thread%s, kernels: %s, %s\n", r->threads, r->threads == 1 ? "" : "s",
           kernel_path_name(), blas_describe());
    if (o->front.mopt.dtype == MEM_DTYPE_BF16) /* DESIGN.md §5.1 */
        printf("  dtype   bf16: fp32 masters, gradients and AdamW; bf16 weights' copy, "
               "activations, checkpoints, attention; gemm: %s\n",
               gemm_bf16_path());
    printf("  memory  %s accounted after allocation (model state %s)\n",
           up_fmt_bytes(b1, sizeof b1, (double)mem_live_total()),
           up_fmt_bytes(
               b2, sizeof b2,
               (double)(mem_live(MEM_PARAMS) + mem_live(MEM_GRADS) + mem_live(MEM_OPTIMIZER))));
    printf("  layout  %d rank%s: %d replica(s) x context-parallel %d, T_loc=%d", r->world,
           r->world == 1 ? "" : "s", r->comm.D, r->P, r->T_loc);
    if (r->comm.nodes > 1 || r->P > 1) /* DESIGN.md §8.3 */
        printf(", %d node%s: %s; context-parallel groups %s", r->comm.nodes,
               r->comm.nodes == 1 ? "" : "s", r->comm.node_desc,
               r->comm.cp_nodes == 1 ? "within a node" : "across nodes");
    if (r->comm.staged) /* DESIGN.md §11 "Ranks on a GPU" */
        printf(", exchanges staged through host memory");
    else if (r->comm.nccl_world)
        printf(", exchanges through NCCL");
    if (o->front.gpu_share > 1) printf(" (%d ranks share this GPU)", o->front.gpu_share);
    if (o->front.mopt.U)
        printf(", UPipe stages of %d heads%s", o->front.mopt.U,
               model_attention_overlaps(m) ? ", exchanges overlapped with attention"
               : o->front.mopt.upipe_overlap && r->P > 1 && !r->comm.staged &&
                       !model_pipe_wanted(&o->front.mopt, &r->comm)
                   ? ", no overlap within a node (--upipe-overlap-on-node forces it)"
                   : "");
    printf("\n");
    fflush(stdout);
}

/* ---- per-step output ------------------------------------------------------------------------ */

/* The rate and the memory of a step: "GF/s" and the accounted peak on the CPU; on a device,
 * TFLOP/s, MFU against its dense bf16 rate and the GPU's accounted peak. */
static void step_rate(const train_run *r, const train_step_stats *s, char *buf, size_t len) {
    const backend_ops *be = r->o.front.mopt.be;
    char pk[32];
    double fl = r->flops / s->dt;
    if (be && be->space == MEM_SPACE_DEVICE) {
        up_fmt_bytes(pk, sizeof pk, (double)mem_peak_in(MEM_SPACE_DEVICE));
        if (be->peak_flops > 0)
            snprintf(buf, len, "%.1f TFLOP/s, MFU %.2f | %.2f s | gpu peak %s", fl / 1e12,
                     fl / be->peak_flops, s->dt, pk);
        else
            snprintf(buf, len, "%.1f TFLOP/s | %.2f s | gpu peak %s", fl / 1e12, s->dt, pk);
        return;
    }
    up_fmt_bytes(pk, sizeof pk, (double)mem_peak_total());
    snprintf(buf, len, "%.1f GF/s | %.2f s (comm %.0f%%) | peak %s", fl / 1e9, s->dt,
             100.0 * s->comm_s / s->dt, pk);
}

void print_step_line(const train_run *r, const train_step_stats *s, double tps) {
    char rate[160], eta[32];
    double elapsed = now_s() - r->t_start;
    fmt_duration(eta, sizeof eta,
                 elapsed / (double)(s->step + 1 - r->start_step) *
                     (double)(r->o.steps - s->step - 1));
    step_rate(r, s, rate, sizeof rate);
    printf("step %4ld/%ld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %s | eta %s%s\n",
           s->step + 1, r->o.steps, s->loss, s->lr, s->norm, tps, rate, eta,
           s->skipped ? " | skipped: not finite, no update" : "");
    fflush(stdout);
}

/* "val" after the step's line: loss, perplexity and recall accuracy of the validation windows. */
void print_val_line(const train_run *r, const train_step_stats *s) {
    const eval_stats *v = s->val;
    printf("val  %4ld/%ld | loss %.4f | ppl %.3f", s->step + 1, r->o.steps, eval_loss(v),
           eval_perplexity(v));
    if (v->recall)
        printf(" | recall %.3f of %.0f questions", eval_accuracy(v, -1), eval_questions(v, -1));
    printf(" | %ld windows, %lld tokens | %.2f s\n", v->windows, v->targets, s->val_s);
    fflush(stdout);
}

void print_val_closing(const train_run *r) {
    const eval_stats *v = &r->val_last;
    printf("validation: loss %.4f (perplexity %.3f) after step %ld", eval_loss(v),
           eval_perplexity(v), r->val_step);
    if (v->recall)
        printf(", recall accuracy %.3f of %.0f questions (chance %.3f)", eval_accuracy(v, -1),
               eval_questions(v, -1), RECALL_CHANCE);
    printf("\n");
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
void write_log_record(const train_run *r, const train_step_stats *s, double tps) {
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
    if (r->o.front.doc_sep >= 0)
        json_object_set_new(rec, "documents", json_integer((json_int_t)s->docs));
    json_object_set_new(rec, "tokens_per_s", json_real_digits(tps, 6));
    json_object_set_new(rec, "step_s", json_real_digits(s->dt, 6));
    json_object_set_new(rec, "compute_s", json_real_digits(s->dt - s->comm_s, 6));
    json_object_set_new(rec, "comm_s", json_real_digits(s->comm_s, 6));
    json_object_set_new(
        rec, "a2a_s",
        json_real_digits(st[COMM_SEQ_TO_HEAD].seconds + st[COMM_HEAD_TO_SEQ].seconds, 6));
    json_object_set_new(
        rec, "a2a_mpi_s",
        json_real_digits(st[COMM_SEQ_TO_HEAD].mpi_seconds + st[COMM_HEAD_TO_SEQ].mpi_seconds, 6));
    json_object_set_new(
        rec, "a2a_bytes",
        json_real_digits(st[COMM_SEQ_TO_HEAD].bytes + st[COMM_HEAD_TO_SEQ].bytes, 6));
    json_object_set_new(rec, "attn_s", json_real_digits(s->attn_s, 6));
    json_object_set_new(
        rec, "fsdp_s",
        json_real_digits(st[COMM_FSDP_GATHER].seconds + st[COMM_FSDP_REDUCE].seconds, 6));
    json_object_set_new(
        rec, "fsdp_bytes",
        json_real_digits(st[COMM_FSDP_GATHER].bytes + st[COMM_FSDP_REDUCE].bytes, 6));
    json_object_set_new(rec, "grad_reduce_s", json_real_digits(st[COMM_GRAD_REDUCE].seconds, 6));
    json_object_set_new(rec, "grad_reduce_bytes", json_real_digits(st[COMM_GRAD_REDUCE].bytes, 6));
    json_object_set_new(rec, "flops_per_s", json_real_digits(r->flops / s->dt, 6));
    json_object_set_new(rec, "peak_bytes", json_integer((json_int_t)mem_peak_total()));
    json_object_set_new(rec, "rss_bytes", json_integer((json_int_t)mem_rss_now()));
    if (s->val) { /* --val-data, on the steps that validated */
        json_object_set_new(rec, "val_loss", json_real_digits(eval_loss(s->val), 9));
        json_object_set_new(rec, "val_perplexity", json_real_digits(eval_perplexity(s->val), 9));
        json_object_set_new(rec, "val_tokens", json_integer(s->val->targets));
        if (s->val->recall) {
            json_object_set_new(rec, "val_recall_accuracy",
                                json_real_digits(eval_accuracy(s->val, -1), 9));
            json_object_set_new(rec, "val_recall_questions",
                                json_integer((json_int_t)eval_questions(s->val, -1)));
        }
        json_object_set_new(rec, "val_s", json_real_digits(s->val_s, 6));
    }
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

/* ---- a resumed run's log ------------------------------------------------------------------- */

/* The "step" of one log line; -1 for JSON without one, -2 for a line that is not JSON. */
static long log_line_step(const char *line, size_t n) {
    json_error_t jerr;
    json_t *rec = json_loadb(line, n, 0, &jerr);
    if (!rec) return -2;
    json_t *v = json_object_get(rec, "step");
    long step = json_is_integer(v) && json_integer_value(v) >= 0 ? (long)json_integer_value(v) : -1;
    json_decref(rec);
    return step;
}

typedef struct {
    long line,
        step; /* a kept line: its index in the file, its step (a stepless one: its record's) */
} log_kept;

/* The lines of f to keep (log_cut_to_step), in order, into *kept (malloc'd); their count, and
 * *cut = 1 when some line goes. */
static size_t log_select(FILE *f, long step, log_kept **kept, int *cut) {
    size_t n = 0, cap = 0, lcap = 0;
    char *line = NULL;
    ssize_t len;
    *kept = NULL;
    *cut = 0;
    for (long i = 0; (len = getline(&line, &lcap, f)) >= 0; i++) {
        long s = log_line_step(line, (size_t)len);
        int stepless = s == -1;
        if (stepless) s = n ? (*kept)[n - 1].step : 0; /* goes with its record */
        if (s < 0 || s > step) {
            *cut = 1;
            continue;
        }
        while (!stepless && n > 0 && (*kept)[n - 1].step >= s) /* a restart: later lines win */
            n--, *cut = 1;
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            *kept = realloc(*kept, cap * sizeof **kept);
            UP_CHECK(*kept, "out of memory");
        }
        (*kept)[n++] = (log_kept){i, s};
    }
    free(line);
    return n;
}

int log_cut_to_step(const char *path, long step, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f && errno == ENOENT) return 0;
    if (!f) return up_errf(err, errlen, NULL, "--log %s: cannot read (%s)", path, strerror(errno));
    int cut, rc = 0;
    log_kept *kept;
    size_t n = log_select(f, step, &kept, &cut);
    up_atomic_file out;
    if (cut && ferror(f))
        rc = up_errf(err, errlen, NULL, "--log %s: read failed (%s)", path, strerror(errno));
    else if (cut && up_atomic_open(&out, path, err, errlen) != 0)
        rc = -1;
    if (cut && rc == 0) { /* the kept lines, copied in a second pass */
        rewind(f);
        char *line = NULL;
        size_t lcap = 0, k = 0;
        ssize_t len;
        for (long i = 0; k < n && (len = getline(&line, &lcap, f)) >= 0; i++) {
            if (kept[k].line != i) continue;
            k++;
            fwrite(line, 1, (size_t)len, out.f);
            if (line[len - 1] != '\n') fputc('\n', out.f); /* a whole last line without one */
        }
        free(line);
        rc = up_atomic_commit(&out, err, errlen);
    }
    free(kept);
    fclose(f);
    return rc;
}
