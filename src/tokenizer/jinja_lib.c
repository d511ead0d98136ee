/* jinja_lib.c — what templates call: the filters, tests, string and dict methods and globals
 * (range, namespace, dict, raise_exception, strftime_now), with Python's semantics; strings keep
 * their bytes' tags (jinja.h). */
#include "tokenizer/jinja_eval.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- filter, test, function and method numbers ---- */

static const char *const filter_names[] = {
    "trim",    "length", "count",      "tojson",     "string",     "list",  "first",   "last",
    "default", "d",      "upper",      "lower",      "capitalize", "title", "replace", "join",
    "select",  "reject", "selectattr", "rejectattr", "map",        "items", "reverse", "int",
    "float",   "abs",    "safe",       "e",          "escape",     NULL};
enum {
    F_TRIM,
    F_LENGTH,
    F_COUNT,
    F_TOJSON,
    F_STRING,
    F_LIST,
    F_FIRST,
    F_LAST,
    F_DEFAULT,
    F_D,
    F_UPPER,
    F_LOWER,
    F_CAPITALIZE,
    F_TITLE,
    F_REPLACE,
    F_JOIN,
    F_SELECT,
    F_REJECT,
    F_SELECTATTR,
    F_REJECTATTR,
    F_MAP,
    F_ITEMS,
    F_REVERSE,
    F_INT,
    F_FLOAT,
    F_ABS,
    F_SAFE,
    F_E,
    F_ESCAPE,
};

static const char *const test_names[] = {
    "defined",     "undefined",   "none",    "string",   "mapping", "iterable", "sequence",
    "number",      "integer",     "float",   "boolean",  "true",    "false",    "odd",
    "even",        "divisibleby", "equalto", "eq",       "==",      "ne",       "!=",
    "lt",          "<",           "le",      "<=",       "gt",      ">",        "ge",
    ">=",          "in",          "sameas",  "callable", "lower",   "upper",    "lessthan",
    "greaterthan", NULL};
enum {
    T_DEFINED,
    T_UNDEFINED,
    T_NONE,
    T_STRING,
    T_MAPPING,
    T_ITERABLE,
    T_SEQUENCE,
    T_NUMBER,
    T_INTEGER,
    T_FLOAT,
    T_BOOLEAN,
    T_TRUE,
    T_FALSE,
    T_ODD,
    T_EVEN,
    T_DIVISIBLEBY,
    T_EQUALTO,
    T_EQ,
    T_EQ2,
    T_NE,
    T_NE2,
    T_LT,
    T_LT2,
    T_LE,
    T_LE2,
    T_GT,
    T_GT2,
    T_GE,
    T_GE2,
    T_IN,
    T_SAMEAS,
    T_CALLABLE,
    T_LOWER,
    T_UPPER,
    T_LESSTHAN,
    T_GREATERTHAN
};

static int find_name(const char *const *names, const char *name) {
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], name)) return i;
    return -1;
}
int jinja_filter_id(const char *name) {
    return find_name(filter_names, name);
}
int jinja_test_id(const char *name) {
    return find_name(test_names, name);
}

/* globals, then methods (bound to self) */
const char *const jr_func_names[] = {
    "range", "namespace", "dict", "raise_exception", "strftime_now",
    /* str */
    "strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper", "lower", "title",
    "capitalize", "replace", "find", "count", "join", "isdigit", "rsplit",
    /* dict */
    "items", "keys", "values", "get", NULL};
/* ---- strings ---- */

/* byte offsets of the code points of s: (*n + 1) entries, the last the length */
size_t *jr_cp_offsets(R *r, const jinja_value *s, size_t *n) {
    size_t cnt = utf8_count(s->u.str.s, s->u.str.len);
    size_t *off = jv_alloc(r->a, (cnt + 1) * sizeof *off);
    size_t k = 0;
    for (size_t i = 0; i < s->u.str.len;) {
        size_t l;
        utf8_next(s->u.str.s, s->u.str.len, i, &l);
        off[k++] = i;
        i += l;
    }
    off[k] = s->u.str.len;
    *n = cnt;
    return off;
}

jinja_value *jr_to_str(R *r, const jinja_value *v) {
    if (v->kind == JV_STR) return (jinja_value *)v;
    jv_sb b;
    sb_init(&b, r->a);
    jv_str_into(&b, v);
    jinja_value *res = sb_finish(&b);
    jv_retag_from(res, v);
    return res;
}

