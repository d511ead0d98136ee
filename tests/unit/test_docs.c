/* test_docs.c — documents and loss masks: the mask shard (io/mask.h), documents with a separator
 * and the jsonl shapes (io/docs.h), and `upipe data text|jsonl` end to end (the shard and mask
 * it writes, read back token by token).
 *
 * Every bad input must give -1 (or exit status 1 from the command) and a message naming the
 * problem. Files live in a mkdtemp directory under /tmp that is removed at the end. Final line:
 * "N passed, M failed". */
#include "io/docs.h"
#include "io/mask.h"
#include "io/shard.h"

#include "harness.h"
#include "io_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEP 256

/* ---- the mask shard ---------------------------------------------------------------------- */

static void write_mask_raw(const char *path, int32_t magic, int32_t version, int32_t count,
                           const uint8_t *bytes, size_t nbytes) {
    unsigned char *buf = calloc(1, 1024 + nbytes);
    int32_t h[3] = {magic, version, count};
    memcpy(buf, h, sizeof h);
    if (nbytes) memcpy(buf + 1024, bytes, nbytes);
    write_bytes(path, buf, 1024 + nbytes);
    free(buf);
}

static void test_mask(void) {
    char err[512] = "";
    size_t n = 777;
    uint8_t *m = malloc(n);
    for (size_t i = 0; i < n; i++)
        m[i] = (uint8_t)((i * 7 + i / 5) % 3 == 0);
    const char *p = tmp_path("m.bin");
    int rc = mask_write(p, m, n, err, sizeof err);
    CHECK(rc == 0, "mask_write: %s", err);
    size_t len = 0;
    unsigned char *raw = read_bytes(p, &len);
    int32_t h[3];
    memcpy(h, raw, sizeof h);
    CHECK(len == 1024 + n && h[0] == MASK_MAGIC && h[0] == 20261201 && h[1] == 1 &&
              h[2] == (int32_t)n && memcmp(raw + 1024, m, n) == 0,
          "mask layout (len %zu magic %d version %d count %d)", len, h[0], h[1], h[2]);
    mask_shard ms;
    rc = mask_open(&ms, p, n, err, sizeof err);
    CHECK(rc == 0 && ms.n == n, "mask_open: %s", err);
    if (rc == 0) {
        size_t cnt = 2 * n + 13;
        uint8_t *out = malloc(cnt);
        size_t starts[3] = {0, n - 4, 5 * n + 11};
        for (int k = 0; k < 3; k++) {
            mask_read(&ms, starts[k], cnt, out);
            size_t bad = 0;
            for (size_t i = 0; i < cnt; i++)
                bad += out[i] != m[(starts[k] + i) % n];
            CHECK(bad == 0, "mask_read from %zu: %zu wrong", starts[k], bad);
        }
        free(out);
        mask_close(&ms);
    }
    rc = mask_open(&ms, p, 0, err, sizeof err); /* 0: no count to compare */
    CHECK(rc == 0 && ms.n == n, "mask_open without an expected count: %s", err);
    mask_close(&ms);
    mask_close(&ms); /* closing twice is safe */

    /* wrong length against the data shard */
    rc = mask_open(&ms, p, n + 1, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "777 bytes") && strstr(err, "778 tokens") && ms.map == NULL,
          "mask vs data count: \"%s\"", err);
    /* truncated and trailing */
    const char *pb = tmp_path("mbad.bin");
    write_bytes(pb, raw, len - 1);
    rc = mask_open(&ms, pb, n, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "truncated"), "truncated mask: \"%s\"", err);
    unsigned char *more = calloc(1, len + 2);
    memcpy(more, raw, len);
    write_bytes(pb, more, len + 2);
    rc = mask_open(&ms, pb, n, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "trailing"), "trailing mask bytes: \"%s\"", err);
    free(more);
    write_bytes(pb, raw, 100);
    rc = mask_open(&ms, pb, n, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "smaller than the 1024-byte"), "tiny mask: \"%s\"", err);
    /* a byte 2: the first bad offset is named */
    raw[1024 + 500] = 2;
    raw[1024 + 600] = 9;
    write_bytes(pb, raw, len);
    rc = mask_open(&ms, pb, n, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "byte 2 at mask offset 500") && strstr(err, "0 or 1"),
          "mask byte 2: \"%s\"", err);
    free(raw);
    /* header */
    uint8_t few[4] = {0, 1, 1, 0};
    write_mask_raw(pb, 20240520, 1, 4, few, 4); /* a token shard's magic */
    rc = mask_open(&ms, pb, 4, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "bad magic 20240520") && strstr(err, "not a loss-mask"),
          "wrong magic: \"%s\"", err);
    write_mask_raw(pb, MASK_MAGIC, 2, 4, few, 4);
    rc = mask_open(&ms, pb, 4, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "version 2"), "wrong version: \"%s\"", err);
    write_mask_raw(pb, MASK_MAGIC, 1, 0, NULL, 0);
    rc = mask_open(&ms, pb, 0, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "empty"), "empty mask: \"%s\"", err);
    rc = mask_open(&ms, tmp_path("missing.bin"), 4, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "cannot open"), "missing mask: \"%s\"", err);
    /* a hand-built mask reads back with wrap-around */
    write_mask_raw(pb, MASK_MAGIC, 1, 4, few, 4);
    rc = mask_open(&ms, pb, 4, err, sizeof err);
    CHECK(rc == 0, "hand-built mask: %s", err);
    if (rc == 0) {
        uint8_t out[6];
        mask_read(&ms, 3, 6, out);
        CHECK(out[0] == 0 && out[1] == 0 && out[2] == 1 && out[3] == 1 && out[5] == 0,
              "hand-built mask read");
        mask_close(&ms);
    }
    /* the writer refuses what the reader would */
    m[3] = 2;
    rc = mask_write(pb, m, n, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "mask byte 3 is 2"), "mask_write of a 2: \"%s\"", err);
    rc = mask_write(pb, m, 0, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "at least one"), "mask_write of nothing: \"%s\"", err);
    CHECK(count_files_with(".tmp.") == 0, "mask_write left a temp file");
    free(m);
}

