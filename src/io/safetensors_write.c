/* safetensors_write.c — atomic safetensors writer: the header laid out from the entries, the data
 * streamed in entry order, the file fsync'd under a temporary name and renamed. */
#include "io/safetensors.h"

#include "core/check.h"
#include "core/dtype.h"
#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The JSON header for entries, padded with spaces so that 8 + its length is a multiple of align
 * (8 keeps the data 8-byte aligned; a page lets writers place the data with O_DIRECT). Returns
 * malloc'd text and its length, or NULL with err. */
static char *build_header(const st_entry *entries, int n, int dtype, size_t align, size_t *len_out,
                          const char *path, char *err, size_t errlen) {
    const uint64_t esize = dtype == ST_BF16 ? 2 : 4;
    json_t *root = json_object();
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt")); /* HF loaders look for it */
    json_object_set_new(root, "__metadata__", meta);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const st_entry *e = &entries[i];
        json_t *shape = json_array();
        uint64_t numel = 1;
        for (int d = 0; d < e->ndim; d++) {
            json_array_append_new(shape, json_integer(e->shape[d]));
            if (__builtin_mul_overflow(numel, (uint64_t)e->shape[d], &numel)) numel = UINT64_MAX;
        }
        uint64_t end;
        if (numel > UINT64_MAX / 4 || __builtin_add_overflow(off, numel * esize, &end) ||
            end > (uint64_t)INT64_MAX) {
            json_decref(shape);
            json_decref(root);
            up_errf(err, errlen, path, "tensor \"%s\" is too large to write", e->name);
            return NULL;
        }
        json_t *ent = json_object();
        json_object_set_new(ent, "dtype", json_string(dtype == ST_BF16 ? "BF16" : "F32"));
        json_object_set_new(ent, "shape", shape);
        json_t *offs = json_array();
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)end));
        json_object_set_new(ent, "data_offsets", offs);
        /* jansson (>= 2.8) keeps objects in insertion order, so the header lists the tensors in
         * the given order. json_object_set_new fails on a name that is not valid UTF-8. */
        if (json_object_set_new(root, e->name, ent) != 0) {
            json_decref(root);
            up_errf(err, errlen, path, "tensor name \"%s\" is not valid UTF-8", e->name);
            return NULL;
        }
        off = end;
    }
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (text == NULL) {
        up_errf(err, errlen, path, "out of memory formatting the header");
        return NULL;
    }
    size_t len = strlen(text);
    size_t padded = (len + 8 + align - 1) / align * align - 8;
    char *out = realloc(text, padded + 1);
    if (out == NULL) {
        free(text);
        up_errf(err, errlen, path, "out of memory formatting the header");
        return NULL;
    }
    memset(out + len, ' ', padded - len);
    out[padded] = '\0';
    *len_out = padded;
    return out;
}

/* The data of st_write_f32's entries, one tensor per chunk. */
typedef struct {
    const st_entry *entries;
    int n, next;
} entry_source;

static int next_entry(void *ctx, const float **chunk, size_t *count) {
    entry_source *src = ctx;
    if (src->next >= src->n) return -1;
    const st_entry *e = &src->entries[src->next++];
    size_t numel = 1;
    for (int d = 0; d < e->ndim; d++)
        numel *= (size_t)e->shape[d];
    *chunk = e->data;
    *count = numel;
    return 0;
}

int st_write_f32(const char *path, const st_entry *entries, int n, char *err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < entries[i].ndim && entries[i].ndim <= 4; d++)
            numel *= entries[i].shape[d] > 0 ? (size_t)entries[i].shape[d] : 0;
        if (numel > 0 && entries[i].data == NULL && entries[i].name)
            return up_errf(err, errlen, path, "tensor \"%s\" has no data", entries[i].name);
    }
    entry_source src = {entries, n, 0};
    return st_write_f32_stream(path, entries, n, next_entry, &src, err, errlen);
}

/* Names, dimensions and duplicates of the entries. */
static int check_entries(const char *path, const st_entry *entries, int n, char *err,
                         size_t errlen) {
    if (n < 0) return up_errf(err, errlen, path, "negative tensor count %d", n);
    for (int i = 0; i < n; i++) {
        const st_entry *e = &entries[i];
        if (e->name == NULL || e->name[0] == '\0' || strcmp(e->name, "__metadata__") == 0)
            return up_errf(err, errlen, path, "entry %d has no usable name", i);
        if (e->ndim < 0 || e->ndim > 4)
            return up_errf(err, errlen, path, "tensor \"%s\" has %d dimensions (0..4 allowed)",
                           e->name, e->ndim);
        size_t numel = 1;
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] < 0)
                return up_errf(err, errlen, path, "tensor \"%s\" has a negative dimension",
                               e->name);
            numel *= (size_t)e->shape[d];
        }
        (void)numel;
        for (int j = 0; j < i; j++)
            if (strcmp(entries[j].name, e->name) == 0)
                return up_errf(err, errlen, path, "tensor name \"%s\" appears twice", e->name);
    }
    return 0;
}

