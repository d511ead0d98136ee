/* ckpt.c — checkpoints written in parallel into a temporary folder, renamed when complete, read
 * back by owned ranges (DESIGN.md §6.1). */
#include "train/ckpt.h"

#include "core/check.h"
#include "core/fileio.h"
#include "io/safetensors.h"
#include "io/st_set.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_PATH_MAX 4096
static const char *const MODEL_PREFIX[1] = {""};
static const char *const OPT_PREFIX[2] = {"exp_avg.", "exp_avg_sq."};
static const char *const CKPT_FILES[4] = {"model.safetensors", "optimizer.safetensors",
                                          "state.json", "config.json"};

/* snprintf that treats truncation as a bug (paths are checked against CKPT_PATH_MAX at start-up;
 * messages are cut, which is harmless). */
static void fmt(char *buf, size_t len, const char *f, ...) UP_PRINTF(3, 4);
static void fmt(char *buf, size_t len, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, len, f, ap);
    va_end(ap);
}

/* ---- folders -------------------------------------------------------------------------------- */

/* The step of a folder named step-NNNNNNNN (8 or more digits); -1 for any other name. */
static long parse_step(const char *name) {
    if (strncmp(name, "step-", 5) != 0) return -1;
    const char *d = name + 5;
    size_t n = strlen(d);
    if (n < 8 || n > 18) return -1;
    for (size_t i = 0; i < n; i++)
        if (d[i] < '0' || d[i] > '9') return -1;
    return strtol(d, NULL, 10);
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

long ckpt_find_latest(const char *dir, char *path, size_t len) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    long best = -1;
    struct dirent *e;
    char p[CKPT_PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        long s = parse_step(e->d_name);
        if (s <= best) continue;
        fmt(p, sizeof p, "%s/%s", dir, e->d_name);
        if (is_dir(p)) best = s;
    }
    closedir(d);
    if (best >= 0) fmt(path, len, "%s/step-%08ld", dir, best);
    return best;
}

int ckpt_resolve(const char *ckpt, char *path, size_t len, char *err, size_t errlen) {
    char p[4096];
    up_path_join(p, sizeof p, ckpt, "state.json");
    if (up_file_readable(p)) {
        snprintf(path, len, "%s", ckpt);
        return 0;
    }
    if (ckpt_find_latest(ckpt, path, len) >= 0) return 0;
    return up_errf(err, errlen, NULL, "--ckpt %s: neither a checkpoint (no state.json) nor a "
                   "folder holding one (no step-NNNNNNNN inside)", ckpt);
}

/* Removes a checkpoint folder (flat: files only). 0 or -1 with errno. */
static int remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (!d) return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    char p[CKPT_PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        fmt(p, sizeof p, "%s/%s", path, e->d_name);
        unlink(p);
    }
    closedir(d);
    return rmdir(path);
}

/* Removes the hidden .step-* folders of dir (never complete checkpoints). */
static void remove_hidden(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[CKPT_PATH_MAX];
    while ((e = readdir(d)) != NULL)
        if (!strncmp(e->d_name, ".step-", 6)) {
            fmt(p, sizeof p, "%s/%s", dir, e->d_name);
            remove_tree(p);
        }
    closedir(d);
}

static int fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Keeps the newest keep complete checkpoints of dir (rank 0, after a rename). */
static void prune(const char *dir, int keep) {
    long steps[4096];
    int n = 0;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 4096) {
        long s = parse_step(e->d_name);
        if (s >= 0) steps[n++] = s;
    }
    closedir(d);
    for (int i = 0; i < n; i++) { /* newest first */
        for (int j = i + 1; j < n; j++)
            if (steps[j] > steps[i]) {
                long t = steps[i];
                steps[i] = steps[j];
                steps[j] = t;
            }
        if (i < keep) continue;
        /* hidden by one rename first: a kill while its files go never leaves a step-N folder
         * that looks complete but is not */
        char p[CKPT_PATH_MAX], h[CKPT_PATH_MAX];
        fmt(p, sizeof p, "%s/step-%08ld", dir, steps[i]);
        fmt(h, sizeof h, "%s/.step-%08ld.del", dir, steps[i]);
        if (rename(p, h) != 0 || remove_tree(h) != 0)
            fprintf(stderr, "upipe: warning: could not remove the old checkpoint %s (%s)\n", p,
                    strerror(errno));
    }
}

