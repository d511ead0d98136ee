/* safetensors.c — validated reader (F32, BF16, F16); the writer is safetensors_write.c.
 *
 * The reader never maps the file: the header is read with pread and tensors are read in chunks
 * and converted, so a tensor can be streamed straight into its (sharded) destination. */
#include "io/safetensors.h"

#include "core/check.h"
#include "core/dtype.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (the format is little-endian)"
#endif

/* The format's own reference implementation caps the header at 100 MB. */
#define ST_MAX_HEADER ((uint64_t)100000000)
#define ST_MAX_DIMS 8
/* Elements converted per pread in st_read_f32 (BF16/F16 staging buffer of 512 KiB). */
#define ST_CHUNK ((size_t)1 << 18)

/* pread all of len bytes; 0, or -1 with errno (0 on end of file). */
static int pread_full(int fd, void *buf, size_t len, uint64_t off) {
    char *p = buf;
    while (len > 0) {
        ssize_t r = pread(fd, p, len, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = 0;
            return -1;
        }
        p += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static int dtype_from_name(const char *s, size_t *esize) {
    if (strcmp(s, "F32") == 0) {
        *esize = 4;
        return ST_F32;
    }
    if (strcmp(s, "BF16") == 0) {
        *esize = 2;
        return ST_BF16;
    }
    if (strcmp(s, "F16") == 0) {
        *esize = 2;
        return ST_F16;
    }
    return -1;
}

static size_t dtype_size(int dtype) {
    return dtype == ST_F32 ? 4 : 2;
}

void st_close(st_file *f) {
    if (f == NULL) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

/* Parses one tensor entry of the header into t (t->name set by the caller). */
static int parse_entry(st_tensor *t, const char *name, json_t *v, const char *path, char *err,
                       size_t errlen) {
    if (!json_is_object(v))
        return up_errf(err, errlen, path,
                       "header entry \"%s\" is not an object: the file is corrupt", name);
    json_t *jd = json_object_get(v, "dtype");
    json_t *js = json_object_get(v, "shape");
    json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo))
        return up_errf(err, errlen, path,
                       "tensor \"%s\" lacks a string \"dtype\", an array \"shape\" or an array "
                       "\"data_offsets\": the file is corrupt",
                       name);
    size_t esize = 0;
    t->dtype = dtype_from_name(json_string_value(jd), &esize);
    if (t->dtype < 0)
        return up_errf(err, errlen, path,
                       "tensor \"%s\" has dtype \"%s\", which upipe does not read: convert the "
                       "checkpoint to F32, BF16 or F16",
                       name, json_string_value(jd));

    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS)
        return up_errf(err, errlen, path, "tensor \"%s\" has %zu dimensions (at most %d supported)",
                       name, nd, ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    for (size_t d = 0; d < nd; d++) {
        json_t *e = json_array_get(js, d);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return up_errf(err, errlen, path,
                           "tensor \"%s\": shape entry %zu is not a non-negative integer: the file "
                           "is corrupt",
                           name, d);
        t->shape[d] = (int64_t)json_integer_value(e);
        if (__builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel))
            return up_errf(err, errlen, path, "tensor \"%s\": the shape's element count overflows",
                           name);
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)esize, &nbytes) || nbytes > SIZE_MAX)
        return up_errf(err, errlen, path, "tensor \"%s\": the shape's byte size overflows", name);

    if (json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return up_errf(err, errlen, path,
                       "tensor \"%s\": data_offsets must be [begin, end] integers: the file is "
                       "corrupt",
                       name);
    json_int_t ob = json_integer_value(json_array_get(jo, 0));
    json_int_t oe = json_integer_value(json_array_get(jo, 1));
    if (ob < 0 || oe < ob)
        return up_errf(err, errlen, path,
                       "tensor \"%s\": data_offsets [%lld, %lld] are not 0 <= begin <= end: the "
                       "file is corrupt",
                       name, (long long)ob, (long long)oe);
    if ((uint64_t)(oe - ob) != nbytes)
        return up_errf(err, errlen, path,
                       "tensor \"%s\": shape and dtype give %llu bytes but data_offsets span %lld: "
                       "the file is corrupt",
                       name, (unsigned long long)nbytes, (long long)(oe - ob));
    t->begin = (size_t)ob;
    t->end = (size_t)oe;
    return 0;
}

