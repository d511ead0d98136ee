/* tok_load.c — reads tokenizer.json (jansson) into the tables of tok_internal.h, refusing what
 * HF would do differently from this implementation. */
#include "tokenizer/tok_internal.h"

#include "core/check.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* GPT-2's bytes_to_unicode, inverted: code point -> byte, or -1. */
static int bl_byte_of(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp < 256 || cp >= 256 + 68) return -1;
    /* 256 + n is the n-th byte not printable above: 0..32, 127..160, 173 */
    int n = (int)(cp - 256);
    if (n <= 32) return n;
    if (n <= 32 + 34) return 127 + (n - 33);
    return 173;
}

/* s in the GPT-2 alphabet -> raw bytes into out (capacity >= n). Its length, or -1 when s holds
 * a character outside the alphabet. */
static long bl_unmap(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        int k = tok_utf8_next((const uint8_t *)s + i, n - i, &cp);
        int b = k < 0 ? -1 : bl_byte_of((uint32_t)cp);
        if (b < 0) return -1;
        i += (size_t)k;
        out[o++] = (char)b;
    }
    return (long)o;
}

int32_t tok_vocab_find(const tokenizer *t, const char *s, size_t n) {
    for (size_t i = tok_hash(s, n) & t->vhash_mask;; i = (i + 1) & t->vhash_mask) {
        int32_t id = t->vhash[i];
        if (id < 0) return -1;
        if (t->tok_len[id] == n && memcmp(t->pool + t->tok_off[id], s, n) == 0) return id;
    }
}

static size_t pow2_at_least(size_t n) {
    size_t p = 16;
    while (p < n)
        p <<= 1;
    return p;
}

/* Appends bytes to the pool; returns their offset. */
static int pool_add(tokenizer *t, size_t *cap, const char *s, size_t n, uint32_t *off) {
    if (t->pool_len + n + 1 > *cap) {
        size_t nc = (*cap ? *cap * 2 : 1 << 20) + n + 1;
        char *p = realloc(t->pool, nc);
        if (p == NULL) return -1;
        t->pool = p;
        *cap = nc;
    }
    if (t->pool_len + n > UINT32_MAX) return -1;
    *off = (uint32_t)t->pool_len;
    memcpy(t->pool + t->pool_len, s, n);
    t->pool_len += n;
    t->pool[t->pool_len] = '\0';
    return 0;
}

void tok_free(tokenizer *t) {
    if (t == NULL) return;
    free(t->pool);
    free(t->tok_off);
    free(t->tok_len);
    free(t->id_byte);
    free(t->special);
    free(t->vhash);
    free(t->mhash);
    free(t->added);
    if (t->re != NULL) pcre2_code_free(t->re);
    tok_shared_free(t->shared);
    free(t);
}

