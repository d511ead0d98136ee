/* ckpt_state.c — a checkpoint's state.json: written from the run's state, read back with every
 * field checked (presence, type, range, the step against the folder's name), compared with the
 * run that resumes it, and the data identity that tells the same data from other data
 * (DESIGN.md §6.1). No MPI; parse and compare are pure (fuzz_ckpt_state). */
#include "train/ckpt.h"

#include "core/check.h"
#include "core/crc32c.h"
#include "io/json_util.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const CKPT_DATA_FILES[CKPT_NDATA] = {"model.safetensors", "optimizer.safetensors"};

void ckpt_fmt(char *buf, size_t len, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, len, f, ap);
    va_end(ap);
}

/* ---- identity of the data ---------------------------------------------------------------------
 */

enum { SAMPLE_BYTES = 64 << 10 };

void ckpt_file_identify(ckpt_file_id *id, const char *path, const void *map, size_t bytes) {
    memset(id, 0, sizeof *id);
    snprintf(id->path, sizeof id->path, "%s", path);
    char *abs = realpath(path, NULL);
    snprintf(id->abspath, sizeof id->abspath, "%s", abs ? abs : path);
    free(abs);
    id->bytes = bytes;
    /* the first (with the header), middle and last 64 KiB: cheap, and a different shard of the
     * same size differs there */
    size_t w = bytes < SAMPLE_BYTES ? bytes : SAMPLE_BYTES;
    const size_t at[3] = {0, (bytes - w) / 2, bytes - w};
    uint32_t c = 0;
    for (int k = 0; k < 3; k++)
        c = crc32c_raw(c, (const char *)map + at[k], w);
    id->sample = crc32c_finish(c, 3 * (uint64_t)w);
}

/* "--data PATH (N bytes, sample crc32c H)" */
static const char *describe(char *buf, size_t len, const char *flag, const ckpt_file_id *f) {
    ckpt_fmt(buf, len, "%s %s (%llu bytes, sample crc32c %08x)", flag, f->path,
             (unsigned long long)f->bytes, f->sample);
    return buf;
}

/* 1 when a and b are the same contents, *moved when at another absolute path. */
static int same_file(const ckpt_file_id *a, const ckpt_file_id *b, int *moved) {
    if (a->bytes != b->bytes || a->sample != b->sample) return 0;
    if (strcmp(a->abspath, b->abspath) != 0) *moved = 1;
    return 1;
}

int ckpt_data_diff(const ckpt_data *was, const ckpt_data *now, char *msg, size_t len) {
    char a[CKPT_PATH_LEN + 80], b[CKPT_PATH_LEN + 80];
    int moved_data = 0, moved_mask = 0;
    if (!same_file(&was->shard, &now->shard, &moved_data) || was->tokens != now->tokens) {
        ckpt_fmt(msg, len, "it was trained on %s, this run reads %s",
                 describe(a, sizeof a, "--data", &was->shard),
                 describe(b, sizeof b, "--data", &now->shard));
        return CKPT_DATA_DIFFERS;
    }
    if (was->doc_sep != now->doc_sep) {
        if (was->doc_sep < 0)
            ckpt_fmt(msg, len, "it was trained without --doc-sep, this run has --doc-sep %ld",
                     now->doc_sep);
        else if (now->doc_sep < 0)
            ckpt_fmt(msg, len, "it was trained with --doc-sep %ld, this run has none",
                     was->doc_sep);
        else
            ckpt_fmt(msg, len, "it was trained with --doc-sep %ld, this run has --doc-sep %ld",
                     was->doc_sep, now->doc_sep);
        return CKPT_DATA_DIFFERS;
    }
    if (was->has_mask != now->has_mask ||
        (was->has_mask && !same_file(&was->mask, &now->mask, &moved_mask))) {
        if (!now->has_mask)
            ckpt_fmt(msg, len, "it was trained with %s, this run has no --loss-mask",
                     describe(a, sizeof a, "--loss-mask", &was->mask));
        else if (!was->has_mask)
            ckpt_fmt(msg, len, "it was trained without --loss-mask, this run has %s",
                     describe(b, sizeof b, "--loss-mask", &now->mask));
        else
            ckpt_fmt(msg, len, "it was trained with %s, this run has %s",
                     describe(a, sizeof a, "--loss-mask", &was->mask),
                     describe(b, sizeof b, "--loss-mask", &now->mask));
        return CKPT_DATA_DIFFERS;
    }
    if (!moved_data && !moved_mask) return CKPT_DATA_SAME;
    const ckpt_file_id *w = moved_data ? &was->shard : &was->mask;
    const ckpt_file_id *n = moved_data ? &now->shard : &now->mask;
    ckpt_fmt(msg, len,
             "%s %s is the data of the checkpoint (%s) at a new path: same size and sample%s",
             moved_data ? "--data" : "--loss-mask", n->path, w->abspath,
             moved_data && moved_mask ? " (--loss-mask too)" : "");
    return CKPT_DATA_MOVED;
}

