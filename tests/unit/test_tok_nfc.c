/* test_tok_nfc.c — the tokenizer's NFC against HF's Rust library's (tok_nfc, tok_internal.h).
 *
 * tokenizer/nfc_unicode15.txt (tests/tokenizer/nfc_fixture.py, made with the library's Node
 * binding and committed): for every combining mark M of Unicode 15, a text placing M before and
 * after a mark of each combining class (BASE M N BASE N M for each representative N) and the
 * FNV-1a 64 of the library's NFC of it. Every line must match: the library's tables are Unicode
 * 9.0, so the marks assigned later (U+07FD ...) stay where they are. Then a few cases by hand. */
#include "harness.h"
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static uint64_t fnv1a64(const char *s, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 0x100000001B3ull;
    return h;
}

static size_t put_utf8(char *o, uint32_t cp) {
    return (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)o);
}

/* s normalizes to want (NULL: s is not UTF-8 and is left alone). */
static void check_case(const char *s, size_t n, const char *want, size_t wn) {
    char *out = NULL;
    size_t on = 0;
    int r = tok_nfc(s, n, &out, &on);
    if (want == NULL)
        CHECK(r == 0 && out == NULL, "\"%.*s\": %d, not left alone as ill-formed", (int)n, s, r);
    else
        CHECK(r == 1 && on == wn && memcmp(out, want, wn) == 0, "\"%.*s\" -> \"%.*s\"", (int)n, s,
              (int)on, out ? out : "");
    free(out);
}

static void check_fixture(void) {
    FILE *f = fopen("tokenizer/nfc_unicode15.txt", "r");
    CHECK(f != NULL, "cannot open tokenizer/nfc_unicode15.txt (run from tests/)");
    if (f == NULL) return;
    uint32_t reps[128];
    int nrep = 0;
    char line[4096];
    if (fgets(line, sizeof line, f) == NULL || strncmp(line, "reps ", 5) != 0) {
        CHECK(0, "the fixture does not start with its representatives");
        fclose(f);
        return;
    }
    for (char *p = strtok(line + 5, " \n"); p != NULL && nrep < 128; p = strtok(NULL, " \n"))
        reps[nrep++] = (uint32_t)strtoul(p, NULL, 16);
    char *text = malloc((size_t)nrep * 24 + 16);
    unsigned m, base;
    unsigned long long want;
    int lines = 0, bad = 0;
    while (text != NULL && fscanf(f, "%x %x %llx", &m, &base, &want) == 3) {
        size_t n = 0;
        for (int k = 0; k < nrep; k++) {
            if (reps[k] == m) continue;
            n += put_utf8(text + n, base), n += put_utf8(text + n, m);
            n += put_utf8(text + n, reps[k]), n += put_utf8(text + n, base);
            n += put_utf8(text + n, reps[k]), n += put_utf8(text + n, m);
        }
        char *out = NULL;
        size_t on = 0;
        int r = tok_nfc(text, n, &out, &on);
        if (r != 1 || fnv1a64(out, on) != want) {
            if (bad++ < 10) printf("FAIL: the mark U+%04X normalizes unlike HF's library\n", m);
        }
        free(out);
        lines++;
    }
    free(text);
    fclose(f);
    CHECK(lines > 2000, "the fixture holds %d marks", lines);
    CHECK(bad == 0, "%d of %d marks differ from HF's library", bad, lines);
    if (bad == 0)
        printf("ok: %d combining marks before and after %d classes: NFC as HF's library's\n", lines,
               nrep);
}

int main(void) {
    /* the table lists what this utf8proc knows beyond Unicode 9.0: another Unicode needs another */
    CHECK(strcmp(utf8proc_unicode_version(), tok_nfc_unicode) == 0,
          "utf8proc has Unicode %s, tok_nfc_table.c was made for %s: run "
          "tools/gen-nfc-unicode9.py",
          utf8proc_unicode_version(), tok_nfc_unicode);
    check_fixture();
    /* the case that showed the rule: U+07FD (Unicode 11) is unknown to the library's tables, so
     * it does not reorder before U+07F3 (class 230) as Unicode 15 would (class 220) */
    check_case("a\xDF\xB3\xDF\xBD"
               "b",
               6,
               "a\xDF\xB3\xDF\xBD"
               "b",
               6);
    /* known characters: composed and reordered */
    check_case("e\xCC\x81", 3, "\xC3\xA9", 2);
    check_case("a\xCC\x81\xCC\xA3", 5, "\xE1\xBA\xA1\xCC\x81", 5); /* 0301 (230) after 0323 (220) */
    /* around an unknown mark: each side alone */
    check_case("e\xCC\x81\xDF\xBD"
               "e\xCC\x81",
               8, "\xC3\xA9\xDF\xBD\xC3\xA9", 6);
    check_case("", 0, "", 0);
    check_case("plain", 5, "plain", 5);
    /* ill-formed: left alone */
    check_case("a\xC3", 2, NULL, 0);
    check_case("\xED\xA0\x80", 3, NULL, 0);
    check_case("\xC0\x80", 2, NULL, 0);
    return harness_finish("test_tok_nfc");
}