static int cmp_added(const void *a, const void *b) {
    const tok_added *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* A token's bytes for the vocabulary table: raw bytes for byte-level, as written otherwise. */
static int vocab_put(tokenizer *t, size_t *pool_cap, const char *s, size_t n, int32_t id,
                     char *scratch) {
    const char *b = s;
    size_t bn = n;
    if (t->family == TOK_BYTE_LEVEL) {
        long r = bl_unmap(s, n, scratch);
        if (r >= 0) { /* else kept as written: no merge or byte can produce it */
            b = scratch;
            bn = (size_t)r;
        }
    }
    if (pool_add(t, pool_cap, b, bn, &t->tok_off[id]) != 0) return -1;
    t->tok_len[id] = (uint32_t)bn;
    for (size_t i = tok_hash(b, bn) & t->vhash_mask;; i = (i + 1) & t->vhash_mask) {
        if (t->vhash[i] < 0) {
            t->vhash[i] = id;
            break;
        }
        int32_t o = t->vhash[i];
        if (t->tok_len[o] == bn && memcmp(t->pool + t->tok_off[o], b, bn) == 0) break;
    }
    return 0;
}

/* The id of merge part s (in its JSON spelling), or -1. */
static int32_t merge_part(const tokenizer *t, const char *s, size_t n, char *scratch) {
    if (t->family == TOK_BYTE_LEVEL) {
        long r = bl_unmap(s, n, scratch);
        if (r < 0) return -1;
        return tok_vocab_find(t, scratch, (size_t)r);
    }
    return tok_vocab_find(t, s, n);
}

static int load_merges(tokenizer *t, const json_t *merges, char *err, size_t errlen) {
    size_t nm = json_array_size(merges);
    t->mhash_mask = pow2_at_least(nm * 2 + 1) - 1;
    t->mhash = malloc((t->mhash_mask + 1) * sizeof *t->mhash);
    char *sa = malloc(4096), *sb = malloc(4096), *cat = malloc(8192);
    if (t->mhash == NULL || sa == NULL || sb == NULL || cat == NULL) {
        free(sa), free(sb), free(cat);
        return up_errf(err, errlen, NULL, "out of memory for %zu merges", nm);
    }
    memset(t->mhash, 0xff, (t->mhash_mask + 1) * sizeof *t->mhash);
    int rc = -1;
    for (size_t r = 0; r < nm; r++) {
        const json_t *m = json_array_get(merges, r);
        const char *a, *b;
        size_t an, bn;
        if (json_is_string(m)) {
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            if (sp == NULL || strchr(sp + 1, ' ') != NULL) {
                up_errf(err, errlen, NULL, "merge %zu \"%.100s\" is not two tokens \"a b\"", r, s);
                goto done;
            }
            a = s, an = (size_t)(sp - s), b = sp + 1, bn = strlen(sp + 1);
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            an = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            bn = json_string_length(json_array_get(m, 1));
        } else {
            up_errf(err, errlen, NULL, "merge %zu is neither \"a b\" nor [\"a\", \"b\"]", r);
            goto done;
        }
        if (an >= 4096 || bn >= 4096) {
            up_errf(err, errlen, NULL, "merge %zu has a part over 4 KiB", r);
            goto done;
        }
        int32_t ia = merge_part(t, a, an, sa), ib = merge_part(t, b, bn, sb);
        if (ia < 0 || ib < 0) {
            up_errf(err, errlen, NULL,
                    "merge %zu \"%.60s\" + \"%.60s\": a part is not in the "
                    "vocabulary",
                    r, a, b);
            goto done;
        }
        memcpy(cat, t->pool + t->tok_off[ia], t->tok_len[ia]);
        memcpy(cat + t->tok_len[ia], t->pool + t->tok_off[ib], t->tok_len[ib]);
        int32_t iab = tok_vocab_find(t, cat, (size_t)t->tok_len[ia] + t->tok_len[ib]);
        if (iab < 0) {
            up_errf(err, errlen, NULL,
                    "merge %zu \"%.60s\" + \"%.60s\": the merged token is not in the vocabulary", r,
                    a, b);
            goto done;
        }
        uint64_t key = ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib;
        for (size_t i = tok_pair_hash(key) & t->mhash_mask;; i = (i + 1) & t->mhash_mask) {
            if (t->mhash[i].key == key) break; /* HF keeps the first rank of a repeated pair */
            if (t->mhash[i].key == UINT64_MAX) {
                t->mhash[i] = (tok_merge_slot){key, (uint32_t)r, iab};
                break;
            }
        }
        /* SentencePiece: a cut before "▁" is safe while no merge result holds "▁" after a
         * non-"▁" character */
        if (t->family == TOK_SENTENCEPIECE) {
            const char *s = t->pool + t->tok_off[iab];
            size_t n = t->tok_len[iab], i = 0;
            while (i + 3 <= n && memcmp(s + i, SP_MARK, 3) == 0)
                i += 3;
            if (memmem(s + i, n - i, SP_MARK, 3) != NULL) t->sp_split_safe = 0;
        }
    }
    t->nmerges = nm;
    rc = 0;
done:
    free(sa), free(sb), free(cat);
    return rc;
}

static int load_added(tokenizer *t, size_t *pool_cap, const json_t *added, char *err,
                      size_t errlen) {
    size_t n = json_array_size(added);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (t->added == NULL) return up_errf(err, errlen, NULL, "out of memory");
    size_t i;
    const json_t *a;
    json_array_foreach(added, i, a) {
        const json_t *c = json_object_get(a, "content");
        json_int_t id = json_integer_value(json_object_get(a, "id"));
        if (!json_is_string(c) || json_string_length(c) == 0 ||
            !json_is_integer(json_object_get(a, "id")) || id < 0 || id >= (json_int_t)TOK_MAX_IDS)
            return up_errf(err, errlen, NULL,
                           "added_tokens[%zu] needs a non-empty \"content\" and an \"id\" in 0 .. "
                           "%u",
                           i, TOK_MAX_IDS - 1);
        static const char *const flags[] = {"lstrip", "rstrip", "single_word"};
        for (int f = 0; f < 3; f++)
            if (json_is_true(json_object_get(a, flags[f])))
                return up_errf(err, errlen, NULL, "added token \"%.60s\" with %s is not supported",
                               json_string_value(c), flags[f]);
        if ((uint32_t)id >= t->nids) t->nids = (uint32_t)id + 1;
        uint32_t off;
        if (pool_add(t, pool_cap, json_string_value(c), json_string_length(c), &off) != 0)
            return up_errf(err, errlen, NULL, "out of memory");
        t->added[t->nadded++] = (tok_added){.s = NULL,
                                            .len = (uint32_t)json_string_length(c),
                                            .id = (int32_t)id,
                                            .special = json_is_true(json_object_get(a, "special"))};
        t->added[t->nadded - 1].s =
            (const char *)(uintptr_t)off; /* an offset until the pool stops moving */
    }
    return 0;
}

/* tokenizer_config.json's bos/eos: a string or {"content": s}. */
static int32_t config_token(const tokenizer *t, const json_t *cfg, const char *key) {
    const json_t *v = json_object_get(cfg, key);
    const char *s = json_is_string(v) ? json_string_value(v) : tok_jstr(v, "content");
    return s ? tok_token_id(t, s) : -1;
}

/* The model is a BPE this implementation encodes as HF does; else -1 with the reason in msg. */
static int check_model(const json_t *model, char *msg, size_t msglen) {
    const char *mtype = tok_jstr(model, "type");
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *merges = json_object_get(model, "merges");
    if (!json_is_object(model))
        return up_errf(msg, msglen, NULL, "no \"model\" object: not an HF tokenizer.json");
    if (mtype == NULL && json_is_object(vocab) && json_is_array(merges)) mtype = "BPE";
    if (mtype == NULL || strcmp(mtype, "BPE") != 0)
        return up_errf(msg, msglen, NULL,
                       "model type %s is not supported (only BPE: GPT-2, Llama 2/3, Mistral, Qwen)",
                       mtype ? mtype : "(none)");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return up_errf(msg, msglen, NULL,
                       "BPE model without a \"vocab\" object and \"merges\" list");
    if (json_is_number(json_object_get(model, "dropout")) &&
        json_number_value(json_object_get(model, "dropout")) > 0)
        return up_errf(msg, msglen, NULL, "BPE dropout is not supported");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const char *s = tok_jstr(model, affixes[k]);
        if (s != NULL && s[0] != '\0')
            return up_errf(msg, msglen, NULL, "BPE %s \"%s\" is not supported", affixes[k], s);
    }
    return 0;
}

