/* test_tokenizer.c — the tokenizer on a small SentencePiece-style vocabulary written here (the
 * exactness against HF on real vocabularies is tests/tokenizer), and the refusal of bad or
 * unsupported tokenizer.json files: one line, no crash (every truncation of a valid file too). */
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures = 0;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("not ok: %s:%d: ", __FILE__, __LINE__);                                         \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static char path[256];

static void write_file(const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(text, 1, n, f) != n) {
        printf("not ok: cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* ▁ = \u2581 */
static const char sp_json[] =
    "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", "
    "\"prepend\": \"\\u2581\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, "
    "\"content\": \"\\u2581\"}]},"
    "\"pre_tokenizer\": null,"
    "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
    "{\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], "
    "\"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1], \"tokens\": [\"<s>\"]}}},"
    "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": "
    "{\"String\": \"\\u2581\"}, \"content\": \" \"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", "
    "\"content\": \" \", \"start\": 1, \"stop\": 0}]},"
    "\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true}, {\"id\": 1, "
    "\"content\": \"<s>\", \"special\": true}],"
    "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true, "
    "\"byte_fallback\": false, \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"\\u2581\": 2, \"a\": 3, "
    "\"b\": 4, \"\\u2581a\": 5, \"ab\": 6, \"\\u2581ab\": 7}, "
    "\"merges\": [\"a b\", [\"\\u2581\", \"ab\"], \"\\u2581 a\"]}}";

static void expect_ids(tok_encoder *e, const char *text, int flags, const int32_t *want, size_t n) {
    tok_ids got = {0};
    int rc = tok_encode(e, text, strlen(text), flags, &got);
    int same = rc == 0 && got.n == n && memcmp(got.ids, want, n * sizeof *want) == 0;
    EXPECT(same, "encode \"%s\": %zu ids, expected %zu", text, got.n, n);
    free(got.ids);
}

/* tok_encode_spans: the ids of tok_encode and each id's byte span (want: 2 per id). */
static void expect_spans(tok_encoder *e, const char *text, tok_special_fn ok, const int32_t *ids,
                         const size_t *want, size_t n) {
    tok_ids got = {0};
    tok_spans sp = {0};
    int rc = tok_encode_spans(e, text, strlen(text), 0, ok, NULL, &got, &sp);
    int same = rc == 0 && got.n == n && sp.n == n && memcmp(got.ids, ids, n * sizeof *ids) == 0 &&
               memcmp(sp.at, want, 2 * n * sizeof *want) == 0;
    EXPECT(same, "spans of \"%s\": %zu ids, first span [%zu, %zu)", text, got.n,
           sp.n ? sp.at[0] : 0, sp.n ? sp.at[1] : 0);
    free(got.ids), free(sp.at);
}

static int special_at_1(void *ctx, size_t start, size_t end) {
    (void)ctx, (void)end;
    return start == 1;
}

/* sp_json with byte_fallback: the 256 tokens <0x00> .. <0xFF> (ids 8 .. 263) and the
 * ByteFallback decoder after Replace, as Llama 2's tokenizer.json has them. */
static char *byte_fallback_json(void) {
    static char buf[sizeof sp_json + 256 * 16 + 64];
    const char *vocab_end = strstr(sp_json, "\"\\u2581ab\": 7}") + strlen("\"\\u2581ab\": 7");
    const char *fuse = strstr(sp_json, "{\"type\": \"Fuse\"}");
    size_t o = 0;
    o += (size_t)snprintf(buf + o, sizeof buf - o, "%.*s", (int)(fuse - sp_json), sp_json);
    o += (size_t)snprintf(buf + o, sizeof buf - o, "{\"type\": \"ByteFallback\"}, ");
    o += (size_t)snprintf(buf + o, sizeof buf - o, "%.*s", (int)(vocab_end - fuse), fuse);
    for (int b = 0; b < 256; b++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, ", \"<0x%02X>\": %d", b, 8 + b);
    snprintf(buf + o, sizeof buf - o, "%s", vocab_end);
    char *f = strstr(buf, "\"byte_fallback\": false");
    memcpy(f, "\"byte_fallback\": true ", strlen("\"byte_fallback\": true "));
    return buf;
}

/* Decoding ids that do not make valid UTF-8, as HF's Rust library does (ByteFallback: a run of
 * byte tokens that is not valid UTF-8 becomes one U+FFFD per token, not one per maximal
 * ill-formed subpart), and TOK_BYTES. */
static void expect_decode(const tokenizer *t, const int32_t *ids, size_t n, int flags,
                          const char *want) {
    tok_text out = {0};
    char err[256];
    int rc = tok_decode(t, ids, n, flags, &out, err, sizeof err);
    EXPECT(rc == 0 && out.n == strlen(want) && memcmp(out.s, want, out.n) == 0,
           "decode of %zu ids (flags %d): \"%s\", expected \"%s\"", n, flags, out.s ? out.s : "",
           want);
    free(out.s);
}

static void byte_fallback_decoding(void) {
    char err[1024];
    const char *json = byte_fallback_json();
    write_file(json, strlen(json));
    tokenizer *t = tok_load(path, err, sizeof err);
    EXPECT(t != NULL, "the byte-fallback vocabulary is refused: %s", err);
    if (t == NULL) return;
    enum { A = 3, E2 = 8 + 0xE2, X82 = 8 + 0x82, AC = 8 + 0xAC, X41 = 8 + 0x41, FF = 8 + 0xFF };
#define FFFD "\xEF\xBF\xBD"
    expect_decode(t, (const int32_t[]){E2, X82, AC}, 3, 0, "\xE2\x82\xAC"); /* valid: the euro */
    expect_decode(t, (const int32_t[]){E2, X82}, 2, 0, FFFD FFFD);          /* cut: one each */
    expect_decode(t, (const int32_t[]){E2, X82, A, AC}, 4, 0, FFFD FFFD "a" FFFD);
    expect_decode(t, (const int32_t[]){X41, FF, X41}, 3, 0, FFFD FFFD FFFD); /* the whole run */
    expect_decode(t, (const int32_t[]){X41, A, FF}, 3, 0, "Aa" FFFD);
    expect_decode(t, (const int32_t[]){E2, X82, 1, AC}, 4, 0, FFFD FFFD "<s>" FFFD);
    expect_decode(t, (const int32_t[]){E2, X82}, 2, TOK_BYTES, "\xE2\x82");
#undef FFFD
    /* a decode may be cut before a token that is not a byte (or is special), not before one */
    EXPECT(tok_decode_boundary(t, A) && tok_decode_boundary(t, 1) && !tok_decode_boundary(t, X82),
           "tok_decode_boundary");
    tok_free(t);
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/upipe_test_tokenizer_%d.json", (int)getpid());
    char err[1024];
    write_file(sp_json, strlen(sp_json));
    tokenizer *t = tok_load(path, err, sizeof err);
    EXPECT(t != NULL, "the small vocabulary is refused: %s", err);
    if (t != NULL) {
        tok_encoder *e = tok_encoder_new(t);
        /* "ab ab" -> "▁ab▁ab": a+b (rank 0) first, then ▁+ab; cut before the second ▁ */
        expect_ids(e, "ab ab", 0, (const int32_t[]){7, 7}, 2);
        expect_ids(e, "ab ab", TOK_ADD_SPECIAL, (const int32_t[]){1, 7, 7}, 3);
        expect_ids(e, "ba", 0, (const int32_t[]){2, 4, 3}, 3);    /* ▁ b a: nothing merges */
        expect_ids(e, "xyz a", 0, (const int32_t[]){2, 0, 5}, 3); /* unknown chars fused */
        expect_ids(e, "a<s>a", 0, (const int32_t[]){5, 0, 3}, 3); /* special stays text */
        expect_ids(e, "a<s>a", TOK_ALLOW_SPECIAL, (const int32_t[]){5, 1, 5}, 3);
        expect_ids(e, "", TOK_ADD_SPECIAL, (const int32_t[]){1}, 1);
        /* spans: "▁ab" is "ab" (the Prepend ▁ has no byte), the second "▁ab" " ab" */
        expect_spans(e, "ab ab", NULL, (const int32_t[]){7, 7}, (const size_t[]){0, 2, 2, 5}, 2);
        /* an unk in the segment: every id spans all of it */
        expect_spans(e, "xyz a", NULL, (const int32_t[]){2, 0, 5},
                     (const size_t[]){0, 5, 0, 5, 0, 5}, 3);
        /* special tokens only where the callback allows: at 1, not at 4 */
        expect_spans(e, "a<s><s>", special_at_1, (const int32_t[]){5, 1, 2, 0},
                     (const size_t[]){0, 1, 1, 4, 4, 7, 4, 7}, 4);
        tok_text back = {0};
        const int32_t ids[] = {7, 7, 4};
        EXPECT(tok_decode(t, ids, 3, 0, &back, err, sizeof err) == 0 &&
                   strcmp(back.s, "ab abb") == 0,
               "decode: \"%s\"", back.s ? back.s : "");
        const int32_t bad[] = {5, 1 << 30};
        EXPECT(tok_decode(t, bad, 2, 0, &back, err, sizeof err) != 0,
               "decode of an id out of range");
        free(back.s);
        tok_encoder_free(e);
        tok_free(t);
    }
    byte_fallback_decoding();
    /* every truncation of the file: refused, never a crash */
    size_t len = strlen(sp_json);
    for (size_t cut = 0; cut < len; cut += 3) {
        write_file(sp_json, cut);
        tokenizer *u = tok_load(path, err, sizeof err);
        EXPECT(u == NULL && strchr(err, '\n') == NULL, "truncated at %zu: not refused in one line",
               cut);
        tok_free(u);
    }
    /* unsupported or broken models: refused naming what */
    static const struct {
        const char *from, *to, *says;
    } cases[] = {
        {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "WordPiece"},
        {"\"type\": \"BPE\"", "\"type\": \"Unigram\"", "Unigram"},
        {"\"type\": \"Prepend\"", "\"type\": \"NFKC\"", "NFKC"},
        {"\"<s>\": 1, ", "\"<s>\": 99999999999, ", "out of range"},
        {"\"a b\"", "\"a c\"", "not in the vocabulary"},
        {"\"pre_tokenizer\": null", "\"pre_tokenizer\": {\"type\": \"Whitespace\"}", "Whitespace"},
        {"\"pre_tokenizer\": null",
         "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(?<x\"}, "
         "\"behavior\": \"Isolated\"}",
         "regex"},
        {"\"special\": true}, {\"id\": 1", "\"special\": true, \"lstrip\": true}, {\"id\": 1",
         "lstrip"},
        {"\"ids\": [1]", "\"ids\": [123456789]", "bad id"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *at = strstr(sp_json, cases[c].from);
        if (at == NULL) {
            printf("not ok: case %zu: \"%s\" not in the file\n", c, cases[c].from);
            failures++;
            continue;
        }
        char buf[sizeof sp_json + 512];
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - sp_json), sp_json, cases[c].to,
                 at + strlen(cases[c].from));
        write_file(buf, strlen(buf));
        tokenizer *u = tok_load(path, err, sizeof err);
        EXPECT(u == NULL && strstr(err, cases[c].says) != NULL,
               "case %zu (%s): expected a refusal naming \"%s\", got: %s", c, cases[c].to,
               cases[c].says, u ? "loaded" : err);
        tok_free(u);
    }
    EXPECT(tok_load("/nonexistent/tokenizer.json", err, sizeof err) == NULL, "a missing file");
    unlink(path);
    printf("%s: test_tokenizer (%d failures)\n", failures ? "not ok" : "ok", failures);
    return failures ? 1 : 0;
}