char *st_header(const st_entry *entries, int n, int dtype, size_t align, size_t *len, char *err,
                size_t errlen) {
    if (align < 8 || (align & (align - 1)))
        return up_errf(err, errlen, "safetensors header",
                       "alignment %zu is not a power of two "
                       ">= 8",
                       align),
               NULL;
    if (check_entries("safetensors header", entries, n, err, errlen) != 0) return NULL;
    size_t hlen = 0;
    char *hdr = build_header(entries, n, dtype, align, &hlen, "safetensors header", err, errlen);
    if (hdr == NULL) return NULL;
    char *out = malloc(hlen + 8);
    if (out == NULL) {
        free(hdr);
        up_errf(err, errlen, "safetensors header", "out of memory");
        return NULL;
    }
    for (int i = 0; i < 8; i++)
        out[i] = (char)(uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(out + 8, hdr, hlen);
    free(hdr);
    *len = hlen + 8;
    return out;
}

/* Writes count floats of chunk in the file's dtype (BF16 through a staging buffer, rounded by the
 * rules of the run's conversions, core/dtype.h: to nearest even, quiet NaN, denormals to signed
 * zero, so a BF16 file holds exactly the bf16 run's copy of the weights; the plain loop, some
 * GB/s, well above a disk's rate). */
static int write_data(int fd, int dtype, const float *chunk, size_t count) {
    if (dtype != ST_BF16) return up_write_all(fd, chunk, count * sizeof(float));
    enum { STAGE = 1 << 16 };
    uint16_t buf[STAGE];
    for (size_t i = 0; i < count; i += STAGE) {
        size_t m = count - i < STAGE ? count - i : STAGE;
        bf16_round_n(buf, chunk + i, m);
        if (up_write_all(fd, buf, m * 2) != 0) return -1;
    }
    return 0;
}

int st_write_stream(const char *path, const st_entry *entries, int n, int dtype, st_chunk_fn next,
                    void *ctx, char *err, size_t errlen) {
    if (dtype != ST_F32 && dtype != ST_BF16)
        return up_errf(err, errlen, path, "writing dtype %d is not supported", dtype);
    if (check_entries(path, entries, n, err, errlen) != 0) return -1;
    size_t hlen = 0;
    char *hdr = build_header(entries, n, dtype, 8, &hlen, path, err, errlen);
    if (hdr == NULL) return -1;

    size_t tlen = strlen(path) + 32;
    char *tmp = malloc(tlen);
    if (tmp == NULL) {
        free(hdr);
        return up_errf(err, errlen, path, "out of memory");
    }
    snprintf(tmp, tlen, "%s.tmp.%d", path, (int)getpid());
    up_tmp_push(tmp, 0); /* a signal from here on removes it */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        up_errf(err, errlen, path,
                "cannot create %s (%s): check the directory exists and is "
                "writable",
                tmp, strerror(errno));
        free(hdr);
        up_tmp_pop(tmp);
        free(tmp);
        return -1;
    }
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    int ok = up_write_all(fd, lenb, 8) == 0 && up_write_all(fd, hdr, hlen) == 0;
    /* the data: chunks from the source until every tensor's bytes are written, in order */
    size_t total = 0, written = 0;
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < entries[i].ndim; d++)
            numel *= (size_t)entries[i].shape[d];
        total += numel;
    }
    int short_source = 0;
    while (ok && written < total) {
        const float *chunk = NULL;
        size_t count = 0;
        if (next(ctx, &chunk, &count) != 0 || (count > 0 && chunk == NULL)) {
            short_source = 1;
            break;
        }
        if (count > total - written) count = total - written;
        if (count > 0) ok = write_data(fd, dtype, chunk, count) == 0;
        written += count;
    }
    if (short_source) {
        close(fd);
        unlink(tmp);
        up_tmp_pop(tmp);
        free(tmp);
        free(hdr);
        return up_errf(err, errlen, path, "the data source ended early (internal error)");
    }
    if (ok) ok = fsync(fd) == 0;
    int saved = errno;
    if (close(fd) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        saved = errno;
    }
    free(hdr);
    if (!ok) {
        unlink(tmp);
        up_tmp_pop(tmp);
        free(tmp);
        return up_errf(err, errlen, path,
                       "write failed (%s): check free disk space and "
                       "permissions",
                       strerror(saved));
    }
    up_tmp_pop(tmp);
    free(tmp);
    return 0;
}

int st_write_f32_stream(const char *path, const st_entry *entries, int n, st_chunk_fn next,
                        void *ctx, char *err, size_t errlen) {
    return st_write_stream(path, entries, n, ST_F32, next, ctx, err, errlen);
}