/* The family (a ByteLevel pre-tokenizer makes it byte-level), the pre-tokenizer, the normalizer
 * and the model's flags. */
static int load_family(tokenizer *t, const json_t *root, const json_t *model, char *msg,
                       size_t msglen) {
    int byte_level = 0;
    if (tok_load_pretok(t, json_object_get(root, "pre_tokenizer"), &byte_level, msg, msglen) != 0)
        return -1;
    t->family = byte_level ? TOK_BYTE_LEVEL : TOK_SENTENCEPIECE;
    if (tok_load_normalizer(t, json_object_get(root, "normalizer"), msg, msglen) != 0) return -1;
    if (byte_level && (t->sp_prepend || t->sp_replace))
        return up_errf(msg, msglen, NULL,
                       "a ByteLevel pre-tokenizer with the Prepend/Replace "
                       "normalizers is not supported");
    if (!byte_level && (t->re != NULL || t->nfc || !t->sp_prepend || !t->sp_replace))
        return up_errf(msg, msglen, NULL,
                       "a BPE model without a ByteLevel pre-tokenizer is supported only as "
                       "SentencePiece style (normalizers Prepend \"\\u2581\" and Replace \" \" -> "
                       "\"\\u2581\", no pre_tokenizer, no NFC)");
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    t->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    t->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
    return 0;
}