/* ---- writing ----------------------------------------------------------------------------------
 */

static json_t *hex32(uint32_t v) {
    char h[16];
    snprintf(h, sizeof h, "%08x", v);
    return json_string(h);
}

static json_t *file_id_json(const ckpt_file_id *f) {
    json_t *o = json_object();
    json_object_set_new(o, "path", json_string(f->path));
    json_object_set_new(o, "abspath", json_string(f->abspath));
    json_object_set_new(o, "bytes", json_integer((json_int_t)f->bytes));
    json_object_set_new(o, "sample_crc32c", hex32(f->sample));
    return o;
}

char *ckpt_state_json(const ckpt_state *st, const ckpt_file_sum *files, int ranks, int cp,
                      int accum, int fsdp) {
    json_t *o = json_object();
    json_object_set_new(o, "format", json_string(CKPT_FORMAT));
    json_object_set_new(o, "version", json_integer(CKPT_VERSION));
    json_object_set_new(o, "step", json_integer(st->step));
    json_object_set_new(o, "steps", json_integer(st->steps));
    json_object_set_new(o, "seq_len", json_integer(st->T));
    json_object_set_new(o, "global_batch", json_integer(st->global_batch));
    /* the data position: step k reads sequences k*global_batch .. (k+1)*global_batch - 1 */
    json_object_set_new(o, "next_sequence", json_integer(st->step * st->global_batch));
    json_object_set_new(o, "tokens_seen", json_integer(st->step * st->global_batch * st->T));
    json_object_set_new(o, "lr", json_real(st->lr));
    json_object_set_new(o, "warmup", json_integer(st->warmup));
    json_object_set_new(o, "min_lr_frac", json_real(st->min_lr_frac));
    json_object_set_new(o, "weight_decay", json_real(st->weight_decay));
    json_object_set_new(o, "beta1", json_real(st->beta1));
    json_object_set_new(o, "beta2", json_real(st->beta2));
    json_object_set_new(o, "adam_eps", json_real(st->adam_eps));
    json_object_set_new(o, "grad_clip", json_real(st->grad_clip));
    json_object_set_new(o, "seed", json_integer((json_int_t)st->seed));
    json_t *d = file_id_json(&st->data.shard);
    json_object_set_new(d, "tokens", json_integer((json_int_t)st->data.tokens));
    json_object_set_new(d, "doc_sep", json_integer(st->data.doc_sep));
    json_object_set_new(d, "loss_mask",
                        st->data.has_mask ? file_id_json(&st->data.mask) : json_null());
    json_object_set_new(o, "data", d);
    json_t *f = json_object(); /* size and CRC-32C of each data file, verified on every read */
    for (int k = 0; k < CKPT_NDATA; k++) {
        json_t *e = json_object();
        json_object_set_new(e, "bytes", json_integer((json_int_t)files[k].bytes));
        json_object_set_new(e, "crc32c", hex32(files[k].crc32c));
        json_object_set_new(f, CKPT_DATA_FILES[k], e);
    }
    json_object_set_new(o, "files", f);
    json_t *lay = json_object(); /* how the writer ran: informational, any layout resumes */
    json_object_set_new(lay, "ranks", json_integer(ranks));
    json_object_set_new(lay, "cp", json_integer(cp));
    json_object_set_new(lay, "grad_accum", json_integer(accum));
    json_object_set_new(lay, "fsdp", json_boolean(fsdp));
    json_object_set_new(o, "layout", lay);
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(o);
    UP_CHECK(text, "json_dumps failed");
    return text;
}

/* ---- reading: every field checked -------------------------------------------------------------
 */

