/* export_cmd.c — `upipe export`: a checkpoint's weights as an HF model folder (config.json and
 * model.safetensors, or shards with model.safetensors.index.json), F32 or BF16, streamed tensor
 * by tensor (the model is never whole in memory). The folder is written as OUT.tmp.<pid> beside
 * OUT and swapped in whole, so OUT is at every instant the whole old export or the whole new
 * one; it may not lie in a checkpoint. No MPI. */
#include "cmd/export_cmd.h"

#include "core/check.h"
#include "core/dtype.h"
#include "core/fileio.h"
#include "core/flags.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "train/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The data of one shard: its tensors read from the checkpoint in chunks. */
typedef struct {
    const st_file *src;
    const st_tensor *const *tensors;
    int n, next;
    size_t done; /* elements of tensors[next] already delivered */
    float *buf;
    size_t cap;
    char err[512];
    int failed;
} shard_source;

static int next_chunk(void *ctx, const float **chunk, size_t *count) {
    shard_source *s = ctx;
    while (s->next < s->n && s->done == st_numel(s->tensors[s->next])) {
        s->next++;
        s->done = 0;
    }
    if (s->next >= s->n) return -1;
    const st_tensor *t = s->tensors[s->next];
    size_t m = st_numel(t) - s->done;
    if (m > s->cap) m = s->cap;
    if (st_read_f32(s->src, t, s->done, m, s->buf, s->err, sizeof s->err) != 0) {
        s->failed = 1;
        return -1;
    }
    s->done += m;
    *chunk = s->buf;
    *count = m;
    return 0;
}

/* config.json of the checkpoint, with torch_dtype of the export. 0, or -1 with err. */
static int write_config(const char *step, const char *out, int bf16, char *err, size_t errlen) {
    char src[4096], dst[4096];
    model_config cfg;
    up_path_join(src, sizeof src, step, "config.json");
    up_path_join(dst, sizeof dst, out, "config.json");
    if (config_load(&cfg, src, err, errlen) != 0) return -1;
    if (config_save(&cfg, dst, err, errlen) != 0) return -1;
    if (!bf16) return 0;
    json_error_t jerr;
    json_t *root = json_load_file(dst, 0, &jerr);
    UP_CHECK(root, "re-reading %s: %s", dst, jerr.text);
    json_object_set_new(root, "torch_dtype", json_string("bfloat16"));
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    UP_CHECK(text, "json_dumps failed");
    int rc = up_write_line_atomic(dst, text, err, errlen);
    free(text);
    return rc;
}

/* The tokenizer files a model folder may hold, copied by --tokenizer. */
static const char *const tokenizer_files[] = {
    "tokenizer.json",      "tokenizer_config.json", "special_tokens_map.json",
    "chat_template.jinja", "tokenizer.model",       "generation_config.json",
};

/* Checks --tokenizer before anything is written: tokenizer.json loads and its ids fit the
 * model's vocab_size. */
static void check_tokenizer(const char *dir, const char *step) {
    char p[4096], err[1024];
    model_config cfg;
    up_path_join(p, sizeof p, step, "config.json");
    if (config_load(&cfg, p, err, sizeof err) != 0) up_die("%s", err);
    up_path_join(p, sizeof p, dir, "tokenizer.json");
    tokenizer *t = tok_load(p, err, sizeof err);
    if (t == NULL) up_die("--tokenizer %s: %s", dir, err);
    uint32_t n = tok_vocab_size(t);
    tok_free(t);
    if ((long long)n > (long long)cfg.V)
        up_die("--tokenizer %s: its ids reach %u, past the model's vocab_size %d: name the folder "
               "of the model this checkpoint was trained from",
               dir, n - 1, cfg.V);
}