/* The ids' range (vocabulary and added tokens), the id tables and the vocabulary's bytes. */
static int load_vocab(tokenizer *t, const json_t *vocab, const json_t *added, size_t *pool_cap,
                      char *msg, size_t msglen) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)vocab, key, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= (json_int_t)TOK_MAX_IDS)
            return up_errf(msg, msglen, NULL, "vocab entry \"%.60s\" has id %s (expected 0 .. %u)",
                           key, json_is_integer(v) ? "out of range" : "not an integer",
                           TOK_MAX_IDS - 1);
        if ((uint32_t)id >= t->nids) t->nids = (uint32_t)id + 1;
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        if (id >= 0 && id < (json_int_t)TOK_MAX_IDS && (uint32_t)id >= t->nids)
            t->nids = (uint32_t)id + 1;
    }
    if (t->nids == 0) return up_errf(msg, msglen, NULL, "empty vocabulary");
    size_t nv = json_object_size(vocab);
    t->tok_off = calloc(t->nids, sizeof *t->tok_off);
    t->tok_len = malloc(t->nids * sizeof *t->tok_len);
    t->id_byte = malloc(t->nids * sizeof *t->id_byte);
    t->special = calloc(t->nids, 1);
    t->vhash_mask = pow2_at_least(nv * 2 + 1) - 1;
    t->vhash = malloc((t->vhash_mask + 1) * sizeof *t->vhash);
    char *scratch = malloc(65536);
    int rc = -1;
    if (!t->tok_off || !t->tok_len || !t->id_byte || !t->special || !t->vhash || !scratch) {
        up_errf(msg, msglen, NULL, "out of memory for %u ids", t->nids);
        goto done;
    }
    memset(t->tok_len, 0xff, t->nids * sizeof *t->tok_len);
    memset(t->id_byte, 0xff, t->nids * sizeof *t->id_byte);
    memset(t->vhash, 0xff, (t->vhash_mask + 1) * sizeof *t->vhash);
    json_object_foreach((json_t *)vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        size_t n = strlen(key); /* jansson keys stop at NUL; a token holding one is refused */
        if (n >= 32768 || t->tok_len[id] != UINT32_MAX) {
            up_errf(msg, msglen, NULL, "vocab id %d is %s", id,
                    n >= 32768 ? "over 32 KiB long" : "given twice");
            goto done;
        }
        if (vocab_put(t, pool_cap, key, n, id, scratch) != 0) {
            up_errf(msg, msglen, NULL, "out of memory");
            goto done;
        }
    }
    rc = 0;
done:
    free(scratch);
    return rc;
}

/* The initial symbols: each byte's id (byte-level) or <0xXX> token (SentencePiece-style), and
 * the unk token. */