/* does code point c occur in chars (a UTF-8 set) */
static int in_set(const jinja_value *chars, uint32_t c) {
    const char *s = chars->u.str.s;
    size_t n = chars->u.str.len;
    for (size_t i = 0; i < n;) {
        size_t l;
        if (utf8_next(s, n, i, &l) == c) return 1;
        i += l;
    }
    return 0;
}

/* str.strip / lstrip / rstrip (which: 1 left, 2 right, 3 both); chars NULL: whitespace */
static jinja_value *str_strip(R *r, const jinja_value *s, const jinja_value *chars, int which) {
    const char *p = s->u.str.s;
    size_t n = s->u.str.len, lo = 0, hi = n;
    if (which & 1)
        while (lo < n) {
            size_t l;
            uint32_t c = utf8_next(p, n, lo, &l);
            if (chars ? !in_set(chars, c) : !py_isspace(c)) break;
            lo += l;
        }
    if (which & 2) {
        /* forward scan: hi = end of the last code point not stripped, at or after lo */
        size_t end = lo;
        for (size_t i = lo; i < n;) {
            size_t l;
            uint32_t c = utf8_next(p, n, i, &l);
            i += l;
            if (chars ? !in_set(chars, c) : !py_isspace(c)) end = i;
        }
        hi = end;
    }
    if (lo == 0 && hi == n) return (jinja_value *)s;
    return jv_sub(r->a, s, lo, hi);
}

static jinja_value *str_split(R *r, const jnode *at, const jinja_value *s, const jinja_value *sep,
                              long long maxsplit) {
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
        while (i < n && py_isspace(utf8_next(p, n, i, &len)))
            i += len;
        if (i >= n) break;
        if (maxsplit >= 0 && k >= maxsplit) {
            /* the rest, as it is, is the last piece */
            jinja_list_push(r->a, l, jv_sub(r->a, s, i, n));
            return l;
        }
        size_t j = i;
        while (j < n && !py_isspace(utf8_next(p, n, j, &len)))
            j += len;
        jinja_list_push(r->a, l, jv_sub(r->a, s, i, j));
        k++;
        i = j;
    }
    return l;
}

