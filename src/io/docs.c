/* docs.c — documents, separators and loss masks for `upipe data text|jsonl`. */
#include "io/docs.h"

#include "core/check.h"
#include "io/corpus.h"
#include "io/json_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DOCS_SHAPES                                                                                \
    "expected {\"text\": ...}, {\"prompt\": ..., \"response\": ...} or {\"messages\": [...]}"

void docs_init(doc_corpus *c, int64_t sep) {
    memset(c, 0, sizeof *c);
    c->sep = sep;
}

void docs_free(doc_corpus *c) {
    free(c->tok);
    free(c->mask);
    free(c->doc_len);
    docs_init(c, -1);
}

/* Room for `more` tokens; 0 or -1 (out of memory, or a size past any shard). */
static int docs_reserve(doc_corpus *c, size_t more) {
    if (more > SIZE_MAX / 8 - c->n) return -1;
    if (c->n + more <= c->cap) return 0;
    size_t cap = c->cap ? c->cap : 1 << 16;
    while (cap < c->n + more)
        cap *= 2;
    uint32_t *tok = realloc(c->tok, cap * sizeof *tok);
    if (tok == NULL) return -1;
    c->tok = tok;
    uint8_t *mask = realloc(c->mask, cap);
    if (mask == NULL) return -1;
    c->mask = mask;
    c->cap = cap;
    return 0;
}

/* Appends len bytes as tokens with mask value m. 0 or -1 (out of memory). */
static int docs_push_bytes(doc_corpus *c, const void *bytes, size_t len, uint8_t m) {
    if (docs_reserve(c, len) != 0) return -1;
    const uint8_t *b = bytes;
    for (size_t i = 0; i < len; i++)
        c->tok[c->n + i] = b[i];
    memset(c->mask + c->n, m, len);
    c->n += len;
    return 0;
}

/* Opens a document at c->n: its separator (mask 0) when c has one. 0 or -1. */
static int docs_begin(doc_corpus *c) {
    if (c->ndoc == c->doc_cap) {
        size_t cap = c->doc_cap ? 2 * c->doc_cap : 1024;
        size_t *dl = realloc(c->doc_len, cap * sizeof *dl);
        if (dl == NULL) return -1;
        c->doc_len = dl;
        c->doc_cap = cap;
    }
    if (c->sep < 0) return 0;
    if (docs_reserve(c, 1) != 0) return -1;
    c->tok[c->n] = (uint32_t)c->sep;
    c->mask[c->n++] = 0;
    return 0;
}

/* Closes the document opened at token `start`. */
static void docs_end(doc_corpus *c, size_t start) {
    c->doc_len[c->ndoc++] = c->n - start;
}

int docs_add_text_file(doc_corpus *c, const char *path, char *err, size_t errlen) {
    size_t len = 0;
    uint8_t *bytes = corpus_read_bytes(path, &len, err, errlen);
    if (bytes == NULL) return -1;
    size_t start = c->n;
    int rc = docs_begin(c) == 0 && docs_push_bytes(c, bytes, len, 1) == 0 ? 0 : -1;
    free(bytes);
    if (rc != 0) {
        c->n = start;
        return up_errf(err, errlen, path, "out of memory for %zu more tokens", len);
    }
    docs_end(c, start);
    return 0;
}

/* ---- JSON Lines ------------------------------------------------------------------------- */

/* The string value of obj[key] into *s, *len; -1 with why when it is not a string. */
static int json_get_string(const json_t *obj, const char *key, const char *where, const char **s,
                           size_t *len, char *why, size_t whylen) {
    const json_t *v = json_object_get(obj, key);
    if (!json_is_string(v)) {
        if (v == NULL)
            snprintf(why, whylen, "%s\"%s\" is missing", where, key);
        else
            snprintf(why, whylen, "%s\"%s\" is %s, not a string", where, key, json_type_name(v));
        return -1;
    }
    *s = json_string_value(v);
    *len = json_string_length(v);
    return 0;
}

/* The keys of obj, quoted and comma-separated, into buf (cut short when long). */
static void json_key_list(const json_t *obj, char *buf, size_t len) {
    const char *key;
    const json_t *v;
    size_t used = 0;
    buf[0] = '\0';
    json_object_foreach((json_t *)obj, key, v) {
        if (used >= len) break;
        int w = snprintf(buf + used, len - used, "%s\"%s\"", used ? ", " : "", key);
        used += w > 0 ? (size_t)w : 0;
    }
}

/* Appends the chat document of msgs (rendering in docs.h). 0, -1 with why (bad message), -2
 * (out of memory). */
static int docs_push_messages(doc_corpus *c, const json_t *msgs, char *why, size_t whylen) {
    if (!json_is_array(msgs)) {
        snprintf(why, whylen, "\"messages\" is %s, not an array", json_type_name(msgs));
        return -1;
    }
    size_t i;
    const json_t *msg;
    json_array_foreach(msgs, i, msg) {
        char where[64];
        snprintf(where, sizeof where, "messages[%zu]: ", i);
        if (!json_is_object(msg)) {
            snprintf(why, whylen,
                     "messages[%zu] is %s, not an object {\"role\": ..., "
                     "\"content\": ...}",
                     i, json_type_name(msg));
            return -1;
        }
        const char *role, *content;
        size_t rlen, clen;
        if (json_get_string(msg, "role", where, &role, &rlen, why, whylen) != 0 ||
            json_get_string(msg, "content", where, &content, &clen, why, whylen) != 0)
            return -1;
        uint8_t m = strcmp(role, "assistant") == 0 && rlen == 9;
        if (docs_push_bytes(c, role, rlen, 0) != 0 || docs_push_bytes(c, ": ", 2, 0) != 0 ||
            docs_push_bytes(c, content, clen, m) != 0 || docs_push_bytes(c, "\n", 1, m) != 0)
            return -2;
    }
    return 0;
}