static int load_byte_ids(tokenizer *t, const json_t *model, char *msg, size_t msglen) {
    int byte_level = t->family == TOK_BYTE_LEVEL;
    for (int b = 0; b < 256; b++) {
        char c = (char)b, hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        t->byte_id[b] = byte_level ? tok_vocab_find(t, &c, 1) : tok_vocab_find(t, hex, 6);
        if (byte_level && t->byte_id[b] < 0)
            return up_errf(msg, msglen, NULL,
                           "byte-level vocabulary lacks the token of byte 0x%02x", b);
        if (!byte_level && t->byte_id[b] >= 0) t->id_byte[t->byte_id[b]] = (int16_t)b;
    }
    if (!byte_level && t->byte_fallback)
        for (int b = 0; b < 256; b++)
            if (t->byte_id[b] < 0)
                return up_errf(msg, msglen, NULL, "byte_fallback without the token <0x%02X>", b);
    const char *unk = tok_jstr(model, "unk_token");
    if (unk != NULL) {
        t->unk_id = tok_vocab_find(t, unk, strlen(unk));
        if (t->unk_id < 0)
            return up_errf(msg, msglen, NULL, "unk_token \"%.60s\" is not in the vocabulary", unk);
    }
    return 0;
}

/* The added tokens, once the pool stops moving: their ids decode as their content, the list is
 * sorted longest first, and the cut points (tok_cut_point) are kept off the characters an added
 * token holds, which it could straddle. */
static void index_added(tokenizer *t) {
    for (int k = 0; k < t->nadded; k++) {
        tok_added *a = &t->added[k];
        uint32_t off = (uint32_t)(uintptr_t)a->s;
        a->s = t->pool + off;
        t->tok_off[a->id] = off;
        t->tok_len[a->id] = a->len;
        t->id_byte[a->id] = -1;
        t->special[a->id] = (uint8_t)a->special;
        t->added_first[(uint8_t)a->s[0]] |= a->special ? 1 : 2;
    }
    qsort(t->added, (size_t)t->nadded, sizeof *t->added, cmp_added);
    int added_nl = 0, added_sp = 0;
    for (int k = 0; k < t->nadded; k++) {
        added_nl |= memchr(t->added[k].s, '\n', t->added[k].len) != NULL;
        added_sp |= memchr(t->added[k].s, ' ', t->added[k].len) != NULL;
    }
    t->cut_newline = t->family == TOK_BYTE_LEVEL && t->regex_has_newline_run && !added_nl;
    t->cut_space = t->family == TOK_SENTENCEPIECE && t->sp_split_safe && !added_sp;
}

static tokenizer *load_json(const json_t *root, const json_t *cfg, const char *path, char *err,
                            size_t errlen) {
    tokenizer *t = calloc(1, sizeof *t);
    if (t == NULL) {
        up_errf(err, errlen, path, "out of memory");
        return NULL;
    }
    t->unk_id = t->bos_id = t->eos_id = -1;
    t->sp_split_safe = 1;
    size_t pool_cap = 0;
    const json_t *model = json_object_get(root, "model");
    const json_t *added = json_object_get(root, "added_tokens");
    char msg[512];
    msg[0] = '\0';
    if (check_model(model, msg, sizeof msg) != 0 ||
        load_family(t, root, model, msg, sizeof msg) != 0 ||
        load_vocab(t, json_object_get(model, "vocab"), added, &pool_cap, msg, sizeof msg) != 0 ||
        load_byte_ids(t, model, msg, sizeof msg) != 0 ||
        load_merges(t, json_object_get(model, "merges"), msg, sizeof msg) != 0 ||
        load_added(t, &pool_cap, added, msg, sizeof msg) != 0)
        goto fail;
    index_added(t);
    if (tok_load_post(t, json_object_get(root, "post_processor"), msg, sizeof msg) != 0 ||
        tok_load_decoder(t, json_object_get(root, "decoder"), msg, sizeof msg) != 0)
        goto fail;
    if (cfg != NULL) {
        t->bos_id = config_token(t, cfg, "bos_token");
        t->eos_id = config_token(t, cfg, "eos_token");
    }
    int byte_level = t->family == TOK_BYTE_LEVEL;
    snprintf(t->desc, sizeof t->desc, "%s BPE, %u ids, %zu merges, %d added tokens%s%s",
             byte_level ? "byte-level" : "SentencePiece-style", t->nids, t->nmerges, t->nadded,
             t->nfc ? ", NFC" : "",
             !byte_level && !t->sp_split_safe ? ", merged whole (a merge crosses a word start)"
                                              : "");
    return t;
fail:
    tok_free(t);
    up_errf(err, errlen, path, "%s", msg);
    return NULL;
}

