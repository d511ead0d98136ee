/* tok_compare.c — exactness against HF's reference ids (tests/tokenizer/run.sh makes them with
 * hf_encode.mjs: HF's Rust library). For every corpus line: the ids with the post-processor's
 * tokens equal HF's (lines marked "special" with special tokens allowed, as the library's binding
 * always matches them); a plain
 * line gives the same ids with special tokens refused, and decodes back to its text; a
 * "special" line encoded with special tokens refused holds no special token.
 * usage: tok_compare TOKENIZER_DIR CORPUS.jsonl REF.txt; exit status 0 when all agree (and the
 * --decode and --whole modes below). */
#include "io/shard.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_ids(char *line, tok_ids *ref) {
    ref->n = 0;
    for (char *p = strtok(line, " \n"); p != NULL; p = strtok(NULL, " \n")) {
        if (ref->n == ref->cap) {
            ref->cap = ref->cap ? ref->cap * 2 : 256;
            ref->ids = realloc(ref->ids, ref->cap * sizeof *ref->ids);
            if (ref->ids == NULL) return -1;
        }
        ref->ids[ref->n++] = (int32_t)strtol(p, NULL, 10);
    }
    return 0;
}

static void print_ids(const char *what, const tok_ids *x) {
    printf("    %s (%zu):", what, x->n);
    for (size_t i = 0; i < x->n && i < 40; i++)
        printf(" %d", x->ids[i]);
    printf("%s\n", x->n > 40 ? " ..." : "");
}

/* The plain lines joined by "\n" encode the same whole and cut at every tok_cut_point (the
 * parts after the first with TOK_CONTINUE). 0 when equal. */
static int check_cuts(const tokenizer *t, tok_encoder *e, const char *all, size_t n) {
    tok_ids whole = {0}, parts = {0};
    size_t *cuts = malloc((n + 2) * sizeof *cuts), nc = 0;
    if (cuts == NULL || tok_encode(e, all, n, 0, &whole) != 0) return 1;
    for (size_t end = n; (end = tok_cut_point(t, all, end)) > 0;)
        cuts[nc++] = end;
    size_t start = 0;
    int rc = 0;
    for (size_t k = nc + 1; k-- > 0;) {
        size_t end = k > 0 ? cuts[k - 1] : n;
        rc |= tok_encode(e, all + start, end - start, start > 0 ? TOK_CONTINUE : 0, &parts);
        start = end;
    }
    int same = rc == 0 && whole.n == parts.n &&
               memcmp(whole.ids, parts.ids, whole.n * sizeof *whole.ids) == 0;
    printf("%s: %zu bytes cut at %zu places: %zu ids whole, %zu cut\n", same ? "ok" : "not ok", n,
           nc, whole.n, parts.n);
    free(cuts), free(whole.ids), free(parts.ids);
    return !same;
}

/* text[a, b) as a SentencePiece-style decoder writes it back: a literal "▁" as a space. */
static size_t sp_view(const char *text, size_t a, size_t b, char *out) {
    size_t o = 0;
    for (size_t i = a; i < b; i++) {
        if (i + 3 <= b && memcmp(text + i, "\xe2\x96\x81", 3) == 0) {
            out[o++] = ' ';
            i += 2;
        } else {
            out[o++] = text[i];
        }
    }
    return o;
}

/* The spans of tok_encode_spans for one line (flags as the HF comparison): the same ids as
 * tok_encode; spans in order, each starting where the last ended, covering the text; each
 * token's decoded bytes are the text it spans (SentencePiece-style: with a literal "▁" read as
 * a space), but for a space the normalizer added at the start of a segment (the text, or the
 * text after an added token). Where NFC rewrote
 * part of the line, the tokens of that stretch share its span: there only the order and the
 * cover are checked. Returns the number of failures (printed). */
