/* tok_nfc.c — NFC as HF's Rust library computes it (tok_internal.h).
 *
 * The library's normalizers (the crate unicode-normalization-alignments) have Unicode 9.0
 * tables; utf8proc has a later Unicode. A character assigned since 9.0 that utf8proc normalizes
 * (a mark like U+07FD, class 220; a decomposition; a part of one) is, for the library, a starter
 * that composes with nothing: no mark reorders across it and nothing composes through it. So the
 * text between such characters is normalized alone, by utf8proc (for the characters 9.0 knows,
 * Unicode's stability policy keeps both the same, which tools/gen-nfc-unicode9.py checks), and
 * the characters are copied as they are. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define NFC_FLAGS (UTF8PROC_STABLE | UTF8PROC_COMPOSE)

/* 1 when the library's tables do not know cp and utf8proc would normalize it. */
static int nfc_unknown(int32_t cp) {
    size_t lo = 0, hi = tok_nfc_nunknown;
    if (cp < (int32_t)tok_nfc_unknown[0][0] || (uint32_t)cp > tok_nfc_unknown[hi - 1][1]) return 0;
    while (lo < hi) { /* the first range whose end is >= cp */
        size_t mid = (lo + hi) / 2;
        if (tok_nfc_unknown[mid][1] < (uint32_t)cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < tok_nfc_nunknown && tok_nfc_unknown[lo][0] <= (uint32_t)cp;
}

/* Room for more bytes in buf[*len, *cap). 0, or -1 when out of memory. */
static int nfc_reserve(char **buf, size_t len, size_t *cap, size_t more) {
    if (len + more <= *cap) return 0;
    size_t nc = (len + more) * 2 + 64;
    char *q = realloc(*buf, nc);
    if (q == NULL) return -1;
    *buf = q, *cap = nc;
    return 0;
}

/* Appends utf8proc's NFC of s[0, n) (valid UTF-8) to buf[*len, *cap). 0, or -1 when out of
 * memory. */
static int nfc_append(const char *s, size_t n, char **buf, size_t *len, size_t *cap) {
    utf8proc_uint8_t *m = NULL;
    utf8proc_ssize_t r = 0;
    if (n > 0) r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &m, NFC_FLAGS);
    if (r < 0) return -1; /* valid UTF-8: only out of memory fails */
    if (nfc_reserve(buf, *len, cap, (size_t)r) != 0) {
        free(m);
        return -1;
    }
    if (r > 0) memcpy(*buf + *len, m, (size_t)r);
    *len += (size_t)r;
    free(m);
    return 0;
}

int tok_nfc(const char *s, size_t n, char **out, size_t *out_n) {
    const uint8_t *u = (const uint8_t *)s;
    size_t first = n; /* the first character the library's tables do not know */
    *out = NULL, *out_n = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        int k = tok_utf8_next(u + i, n - i, &cp);
        if (k < 0) return 0; /* not UTF-8: left as it is */
        if (first == n && nfc_unknown(cp)) first = i;
        i += (size_t)k;
    }
    size_t len = 0, cap = 0;
    if (first == n) {
        utf8proc_uint8_t *m = NULL;
        utf8proc_ssize_t r = utf8proc_map(u, (utf8proc_ssize_t)n, &m, NFC_FLAGS);
        if (r < 0) return -1;
        *out = (char *)m, *out_n = (size_t)r;
        return 1;
    }
    size_t from = 0;
    for (size_t i = first; i < n;) {
        int32_t cp;
        int k = tok_utf8_next(u + i, n - i, &cp);
        if (nfc_unknown(cp)) { /* the stretch before it, normalized; then it, as it is */
            if (nfc_append(s + from, i - from, out, &len, &cap) != 0 ||
                nfc_reserve(out, len, &cap, (size_t)k) != 0)
                goto oom;
            memcpy(*out + len, s + i, (size_t)k);
            len += (size_t)k;
            from = i + (size_t)k;
        }
        i += (size_t)k;
    }
    if (nfc_append(s + from, n - from, out, &len, &cap) != 0) goto oom;
    *out_n = len;
    return 1;
oom:
    free(*out);
    *out = NULL;
    return -1;
}