/* ---- writing -------------------------------------------------------------------------------- */

static int write_state(const char *path, const ckpt_state *st, const comm_ctx *comm, int accum,
                       int fsdp, char *err, size_t errlen) {
    json_t *o = json_object();
    json_object_set_new(o, "format", json_string("upipe-checkpoint"));
    json_object_set_new(o, "version", json_integer(1));
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
    json_t *lay = json_object(); /* how the writer ran: informational, any layout resumes */
    json_object_set_new(lay, "ranks", json_integer(comm->R));
    json_object_set_new(lay, "cp", json_integer(comm->P));
    json_object_set_new(lay, "grad_accum", json_integer(accum));
    json_object_set_new(lay, "fsdp", json_boolean(fsdp));
    json_object_set_new(o, "layout", lay);
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(o);
    UP_CHECK(text, "json_dumps failed");
    int rc = up_write_line_atomic(path, text, err, errlen);
    free(text);
    return rc;
}

/* A safetensors file of total bytes whose header is hdr: the header written, the data area
 * allocated (so a full disk shows here, before any rank writes). */
static int create_file(const char *path, const char *hdr, size_t hlen, size_t total, char *err,
                       size_t errlen) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return up_errf(err, errlen, path, "cannot create (%s)", strerror(errno));
    int rc = 0;
    ssize_t w = pwrite(fd, hdr, hlen, 0);
    if (w != (ssize_t)hlen) {
        rc = up_errf(err, errlen, path, "write failed (%s)", w < 0 ? strerror(errno) : "short");
    } else {
        int e = posix_fallocate(fd, 0, (off_t)total);
        if (e == EOPNOTSUPP || e == EINVAL) e = ftruncate(fd, (off_t)total) ? errno : 0;
        if (e) rc = up_errf(err, errlen, path, "cannot reserve %zu bytes (%s)", total, strerror(e));
    }
    if (rc == 0 && fsync(fd) != 0)
        rc = up_errf(err, errlen, path, "write failed (%s)", strerror(errno));
    close(fd);
    return rc;
}

/* A failure anywhere stops every rank together; the partial checkpoint is removed first. */
static void agree(comm_ctx *comm, int failed, const char *err, const char *tmp) {
    if (!comm_any(comm, failed)) return;
    if (comm->rank == 0 && tmp) remove_tree(tmp);
    up_die_agreed(failed ? err : NULL);
}

/* ---- this rank's ranges ---------------------------------------------------------------------- */

/* Writes go around the page cache (O_DIRECT, measured ~5x faster than buffered writes of the
 * same bytes here) for the page-aligned middle of each range, through a staging buffer; the
 * unaligned ends of a range (shared with a neighbour rank's range) and file systems that refuse
 * O_DIRECT use plain buffered writes. */
enum { CKPT_ALIGN = 4096, CKPT_STAGE = 8 << 20 };

size_t ckpt_stage_bytes(void) { return (size_t)CKPT_STAGE + CKPT_ALIGN; }

typedef struct {
    int fd, dfd;  /* buffered and O_DIRECT descriptors of one file (dfd -1: none) */
    char *stage;  /* CKPT_STAGE bytes, CKPT_ALIGN-aligned */
    int err;      /* errno of the first failure */
} range_writer;