/* Copies the tokenizer files of dir into out (each written whole, then renamed). */
static void copy_tokenizer(const char *dir, const char *out) {
    char src[4096], dst[4096], err[1024];
    for (size_t i = 0; i < sizeof tokenizer_files / sizeof *tokenizer_files; i++) {
        up_path_join(src, sizeof src, dir, tokenizer_files[i]);
        FILE *f = fopen(src, "rb");
        if (f == NULL) continue;
        size_t cap = 1 << 20, n = 0, got;
        char *buf = malloc(cap);
        while (buf != NULL && (got = fread(buf + n, 1, cap - n, f)) > 0) {
            n += got;
            if (n == cap) {
                char *b = realloc(buf, cap *= 2);
                if (b == NULL) free(buf);
                buf = b;
            }
        }
        int bad = buf == NULL || ferror(f);
        fclose(f);
        up_path_join(dst, sizeof dst, out, tokenizer_files[i]);
        if (bad || up_write_file_atomic(dst, buf, n, err, sizeof err) != 0) {
            free(buf);
            up_tmp_remove_all();
            up_die("--tokenizer: copying %s failed: %s", src, bad ? strerror(errno) : err);
        }
        free(buf);
    }
}

/* A failure once the temporary folder exists: it goes (with a file in progress), then the stop. */
#define EXPORT_DIE(...) (up_tmp_remove_all(), up_die(__VA_ARGS__))

typedef struct {
    const char *ckpt, *out, *tokenizer;
    mem_dtype dtype;
    int bf16, force;
    unsigned long long max_shard;
} export_args;

#define AT(field) offsetof(export_args, field)

static const flag_spec g_export_flags[] = {
    {.name = "ckpt",
     .arg = "PATH",
     .kind = FLAG_STRING,
     .off = AT(ckpt),
     .help = "a checkpoint folder (DIR/step-NNNNNNNN), or a --ckpt-dir:\n"
             "its newest complete checkpoint"},
    {.name = "output",
     .arg = "OUT",
     .kind = FLAG_STRING,
     .off = AT(out),
     .help = "the folder to write (created if missing): config.json, and\n"
             "model.safetensors or model-0000k-of-0000N.safetensors with\n"
             "model.safetensors.index.json. Written beside it as\n"
             "OUT.tmp.<pid>, then swapped in whole (what a killed export\n"
             "left there is removed by the next). Never inside a\n"
             "checkpoint folder or a --ckpt-dir"},
    {.name = "dtype",
     .arg = "f32|bf16",
     .kind = FLAG_DTYPE,
     .off = AT(dtype),
     .def = MEM_DTYPE_F32,
     .help = "tensor type of the files (default f32; bf16 rounds to\n"
             "nearest even)"},
    {.name = "max-shard-size",
     .arg = "SIZE",
     .kind = FLAG_SIZE,
     .off = AT(max_shard),
     .def = 5e9,
     .help = "largest file before the weights are split into shards\n"
             "(default 5GB; suffixes KiB MiB GiB, KB MB GB)"},
    {.name = "tokenizer",
     .arg = "DIR",
     .kind = FLAG_STRING,
     .off = AT(tokenizer),
     .help = "also copy the model folder's tokenizer files\n"
             "(tokenizer.json, tokenizer_config.json,\n"
             "special_tokens_map.json, chat_template.jinja,\n"
             "tokenizer.model, generation_config.json: those present)\n"
             "so that transformers loads the tokenizer too; e.g. the\n"
             "folder of train --init. Its tokenizer.json must load and\n"
             "fit the model's vocab_size"},
    {.name = "force",
     .kind = FLAG_SET,
     .off = AT(force),
     .help = "replace an OUT that is not empty (a folder of files: an\n"
             "earlier export); its files go once the new one is in place"},
};

static const flag_help_line g_export_page[] = {
    {NULL, "usage: upipe export --ckpt DIR|DIR/step-N --output OUT [--dtype f32|bf16]\n"
           "                    [--max-shard-size SIZE] [--tokenizer DIR] [--force]\n\n"
           "Writes a checkpoint's weights as an HF model folder that transformers loads and\n"
           "`upipe train --init OUT` reads back.\n"},
    {"ckpt", NULL},
    {"output", NULL},
    {"dtype", NULL},
    {"max-shard-size", NULL},
    {"tokenizer", NULL},
    {"force", NULL},
    {"help", NULL},
};

