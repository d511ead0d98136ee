/* shard.h — llm.c token shards.
 *
 * Format: 256 int32 header (header[0] magic, header[1] version, header[2] token count), then the
 * tokens: magic 20240520 version 1 = uint16 tokens; magic 20240801 version 7 = uint32.
 * shard_open validates: header readable, magic/version pair known, file size equal to
 * 1024 + count * token size, count >= 1, every token id < vocab. The file is mapped read-only. */
#ifndef UP_SHARD_H
#define UP_SHARD_H

#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC_U16 20240520
#define SHARD_MAGIC_U32 20240801
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)

typedef struct {
    const void *map;       /* whole file mapping */
    size_t map_bytes;      /* the file's size at shard_open */
    int fd;                /* kept open for shard_check; -1 when closed */
    char *path;            /* for messages */
    const uint8_t *tokens; /* start of token data */
    size_t ntok;
    int token_bytes; /* 2 or 4 */
} token_shard;

/* Maps and validates the shard at path for a model of `vocab` tokens. 0, or -1 with err (the
 * shard is left closed). Pair with shard_close. */
int shard_open(token_shard *s, const char *path, int vocab, char *err, size_t errlen);
/* Unmaps; safe on a closed or zeroed shard. */
void shard_close(token_shard *s);
/* 0 when the file still has its size of shard_open, else -1 with "PATH changed size while the job
 * runs (was N bytes, now M): ..." in err. A file truncated under the mapping makes a read of the
 * lost pages raise SIGBUS, so a long job calls this before each step's reads. */
int shard_check(const token_shard *s, char *err, size_t errlen);
/* 1 when the token tok occurs in the shard, else 0: a scan that stops at the first occurrence
 * (at worst one pass like shard_open's, its pages dropped as it goes). */
int shard_contains(const token_shard *s, uint32_t tok);
/* out[i] = token at (start + i) mod ntok, for i in [0, n). out: (n) int32, overwritten. */
void shard_read(const token_shard *s, size_t start, size_t n, int32_t *out);

/* Writes a shard atomically (temp file + rename): uint16 format when every token < 65536,
 * else uint32. 0 or -1 with err. */
int shard_write(const char *path, const uint32_t *tokens, size_t n, char *err, size_t errlen);

#endif