static jinja_value *str_replace(R *r, const jinja_value *s, const jinja_value *old,
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

static int starts_with(const jinja_value *s, const jinja_value *x, int end) {
    size_t n = s->u.str.len, m = x->u.str.len;
    if (m > n) return 0;
    return memcmp(s->u.str.s + (end ? n - m : 0), x->u.str.s, m) == 0;
}

/* upper / lower / capitalize / title of ASCII text; other text is refused */
static jinja_value *str_case(R *r, const jnode *at, const jinja_value *s, int how, const char *nm) {
    jv_sb b;
    sb_init(&b, r->a);
    sb_put_str(&b, s);
    int word_start = 1;
    for (size_t i = 0; i < b.len; i++) {
        unsigned char c = (unsigned char)b.s[i];
        if (c >= 0x80) jr_fail(r, at, "%s of non-ASCII text is not supported", nm);
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int up =
            how == 0 || ((how == 2 || how == 3) && word_start && alpha && (how == 3 || i == 0));
        if (how == 2 && i > 0) up = 0;
        if (up && c >= 'a' && c <= 'z') b.s[i] = (char)(c - 32);
        if (!up && how != 0 && c >= 'A' && c <= 'Z') b.s[i] = (char)(c + 32);
        if (how == 3) word_start = !alpha;
    }
    return sb_finish(&b);
}
/* argument `pos` or keyword `name`; NULL when absent */
jinja_value *jr_arg(const cargs *c, size_t pos, const char *name) {
    if (pos < c->n) return c->args[pos];
    for (size_t i = 0; name && i < c->nkw; i++)
        if (!strcmp(c->kwn[i], name)) return c->kwv[i];
    return NULL;
}

void jr_check_args(R *r, const jnode *at, const cargs *c, const char *what, size_t maxpos,
                   const char *const *kws) {
    if (c->n > maxpos)
        jr_fail(r, at, "%s takes at most %zu positional arguments (%zu given)", what, maxpos, c->n);
    for (size_t i = 0; i < c->nkw; i++) {
        int ok = 0;
        for (size_t k = 0; kws && kws[k]; k++)
            if (!strcmp(kws[k], c->kwn[i])) ok = 1;
        if (!ok) jr_fail(r, at, "%s got an unexpected keyword argument '%s'", what, c->kwn[i]);
    }
}

jinja_value *jr_need_str(R *r, const jnode *at, jinja_value *v, const char *what) {
    if (!v || v->kind != JV_STR)
        jr_fail(r, at, "%s must be a string, not %s", what, v ? jv_type_name(v) : "nothing");
    return v;
}
jinja_value *jr_call_func(R *r, const jnode *at, jinja_value *f, cargs *c) {
    jinja_value *self = f->u.func.self;
    int id = f->u.func.id;
    switch (id) {
    case G_RANGE: {
        jr_check_args(r, at, c, "range", 3, NULL);
        if (c->n == 0) jr_fail(r, at, "range expected at least 1 argument");
        long long a = 0, b, s = 1;
        if (c->n == 1)
            b = jr_as_int(r, at, c->args[0], "range()'s argument");
        else {
            a = jr_as_int(r, at, c->args[0], "range()'s argument");
            b = jr_as_int(r, at, c->args[1], "range()'s argument");
            if (c->n == 3) s = jr_as_int(r, at, c->args[2], "range()'s step");
        }
        if (s == 0) jr_fail(r, at, "range() arg 3 must not be zero");
        jinja_value *l = jinja_new_list(r->a);
        for (long long i = a; s > 0 ? i < b : i > b; i += s) {
            jr_step(r, at);
            jinja_list_push(r->a, l, jr_int(r, i));
            if ((s > 0 && i > LLONG_MAX - s) || (s < 0 && i < LLONG_MIN - s)) break;
        }
        return l;
    }
    case G_NAMESPACE:
    case G_DICT: {
        jinja_value *d = jinja_new_dict(r->a);
        if (c->n > 1) jr_fail(r, at, "%s takes at most one positional argument", f->name);
        if (c->n == 1) {
            jinja_value *src = c->args[0];
            if (src->kind != JV_DICT || src->is_ns)
                jr_fail(r, at, "%s() of a %s is not supported", f->name, jv_type_name(src));
            for (size_t i = 0; i < src->u.dict.n; i++)
                jv_dict_put(r->a, d, src->u.dict.keys[i], src->u.dict.vals[i]);
        }
        for (size_t i = 0; i < c->nkw; i++)
            jv_dict_put(r->a, d, jv_cstr(r->a, c->kwn[i]), c->kwv[i]);
        d->is_ns = id == G_NAMESPACE;
        return d;
    }
    case G_RAISE: {
        jinja_value *m = c->n ? jr_to_str(r, c->args[0]) : jv_cstr(r->a, "");
        jr_fail(r, at, "raise_exception: %.*s", (int)(m->u.str.len < 300 ? m->u.str.len : 300),
                m->u.str.s);
        return NULL;
    }
    case G_STRFTIME: {
        jr_check_args(r, at, c, "strftime_now", 1, NULL);
        jinja_value *fmt = jr_need_str(r, at, jr_arg(c, 0, NULL), "strftime_now's format");
        time_t t = (time_t)r->o.now;
        struct tm tm;
        if (!gmtime_r(&t, &tm)) jr_fail(r, at, "strftime_now: time out of range");
        char buf[512];
        char *f0 = jv_strdup(r->a, fmt->u.str.s, fmt->u.str.len);
        size_t n = strftime(buf, sizeof buf, f0, &tm);
        if (n == 0 && fmt->u.str.len)
            jr_fail(r, at, "strftime_now: format too long or empty result");
        return jv_str_tag(r->a, buf, n, JINJA_TAG_DATA);
    }
    default:
        break;
    }
    /* methods */
    const char *nm = jr_func_names[id];
    switch (id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        jr_check_args(r, at, c, nm, 1, NULL);
        jinja_value *ch = jr_arg(c, 0, NULL);
        if (ch && ch->kind == JV_NONE) ch = NULL;
        if (ch) jr_need_str(r, at, ch, "strip's characters");
        return str_strip(r, self, ch, id == M_STRIP ? 3 : id == M_LSTRIP ? 1 : 2);
    }
    case M_SPLIT:
    case M_RSPLIT: {
        static const char *const kws[] = {"sep", "maxsplit", NULL};
        jr_check_args(r, at, c, nm, 2, kws);
        jinja_value *sep = jr_arg(c, 0, "sep"), *ms = jr_arg(c, 1, "maxsplit");
        if (sep && sep->kind == JV_NONE) sep = NULL;
        if (sep) jr_need_str(r, at, sep, "split's separator");
        long long m = ms ? jr_as_int(r, at, ms, "maxsplit") : -1;
        if (id == M_RSPLIT && m >= 0) jr_fail(r, at, "rsplit with maxsplit is not supported");
        return str_split(r, at, self, sep, m);
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        jr_check_args(r, at, c, nm, 1, NULL);
        jinja_value *x = jr_arg(c, 0, NULL);
        if (!x) jr_fail(r, at, "%s takes one argument", nm);
        if (x->kind == JV_LIST) {
            for (size_t i = 0; i < x->u.list.n; i++)
                if (starts_with(self, jr_need_str(r, at, x->u.list.items[i], nm), id == M_ENDSWITH))
                    return jr_bool(r, 1);
            return jr_bool(r, 0);
        }
        return jr_bool(r, starts_with(self, jr_need_str(r, at, x, nm), id == M_ENDSWITH));
    }
    case M_UPPER:
        jr_check_args(r, at, c, nm, 0, NULL);
        return str_case(r, at, self, 0, nm);
    case M_LOWER:
        jr_check_args(r, at, c, nm, 0, NULL);
        return str_case(r, at, self, 1, nm);
    case M_CAPITALIZE:
        jr_check_args(r, at, c, nm, 0, NULL);
        return str_case(r, at, self, 2, nm);
    case M_TITLE:
        jr_check_args(r, at, c, nm, 0, NULL);
        return str_case(r, at, self, 3, nm);
    case M_REPLACE: {
        jr_check_args(r, at, c, nm, 3, NULL);
        if (c->n < 2) jr_fail(r, at, "replace takes two or three arguments");
        long long cnt = c->n == 3 ? jr_as_int(r, at, c->args[2], "replace's count") : -1;
        return str_replace(r, self, jr_need_str(r, at, c->args[0], "replace's old"),
                           jr_need_str(r, at, c->args[1], "replace's new"), cnt);
    }
    case M_FIND:
    case M_COUNT: {
        jr_check_args(r, at, c, nm, 1, NULL);
        jinja_value *x = jr_need_str(r, at, jr_arg(c, 0, NULL), nm);
        const char *h = self->u.str.s;
        size_t hn = self->u.str.len;
        if (id == M_FIND) {
            const char *f0 = jv_memfind(h, hn, x->u.str.s, x->u.str.len);
            return jr_int(r, f0 ? (long long)utf8_count(h, (size_t)(f0 - h)) : -1);
        }
        if (x->u.str.len == 0) return jr_int(r, (long long)utf8_count(h, hn) + 1);
        long long k = 0;
        for (const char *f0 = h;
             (f0 = jv_memfind(f0, hn - (size_t)(f0 - h), x->u.str.s, x->u.str.len));
             f0 += x->u.str.len)
            k++;
        return jr_int(r, k);
    }
    case M_JOIN: {
        jr_check_args(r, at, c, nm, 1, NULL);
        jinja_value *l =
            jr_iter_list(r, at, jr_arg(c, 0, NULL) ? c->args[0] : jv_undef(r->a, "iterable"));
        jv_sb sb;
        sb_init(&sb, r->a);
        for (size_t i = 0; i < l->u.list.n; i++) {
            if (i) sb_put_str(&sb, self);
            sb_put_str(&sb, jr_need_str(r, at, l->u.list.items[i], "join's items"));
        }
        return sb_finish(&sb);
    }
    case M_ISDIGIT: {
        jr_check_args(r, at, c, nm, 0, NULL);
        int ok = self->u.str.len > 0;
        for (size_t i = 0; i < self->u.str.len; i++)
            if (self->u.str.s[i] < '0' || self->u.str.s[i] > '9') ok = 0;
        return jr_bool(r, ok);
    }
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES: {
        jr_check_args(r, at, c, nm, 0, NULL);
        jinja_value *l = jinja_new_list(r->a);
        for (size_t i = 0; i < self->u.dict.n; i++) {
            if (id == M_ITEMS) {
                jinja_value *t = jinja_new_list(r->a);
                t->is_tuple = 1;
                jinja_list_push(r->a, t, self->u.dict.keys[i]);
                jinja_list_push(r->a, t, self->u.dict.vals[i]);
                jinja_list_push(r->a, l, t);
            } else {
                jinja_list_push(r->a, l,
                                id == M_KEYS ? self->u.dict.keys[i] : self->u.dict.vals[i]);
            }
        }
        return l;
    }
    case M_GET: {
        jr_check_args(r, at, c, nm, 2, NULL);
        if (c->n < 1) jr_fail(r, at, "get takes one or two arguments");
        jinja_value *v = jv_dict_find(self, c->args[0]);
        return v ? v : c->n > 1 ? c->args[1] : jinja_new_none(r->a);
    }
    default:
        break;
    }
    jr_fail(r, at, "function '%s' is not supported", nm);
    return NULL;
}

