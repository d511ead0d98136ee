/* data.h — llm.c token shards and the corpora `upipe data` writes.
 *
 * Shard format: 256 int32 header (header[0] magic, header[1] version, header[2] token count),
 * then the tokens: magic 20240520 version 1 = uint16 tokens; magic 20240801 version 7 = uint32.
 * shard_open validates: header readable, magic/version pair known, file size equal to
 * 1024 + count * token size, count >= 1, every token id < vocab. The file is mapped read-only. */
#ifndef UP_DATA_H
#define UP_DATA_H

#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC_U16 20240520
#define SHARD_MAGIC_U32 20240801

typedef struct {
    const void *map;      /* whole file mapping */
    size_t map_bytes;
    const uint8_t *tokens; /* start of token data */
    size_t ntok;
    int token_bytes; /* 2 or 4 */
} token_shard;

int shard_open(token_shard *s, const char *path, int vocab, char *err, size_t errlen);
void shard_close(token_shard *s);
/* out[i] = token at (start + i) mod ntok, for i in [0, n). */
void shard_read(const token_shard *s, size_t start, size_t n, int32_t *out);

/* Writes a shard atomically (temp file + rename): uint16 format when every token < 65536,
 * else uint32. 0 or -1 with err. */
int shard_write(const char *path, const uint32_t *tokens, size_t n, char *err, size_t errlen);

/* `upipe data` corpora, byte-level vocabulary (ids 0..255; the config needs vocab_size >= 256). */
/* Every byte of a text file becomes one token. Returns tokens (malloc) and count, or NULL+err. */
uint32_t *data_tokenize_bytes(const char *path, size_t *n, char *err, size_t errlen);
/* Synthetic long-range recall corpus of n tokens from seed: records "k=v;" of random keys and
 * values from a small alphabet, where each key's value is stated once and asked again
 * ("k?v;") `distance` tokens later on average, so predicting the answer needs attention that
 * reaches that far back. Deterministic in seed. */
uint32_t *data_make_recall(size_t n, size_t distance, uint64_t seed);

/* Main of `upipe data ...` (argv[0] == "data"). Returns the process exit code. */
int data_main(int argc, char **argv);

#endif