tokenizer *tok_load(const char *path, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        up_errf(err, errlen, path,
                "no such file or folder: name a model folder holding tokenizer.json, or the file");
        return NULL;
    }
    char file[4096], cfgfile[4096];
    cfgfile[0] = '\0';
    if (S_ISDIR(sb.st_mode)) {
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
        snprintf(cfgfile, sizeof cfgfile, "%s/tokenizer_config.json", path);
    } else {
        snprintf(file, sizeof file, "%s", path);
        const char *slash = strrchr(path, '/');
        int dir = slash ? (int)(slash - path) : 0;
        snprintf(cfgfile, sizeof cfgfile, "%.*s%stokenizer_config.json", dir, path,
                 slash ? "/" : "");
    }
    json_error_t je;
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL) {
        up_errf(err, errlen, file, "not a readable tokenizer.json: %s (line %d)", je.text, je.line);
        return NULL;
    }
    json_t *cfg = NULL;
    if (stat(cfgfile, &sb) == 0) {
        cfg = json_load_file(cfgfile, JSON_DECODE_INT_AS_REAL, &je); /* model_max_length: 1e30 */
        if (cfg == NULL) {
            up_errf(err, errlen, cfgfile, "not valid JSON: %s (line %d)", je.text, je.line);
            json_decref(root);
            return NULL;
        }
    }
    tokenizer *t = json_is_object(root) ? load_json(root, cfg, file, err, errlen) : NULL;
    if (!json_is_object(root))
        up_errf(err, errlen, file, "not a JSON object: not a tokenizer.json");
    json_decref(root);
    json_decref(cfg);
    if (t != NULL && (t->shared = tok_shared_new()) == NULL) {
        tok_free(t);
        up_errf(err, errlen, file, "out of memory for the shared piece cache");
        return NULL;
    }
    return t;
}

void tok_cache_reset(tokenizer *t) {
    tok_shared_reset(t->shared);
}

uint32_t tok_vocab_size(const tokenizer *t) {
    return t->nids;
}
const char *tok_describe(const tokenizer *t) {
    return t->desc;
}
int32_t tok_bos_id(const tokenizer *t) {
    return t->bos_id;
}
int32_t tok_eos_id(const tokenizer *t) {
    return t->eos_id;
}
int tok_is_special(const tokenizer *t, int32_t id) {
    return id >= 0 && (uint32_t)id < t->nids && t->special[id];
}

int32_t tok_token_id(const tokenizer *t, const char *s) {
    size_t n = strlen(s);
    for (int k = 0; k < t->nadded; k++)
        if (t->added[k].len == n && memcmp(t->added[k].s, s, n) == 0) return t->added[k].id;
    if (t->family == TOK_BYTE_LEVEL) {
        char buf[4096];
        long r = n < sizeof buf ? bl_unmap(s, n, buf) : -1;
        return r >= 0 ? tok_vocab_find(t, buf, (size_t)r) : -1;
    }
    return tok_vocab_find(t, s, n);
}

int tok_prefix_ids(const tokenizer *t, int32_t *ids, int max) {
    int n = t->nprefix < max ? t->nprefix : max;
    memcpy(ids, t->prefix, (size_t)n * sizeof *ids);
    return n;
}

int tok_suffix_ids(const tokenizer *t, int32_t *ids, int max) {
    int n = t->nsuffix < max ? t->nsuffix : max;
    memcpy(ids, t->suffix, (size_t)n * sizeof *ids);
    return n;
}

size_t tok_cut_point(const tokenizer *t, const char *text, size_t n) {
    for (size_t p = n - (n > 0); p > 0; p--) {
        uint8_t c = (uint8_t)text[p], b = (uint8_t)text[p - 1];
        if (t->cut_newline && b == '\n' && c > 0x20 && c < 0x7f) return p;
        if (t->cut_space && c == ' ' && b != ' ') return p;
    }
    return 0;
}
