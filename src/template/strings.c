/* strings.c — Python's str operations on tagged strings: strip, split, replace, startswith and
 * the case mappings, by code point; the bytes kept keep their tags (render.h). */
#include "template/render.h"

#include <string.h>
#include <utf8proc.h>

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

/* ---- case mapping ---- */

/* Whether Python's str.upper (title: str.title) of c is several code points (SpecialCasing.txt:
 * ß, ŉ, ǰ, Greek with ypogegrammeni, the Latin ligatures, ...). These are code points whose full
 * case folding is several, less İ and ẞ, which upper-case to themselves; in title case, less
 * those with a one-code-point title case (ᾳ to ᾼ) or that are title case already (ᾼ). */
static int case_is_several(uint32_t c, int title) {
    if (c == 0x130 || c == 0x1e9e) return 0;
    utf8proc_int32_t x = (utf8proc_int32_t)c, buf[4];
    int boundclass = 0;
    if (utf8proc_decompose_char(x, buf, 4, UTF8PROC_CASEFOLD, &boundclass) <= 1) return 0;
    if (!title || c == 0xdf) return 1; /* utf8proc title-cases ß to ẞ, Python to Ss */
    return utf8proc_totitle(x) == x && utf8proc_category(x) != UTF8PROC_CATEGORY_LT;
}

/* The letters and symbols that are cased (Unicode's Other_Lowercase and Other_Uppercase) without
 * a case mapping or a cased category, so utf8proc's tables do not tell: modifier letters (ª º ʰ
 * ...) and the circled and squared Latin capitals, as of Unicode 15. */
static const uint32_t cased_other[][2] = {
    {0xaa, 0xaa},       {0xba, 0xba},       {0x2b0, 0x2b8},     {0x2c0, 0x2c1},
    {0x2e0, 0x2e4},     {0x37a, 0x37a},     {0x1d2c, 0x1d6a},   {0x1d78, 0x1d78},
    {0x1d9b, 0x1dbf},   {0x2071, 0x2071},   {0x207f, 0x207f},   {0x2090, 0x209c},
    {0x2c7c, 0x2c7d},   {0xa69c, 0xa69d},   {0xa770, 0xa770},   {0xa7f8, 0xa7f9},
    {0xab5c, 0xab5f},   {0x10780, 0x10780}, {0x10783, 0x10785}, {0x10787, 0x107b0},
    {0x107b2, 0x107ba}, {0x1e030, 0x1e06d}, {0x1f130, 0x1f149}, {0x1f150, 0x1f169},
    {0x1f170, 0x1f189}};

/* Python's notion of a cased character (str.title's word boundaries): a cased category, a case
 * mapping, or one of the above */
static int is_cased(uint32_t c) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT)
        return 1;
    utf8proc_int32_t x = (utf8proc_int32_t)c;
    if (utf8proc_toupper(x) != x || utf8proc_tolower(x) != x || utf8proc_totitle(x) != x) return 1;
    for (size_t i = 0; i < sizeof cased_other / sizeof *cased_other; i++)
        if (c >= cased_other[i][0] && c <= cased_other[i][1]) return 1;
    return 0;
}

/* Python's str.islower (lower) or str.isupper of s: at least one cased character, and none of
 * the other case nor in title case. Lowercase and Uppercase are Unicode's properties: the
 * categories Ll and Lu, and the cased characters of other categories by their case mapping (Ⓐ,
 * Ⅻ, U+0345) or the table above (its squared and negative capitals upper, the rest lower). */
int jr_str_is_case(const jinja_value *s, int lower) {
    int cased = 0;
    for (size_t i = 0, l; i < s->u.str.len; i += l) {
        uint32_t c = jv_cp_at(s->u.str.s, s->u.str.len, i, &l);
        if ((l == 1 && c >= 0x80) || !is_cased(c)) continue; /* an invalid byte is not cased */
        utf8proc_int32_t x = (utf8proc_int32_t)c;
        utf8proc_category_t k = utf8proc_category(x);
        int is_low = k == UTF8PROC_CATEGORY_LL, is_up = k == UTF8PROC_CATEGORY_LU;
        if (k == UTF8PROC_CATEGORY_LT) return 0;
        if (!is_low && !is_up) { /* lower when it has an upper case, else as above */
            is_up = utf8proc_toupper(x) == x &&
                    (utf8proc_tolower(x) != x || (c >= 0x1f130 && c <= 0x1f189));
            is_low = !is_up;
        }
        if (lower ? is_up : is_low) return 0;
        cased = 1;
    }
    return cased;
}

