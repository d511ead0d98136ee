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
/* Synthetic long-range recall corpus: records "k=v;" of random keys and values from a small
 * alphabet, where each key's value is stated once and asked again ("k?v;") `distance` tokens
 * later on average, so predicting the answer needs attention that reaches that far back. */
#define RECALL_KEY_TOKEN0 256u /* the first single-token key (--keys) */
typedef struct {
    size_t distance;     /* mean fact-question distance in tokens (>= 4) */
    size_t min_distance; /* > 0: distances spread over [min_distance, distance], as many per
                            octave; 0: distance +- 50% */
    uint64_t seed;       /* the corpus is a function of it */
    uint32_t key_tokens; /* > 0: one token per key, ids RECALL_KEY_TOKEN0 .. + key_tokens - 1;
                            0: keys of lowercase letters */
    int echo;            /* one-token keys: every record repeats its key after the value,
                            "=KVK;" / "?KVK;" */
} recall_spec;
/* n tokens of the corpus (malloc), deterministic in the spec. mask (n bytes, or NULL) gets 1 at
 * every answer V of a question and at every echoed key, 0 elsewhere: the loss mask that trains
 * on what the lookup predicts. NULL when n == 0 or out of memory. */
uint32_t *corpus_make_recall(size_t n, const recall_spec *spec, uint8_t *mask);
/* The fewest one-token keys for spec (`--keys`): four times the questions open at once on
 * average. With fewer, questions would often be asked early: when half the keys are open the
 * generator asks the earliest open question before it is due. */
uint64_t corpus_recall_min_keys(const recall_spec *spec);

#endif
