/* data.c — llm.c token shards (read via mmap, write atomically) and the `upipe data` corpora. */
#include "io/data.h"

#include "core/check.h"
#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define SHARD_VERSION_U16 1
#define SHARD_VERSION_U32 7


/* ---- shards ------------------------------------------------------------------------------ */

static inline uint32_t shard_token(const token_shard *s, size_t i) {
    if (s->token_bytes == 2) return ((const uint16_t *)(const void *)s->tokens)[i];
    return ((const uint32_t *)(const void *)s->tokens)[i];
}

void shard_close(token_shard *s) {
    if (s == NULL) return;
    if (s->map != NULL) munmap((void *)s->map, s->map_bytes);
    memset(s, 0, sizeof *s);
}

int shard_open(token_shard *s, const char *path, int vocab, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (vocab <= 0) return up_errf(err, errlen, path, "vocab_size %d is not positive", vocab);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return up_errf(err, errlen, path,
                         "cannot open (%s): check the path, or make a shard "
                         "with `upipe data`",
                         strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return up_errf(err, errlen, path, "not a regular file");
    }
    size_t size = (size_t)sb.st_size;
    if (size < SHARD_HEADER_BYTES) {
        close(fd);
        return up_errf(err, errlen, path,
                         "file is %zu bytes, smaller than the %d-byte shard header: the file is "
                         "truncated or not an llm.c token shard",
                         size, SHARD_HEADER_BYTES);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) return up_errf(err, errlen, path, "mmap failed (%s)", strerror(errno));
    s->map = map;
    s->map_bytes = size;
    const int32_t *hdr = map;
    int rc = -1;
    if (hdr[0] == SHARD_MAGIC_U16) {
        if (hdr[1] != SHARD_VERSION_U16) {
            up_errf(err, errlen, path,
                      "magic %d with version %d (expected %d): unsupported shard version; "
                      "regenerate it",
                      hdr[0], hdr[1], SHARD_VERSION_U16);
            goto done;
        }
        s->token_bytes = 2;
    } else if (hdr[0] == SHARD_MAGIC_U32) {
        if (hdr[1] != SHARD_VERSION_U32) {
            up_errf(err, errlen, path,
                      "magic %d with version %d (expected %d): unsupported shard version; "
                      "regenerate it",
                      hdr[0], hdr[1], SHARD_VERSION_U32);
            goto done;
        }
        s->token_bytes = 4;
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
    if (s->token_bytes == 2) {
        const uint16_t *t = (const void *)s->tokens;
        for (size_t i = 0; i < s->ntok; i++)
            maxid = t[i] > maxid ? t[i] : maxid;
    } else {
        const uint32_t *t = (const void *)s->tokens;
        for (size_t i = 0; i < s->ntok; i++)
            maxid = t[i] > maxid ? t[i] : maxid;
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
        i += run;
        pos = 0;
    }
}

int shard_write(const char *path, const uint32_t *tokens, size_t n, char *err, size_t errlen) {
    if (n == 0)
        return up_errf(err, errlen, path, "no tokens to write: a shard needs at least one");
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
    if (buf == NULL)
        return up_errf(err, errlen, path, "out of memory for a %zu-byte shard", bytes);
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

/* ---- corpora ----------------------------------------------------------------------------- */

uint32_t *data_tokenize_bytes(const char *path, size_t *n, char *err, size_t errlen) {
    *n = 0;
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        up_errf(err, errlen, path, "cannot open (%s): check the path", strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *bytes = malloc(cap);
    int ok = bytes != NULL;
    while (ok) {
        if (len == cap) {
            uint8_t *nb = cap <= SIZE_MAX / 2 ? realloc(bytes, cap * 2) : NULL;
            if (nb == NULL) {
                ok = 0;
                break;
            }
            bytes = nb;
            cap *= 2;
        }
        size_t r = fread(bytes + len, 1, cap - len, fp);
        len += r;
        if (r == 0) break;
    }
    int rd_err = ferror(fp);
    fclose(fp);
    uint32_t *tok = NULL;
    if (!ok)
        up_errf(err, errlen, path, "out of memory reading the file");
    else if (rd_err)
        up_errf(err, errlen, path, "read error");
    else if (len == 0)
        up_errf(err, errlen, path, "the file is empty: nothing to tokenize");
    else if ((tok = malloc(len * sizeof *tok)) == NULL)
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

static void heap_push(recall_item *h, size_t *n, recall_item x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].due <= x.due) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static recall_item heap_pop(recall_item *h, size_t *n) {
    recall_item top = h[0], x = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].due < h[c].due) c++;
        if (x.due <= h[c].due) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = x;
    return top;
}

#define RECALL_KEY_SYMBOLS 26 /* 'a'..'z' */
#define RECALL_MAX_KEY_LEN 6
static const char recall_values[17] = "0123456789ABCDEF"; /* 16 value symbols */

/* The recall corpus. Records are "key=V;" (a fact) and "key?V;" (its question), keys of klen
 * lowercase letters, values one of 16 symbols. Each fact's question is due `distance` tokens
 * later, jittered by +-50% so the gap is not a fixed offset a model could count. A record slot
 * holds the earliest due question if one is due, else a new fact about a key with no open
 * question, so a key is never restated between its fact and its question and the answer is
 * unambiguous. Open questions never exceed 1.5 * distance / record length (a push happens only
 * when nothing is due, so every open fact was pushed within the last gap + jitter slots); klen
 * grows with distance so that under ~1/5 of the key space is open at once. */
uint32_t *data_make_recall(size_t n, size_t distance, uint64_t seed) {
    if (n == 0) return NULL;
    if (distance < 4) distance = 4;
    if (distance > ((size_t)1 << 26)) distance = (size_t)1 << 26;
    int klen = 1;
    uint64_t nkeys = RECALL_KEY_SYMBOLS;
    while (klen < RECALL_MAX_KEY_LEN && nkeys < 2 * (uint64_t)distance + 64) {
        klen++;
        nkeys *= RECALL_KEY_SYMBOLS;
    }
    size_t rec = (size_t)klen + 3;             /* key, '=' or '?', value, ';' */
    uint64_t gap = (distance + rec - 1) / rec; /* in records */
    uint64_t jitter = gap / 2;

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
    uint64_t rng = seed;
    size_t nheap = 0, pos = 0;
    for (uint64_t slot = 0; pos < n; slot++) {
        uint8_t recbuf[RECALL_MAX_KEY_LEN + 3];
        recall_item it;
        uint8_t sep;
        if (nheap > 0 && heap[0].due <= slot) {
            it = heap_pop(heap, &nheap);
            open_keys[it.key / 8] &= (uint8_t) ~(1u << (it.key % 8));
            sep = '?';
        } else {
            /* under 1/5 of the keys are open, so this takes ~1.2 draws on average */
            do
                it.key = (uint32_t)rand_below(&rng, nkeys);
            while (open_keys[it.key / 8] & (1u << (it.key % 8)));
            it.value = (uint32_t)rand_below(&rng, 16);
            it.due = slot + gap - jitter + rand_below(&rng, 2 * jitter + 1);
            UP_CHECK(nheap < heap_cap, "recall: %zu open questions exceed the bound %zu", nheap,
                     heap_cap);
            open_keys[it.key / 8] |= (uint8_t)(1u << (it.key % 8));
            heap_push(heap, &nheap, it);
            sep = '=';
        }
        uint32_t k = it.key;
        for (int c = klen - 1; c >= 0; c--) {
            recbuf[c] = (uint8_t)('a' + k % RECALL_KEY_SYMBOLS);
            k /= RECALL_KEY_SYMBOLS;
        }
        recbuf[klen] = sep;
        recbuf[klen + 1] = (uint8_t)recall_values[it.value];
        recbuf[klen + 2] = ';';
        for (size_t c = 0; c < rec && pos < n; c++)
            out[pos++] = recbuf[c];
    }
    free(open_keys);
    free(heap);
    return out;
}

/* ---- `upipe data` ------------------------------------------------------------------------ */

static const char data_usage[] =
    "usage:\n"
    "  upipe data text   --input FILE --output SHARD.bin\n"
    "  upipe data recall --output SHARD.bin --tokens N [--distance D] [--seed S]\n"
    "\n"
    "Writes an llm.c token shard (uint16 tokens) with a byte-level vocabulary: token ids are\n"
    "byte values 0..255, so the model's vocab_size must be at least 256.\n"
    "\n"
    "  text      every byte of FILE becomes one token.\n"
    "  recall    a synthetic long-range recall corpus: facts \"key=V;\" and, about D tokens\n"
    "            later, questions \"key?V;\" whose answer V only the earlier fact reveals.\n"
    "\n"
    "flags:\n"
    "  --input FILE     (text) the text file to tokenize\n"
    "  --output PATH    the shard to write (written atomically: temp file, then rename)\n"
    "  --tokens N       (recall) number of tokens to generate, N >= 16\n"
    "  --distance D     (recall) average tokens between a fact and its question\n"
    "                   (default min(512, N/2); 4 <= D <= N/2)\n"
    "  --seed S         (recall) random seed, the corpus is a function of it (default 1)\n"
    "  --help           this text\n";

static int data_error(const char *fmt, ...) UP_PRINTF(1, 2);
static int data_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "upipe: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static int parse_u64(const char *s, uint64_t *out) {
    if (s == NULL || *s < '0' || *s > '9') return -1;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') return -1;
    *out = v;
    return 0;
}

