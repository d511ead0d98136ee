/* mask.h — loss-mask shards: one byte per token of a token shard (io/shard.h), 1 where that
 * token counts as a target of the loss, 0 where it does not.
 *
 * Format: 256 int32 header (header[0] magic 20261201, header[1] version 1, header[2] token
 * count), then `count` bytes, each 0 or 1. Byte t belongs to token t of the data shard: it says
 * whether predicting token t (from the tokens before it) counts, so a separator token, a prompt
 * or a user message gets 0 and a response gets 1. The mask is only meaningful next to the shard
 * it was written with (same count, same order). */
#ifndef UP_MASK_H
#define UP_MASK_H

#include <stddef.h>
#include <stdint.h>

#define MASK_MAGIC 20261201
#define MASK_VERSION 1
#define MASK_HEADER_BYTES 1024 /* 256 int32, as in token shards */

typedef struct {
    const void *map; /* whole file mapping */
    size_t map_bytes;
    const uint8_t *bytes; /* (n) 0 or 1 */
    size_t n;
} mask_shard;

/* Maps and validates the mask at path: magic, version, count >= 1, file size == 1024 + count,
 * count == expected_count (the token count of the data shard it goes with; 0 skips this check),
 * every byte 0 or 1 (the first bad offset is reported). 0, or -1 with err (m is left closed).
 * Pair with mask_close. */
int mask_open(mask_shard *m, const char *path, size_t expected_count, char *err, size_t errlen);
/* Unmaps; safe on a closed or zeroed mask. */
void mask_close(mask_shard *m);
/* dst[i] = mask byte at (start + i) mod n, for i in [0, count): the same wrap-around as
 * shard_read, so one start position reads aligned tokens and mask bytes. dst: (count) bytes,
 * overwritten. */
void mask_read(const mask_shard *m, size_t start, size_t count, uint8_t *dst);

/* Writes a mask of n bytes (each 0 or 1, 1 <= n <= INT32_MAX) atomically (temp file + rename).
 * 0, or -1 with err. */
int mask_write(const char *path, const uint8_t *bytes, size_t n, char *err, size_t errlen);

#endif
