/* weights.c — the weights of a model: the parts a rank owns, random init, load from and save to
 * safetensors with HF names (streamed, FSDP unit by unit). */
#include "model/model_int.h"

#include "core/check.h"
#include "io/safetensors.h"
#include "io/st_set.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- owned parts ---------------------------------------------------------------------------- */

int model_owned_part(const model *m, int t, size_t *i0, size_t *i1) {
    const param_tensor *pt = &model_table(m)->tensors[t];
    size_t g0, g1;
    store_owned(model_store(m), pt->unit, &g0, &g1);
    size_t end = pt->offset + pt->numel;
    size_t a = pt->offset > g0 ? pt->offset : g0, b = end < g1 ? end : g1;
    if (a >= b) return 0;
    *i0 = a - pt->offset;
    *i1 = b - pt->offset;
    return 1;
}

float *model_tensor_dev_part(model *m, store_slab_kind k, int t, size_t i0) {
    const param_tensor *pt = &model_table(m)->tensors[t];
    return store_at(model_store(m), store_dev_slab(model_store(m), k), NULL, pt->unit,
                    pt->offset + i0);
}

/* The tensors in order, unit by unit, in host memory (store_unit_host): element i0 of tensor t
 * of slab k, the unit before written back when t opens another (host_parts_end: the last). */
typedef struct {
    model *m;
    store_slab_kind k;
    int u;      /* the unit held, -1: none */
    float *buf; /* its host part */
} host_parts;

static float *host_part(host_parts *h, int t, size_t i0) {
    const param_tensor *pt = &model_table(h->m)->tensors[t];
    param_store *ps = model_store(h->m);
    if (pt->unit != h->u) {
        if (h->u >= 0) store_unit_put(ps);
        h->u = pt->unit;
        h->buf = store_unit_host(ps, h->k, h->u);
    }
    return store_at(ps, NULL, h->buf, pt->unit, pt->offset + i0);
}

static void host_parts_end(host_parts *h) {
    if (h->u >= 0) store_unit_put(model_store(h->m));
    h->u = -1;
}