static int write_range(void *ctx, const void *src, size_t len, uint64_t off) {
    range_writer *w = ctx;
    const char *p = src;
    uint64_t a0 = (off + CKPT_ALIGN - 1) / CKPT_ALIGN * CKPT_ALIGN;
    uint64_t a1 = (off + len) / CKPT_ALIGN * CKPT_ALIGN;
    if (w->dfd < 0 || a1 <= a0) a0 = a1 = off + len; /* all buffered */
    if (up_pwrite_all(w->fd, p, (size_t)(a0 - off), off) != 0) return w->err = errno, -1;
    for (uint64_t o = a0; o < a1;) {
        size_t n = a1 - o < CKPT_STAGE ? (size_t)(a1 - o) : CKPT_STAGE;
        memcpy(w->stage, p + (o - off), n);
        if (w->dfd >= 0 && up_pwrite_all(w->dfd, w->stage, n, o) == 0) {
            o += n;
            continue;
        }
        if (w->dfd < 0 || errno != EINVAL) return w->err = errno, -1;
        close(w->dfd); /* O_DIRECT refused here: buffered from now on */
        w->dfd = -1;
    }
    if (up_pwrite_all(w->fd, p + (a1 - off), (size_t)(off + len - a1), a1) != 0)
        return w->err = errno, -1;
    return 0;
}

/* This rank's ranges of params (model file) and of both moments (optimizer file), synced. */
static int write_ranges(model *m, const char *tmp, size_t hl_m, size_t hl_o, char *stage,
                        char *err, size_t errlen) {
    char path[2][CKPT_PATH_MAX];
    fmt(path[0], sizeof path[0], "%s/model.safetensors", tmp);
    fmt(path[1], sizeof path[1], "%s/optimizer.safetensors", tmp);
    uint64_t np4 = (uint64_t)m->params.nparams * sizeof(float);
    const float *slab[3] = {m->fsdp.params, m->fsdp.m, m->fsdp.v};
    const int file_of[3] = {0, 1, 1};
    const uint64_t off[3] = {hl_m, hl_o, hl_o + np4};
    range_writer w[2] = {{-1, -1, stage, 0}, {-1, -1, stage, 0}};
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        w[k].fd = open(path[k], O_WRONLY | O_CLOEXEC);
        w[k].dfd = open(path[k], O_WRONLY | O_CLOEXEC | O_DIRECT);
        if (w[k].fd < 0)
            rc = up_errf(err, errlen, path[k], "cannot open (%s)", strerror(errno));
    }
    for (int s = 0; s < 3 && rc == 0; s++) {
        range_writer *x = &w[file_of[s]];
        if (model_write_owned(m, slab[s], off[s], write_range, x) != 0)
            rc = up_errf(err, errlen, path[file_of[s]], "write failed (%s)", strerror(x->err));
    }
    for (int k = 0; k < 2; k++) {
        if (rc == 0 && w[k].fd >= 0 && fsync(w[k].fd) != 0)
            rc = up_errf(err, errlen, path[k], "fsync failed (%s)", strerror(errno));
        if (w[k].fd >= 0) close(w[k].fd);
        if (w[k].dfd >= 0) close(w[k].dfd);
    }
    return rc;
}