/* ---- expected corpora, built by hand ----------------------------------------------------- */

typedef struct {
    uint32_t tok[512];
    uint8_t mask[512];
    size_t n;
} expect_buf;

static void expect_push(expect_buf *e, const char *s, uint8_t m) {
    for (size_t i = 0; s[i] != '\0'; i++) {
        e->tok[e->n] = (uint8_t)s[i];
        e->mask[e->n++] = m;
    }
}

static void expect_sep(expect_buf *e, uint32_t sep) {
    e->tok[e->n] = sep;
    e->mask[e->n++] = 0;
}

/* Opens shard (and mask, when mask_path != NULL) and compares them with e token by token. */
static void check_written(const char *what, const char *shard_path, const char *mask_path,
                          const expect_buf *e, int vocab, int token_bytes) {
    char err[512] = "";
    token_shard s;
    int rc = shard_open(&s, shard_path, vocab, err, sizeof err);
    CHECK(rc == 0 && s.ntok == e->n && s.token_bytes == token_bytes,
          "%s: shard (%zu tokens, %d bytes each; expected %zu, %d): %s", what, s.ntok,
          s.token_bytes, e->n, token_bytes, err);
    if (rc != 0 || s.ntok != e->n) {
        shard_close(&s);
        return;
    }
    int32_t tok[512];
    shard_read(&s, 0, e->n, tok);
    size_t first_bad = e->n;
    for (size_t i = 0; i < e->n && first_bad == e->n; i++)
        if (tok[i] != (int32_t)e->tok[i]) first_bad = i;
    CHECK(first_bad == e->n, "%s: token %zu is %d, expected %u", what, first_bad,
          first_bad < e->n ? tok[first_bad] : 0, first_bad < e->n ? e->tok[first_bad] : 0);
    shard_close(&s);
    if (mask_path == NULL) return;
    mask_shard ms;
    rc = mask_open(&ms, mask_path, e->n, err, sizeof err);
    CHECK(rc == 0, "%s: mask: %s", what, err);
    if (rc != 0) return;
    uint8_t m[512];
    mask_read(&ms, 0, e->n, m);
    first_bad = e->n;
    for (size_t i = 0; i < e->n && first_bad == e->n; i++)
        if (m[i] != e->mask[i]) first_bad = i;
    CHECK(first_bad == e->n, "%s: mask byte %zu (token %u) is %u, expected %u", what, first_bad,
          first_bad < e->n ? e->tok[first_bad] : 0, first_bad < e->n ? m[first_bad] : 0,
          first_bad < e->n ? e->mask[first_bad] : 0);
    mask_close(&ms);
}