/* splitmix64: a counter-based generator, so element i of tensor t is the same whatever the
 * thread count or the shard layout. */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double unit_open(uint64_t x) {
    return ((double)(x >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

void model_init_random(model *m, uint64_t seed) {
    const double two_pi = 6.283185307179586;
    host_parts h = {m, STORE_PARAMS, -1, NULL};
    for (int t = 0; t < model_ntensors(m); t++) {
        const param_tensor *pt = &model_table(m)->tensors[t];
        /* only this rank's part of the tensor: elements [i0, i1) */
        size_t i0, i1;
        if (!model_owned_part(m, t, &i0, &i1)) continue;
        float *p = host_part(&h, t, i0) - i0;
        if (pt->ndim == 1) {
            for (size_t i = i0; i < i1; i++)
                p[i] = 1.0f;
            continue;
        }
        uint64_t key = mix64(seed ^ mix64((uint64_t)t + 1));
        float std = model_cfg(m)->init_std;
#pragma omp parallel for schedule(static)
        for (size_t i = i0; i < i1; i++) {
            /* Box-Muller on two hashed uniforms of this element's counter */
            double u1 = unit_open(mix64(key + 2 * (uint64_t)i));
            double u2 = unit_open(mix64(key + 2 * (uint64_t)i + 1));
            p[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
        }
    }
    host_parts_end(&h);
}

/* "2, 3" from a shape. */
static void fmt_shape(char *buf, size_t len, const int64_t *shape, int ndim) {
    buf[0] = 0;
    for (int d = 0; d < ndim && d < 8; d++) {
        size_t n = strlen(buf);
        snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    }
}

/* Index of the first NaN or Inf among x[0..n), n when all are finite. */
static size_t first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

/* model_read_owned's tensor t. */
static int read_tensor(host_parts *h, int t, const st_set *set, const char *prefix, char *name,
                       size_t namelen, char *err, size_t errlen) {
    model *m = h->m;
    const param_tensor *pt = &model_table(m)->tensors[t];
    snprintf(name, namelen, "%s%s", prefix, pt->name);
    const st_file *f;
    const st_tensor *st = st_set_find(set, name, &f);
    if (!st)
        return up_errf(err, errlen, set->origin,
                       "tensor %s is missing: the file does not "
                       "match the config (or is not an HF Llama checkpoint)",
                       name);
    int ok = st->ndim == pt->ndim && st->shape[0] == pt->shape[0] &&
             (pt->ndim == 1 || st->shape[1] == pt->shape[1]);
    if (!ok) {
        char got[128], want[64];
        fmt_shape(got, sizeof got, st->shape, st->ndim);
        fmt_shape(want, sizeof want, pt->shape, pt->ndim);
        return up_errf(err, errlen, set->origin,
                       "tensor %s has shape [%s] but the config "
                       "needs [%s]: use the config.json that belongs to these weights",
                       name, got, want);
    }
    size_t i0, i1;
    if (!model_owned_part(m, t, &i0, &i1)) return 0; /* FSDP: keep only this rank's shard */
    float *dst = host_part(h, t, i0);
    if (st_read_f32(f, st, i0, i1 - i0, dst, err, errlen) != 0) return -1;
    size_t bad = first_nonfinite(dst, i1 - i0);
    if (bad < i1 - i0) {
        char where[96];
        size_t idx = i0 + bad; /* in the whole tensor */
        if (pt->ndim == 2)
            snprintf(where, sizeof where, "row %zu, column %zu", idx / (size_t)pt->shape[1],
                     idx % (size_t)pt->shape[1]);
        else
            snprintf(where, sizeof where, "element %zu", idx);
        return up_errf(err, errlen, set->origin,
                       "tensor %s at %s is %g: the file holds "
                       "NaN/Inf; use a checkpoint from before the divergence, or repair the "
                       "weights",
                       name, where, (double)dst[bad]);
    }
    return 0;
}

int model_read_owned(model *m, store_slab_kind k, const st_set *set, const char *prefix, char *err,
                     size_t errlen) {
    char name[PARAM_NAME_MAX + 32];
    host_parts h = {m, k, -1, NULL};
    int rc = 0;
    for (int t = 0; t < model_ntensors(m) && rc == 0; t++)
        rc = read_tensor(&h, t, set, prefix, name, sizeof name, err, errlen);
    host_parts_end(&h); /* what was read is on the device, a failure or not */
    return rc;
}

/* The first tensor of set that is not one of the model's (HF names, no prefix), or NULL. Every
 * tensor of the model is in set (model_read_owned checked it) and the set's names are unique, so
 * there is one exactly when the set holds more tensors than the model. */
static const char *first_unexpected(const model *m, const st_set *set) {
    if (st_set_count(set) <= model_ntensors(m)) return NULL;
    for (int k = 0; k < set->nfiles; k++)
        for (int i = 0; i < set->files[k].n; i++) {
            const char *name = set->files[k].tensors[i].name;
            int known = 0;
            for (int t = 0; t < model_ntensors(m) && !known; t++)
                known = strcmp(name, model_tensor_name(m, t)) == 0;
            if (!known) return name;
        }
    return NULL;
}

void model_load(model *m, const char *path) {
    char err[512];
    st_set set;
    if (st_set_open(&set, path, err, sizeof err) != 0) up_die("%s", err);
    int rc = model_read_owned(m, STORE_PARAMS, &set, "", err, sizeof err);
    const char *extra = rc == 0 ? first_unexpected(m, &set) : NULL;
    if (extra)
        rc = up_errf(err, sizeof err, set.origin,
                     "tensor %s is not used by the config (the file "
                     "holds %d tensors, the config %d): use the config.json that belongs to these "
                     "weights",
                     extra, st_set_count(&set), model_ntensors(m));
    st_set_close(&set);
    if (rc != 0) up_die("%s", err);
}

st_entry *model_st_entries(const model *m, int nslabs, const char *const *prefixes) {
    const param_table *pt = model_table(m);
    size_t n = (size_t)nslabs * (size_t)pt->ntensors, names = 0;
    for (int k = 0; k < nslabs; k++)
        names += (strlen(prefixes[k]) + PARAM_NAME_MAX) * pt->ntensors;
    st_entry *e = calloc(1, n * sizeof *e + names);
    UP_CHECK(e, "out of memory");
    char *buf = (char *)(e + n);
    for (int k = 0; k < nslabs; k++)
        for (int t = 0; t < pt->ntensors; t++) {
            st_entry *x = &e[(size_t)k * pt->ntensors + t];
            size_t len = strlen(prefixes[k]) + PARAM_NAME_MAX;
            snprintf(buf, len, "%s%s", prefixes[k], pt->tensors[t].name);
            x->name = buf;
            buf += len;
            x->ndim = pt->tensors[t].ndim;
            x->shape[0] = pt->tensors[t].shape[0];
            x->shape[1] = pt->tensors[t].shape[1];
        }
    return e;
}

int model_write_owned(model *m, store_slab_kind k, uint64_t data_off, model_range_fn write,
                      void *ctx) {
    param_store *ps = model_store(m);
    for (int u = 0; u < model_table(m)->nunits; u++) {
        size_t g0, g1;
        store_owned(ps, u, &g0, &g1); /* contiguous in the full layout and in the shard */
        if (g1 > g0 && write(ctx, store_unit_host(ps, k, u), (g1 - g0) * sizeof(float),
                             data_off + (uint64_t)g0 * sizeof(float)) != 0)
            return -1;
    }
    return 0;
}

size_t model_owned_floats(const model *m) {
    size_t n = 0;
    for (int t = 0; t < model_ntensors(m); t++) {
        size_t i0, i1;
        if (model_owned_part(m, t, &i0, &i1)) n += i1 - i0;
    }
    return n;
}

/* The data of a save in file order: one unit at a time (FSDP: gathered, every rank takes part
 * in the gathers, rank 0 writes). */
typedef struct {
    model *m;
    store_slab_kind k;
    int unit;
} save_source;

static int save_next(void *ctx, const float **chunk, size_t *count) {
    save_source *src = ctx;
    const param_table *pt = model_table(src->m);
    if (src->unit >= pt->nunits) return -1;
    int u = src->unit++;
    *chunk = store_gather_unit(model_store(src->m), src->k, u);
    *count = pt->unit_off[u + 1] - pt->unit_off[u];
    return 0;
}

static void save_slab(model *m, store_slab_kind k, const char *path, mem_dtype file_dtype) {
    save_source src = {m, k, 0};
    if (model_comm(m)->rank != 0) {
        /* the other ranks only take part in rank 0's gathers, in the same order */
        const float *chunk;
        size_t count;
        if (store_sharded(model_store(m)))
            while (save_next(&src, &chunk, &count) == 0) {
            }
        return;
    }
    const param_table *pt = model_table(m);
    st_entry *e = calloc((size_t)pt->ntensors, sizeof *e);
    UP_CHECK(e, "out of memory");
    for (int t = 0; t < pt->ntensors; t++) {
        e[t].name = pt->tensors[t].name;
        e[t].ndim = pt->tensors[t].ndim;
        e[t].shape[0] = pt->tensors[t].shape[0];
        e[t].shape[1] = pt->tensors[t].shape[1];
    }
    char err[512];
    int rc = st_write_stream(path, e, pt->ntensors, file_dtype == MEM_DTYPE_BF16 ? ST_BF16 : ST_F32,
                             save_next, &src, err, sizeof err);
    free(e);
    if (rc != 0) up_die("%s", err);
}

void model_save_params(model *m, const char *path, mem_dtype file_dtype) {
    save_slab(m, STORE_PARAMS, path, file_dtype);
}
void model_save_grads(model *m, const char *path) {
    save_slab(m, STORE_GRADS, path, MEM_DTYPE_F32);
}