/* The field key of o (named where in messages): missing, or of the wrong type, is a message. */
static json_t *field(const json_t *o, const char *where, const char *key, char *msg, size_t len) {
    json_t *v = json_object_get(o, key);
    if (!v) ckpt_fmt(msg, len, "no \"%s%s\"", where, key);
    return v;
}

/* An integer in [lo, hi]; 4.0 counts as 4 (JSON tools may write integers so), 4.5 does not. */
static int get_int(const json_t *o, const char *where, const char *key, long long lo, long long hi,
                   long long *out, char *msg, size_t len) {
    json_t *v = field(o, where, key, msg, len);
    if (!v) return -1;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9e15) {
        *out = (long long)json_real_value(v);
    } else {
        if (json_is_real(v))
            ckpt_fmt(msg, len, "\"%s%s\" must be an integer, got %.17g", where, key,
                     json_real_value(v));
        else
            ckpt_fmt(msg, len, "\"%s%s\" must be an integer, got %s", where, key,
                     json_type_name(v));
        return -1;
    }
    if (*out < lo || *out > hi) {
        if (hi >= LONG_MAX)
            ckpt_fmt(msg, len, "\"%s%s\" must be >= %lld, got %lld", where, key, lo, *out);
        else
            ckpt_fmt(msg, len, "\"%s%s\" must be in [%lld, %lld], got %lld", where, key, lo, hi,
                     *out);
        return -1;
    }
    return 0;
}

static int get_num(const json_t *o, const char *key, char *msg, size_t len) {
    json_t *v = field(o, "", key, msg, len);
    if (!v) return -1;
    if (!json_is_number(v) || !isfinite(json_number_value(v))) {
        ckpt_fmt(msg, len, "\"%s\" must be a number, got %s", key, json_type_name(v));
        return -1;
    }
    return 0;
}

static int get_str(const json_t *o, const char *where, const char *key, char *out, size_t outlen,
                   char *msg, size_t len) {
    json_t *v = field(o, where, key, msg, len);
    if (!v) return -1;
    if (!json_is_string(v)) {
        ckpt_fmt(msg, len, "\"%s%s\" must be a string, got %s", where, key, json_type_name(v));
        return -1;
    }
    snprintf(out, outlen, "%s", json_string_value(v));
    return 0;
}

