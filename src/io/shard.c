/* shard.c — llm.c token shards: read via mmap with full validation, write atomically. */
#include "io/shard.h"

#include "core/check.h"
#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARD_VERSION_U16 1
#define SHARD_VERSION_U32 7

static inline uint32_t shard_token(const token_shard *s, size_t i) {
    if (s->token_bytes == 2) return ((const uint16_t *)(const void *)s->tokens)[i];
    return ((const uint32_t *)(const void *)s->tokens)[i];
}

void shard_close(token_shard *s) {
    if (s == NULL) return;
    if (s->map != NULL) {
        munmap((void *)s->map, s->map_bytes);
        if (s->fd >= 0) close(s->fd);
    }
    free(s->path);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

int shard_check(const token_shard *s, char *err, size_t errlen) {
    struct stat sb;
    if (fstat(s->fd, &sb) != 0)
        return up_errf(err, errlen, s->path, "cannot stat the open shard (%s)", strerror(errno));
    if ((size_t)sb.st_size == s->map_bytes) return 0;
    return up_errf(err, errlen, NULL,
                   "%s changed size while the job runs (was %zu bytes, now %lld): a shard in use "
                   "must not be rewritten in place (write a new file and rename it); restore it "
                   "and restart the job",
                   s->path, s->map_bytes, (long long)sb.st_size);
}

int shard_open(token_shard *s, const char *path, int vocab, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    if (vocab <= 0) return up_errf(err, errlen, path, "vocab_size %d is not positive", vocab);
    const void *map;
    size_t size;
    int fd;
    if (up_map_file(path, SHARD_HEADER_BYTES, "shard", "an llm.c token shard",
                    "make a shard with `upipe data`", &map, &size, &fd, err, errlen) != 0)
        return -1;
    s->map = map;
    s->map_bytes = size;
    s->fd = fd; /* kept to notice a change of size (shard_check) */
    s->path = strdup(path);
    if (s->path == NULL) {
        shard_close(s);
        return up_errf(err, errlen, path, "out of memory");
    }
    const int32_t *hdr = map;
    int rc = -1;
    /* the two formats: (magic, version, bytes per token) */
    static const int formats[2][3] = {{SHARD_MAGIC_U16, SHARD_VERSION_U16, 2},
                                      {SHARD_MAGIC_U32, SHARD_VERSION_U32, 4}};
    int f = hdr[0] == SHARD_MAGIC_U16 ? 0 : hdr[0] == SHARD_MAGIC_U32 ? 1 : -1;
    if (f >= 0 && hdr[1] != formats[f][1]) {
        up_errf(err, errlen, path,
                "magic %d with version %d (expected %d): unsupported shard version; "
                "regenerate it",
                hdr[0], hdr[1], formats[f][1]);
        goto done;
    } else if (f >= 0) {
        s->token_bytes = formats[f][2];
    } else {
        up_errf(err, errlen, path, "bad magic %d (expected %d or %d): not an llm.c token shard",
                hdr[0], SHARD_MAGIC_U16, SHARD_MAGIC_U32);
        goto done;
    }
    if (hdr[2] < 1) {
        up_errf(err, errlen, path,
                "header says %d tokens: the shard is empty; regenerate it with at least one "
                "token",
                hdr[2]);
        goto done;
    }
    s->ntok = (size_t)hdr[2];
    size_t want = SHARD_HEADER_BYTES + s->ntok * (size_t)s->token_bytes;
    if (size < want) {
        up_errf(err, errlen, path,
                "file is %zu bytes but its header says %zu tokens (%zu bytes): the file is "
                "truncated; regenerate it",
                size, s->ntok, want);
        goto done;
    }
    if (size > want) {
        up_errf(err, errlen, path,
                "file is %zu bytes but its header says %zu tokens (%zu bytes): %zu trailing "
                "bytes; regenerate it",
                size, s->ntok, want, size - want);
        goto done;
    }
    s->tokens = (const uint8_t *)map + SHARD_HEADER_BYTES;
    /* Find the largest id first (a tight loop), locate the offender only when there is one. */
    uint32_t maxid = 0;
    const size_t chunk = MAP_SCAN_BYTES / (size_t)s->token_bytes;
    for (size_t i0 = 0; i0 < s->ntok; i0 += chunk) { /* page by page off the RSS */
        size_t i1 = s->ntok - i0 < chunk ? s->ntok : i0 + chunk;
        if (s->token_bytes == 2) {
            const uint16_t *t = (const void *)s->tokens;
            for (size_t i = i0; i < i1; i++)
                maxid = t[i] > maxid ? t[i] : maxid;
        } else {
            const uint32_t *t = (const void *)s->tokens;
            for (size_t i = i0; i < i1; i++)
                maxid = t[i] > maxid ? t[i] : maxid;
        }
        up_map_drop(s->map, s->map_bytes, s->tokens + i0 * (size_t)s->token_bytes,
                    (i1 - i0) * (size_t)s->token_bytes);
    }
    if (maxid >= (uint32_t)vocab) {
        size_t i = 0;
        while (i + 1 < s->ntok && shard_token(s, i) < (uint32_t)vocab)
            i++;
        up_errf(err, errlen, path,
                "token %u at position %zu is >= vocab_size %d: the data was made for another "
                "tokenizer",
                shard_token(s, i), i, vocab);
        goto done;
    }
    rc = 0;
done:
    if (rc != 0) shard_close(s);
    return rc;
}

int shard_contains(const token_shard *s, uint32_t tok) {
    const size_t chunk = MAP_SCAN_BYTES / (size_t)s->token_bytes;
    int found = 0;
    for (size_t i0 = 0; i0 < s->ntok && !found; i0 += chunk) { /* as shard_open's scan */
        size_t i1 = s->ntok - i0 < chunk ? s->ntok : i0 + chunk;
        for (size_t i = i0; i < i1 && !found; i++)
            found = shard_token(s, i) == tok;
        up_map_drop(s->map, s->map_bytes, s->tokens + i0 * (size_t)s->token_bytes,
                    (i1 - i0) * (size_t)s->token_bytes);
    }
    return found;
}

void shard_read(const token_shard *s, size_t start, size_t n, int32_t *out) {
    size_t pos = start % s->ntok;
    size_t i = 0;
    while (i < n) {
        size_t run = s->ntok - pos; /* contiguous tokens before the wrap */
        if (run > n - i) run = n - i;
        if (s->token_bytes == 2) {
            const uint16_t *t = (const uint16_t *)(const void *)s->tokens + pos;
            for (size_t j = 0; j < run; j++)
                out[i + j] = (int32_t)t[j];
        } else {
            const uint32_t *t = (const uint32_t *)(const void *)s->tokens + pos;
            for (size_t j = 0; j < run; j++)
                out[i + j] = (int32_t)t[j];
        }
        up_map_drop(s->map, s->map_bytes, s->tokens + pos * (size_t)s->token_bytes,
                    run * (size_t)s->token_bytes);
        i += run;
        pos = 0;
    }
}

int shard_write(const char *path, const uint32_t *tokens, size_t n, char *err, size_t errlen) {
    if (n == 0) return up_errf(err, errlen, path, "no tokens to write: a shard needs at least one");
    if (n > (size_t)INT32_MAX)
        return up_errf(err, errlen, path,
                       "%zu tokens do not fit one shard (the header count is int32): split "
                       "the data",
                       n);
    uint32_t maxid = 0;
    for (size_t i = 0; i < n; i++)
        maxid = tokens[i] > maxid ? tokens[i] : maxid;
    if (maxid > (uint32_t)INT32_MAX)
        return up_errf(err, errlen, path, "token id %u does not fit an int32", maxid);
    int tb = maxid < 65536 ? 2 : 4;
    size_t bytes = SHARD_HEADER_BYTES + n * (size_t)tb;
    uint8_t *buf = calloc(1, bytes);
    if (buf == NULL) return up_errf(err, errlen, path, "out of memory for a %zu-byte shard", bytes);
    int32_t hdr[3] = {tb == 2 ? SHARD_MAGIC_U16 : SHARD_MAGIC_U32,
                      tb == 2 ? SHARD_VERSION_U16 : SHARD_VERSION_U32, (int32_t)n};
    memcpy(buf, hdr, sizeof hdr);
    if (tb == 2) {
        uint16_t *t = (uint16_t *)(void *)(buf + SHARD_HEADER_BYTES);
        for (size_t i = 0; i < n; i++)
            t[i] = (uint16_t)tokens[i];
    } else {
        memcpy(buf + SHARD_HEADER_BYTES, tokens, n * 4);
    }
    int rc = up_write_file_atomic(path, buf, bytes, err, errlen);
    free(buf);
    return rc;
}
