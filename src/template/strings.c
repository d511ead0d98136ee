/* strings.c — Python's str operations on tagged strings: strip, split, replace, startswith and
 * the case mappings, by code point; the bytes kept keep their tags (render.h). */
#include "template/render.h"

#include <string.h>

/* does code point c occur in chars (a UTF-8 set) */
static int in_set(const jinja_value *chars, uint32_t c) {
    const char *s = chars->u.str.s;
    size_t n = chars->u.str.len;
    for (size_t i = 0; i < n;) {
        size_t l;
        if (jv_cp_at(s, n, i, &l) == c) return 1;
        i += l;
    }
    return 0;
}

jinja_value *jr_str_strip(jinja_renderer *r, const jinja_value *s, const jinja_value *chars,
                          int which) {
    const char *p = s->u.str.s;
    size_t n = s->u.str.len, lo = 0, hi = n;
    if (which & JR_STRIP_LEFT)
        while (lo < n) {
            size_t l;
            uint32_t c = jv_cp_at(p, n, lo, &l);
            if (chars ? !in_set(chars, c) : !py_isspace(c)) break;
            lo += l;
        }
    if (which & JR_STRIP_RIGHT) {
        /* forward scan: hi = end of the last code point not stripped, at or after lo */
        size_t end = lo;
        for (size_t i = lo; i < n;) {
            size_t l;
            uint32_t c = jv_cp_at(p, n, i, &l);
            i += l;
            if (chars ? !in_set(chars, c) : !py_isspace(c)) end = i;
        }
        hi = end;
    }
    if (lo == 0 && hi == n) return (jinja_value *)s;
    return jv_sub(r->a, s, lo, hi);
}

jinja_value *jr_str_split(jinja_renderer *r, const jnode *at, const jinja_value *s,
                          const jinja_value *sep, long long maxsplit) {
    jinja_value *l = jinja_new_list(r->a);
    const char *p = s->u.str.s;
    size_t n = s->u.str.len;
    if (sep) {
        if (sep->u.str.len == 0) jr_fail(r, at, "split: empty separator");
        size_t i = 0;
        long long k = 0;
        for (;;) {
            const char *f = (maxsplit < 0 || k < maxsplit)
                                ? jv_memfind(p + i, n - i, sep->u.str.s, sep->u.str.len)
                                : NULL;
            if (!f) {
                jinja_list_push(r->a, l, jv_sub(r->a, s, i, n));
                return l;
            }
            size_t j = (size_t)(f - p);
            jinja_list_push(r->a, l, jv_sub(r->a, s, i, j));
            i = j + sep->u.str.len;
            k++;
        }
    }
    /* runs of whitespace; no empty strings */
    size_t i = 0;
    long long k = 0;
    while (i < n) {
        size_t len;
        while (i < n && py_isspace(jv_cp_at(p, n, i, &len)))
            i += len;
        if (i >= n) break;
        if (maxsplit >= 0 && k >= maxsplit) {
            /* the rest, as it is, is the last piece */
            jinja_list_push(r->a, l, jv_sub(r->a, s, i, n));
            return l;
        }
        size_t j = i;
        while (j < n && !py_isspace(jv_cp_at(p, n, j, &len)))
            j += len;
        jinja_list_push(r->a, l, jv_sub(r->a, s, i, j));
        k++;
        i = j;
    }
    return l;
}

jinja_value *jr_str_replace(jinja_renderer *r, const jinja_value *s, const jinja_value *old,
                            const jinja_value *nw, long long count) {
    jv_sb b;
    sb_init(&b, r->a);
    const char *p = s->u.str.s;
    size_t n = s->u.str.len, i = 0;
    long long k = 0;
    if (old->u.str.len == 0) {
        /* Python inserts new before every code point and at the end */
        size_t cnt;
        size_t *off = jr_cp_offsets(r, s, &cnt);
        for (size_t c = 0; c <= cnt; c++) {
            if (count < 0 || k < count) {
                sb_put_str(&b, nw);
                k++;
            }
            if (c < cnt) sb_put_sub(&b, s, off[c], off[c + 1]);
        }
        return sb_finish(&b);
    }
    for (;;) {
        const char *f = (count < 0 || k < count)
                            ? jv_memfind(p + i, n - i, old->u.str.s, old->u.str.len)
                            : NULL;
        if (!f) break;
        size_t j = (size_t)(f - p);
        sb_put_sub(&b, s, i, j);
        sb_put_str(&b, nw);
        i = j + old->u.str.len;
        k++;
    }
    sb_put_sub(&b, s, i, n);
    return sb_finish(&b);
}

int jr_str_starts_with(const jinja_value *s, const jinja_value *x, int end) {
    size_t n = s->u.str.len, m = x->u.str.len;
    if (m > n) return 0;
    return memcmp(s->u.str.s + (end ? n - m : 0), x->u.str.s, m) == 0;
}

/* upper / lower / capitalize / title of ASCII text; other text is refused */
jinja_value *jr_str_case(jinja_renderer *r, const jnode *at, const jinja_value *s, jr_case how,
                         const char *nm) {
    jv_sb b;
    sb_init(&b, r->a);
    sb_put_str(&b, s);
    int word_start = 1;
    for (size_t i = 0; i < b.len; i++) {
        unsigned char c = (unsigned char)b.s[i];
        if (c >= 0x80) jr_fail(r, at, "%s of non-ASCII text is not supported", nm);
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int up = how == JR_CASE_UPPER || (how == JR_CASE_CAPITALIZE && i == 0 && alpha) ||
                 (how == JR_CASE_TITLE && word_start && alpha);
        if (up && c >= 'a' && c <= 'z') b.s[i] = (char)(c - 32);
        if (!up && how != JR_CASE_UPPER && c >= 'A' && c <= 'Z') b.s[i] = (char)(c + 32);
        if (how == JR_CASE_TITLE) word_start = !alpha;
    }
    return sb_finish(&b);
}
