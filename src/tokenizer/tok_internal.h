/* tok_internal.h — the loaded tokenizer's tables, shared by tok_load.c and tok_encode.c. */
#ifndef UP_TOK_INTERNAL_H
#define UP_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/tokenizer.h"

#include <pcre2.h>

#define SP_MARK "\xe2\x96\x81" /* U+2581 "▁", SentencePiece's word start */
#define TOK_MAX_IDS (1u << 24) /* ids beyond this are refused at load (no real vocabulary) */
#define TOK_MAX_AFFIX 8        /* post-processor tokens before/after a sequence */

typedef enum { TOK_BYTE_LEVEL, TOK_SENTENCEPIECE } tok_family;

typedef struct {
    uint64_t key; /* (left id << 32) | right id; UINT64_MAX: empty slot */
    uint32_t rank;
    int32_t id; /* the merged token */
} tok_merge_slot;

/* The per-piece cache the encoders of one tokenizer share (tok_shared.c). Keys are hashes with
 * the low bit set. */
typedef struct tok_shared tok_shared;
tok_shared *tok_shared_new(void);
void tok_shared_free(tok_shared *c);
void tok_shared_reset(tok_shared *c);
/* The ids of piece p[0, n) (hash h) and their count, or NULL; safe from any thread. */
const int32_t *tok_shared_find(tok_shared *c, uint64_t h, const char *p, size_t n, uint32_t *nids);
/* Puts the ids of piece p[0, n) (at most once; nothing when full); safe from any thread. */
void tok_shared_put(tok_shared *c, uint64_t h, const char *p, size_t n, const int32_t *ids,
                    uint32_t nids);

typedef struct {
    const char *s; /* content (into tokenizer.pool) */
    uint32_t len;
    int32_t id;
    int special;
} tok_added;

struct tokenizer {
    tok_family family;
    uint32_t nids; /* one past the largest id */
    /* id -> token bytes: byte-level tokens as raw bytes (the GPT-2 alphabet undone),
     * SentencePiece tokens as written (UTF-8 with "▁"); added tokens as their content */
    char *pool;
    size_t pool_len;
    uint32_t *tok_off, *tok_len; /* (nids); tok_len UINT32_MAX: no token with this id */
    int16_t *id_byte;            /* (nids) the byte of a byte-fallback token <0xXX>, else -1 */
    uint8_t *special;            /* (nids) 1: special added token */
    int32_t *vhash;              /* model vocabulary by bytes: ids, -1 empty */
    size_t vhash_mask;
    tok_merge_slot *mhash;
    size_t mhash_mask, nmerges;
    int32_t byte_id[256]; /* byte-level: the id of each byte; SP: <0xXX> ids or -1 */
    int ignore_merges, byte_fallback, fuse_unk;
    int32_t unk_id;
    /* normalizer */
    int nfc, sp_prepend, sp_replace;
    /* pre-tokenizer */
    pcre2_code *re; /* NULL: none */
    int add_prefix_space;
    int sp_split_safe; /* no merge result holds "▁" after a non-"▁" character */
    int regex_has_newline_run;
    int cut_newline; /* byte-level: "\n" then printable ASCII is a piece boundary */
    int cut_space;   /* SentencePiece-style: a space after a non-space is a cut */
    /* added tokens, longest first */
    tok_added *added;
    int nadded;
    uint8_t added_first[256]; /* bit 1: a special token starts with this byte, 2: a plain one */
    /* post-processor and decoder */
    int32_t prefix[TOK_MAX_AFFIX], suffix[TOK_MAX_AFFIX];
    int nprefix, nsuffix;
    int dec_strip; /* leading spaces the SentencePiece decoder strips */
    int32_t bos_id, eos_id;
    char desc[256];
    tok_shared *shared; /* the encoders' shared per-piece cache (written through a const
                           tokenizer: its own synchronisation, tok_shared.c) */
};

/* FNV-1a over bytes (the vocabulary table and the per-piece cache). */
static inline uint64_t tok_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static inline uint64_t tok_pair_hash(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return key;
}

/* The UTF-8 character at s[0, n) (n >= 1), by Unicode's well-formedness table (no overlong
 * form, surrogate or code point past U+10FFFF): its length, with *cp its code point; or, when ill
 * formed, minus the length of its maximal ill-formed subpart (at least 1: the bytes a lossy
 * decoder replaces by one U+FFFD, as Rust's String::from_utf8_lossy and WHATWG's TextDecoder),
 * with *cp = -1. */
static inline int tok_utf8_next(const uint8_t *s, size_t n, int32_t *cp) {
    uint8_t c = s[0];
    *cp = -1;
    if (c < 0x80) return *cp = c, 1;
    int len = c >= 0xC2 && c <= 0xDF   ? 2
              : c >= 0xE0 && c <= 0xEF ? 3
              : c >= 0xF0 && c <= 0xF4 ? 4
                                       : 0;
    if (len == 0) return -1;
    uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    uint8_t hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    int32_t v = c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((size_t)k >= n || s[k] < (k == 1 ? lo : 0x80) || s[k] > (k == 1 ? hi : 0xBF)) return -k;
        v = (v << 6) | (s[k] & 0x3F);
    }
    *cp = v;
    return len;
}

/* NFC as HF's Rust library computes it (tok_nfc.c): utf8proc's NFC, but for the characters the
 * library's Unicode 9.0 tables do not know (tok_nfc_table.c, generated by
 * tools/gen-nfc-unicode9.py), which stay as they are and part the text (class 0 for reordering,
 * no decomposition or composition). 1 with *out (malloc'd, the caller frees) and *out_n the
 * normalized s[0, n); 0 when s is not valid UTF-8 (nothing written: HF cannot take it, and the
 * text is left as it is); -1 when out of memory. */
int tok_nfc(const char *s, size_t n, char **out, size_t *out_n);
extern const uint32_t tok_nfc_unknown[][2]; /* ranges [lo, hi] in ascending order */
extern const size_t tok_nfc_nunknown;
extern const char tok_nfc_unicode[]; /* the Unicode version of the utf8proc it was made with */

/* Loading (tok_load.c reads the model, tok_stages.c the stages around it). Each stage loader
 * reads one member of tokenizer.json (NULL or null: none) into t, or returns -1 with a line in
 * err naming what is not supported. tok_load_pretok sets *byte_level when a ByteLevel
 * pre-tokenizer is present; tok_load_decoder needs t->family. */
struct json_t;
const char *tok_jstr(const struct json_t *o, const char *key); /* member key's string, or NULL */
int tok_load_normalizer(tokenizer *t, const struct json_t *n, char *err, size_t errlen);
int tok_load_pretok(tokenizer *t, const struct json_t *p, int *byte_level, char *err,
                    size_t errlen);
int tok_load_post(tokenizer *t, const struct json_t *p, char *err, size_t errlen);
int tok_load_decoder(tokenizer *t, const struct json_t *d, char *err, size_t errlen);

/* The model vocabulary's id of bytes s[0, n), or -1. */
int32_t tok_vocab_find(const tokenizer *t, const char *s, size_t n);
/* The merge of (a, b): its rank and merged id, or -1 when none. */
static inline int tok_merge_find(const tokenizer *t, int32_t a, int32_t b, uint32_t *rank,
                                 int32_t *id) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = tok_pair_hash(key) & t->mhash_mask;; i = (i + 1) & t->mhash_mask) {
        const tok_merge_slot *m = &t->mhash[i];
        if (m->key == key) {
            *rank = m->rank;
            *id = m->id;
            return 0;
        }
        if (m->key == UINT64_MAX) return -1;
    }
}

#endif