/* ---- text documents ---------------------------------------------------------------------- */

static void test_text_docs(void) {
    char a[512], b[512], out[512], out2[512];
    snprintf(a, sizeof a, "%s", tmp_path("a.txt"));
    snprintf(b, sizeof b, "%s", tmp_path("b.txt"));
    snprintf(out, sizeof out, "%s", tmp_path("t.bin"));
    snprintf(out2, sizeof out2, "%s", tmp_path("t2.bin"));
    write_bytes(a, "hello", 5);
    write_bytes(b, "wide\nworld", 10);

    /* library: two documents, separator first */
    char err[512] = "";
    doc_corpus c;
    docs_init(&c, SEP);
    int rc = docs_add_text_file(&c, a, err, sizeof err);
    rc |= docs_add_text_file(&c, b, err, sizeof err);
    expect_buf e = {0};
    expect_sep(&e, SEP);
    expect_push(&e, "hello", 1);
    expect_sep(&e, SEP);
    expect_push(&e, "wide\nworld", 1);
    CHECK(rc == 0 && c.n == e.n && c.ndoc == 2 && c.doc_len[0] == 6 && c.doc_len[1] == 11,
          "two text documents (%zu tokens, %zu docs): %s", c.n, c.ndoc, err);
    if (c.n == e.n)
        CHECK(memcmp(c.tok, e.tok, e.n * 4) == 0 && memcmp(c.mask, e.mask, e.n) == 0,
              "text documents content and mask");
    rc = docs_add_text_file(&c, tmp_path("missing.txt"), err, sizeof err);
    CHECK(rc == -1 && strstr(err, "cannot open") && c.n == e.n && c.ndoc == 2,
          "missing text file leaves the corpus as it was: \"%s\"", err);
    docs_free(&c);

    /* the command: separator positions 0 and 6 */
    char *a1[] = {"data", "text", "--input", a, b, "--output", out, "--doc-sep", "256"};
    CHECK(run_data_quiet(9, a1) == 0, "upipe data text --doc-sep 256 on 2 files failed");
    check_written("text --doc-sep 256", out, NULL, &e, 257, 2);
    /* the separator must be below vocab_size */
    token_shard s;
    rc = shard_open(&s, out, 256, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "token 256 at position 0"), "separator vs vocab 256: \"%s\"",
          err);
    /* a separator past 65535 makes a uint32 shard; --input repeated works too */
    char *a2[] = {"data", "text", "--input", a, "--input", b, "--output", out, "--doc-sep=70000"};
    CHECK(run_data_quiet(9, a2) == 0, "upipe data text --doc-sep 70000 failed");
    e.tok[0] = e.tok[6] = 70000;
    check_written("text --doc-sep 70000", out, NULL, &e, 70001, 4);
    /* without a separator: plain concatenation; one file stays byte for byte as before */
    char *a3[] = {"data", "text", "--input", a, b, "--output", out};
    CHECK(run_data_quiet(7, a3) == 0, "upipe data text on 2 files failed");
    expect_buf cat = {0};
    expect_push(&cat, "hellowide\nworld", 1);
    check_written("text, 2 files, no separator", out, NULL, &cat, 256, 2);
    char *a4[] = {"data", "text", "--input", a, "--output", out2};
    CHECK(run_data_quiet(6, a4) == 0, "upipe data text on 1 file failed");
    size_t len = 0;
    unsigned char *raw = read_bytes(out2, &len);
    int32_t h[3];
    memcpy(h, raw, sizeof h);
    uint16_t t[5];
    memcpy(t, raw + 1024, sizeof t);
    CHECK(len == 1024 + 10 && h[0] == 20240520 && h[1] == 1 && h[2] == 5 && t[0] == 'h' &&
              t[4] == 'o',
          "one text file: the same uint16 shard as before");
    free(raw);
    char *b1[] = {"data", "text", "--input", a, "--output", out, "--doc-sep", "-1"};
    char *b2[] = {"data", "text", "--input", a, "--output", out, "--doc-sep", "x"};
    char *b3[] = {"data", "text", "--output", out, "--doc-sep", "256"};
    char *b4[] = {"data", "text", "--input", a, "--output", out, "--mask-output", out2};
    CHECK(run_data_quiet(8, b1) == 1, "--doc-sep -1 accepted");
    CHECK(run_data_quiet(8, b2) == 1, "--doc-sep x accepted");
    CHECK(run_data_quiet(6, b3) == 1, "text without --input accepted");
    CHECK(run_data_quiet(8, b4) == 1, "--mask-output accepted by text");
}