/* Eight hex digits of a CRC-32C. */
static int get_hex32(const json_t *o, const char *where, const char *key, uint32_t *out, char *msg,
                     size_t len) {
    char s[16] = "", *end;
    if (get_str(o, where, key, s, sizeof s, msg, len) != 0) return -1;
    unsigned long v = strtoul(s, &end, 16);
    if (strlen(s) != 8 || *end || !strchr("0123456789abcdefABCDEF", s[0])) {
        ckpt_fmt(msg, len, "\"%s%s\" must be 8 hex digits, got \"%s\"", where, key, s);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int get_obj(const json_t *o, const char *where, const char *key, json_t **out, char *msg,
                   size_t len) {
    json_t *v = field(o, where, key, msg, len);
    if (!v) return -1;
    if (!json_is_object(v)) {
        ckpt_fmt(msg, len, "\"%s%s\" must be an object, got %s", where, key, json_type_name(v));
        return -1;
    }
    *out = v;
    return 0;
}

static int get_file_id(const json_t *o, const char *where, ckpt_file_id *f, char *msg, size_t len) {
    long long bytes;
    if (get_str(o, where, "path", f->path, sizeof f->path, msg, len) != 0 ||
        get_str(o, where, "abspath", f->abspath, sizeof f->abspath, msg, len) != 0 ||
        get_int(o, where, "bytes", 0, LLONG_MAX, &bytes, msg, len) != 0 ||
        get_hex32(o, where, "sample_crc32c", &f->sample, msg, len) != 0)
        return -1;
    f->bytes = (uint64_t)bytes;
    return 0;
}

/* Everything but the comparison with a run. */
static int check_fields(const json_t *o, long folder_step, ckpt_record *rec, char *msg,
                        size_t len) {
    long long step, steps, x, gb, ns;
    if (get_int(o, "", "steps", 1, LONG_MAX, &steps, msg, len) != 0 ||
        get_int(o, "", "step", 0, LONG_MAX, &step, msg, len) != 0)
        return -1;
    if (step > steps) {
        ckpt_fmt(msg, len, "\"step\" %lld is past \"steps\" %lld", step, steps);
        return -1;
    }
    if (folder_step >= 0 && step != folder_step) {
        ckpt_fmt(msg, len, "\"step\" %lld differs from the folder's step-%08ld", step, folder_step);
        return -1;
    }
    rec->step = (long)step;
    if (get_int(o, "", "seq_len", 1, LONG_MAX, &x, msg, len) != 0 ||
        get_int(o, "", "global_batch", 1, LONG_MAX, &gb, msg, len) != 0 ||
        get_int(o, "", "next_sequence", 0, LLONG_MAX, &ns, msg, len) != 0 ||
        get_int(o, "", "tokens_seen", 0, LLONG_MAX, &x, msg, len) != 0 ||
        get_int(o, "", "warmup", 0, LONG_MAX, &x, msg, len) != 0 ||
        get_int(o, "", "seed", LLONG_MIN, LLONG_MAX, &x, msg, len) != 0)
        return -1;
    long long want; /* a product that does not fit (a corrupt file) is not ns either */
    if (__builtin_mul_overflow(step, gb, &want) || ns != want) {
        ckpt_fmt(msg, len, "\"next_sequence\" %lld is not step %lld x global_batch %lld", ns, step,
                 gb);
        return -1;
    }
    static const char *const reals[] = {"lr",    "min_lr_frac", "weight_decay", "beta1",
                                        "beta2", "adam_eps",    "grad_clip"};
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
        if (get_num(o, reals[i], msg, len) != 0) return -1;
    json_t *lay, *files, *data, *e;
    if (get_obj(o, "", "layout", &lay, msg, len) != 0 ||
        get_int(lay, "layout.", "ranks", 1, INT_MAX, &x, msg, len) != 0 ||
        get_int(lay, "layout.", "cp", 1, INT_MAX, &x, msg, len) != 0 ||
        get_int(lay, "layout.", "grad_accum", 1, INT_MAX, &x, msg, len) != 0)
        return -1;
    if (!json_is_boolean(json_object_get(lay, "fsdp"))) {
        ckpt_fmt(msg, len, "\"layout.fsdp\" must be true or false");
        return -1;
    }
    if (get_obj(o, "", "files", &files, msg, len) != 0) return -1;
    for (int k = 0; k < CKPT_NDATA; k++) {
        char where[64];
        ckpt_fmt(where, sizeof where, "files.%s.", CKPT_DATA_FILES[k]);
        if (get_obj(files, "files.", CKPT_DATA_FILES[k], &e, msg, len) != 0 ||
            get_int(e, where, "bytes", 0, LLONG_MAX, &x, msg, len) != 0 ||
            get_hex32(e, where, "crc32c", &rec->files[k].crc32c, msg, len) != 0)
            return -1;
        rec->files[k].bytes = (uint64_t)x;
    }
    ckpt_data *d = &rec->data;
    if (get_obj(o, "", "data", &data, msg, len) != 0 ||
        get_file_id(data, "data.", &d->shard, msg, len) != 0 ||
        get_int(data, "data.", "tokens", 1, LLONG_MAX, &x, msg, len) != 0)
        return -1;
    d->tokens = (uint64_t)x;
    if (get_int(data, "data.", "doc_sep", -1, INT32_MAX, &x, msg, len) != 0) return -1;
    d->doc_sep = (long)x;
    json_t *mask = field(data, "data.", "loss_mask", msg, len);
    if (!mask) return -1;
    d->has_mask = !json_is_null(mask);
    if (d->has_mask && !json_is_object(mask)) {
        ckpt_fmt(msg, len, "\"data.loss_mask\" must be an object or null, got %s",
                 json_type_name(mask));
        return -1;
    }
    if (d->has_mask && get_file_id(mask, "data.loss_mask.", &d->mask, msg, len) != 0) return -1;
    return 0;
}

/* One line naming the first difference between the checkpoint's run and this one; 0 if none. */
static int diff_state(const json_t *o, const ckpt_state *run, char *msg, size_t len) {
    struct {
        const char *key, *flag;
        double now;
        int integer;
    } f[] = {
        {"steps", "--steps", (double)run->steps, 1},
        {"seq_len", "--seq-len", (double)run->T, 1},
        {"global_batch", "sequences per step (replicas x --grad-accum)", (double)run->global_batch,
         1},
        {"lr", "--lr", run->lr, 0},
        {"warmup", "--warmup", (double)run->warmup, 1},
        {"min_lr_frac", "--min-lr-frac", run->min_lr_frac, 0},
        {"weight_decay", "--weight-decay", run->weight_decay, 0},
        {"beta1", "--beta1", run->beta1, 0},
        {"beta2", "--beta2", run->beta2, 0},
        {"adam_eps", "--adam-eps", run->adam_eps, 0},
        {"grad_clip", "--grad-clip", run->grad_clip, 0},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        double was = json_number_value(json_object_get(o, f[i].key)); /* checked present */
        if (was == f[i].now) continue;
        if (f[i].integer)
            ckpt_fmt(msg, len, "it was trained with %s %.0f, this run has %.0f", f[i].flag, was,
                     f[i].now);
        else
            ckpt_fmt(msg, len, "it was trained with %s %.17g, this run has %.17g", f[i].flag, was,
                     f[i].now);
        return 1;
    }
    return 0;
}

int ckpt_config_diff(const model_config *a, const model_config *b, char *msg, size_t len) {
    struct {
        const char *key;
        double was, now;
    } f[] = {
        {"hidden_size", a->C, b->C},
        {"intermediate_size", a->F, b->F},
        {"num_hidden_layers", a->L, b->L},
        {"num_attention_heads", a->NH, b->NH},
        {"num_key_value_heads", a->NKV, b->NKV},
        {"head_dim", a->HS, b->HS},
        {"vocab_size", a->V, b->V},
        {"rms_norm_eps", a->eps, b->eps},
        {"rope_theta", a->rope_theta, b->rope_theta},
        {"tie_word_embeddings", a->tied, b->tied},
        {"rope_scaling type", a->rope.type, b->rope.type},
        {"rope_scaling.factor", a->rope.factor, b->rope.factor},
        {"rope_scaling.low_freq_factor", a->rope.low_freq_factor, b->rope.low_freq_factor},
        {"rope_scaling.high_freq_factor", a->rope.high_freq_factor, b->rope.high_freq_factor},
        {"rope_scaling.original_max_position_embeddings", a->rope.original_max_pos,
         b->rope.original_max_pos},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].was != f[i].now) {
            ckpt_fmt(msg, len, "its model has %s %g, --config has %g", f[i].key, f[i].was,
                     f[i].now);
            return 1;
        }
    return 0;
}

int ckpt_state_parse(const char *text, size_t n, const ckpt_state *run, long folder_step,
                     ckpt_record *rec, char *msg, size_t len) {
    memset(rec, 0, sizeof *rec);
    json_error_t jerr;
    json_t *o = json_loadb(text, n, 0, &jerr);
    if (!o) {
        ckpt_fmt(msg, len, "not JSON (line %d: %s)", jerr.line, jerr.text);
        return CKPT_STATE_UNREADABLE;
    }
    int verdict = CKPT_STATE_UNREADABLE;
    json_t *f = json_object_get(o, "format"), *v = json_object_get(o, "version");
    if (!json_is_object(o)) {
        ckpt_fmt(msg, len, "not a JSON object");
    } else if (!json_is_string(f) || strcmp(json_string_value(f), CKPT_FORMAT) != 0) {
        ckpt_fmt(msg, len, "no \"format\": \"%s\"", CKPT_FORMAT);
        verdict = CKPT_STATE_VERSION;
    } else if (!json_is_integer(v) || json_integer_value(v) != CKPT_VERSION) {
        if (json_is_integer(v))
            ckpt_fmt(msg, len, "checkpoint version %lld%s, this upipe reads version %d",
                     (long long)json_integer_value(v),
                     json_integer_value(v) == 1 ? " (before file checksums and the data record)"
                                                : "",
                     CKPT_VERSION);
        else
            ckpt_fmt(msg, len, "\"version\" must be an integer, got %s",
                     v ? json_type_name(v) : "none");
        verdict = CKPT_STATE_VERSION;
    } else if (check_fields(o, folder_step, rec, msg, len) == 0) {
        verdict = run && diff_state(o, run, msg, len) ? CKPT_STATE_DIFFERS : CKPT_STATE_OK;
    }
    json_decref(o);
    return verdict;
}
