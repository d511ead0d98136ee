/* mask.c — loss-mask shards: read via mmap with full validation, write atomically. */
#include "io/mask.h"

#include "core/check.h"
#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void mask_close(mask_shard *m) {
    if (m == NULL) return;
    if (m->map != NULL) munmap((void *)m->map, m->map_bytes);
    memset(m, 0, sizeof *m);
}

/* Validates the mapped file (header, size, count, bytes); 0 or -1 with err. */
static int mask_validate(mask_shard *m, const char *path, size_t expected_count, char *err,
                         size_t errlen) {
    const int32_t *hdr = m->map;
    if (hdr[0] != MASK_MAGIC)
        return up_errf(err, errlen, path,
                       "bad magic %d (expected %d): not a loss-mask shard (make one with "
                       "`upipe data jsonl ... --mask-output`)",
                       hdr[0], MASK_MAGIC);
    if (hdr[1] != MASK_VERSION)
        return up_errf(err, errlen, path,
                       "loss mask version %d (expected %d): unsupported version; regenerate it",
                       hdr[1], MASK_VERSION);
    if (hdr[2] < 1)
        return up_errf(err, errlen, path, "header says %d tokens: the mask is empty; regenerate it",
                       hdr[2]);
    m->n = (size_t)hdr[2];
    size_t want = MASK_HEADER_BYTES + m->n;
    if (m->map_bytes != want)
        return up_errf(err, errlen, path,
                       "file is %zu bytes but its header says %zu mask bytes (%zu bytes): %s; "
                       "regenerate it",
                       m->map_bytes, m->n, want,
                       m->map_bytes < want ? "the file is truncated" : "trailing bytes");
    if (expected_count != 0 && m->n != expected_count)
        return up_errf(err, errlen, path,
                       "the mask has %zu bytes but the data shard has %zu tokens: the mask was "
                       "written for other data; write both with one `upipe data` call",
                       m->n, expected_count);
    m->bytes = (const uint8_t *)m->map + MASK_HEADER_BYTES;
    /* OR everything first (a tight loop), locate the offender only when there is one. */
    uint8_t any = 0;
    for (size_t i0 = 0; i0 < m->n; i0 += MAP_SCAN_BYTES) { /* page by page off the RSS */
        size_t i1 = m->n - i0 < MAP_SCAN_BYTES ? m->n : i0 + MAP_SCAN_BYTES;
        for (size_t i = i0; i < i1; i++)
            any |= m->bytes[i];
        up_map_drop(m->map, m->map_bytes, m->bytes + i0, i1 - i0);
    }
    if (any > 1) {
        size_t i = 0;
        while (m->bytes[i] <= 1)
            i++;
        return up_errf(err, errlen, path,
                       "byte %u at mask offset %zu (file offset %zu): every mask byte must be 0 "
                       "or 1; the file is corrupt or not a loss mask",
                       m->bytes[i], i, MASK_HEADER_BYTES + i);
    }
    return 0;
}

int mask_open(mask_shard *m, const char *path, size_t expected_count, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    const void *map;
    size_t size;
    if (up_map_file(path, MASK_HEADER_BYTES, "mask", "a loss mask",
                    "make a mask with `upipe data jsonl ... --mask-output`", &map, &size, NULL, err,
                    errlen) != 0)
        return -1;
    m->map = map;
    m->map_bytes = size;
    if (mask_validate(m, path, expected_count, err, errlen) != 0) {
        mask_close(m);
        return -1;
    }
    return 0;
}

void mask_read(const mask_shard *m, size_t start, size_t count, uint8_t *dst) {
    size_t pos = start % m->n;
    size_t i = 0;
    while (i < count) {
        size_t run = m->n - pos; /* contiguous bytes before the wrap */
        if (run > count - i) run = count - i;
        memcpy(dst + i, m->bytes + pos, run);
        up_map_drop(m->map, m->map_bytes, m->bytes + pos, run);
        i += run;
        pos = 0;
    }
}

int mask_write(const char *path, const uint8_t *bytes, size_t n, char *err, size_t errlen) {
    if (n == 0)
        return up_errf(err, errlen, path, "no mask bytes to write: a mask needs at least one");
    if (n > (size_t)INT32_MAX)
        return up_errf(err, errlen, path,
                       "%zu mask bytes do not fit one mask (the header count is int32): split "
                       "the data",
                       n);
    for (size_t i = 0; i < n; i++)
        if (bytes[i] > 1)
            return up_errf(err, errlen, path, "mask byte %zu is %u: every mask byte must be 0 or 1",
                           i, bytes[i]);
    size_t total = MASK_HEADER_BYTES + n;
    uint8_t *buf = calloc(1, total);
    if (buf == NULL) return up_errf(err, errlen, path, "out of memory for a %zu-byte mask", total);
    int32_t hdr[3] = {MASK_MAGIC, MASK_VERSION, (int32_t)n};
    memcpy(buf, hdr, sizeof hdr);
    memcpy(buf + MASK_HEADER_BYTES, bytes, n);
    int rc = up_write_file_atomic(path, buf, total, err, errlen);
    free(buf);
    return rc;
}
