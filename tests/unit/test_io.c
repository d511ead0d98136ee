/* test_io.c — token-shard reader and writer (io/shard.h), the corpora (io/corpus.h) and the
 * `upipe data` command. config.json is tested in test_config.c, safetensors in
 * test_safetensors.c.
 *
 * Every bad input must give -1 and a message naming the problem, never a crash. Files live in a
 * mkdtemp directory under /tmp that is removed at the end. Final line: "N passed, M failed". */
#include "cmd/data_cmd.h"
#include "io/corpus.h"
#include "io/shard.h"

#include "harness.h"
#include "io_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- shards ------------------------------------------------------------------------------ */

static void write_shard_raw(const char *path, int32_t magic, int32_t version, int32_t count,
                            const void *tok, size_t tok_bytes) {
    unsigned char *buf = calloc(1, 1024 + tok_bytes);
    int32_t h[3] = {magic, version, count};
    memcpy(buf, h, sizeof h);
    if (tok_bytes) memcpy(buf + 1024, tok, tok_bytes);
    write_bytes(path, buf, 1024 + tok_bytes);
    free(buf);
}

static void test_shards(void) {
    char err[512] = "";
    size_t n = 1000;
    uint32_t *tok = malloc(n * sizeof *tok);
    for (size_t i = 0; i < n; i++)
        tok[i] = (uint32_t)((i * 37) % 300);
    const char *p16 = tmp_path("s16.bin");
    int rc = shard_write(p16, tok, n, err, sizeof err);
    CHECK(rc == 0, "shard_write u16: %s", err);
    size_t len = 0;
    unsigned char *raw = read_bytes(p16, &len);
    int32_t h[3];
    memcpy(h, raw, sizeof h);
    uint16_t t1;
    memcpy(&t1, raw + 1024 + 2, 2);
    CHECK(len == 1024 + 2 * n && h[0] == SHARD_MAGIC_U16 && h[1] == 1 && h[2] == (int32_t)n &&
              t1 == tok[1],
          "u16 shard layout (len %zu magic %d version %d count %d)", len, h[0], h[1], h[2]);
    free(raw);
    token_shard s;
    rc = shard_open(&s, p16, 300, err, sizeof err);
    CHECK(rc == 0 && s.ntok == n && s.token_bytes == 2, "shard_open u16: %s", err);
    if (rc == 0) {
        size_t m = 2 * n + 10;
        int32_t *out = malloc(m * sizeof *out);
        size_t starts[3] = {0, n - 5, 3 * n + 7};
        for (int k = 0; k < 3; k++) {
            shard_read(&s, starts[k], m, out);
            size_t bad = 0;
            for (size_t i = 0; i < m; i++)
                bad += out[i] != (int32_t)tok[(starts[k] + i) % n];
            CHECK(bad == 0, "shard_read from %zu: %zu wrong", starts[k], bad);
        }
        free(out);
        shard_close(&s);
    }
    /* vocab too small for the data */
    rc = shard_open(&s, p16, 299, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "is >= vocab_size 299") && strstr(err, "token 299 at position"),
          "token >= vocab: \"%s\"", err);

    /* u32 format when an id needs it */
    tok[12] = 70000;
    const char *p32 = tmp_path("s32.bin");
    rc = shard_write(p32, tok, n, err, sizeof err);
    CHECK(rc == 0, "shard_write u32: %s", err);
    rc = shard_open(&s, p32, 100000, err, sizeof err);
    CHECK(rc == 0 && s.token_bytes == 4 && s.ntok == n, "shard_open u32: %s", err);
    if (rc == 0) {
        int32_t out[20];
        shard_read(&s, n - 3, 20, out);
        int ok = 1;
        for (size_t i = 0; i < 20; i++)
            ok = ok && out[i] == (int32_t)tok[(n - 3 + i) % n];
        CHECK(ok && out[15] == 70000, "u32 wrap-around read");
        /* the file changes size under the mapping: shard_check says so (before a read of the lost
         * pages would raise SIGBUS) */
        CHECK(shard_check(&s, err, sizeof err) == 0, "shard_check of an intact shard: %s", err);
        CHECK(truncate(p32, 2000) == 0, "truncate");
        char want[512];
        snprintf(want, sizeof want, "%s changed size while the job runs (was %zu bytes, now 2000)",
                 p32, 1024 + 4 * n);
        rc = shard_check(&s, err, sizeof err);
        CHECK(rc == -1 && strstr(err, want), "shard_check after truncate: \"%s\"", err);
        shard_close(&s);
        rc = shard_write(p32, tok, n, err, sizeof err);
        CHECK(rc == 0, "shard_write u32 again: %s", err);
    }
    rc = shard_open(&s, p32, 4096, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "token 70000 at position 12 is >= vocab_size 4096"),
          "u32 token >= vocab: \"%s\"", err);

    /* corrupt shards */
    const char *pb = tmp_path("bad.bin");
    raw = read_bytes(p16, &len);
    write_bytes(pb, raw, len - 3);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "truncated") && strstr(err, "1000 tokens"), "truncated: \"%s\"",
          err);
    unsigned char *more = calloc(1, len + 4);
    memcpy(more, raw, len);
    write_bytes(pb, more, len + 4);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "trailing"), "trailing bytes: \"%s\"", err);
    free(more);
    free(raw);
    uint16_t few[4] = {1, 2, 3, 4};
    write_shard_raw(pb, 12345, 1, 4, few, 8);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "bad magic 12345"), "bad magic: \"%s\"", err);
    write_shard_raw(pb, SHARD_MAGIC_U16, 7, 4, few, 8);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "version 7"), "bad version: \"%s\"", err);
    write_shard_raw(pb, SHARD_MAGIC_U32, 1, 2, few, 8);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "version 1"), "bad u32 version: \"%s\"", err);
    write_shard_raw(pb, SHARD_MAGIC_U16, 1, 0, NULL, 0);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "empty"), "empty count: \"%s\"", err);
    write_shard_raw(pb, SHARD_MAGIC_U16, 1, -5, NULL, 0);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "-5 tokens"), "negative count: \"%s\"", err);
    write_bytes(pb, few, 8);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "smaller than the 1024-byte"), "tiny file: \"%s\"", err);
    rc = shard_open(&s, tmp_path("missing.bin"), 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "cannot open"), "missing shard: \"%s\"", err);
    /* a hand-built llm.c shard reads back */
    write_shard_raw(pb, SHARD_MAGIC_U16, 1, 4, few, 8);
    rc = shard_open(&s, pb, 5, err, sizeof err);
    CHECK(rc == 0, "hand-built shard: %s", err);
    if (rc == 0) {
        int32_t out[5];
        shard_read(&s, 2, 5, out);
        CHECK(out[0] == 3 && out[1] == 4 && out[2] == 1 && out[4] == 3, "hand-built shard read");
        shard_close(&s);
    }
    rc = shard_write(pb, tok, 0, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "no tokens"), "empty shard_write: \"%s\"", err);
    CHECK(count_files_with(".tmp.") == 0, "shard_write left a temp file");
    free(tok);
}

