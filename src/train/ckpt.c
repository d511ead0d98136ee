/* ckpt.c — checkpoints written in parallel into a temporary folder, renamed when complete, read
 * back by owned ranges (DESIGN.md §6.1). */
#include "train/ckpt.h"

#include "core/check.h"
#include "core/crc32c.h"
#include "core/fileio.h"
#include "io/safetensors.h"
#include "io/st_set.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
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
        ckpt_fmt(p, sizeof p, "%s/%s", dir, e->d_name);
        if (is_dir(p)) best = s;
    }
    closedir(d);
    if (best >= 0) ckpt_fmt(path, len, "%s/step-%08ld", dir, best);
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
    return up_errf(err, errlen, NULL,
                   "--ckpt %s: neither a checkpoint (no state.json) nor a "
                   "folder holding one (no step-NNNNNNNN inside)",
                   ckpt);
}

/* Removes a checkpoint folder (flat: files only). 0 or -1 with errno. */
static int remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (!d) return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    char p[CKPT_PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        ckpt_fmt(p, sizeof p, "%s/%s", path, e->d_name);
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
            ckpt_fmt(p, sizeof p, "%s/%s", dir, e->d_name);
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
        ckpt_fmt(p, sizeof p, "%s/step-%08ld", dir, steps[i]);
        ckpt_fmt(h, sizeof h, "%s/.step-%08ld.del", dir, steps[i]);
        if (rename(p, h) != 0 || remove_tree(h) != 0)
            fprintf(stderr, "upipe: warning: could not remove the old checkpoint %s (%s)\n", p,
                    strerror(errno));
    }
}

/* ---- writing -------------------------------------------------------------------------------- */

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

size_t ckpt_stage_bytes(void) {
    return (size_t)CKPT_STAGE + CKPT_ALIGN;
}

typedef struct {
    int fd, dfd;    /* buffered and O_DIRECT descriptors of one file (dfd -1: none) */
    char *stage;    /* CKPT_STAGE bytes, CKPT_ALIGN-aligned */
    int err;        /* errno of the first failure */
    uint64_t total; /* the file's size */
    uint32_t crc;   /* XOR of the placed raw CRC-32C of the ranges written (core/crc32c.h) */
} range_writer;

static int write_range(void *ctx, const void *src, size_t len, uint64_t off) {
    range_writer *w = ctx;
    const char *p = src;
    w->crc ^= crc32c_place(src, len, off, w->total);
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

/* This rank's ranges of params (model file) and of both moments (optimizer file), synced; crc:
 * the XOR of their placed CRCs per file. */
static int write_ranges(model *m, const char *tmp, size_t hl_m, size_t hl_o, char *stage,
                        uint32_t crc[CKPT_NDATA], char *err, size_t errlen) {
    char path[2][CKPT_PATH_MAX];
    ckpt_fmt(path[0], sizeof path[0], "%s/model.safetensors", tmp);
    ckpt_fmt(path[1], sizeof path[1], "%s/optimizer.safetensors", tmp);
    uint64_t np4 = (uint64_t)model_nparams(m) * sizeof(float);
    const store_slab_kind slab[3] = {STORE_PARAMS, STORE_M, STORE_V};
    const int file_of[3] = {0, 1, 1};
    const uint64_t off[3] = {hl_m, hl_o, hl_o + np4};
    range_writer w[2] = {{-1, -1, stage, 0, hl_m + np4, 0}, {-1, -1, stage, 0, hl_o + 2 * np4, 0}};
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        w[k].fd = open(path[k], O_WRONLY | O_CLOEXEC);
        w[k].dfd = open(path[k], O_WRONLY | O_CLOEXEC | O_DIRECT);
        if (w[k].fd < 0) rc = up_errf(err, errlen, path[k], "cannot open (%s)", strerror(errno));
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
        crc[k] = w[k].crc;
    }
    return rc;
}

/* Both safetensors headers of m's checkpoint files (every rank computes the same): hdr[k] (free
 * it) of hl[k] bytes, the data offset of file k; total[k]: the file's size. */
