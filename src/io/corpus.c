/* corpus.c — the byte-level corpora of `upipe data`: a text file's bytes, and the synthetic
 * long-range recall corpus. */
#include "io/corpus.h"

#include "core/check.h"
#include "core/heap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint8_t *corpus_read_bytes(const char *path, size_t *len, char *err, size_t errlen) {
    *len = 0;
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        up_errf(err, errlen, path, "cannot open (%s): check the path", strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *bytes = malloc(cap);
    int ok = bytes != NULL;
    while (ok) {
        if (n == cap) {
            uint8_t *nb = cap <= SIZE_MAX / 2 ? realloc(bytes, cap * 2) : NULL;
            if (nb == NULL) {
                ok = 0;
                break;
            }
            bytes = nb;
            cap *= 2;
        }
        size_t r = fread(bytes + n, 1, cap - n, fp);
        n += r;
        if (r == 0) break;
    }
    int rd_err = ferror(fp);
    fclose(fp);
    if (!ok)
        up_errf(err, errlen, path, "out of memory reading the file");
    else if (rd_err)
        up_errf(err, errlen, path, "read error");
    else if (n == 0)
        up_errf(err, errlen, path, "the file is empty: nothing to tokenize");
    else {
        *len = n;
        return bytes;
    }
    free(bytes);
    return NULL;
}

uint32_t *corpus_tokenize_bytes(const char *path, size_t *n, char *err, size_t errlen) {
    *n = 0;
    size_t len = 0;
    uint8_t *bytes = corpus_read_bytes(path, &len, err, errlen);
    if (bytes == NULL) return NULL;
    uint32_t *tok = malloc(len * sizeof *tok);
    if (tok == NULL)
        up_errf(err, errlen, path, "out of memory for %zu tokens", len);
    else {
        for (size_t i = 0; i < len; i++)
            tok[i] = bytes[i];
        *n = len;
    }
    free(bytes);
    return tok;
}

/* splitmix64: a small, well-mixed generator; the corpus depends only on the seed. */
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, m), m < 2^32 (multiply-shift; the bias is below 2^-32). */
static uint64_t rand_below(uint64_t *state, uint64_t m) {
    return ((splitmix64(state) >> 32) * m) >> 32;
}

/* A pending question: fact stated, to be asked at record slot `due`. */
typedef struct {
    uint64_t due;
    uint32_t key;
    uint32_t value;
} recall_item;

/* The open questions, earliest due first. */
static int recall_due_less(recall_item a, recall_item b) {
    return a.due < b.due;
}
UP_HEAP_DEFINE(recall_heap, recall_item, recall_due_less)

#define RECALL_KEY_SYMBOLS 26 /* 'a'..'z' */
#define RECALL_MAX_KEY_LEN 6
static const char recall_values[17] = "0123456789ABCDEF"; /* 16 value symbols */

/* The recall corpus. Records are "key=V;" (a fact) and "key?V;" (its question), keys of klen
 * lowercase letters (or "=KV;" / "?KV;" with one-token keys K, "=KVK;" / "?KVK;" with the echo),
 * values one of 16 symbols.
 * Each fact's question is due `distance` tokens later, jittered by +-50% so the gap is not a
 * fixed offset a model could count; with min_distance > 0 the distance is drawn from the octaves
 * [min_distance, 2 min_distance), [2 min_distance, 4 min_distance) ... up to `distance`, each
 * octave as likely and uniform within it (about log-uniform: as many facts asked at 16-32
 * tokens as at 1024-2048). A record slot holds the earliest due question if one is due, else a
 * new fact about a key with no open question, so a key is never restated between its fact and
 * its question and the answer is unambiguous. Open questions never exceed 1.5 * distance /
 * record length (a push happens only when nothing is due, so every open fact was pushed within
 * the last gap + jitter slots); klen grows with distance so that under ~1/5 of the key space is
 * open at once. */
static uint64_t recall_draw_gap(uint64_t *rng, size_t rec, uint64_t distance,
                                uint64_t min_distance) {
    uint64_t gap = (distance + rec - 1) / rec; /* in records */
    if (min_distance == 0) {
        uint64_t jitter = gap / 2;
        return gap - jitter + rand_below(rng, 2 * jitter + 1);
    }
    int octaves = 1;
    while ((min_distance << octaves) < distance)
        octaves++;
    uint64_t lo = min_distance << rand_below(rng, (uint64_t)octaves);
    uint64_t hi = 2 * lo < distance ? 2 * lo : distance;
    uint64_t d = lo + rand_below(rng, hi - lo + 1);
    uint64_t g = (d + rec / 2) / rec;
    return g > 0 ? g : 1;
}