double ckpt_write(model *m, comm_ctx *comm, const char *dir, const ckpt_state *st,
                  const model_config *cfg, int keep, void *stage) {
    int rank0 = comm->rank == 0, writer = rank0 || m->fsdp.R > 1;
    char tmp[CKPT_PATH_MAX], fin[CKPT_PATH_MAX], old[CKPT_PATH_MAX], p[CKPT_PATH_MAX];
    char err[1024] = "", detail[768] = "";
    fmt(tmp, sizeof tmp, "%s/.step-%08ld.tmp", dir, st->step);
    fmt(fin, sizeof fin, "%s/step-%08ld", dir, st->step);
    fmt(old, sizeof old, "%s/.step-%08ld.old", dir, st->step);
    /* every rank lays out both headers: the data offsets of its ranges */
    int nt = m->params.ntensors;
    st_entry *em = model_st_entries(m, 1, MODEL_PREFIX), *eo = model_st_entries(m, 2, OPT_PREFIX);
    size_t hl_m = 0, hl_o = 0, np4 = m->params.nparams * sizeof(float);
    char *hm = st_header(em, nt, ST_F32, CKPT_ALIGN, &hl_m, detail, sizeof detail);
    char *ho = hm ? st_header(eo, 2 * nt, ST_F32, CKPT_ALIGN, &hl_o, detail, sizeof detail) : NULL;
    free(em);
    free(eo);
    UP_CHECK(hm && ho, "checkpoint header: %s", detail);
    double bytes = (double)(hl_m + np4 + hl_o + 2 * np4);

    /* 1. rank 0: the temporary folder, the small files, both data files allocated */
    int rc = 0;
    if (rank0) {
        remove_hidden(dir); /* what a killed run left: partial or half-deleted checkpoints */
        up_tmp_push(tmp, 1); /* a signal that ends the process removes the partial folder */
        for (int k = 0; k < 4; k++) {
            fmt(p, sizeof p, "%s/%s", tmp, CKPT_FILES[k]);
            up_tmp_push(p, 0);
        }
        if (mkdir(tmp, 0755) != 0) {
            rc = up_errf(detail, sizeof detail, tmp, "cannot create (%s)", strerror(errno));
        } else {
            fmt(p, sizeof p, "%s/config.json", tmp);
            rc = config_save(cfg, p, detail, sizeof detail);
            fmt(p, sizeof p, "%s/state.json", tmp);
            if (rc == 0)
                rc = write_state(p, st, comm, (int)(st->global_batch / comm->D), m->fsdp.R > 1,
                                 detail, sizeof detail);
            fmt(p, sizeof p, "%s/model.safetensors", tmp);
            if (rc == 0) rc = create_file(p, hm, hl_m, hl_m + np4, detail, sizeof detail);
            fmt(p, sizeof p, "%s/optimizer.safetensors", tmp);
            if (rc == 0) rc = create_file(p, ho, hl_o, hl_o + 2 * np4, detail, sizeof detail);
        }
    }
    free(hm);
    free(ho);
    fmt(err, sizeof err, "checkpoint %s not written: %s; the complete checkpoints in %s "
             "are intact", fin, detail, dir);
    agree(comm, rc != 0, err, tmp);

    /* 2. every writer: its ranges, synced */
    char *st_buf = (char *)(((uintptr_t)stage + CKPT_ALIGN - 1) / CKPT_ALIGN * CKPT_ALIGN);
    rc = writer ? write_ranges(m, tmp, hl_m, hl_o, st_buf, detail, sizeof detail) : 0;
    fmt(err, sizeof err, "checkpoint %s not written: %s; the complete checkpoints in %s "
             "are intact", fin, detail, dir);
    agree(comm, rc != 0, err, tmp);

    /* 3. rank 0: one rename makes it visible, then the old ones go */
    if (rank0) {
        if (fsync_dir(tmp) != 0) {
            rc = up_errf(detail, sizeof detail, tmp, "fsync failed (%s)", strerror(errno));
        } else {
            int had = is_dir(fin);
            if (had) { /* the same step again: the old folder goes only after the new one is in */
                remove_tree(old);
                rc = rename(fin, old);
            }
            if (rc == 0) rc = rename(tmp, fin);
            if (rc != 0) up_errf(detail, sizeof detail, fin, "rename failed (%s)", strerror(errno));
            if (rc == 0 && had) remove_tree(old);
            if (rc == 0) fsync_dir(dir);
            if (rc == 0) prune(dir, keep);
        }
    }
    fmt(err, sizeof err, "checkpoint %s not written: %s", fin, detail);
    agree(comm, rc != 0, err, tmp);
    if (rank0) {
        for (int k = 0; k < 4; k++) {
            fmt(p, sizeof p, "%s/%s", tmp, CKPT_FILES[k]);
            up_tmp_pop(p);
        }
        up_tmp_pop(tmp);
    }
    return bytes;
}

/* ---- reading -------------------------------------------------------------------------------- */

/* One line naming the first difference between the checkpoint's run and this one; 0 if none. */
static int diff_state(const json_t *o, const ckpt_state *run, char *msg, size_t len) {
    struct {
        const char *key, *flag;
        double now;
        int integer;
    } f[] = {
        {"steps", "--steps", (double)run->steps, 1},
        {"seq_len", "--seq-len", (double)run->T, 1},
        {"global_batch", "sequences per step (replicas x --grad-accum)",
         (double)run->global_batch, 1},
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
        json_t *v = json_object_get(o, f[i].key);
        if (!json_is_number(v)) {
            fmt(msg, len, "state.json has no \"%s\": the checkpoint is corrupt", f[i].key);
            return 1;
        }
        double was = json_number_value(v);
        if (was == f[i].now) continue;
        if (f[i].integer)
            fmt(msg, len, "it was trained with %s %.0f, this run has %.0f", f[i].flag, was,
                     f[i].now);
        else
            fmt(msg, len, "it was trained with %s %.17g, this run has %.17g", f[i].flag, was,
                     f[i].now);
        return 1;
    }
    return 0;
}