int data_main(int argc, char **argv) {
    if (argc < 2) {
        return data_error("data: missing subcommand: use `upipe data text` or "
                          "`upipe data recall` (see --help)");
    }
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) {
        fputs(data_usage, stdout);
        return 0;
    }
    int is_text = strcmp(sub, "text") == 0, is_recall = strcmp(sub, "recall") == 0;
    if (!is_text && !is_recall)
        return data_error("data: unknown subcommand \"%s\": use \"text\" or \"recall\" "
                          "(see --help)",
                          sub);
    const char *input = NULL, *output = NULL;
    uint64_t ntok = 0, distance = 0, seed = 1;
    int have_tokens = 0, have_distance = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(data_usage, stdout);
            return 0;
        }
        /* --flag value or --flag=value */
        const char *val = NULL;
        char flag[64];
        const char *eq = strchr(a, '=');
        if (strncmp(a, "--", 2) == 0 && eq != NULL && (size_t)(eq - a) < sizeof flag) {
            memcpy(flag, a, (size_t)(eq - a));
            flag[eq - a] = '\0';
            val = eq + 1;
        } else {
            snprintf(flag, sizeof flag, "%s", a);
            if (i + 1 < argc)
                val = argv[++i];
            else
                return data_error("data: flag %s needs a value (see --help)", a);
        }
        if (is_text && strcmp(flag, "--input") == 0)
            input = val;
        else if (strcmp(flag, "--output") == 0)
            output = val;
        else if (is_recall && strcmp(flag, "--tokens") == 0) {
            if (parse_u64(val, &ntok) != 0)
                return data_error("data: --tokens \"%s\" is not a positive integer", val);
            have_tokens = 1;
        } else if (is_recall && strcmp(flag, "--distance") == 0) {
            if (parse_u64(val, &distance) != 0)
                return data_error("data: --distance \"%s\" is not a positive integer", val);
            have_distance = 1;
        } else if (is_recall && strcmp(flag, "--seed") == 0) {
            if (parse_u64(val, &seed) != 0)
                return data_error("data: --seed \"%s\" is not a non-negative integer", val);
        } else
            return data_error("data %s: unknown flag \"%s\" (see upipe data --help)", sub, flag);
    }
    if (output == NULL)
        return data_error("data %s: --output is required: name the shard to write", sub);

    char err[1024];
    uint32_t *tok = NULL;
    size_t n = 0;
    if (is_text) {
        if (input == NULL) return data_error("data text: --input is required: name the text file");
        tok = data_tokenize_bytes(input, &n, err, sizeof err);
        if (tok == NULL) return data_error("%s", err);
    } else {
        if (!have_tokens)
            return data_error("data recall: --tokens is required: say how many tokens to "
                              "generate");
        if (ntok < 16 || ntok > (uint64_t)INT32_MAX)
            return data_error("data recall: --tokens %llu is out of range: use 16 .. %d",
                              (unsigned long long)ntok, INT32_MAX);
        if (!have_distance) distance = ntok / 2 < 512 ? ntok / 2 : 512;
        if (distance < 4 || distance > ntok / 2 || distance > ((uint64_t)1 << 26))
            return data_error("data recall: --distance %llu is out of range: use 4 .. "
                              "min(tokens/2, 2^26) so that questions fit in the corpus",
                              (unsigned long long)distance);
        n = (size_t)ntok;
        tok = data_make_recall(n, (size_t)distance, seed);
        if (tok == NULL) return data_error("data recall: out of memory for %zu tokens", n);
    }
    int rc = shard_write(output, tok, n, err, sizeof err);
    free(tok);
    if (rc != 0) return data_error("%s", err);
    char sz[32];
    up_fmt_bytes(sz, sizeof sz, (double)(SHARD_HEADER_BYTES + 2 * n)); /* bytes: uint16 format */
    if (is_text)
        printf("upipe data: wrote %zu tokens (bytes of %s) to %s (%s)\n", n, input, output, sz);
    else
        printf("upipe data: wrote %zu tokens (recall, distance %llu, seed %llu) to %s (%s)\n", n,
               (unsigned long long)distance, (unsigned long long)seed, output, sz);
    return 0;
}