/* ---- jsonl ------------------------------------------------------------------------------- */

static void test_jsonl(void) {
    char in[512], out[512], mask[512], log[512];
    snprintf(in, sizeof in, "%s", tmp_path("c.jsonl"));
    snprintf(out, sizeof out, "%s", tmp_path("j.bin"));
    snprintf(mask, sizeof mask, "%s", tmp_path("j.mask"));
    snprintf(log, sizeof log, "%s", tmp_path("j.log"));
    const char text[] =
        "{\"text\": \"ab\\u00e9\"}\n"
        "\n"
        "{\"prompt\": \"Q: 2+2?\\n\", \"response\": \"4\"}\n"
        "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", "
        "\"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": "
        "\"user\", \"content\": \"bye\"}, {\"role\": \"assistant\", \"content\": \"ok\"}]}\n"
        "   \r\n"
        "{\"text\": \"z\\u0000\", \"id\": 7}"; /* no final newline; other keys ignored */
    write_bytes(in, text, sizeof text - 1);
    expect_buf e = {0};
    expect_sep(&e, SEP);
    expect_push(&e, "ab\xc3\xa9", 1); /* UTF-8 bytes */
    expect_sep(&e, SEP);
    expect_push(&e, "Q: 2+2?\n", 0);
    expect_push(&e, "4", 1);
    expect_sep(&e, SEP);
    expect_push(&e, "system: be brief\n", 0);
    expect_push(&e, "user: hi\n", 0);
    expect_push(&e, "assistant: ", 0);
    expect_push(&e, "yo\n", 1);
    expect_push(&e, "user: bye\n", 0);
    expect_push(&e, "assistant: ", 0);
    expect_push(&e, "ok\n", 1);
    expect_sep(&e, SEP);
    expect_push(&e, "z", 1);
    e.tok[e.n] = 0; /* "\u0000" is byte 0 */
    e.mask[e.n++] = 1;

    char err[512] = "";
    doc_corpus c;
    docs_init(&c, SEP);
    int rc = docs_add_jsonl_file(&c, in, err, sizeof err);
    CHECK(rc == 0 && c.n == e.n && c.ndoc == 4, "jsonl (%zu tokens, expected %zu): %s", c.n, e.n,
          err);
    docs_stats st;
    rc = docs_summarize(&c, &st);
    CHECK(rc == 0 && st.ndoc == 4 && st.ntok == e.n && st.counted == 13 && st.min_len == 3 &&
              st.median_len == 5 && st.max_len == 65,
          "jsonl summary: %zu docs, %zu tokens, %zu counted, lengths %zu/%zu/%zu", st.ndoc, st.ntok,
          st.counted, st.min_len, st.median_len, st.max_len);
    docs_free(&c);

    char *a1[] = {"data",      "jsonl", "--input",       in,  "--output", out,
                  "--doc-sep", "256",   "--mask-output", mask};
    CHECK(run_data_to(10, a1, log) == 0, "upipe data jsonl failed");
    check_written("jsonl", out, mask, &e, 257, 2);
    size_t len = 0;
    char *printed = (char *)read_bytes(log, &len);
    if (printed) printed[len] = '\0';
    CHECK(printed && strstr(printed, "4 documents") &&
              strstr(printed, "shortest 3, median 5, longest 65") &&
              strstr(printed, "counted tokens (mask 1): 13 of 83") &&
              strstr(printed, "needs vocab_size >= 257"),
          "jsonl summary printed: \"%s\"", printed ? printed : "");
    free(printed);
    CHECK(e.n == 83, "expected corpus has %zu tokens", e.n);

    char *b1[] = {"data", "jsonl", "--input", in, "--output", out};
    char *b2[] = {"data",      "jsonl", "--input",       in, "--output", out,
                  "--doc-sep", "256",   "--mask-output", out};
    CHECK(run_data_quiet(6, b1) == 1, "jsonl without --doc-sep accepted");
    CHECK(run_data_quiet(10, b2) == 1, "--mask-output equal to --output accepted");
}