/* ---- tests and filters ---- */

int jr_apply_test(R *r, const jnode *at, int id, jinja_value *v, jinja_value **args, size_t n) {
    jinja_value *a0 = n > 0 ? args[0] : NULL;
    switch (id) {
    case T_DEFINED:
        return v->kind != JV_UNDEF;
    case T_UNDEFINED:
        return v->kind == JV_UNDEF;
    case T_NONE:
        return v->kind == JV_NONE;
    case T_STRING:
        return v->kind == JV_STR;
    case T_MAPPING:
        return v->kind == JV_DICT && !v->is_ns;
    case T_ITERABLE:
        return v->kind == JV_STR || v->kind == JV_LIST || v->kind == JV_UNDEF ||
               (v->kind == JV_DICT && !v->is_ns);
    case T_SEQUENCE:
        return v->kind == JV_STR || v->kind == JV_LIST || (v->kind == JV_DICT && !v->is_ns);
    case T_NUMBER:
        return jr_is_num(v);
    case T_INTEGER:
        return v->kind == JV_INT;
    case T_FLOAT:
        return v->kind == JV_FLOAT;
    case T_BOOLEAN:
        return v->kind == JV_BOOL;
    case T_TRUE:
        return v->kind == JV_BOOL && v->u.b;
    case T_FALSE:
        return v->kind == JV_BOOL && !v->u.b;
    case T_CALLABLE:
        return v->kind == JV_FUNC || v->kind == JV_MACRO;
    case T_ODD:
    case T_EVEN: {
        if (v->kind == JV_UNDEF) jr_fail_undef(r, at, v);
        long long i = jr_as_int(r, at, v, "the tested value");
        return (i % 2 != 0) == (id == T_ODD);
    }
    case T_DIVISIBLEBY: {
        if (!a0) jr_fail(r, at, "divisibleby needs an argument");
        long long i = jr_as_int(r, at, v, "the tested value"),
                  d = jr_as_int(r, at, a0, "divisibleby's argument");
        if (d == 0) jr_fail(r, at, "integer division or modulo by zero");
        return d == -1 || i % d == 0;
    }
    case T_LOWER:
    case T_UPPER: {
        jinja_value *s = jr_to_str(r, v);
        int cased = 0, ok = 1;
        for (size_t i = 0; i < s->u.str.len; i++) {
            char ch = s->u.str.s[i];
            if ((unsigned char)ch >= 0x80)
                jr_fail(r, at, "the %s test of non-ASCII text is not supported", test_names[id]);
            if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) cased = 1;
            if (id == T_LOWER && ch >= 'A' && ch <= 'Z') ok = 0;
            if (id == T_UPPER && ch >= 'a' && ch <= 'z') ok = 0;
        }
        return cased && ok;
    }
    case T_SAMEAS:
        if (!a0) jr_fail(r, at, "sameas needs an argument");
        if (v->kind != a0->kind) return 0;
        if (v->kind == JV_NONE) return 1;
        if (v->kind == JV_BOOL) return v->u.b == a0->u.b;
        return v == a0;
    default:
        break;
    }
    if (!a0) jr_fail(r, at, "test '%s' needs an argument", test_names[id]);
    switch (id) {
    case T_EQUALTO:
    case T_EQ:
    case T_EQ2:
        return jr_compare(r, at, v, a0, JOP_EQ);
    case T_NE:
    case T_NE2:
        return jr_compare(r, at, v, a0, JOP_NE);
    case T_LT:
    case T_LT2:
    case T_LESSTHAN:
        return jr_compare(r, at, v, a0, JOP_LT);
    case T_LE:
    case T_LE2:
        return jr_compare(r, at, v, a0, JOP_LE);
    case T_GT:
    case T_GT2:
    case T_GREATERTHAN:
        return jr_compare(r, at, v, a0, JOP_GT);
    case T_GE:
    case T_GE2:
        return jr_compare(r, at, v, a0, JOP_GE);
    case T_IN:
        return jr_contains(r, at, v, a0);
    default:
        break;
    }
    jr_fail(r, at, "test '%s' is not supported", test_names[id]);
    return 0;
}