/* Fills a from argv (argv[0] == "export"); --help prints the page and ends the process. */
static void parse_args(export_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    flag_table table = {g_export_flags, FLAGS_COUNT(g_export_flags), a};
    flags_defaults(&table, 1);
    if (flags_parse("export", &table, 1, argc, argv) == 1) {
        flags_print_help(&table, 1, g_export_page, FLAGS_COUNT(g_export_page));
        exit(0);
    }
    a->bf16 = a->dtype == MEM_DTYPE_BF16;
    if (!a->ckpt || !a->out) up_die("--ckpt and --output are required: see upipe export --help");
}

/* What the folder dir is when it is a checkpoint (a state.json) or holds checkpoints (a
 * --ckpt-dir), else NULL. */
static const char *checkpoint_kind(const char *dir) {
    char p[PATH_MAX + 16], latest[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/state.json", dir);
    if (access(p, F_OK) == 0) return "the checkpoint folder";
    if (ckpt_find_latest(dir, latest, sizeof latest) >= 0) return "the --ckpt-dir";
    return NULL;
}

/* OUT (resolved: symbolic links and "..", through its existing parent when it does not exist
 * yet) must not be or lie inside a checkpoint or a --ckpt-dir: an export there would replace
 * the F32 master weights a --resume loads. It must be a folder, and empty unless --force: then a
 * folder of files only (an earlier export, whose files are removed). Stops with a message. */
static void check_output(const export_args *a, char *real, size_t len) {
    if (up_path_resolve(a->out, real, len) != 0)
        up_die("--output %s: cannot resolve the path (%s): check it", a->out, strerror(errno));
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", real);
    for (;;) { /* OUT and each folder above it */
        const char *kind = checkpoint_kind(dir);
        if (kind)
            up_die("--output %s %s %s %s: an export there would replace or mix with the "
                   "checkpoint's files; write it outside the checkpoints (e.g. beside the "
                   "--ckpt-dir)",
                   a->out, strcmp(dir, real) ? "lies inside" : "is", kind, dir);
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir) break;
        *slash = '\0';
    }
    struct stat st;
    if (stat(real, &st) != 0) return; /* a new folder */
    if (!S_ISDIR(st.st_mode))
        up_die("--output %s exists and is not a folder: name a folder", a->out);
    DIR *d = opendir(real);
    if (!d) up_die("--output %s: cannot read the folder (%s)", a->out, strerror(errno));
    struct dirent *e;
    int files = 0;
    char p[PATH_MAX + 256];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", real, e->d_name);
        if (a->force && (lstat(p, &st) != 0 || !S_ISREG(st.st_mode))) {
            char name[256]; /* e lives in d's buffer, which closedir frees */
            snprintf(name, sizeof name, "%s", e->d_name);
            closedir(d);
            up_die("--output %s holds %s, which is not a file: --force replaces a folder of files "
                   "(an earlier export) only; remove it yourself or name another --output",
                   a->out, name);
        }
        files++;
    }
    closedir(d);
    if (files > 0 && !a->force)
        up_die("--output %s is not empty (%d entr%s): add --force to replace it (its files are "
               "removed once the new export is complete), or name another folder",
               a->out, files, files == 1 ? "y" : "ies");
}
/* The tensors of src in data order (order, src->n entries) cut into shards of at most max_shard
 * bytes of esize-byte elements (a larger tensor alone): shard_of[i] is order[i]'s. Returns the
 * number of shards; *total: the bytes of all tensors. */
