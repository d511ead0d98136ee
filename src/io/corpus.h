/* corpus.h — the corpora `upipe data` writes, byte-level vocabulary (ids 0..255; the config needs
 * vocab_size >= 256). Both return a malloc'd token array the caller frees. */
#ifndef UP_CORPUS_H
#define UP_CORPUS_H

#include <stddef.h>
#include <stdint.h>

/* The whole file's bytes (malloc) and their count *len; NULL with err when it cannot be read or
 * is empty. */
uint8_t *corpus_read_bytes(const char *path, size_t *len, char *err, size_t errlen);
/* Every byte of a text file becomes one token. Returns tokens (malloc) and count *n, or NULL
 * with err. */
uint32_t *corpus_tokenize_bytes(const char *path, size_t *n, char *err, size_t errlen);
/* Synthetic long-range recall corpus of n tokens from seed: records "k=v;" of random keys and
 * values from a small alphabet, where each key's value is stated once and asked again
 * ("k?v;") `distance` tokens later on average, so predicting the answer needs attention that
 * reaches that far back; with min_distance > 0 the distances spread over [min_distance,
 * distance], as many per octave. mask (n bytes, or NULL) gets 1 at every answer V of a question
 * and 0 elsewhere: the loss mask that trains on answers only. Deterministic in seed. NULL when
 * n == 0 or out of memory. */
#define RECALL_KEY_TOKEN0 256u /* the first single-token key (--keys) */
uint32_t *corpus_make_recall(size_t n, size_t distance, size_t min_distance, uint64_t seed,
                             uint32_t key_tokens, uint8_t *mask);

#endif