/* obj's attribute path "a.b" as jinja2's attribute getters do (items first, then attributes) */
static jinja_value *attr_path(R *r, const jnode *at, jinja_value *obj, const jinja_value *path) {
    const char *s = path->u.str.s;
    size_t n = path->u.str.len, i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && s[j] != '.')
            j++;
        jinja_value *key = jv_str_tag(r->a, s + i, j - i, JINJA_TAG_DATA);
        int digits = j > i;
        for (size_t k = i; k < j; k++)
            if (s[k] < '0' || s[k] > '9') digits = 0;
        if (digits) key = jr_int(r, atoll(key->u.str.s));
        if (obj->kind == JV_UNDEF) return obj;
        obj = jr_get_item(r, at, obj, key);
        i = j + 1;
    }
    return obj;
}

jinja_value *jr_apply_filter(R *r, const jnode *at, int id, jinja_value *v, cargs *c);

/* select / reject / selectattr / rejectattr */
static jinja_value *select_items(R *r, const jnode *at, jinja_value *v, cargs *c, int attr,
                                 int keep) {
    jinja_value *l = jr_iter_list(r, at, v);
    jinja_value *out = jinja_new_list(r->a);
    size_t k = 0;
    jinja_value *path = NULL;
    if (attr) {
        if (c->n < 1) jr_fail(r, at, "selectattr/rejectattr need an attribute name");
        path = jr_need_str(r, at, c->args[0], "the attribute");
        k = 1;
    }
    int tid = -1;
    if (c->n > k) {
        jinja_value *tn = jr_need_str(r, at, c->args[k], "the test name");
        tid = jinja_test_id(tn->u.str.s);
        if (tid < 0) jr_fail(r, at, "test '%s' is not supported", tn->u.str.s);
        k++;
    }
    for (size_t i = 0; i < l->u.list.n; i++) {
        jr_step(r, at);
        jinja_value *item = l->u.list.items[i];
        jinja_value *tv = attr ? attr_path(r, at, item, path) : item;
        int ok = tid < 0 ? jv_truthy(tv) : jr_apply_test(r, at, tid, tv, c->args + k, c->n - k);
        if (ok == keep) jinja_list_push(r->a, out, item);
    }
    return out;
}