static void ckpt_headers(const model *m, char *hdr[CKPT_NDATA], size_t hl[CKPT_NDATA],
                         uint64_t total[CKPT_NDATA]) {
    char detail[512] = "";
    int nt = model_ntensors(m);
    size_t np4 = model_nparams(m) * sizeof(float);
    st_entry *em = model_st_entries(m, 1, MODEL_PREFIX), *eo = model_st_entries(m, 2, OPT_PREFIX);
    hdr[0] = st_header(em, nt, ST_F32, CKPT_ALIGN, &hl[0], detail, sizeof detail);
    hdr[1] =
        hdr[0] ? st_header(eo, 2 * nt, ST_F32, CKPT_ALIGN, &hl[1], detail, sizeof detail) : NULL;
    free(em);
    free(eo);
    UP_CHECK(hdr[0] && hdr[1], "checkpoint header: %s", detail);
    total[0] = hl[0] + np4;
    total[1] = hl[1] + 2 * np4;
}

double ckpt_write(model *m, comm_ctx *comm, const char *dir, const ckpt_state *st,
                  const model_config *cfg, int keep, void *stage) {
    int rank0 = comm->rank == 0, writer = rank0 || model_sharded(m);
    char tmp[CKPT_PATH_MAX], fin[CKPT_PATH_MAX], old[CKPT_PATH_MAX], p[CKPT_PATH_MAX];
    char err[1024] = "", detail[768] = "";
    ckpt_fmt(tmp, sizeof tmp, "%s/.step-%08ld.tmp", dir, st->step);
    ckpt_fmt(fin, sizeof fin, "%s/step-%08ld", dir, st->step);
    ckpt_fmt(old, sizeof old, "%s/.step-%08ld.old", dir, st->step);
    /* every rank lays out both headers: the data offsets of its ranges */
    char *hdr[CKPT_NDATA];
    size_t hl[CKPT_NDATA];
    uint64_t total[CKPT_NDATA];
    ckpt_headers(m, hdr, hl, total);
    double bytes = (double)(total[0] + total[1]);

    /* 1. rank 0: the temporary folder, config.json, both data files allocated */
    int rc = 0;
    if (rank0) {
        remove_hidden(dir);  /* what a killed run left: partial or half-deleted checkpoints */
        up_tmp_push(tmp, 1); /* a signal that ends the process removes the partial folder */
        for (int k = 0; k < 4; k++) {
            ckpt_fmt(p, sizeof p, "%s/%s", tmp, CKPT_FILES[k]);
            up_tmp_push(p, 0);
        }
        if (mkdir(tmp, 0755) != 0) {
            rc = up_errf(detail, sizeof detail, tmp, "cannot create (%s)", strerror(errno));
        } else {
            ckpt_fmt(p, sizeof p, "%s/config.json", tmp);
            rc = config_save(cfg, p, detail, sizeof detail);
            for (int k = 0; k < CKPT_NDATA && rc == 0; k++) {
                ckpt_fmt(p, sizeof p, "%s/%s", tmp, CKPT_DATA_FILES[k]);
                rc = create_file(p, hdr[k], hl[k], total[k], detail, sizeof detail);
            }
        }
    }
    ckpt_fmt(err, sizeof err,
             "checkpoint %s not written: %s; the complete checkpoints in %s "
             "are intact",
             fin, detail, dir);
    agree(comm, rc != 0, err, tmp);

    /* 2. every writer: its ranges, synced, and their CRCs, combined into the files' (the ranges
     * of all ranks cover the data areas once; rank 0 adds the headers) */
    char *st_buf = (char *)(((uintptr_t)stage + CKPT_ALIGN - 1) / CKPT_ALIGN * CKPT_ALIGN);
    uint32_t crc[CKPT_NDATA] = {0, 0};
    rc = writer ? write_ranges(m, tmp, hl[0], hl[1], st_buf, crc, detail, sizeof detail) : 0;
    ckpt_fmt(err, sizeof err,
             "checkpoint %s not written: %s; the complete checkpoints in %s "
             "are intact",
             fin, detail, dir);
    agree(comm, rc != 0, err, tmp);
    comm_xor_u32(comm, crc, CKPT_NDATA);

    /* 3. rank 0: state.json with the checksums, one rename makes it visible, the old ones go */
    if (rank0) {
        ckpt_file_sum sums[CKPT_NDATA];
        for (int k = 0; k < CKPT_NDATA; k++) {
            sums[k].bytes = total[k];
            sums[k].crc32c =
                crc32c_finish(crc[k] ^ crc32c_place(hdr[k], hl[k], 0, total[k]), total[k]);
        }
        char *text = ckpt_state_json(st, sums, comm->R, comm->P, (int)(st->global_batch / comm->D),
                                     model_sharded(m));
        ckpt_fmt(p, sizeof p, "%s/state.json", tmp);
        rc = up_write_line_atomic(p, text, detail, sizeof detail);
        free(text);
        if (rc == 0 && fsync_dir(tmp) != 0) {
            rc = up_errf(detail, sizeof detail, tmp, "fsync failed (%s)", strerror(errno));
        } else if (rc == 0) {
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
    for (int k = 0; k < CKPT_NDATA; k++)
        free(hdr[k]);
    ckpt_fmt(err, sizeof err, "checkpoint %s not written: %s", fin, detail);
    agree(comm, rc != 0, err, tmp);
    if (rank0) {
        for (int k = 0; k < 4; k++) {
            ckpt_fmt(p, sizeof p, "%s/%s", tmp, CKPT_FILES[k]);
            up_tmp_pop(p);
        }
        up_tmp_pop(tmp);
    }
    return bytes;
}

/* ---- reading -------------------------------------------------------------------------------- */

/* state.json of the step folder path, read and validated into rec (run: compared too, or NULL).
 * The verdict of ckpt_state_parse, msg saying what is wrong; -1 with msg when unreadable. */
static int read_state(const char *path, const ckpt_state *run, ckpt_record *rec, char *msg,
                      size_t len) {
    char p[CKPT_PATH_MAX];
    ckpt_fmt(p, sizeof p, "%s/state.json", path);
    FILE *f = fopen(p, "rb");
    if (!f) {
        ckpt_fmt(msg, len, "cannot open %s (%s)", p, strerror(errno));
        return -1;
    }
    char *text = malloc(1 << 20);
    UP_CHECK(text, "out of memory");
    size_t n = fread(text, 1, 1 << 20, f);
    fclose(f);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!*base && strlen(path) > 1) base = path; /* a trailing slash: no name to check */
    int verdict = ckpt_state_parse(text, n, run, parse_step(base), rec, msg, len);
    free(text);
    return verdict;
}

/* The advice after a verdict on state.json. */
static const char *state_advice(int verdict) {
    return verdict == CKPT_STATE_VERSION
               ? "an earlier upipe wrote it (checkpoints before format version 2 have no "
                 "checksums and do not load); start a new --ckpt-dir, or finish the run with "
                 "the upipe that wrote it"
               : "the file is damaged or was edited; resume from an older checkpoint (move this "
                 "step folder aside)";
}

/* Every data file has the size state.json records (a truncated or extended file shows here). */
static int check_sizes(const char *path, const ckpt_record *rec, char *msg, size_t len) {
    char p[CKPT_PATH_MAX];
    for (int k = 0; k < CKPT_NDATA; k++) {
        ckpt_fmt(p, sizeof p, "%s/%s", path, CKPT_DATA_FILES[k]);
        struct stat sb;
        if (stat(p, &sb) != 0) {
            ckpt_fmt(msg, len, "%s: cannot read (%s)", p, strerror(errno));
            return -1;
        }
        if ((uint64_t)sb.st_size != rec->files[k].bytes) {
            ckpt_fmt(msg, len, "%s is %lld bytes, state.json records %llu", p,
                     (long long)sb.st_size, (unsigned long long)rec->files[k].bytes);
            return -1;
        }
    }
    return 0;
}

long ckpt_check(const char *path, const ckpt_state *run, const model_config *cfg, int data_changed,
                int verbose, ckpt_record *rec) {
    char p[CKPT_PATH_MAX], err[512], msg[2 * CKPT_PATH_LEN + 512];
    int verdict = read_state(path, run, rec, msg, sizeof msg);
    if (verdict == CKPT_STATE_DIFFERS)
        up_die_all("--resume: %s cannot continue this run: %s; use the same value, or a new "
                   "--ckpt-dir",
                   path, msg);
    if (verdict != CKPT_STATE_OK)
        up_die_all("--resume: %s/state.json: %s: %s", path, msg, state_advice(verdict));
    if (check_sizes(path, rec, msg, sizeof msg) != 0)
        up_die_all("--resume: %s: the checkpoint is damaged; resume from an older one (move %s "
                   "aside)",
                   msg, path);
    model_config was;
    ckpt_fmt(p, sizeof p, "%s/config.json", path);
    if (config_load(&was, p, err, sizeof err) != 0) up_die_all("--resume: %s", err);
    if (ckpt_config_diff(&was, cfg, msg, sizeof msg))
        up_die_all("--resume: %s cannot continue this run: %s; use the config it was trained "
                   "with",
                   path, msg);
    if (rec->step > run->steps)
        up_die_all("--resume: %s is at step %ld, past --steps %ld", path, rec->step, run->steps);
    int d = ckpt_data_diff(&rec->data, &run->data, msg, sizeof msg);
    if (d == CKPT_DATA_DIFFERS && !data_changed)
        up_die_all("--resume: %s cannot continue this run: %s; use the data it was trained on, "
                   "or pass --data-changed to continue on this data",
                   path, msg);
    if (d != CKPT_DATA_SAME && verbose) {
        fprintf(stderr, "upipe: note: %s%s; continuing from step %ld\n",
                d == CKPT_DATA_DIFFERS ? "--data-changed: " : "", msg, rec->step);
        fflush(stderr);
    }
    return rec->step;
}

/* Adds the placed CRC of each range handed to it (model_write_owned over a slab just read). */
typedef struct {
    uint64_t total;
    uint32_t crc;
} range_crc;

static int crc_range(void *ctx, const void *src, size_t len, uint64_t off) {
    range_crc *c = ctx;
    c->crc ^= crc32c_place(src, len, off, c->total);
    return 0;
}

/* The CRC-32C of each data file from the slabs just read: the placed CRCs of this rank's ranges,
 * XOR-reduced over the ranks when each holds a shard (without FSDP every rank read all of it),
 * plus the header as the file has it. 0, or -1 with a message. Collective. */
static int verify_loaded(model *m, comm_ctx *comm, const char *path, const ckpt_record *rec,
                         char *msg, size_t len) {
    char *hdr[CKPT_NDATA], p[CKPT_PATH_MAX];
    size_t hl[CKPT_NDATA];
    uint64_t total[CKPT_NDATA];
    ckpt_headers(m, hdr, hl, total);
    size_t np4 = model_nparams(m) * sizeof(float);
    range_crc c[CKPT_NDATA] = {{total[0], 0}, {total[1], 0}};
    model_write_owned(m, STORE_PARAMS, hl[0], crc_range, &c[0]);
    model_write_owned(m, STORE_M, hl[1], crc_range, &c[1]);
    model_write_owned(m, STORE_V, hl[1] + np4, crc_range, &c[1]);
    int sharded = model_sharded(m), rc = 0;
    for (int k = 0; k < CKPT_NDATA; k++) {
        if (sharded && comm->rank != 0) continue;
        ckpt_fmt(p, sizeof p, "%s/%s", path, CKPT_DATA_FILES[k]);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        ssize_t r = fd >= 0 ? pread(fd, hdr[k], hl[k], 0) : -1;
        if (fd >= 0) close(fd);
        if (r != (ssize_t)hl[k] && rc == 0)
            rc = up_errf(msg, len, p, "cannot read the header (%s)", strerror(errno));
        c[k].crc ^= crc32c_place(hdr[k], hl[k], 0, total[k]);
    }
    uint32_t crc[CKPT_NDATA] = {c[0].crc, c[1].crc};
    if (sharded) comm_xor_u32(comm, crc, CKPT_NDATA);
    for (int k = 0; k < CKPT_NDATA && rc == 0; k++) {
        uint32_t got = crc32c_finish(crc[k], total[k]);
        if (got != rec->files[k].crc32c && (!sharded || comm->rank == 0))
            rc = up_errf(
                msg, len, NULL,
                "--resume: %s/%s does not match its checksum (crc32c %08x in state.json, %08x "
                "read): the file is damaged; resume from an older checkpoint (move %s "
                "aside)",
                path, CKPT_DATA_FILES[k], rec->files[k].crc32c, got, path);
    }
    for (int k = 0; k < CKPT_NDATA; k++)
        free(hdr[k]);
    return rc;
}

double ckpt_load(model *m, comm_ctx *comm, const char *path, const ckpt_record *rec) {
    char p[CKPT_PATH_MAX], err[1024];
    st_set set;
    ckpt_fmt(p, sizeof p, "%s/model.safetensors", path);
    if (st_set_open(&set, p, err, sizeof err) != 0) up_die("--resume: %s", err);
    int rc = model_read_owned(m, STORE_PARAMS, &set, "", err, sizeof err);
    st_set_close(&set);
    if (rc != 0) up_die("--resume: %s", err);
    ckpt_fmt(p, sizeof p, "%s/optimizer.safetensors", path);
    if (st_set_open(&set, p, err, sizeof err) != 0) up_die("--resume: %s", err);
    rc = model_read_owned(m, STORE_M, &set, OPT_PREFIX[0], err, sizeof err);
    if (rc == 0) rc = model_read_owned(m, STORE_V, &set, OPT_PREFIX[1], err, sizeof err);
    st_set_close(&set);
    if (rc != 0) up_die("--resume: %s", err);
    rc = verify_loaded(m, comm, path, rec, err, sizeof err);
    int first = comm_min_int(comm, rc != 0 ? comm->rank : INT_MAX); /* one rank says it */
    if (first != INT_MAX) up_die_agreed(comm->rank == first ? err : NULL);
    return (double)model_owned_floats(m) * 3 * sizeof(float);
}

int ckpt_read_record(const char *path, ckpt_record *rec, char *err, size_t errlen) {
    char msg[2 * CKPT_PATH_LEN + 512];
    int verdict = read_state(path, NULL, rec, msg, sizeof msg);
    if (verdict != CKPT_STATE_OK)
        return up_errf(err, errlen, NULL, "%s/state.json: %s: %s", path, msg,
                       state_advice(verdict));
    if (check_sizes(path, rec, msg, sizeof msg) != 0)
        return up_errf(err, errlen, NULL,
                       "%s: the checkpoint is damaged; use an older one "
                       "(DIR/step-N)",
                       msg);
    return 0;
}

int ckpt_verify_file(const char *path, int k, const ckpt_record *rec, char *err, size_t errlen) {
    char p[CKPT_PATH_MAX];
    ckpt_fmt(p, sizeof p, "%s/%s", path, CKPT_DATA_FILES[k]);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return up_errf(err, errlen, p, "cannot open (%s)", strerror(errno));
    enum { CHUNK = 4 << 20 };
    char *buf = malloc(CHUNK);
    UP_CHECK(buf, "out of memory");
    uint32_t raw = 0;
    uint64_t n = 0;
    ssize_t r;
    while ((r = read(fd, buf, CHUNK)) > 0) {
        raw = crc32c_raw(raw, buf, (size_t)r);
        n += (uint64_t)r;
    }
    int e = errno;
    close(fd);
    free(buf);
    if (r < 0) return up_errf(err, errlen, p, "read failed (%s)", strerror(e));
    uint32_t got = crc32c_finish(raw, n);
    if (n != rec->files[k].bytes || got != rec->files[k].crc32c)
        return up_errf(err, errlen, p,
                       "does not match its checksum (%llu bytes, crc32c %08x in state.json; "
                       "%llu bytes, %08x read): the file is damaged; use an older checkpoint "
                       "(DIR/step-N)",
                       (unsigned long long)rec->files[k].bytes, rec->files[k].crc32c,
                       (unsigned long long)n, got);
    return 0;
}