typedef struct {
    size_t begin, end;
    int idx;
} st_span;

static int cmp_span(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* The tensors must tile [0, data_bytes) exactly: sorted by begin, each begins where the
 * previous one ended. */
static int check_layout(const st_file *f, size_t data_bytes, const char *path, char *err,
                        size_t errlen) {
    for (int i = 0; i < f->n; i++)
        if (f->tensors[i].end > data_bytes)
            return up_errf(err, errlen, path,
                           "tensor \"%s\" ends at byte %zu of the data but the data section has "
                           "%zu bytes: the file is truncated",
                           f->tensors[i].name, f->tensors[i].end, data_bytes);
    if (f->n <= 0) {
        if (data_bytes != 0)
            return up_errf(err, errlen, path,
                           "no tensors but %zu bytes of data: the file is corrupt", data_bytes);
        return 0;
    }
    st_span *order = malloc((size_t)f->n * sizeof *order);
    if (order == NULL) return up_errf(err, errlen, path, "out of memory");
    for (int i = 0; i < f->n; i++)
        order[i] = (st_span){f->tensors[i].begin, f->tensors[i].end, i};
    qsort(order, (size_t)f->n, sizeof *order, cmp_span);
    int rc = 0;
    size_t pos = 0;
    const char *prev = NULL;
    for (int k = 0; k < f->n && rc == 0; k++) {
        const st_tensor *t = &f->tensors[order[k].idx];
        if (t->begin > pos)
            rc = up_errf(err, errlen, path,
                         "gap of %zu bytes before tensor \"%s\" (begins at %zu, %s%s%s ends at "
                         "%zu): the file is corrupt",
                         t->begin - pos, t->name, t->begin, prev ? "\"" : "", prev ? prev : "start",
                         prev ? "\"" : "", pos);
        else if (t->begin < pos)
            rc = up_errf(err, errlen, path,
                         "tensor \"%s\" (bytes %zu..%zu) overlaps tensor \"%s\" (ends at %zu): the "
                         "file is corrupt",
                         t->name, t->begin, t->end, prev, pos);
        pos = t->end;
        prev = t->name;
    }
    if (rc == 0 && pos != data_bytes)
        rc = up_errf(err, errlen, path,
                     "%zu bytes of data after the last tensor: the file is corrupt",
                     data_bytes - pos);
    free(order);
    return rc;
}

static int parse_header(st_file *f, const char *hdr, size_t len, const char *path, char *err,
                        size_t errlen) {
    if (len == 0 || hdr[0] != '{')
        return up_errf(err, errlen, path,
                       "the header does not start with '{': not a safetensors file");
    json_error_t jerr;
    /* Duplicate names are rejected by the parser itself. */
    json_t *root = json_loadb(hdr, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return up_errf(err, errlen, path,
                       "the JSON header is invalid at byte %d (%s): the file is corrupt",
                       jerr.position, jerr.text);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = up_errf(err, errlen, path, "the JSON header is not an object: the file is corrupt");
        goto done;
    }
    size_t cap = json_object_size(root);
    if (cap > (size_t)1 << 24) {
        rc = up_errf(err, errlen, path, "the header lists %zu entries: the file is corrupt", cap);
        goto done;
    }
    f->tensors = calloc(cap ? cap : 1, sizeof *f->tensors);
    if (f->tensors == NULL) {
        rc = up_errf(err, errlen, path, "out of memory");
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) {
                rc = up_errf(err, errlen, path,
                             "\"__metadata__\" is not an object: the file is "
                             "corrupt");
                goto done;
            }
            continue;
        }
        st_tensor *t = &f->tensors[f->n];
        t->name = strdup(key);
        if (t->name == NULL) {
            rc = up_errf(err, errlen, path, "out of memory");
            goto done;
        }
        f->n++;
        rc = parse_entry(t, key, val, path, err, errlen);
        if (rc != 0) goto done;
    }
done:
    json_decref(root);
    return rc;
}