static jinja_value *html_escape(R *r, jinja_value *s) {
    jv_sb b;
    sb_init(&b, r->a);
    size_t start = 0;
    for (size_t i = 0; i < s->u.str.len; i++) {
        const char *e = NULL;
        switch (s->u.str.s[i]) {
        case '&':
            e = "&amp;";
            break;
        case '<':
            e = "&lt;";
            break;
        case '>':
            e = "&gt;";
            break;
        case '"':
            e = "&#34;";
            break;
        case '\'':
            e = "&#39;";
            break;
        default:
            continue;
        }
        sb_put_sub(&b, s, start, i);
        sb_put(&b, e, strlen(e), JINJA_TAG_DATA);
        start = i + 1;
    }
    sb_put_sub(&b, s, start, s->u.str.len);
    return sb_finish(&b);
}

jinja_value *jr_apply_filter(R *r, const jnode *at, int id, jinja_value *v, cargs *c) {
    const char *nm = filter_names[id];
    switch (id) {
    case F_TRIM: {
        jr_check_args(r, at, c, nm, 1, NULL);
        jinja_value *ch = jr_arg(c, 0, NULL);
        if (ch && ch->kind == JV_NONE) ch = NULL;
        if (ch) jr_need_str(r, at, ch, "trim's characters");
        return str_strip(r, jr_to_str(r, v), ch, 3);
    }
    case F_LENGTH:
    case F_COUNT:
        jr_check_args(r, at, c, nm, 0, NULL);
        return jr_int(r, jr_length(r, at, v));
    case F_TOJSON: {
        static const char *const kws[] = {"ensure_ascii", "indent", "separators", "sort_keys",
                                          NULL};
        jr_check_args(r, at, c, nm, 4, kws);
        jinja_value *ea = jr_arg(c, 0, "ensure_ascii"), *ind = jr_arg(c, 1, "indent"),
                    *sep = jr_arg(c, 2, "separators"), *sk = jr_arg(c, 3, "sort_keys");
        if (ea && jv_truthy(ea)) jr_fail(r, at, "tojson with ensure_ascii is not supported");
        int indent = -1;
        if (ind && ind->kind != JV_NONE) {
            indent = (int)jr_as_int(r, at, ind, "tojson's indent");
            if (indent < 0 || indent > 64)
                jr_fail(r, at, "tojson's indent %d is not supported", indent);
        }
        const char *isep = indent >= 0 ? "," : ", ", *ksep = ": ";
        if (sep && sep->kind != JV_NONE) {
            if (sep->kind != JV_LIST || sep->u.list.n != 2)
                jr_fail(r, at, "tojson's separators must be a pair of strings");
            jinja_value *a = jr_need_str(r, at, sep->u.list.items[0], "a separator"),
                        *b = jr_need_str(r, at, sep->u.list.items[1], "a separator");
            isep = jv_strdup(r->a, a->u.str.s, a->u.str.len);
            ksep = jv_strdup(r->a, b->u.str.s, b->u.str.len);
        }
        jv_sb b;
        sb_init(&b, r->a);
        const char *bad = NULL;
        if (jv_json_into(&b, v, indent, isep, ksep, sk && jv_truthy(sk), 0, &bad))
            jr_fail(r, at, "tojson: %s is not JSON serializable", bad);
        jinja_value *res = sb_finish(&b);
        jv_retag_from(res, v);
        return res;
    }
    case F_STRING:
        jr_check_args(r, at, c, nm, 0, NULL);
        return jr_to_str(r, v);
    case F_LIST: {
        jr_check_args(r, at, c, nm, 0, NULL);
        jinja_value *l = jr_iter_list(r, at, v), *o = jinja_new_list(r->a);
        for (size_t i = 0; i < l->u.list.n; i++)
            jinja_list_push(r->a, o, l->u.list.items[i]);
        return o;
    }
    case F_FIRST:
    case F_LAST: {
        jr_check_args(r, at, c, nm, 0, NULL);
        if (v->kind == JV_UNDEF) jr_fail_undef(r, at, v);
        jinja_value *l = jr_iter_list(r, at, v);
        if (l->u.list.n == 0) return jv_undef(r->a, "first/last of an empty sequence");
        return l->u.list.items[id == F_FIRST ? 0 : l->u.list.n - 1];
    }
    case F_DEFAULT:
    case F_D: {
        static const char *const kws[] = {"default_value", "boolean", NULL};
        jr_check_args(r, at, c, nm, 2, kws);
        jinja_value *dv = jr_arg(c, 0, "default_value"), *bo = jr_arg(c, 1, "boolean");
        int use = v->kind == JV_UNDEF || (bo && jv_truthy(bo) && !jv_truthy(v));
        if (!use) return v;
        return dv ? dv : jv_str_tag(r->a, "", 0, JINJA_TAG_DATA);
    }
    case F_UPPER:
    case F_LOWER:
    case F_CAPITALIZE:
    case F_TITLE:
        jr_check_args(r, at, c, nm, 0, NULL);
        return str_case(r, at, jr_to_str(r, v),
                        id == F_UPPER        ? 0
                        : id == F_LOWER      ? 1
                        : id == F_CAPITALIZE ? 2
                                             : 3,
                        nm);
    case F_REPLACE: {
        jr_check_args(r, at, c, nm, 3, NULL);
        if (c->n < 2) jr_fail(r, at, "replace takes two or three arguments");
        long long cnt =
            c->n == 3 && c->args[2]->kind != JV_NONE ? jr_as_int(r, at, c->args[2], "count") : -1;
        return str_replace(r, jr_to_str(r, v), jr_to_str(r, c->args[0]), jr_to_str(r, c->args[1]),
                           cnt);
    }
    case F_JOIN: {
        static const char *const kws[] = {"d", "attribute", NULL};
        jr_check_args(r, at, c, nm, 2, kws);
        jinja_value *sep = jr_arg(c, 0, "d"), *attr = jr_arg(c, 1, "attribute");
        jinja_value *l = jr_iter_list(r, at, v);
        jv_sb b;
        sb_init(&b, r->a);
        for (size_t i = 0; i < l->u.list.n; i++) {
            if (i && sep) jv_str_into(&b, sep);
            jinja_value *it = l->u.list.items[i];
            if (attr) it = attr_path(r, at, it, jr_need_str(r, at, attr, "join's attribute"));
            jv_str_into(&b, it);
        }
        return sb_finish(&b);
    }
    case F_SELECT:
        return select_items(r, at, v, c, 0, 1);
    case F_REJECT:
        return select_items(r, at, v, c, 0, 0);
    case F_SELECTATTR:
        return select_items(r, at, v, c, 1, 1);
    case F_REJECTATTR:
        return select_items(r, at, v, c, 1, 0);
    case F_MAP: {
        jinja_value *l = jr_iter_list(r, at, v), *o = jinja_new_list(r->a);
        jinja_value *attr = jr_arg(c, (size_t)-1, "attribute"),
                    *dflt = jr_arg(c, (size_t)-1, "default");
        if (attr) {
            jr_need_str(r, at, attr, "map's attribute");
            for (size_t i = 0; i < l->u.list.n; i++) {
                jinja_value *x = attr_path(r, at, l->u.list.items[i], attr);
                if (x->kind == JV_UNDEF && dflt) x = dflt;
                jinja_list_push(r->a, o, x);
            }
            return o;
        }
        if (c->n < 1) jr_fail(r, at, "map needs a filter name or attribute=");
        jinja_value *fn = jr_need_str(r, at, c->args[0], "map's filter");
        int fid = jinja_filter_id(fn->u.str.s);
        if (fid < 0 || fid == F_MAP) jr_fail(r, at, "filter '%s' is not supported", fn->u.str.s);
        cargs sub = *c;
        sub.args++;
        sub.n--;
        for (size_t i = 0; i < l->u.list.n; i++)
            jinja_list_push(r->a, o, jr_apply_filter(r, at, fid, l->u.list.items[i], &sub));
        return o;
    }
    case F_ITEMS: {
        jr_check_args(r, at, c, nm, 0, NULL);
        if (v->kind == JV_UNDEF) return jinja_new_list(r->a);
        if (v->kind != JV_DICT || v->is_ns)
            jr_fail(r, at, "items: %s is not a mapping", jv_type_name(v));
        jinja_value *f = jr_func(r, M_ITEMS, v);
        cargs none = {0};
        return jr_call_func(r, at, f, &none);
    }
    case F_REVERSE: {
        jr_check_args(r, at, c, nm, 0, NULL);
        if (v->kind == JV_STR) {
            size_t cnt;
            size_t *off = jr_cp_offsets(r, v, &cnt);
            jv_sb b;
            sb_init(&b, r->a);
            for (size_t i = cnt; i-- > 0;)
                sb_put_sub(&b, v, off[i], off[i + 1]);
            return sb_finish(&b);
        }
        jinja_value *l = jr_iter_list(r, at, v), *o = jinja_new_list(r->a);
        for (size_t i = l->u.list.n; i-- > 0;)
            jinja_list_push(r->a, o, l->u.list.items[i]);
        return o;
    }
    case F_INT:
    case F_FLOAT: {
        static const char *const kws[] = {"default", "base", NULL};
        jr_check_args(r, at, c, nm, 2, kws);
        jinja_value *dv = jr_arg(c, 0, "default");
        if (id == F_INT) {
            if (v->kind == JV_INT) return v;
            if (v->kind == JV_BOOL) return jr_int(r, v->u.b);
            if (v->kind == JV_FLOAT && isfinite(v->u.f) && fabs(v->u.f) < 9.2e18)
                return jr_int(r, (long long)v->u.f);
        } else {
            if (v->kind == JV_FLOAT) return v;
            if (v->kind == JV_INT || v->kind == JV_BOOL) return jinja_new_float(r->a, jr_as_f(v));
        }
        if (v->kind == JV_STR) {
            char *s = jv_strdup(r->a, v->u.str.s, v->u.str.len), *e;
            if (id == F_INT) {
                long long x = strtoll(s, &e, 10);
                while (*e == ' ' || *e == '\t' || *e == '\n')
                    e++;
                if (e != s && !*e && !strchr(s, '_')) return jr_int(r, x);
            } else {
                double x = strtod(s, &e);
                while (*e == ' ' || *e == '\t' || *e == '\n')
                    e++;
                if (e != s && !*e && !strchr(s, '_') && !strchr(s, 'x') && !strchr(s, 'X'))
                    return jinja_new_float(r->a, x);
            }
        }
        if (dv) return dv;
        return id == F_INT ? jr_int(r, 0) : jinja_new_float(r->a, 0.0);
    }
    case F_ABS:
        jr_check_args(r, at, c, nm, 0, NULL);
        if (v->kind == JV_FLOAT) return jinja_new_float(r->a, fabs(v->u.f));
        if (v->kind == JV_INT || v->kind == JV_BOOL) {
            long long i = jr_as_int(r, at, v, "abs");
            if (i == LLONG_MIN) jr_fail(r, at, "integer overflow in abs");
            return jr_int(r, i < 0 ? -i : i);
        }
        jr_fail(r, at, "bad operand type for abs(): '%s'", jv_type_name(v));
        return NULL;
    case F_SAFE:
        jr_check_args(r, at, c, nm, 0, NULL);
        return v;
    case F_E:
    case F_ESCAPE:
        jr_check_args(r, at, c, nm, 0, NULL);
        return html_escape(r, jr_to_str(r, v));
    default:
        break;
    }
    jr_fail(r, at, "filter '%s' is not supported", nm);
    return NULL;
}
