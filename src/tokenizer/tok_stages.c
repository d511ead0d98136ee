/* tok_stages.c — the pipeline's stages of tokenizer.json around the model (tok_internal.h):
 * normalizer, pre-tokenizer (its regex translated from Oniguruma to PCRE2), post-processor and
 * decoder, each read into the tokenizer's flags or refused in one line naming what is not
 * supported. */
#include "tokenizer/tok_internal.h"

#include "core/check.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* The string of member key, or NULL. */
const char *tok_jstr(const json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

/* Oniguruma -> PCRE2: \s and \S are Unicode White_Space there (U+0085 in, U+FEFF out), PCRE2's
 * UCP \s is not (it misses U+0085). Other syntax of the HF patterns is PCRE2's too. */
static int translate_regex(const char *src, char *dst, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; src[i] != '\0'; i++) {
        const char *rep = NULL;
        char two[3] = {src[i], 0, 0};
        if (src[i] == '\\' && src[i + 1] != '\0') {
            i++;
            two[1] = src[i];
            rep = src[i] == 's' ? "\\p{White_Space}" : src[i] == 'S' ? "\\P{White_Space}" : two;
        } else {
            rep = two;
        }
        size_t n = strlen(rep);
        if (o + n + 1 > cap) return -1;
        memcpy(dst + o, rep, n);
        o += n;
    }
    dst[o] = '\0';
    return 0;
}

static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int compile_regex(tokenizer *t, const char *pattern, char *err, size_t errlen) {
    if (t->re != NULL)
        return up_errf(err, errlen, NULL,
                       "two regex pre-tokenizers in sequence are not supported (only one Split "
                       "or one ByteLevel with use_regex)");
    /* Llama 3 / Qwen patterns: "\s*[\r\n]+" comes before "\s+(?!\S)", so a newline run ends
     * a piece whatever follows (GPT-2's pattern lacks it: "  \n" splits by what follows) */
    t->regex_has_newline_run = strstr(pattern, "\\s*[\\r\\n]+") != NULL;
    size_t cap = strlen(pattern) * 8 + 64;
    char *tr = malloc(cap);
    if (tr == NULL || translate_regex(pattern, tr, cap) != 0) {
        free(tr);
        return up_errf(err, errlen, NULL, "out of memory");
    }
    int ec;
    PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)tr, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    free(tr);
    if (t->re == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return up_errf(err, errlen, NULL,
                       "unsupported pre-tokenizer regex \"%.200s\": PCRE2 says %s at offset %zu",
                       pattern, (const char *)msg, (size_t)eo);
    }
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* without JIT it still matches, slower */
    return 0;
}

int tok_load_normalizer(tokenizer *t, const json_t *n, char *err, size_t errlen) {
    if (n == NULL || json_is_null(n)) return 0;
    const char *ty = tok_jstr(n, "type");
    if (ty == NULL) return up_errf(err, errlen, NULL, "normalizer without a \"type\"");
    if (strcmp(ty, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "normalizers");
        size_t i;
        const json_t *v;
        if (!json_is_array(list))
            return up_errf(err, errlen, NULL, "normalizer Sequence without \"normalizers\"");
        json_array_foreach(list, i, v) {
            if (tok_load_normalizer(t, v, err, errlen) != 0) return -1;
        }
        return 0;
    }
    if (strcmp(ty, "NFC") == 0) {
        t->nfc = 1;
        return 0;
    }
    if (strcmp(ty, "Prepend") == 0) {
        const char *p = tok_jstr(n, "prepend");
        if (p == NULL || strcmp(p, SP_MARK) != 0)
            return up_errf(err, errlen, NULL,
                           "normalizer Prepend of \"%s\" is not supported (only \"\\u2581\")",
                           p ? p : "?");
        t->sp_prepend = 1;
        return 0;
    }
    if (strcmp(ty, "Replace") == 0) {
        const char *pat = tok_jstr(json_object_get(n, "pattern"), "String");
        const char *c = tok_jstr(n, "content");
        if (pat == NULL || c == NULL || strcmp(pat, " ") != 0 || strcmp(c, SP_MARK) != 0)
            return up_errf(err, errlen, NULL,
                           "normalizer Replace other than \" \" -> \"\\u2581\" is not supported");
        t->sp_replace = 1;
        return 0;
    }
    return up_errf(err, errlen, NULL, "normalizer %s is not supported", ty);
}

/* byte_level: set when a ByteLevel pre-tokenizer is present. */
int tok_load_pretok(tokenizer *t, const json_t *p, int *byte_level, char *err, size_t errlen) {
    if (p == NULL || json_is_null(p)) return 0;
    const char *ty = tok_jstr(p, "type");
    if (ty == NULL) return up_errf(err, errlen, NULL, "pre_tokenizer without a \"type\"");
    if (strcmp(ty, "Sequence") == 0) {
        const json_t *list = json_object_get(p, "pretokenizers");
        size_t i;
        const json_t *v;
        if (!json_is_array(list))
            return up_errf(err, errlen, NULL, "pre_tokenizer Sequence without \"pretokenizers\"");
        json_array_foreach(list, i, v) {
            if (tok_load_pretok(t, v, byte_level, err, errlen) != 0) return -1;
        }
        return 0;
    }
    if (strcmp(ty, "Split") == 0) {
        const char *re = tok_jstr(json_object_get(p, "pattern"), "Regex");
        const char *beh = tok_jstr(p, "behavior");
        if (re == NULL)
            return up_errf(err, errlen, NULL,
                           "pre_tokenizer Split without a Regex pattern is not "
                           "supported");
        if (beh == NULL || strcmp(beh, "Isolated") != 0 ||
            json_is_true(json_object_get(p, "invert")))
            return up_errf(
                err, errlen, NULL,
                "pre_tokenizer Split with behavior %s%s is not supported (only Isolated)",
                beh ? beh : "?", json_is_true(json_object_get(p, "invert")) ? " and invert" : "");
        if (*byte_level)
            return up_errf(err, errlen, NULL,
                           "pre_tokenizer Split after ByteLevel is not supported");
        return compile_regex(t, re, err, errlen);
    }
    if (strcmp(ty, "ByteLevel") == 0) {
        *byte_level = 1;
        t->add_prefix_space = json_is_true(json_object_get(p, "add_prefix_space"));
        const json_t *ur = json_object_get(p, "use_regex");
        if (ur == NULL || json_is_true(ur)) return compile_regex(t, gpt2_pattern, err, errlen);
        return 0;
    }
    return up_errf(err, errlen, NULL, "pre_tokenizer %s is not supported", ty);
}