int st_open(st_file *f, const char *path, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return up_errf(err, errlen, path, "cannot open (%s): check the path", strerror(errno));
    f->fd = fd;
    f->path = strdup(path);
    char *hdr = NULL;
    struct stat sb;
    int rc = -1;
    if (f->path == NULL) {
        up_errf(err, errlen, path, "out of memory");
        goto fail;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        up_errf(err, errlen, path, "not a regular file");
        goto fail;
    }
    f->file_size = (size_t)sb.st_size;
    if (f->file_size < 8) {
        up_errf(err, errlen, path,
                "file is %zu bytes, too small for the 8-byte header length: the file is "
                "truncated or not safetensors",
                f->file_size);
        goto fail;
    }
    uint8_t lenb[8];
    if (pread_full(fd, lenb, 8, 0) != 0) {
        up_errf(err, errlen, path, "cannot read the header length (%s)",
                errno ? strerror(errno) : "short read");
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | lenb[i];
    if (hlen == 0) {
        up_errf(err, errlen, path, "header length is 0: not a safetensors file");
        goto fail;
    }
    if (hlen > ST_MAX_HEADER) {
        up_errf(err, errlen, path,
                "header length %llu exceeds the 100 MB limit: the file is corrupt or not "
                "safetensors",
                (unsigned long long)hlen);
        goto fail;
    }
    if (hlen > f->file_size - 8) {
        up_errf(err, errlen, path,
                "header length %llu is larger than the file (%zu bytes): the file is truncated "
                "or not safetensors",
                (unsigned long long)hlen, f->file_size);
        goto fail;
    }
    f->data_start = 8 + (size_t)hlen;
    hdr = malloc((size_t)hlen);
    if (hdr == NULL) {
        up_errf(err, errlen, path, "out of memory reading a %llu-byte header",
                (unsigned long long)hlen);
        goto fail;
    }
    if (pread_full(fd, hdr, (size_t)hlen, 8) != 0) {
        up_errf(err, errlen, path, "cannot read the header (%s)",
                errno ? strerror(errno) : "short read");
        goto fail;
    }
    if (parse_header(f, hdr, (size_t)hlen, path, err, errlen) != 0) goto fail;
    if (check_layout(f, f->file_size - f->data_start, path, err, errlen) != 0) goto fail;
    rc = 0;
fail:
    free(hdr);
    if (rc != 0) st_close(f);
    return rc;
}

const st_tensor *st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

size_t st_numel(const st_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d]; /* overflow excluded by st_open */
    return n;
}

/* IEEE binary16 -> binary32, exact for every input (subnormals, infinities, NaN payloads). */
static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in fp32 */
        float x = (float)mant * 0x1p-24f;
        memcpy(&u, &x, 4);
        u |= sign;
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

int st_read_f32(const st_file *f, const st_tensor *t, size_t first, size_t count, float *dst,
                char *err, size_t errlen) {
    const char *path = f->path ? f->path : "safetensors";
    size_t numel = st_numel(t);
    if (first > numel || count > numel - first)
        return up_errf(err, errlen, path,
                       "read of elements [%zu, %zu+%zu) is outside tensor \"%s\" (%zu elements)",
                       first, first, count, t->name, numel);
    if (count == 0) return 0;
    size_t es = dtype_size(t->dtype);
    uint64_t off = (uint64_t)f->data_start + t->begin + (uint64_t)first * es;
    if (t->dtype == ST_F32) {
        if (pread_full(f->fd, dst, count * 4, off) != 0)
            return up_errf(err, errlen, path, "reading tensor \"%s\" failed (%s)", t->name,
                           errno ? strerror(errno)
                                 : "short read: the file changed since it was opened");
        return 0;
    }
    size_t chunk = count < ST_CHUNK ? count : ST_CHUNK;
    uint16_t *buf = malloc(chunk * sizeof *buf);
    if (buf == NULL) return up_errf(err, errlen, path, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < count; i += chunk) {
        size_t m = count - i < chunk ? count - i : chunk;
        if (pread_full(f->fd, buf, m * 2, off + (uint64_t)i * 2) != 0) {
            rc = up_errf(err, errlen, path, "reading tensor \"%s\" failed (%s)", t->name,
                         errno ? strerror(errno)
                               : "short read: the file changed since it was opened");
            break;
        }
        float *out = dst + i;
        if (t->dtype == ST_BF16)
            for (size_t j = 0; j < m; j++)
                out[j] = bf16_widen(buf[j]);
        else
            for (size_t j = 0; j < m; j++)
                out[j] = f16_to_f32(buf[j]);
    }
    free(buf);
    return rc;
}

/* ---- writer ------------------------------------------------------------------------------ */