/* Appends the document of one parsed line. 0, -1 with why (a bad shape), -2 (out of memory). */
static int docs_push_object(doc_corpus *c, const json_t *obj, char *why, size_t whylen) {
    if (!json_is_object(obj)) {
        snprintf(why, whylen, "the line is %s, not an object", json_type_name(obj));
        return -1;
    }
    int has_text = json_object_get(obj, "text") != NULL;
    int has_prompt = json_object_get(obj, "prompt") != NULL;
    int has_response = json_object_get(obj, "response") != NULL;
    int has_messages = json_object_get(obj, "messages") != NULL;
    int shapes = has_text + (has_prompt || has_response) + has_messages;
    if (shapes == 0) {
        char keys[160];
        json_key_list(obj, keys, sizeof keys);
        if (keys[0] == '\0')
            snprintf(why, whylen, "an empty object");
        else
            snprintf(why, whylen, "unknown shape: the object has the keys %s", keys);
        return -1;
    }
    if (shapes > 1) {
        snprintf(why, whylen, "ambiguous shape: the object has %s",
                 has_messages && has_text ? "both \"text\" and \"messages\""
                 : has_text               ? "both \"text\" and \"prompt\"/\"response\""
                                          : "both \"messages\" and \"prompt\"/\"response\"");
        return -1;
    }
    if (has_prompt != has_response) {
        snprintf(why, whylen, "\"%s\" without \"%s\"", has_prompt ? "prompt" : "response",
                 has_prompt ? "response" : "prompt");
        return -1;
    }
    const char *s1, *s2;
    size_t l1, l2;
    if (has_text) {
        if (json_get_string(obj, "text", "", &s1, &l1, why, whylen) != 0) return -1;
        return docs_push_bytes(c, s1, l1, 1) != 0 ? -2 : 0;
    }
    if (has_prompt) {
        if (json_get_string(obj, "prompt", "", &s1, &l1, why, whylen) != 0 ||
            json_get_string(obj, "response", "", &s2, &l2, why, whylen) != 0)
            return -1;
        return docs_push_bytes(c, s1, l1, 0) != 0 || docs_push_bytes(c, s2, l2, 1) != 0 ? -2 : 0;
    }
    return docs_push_messages(c, json_object_get(obj, "messages"), why, whylen);
}

/* Appends the document of line `lineno` (bytes [line, line + len)). 0 or -1 with err. */
static int docs_add_jsonl_line(doc_corpus *c, const char *path, size_t lineno, const char *line,
                               size_t len, char *err, size_t errlen) {
    char why[512] = "";
    json_error_t jerr;
    json_t *obj =
        json_loadb(line, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (obj == NULL)
        return up_errf(err, errlen, NULL, "%s:%zu: invalid JSON (%s, column %d); %s", path, lineno,
                       jerr.text, jerr.column, DOCS_SHAPES);
    size_t start = c->n;
    int rc = docs_begin(c) == 0 ? docs_push_object(c, obj, why, sizeof why) : -2;
    json_decref(obj);
    if (rc == 0 && c->n == start + (c->sep >= 0)) {
        snprintf(why, sizeof why, "the document is empty (no bytes to train on)");
        rc = -1;
    }
    if (rc == 0) {
        docs_end(c, start);
        return 0;
    }
    c->n = start;
    if (rc == -2)
        return up_errf(err, errlen, NULL, "%s:%zu: out of memory after %zu tokens", path, lineno,
                       start);
    return up_errf(err, errlen, NULL, "%s:%zu: %s; %s", path, lineno, why, DOCS_SHAPES);
}

int docs_add_jsonl_file(doc_corpus *c, const char *path, char *err, size_t errlen) {
    size_t len = 0;
    char *text = (char *)corpus_read_bytes(path, &len, err, errlen);
    if (text == NULL) return -1;
    size_t ndoc0 = c->ndoc, lineno = 0, pos = 0;
    int rc = 0;
    while (rc == 0 && pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        lineno++;
        size_t k = pos;
        while (k < end && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r'))
            k++;
        if (k < end) rc = docs_add_jsonl_line(c, path, lineno, text + pos, end - pos, err, errlen);
        pos = end + 1;
    }
    free(text);
    if (rc == 0 && c->ndoc == ndoc0)
        rc = up_errf(err, errlen, path, "no documents: every line is empty; %s", DOCS_SHAPES);
    return rc;
}

/* ---- summary ---------------------------------------------------------------------------- */

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

int docs_summarize(const doc_corpus *c, docs_stats *s) {
    memset(s, 0, sizeof *s);
    s->ndoc = c->ndoc;
    s->ntok = c->n;
    for (size_t i = 0; i < c->n; i++)
        s->counted += c->mask[i];
    if (c->ndoc == 0) return 0;
    size_t *len = malloc(c->ndoc * sizeof *len);
    if (len == NULL) return -1;
    memcpy(len, c->doc_len, c->ndoc * sizeof *len);
    qsort(len, c->ndoc, sizeof *len, cmp_size);
    s->min_len = len[0];
    s->median_len = len[(c->ndoc - 1) / 2];
    s->max_len = len[c->ndoc - 1];
    free(len);
    return 0;
}