static int plan_shards(const st_file *src, size_t esize, unsigned long long max_shard,
                       const st_tensor **order, int *shard_of, size_t *total) {
    for (int i = 0; i < src->n; i++)
        order[i] = &src->tensors[i];
    for (int i = 1; i < src->n; i++) /* insertion sort by offset: the header's order is any */
        for (int j = i; j > 0 && order[j]->begin < order[j - 1]->begin; j--) {
            const st_tensor *t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    size_t cur = 0;
    int nshards = src->n ? 1 : 0;
    *total = 0;
    for (int i = 0; i < src->n; i++) {
        size_t b = st_numel(order[i]) * esize;
        if (cur > 0 && cur + b > max_shard) {
            nshards++;
            cur = 0;
        }
        cur += b;
        *total += b;
        shard_of[i] = nshards - 1;
    }
    return nshards;
}

/* model.safetensors.index.json in dir, the index transformers reads: the total bytes and where
 * each tensor is (map, taken). A failure stops. */
static void write_index(const char *dir, json_t *map, size_t total) {
    char p[4096], err[512];
    json_t *root = json_object(), *meta = json_object();
    json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    json_object_set_new(root, "metadata", meta);
    json_object_set_new(root, "weight_map", map);
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    UP_CHECK(text, "json_dumps failed");
    up_path_join(p, sizeof p, dir, "model.safetensors.index.json");
    int rc = up_write_line_atomic(p, text, err, sizeof err);
    free(text);
    if (rc != 0) EXPORT_DIE("%s", err);
}

/* Writes the export into the folder dir (new, empty): config.json, the shards and the index.
 * Every file is fsync'd as it is renamed into place (the atomic writers). Returns the bytes of
 * the weights and the number of shards in *nshards_out; a failure stops (the caller's folder is
 * registered, EXPORT_DIE removes it). */
static size_t write_export(const export_args *a, const char *step, st_file *src, const char *dir,
                           int *nshards_out) {
    char p[4096], err[512];
    if (write_config(step, dir, a->bf16, err, sizeof err) != 0) EXPORT_DIE("%s", err);
    const st_tensor **order = malloc(sizeof *order * (size_t)(src->n ? src->n : 1));
    int *shard_of = malloc(sizeof *shard_of * (size_t)(src->n ? src->n : 1));
    UP_CHECK(order && shard_of, "out of memory");
    size_t total;
    int nshards = plan_shards(src, a->bf16 ? 2 : 4, a->max_shard, order, shard_of, &total);

    shard_source s = {.src = src, .cap = (size_t)1 << 20};
    s.buf = malloc(s.cap * sizeof(float));
    st_entry *e = calloc((size_t)(src->n ? src->n : 1), sizeof *e);
    UP_CHECK(s.buf && e, "out of memory");
    json_t *map = json_object();
    char fname[64];
    for (int k = 0, i = 0; k < nshards; k++) {
        int first = i, n = 0;
        while (i < src->n && shard_of[i] == k) {
            e[n].name = order[i]->name;
            e[n].ndim = order[i]->ndim;
            for (int d = 0; d < order[i]->ndim && d < 4; d++)
                e[n].shape[d] = order[i]->shape[d];
            n++, i++;
        }
        if (nshards == 1)
            snprintf(fname, sizeof fname, "model.safetensors");
        else
            snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", k + 1, nshards);
        up_path_join(p, sizeof p, dir, fname);
        s.tensors = order + first;
        s.n = n;
        s.next = 0;
        s.done = 0;
        int rc =
            st_write_stream(p, e, n, a->bf16 ? ST_BF16 : ST_F32, next_chunk, &s, err, sizeof err);
        if (s.failed) EXPORT_DIE("%s", s.err);
        if (rc != 0) EXPORT_DIE("%s", err);
        for (int t = first; t < i; t++)
            json_object_set_new(map, order[t]->name, json_string(fname));
    }
    if (nshards > 1)
        write_index(dir, map, total);
    else
        json_decref(map);
    free(e);
    free(s.buf);
    free(order);
    free(shard_of);
    *nshards_out = nshards;
    return total;
}

/* The complete folder tmp takes OUT's place. An OUT that exists is exchanged with it in one
 * rename (renameat2 RENAME_EXCHANGE), so OUT is never missing; where the file system cannot,
 * OUT is renamed aside to .OUT.old.<pid> first. The old export, now at a temporary name, goes
 * after the parent is fsync'd. A failure stops with OUT as it was. */
static void replace_output(const char *tmp, const char *real) {
    char parent[PATH_MAX], old[PATH_MAX + 64];
    snprintf(parent, sizeof parent, "%s", real);
    char *slash = strrchr(parent, '/');
    if (slash == parent)
        parent[1] = '\0';
    else
        *slash = '\0';
    snprintf(old, sizeof old, "%s/.%s.old.%d", parent, real + (slash - parent) + 1, (int)getpid());
    struct stat st;
    const char *gone = NULL; /* where the old export lies after the swap */
    if (stat(real, &st) != 0) {
        if (rename(tmp, real) != 0)
            EXPORT_DIE("--output %s: cannot rename %s into place (%s)", real, tmp, strerror(errno));
    } else if (renameat2(AT_FDCWD, tmp, AT_FDCWD, real, RENAME_EXCHANGE) == 0) {
        gone = tmp;
    } else {
        up_tmp_push(old, UP_TMP_FLAT_DIR);
        if (rename(real, old) != 0)
            EXPORT_DIE("--output %s: cannot move the old export aside (%s)", real, strerror(errno));
        if (rename(tmp, real) != 0) {
            int e = errno, back = rename(old, real) == 0; /* the old export back in place */
            up_tmp_pop(old); /* kept in any case: it may be the only copy */
            EXPORT_DIE("--output %s: cannot rename %s into place (%s)%s%s", real, tmp, strerror(e),
                       back ? "" : "; the old export is in ", back ? "" : old);
        }
        gone = old;
    }
    if (up_fsync_dir(parent) != 0)
        EXPORT_DIE("--output %s: fsync of %s failed (%s)", real, parent, strerror(errno));
    if (gone && up_remove_flat_dir(gone) != 0)
        fprintf(stderr, "upipe: warning: could not remove the old export %s (%s)\n", gone,
                strerror(errno));
    up_tmp_pop(old);
    up_tmp_pop(tmp);
}

int export_main(int argc, char **argv) {
    export_args a;
    parse_args(&a, argc, argv);
    char step[4096], p[4096], err[2600], real[PATH_MAX], tmp[PATH_MAX + 32];
    if (ckpt_resolve(a.ckpt, step, sizeof step, err, sizeof err) != 0) up_die("%s", err);
    check_output(&a, real, sizeof real);
    ckpt_record rec; /* the weights are exported only as they were written */
    if (ckpt_read_record(step, &rec, err, sizeof err) != 0 ||
        ckpt_verify_file(step, CKPT_MODEL, &rec, err, sizeof err) != 0)
        up_die("--ckpt %s", err);
    if (a.tokenizer != NULL) check_tokenizer(a.tokenizer, step);
    up_path_join(p, sizeof p, step, "model.safetensors");
    st_file src;
    if (st_open(&src, p, err, sizeof err) != 0) up_die("%s", err);
    up_sweep_stale(real); /* OUT.tmp.<pid>, .OUT.old.<pid> of killed exports */
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", real, (int)getpid());
    up_tmp_push(tmp, UP_TMP_FLAT_DIR); /* a signal from here on removes it and what it holds */
    if (mkdir(tmp, 0755) != 0)
        EXPORT_DIE("--output %s: cannot create the folder %s (%s): check the parent folder "
                   "exists and is writable",
                   a.out, tmp, strerror(errno));
    int nshards = 0;
    size_t total = write_export(&a, step, &src, tmp, &nshards);
    if (a.tokenizer != NULL) copy_tokenizer(a.tokenizer, tmp);
    if (up_fsync_dir(tmp) != 0)
        EXPORT_DIE("--output %s: fsync of %s failed (%s)", a.out, tmp, strerror(errno));
    replace_output(tmp, real);
    printf("exported %s: %d tensors, %.1f MiB %s, in %d file%s, to %s%s\n", step, src.n,
           (double)total / 1048576.0, a.bf16 ? "BF16" : "F32", nshards, nshards == 1 ? "" : "s",
           a.out, a.tokenizer != NULL ? ", with the tokenizer" : "");
    st_close(&src);
    return 0;
}