static int diff_config(const model_config *a, const model_config *b, char *msg, size_t len) {
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
            fmt(msg, len, "its model has %s %g, --config has %g", f[i].key, f[i].was,
                     f[i].now);
            return 1;
        }
    return 0;
}

/* The verdict on a parsed state.json o (NULL: it did not parse, jerr says why); takes o. */
static int state_verdict(json_t *o, const json_error_t *jerr, const ckpt_state *run, long *step,
                         char *msg, size_t len) {
    if (!o || !json_is_integer(json_object_get(o, "step"))) {
        fmt(msg, len, "%s", o ? "no \"step\"" : jerr->text);
        json_decref(o);
        return CKPT_STATE_UNREADABLE;
    }
    *step = (long)json_integer_value(json_object_get(o, "step"));
    int differs = diff_state(o, run, msg, len);
    json_decref(o);
    return differs ? CKPT_STATE_DIFFERS : CKPT_STATE_OK;
}

int ckpt_state_parse(const char *text, size_t n, const ckpt_state *run, long *step, char *msg,
                     size_t len) {
    json_error_t jerr;
    json_t *o = json_loadb(text, n, 0, &jerr);
    return state_verdict(o, &jerr, run, step, msg, len);
}

long ckpt_check(const char *path, const ckpt_state *run, const model_config *cfg) {
    char p[CKPT_PATH_MAX], err[512], msg[512];
    fmt(p, sizeof p, "%s/state.json", path);
    json_error_t jerr;
    json_t *o = json_load_file(p, 0, &jerr);
    long step = 0;
    int verdict = state_verdict(o, &jerr, run, &step, msg, sizeof msg);
    if (verdict == CKPT_STATE_UNREADABLE)
        up_die_all("--resume: %s is not a readable checkpoint state (%s): remove the folder to "
                   "resume from the one before", p, msg);
    if (verdict == CKPT_STATE_DIFFERS)
        up_die_all("--resume: %s cannot continue this run: %s; use the same value, or a new "
                   "--ckpt-dir", path, msg);
    model_config was;
    fmt(p, sizeof p, "%s/config.json", path);
    if (config_load(&was, p, err, sizeof err) != 0) up_die_all("--resume: %s", err);
    if (diff_config(&was, cfg, msg, sizeof msg))
        up_die_all("--resume: %s cannot continue this run: %s; use the config it was trained "
                   "with", path, msg);
    if (step > run->steps)
        up_die_all("--resume: %s is at step %ld, past --steps %ld", path, step, run->steps);
    return step;
}

double ckpt_load(model *m, const char *path) {
    char p[CKPT_PATH_MAX], err[512];
    st_set set;
    fmt(p, sizeof p, "%s/model.safetensors", path);
    if (st_set_open(&set, p, err, sizeof err) != 0) up_die("--resume: %s", err);
    int rc = model_read_owned(m, m->fsdp.params, &set, "", err, sizeof err);
    st_set_close(&set);
    if (rc != 0) up_die("--resume: %s", err);
    fmt(p, sizeof p, "%s/optimizer.safetensors", path);
    if (st_set_open(&set, p, err, sizeof err) != 0) up_die("--resume: %s", err);
    rc = model_read_owned(m, m->fsdp.m, &set, OPT_PREFIX[0], err, sizeof err);
    if (rc == 0) rc = model_read_owned(m, m->fsdp.v, &set, OPT_PREFIX[1], err, sizeof err);
    st_set_close(&set);
    if (rc != 0) up_die("--resume: %s", err);
    double owned = 0;
    for (int t = 0; t < m->params.ntensors; t++) {
        size_t i0, i1;
        if (model_owned_part(m, t, &i0, &i1)) owned += (double)(i1 - i0);
    }
    return owned * 3 * sizeof(float);
}