/* c in title case (start of a word) or upper case (up), else in lower case; 0 when Python's
 * mapping is not one code point or depends on context (a final sigma), which is refused */
static uint32_t map_case(uint32_t c, int up, int title) {
    utf8proc_int32_t x = (utf8proc_int32_t)c;
    if (up) {
        if (case_is_several(c, title)) return 0;
        return (uint32_t)(title ? utf8proc_totitle(x) : utf8proc_toupper(x));
    }
    if (c == 0x130 || c == 0x3a3) return 0; /* İ lowers to two code points; Σ to σ or ς */
    return (uint32_t)utf8proc_tolower(x);
}

/* the code point at s[*i] (in *c) mapped as `how` says, *i moved past it; *word_start: title's
 * state */
static uint32_t case_next(jinja_renderer *r, const jnode *at, const jinja_value *s, size_t *i,
                          uint32_t *c_out, jr_case how, int *word_start, const char *nm) {
    size_t l, at_byte = *i;
    uint32_t c = jv_cp_at(s->u.str.s, s->u.str.len, at_byte, &l);
    *c_out = c;
    *i += l;
    int cased = (l > 1 || c < 0x80) && is_cased(c); /* an invalid byte stays as it is */
    int up = how == JR_CASE_UPPER || (how == JR_CASE_CAPITALIZE && at_byte == 0) ||
             ((how == JR_CASE_TITLE || how == JR_CASE_WORDS) && *word_start);
    if (how == JR_CASE_TITLE) *word_start = !cased;
    if (how == JR_CASE_WORDS)
        *word_start = py_isspace(c) || (c && c < 0x80 && strchr("-({[<", (int)c));
    if (!cased) return c;
    uint32_t m = map_case(c, up, how != JR_CASE_UPPER && how != JR_CASE_WORDS);
    if (!m)
        jr_fail(r, at,
                "%s of U+%04X is not supported (Python maps it to several characters or by "
                "context)",
                nm, (unsigned)c);
    return m;
}

/* the tag of byte i of string s */
static int tag_at(const jinja_value *s, size_t i) {
    for (size_t k = 0; k < s->u.str.nruns; k++)
        if (s->u.str.runs[k].start <= i && i < s->u.str.runs[k].start + s->u.str.runs[k].len)
            return s->u.str.runs[k].tag;
    return JINJA_TAG_DATA;
}

/* Python's case mappings, by utf8proc's tables. The common case keeps every code point's byte
 * length, and the copy is mapped in place; otherwise the string is built anew, a mapped code
 * point taking the tag of the one it replaces. */
jinja_value *jr_str_case(jinja_renderer *r, const jnode *at, const jinja_value *s, jr_case how,
                         const char *nm) {
    jv_sb b;
    sb_init(&b, r->a);
    sb_put_str(&b, s);
    int word_start = 1, same_len = 1;
    for (size_t i = 0; i < s->u.str.len && same_len;) {
        size_t from = i;
        uint32_t c, m = case_next(r, at, s, &i, &c, how, &word_start, nm);
        utf8proc_uint8_t enc[4];
        if (m == c) continue;
        if (utf8proc_encode_char((utf8proc_int32_t)m, enc) == (utf8proc_ssize_t)(i - from))
            memcpy(b.s + from, enc, i - from);
        else
            same_len = 0;
    }
    if (same_len) return sb_finish(&b);
    sb_init(&b, r->a);
    word_start = 1;
    for (size_t i = 0; i < s->u.str.len;) {
        size_t from = i;
        utf8proc_uint8_t enc[4];
        uint32_t c, m = case_next(r, at, s, &i, &c, how, &word_start, nm);
        if (m == c)
            sb_put_sub(&b, s, from, i);
        else
            sb_put(&b, (const char *)enc, (size_t)utf8proc_encode_char((utf8proc_int32_t)m, enc),
                   tag_at(s, from));
    }
    return sb_finish(&b);
}