static int check_spans(const tokenizer *t, tok_encoder *e, const char *text, size_t len, int flags,
                       int lineno) {
    tok_ids ids = {0}, want = {0};
    tok_spans sp = {0};
    tok_text one = {0};
    char err[256], *view = malloc(len + 1);
    int bad = 0, is_sp = strstr(tok_describe(t), "SentencePiece") != NULL, rewritten = 0;
    char *nfc = NULL;
    size_t nfc_n = 0;
    if (strstr(tok_describe(t), "NFC") != NULL && tok_nfc(text, len, &nfc, &nfc_n) > 0)
        rewritten = nfc_n != len || memcmp(nfc, text, len) != 0;
    free(nfc);
    if (view == NULL || tok_encode(e, text, len, flags, &want) != 0 ||
        tok_encode_spans(e, text, len, flags, NULL, NULL, &ids, &sp) != 0 || sp.n != ids.n ||
        ids.n != want.n || (ids.n > 0 && memcmp(ids.ids, want.ids, ids.n * sizeof *ids.ids))) {
        printf("not ok: line %d: tok_encode_spans gives other ids or no span for each\n", lineno);
        return 1;
    }
    size_t at = 0, last_a = 0;
    for (size_t k = 0; k < ids.n && !bad; k++) {
        size_t a = sp.at[2 * k], b = sp.at[2 * k + 1];
        int ok;
        if (rewritten) {
            ok = a >= last_a && a <= at && b >= at && b <= len;
        } else {
            one.n = 0;
            size_t vn = b >= a && b <= len ? (is_sp ? sp_view(text, a, b, view) : b - a) : 0;
            const char *v = is_sp ? view : text + a;
            int dec =
                tok_decode(t, &ids.ids[k], 1, TOK_CONTINUE | TOK_BYTES, &one, err, sizeof err);
            int same = dec == 0 && one.n == vn && memcmp(one.s, v, vn) == 0;
            int seg_start = a == 0 || (k > 0 && tok_is_special(t, ids.ids[k - 1]));
            int added_space = dec == 0 && seg_start && one.n == vn + 1 && one.s[0] == ' ' &&
                              memcmp(one.s + 1, v, vn) == 0;
            ok = a == at && b >= a && b <= len && (same || added_space);
        }
        if (!ok) {
            printf("not ok: line %d: token %zu (id %d) spans [%zu, %zu) after %zu: \"%.*s\"\n",
                   lineno, k, ids.ids[k], a, b, at, (int)(b > a && b <= len ? b - a : 0), text + a);
            bad++;
        }
        last_a = a;
        at = b > at ? b : at;
    }
    if (!bad && ids.n > 0 && at != len) {
        printf("not ok: line %d: the spans end at %zu of %zu bytes\n", lineno, at, len);
        bad++;
    }
    free(ids.ids), free(want.ids), free(sp.at), free(one.s), free(view);
    return bad;
}

/* --decode: each id list of IDS.json decodes to the text HF's reference gave (REF.json, a list
 * of strings: hf_encode.mjs rawdecode). Windows cut inside characters check the U+FFFD rules
 * (byte-level: one per maximal ill-formed subpart; SentencePiece-style ByteFallback: one per
 * byte). 0 when all agree. */
static int compare_decode(const tokenizer *t, const char *ids_path, const char *ref_path) {
    json_error_t je;
    json_t *ids = json_load_file(ids_path, 0, &je), *ref = json_load_file(ref_path, 0, &je);
    if (!json_is_array(ids) || !json_is_array(ref) ||
        json_array_size(ids) != json_array_size(ref)) {
        printf("not ok: cannot read %s and %s as lists of the same length\n", ids_path, ref_path);
        return 1;
    }
    int bad = 0, n = 0, broken = 0;
    tok_text out = {0};
    char err[256];
    for (size_t i = 0; i < json_array_size(ids); i++) {
        json_t *l = json_array_get(ids, i);
        const char *want = json_string_value(json_array_get(ref, i));
        size_t wn = json_string_length(json_array_get(ref, i));
        if (want == NULL) return printf("not ok: reference %zu is not a string\n", i), 1;
        broken += strstr(want, "\xEF\xBF\xBD") != NULL;
        int32_t *v = malloc((json_array_size(l) + 1) * sizeof *v);
        for (size_t k = 0; k < json_array_size(l); k++)
            v[k] = (int32_t)json_integer_value(json_array_get(l, k));
        out.n = 0;
        int rc = tok_decode(t, v, json_array_size(l), 0, &out, err, sizeof err);
        if (rc != 0 || out.n != wn || memcmp(out.s, want, wn) != 0) {
            if (bad++ < 5)
                printf("not ok: list %zu decodes to \"%.*s\", HF: \"%.80s\"\n", i,
                       (int)(out.n < 80 ? out.n : 80), out.s ? out.s : "", want);
        }
        free(v);
        n++;
    }
    printf("%s: decode of %d id lists (windows cut anywhere; %d with U+FFFD), %d differ\n",
           bad ? "not ok" : "ok", n, broken, bad);
    free(out.s);
    json_decref(ids), json_decref(ref);
    return bad != 0;
}