uint32_t *corpus_make_recall(size_t n, const recall_spec *spec, uint8_t *mask) {
    if (n == 0) return NULL;
    size_t distance = spec->distance, min_distance = spec->min_distance;
    uint32_t key_tokens = spec->key_tokens;
    int echo = key_tokens > 0 && spec->echo;
    if (distance < 4) distance = 4;
    if (distance > ((size_t)1 << 26)) distance = (size_t)1 << 26;
    if (min_distance > distance) min_distance = distance;
    int klen = 1;
    uint64_t nkeys = RECALL_KEY_SYMBOLS;
    if (key_tokens > 0)
        nkeys = key_tokens; /* one token per key: ids RECALL_KEY_TOKEN0 .. + key_tokens - 1 */
    else
        while (klen < RECALL_MAX_KEY_LEN && nkeys < 2 * (uint64_t)distance + 64) {
            klen++;
            nkeys *= RECALL_KEY_SYMBOLS;
        }
    size_t rec = (size_t)klen + 3 + (size_t)echo; /* key, '=' or '?', value, (key,) ';' */
    uint64_t gap = (distance + rec - 1) / rec;    /* in records */
    uint64_t jitter = min_distance > 0 ? 0 : gap / 2;

    uint32_t *out = malloc(n * sizeof *out);
    uint8_t *open_keys =
        calloc((size_t)(nkeys + 7) / 8, 1);       /* bitset of keys with a question due */
    size_t heap_cap = (size_t)(gap + jitter) + 2; /* open questions never exceed this */
    recall_item *heap = malloc(heap_cap * sizeof *heap);
    if (out == NULL || open_keys == NULL || heap == NULL) {
        free(out);
        free(open_keys);
        free(heap);
        return NULL;
    }
    uint64_t rng = spec->seed;
    size_t nheap = 0, pos = 0;
    for (uint64_t slot = 0; pos < n; slot++) {
        uint8_t recbuf[RECALL_MAX_KEY_LEN + 3];
        recall_item it;
        uint8_t sep;
        /* the earliest open question is asked when due, or early when half the keys are open
         * (rare with --keys >= corpus_recall_min_keys; it keeps the key draw below short) */
        if (nheap > 0 && (heap[0].due <= slot || 2 * (uint64_t)nheap >= nkeys)) {
            it = recall_heap_pop(heap, &nheap);
            open_keys[it.key / 8] &= (uint8_t) ~(1u << (it.key % 8));
            sep = '?';
        } else {
            /* under half the keys are open, so this takes under 2 draws on average */
            do
                it.key = (uint32_t)rand_below(&rng, nkeys);
            while (open_keys[it.key / 8] & (1u << (it.key % 8)));
            it.value = (uint32_t)rand_below(&rng, 16);
            it.due = slot + recall_draw_gap(&rng, rec, distance, min_distance);
            UP_CHECK(nheap < heap_cap, "recall: %zu open questions exceed the bound %zu", nheap,
                     heap_cap);
            open_keys[it.key / 8] |= (uint8_t)(1u << (it.key % 8));
            recall_heap_push(heap, &nheap, it);
            sep = '=';
        }
        uint32_t k = it.key;
        uint32_t keytok = RECALL_KEY_TOKEN0 + k;
        if (key_tokens > 0) {
            const uint32_t value = (uint8_t)recall_values[it.value];
            const uint32_t r[5] = {sep, keytok, value, echo ? keytok : ';', ';'};
            for (size_t c = 0; c < rec && pos < n; c++, pos++) {
                out[pos] = r[c];
                if (mask != NULL) mask[pos] = (uint8_t)((sep == '?' && c == 2) || (echo && c == 3));
            }
            continue;
        }
        for (int c = klen - 1; c >= 0; c--) {
            recbuf[c] = (uint8_t)('a' + k % RECALL_KEY_SYMBOLS);
            k /= RECALL_KEY_SYMBOLS;
        }
        recbuf[klen] = sep;
        recbuf[klen + 1] = (uint8_t)recall_values[it.value];
        recbuf[klen + 2] = ';';
        for (size_t c = 0; c < rec && pos < n; c++, pos++) {
            out[pos] = recbuf[c];
            if (mask != NULL) mask[pos] = (uint8_t)(sep == '?' && c == (size_t)klen + 1);
        }
    }
    free(open_keys);
    free(heap);
    return out;
}

uint64_t corpus_recall_min_keys(const recall_spec *spec) {
    uint64_t rec = 4 + (uint64_t)(spec->echo != 0), d = spec->distance, m = spec->min_distance;
    double mean = (double)d; /* fixed distance: its mean is D */
    if (m > 0 && m < d) {    /* the mean of the octaves' midpoints, as recall_draw_gap draws */
        int octaves = 1;
        while ((m << octaves) < d)
            octaves++;
        double sum = 0;
        for (int o = 0; o < octaves; o++) {
            uint64_t lo = m << o, hi = 2 * lo < d ? 2 * lo : d;
            sum += 0.5 * (double)(lo + hi);
        }
        mean = sum / octaves;
    }
    /* about half the record slots state a fact, so mean / rec / 2 questions are open on
     * average; four times that keeps "half the keys open" (an early question) rare */
    return 2 * (uint64_t)(mean / (double)rec + 0.5) + 8;
}
