/* export_cmd.c — `upipe export`: a checkpoint's weights as an HF model folder (config.json and
 * model.safetensors, or shards with model.safetensors.index.json), F32 or BF16, streamed tensor
 * by tensor (the model is never whole in memory). No MPI. */
#include "cmd/export_cmd.h"

#include "core/check.h"
#include "core/fileio.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "train/ckpt.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void print_help(void) {
    printf("usage: upipe export --ckpt DIR|DIR/step-N --output OUT [--dtype f32|bf16]\n"
           "                    [--max-shard-size SIZE]\n\n"
           "Writes a checkpoint's weights as an HF model folder that transformers loads and\n"
           "`upipe train --init OUT` reads back.\n\n"
           "  --ckpt PATH            a checkpoint folder (DIR/step-NNNNNNNN), or a --ckpt-dir:\n"
           "                         its newest complete checkpoint\n"
           "  --output OUT           the folder to write (created if missing): config.json, and\n"
           "                         model.safetensors or model-0000k-of-0000N.safetensors with\n"
           "                         model.safetensors.index.json\n"
           "  --dtype f32|bf16       tensor type of the files (default f32; bf16 rounds to\n"
           "                         nearest even)\n"
           "  --max-shard-size SIZE  largest file before the weights are split into shards\n"
           "                         (default 5GB; suffixes KiB MiB GiB, KB MB GB)\n"
           "  --help                 this text\n");
}

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

/* config.json of the checkpoint, with torch_dtype of the export. */
static void write_config(const char *step, const char *out, int bf16) {
    char src[4096], dst[4096], err[512];
    model_config cfg;
    up_path_join(src, sizeof src, step, "config.json");
    up_path_join(dst, sizeof dst, out, "config.json");
    if (config_load(&cfg, src, err, sizeof err) != 0) up_die("%s", err);
    if (config_save(&cfg, dst, err, sizeof err) != 0) up_die("%s", err);
    if (!bf16) return;
    json_error_t jerr;
    json_t *root = json_load_file(dst, 0, &jerr);
    UP_CHECK(root, "re-reading %s: %s", dst, jerr.text);
    json_object_set_new(root, "torch_dtype", json_string("bfloat16"));
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    UP_CHECK(text, "json_dumps failed");
    int rc = up_write_line_atomic(dst, text, err, sizeof err);
    free(text);
    if (rc != 0) up_die("%s", err);
}