/* --whole: the shard `upipe data text` wrote from one text file (cut into items, on threads)
 * holds the separator, then the ids of the whole text encoded at once. */
static int compare_whole(const char *dir, const char *text_path, const char *shard_path) {
    char err[1024];
    tokenizer *t = tok_load(dir, err, sizeof err);
    if (t == NULL) return printf("not ok: %s\n", err), 1;
    FILE *f = fopen(text_path, "rb");
    if (f == NULL) return printf("not ok: cannot open %s\n", text_path), 1;
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(n + 1);
    if (text == NULL || fread(text, 1, n, f) != n) return printf("not ok: read %s\n", text_path), 1;
    fclose(f);
    tok_encoder *e = tok_encoder_new(t);
    tok_ids ids = {0};
    token_shard sh;
    if (e == NULL || tok_encode(e, text, n, 0, &ids) != 0 ||
        shard_open(&sh, shard_path, (int)tok_vocab_size(t), err, sizeof err) != 0)
        return printf("not ok: encode or open %s: %s\n", shard_path, err), 1;
    int32_t *got = malloc((sh.ntok + 1) * sizeof *got);
    if (got == NULL) return 1;
    shard_read(&sh, 0, sh.ntok, got);
    size_t first = sh.ntok;
    for (size_t i = 0; i + 1 < sh.ntok && i < ids.n && first == sh.ntok; i++)
        if (got[i + 1] != ids.ids[i]) first = i;
    int ok = sh.ntok == ids.n + 1 && first == sh.ntok;
    if (ok)
        printf("ok: %s: the shard's %zu ids after the separator are the whole text's, encoded at "
               "once\n",
               shard_path, ids.n);
    else
        printf("not ok: %s: %zu ids after the separator against %zu of the whole text, first "
               "difference at %zu\n",
               shard_path, sh.ntok - 1, ids.n, first);
    shard_close(&sh);
    free(got);
    free(ids.ids);
    free(text);
    tok_encoder_free(e);
    tok_free(t);
    return !ok;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "--whole") == 0)
        return compare_whole(argv[2], argv[3], argv[4]);
    if (argc == 5 && strcmp(argv[1], "--decode") == 0) {
        char err[1024];
        tokenizer *t = tok_load(argv[2], err, sizeof err);
        if (t == NULL) return printf("not ok: %s\n", err), 1;
        int rc = compare_decode(t, argv[3], argv[4]);
        tok_free(t);
        return rc;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: tok_compare TOKENIZER_DIR CORPUS.jsonl REF.txt\n"
                        "       tok_compare --decode TOKENIZER_DIR IDS.json REF.json\n"
                        "       tok_compare --whole TOKENIZER_DIR TEXT SHARD.bin\n");
        return 2;
    }
    char err[1024];
    tokenizer *t = tok_load(argv[1], err, sizeof err);
    if (t == NULL) {
        printf("not ok: %s\n", err);
        return 1;
    }
    tok_encoder *e = tok_encoder_new(t);
    FILE *fc = fopen(argv[2], "r"), *fr = fopen(argv[3], "r");
    if (e == NULL || fc == NULL || fr == NULL) {
        printf("not ok: cannot open the corpus or the reference\n");
        return 1;
    }
    size_t cap_c = 0, cap_r = 0;
    char *lc = NULL, *lr = NULL;
    tok_ids ref = {0}, got = {0}, plain = {0};
    tok_text back = {0};
    int lineno = 0, bad = 0, lines = 0;
    tok_text all = {0};
    size_t nids = 0;
    while (getline(&lc, &cap_c, fc) > 0) {
        lineno++;
        if (getline(&lr, &cap_r, fr) < 0) {
            printf("not ok: the reference ends before corpus line %d\n", lineno);
            return 1;
        }
        json_error_t je;
        json_t *o = json_loads(lc, JSON_DECODE_ANY, &je);
        const json_t *jt = json_object_get(o, "text");
        if (!json_is_string(jt)) {
            printf("not ok: corpus line %d is not {\"text\": s}\n", lineno);
            return 1;
        }
        const char *text = json_string_value(jt);
        size_t len = json_string_length(jt);
        int special = json_is_true(json_object_get(o, "special"));
        if (parse_ids(lr, &ref) != 0) return 1;
        got.n = plain.n = back.n = 0;
        int rc =
            tok_encode(e, text, len, TOK_ADD_SPECIAL | (special ? TOK_ALLOW_SPECIAL : 0), &got);
        rc |= tok_encode(e, text, len, 0, &plain);
        int ok = rc == 0 && got.n == ref.n &&
                 (ref.n == 0 || memcmp(got.ids, ref.ids, ref.n * sizeof *ref.ids) == 0);
        if (!ok) {
            printf("not ok: line %d: ids differ from HF's: %.80s\n", lineno, lc);
            print_ids("HF  ", &ref);
            print_ids("ours", &got);
        }
        if (check_spans(t, e, text, len, special ? TOK_ALLOW_SPECIAL : 0, lineno) != 0) ok = 0;
        if (!special) {
            all.s = realloc(all.s, all.n + len + 2);
            memcpy(all.s + all.n, text, len);
            all.n += len;
            all.s[all.n++] = '\n';
            int32_t aff[16];
            int np = tok_prefix_ids(t, aff, 16);
            int same =
                got.n >= (size_t)np && plain.n + (size_t)np <= got.n &&
                (plain.n == 0 || memcmp(plain.ids, got.ids + np, plain.n * sizeof *plain.ids) == 0);
            if (!same) {
                printf("not ok: line %d: special tokens refused gives other ids\n", lineno);
                ok = 0;
            }
            /* a tokenizer with the NFC normalizer gives back NFC(x) (HF's Rust library's) */
            char *nfc = NULL;
            const char *want = text;
            size_t wlen = len;
            if (strstr(tok_describe(t), "NFC") != NULL && tok_nfc(text, len, &nfc, &wlen) > 0)
                want = nfc;
            else
                wlen = len;
            /* SentencePiece-style: a literal "\u2581" in the text decodes as a space, as in HF */
            char *sp = NULL;
            if (strstr(tok_describe(t), "SentencePiece") != NULL && strstr(text, "\xe2\x96\x81")) {
                sp = malloc(len + 1);
                size_t so = 0;
                for (size_t i = 0; i < len; i++) {
                    if (i + 3 <= len && memcmp(text + i, "\xe2\x96\x81", 3) == 0) {
                        sp[so++] = ' ';
                        i += 2;
                    } else {
                        sp[so++] = text[i];
                    }
                }
                want = sp;
                wlen = so;
            }
            int dec = tok_decode(t, plain.ids, plain.n, 0, &back, err, sizeof err);
            int same_text =
                dec == 0 && back.n == wlen && (wlen == 0 || memcmp(back.s, want, wlen) == 0);
            free(nfc);
            free(sp);
            if (!same_text) {
                printf("not ok: line %d: decode(encode(x)) != x: \"%.80s\"\n", lineno,
                       back.s ? back.s : "");
                ok = 0;
            }
        } else {
            for (size_t i = 0; i < plain.n; i++)
                if (tok_is_special(t, plain.ids[i])) {
                    printf("not ok: line %d: special token %d from plain text\n", lineno,
                           plain.ids[i]);
                    ok = 0;
                    break;
                }
        }
        bad += !ok;
        lines++;
        nids += ref.n;
        json_decref(o);
    }
    bad += check_cuts(t, e, all.s, all.n);
    free(all.s);
    printf("%s: %s: %d lines, %zu ids, %d differ (%s)\n", bad ? "not ok" : "ok", argv[1], lines,
           nids, bad, tok_describe(t));
    free(lc), free(lr), free(ref.ids), free(got.ids), free(plain.ids), free(back.s);
    fclose(fc), fclose(fr);
    tok_encoder_free(e);
    tok_free(t);
    return bad ? 1 : 0;
}