/* Each bad line sits on line 3 after a good line and an empty one. */
static void test_jsonl_bad(void) {
    static const struct {
        const char *line, *phrase;
    } cases[] = {
        {"{\"text\": \"a\"", "invalid JSON"},
        {"{\"text\": \"a\", \"text\": \"b\"}", "duplicate"},
        {"{\"txt\": \"a\"}", "unknown shape: the object has the keys \"txt\""},
        {"{}", "an empty object"},
        {"\"just a string\"", "the line is a string, not an object"},
        {"{\"prompt\": 1, \"response\": \"r\"}", "\"prompt\" is an integer, not a string"},
        {"{\"response\": \"r\"}", "\"response\" without \"prompt\""},
        {"{\"text\": \"a\", \"messages\": []}", "ambiguous shape"},
        {"{\"messages\": \"hi\"}", "\"messages\" is a string, not an array"},
        {"{\"messages\": [\"hi\"]}", "messages[0] is a string, not an object"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": [\"x\"]}]}",
         "messages[0]: \"content\" is an array, not a string"},
        {"{\"messages\": [{\"content\": \"x\"}]}", "messages[0]: \"role\" is missing"},
        {"{\"text\": \"\"}", "the document is empty"},
    };
    char in[512], out[512], log[512];
    snprintf(in, sizeof in, "%s", tmp_path("bad.jsonl"));
    snprintf(out, sizeof out, "%s", tmp_path("never.bin"));
    snprintf(log, sizeof log, "%s", tmp_path("bad.log"));
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char text[256];
        snprintf(text, sizeof text, "{\"text\": \"fine\"}\n\n%s\n{\"text\": \"after\"}\n",
                 cases[k].line);
        write_bytes(in, text, strlen(text));
        char err[1024] = "";
        doc_corpus c;
        docs_init(&c, SEP);
        int rc = docs_add_jsonl_file(&c, in, err, sizeof err);
        char where[600];
        snprintf(where, sizeof where, "%s:3: ", in);
        CHECK(rc == -1 && strncmp(err, where, strlen(where)) == 0 && strstr(err, cases[k].phrase) &&
                  strstr(err, "; expected {\"text\": ...}, {\"prompt\": ..., \"response\": ...} "
                              "or {\"messages\": [...]}") &&
                  c.ndoc == 1 && c.n == 5,
              "bad line %s: \"%s\"", cases[k].line, err);
        docs_free(&c);
    }
    /* the command refuses with the line number and writes nothing */
    char *a1[] = {"data", "jsonl", "--input", in, "--output", out, "--doc-sep", "256"};
    int rc = run_data_to(8, a1, log);
    size_t len = 0;
    char *printed = (char *)read_bytes(log, &len);
    if (printed) printed[len] = '\0';
    CHECK(rc == 1 && printed && strstr(printed, "upipe: error: ") && strstr(printed, ":3: ") &&
              strstr(printed, "the document is empty"),
          "upipe data jsonl on a bad line: status %d, \"%s\"", rc, printed ? printed : "");
    free(printed);
    CHECK(read_bytes(out, &len) == NULL, "a refused jsonl left a shard behind");
    write_bytes(in, "\n\n", 2);
    char err[512] = "";
    doc_corpus c;
    docs_init(&c, SEP);
    rc = docs_add_jsonl_file(&c, in, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "no documents"), "jsonl of empty lines: \"%s\"", err);
    docs_free(&c);
}

int main(void) {
    if (tmp_dir_make("test_docs") != 0) return 1;
    test_mask();
    test_text_docs();
    test_jsonl();
    test_jsonl_bad();
    cleanup_dir();
    return harness_finish("test_docs");
}