int export_main(int argc, char **argv) {
    const char *ckpt = NULL, *out = NULL;
    int bf16 = 0;
    unsigned long long max_shard = 5000000000ull;
    static const struct option longopts[] = {{"ckpt", required_argument, 0, 'c'},
                                             {"output", required_argument, 0, 'o'},
                                             {"dtype", required_argument, 0, 'd'},
                                             {"max-shard-size", required_argument, 0, 'm'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': ckpt = optarg; break;
        case 'o': out = optarg; break;
        case 'd':
            if (strcmp(optarg, "f32") && strcmp(optarg, "bf16"))
                up_die("--dtype expects f32 or bf16, got '%s'", optarg);
            bf16 = !strcmp(optarg, "bf16");
            break;
        case 'm':
            if (up_parse_bytes(optarg, &max_shard) != 0)
                up_die("--max-shard-size expects a size such as 5GB or 500MiB, got '%s'", optarg);
            break;
        case 'h': print_help(); return 0;
        case ':': up_die("%s needs a value: see upipe export --help", argv[optind - 1]);
        default: up_die("unknown flag '%s': see upipe export --help", argv[optind - 1]);
        }
    }
    if (optind < argc) up_die("unexpected argument '%s': see upipe export --help", argv[optind]);
    if (!ckpt || !out) up_die("--ckpt and --output are required: see upipe export --help");

    char step[4096], p[4096], err[2600];
    if (ckpt_resolve(ckpt, step, sizeof step, err, sizeof err) != 0) up_die("%s", err);
    ckpt_record rec; /* the weights are exported only as they were written */
    if (ckpt_read_record(step, &rec, err, sizeof err) != 0 ||
        ckpt_verify_file(step, CKPT_MODEL, &rec, err, sizeof err) != 0)
        up_die("--ckpt %s", err);
    up_path_join(p, sizeof p, step, "model.safetensors");
    st_file src;
    if (st_open(&src, p, err, sizeof err) != 0) up_die("%s", err);
    if (mkdir(out, 0755) != 0 && errno != EEXIST)
        up_die("--output %s: cannot create the folder (%s)", out, strerror(errno));
    write_config(step, out, bf16);

    /* tensors in data order, cut into shards of at most max_shard bytes (a larger tensor alone) */
    const st_tensor **order = malloc(sizeof *order * (size_t)(src.n ? src.n : 1));
    int *shard_of = malloc(sizeof *shard_of * (size_t)(src.n ? src.n : 1));
    UP_CHECK(order && shard_of, "out of memory");
    for (int i = 0; i < src.n; i++) order[i] = &src.tensors[i];
    for (int i = 1; i < src.n; i++) /* insertion sort by offset: the header's order is any */
        for (int j = i; j > 0 && order[j]->begin < order[j - 1]->begin; j--) {
            const st_tensor *t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    size_t esize = bf16 ? 2 : 4, cur = 0, total = 0;
    int nshards = src.n ? 1 : 0;
    for (int i = 0; i < src.n; i++) {
        size_t b = st_numel(order[i]) * esize;
        if (cur > 0 && cur + b > max_shard) {
            nshards++;
            cur = 0;
        }
        cur += b;
        total += b;
        shard_of[i] = nshards - 1;
    }

    shard_source s = {.src = &src, .cap = (size_t)1 << 20};
    s.buf = malloc(s.cap * sizeof(float));
    st_entry *e = calloc((size_t)(src.n ? src.n : 1), sizeof *e);
    UP_CHECK(s.buf && e, "out of memory");
    json_t *map = json_object();
    char fname[64];
    for (int k = 0, i = 0; k < nshards; k++) {
        int first = i, n = 0;
        while (i < src.n && shard_of[i] == k) {
            e[n].name = order[i]->name;
            e[n].ndim = order[i]->ndim;
            for (int d = 0; d < order[i]->ndim && d < 4; d++) e[n].shape[d] = order[i]->shape[d];
            n++, i++;
        }
        if (nshards == 1) snprintf(fname, sizeof fname, "model.safetensors");
        else snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", k + 1, nshards);
        up_path_join(p, sizeof p, out, fname);
        s.tensors = order + first;
        s.n = n;
        s.next = 0;
        s.done = 0;
        int rc = st_write_stream(p, e, n, bf16 ? ST_BF16 : ST_F32, next_chunk, &s, err,
                                 sizeof err);
        if (s.failed) up_die("%s", s.err);
        if (rc != 0) up_die("%s", err);
        for (int t = first; t < i; t++)
            json_object_set_new(map, order[t]->name, json_string(fname));
    }
    /* a folder exported before with the other layout keeps no stale entry point */
    up_path_join(p, sizeof p, out,
                 nshards > 1 ? "model.safetensors" : "model.safetensors.index.json");
    unlink(p);
    if (nshards > 1) { /* the index transformers reads: total bytes and where each tensor is */
        json_t *root = json_object(), *meta = json_object();
        json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
        json_object_set_new(root, "metadata", meta);
        json_object_set_new(root, "weight_map", map);
        char *text = json_dumps(root, JSON_INDENT(2));
        json_decref(root);
        UP_CHECK(text, "json_dumps failed");
        up_path_join(p, sizeof p, out, "model.safetensors.index.json");
        int rc = up_write_line_atomic(p, text, err, sizeof err);
        free(text);
        if (rc != 0) up_die("%s", err);
    } else {
        json_decref(map);
    }
    printf("exported %s: %d tensors, %.1f MiB %s, in %d file%s, to %s\n", step, src.n,
           (double)total / 1048576.0, bf16 ? "BF16" : "F32", nshards, nshards == 1 ? "" : "s",
           out);
    free(e);
    free(s.buf);
    free(order);
    free(shard_of);
    st_close(&src);
    return 0;
}