/* ---- corpora and `upipe data` ------------------------------------------------------------ */

static void test_tokenize(void) {
    const char *p = tmp_path("text.txt");
    const char text[] = "hello\n\xff";
    write_bytes(p, text, 7);
    char err[512] = "";
    size_t n = 0;
    uint32_t *t = corpus_tokenize_bytes(p, &n, err, sizeof err);
    CHECK(t && n == 7 && t[0] == 'h' && t[5] == '\n' && t[6] == 255, "byte tokenizer: %s", err);
    free(t);
    write_bytes(p, "", 0);
    t = corpus_tokenize_bytes(p, &n, err, sizeof err);
    CHECK(t == NULL && strstr(err, "empty"), "empty text: \"%s\"", err);
    t = corpus_tokenize_bytes(tmp_path("missing.txt"), &n, err, sizeof err);
    CHECK(t == NULL && strstr(err, "cannot open"), "missing text: \"%s\"", err);
}

/* Parses the corpus and checks every question: its key was stated earlier, its answer is the
 * value of the latest statement, and the question is about `distance` tokens after the fact. */
static void check_recall(size_t n, size_t distance, uint64_t seed) {
    uint32_t *t = corpus_make_recall(n, &(recall_spec){.distance = distance, .seed = seed}, NULL);
    CHECK(t != NULL, "corpus_make_recall returned NULL");
    if (t == NULL) return;
    uint32_t *t2 = corpus_make_recall(n, &(recall_spec){.distance = distance, .seed = seed}, NULL);
    uint32_t *t3 =
        corpus_make_recall(n, &(recall_spec){.distance = distance, .seed = seed + 1}, NULL);
    CHECK(t2 && memcmp(t, t2, n * 4) == 0, "recall corpus not deterministic in seed");
    CHECK(t3 && memcmp(t, t3, n * 4) != 0, "recall corpus ignores the seed");
    free(t2);
    free(t3);
    size_t maxkey = 1;
    for (int i = 0; i < 6; i++)
        maxkey *= 26;
    /* key -> (value, position of the fact); keys are at most 6 letters, use a hash table */
    size_t cap = 1 << 20;
    uint64_t *hk = calloc(cap, sizeof *hk);
    uint32_t *hv = calloc(cap, sizeof *hv);
    size_t *hp = calloc(cap, sizeof *hp);
    size_t facts = 0, questions = 0, wrong = 0, unknown = 0, badfmt = 0, bytes_bad = 0;
    double dist_sum = 0;
    size_t i = 0;
    for (size_t k = 0; k < n; k++)
        bytes_bad += t[k] >= 128;
    while (i < n) {
        size_t start = i;
        uint64_t key = 0;
        while (i < n && t[i] >= 'a' && t[i] <= 'z')
            key = key * 26 + (t[i++] - 'a');
        if (i + 2 >= n) break; /* the last record may be cut off */
        uint32_t sep = t[i], val = t[i + 1], semi = t[i + 2];
        i += 3;
        if (i - start < 4 || (sep != '=' && sep != '?') || semi != ';' ||
            !strchr("0123456789ABCDEF", (int)val) || key >= maxkey) {
            badfmt++;
            break;
        }
        key += 1; /* 0 marks an empty slot */
        size_t slot = (size_t)(key * 0x9e3779b97f4a7c15ull >> 44) & (cap - 1);
        while (hk[slot] != 0 && hk[slot] != key)
            slot = (slot + 1) & (cap - 1);
        if (sep == '=') {
            hk[slot] = key;
            hv[slot] = val;
            hp[slot] = start;
            facts++;
        } else {
            questions++;
            if (hk[slot] == 0)
                unknown++;
            else {
                wrong += hv[slot] != val;
                dist_sum += (double)(start - hp[slot]);
            }
        }
    }
    double mean = questions ? dist_sum / (double)questions : 0;
    CHECK(bytes_bad == 0 && badfmt == 0, "recall format: %zu bad records, %zu ids >= 128", badfmt,
          bytes_bad);
    CHECK(wrong == 0 && unknown == 0, "recall answers: %zu wrong, %zu without a fact", wrong,
          unknown);
    /* About half the records are questions once the first gap has passed: with a corpus of
     * ~100 gaps, more than 40% of all records must be questions. */
    CHECK(questions > 0.4 * (double)(facts + questions), "recall: %zu questions, %zu facts",
          questions, facts);
    /* The due time is distance +- 50% (mean distance, rounded up to whole records); questions are
     * delayed a little when several fall due together. 0.9..1.5 x distance catches a wrong
     * scale without tracking the queueing exactly. */
    CHECK(mean >= 0.9 * (double)distance && mean <= 1.5 * (double)distance,
          "recall: mean fact-question distance %.1f for distance %zu", mean, distance);
    printf("  recall n=%zu distance=%zu: %zu facts, %zu questions, mean distance %.1f\n", n,
           distance, facts, questions, mean);
    free(hk);
    free(hv);
    free(hp);
    free(t);
}