int tok_load_decoder(tokenizer *t, const json_t *d, char *err, size_t errlen) {
    if (d == NULL || json_is_null(d)) return 0;
    const char *ty = tok_jstr(d, "type");
    if (ty == NULL) return up_errf(err, errlen, NULL, "decoder without a \"type\"");
    if (strcmp(ty, "Sequence") == 0) {
        const json_t *list = json_object_get(d, "decoders");
        size_t i;
        const json_t *v;
        if (!json_is_array(list))
            return up_errf(err, errlen, NULL, "decoder Sequence without \"decoders\"");
        json_array_foreach(list, i, v) {
            if (tok_load_decoder(t, v, err, errlen) != 0) return -1;
        }
        return 0;
    }
    int bl = t->family == TOK_BYTE_LEVEL;
    if (strcmp(ty, "ByteLevel") == 0 && bl) return 0;
    if (!bl && (strcmp(ty, "ByteFallback") == 0 || strcmp(ty, "Fuse") == 0)) return 0;
    if (!bl && strcmp(ty, "Replace") == 0) {
        const char *pat = tok_jstr(json_object_get(d, "pattern"), "String");
        const char *c = tok_jstr(d, "content");
        if (pat != NULL && c != NULL && strcmp(pat, SP_MARK) == 0 && strcmp(c, " ") == 0) return 0;
    }
    if (!bl && strcmp(ty, "Strip") == 0) {
        const char *c = tok_jstr(d, "content");
        json_int_t start = json_integer_value(json_object_get(d, "start"));
        json_int_t stop = json_integer_value(json_object_get(d, "stop"));
        if (c != NULL && strcmp(c, " ") == 0 && start >= 0 && start <= 8 && stop == 0) {
            t->dec_strip = (int)start;
            return 0;
        }
    }
    return up_errf(err, errlen, NULL,
                   "decoder %s (with these options) is not supported for a %s model", ty,
                   bl ? "byte-level" : "SentencePiece-style");
}

/* The id of a post-processor special token: its "ids" in special_tokens. */
static int post_affix(tokenizer *t, const json_t *single, const json_t *specials, char *err,
                      size_t errlen) {
    size_t i;
    const json_t *v;
    int after = 0;
    json_array_foreach(single, i, v) {
        if (json_object_get(v, "Sequence") != NULL) {
            after = 1;
            continue;
        }
        const char *name = tok_jstr(json_object_get(v, "SpecialToken"), "id");
        const json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (name == NULL || !json_is_array(ids))
            return up_errf(err, errlen, NULL,
                           "post_processor TemplateProcessing names an unknown special token");
        size_t k;
        const json_t *idv;
        json_array_foreach(ids, k, idv) {
            json_int_t id = json_integer_value(idv);
            int *n = after ? &t->nsuffix : &t->nprefix;
            if (!json_is_integer(idv) || id < 0 || id >= (json_int_t)t->nids || *n >= TOK_MAX_AFFIX)
                return up_errf(err, errlen, NULL,
                               "post_processor special token \"%s\" has a bad id", name);
            (after ? t->suffix : t->prefix)[(*n)++] = (int32_t)id;
        }
    }
    return 0;
}

int tok_load_post(tokenizer *t, const json_t *p, char *err, size_t errlen) {
    if (p == NULL || json_is_null(p)) return 0;
    const char *ty = tok_jstr(p, "type");
    if (ty == NULL) return up_errf(err, errlen, NULL, "post_processor without a \"type\"");
    if (strcmp(ty, "Sequence") == 0) {
        const json_t *list = json_object_get(p, "processors");
        size_t i;
        const json_t *v;
        if (!json_is_array(list))
            return up_errf(err, errlen, NULL, "post_processor Sequence without \"processors\"");
        json_array_foreach(list, i, v) {
            if (tok_load_post(t, v, err, errlen) != 0) return -1;
        }
        return 0;
    }
    if (strcmp(ty, "ByteLevel") == 0) return 0; /* offsets only */
    if (strcmp(ty, "TemplateProcessing") == 0) {
        const json_t *single = json_object_get(p, "single");
        if (!json_is_array(single) || t->nprefix + t->nsuffix > 0)
            return up_errf(err, errlen, NULL,
                           "post_processor TemplateProcessing without \"single\"");
        return post_affix(t, single, json_object_get(p, "special_tokens"), err, errlen);
    }
    return up_errf(err, errlen, NULL, "post_processor %s is not supported", ty);
}