static void test_data_main(void) {
    char out[512], in[512], missing[512];
    snprintf(out, sizeof out, "%s", tmp_path("cli.bin"));
    snprintf(in, sizeof in, "%s", tmp_path("cli.txt"));
    snprintf(missing, sizeof missing, "%s", tmp_path("missing.txt"));
    write_bytes(in, "abcabcabc", 9);
    char *a1[] = {"data", "recall",     "--output", out,      "--tokens",
                  "5000", "--distance", "100",      "--seed", "7"};
    int rc = run_data_quiet(10, a1);
    token_shard s;
    char err[512] = "";
    CHECK(rc == 0, "upipe data recall failed");
    rc = shard_open(&s, out, 256, err, sizeof err);
    CHECK(rc == 0 && s.ntok == 5000 && s.token_bytes == 2, "recall shard: %s", err);
    if (rc == 0) shard_close(&s);
    char *a2[] = {"data", "text", "--input", in, "--output", out};
    rc = run_data_quiet(6, a2);
    CHECK(rc == 0, "upipe data text failed");
    rc = shard_open(&s, out, 256, err, sizeof err);
    CHECK(rc == 0 && s.ntok == 9, "text shard: %s", err);
    if (rc == 0) {
        int32_t t[3];
        shard_read(&s, 8, 3, t);
        CHECK(t[0] == 'c' && t[1] == 'a' && t[2] == 'b', "text shard content");
        shard_close(&s);
    }
    char *a3[] = {"data", "recall", "--output", out, "--tokens", "100"}; /* default distance */
    CHECK(run_data_quiet(6, a3) == 0, "recall with the default distance and few tokens failed");
    char *help[] = {"data", "--help"};
    CHECK(run_data_quiet(2, help) == 0, "--help");
    char *b1[] = {"data", "recall", "--tokens", "100"};
    char *b2[] = {"data", "recall", "--output", out, "--tokens", "12x"};
    char *b3[] = {"data", "recall", "--output", out, "--tokens", "100", "--bogus", "1"};
    char *b4[] = {"data", "text", "--input", missing, "--output", out};
    char *b5[] = {"data", "frobnicate"};
    char *b6[] = {"data", "recall", "--output", out, "--tokens", "100", "--distance", "90"};
    char *b7[] = {"data", "recall", "--output", out, "--tokens"};
    char *b8[] = {"data"};
    CHECK(run_data_quiet(4, b1) != 0, "missing --output accepted");
    CHECK(run_data_quiet(6, b2) != 0, "bad --tokens accepted");
    CHECK(run_data_quiet(8, b3) != 0, "unknown flag accepted");
    CHECK(run_data_quiet(6, b4) != 0, "missing input accepted");
    CHECK(run_data_quiet(2, b5) != 0, "unknown subcommand accepted");
    CHECK(run_data_quiet(8, b6) != 0, "distance > tokens/2 accepted");
    CHECK(run_data_quiet(5, b7) != 0, "flag without value accepted");
    CHECK(run_data_quiet(1, b8) != 0, "no subcommand accepted");
}

int main(void) {
    if (tmp_dir_make("test_io") != 0) return 1;
    test_shards();
    test_tokenize();
    check_recall(200000, 64, 1);
    check_recall(400000, 2048, 2);
    check_recall(3000, 4, 3);
    test_data_main();
    cleanup_dir();
    return harness_finish("test_io");
}
