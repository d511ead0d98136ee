/* jinja.c — renders the tree of jinja_parse.c: scopes, statements, expressions with Python's
 * semantics, the filters, tests, methods and globals chat templates use (jinja.h). Errors jump
 * to jinja_render's exit with "line L col C: message"; everything lives in one arena per render,
 * freed there, so an error leaks nothing. */
#include "tokenizer/jinja_impl.h"

#include "core/check.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
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
static const char *const func_names[] = {
    "range", "namespace", "dict", "raise_exception", "strftime_now",
    /* str */
    "strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper", "lower", "title",
    "capitalize", "replace", "find", "count", "join", "isdigit", "rsplit",
    /* dict */
    "items", "keys", "values", "get", NULL};
enum {
    G_RANGE,
    G_NAMESPACE,
    G_DICT,
    G_RAISE,
    G_STRFTIME,
    G_NGLOBALS,
    M_STRIP = G_NGLOBALS,
    M_LSTRIP,
    M_RSTRIP,
    M_SPLIT,
    M_STARTSWITH,
    M_ENDSWITH,
    M_UPPER,
    M_LOWER,
    M_TITLE,
    M_CAPITALIZE,
    M_REPLACE,
    M_FIND,
    M_COUNT,
    M_JOIN,
    M_ISDIGIT,
    M_RSPLIT,
    M_NSTR,
    M_ITEMS = M_NSTR,
    M_KEYS,
    M_VALUES,
    M_GET,
    M_NDICT
};

/* ---- the render state ---- */

typedef struct scope {
    struct scope *parent;
    const char **names;
    jinja_value **vals;
    size_t n, cap;
} scope;

typedef struct {
    jinja_arena *a;
    const jinja_value *vars;
    jinja_opts o;
    jv_sb *out;
    scope *sc, *root;
    int turn;
    long long steps;
    int depth;
    int ctl; /* 1 break, 2 continue */
    jmp_buf jmp;
    char *err;
    size_t errlen;
} R;

UP_NORETURN static void fail(R *r, const jnode *at, const char *fmt, ...) UP_PRINTF(3, 4);
static void fail(R *r, const jnode *at, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->errlen, "line %d col %d: %s", at ? at->line : 0, at ? at->col : 0, msg);
    longjmp(r->jmp, 1);
}

static void step(R *r, const jnode *at) {
    if (++r->steps > r->o.max_steps)
        fail(r, at, "the template runs longer than %lld steps", r->o.max_steps);
}

static void scope_set(R *r, scope *s, const char *name, jinja_value *v) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) {
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        const char **nn = jv_alloc(r->a, cap * sizeof *nn);
        jinja_value **vv = jv_alloc(r->a, cap * sizeof *vv);
        if (s->n) {
            memcpy(nn, s->names, s->n * sizeof *nn);
            memcpy(vv, s->vals, s->n * sizeof *vv);
        }
        s->names = nn;
        s->vals = vv;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
}

static scope *scope_push(R *r, scope *parent) {
    scope *s = jv_alloc(r->a, sizeof *s);
    s->parent = parent;
    return s;
}

static jinja_value *func(R *r, int id, jinja_value *self) {
    jinja_value *f = jv_alloc(r->a, sizeof *f);
    f->kind = JV_FUNC;
    f->turn = -1;
    f->u.func.id = id;
    f->u.func.self = self;
    f->name = func_names[id];
    return f;
}

static jinja_value *lookup(R *r, const char *name) {
    for (scope *s = r->sc; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (!strcmp(s->names[i], name)) return s->vals[i];
    if (r->vars) {
        jinja_value *v = jv_dict_get(r->vars, name, strlen(name));
        if (v) return v;
    }
    for (int i = 0; i < G_NGLOBALS; i++)
        if (!strcmp(func_names[i], name)) return func(r, i, NULL);
    return jv_undef(r->a, name);
}

static jinja_value *mk_int(R *r, long long i) {
    return jinja_new_int(r->a, i);
}
static jinja_value *mk_bool(R *r, int b) {
    return jinja_new_bool(r->a, b);
}

UP_NORETURN static void fail_undef(R *r, const jnode *at, const jinja_value *v) {
    fail(r, at, "'%s' is undefined", v->name ? v->name : "value");
}

/* ---- strings ---- */

/* byte offsets of the code points of s: (*n + 1) entries, the last the length */
static size_t *cp_offsets(R *r, const jinja_value *s, size_t *n) {
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

static jinja_value *to_str(R *r, const jinja_value *v) {
    if (v->kind == JV_STR) return (jinja_value *)v;
    jv_sb b;
    sb_init(&b, r->a);
    jv_str_into(&b, v);
    return sb_finish(&b);
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

static const char *memfind(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && memcmp(h + i, nd, nn) == 0) return h + i;
    return NULL;
}

static jinja_value *str_split(R *r, const jnode *at, const jinja_value *s, const jinja_value *sep,
                              long long maxsplit) {
    jinja_value *l = jinja_new_list(r->a);
    const char *p = s->u.str.s;
    size_t n = s->u.str.len;
    if (sep) {
        if (sep->u.str.len == 0) fail(r, at, "split: empty separator");
        size_t i = 0;
        long long k = 0;
        for (;;) {
            const char *f = (maxsplit < 0 || k < maxsplit)
                                ? memfind(p + i, n - i, sep->u.str.s, sep->u.str.len)
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
        size_t *off = cp_offsets(r, s, &cnt);
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
        const char *f =
            (count < 0 || k < count) ? memfind(p + i, n - i, old->u.str.s, old->u.str.len) : NULL;
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
        if (c >= 0x80) fail(r, at, "%s of non-ASCII text is not supported", nm);
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

/* ---- values ---- */

static long long as_int(R *r, const jnode *at, const jinja_value *v, const char *what) {
    if (v->kind == JV_INT) return v->u.i;
    if (v->kind == JV_BOOL) return v->u.b;
    fail(r, at, "%s must be an integer, not %s", what, jv_type_name(v));
    return 0;
}

static int is_num(const jinja_value *v) {
    return v->kind == JV_INT || v->kind == JV_BOOL || v->kind == JV_FLOAT;
}
static double as_f(const jinja_value *v) {
    return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : (double)v->u.b;
}

static long long length_of(R *r, const jnode *at, const jinja_value *v) {
    switch (v->kind) {
    case JV_STR:
        return (long long)utf8_count(v->u.str.s, v->u.str.len);
    case JV_LIST:
        return (long long)v->u.list.n;
    case JV_DICT:
        if (!v->is_ns) return (long long)v->u.dict.n;
        break;
    case JV_UNDEF:
        return 0;
    default:
        break;
    }
    fail(r, at, "object of type '%s' has no len()", jv_type_name(v));
    return 0;
}

/* the items a for loop or a filter walks: list items, dict keys, code points */
static jinja_value *iter_list(R *r, const jnode *at, const jinja_value *v) {
    if (v->kind == JV_LIST) return (jinja_value *)v;
    jinja_value *l = jinja_new_list(r->a);
    if (v->kind == JV_UNDEF) return l;
    if (v->kind == JV_DICT && !v->is_ns) {
        for (size_t i = 0; i < v->u.dict.n; i++)
            jinja_list_push(r->a, l, v->u.dict.keys[i]);
        return l;
    }
    if (v->kind == JV_STR) {
        size_t cnt;
        size_t *off = cp_offsets(r, v, &cnt);
        for (size_t i = 0; i < cnt; i++)
            jinja_list_push(r->a, l, jv_sub(r->a, v, off[i], off[i + 1]));
        return l;
    }
    fail(r, at, "'%s' object is not iterable", jv_type_name(v));
    return NULL;
}

static int compare(R *r, const jnode *at, const jinja_value *x, const jinja_value *y, int op);

static int contains(R *r, const jnode *at, const jinja_value *item, const jinja_value *seq) {
    switch (seq->kind) {
    case JV_STR:
        if (item->kind != JV_STR)
            fail(r, at, "'in <string>' requires string as left operand, not %s",
                 jv_type_name(item));
        return memfind(seq->u.str.s, seq->u.str.len, item->u.str.s, item->u.str.len) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < seq->u.list.n; i++)
            if (jv_equal(item, seq->u.list.items[i])) return 1;
        return 0;
    case JV_DICT:
        if (seq->is_ns) break;
        return jv_dict_find(seq, item) != NULL;
    case JV_UNDEF:
        return 0;
    default:
        break;
    }
    fail(r, at, "argument of type '%s' is not iterable", jv_type_name(seq));
    return 0;
}

static int compare(R *r, const jnode *at, const jinja_value *x, const jinja_value *y, int op) {
    if (op == JOP_EQ) return jv_equal(x, y);
    if (op == JOP_NE) return !jv_equal(x, y);
    if (op == JOP_IN) return contains(r, at, x, y);
    if (op == JOP_NOTIN) return !contains(r, at, x, y);
    int c;
    if (is_num(x) && is_num(y)) {
        if (x->kind != JV_FLOAT && y->kind != JV_FLOAT) {
            long long a = as_int(r, at, x, ""), b = as_int(r, at, y, "");
            c = (a > b) - (a < b);
        } else {
            double a = as_f(x), b = as_f(y);
            if (isnan(a) || isnan(b)) return 0;
            c = (a > b) - (a < b);
        }
    } else if (x->kind == JV_STR && y->kind == JV_STR) {
        size_t n = x->u.str.len < y->u.str.len ? x->u.str.len : y->u.str.len;
        c = memcmp(x->u.str.s, y->u.str.s, n);
        if (!c) c = (x->u.str.len > y->u.str.len) - (x->u.str.len < y->u.str.len);
    } else if (x->kind == JV_LIST && y->kind == JV_LIST) {
        size_t i = 0;
        while (i < x->u.list.n && i < y->u.list.n &&
               jv_equal(x->u.list.items[i], y->u.list.items[i]))
            i++;
        if (i < x->u.list.n && i < y->u.list.n)
            return compare(r, at, x->u.list.items[i], y->u.list.items[i], op);
        c = (x->u.list.n > y->u.list.n) - (x->u.list.n < y->u.list.n);
    } else {
        if (x->kind == JV_UNDEF) fail_undef(r, at, x);
        if (y->kind == JV_UNDEF) fail_undef(r, at, y);
        static const char *ops[] = {
            [JOP_LT] = "<", [JOP_LE] = "<=", [JOP_GT] = ">", [JOP_GE] = ">="};
        fail(r, at, "'%s' not supported between instances of '%s' and '%s'", ops[op],
             jv_type_name(x), jv_type_name(y));
        c = 0;
    }
    switch (op) {
    case JOP_LT:
        return c < 0;
    case JOP_LE:
        return c <= 0;
    case JOP_GT:
        return c > 0;
    default:
        return c >= 0;
    }
}

/* ---- attribute and item access ---- */

static jinja_value *get_attr(R *r, const jnode *at, jinja_value *obj, const char *name) {
    switch (obj->kind) {
    case JV_UNDEF:
        fail_undef(r, at, obj);
        break;
    case JV_DICT: {
        if (!obj->is_ns) {
            for (int i = M_NSTR; i < M_NDICT; i++)
                if (!strcmp(func_names[i], name)) return func(r, i, obj);
        }
        jinja_value *v = jv_dict_get(obj, name, strlen(name));
        if (v) return v;
        break;
    }
    case JV_STR:
        for (int i = G_NGLOBALS; i < M_NSTR; i++)
            if (!strcmp(func_names[i], name)) return func(r, i, obj);
        break;
    default:
        break;
    }
    return jv_undef(r->a, name);
}

static jinja_value *get_item(R *r, const jnode *at, jinja_value *obj, jinja_value *key) {
    switch (obj->kind) {
    case JV_UNDEF:
        fail_undef(r, at, obj);
        break;
    case JV_DICT: {
        jinja_value *v = jv_dict_find(obj, key);
        if (v) return v;
        if (key->kind == JV_STR) return get_attr(r, at, obj, key->u.str.s);
        break;
    }
    case JV_LIST:
    case JV_STR:
        if (key->kind == JV_INT || key->kind == JV_BOOL) {
            long long i = as_int(r, at, key, "index");
            if (obj->kind == JV_LIST) {
                long long n = (long long)obj->u.list.n;
                if (i < 0) i += n;
                if (i >= 0 && i < n) return obj->u.list.items[i];
            } else {
                size_t cnt;
                size_t *off = cp_offsets(r, obj, &cnt);
                if (i < 0) i += (long long)cnt;
                if (i >= 0 && i < (long long)cnt) return jv_sub(r->a, obj, off[i], off[i + 1]);
            }
        } else if (key->kind == JV_STR && obj->kind == JV_STR) {
            return get_attr(r, at, obj, key->u.str.s);
        }
        break;
    default:
        break;
    }
    char nm[64];
    if (key->kind == JV_STR)
        snprintf(nm, sizeof nm, "%.*s", (int)(key->u.str.len < 60 ? key->u.str.len : 60),
                 key->u.str.s);
    else
        snprintf(nm, sizeof nm, "item");
    return jv_undef(r->a, jv_strdup(r->a, nm, strlen(nm)));
}

/* Python's slice.indices */
static void slice_indices(R *r, const jnode *at, long long len, const jinja_value *s0,
                          const jinja_value *s1, const jinja_value *s2, long long *start,
                          long long *stop, long long *stepv) {
    long long st = 1;
    if (s2 && s2->kind != JV_NONE) st = as_int(r, at, s2, "slice step");
    if (st == 0) fail(r, at, "slice step cannot be zero");
    long long lower = st > 0 ? 0 : -1, upper = st > 0 ? len : len - 1;
    long long a, b;
    if (!s0 || s0->kind == JV_NONE)
        a = st < 0 ? upper : lower;
    else {
        a = as_int(r, at, s0, "slice index");
        if (a < 0) {
            a += len;
            if (a < lower) a = lower;
        } else if (a > upper)
            a = upper;
    }
    if (!s1 || s1->kind == JV_NONE)
        b = st < 0 ? lower : upper;
    else {
        b = as_int(r, at, s1, "slice index");
        if (b < 0) {
            b += len;
            if (b < lower) b = lower;
        } else if (b > upper)
            b = upper;
    }
    *start = a;
    *stop = b;
    *stepv = st;
}

static jinja_value *eval(R *r, const jnode *x);

static jinja_value *do_slice(R *r, const jnode *x, jinja_value *obj) {
    jinja_value *s0 = x->b ? eval(r, x->b) : NULL, *s1 = x->c ? eval(r, x->c) : NULL,
                *s2 = x->d ? eval(r, x->d) : NULL;
    if (obj->kind == JV_UNDEF) fail_undef(r, x, obj);
    long long a, b, st;
    if (obj->kind == JV_LIST) {
        slice_indices(r, x, (long long)obj->u.list.n, s0, s1, s2, &a, &b, &st);
        jinja_value *l = jinja_new_list(r->a);
        for (long long i = a; st > 0 ? i < b : i > b; i += st)
            jinja_list_push(r->a, l, obj->u.list.items[i]);
        return l;
    }
    if (obj->kind == JV_STR) {
        size_t cnt;
        size_t *off = cp_offsets(r, obj, &cnt);
        slice_indices(r, x, (long long)cnt, s0, s1, s2, &a, &b, &st);
        if (st == 1) return jv_sub(r->a, obj, off[a], off[b > a ? b : a]);
        jv_sb sb;
        sb_init(&sb, r->a);
        for (long long i = a; st > 0 ? i < b : i > b; i += st)
            sb_put_sub(&sb, obj, off[i], off[i + 1]);
        return sb_finish(&sb);
    }
    fail(r, x, "'%s' object is not subscriptable", jv_type_name(obj));
    return NULL;
}

/* ---- arithmetic ---- */

static jinja_value *arith(R *r, const jnode *x, int op, jinja_value *a, jinja_value *b) {
    if (op == JOP_CONCAT) {
        jv_sb sb;
        sb_init(&sb, r->a);
        jv_str_into(&sb, a);
        jv_str_into(&sb, b);
        return sb_finish(&sb);
    }
    if (a->kind == JV_UNDEF) fail_undef(r, x, a);
    if (b->kind == JV_UNDEF) fail_undef(r, x, b);
    if (op == JOP_ADD && a->kind == JV_STR && b->kind == JV_STR) {
        jv_sb sb;
        sb_init(&sb, r->a);
        sb_put_str(&sb, a);
        sb_put_str(&sb, b);
        return sb_finish(&sb);
    }
    if (op == JOP_ADD && a->kind == JV_LIST && b->kind == JV_LIST) {
        jinja_value *l = jinja_new_list(r->a);
        for (size_t i = 0; i < a->u.list.n; i++)
            jinja_list_push(r->a, l, a->u.list.items[i]);
        for (size_t i = 0; i < b->u.list.n; i++)
            jinja_list_push(r->a, l, b->u.list.items[i]);
        return l;
    }
    if (op == JOP_MUL &&
        (a->kind == JV_STR || a->kind == JV_LIST || b->kind == JV_STR || b->kind == JV_LIST)) {
        jinja_value *seq = a->kind == JV_STR || a->kind == JV_LIST ? a : b;
        jinja_value *num = seq == a ? b : a;
        if (num->kind != JV_INT && num->kind != JV_BOOL)
            fail(r, x, "can't multiply sequence by non-int of type '%s'", jv_type_name(num));
        long long k = as_int(r, x, num, "count");
        if (seq->kind == JV_STR) {
            jv_sb sb;
            sb_init(&sb, r->a);
            for (long long i = 0; i < k; i++) {
                step(r, x);
                sb_put_str(&sb, seq);
            }
            return sb_finish(&sb);
        }
        jinja_value *l = jinja_new_list(r->a);
        for (long long i = 0; i < k; i++) {
            step(r, x);
            for (size_t j = 0; j < seq->u.list.n; j++)
                jinja_list_push(r->a, l, seq->u.list.items[j]);
        }
        return l;
    }
    static const char *ops[] = {
        [JOP_ADD] = "+",       [JOP_SUB] = "-", [JOP_MUL] = "*", [JOP_DIV] = "/",
        [JOP_FLOORDIV] = "//", [JOP_MOD] = "%", [JOP_POW] = "**"};
    if (!is_num(a) || !is_num(b)) {
        if (op == JOP_MOD && a->kind == JV_STR)
            fail(r, x, "string formatting with '%%' is not supported");
        fail(r, x, "unsupported operand type(s) for %s: '%s' and '%s'", ops[op], jv_type_name(a),
             jv_type_name(b));
    }
    if (a->kind != JV_FLOAT && b->kind != JV_FLOAT && op != JOP_DIV) {
        long long p = as_int(r, x, a, ""), q = as_int(r, x, b, ""), v = 0;
        int ovf = 0;
        switch (op) {
        case JOP_ADD:
            ovf = __builtin_add_overflow(p, q, &v);
            break;
        case JOP_SUB:
            ovf = __builtin_sub_overflow(p, q, &v);
            break;
        case JOP_MUL:
            ovf = __builtin_mul_overflow(p, q, &v);
            break;
        case JOP_FLOORDIV:
        case JOP_MOD:
            if (q == 0) fail(r, x, "integer division or modulo by zero");
            if (p == LLONG_MIN && q == -1) {
                ovf = op == JOP_FLOORDIV;
                v = 0;
                break;
            }
            v = op == JOP_FLOORDIV ? p / q : p % q;
            if (op == JOP_FLOORDIV && (p % q != 0) && ((p < 0) != (q < 0))) v--;
            if (op == JOP_MOD && v != 0 && ((v < 0) != (q < 0))) v += q;
            break;
        case JOP_POW:
            if (q < 0) return jinja_new_float(r->a, pow((double)p, (double)q));
            v = 1;
            for (long long i = 0; i < q && !ovf; i++) {
                ovf = __builtin_mul_overflow(v, p, &v);
                if (v == 0 || v == 1) break;
                if (v == -1) {
                    v = (q - i - 1) % 2 ? -v : v;
                    break;
                }
            }
            break;
        }
        if (ovf) fail(r, x, "integer overflow in '%s'", ops[op]);
        return mk_int(r, v);
    }
    double p = as_f(a), q = as_f(b), v = 0;
    switch (op) {
    case JOP_ADD:
        v = p + q;
        break;
    case JOP_SUB:
        v = p - q;
        break;
    case JOP_MUL:
        v = p * q;
        break;
    case JOP_DIV:
        if (q == 0) fail(r, x, "division by zero");
        v = p / q;
        break;
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (q == 0) fail(r, x, "float division or modulo by zero");
        {
            double m = fmod(p, q);
            if (m != 0 && ((m < 0) != (q < 0))) m += q;
            v = op == JOP_MOD ? m : floor(p / q);
        }
        break;
    case JOP_POW:
        v = pow(p, q);
        break;
    }
    return jinja_new_float(r->a, v);
}

/* ---- calls ---- */

typedef struct {
    jinja_value **args;
    size_t n;
    const char **kwn;
    jinja_value **kwv;
    size_t nkw;
} cargs;

static void eval_args(R *r, const jnode *x, cargs *c) {
    c->n = x->nkids;
    c->args = x->nkids ? jv_alloc(r->a, x->nkids * sizeof *c->args) : NULL;
    for (size_t i = 0; i < x->nkids; i++)
        c->args[i] = eval(r, x->kids[i]);
    c->nkw = x->nkw;
    c->kwn = x->kwnames;
    c->kwv = x->nkw ? jv_alloc(r->a, x->nkw * sizeof *c->kwv) : NULL;
    for (size_t i = 0; i < x->nkw; i++)
        c->kwv[i] = eval(r, x->kwvals[i]);
}

/* argument `pos` or keyword `name`; NULL when absent */
static jinja_value *arg(const cargs *c, size_t pos, const char *name) {
    if (pos < c->n) return c->args[pos];
    for (size_t i = 0; name && i < c->nkw; i++)
        if (!strcmp(c->kwn[i], name)) return c->kwv[i];
    return NULL;
}

static void check_args(R *r, const jnode *at, const cargs *c, const char *what, size_t maxpos,
                       const char *const *kws) {
    if (c->n > maxpos)
        fail(r, at, "%s takes at most %zu positional arguments (%zu given)", what, maxpos, c->n);
    for (size_t i = 0; i < c->nkw; i++) {
        int ok = 0;
        for (size_t k = 0; kws && kws[k]; k++)
            if (!strcmp(kws[k], c->kwn[i])) ok = 1;
        if (!ok) fail(r, at, "%s got an unexpected keyword argument '%s'", what, c->kwn[i]);
    }
}

static jinja_value *need_str(R *r, const jnode *at, jinja_value *v, const char *what) {
    if (!v || v->kind != JV_STR)
        fail(r, at, "%s must be a string, not %s", what, v ? jv_type_name(v) : "nothing");
    return v;
}

static jinja_value *exec_body_capture(R *r, const jnode *body);

static jinja_value *call_macro(R *r, const jnode *at, const jinja_value *m, const cargs *c) {
    const jnode *def = m->u.macro.def;
    if (r->depth > 50) fail(r, at, "macro calls nested deeper than 50");
    if (c->n > def->nkw)
        fail(r, at, "macro '%s' takes %zu arguments (%zu given)", def->name, def->nkw, c->n);
    scope *saved = r->sc;
    scope *s = scope_push(r, r->root);
    for (size_t i = 0; i < def->nkw; i++) {
        jinja_value *v = i < c->n ? c->args[i] : NULL;
        for (size_t k = 0; k < c->nkw; k++)
            if (!strcmp(c->kwn[k], def->kwnames[i])) v = c->kwv[k];
        if (!v) {
            r->sc = s; /* defaults see the earlier parameters */
            v = def->kwvals[i] ? eval(r, def->kwvals[i]) : jv_undef(r->a, def->kwnames[i]);
        }
        scope_set(r, s, def->kwnames[i], v);
    }
    for (size_t k = 0; k < c->nkw; k++) {
        int ok = 0;
        for (size_t i = 0; i < def->nkw; i++)
            if (!strcmp(c->kwn[k], def->kwnames[i])) ok = 1;
        if (!ok) fail(r, at, "macro '%s' has no parameter '%s'", def->name, c->kwn[k]);
    }
    r->sc = s;
    r->depth++;
    int ctl = r->ctl;
    jinja_value *out = exec_body_capture(r, def->b);
    r->ctl = ctl;
    r->depth--;
    r->sc = saved;
    return out;
}

static jinja_value *call_func(R *r, const jnode *at, jinja_value *f, cargs *c) {
    jinja_value *self = f->u.func.self;
    int id = f->u.func.id;
    switch (id) {
    case G_RANGE: {
        check_args(r, at, c, "range", 3, NULL);
        if (c->n == 0) fail(r, at, "range expected at least 1 argument");
        long long a = 0, b, s = 1;
        if (c->n == 1)
            b = as_int(r, at, c->args[0], "range()'s argument");
        else {
            a = as_int(r, at, c->args[0], "range()'s argument");
            b = as_int(r, at, c->args[1], "range()'s argument");
            if (c->n == 3) s = as_int(r, at, c->args[2], "range()'s step");
        }
        if (s == 0) fail(r, at, "range() arg 3 must not be zero");
        jinja_value *l = jinja_new_list(r->a);
        for (long long i = a; s > 0 ? i < b : i > b; i += s) {
            step(r, at);
            jinja_list_push(r->a, l, mk_int(r, i));
            if ((s > 0 && i > LLONG_MAX - s) || (s < 0 && i < LLONG_MIN - s)) break;
        }
        return l;
    }
    case G_NAMESPACE:
    case G_DICT: {
        jinja_value *d = jinja_new_dict(r->a);
        if (c->n > 1) fail(r, at, "%s takes at most one positional argument", f->name);
        if (c->n == 1) {
            jinja_value *src = c->args[0];
            if (src->kind != JV_DICT || src->is_ns)
                fail(r, at, "%s() of a %s is not supported", f->name, jv_type_name(src));
            for (size_t i = 0; i < src->u.dict.n; i++)
                jv_dict_put(r->a, d, src->u.dict.keys[i], src->u.dict.vals[i]);
        }
        for (size_t i = 0; i < c->nkw; i++)
            jv_dict_put(r->a, d, jv_cstr(r->a, c->kwn[i]), c->kwv[i]);
        d->is_ns = id == G_NAMESPACE;
        return d;
    }
    case G_RAISE: {
        jinja_value *m = c->n ? to_str(r, c->args[0]) : jv_cstr(r->a, "");
        fail(r, at, "raise_exception: %.*s", (int)(m->u.str.len < 300 ? m->u.str.len : 300),
             m->u.str.s);
        return NULL;
    }
    case G_STRFTIME: {
        check_args(r, at, c, "strftime_now", 1, NULL);
        jinja_value *fmt = need_str(r, at, arg(c, 0, NULL), "strftime_now's format");
        time_t t = (time_t)r->o.now;
        struct tm tm;
        if (!gmtime_r(&t, &tm)) fail(r, at, "strftime_now: time out of range");
        char buf[512];
        char *f0 = jv_strdup(r->a, fmt->u.str.s, fmt->u.str.len);
        size_t n = strftime(buf, sizeof buf, f0, &tm);
        if (n == 0 && fmt->u.str.len) fail(r, at, "strftime_now: format too long or empty result");
        return jv_str_tag(r->a, buf, n, JINJA_TAG_DATA);
    }
    default:
        break;
    }
    /* methods */
    const char *nm = func_names[id];
    switch (id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        check_args(r, at, c, nm, 1, NULL);
        jinja_value *ch = arg(c, 0, NULL);
        if (ch && ch->kind == JV_NONE) ch = NULL;
        if (ch) need_str(r, at, ch, "strip's characters");
        return str_strip(r, self, ch, id == M_STRIP ? 3 : id == M_LSTRIP ? 1 : 2);
    }
    case M_SPLIT:
    case M_RSPLIT: {
        static const char *const kws[] = {"sep", "maxsplit", NULL};
        check_args(r, at, c, nm, 2, kws);
        jinja_value *sep = arg(c, 0, "sep"), *ms = arg(c, 1, "maxsplit");
        if (sep && sep->kind == JV_NONE) sep = NULL;
        if (sep) need_str(r, at, sep, "split's separator");
        long long m = ms ? as_int(r, at, ms, "maxsplit") : -1;
        if (id == M_RSPLIT && m >= 0) fail(r, at, "rsplit with maxsplit is not supported");
        return str_split(r, at, self, sep, m);
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        check_args(r, at, c, nm, 1, NULL);
        jinja_value *x = arg(c, 0, NULL);
        if (!x) fail(r, at, "%s takes one argument", nm);
        if (x->kind == JV_LIST) {
            for (size_t i = 0; i < x->u.list.n; i++)
                if (starts_with(self, need_str(r, at, x->u.list.items[i], nm), id == M_ENDSWITH))
                    return mk_bool(r, 1);
            return mk_bool(r, 0);
        }
        return mk_bool(r, starts_with(self, need_str(r, at, x, nm), id == M_ENDSWITH));
    }
    case M_UPPER:
        check_args(r, at, c, nm, 0, NULL);
        return str_case(r, at, self, 0, nm);
    case M_LOWER:
        check_args(r, at, c, nm, 0, NULL);
        return str_case(r, at, self, 1, nm);
    case M_CAPITALIZE:
        check_args(r, at, c, nm, 0, NULL);
        return str_case(r, at, self, 2, nm);
    case M_TITLE:
        check_args(r, at, c, nm, 0, NULL);
        return str_case(r, at, self, 3, nm);
    case M_REPLACE: {
        check_args(r, at, c, nm, 3, NULL);
        if (c->n < 2) fail(r, at, "replace takes two or three arguments");
        long long cnt = c->n == 3 ? as_int(r, at, c->args[2], "replace's count") : -1;
        return str_replace(r, self, need_str(r, at, c->args[0], "replace's old"),
                           need_str(r, at, c->args[1], "replace's new"), cnt);
    }
    case M_FIND:
    case M_COUNT: {
        check_args(r, at, c, nm, 1, NULL);
        jinja_value *x = need_str(r, at, arg(c, 0, NULL), nm);
        const char *h = self->u.str.s;
        size_t hn = self->u.str.len;
        if (id == M_FIND) {
            const char *f0 = memfind(h, hn, x->u.str.s, x->u.str.len);
            return mk_int(r, f0 ? (long long)utf8_count(h, (size_t)(f0 - h)) : -1);
        }
        if (x->u.str.len == 0) return mk_int(r, (long long)utf8_count(h, hn) + 1);
        long long k = 0;
        for (const char *f0 = h;
             (f0 = memfind(f0, hn - (size_t)(f0 - h), x->u.str.s, x->u.str.len));
             f0 += x->u.str.len)
            k++;
        return mk_int(r, k);
    }
    case M_JOIN: {
        check_args(r, at, c, nm, 1, NULL);
        jinja_value *l =
            iter_list(r, at, arg(c, 0, NULL) ? c->args[0] : jv_undef(r->a, "iterable"));
        jv_sb sb;
        sb_init(&sb, r->a);
        for (size_t i = 0; i < l->u.list.n; i++) {
            if (i) sb_put_str(&sb, self);
            sb_put_str(&sb, need_str(r, at, l->u.list.items[i], "join's items"));
        }
        return sb_finish(&sb);
    }
    case M_ISDIGIT: {
        check_args(r, at, c, nm, 0, NULL);
        int ok = self->u.str.len > 0;
        for (size_t i = 0; i < self->u.str.len; i++)
            if (self->u.str.s[i] < '0' || self->u.str.s[i] > '9') ok = 0;
        return mk_bool(r, ok);
    }
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES: {
        check_args(r, at, c, nm, 0, NULL);
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
        check_args(r, at, c, nm, 2, NULL);
        if (c->n < 1) fail(r, at, "get takes one or two arguments");
        jinja_value *v = jv_dict_find(self, c->args[0]);
        return v ? v : c->n > 1 ? c->args[1] : jinja_new_none(r->a);
    }
    default:
        break;
    }
    fail(r, at, "function '%s' is not supported", nm);
    return NULL;
}

/* ---- tests and filters ---- */

static int apply_test(R *r, const jnode *at, int id, jinja_value *v, jinja_value **args, size_t n) {
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
        return is_num(v);
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
        if (v->kind == JV_UNDEF) fail_undef(r, at, v);
        long long i = as_int(r, at, v, "the tested value");
        return (i % 2 != 0) == (id == T_ODD);
    }
    case T_DIVISIBLEBY: {
        if (!a0) fail(r, at, "divisibleby needs an argument");
        long long i = as_int(r, at, v, "the tested value"),
                  d = as_int(r, at, a0, "divisibleby's argument");
        if (d == 0) fail(r, at, "integer division or modulo by zero");
        return d == -1 || i % d == 0;
    }
    case T_LOWER:
    case T_UPPER: {
        jinja_value *s = to_str(r, v);
        int cased = 0, ok = 1;
        for (size_t i = 0; i < s->u.str.len; i++) {
            char ch = s->u.str.s[i];
            if ((unsigned char)ch >= 0x80)
                fail(r, at, "the %s test of non-ASCII text is not supported", test_names[id]);
            if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) cased = 1;
            if (id == T_LOWER && ch >= 'A' && ch <= 'Z') ok = 0;
            if (id == T_UPPER && ch >= 'a' && ch <= 'z') ok = 0;
        }
        return cased && ok;
    }
    case T_SAMEAS:
        if (!a0) fail(r, at, "sameas needs an argument");
        if (v->kind != a0->kind) return 0;
        if (v->kind == JV_NONE) return 1;
        if (v->kind == JV_BOOL) return v->u.b == a0->u.b;
        return v == a0;
    default:
        break;
    }
    if (!a0) fail(r, at, "test '%s' needs an argument", test_names[id]);
    switch (id) {
    case T_EQUALTO:
    case T_EQ:
    case T_EQ2:
        return compare(r, at, v, a0, JOP_EQ);
    case T_NE:
    case T_NE2:
        return compare(r, at, v, a0, JOP_NE);
    case T_LT:
    case T_LT2:
    case T_LESSTHAN:
        return compare(r, at, v, a0, JOP_LT);
    case T_LE:
    case T_LE2:
        return compare(r, at, v, a0, JOP_LE);
    case T_GT:
    case T_GT2:
    case T_GREATERTHAN:
        return compare(r, at, v, a0, JOP_GT);
    case T_GE:
    case T_GE2:
        return compare(r, at, v, a0, JOP_GE);
    case T_IN:
        return contains(r, at, v, a0);
    default:
        break;
    }
    fail(r, at, "test '%s' is not supported", test_names[id]);
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
        if (digits) key = mk_int(r, atoll(key->u.str.s));
        if (obj->kind == JV_UNDEF) return obj;
        obj = get_item(r, at, obj, key);
        i = j + 1;
    }
    return obj;
}

static jinja_value *apply_filter(R *r, const jnode *at, int id, jinja_value *v, cargs *c);

/* select / reject / selectattr / rejectattr */
static jinja_value *select_items(R *r, const jnode *at, jinja_value *v, cargs *c, int attr,
                                 int keep) {
    jinja_value *l = iter_list(r, at, v);
    jinja_value *out = jinja_new_list(r->a);
    size_t k = 0;
    jinja_value *path = NULL;
    if (attr) {
        if (c->n < 1) fail(r, at, "selectattr/rejectattr need an attribute name");
        path = need_str(r, at, c->args[0], "the attribute");
        k = 1;
    }
    int tid = -1;
    if (c->n > k) {
        jinja_value *tn = need_str(r, at, c->args[k], "the test name");
        tid = jinja_test_id(tn->u.str.s);
        if (tid < 0) fail(r, at, "test '%s' is not supported", tn->u.str.s);
        k++;
    }
    for (size_t i = 0; i < l->u.list.n; i++) {
        step(r, at);
        jinja_value *item = l->u.list.items[i];
        jinja_value *tv = attr ? attr_path(r, at, item, path) : item;
        int ok = tid < 0 ? jv_truthy(tv) : apply_test(r, at, tid, tv, c->args + k, c->n - k);
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

static jinja_value *apply_filter(R *r, const jnode *at, int id, jinja_value *v, cargs *c) {
    const char *nm = filter_names[id];
    switch (id) {
    case F_TRIM: {
        check_args(r, at, c, nm, 1, NULL);
        jinja_value *ch = arg(c, 0, NULL);
        if (ch && ch->kind == JV_NONE) ch = NULL;
        if (ch) need_str(r, at, ch, "trim's characters");
        return str_strip(r, to_str(r, v), ch, 3);
    }
    case F_LENGTH:
    case F_COUNT:
        check_args(r, at, c, nm, 0, NULL);
        return mk_int(r, length_of(r, at, v));
    case F_TOJSON: {
        static const char *const kws[] = {"ensure_ascii", "indent", "separators", "sort_keys",
                                          NULL};
        check_args(r, at, c, nm, 4, kws);
        jinja_value *ea = arg(c, 0, "ensure_ascii"), *ind = arg(c, 1, "indent"),
                    *sep = arg(c, 2, "separators"), *sk = arg(c, 3, "sort_keys");
        if (ea && jv_truthy(ea)) fail(r, at, "tojson with ensure_ascii is not supported");
        int indent = -1;
        if (ind && ind->kind != JV_NONE) {
            indent = (int)as_int(r, at, ind, "tojson's indent");
            if (indent < 0 || indent > 64)
                fail(r, at, "tojson's indent %d is not supported", indent);
        }
        const char *isep = indent >= 0 ? "," : ", ", *ksep = ": ";
        if (sep && sep->kind != JV_NONE) {
            if (sep->kind != JV_LIST || sep->u.list.n != 2)
                fail(r, at, "tojson's separators must be a pair of strings");
            jinja_value *a = need_str(r, at, sep->u.list.items[0], "a separator"),
                        *b = need_str(r, at, sep->u.list.items[1], "a separator");
            isep = jv_strdup(r->a, a->u.str.s, a->u.str.len);
            ksep = jv_strdup(r->a, b->u.str.s, b->u.str.len);
        }
        jv_sb b;
        sb_init(&b, r->a);
        const char *bad = NULL;
        if (jv_json_into(&b, v, indent, isep, ksep, sk && jv_truthy(sk), 0, &bad))
            fail(r, at, "tojson: %s is not JSON serializable", bad);
        return sb_finish(&b);
    }
    case F_STRING:
        check_args(r, at, c, nm, 0, NULL);
        return to_str(r, v);
    case F_LIST: {
        check_args(r, at, c, nm, 0, NULL);
        jinja_value *l = iter_list(r, at, v), *o = jinja_new_list(r->a);
        for (size_t i = 0; i < l->u.list.n; i++)
            jinja_list_push(r->a, o, l->u.list.items[i]);
        return o;
    }
    case F_FIRST:
    case F_LAST: {
        check_args(r, at, c, nm, 0, NULL);
        if (v->kind == JV_UNDEF) fail_undef(r, at, v);
        jinja_value *l = iter_list(r, at, v);
        if (l->u.list.n == 0) return jv_undef(r->a, "first/last of an empty sequence");
        return l->u.list.items[id == F_FIRST ? 0 : l->u.list.n - 1];
    }
    case F_DEFAULT:
    case F_D: {
        static const char *const kws[] = {"default_value", "boolean", NULL};
        check_args(r, at, c, nm, 2, kws);
        jinja_value *dv = arg(c, 0, "default_value"), *bo = arg(c, 1, "boolean");
        int use = v->kind == JV_UNDEF || (bo && jv_truthy(bo) && !jv_truthy(v));
        if (!use) return v;
        return dv ? dv : jv_str_tag(r->a, "", 0, JINJA_TAG_DATA);
    }
    case F_UPPER:
    case F_LOWER:
    case F_CAPITALIZE:
    case F_TITLE:
        check_args(r, at, c, nm, 0, NULL);
        return str_case(r, at, to_str(r, v),
                        id == F_UPPER        ? 0
                        : id == F_LOWER      ? 1
                        : id == F_CAPITALIZE ? 2
                                             : 3,
                        nm);
    case F_REPLACE: {
        check_args(r, at, c, nm, 3, NULL);
        if (c->n < 2) fail(r, at, "replace takes two or three arguments");
        long long cnt =
            c->n == 3 && c->args[2]->kind != JV_NONE ? as_int(r, at, c->args[2], "count") : -1;
        return str_replace(r, to_str(r, v), to_str(r, c->args[0]), to_str(r, c->args[1]), cnt);
    }
    case F_JOIN: {
        static const char *const kws[] = {"d", "attribute", NULL};
        check_args(r, at, c, nm, 2, kws);
        jinja_value *sep = arg(c, 0, "d"), *attr = arg(c, 1, "attribute");
        jinja_value *l = iter_list(r, at, v);
        jv_sb b;
        sb_init(&b, r->a);
        for (size_t i = 0; i < l->u.list.n; i++) {
            if (i && sep) jv_str_into(&b, sep);
            jinja_value *it = l->u.list.items[i];
            if (attr) it = attr_path(r, at, it, need_str(r, at, attr, "join's attribute"));
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
        jinja_value *l = iter_list(r, at, v), *o = jinja_new_list(r->a);
        jinja_value *attr = arg(c, (size_t)-1, "attribute"), *dflt = arg(c, (size_t)-1, "default");
        if (attr) {
            need_str(r, at, attr, "map's attribute");
            for (size_t i = 0; i < l->u.list.n; i++) {
                jinja_value *x = attr_path(r, at, l->u.list.items[i], attr);
                if (x->kind == JV_UNDEF && dflt) x = dflt;
                jinja_list_push(r->a, o, x);
            }
            return o;
        }
        if (c->n < 1) fail(r, at, "map needs a filter name or attribute=");
        jinja_value *fn = need_str(r, at, c->args[0], "map's filter");
        int fid = jinja_filter_id(fn->u.str.s);
        if (fid < 0 || fid == F_MAP) fail(r, at, "filter '%s' is not supported", fn->u.str.s);
        cargs sub = *c;
        sub.args++;
        sub.n--;
        for (size_t i = 0; i < l->u.list.n; i++)
            jinja_list_push(r->a, o, apply_filter(r, at, fid, l->u.list.items[i], &sub));
        return o;
    }
    case F_ITEMS: {
        check_args(r, at, c, nm, 0, NULL);
        if (v->kind == JV_UNDEF) return jinja_new_list(r->a);
        if (v->kind != JV_DICT || v->is_ns)
            fail(r, at, "items: %s is not a mapping", jv_type_name(v));
        jinja_value *f = func(r, M_ITEMS, v);
        cargs none = {0};
        return call_func(r, at, f, &none);
    }
    case F_REVERSE: {
        check_args(r, at, c, nm, 0, NULL);
        if (v->kind == JV_STR) {
            size_t cnt;
            size_t *off = cp_offsets(r, v, &cnt);
            jv_sb b;
            sb_init(&b, r->a);
            for (size_t i = cnt; i-- > 0;)
                sb_put_sub(&b, v, off[i], off[i + 1]);
            return sb_finish(&b);
        }
        jinja_value *l = iter_list(r, at, v), *o = jinja_new_list(r->a);
        for (size_t i = l->u.list.n; i-- > 0;)
            jinja_list_push(r->a, o, l->u.list.items[i]);
        return o;
    }
    case F_INT:
    case F_FLOAT: {
        static const char *const kws[] = {"default", "base", NULL};
        check_args(r, at, c, nm, 2, kws);
        jinja_value *dv = arg(c, 0, "default");
        if (id == F_INT) {
            if (v->kind == JV_INT) return v;
            if (v->kind == JV_BOOL) return mk_int(r, v->u.b);
            if (v->kind == JV_FLOAT && isfinite(v->u.f) && fabs(v->u.f) < 9.2e18)
                return mk_int(r, (long long)v->u.f);
        } else {
            if (v->kind == JV_FLOAT) return v;
            if (v->kind == JV_INT || v->kind == JV_BOOL) return jinja_new_float(r->a, as_f(v));
        }
        if (v->kind == JV_STR) {
            char *s = jv_strdup(r->a, v->u.str.s, v->u.str.len), *e;
            if (id == F_INT) {
                long long x = strtoll(s, &e, 10);
                while (*e == ' ' || *e == '\t' || *e == '\n')
                    e++;
                if (e != s && !*e && !strchr(s, '_')) return mk_int(r, x);
            } else {
                double x = strtod(s, &e);
                while (*e == ' ' || *e == '\t' || *e == '\n')
                    e++;
                if (e != s && !*e && !strchr(s, '_') && !strchr(s, 'x') && !strchr(s, 'X'))
                    return jinja_new_float(r->a, x);
            }
        }
        if (dv) return dv;
        return id == F_INT ? mk_int(r, 0) : jinja_new_float(r->a, 0.0);
    }
    case F_ABS:
        check_args(r, at, c, nm, 0, NULL);
        if (v->kind == JV_FLOAT) return jinja_new_float(r->a, fabs(v->u.f));
        if (v->kind == JV_INT || v->kind == JV_BOOL) {
            long long i = as_int(r, at, v, "abs");
            if (i == LLONG_MIN) fail(r, at, "integer overflow in abs");
            return mk_int(r, i < 0 ? -i : i);
        }
        fail(r, at, "bad operand type for abs(): '%s'", jv_type_name(v));
        return NULL;
    case F_SAFE:
        check_args(r, at, c, nm, 0, NULL);
        return v;
    case F_E:
    case F_ESCAPE:
        check_args(r, at, c, nm, 0, NULL);
        return html_escape(r, to_str(r, v));
    default:
        break;
    }
    fail(r, at, "filter '%s' is not supported", nm);
    return NULL;
}

/* ---- expressions ---- */

static jinja_value *eval(R *r, const jnode *x) {
    step(r, x);
    switch (x->kind) {
    case JN_LIT:
        return x->lit;
    case JN_NAME:
        return lookup(r, x->name);
    case JN_LIST:
    case JN_TUPLE: {
        jinja_value *l = jinja_new_list(r->a);
        l->is_tuple = x->kind == JN_TUPLE;
        for (size_t i = 0; i < x->nkids; i++)
            jinja_list_push(r->a, l, eval(r, x->kids[i]));
        return l;
    }
    case JN_DICT: {
        jinja_value *d = jinja_new_dict(r->a);
        for (size_t i = 0; i + 1 < x->nkids; i += 2) {
            jinja_value *k = eval(r, x->kids[i]);
            if (k->kind == JV_LIST || k->kind == JV_DICT || k->kind == JV_UNDEF)
                fail(r, x->kids[i], "unhashable dict key of type '%s'", jv_type_name(k));
            jv_dict_put(r->a, d, k, eval(r, x->kids[i + 1]));
        }
        return d;
    }
    case JN_ATTR:
        return get_attr(r, x, eval(r, x->a), x->name);
    case JN_ITEM: {
        jinja_value *o = eval(r, x->a);
        return get_item(r, x, o, eval(r, x->b));
    }
    case JN_SLICE:
        return do_slice(r, x, eval(r, x->a));
    case JN_CALL: {
        jinja_value *f = eval(r, x->a);
        cargs c;
        eval_args(r, x, &c);
        if (f->kind == JV_FUNC) return call_func(r, x, f, &c);
        if (f->kind == JV_MACRO) return call_macro(r, x, f, &c);
        if (f->kind == JV_UNDEF) fail_undef(r, x, f);
        fail(r, x, "'%s' object is not callable", jv_type_name(f));
        return NULL;
    }
    case JN_FILTER: {
        jinja_value *v = x->a ? eval(r, x->a) : exec_body_capture(r, x->b);
        cargs c;
        eval_args(r, x, &c);
        return apply_filter(r, x, x->fn, v, &c);
    }
    case JN_TEST: {
        jinja_value *v = eval(r, x->a);
        cargs c;
        eval_args(r, x, &c);
        if (c.nkw) fail(r, x, "tests take no keyword arguments");
        int t = apply_test(r, x, x->fn, v, c.args, c.n);
        return mk_bool(r, x->op ? !t : t);
    }
    case JN_NOT:
        return mk_bool(r, !jv_truthy(eval(r, x->a)));
    case JN_NEG:
    case JN_POS: {
        jinja_value *v = eval(r, x->a);
        if (v->kind == JV_FLOAT) return jinja_new_float(r->a, x->kind == JN_NEG ? -v->u.f : v->u.f);
        if (v->kind == JV_INT || v->kind == JV_BOOL) {
            long long i = as_int(r, x, v, "");
            if (x->kind == JN_NEG && i == LLONG_MIN) fail(r, x, "integer overflow in '-'");
            return mk_int(r, x->kind == JN_NEG ? -i : i);
        }
        if (v->kind == JV_UNDEF) fail_undef(r, x, v);
        fail(r, x, "bad operand type for unary %c: '%s'", x->kind == JN_NEG ? '-' : '+',
             jv_type_name(v));
        return NULL;
    }
    case JN_BIN: {
        jinja_value *a = eval(r, x->a);
        jinja_value *b = eval(r, x->b);
        return arith(r, x, x->op, a, b);
    }
    case JN_CMP: {
        jinja_value *a = eval(r, x->a);
        jinja_value *b = eval(r, x->b);
        return mk_bool(r, compare(r, x, a, b, x->op));
    }
    case JN_AND: {
        jinja_value *a = eval(r, x->a);
        return jv_truthy(a) ? eval(r, x->b) : a;
    }
    case JN_OR: {
        jinja_value *a = eval(r, x->a);
        return jv_truthy(a) ? a : eval(r, x->b);
    }
    case JN_COND:
        if (jv_truthy(eval(r, x->a))) return eval(r, x->b);
        return x->c ? eval(r, x->c) : jv_undef(r->a, "conditional expression without else");
    default:
        break;
    }
    fail(r, x, "internal: not an expression");
    return NULL;
}

/* ---- statements ---- */

static void exec(R *r, const jnode *x);

static jinja_value *exec_body_capture(R *r, const jnode *body) {
    jv_sb b, *saved = r->out;
    sb_init(&b, r->a);
    r->out = &b;
    exec(r, body);
    r->out = saved;
    return sb_finish(&b);
}

static void bind_targets(R *r, const jnode *x, scope *s, jinja_value *item) {
    if (x->nnames == 1) {
        scope_set(r, s, x->names[0], item);
        return;
    }
    if (item->kind != JV_LIST)
        fail(r, x, "cannot unpack a %s into %zu names", jv_type_name(item), x->nnames);
    if (item->u.list.n != x->nnames)
        fail(r, x, "cannot unpack %zu values into %zu names", item->u.list.n, x->nnames);
    for (size_t i = 0; i < x->nnames; i++)
        scope_set(r, s, x->names[i], item->u.list.items[i]);
}

static void set_turn(R *r, int turn) {
    r->turn = turn;
    r->out->turn = turn;
}

static void exec_for(R *r, const jnode *x) {
    jinja_value *seq = eval(r, x->a);
    jinja_value *items = iter_list(r, x->a, seq);
    scope *outer = r->sc;
    if (x->d) { /* the loop's if filter: loop.length counts what passes */
        jinja_value *kept = jinja_new_list(r->a);
        for (size_t i = 0; i < items->u.list.n; i++) {
            scope *s = scope_push(r, outer);
            bind_targets(r, x, s, items->u.list.items[i]);
            r->sc = s;
            int ok = jv_truthy(eval(r, x->d));
            r->sc = outer;
            if (ok) jinja_list_push(r->a, kept, items->u.list.items[i]);
        }
        items = kept;
    }
    size_t n = items->u.list.n;
    int saved_turn = r->turn;
    for (size_t i = 0; i < n; i++) {
        step(r, x);
        jinja_value *item = items->u.list.items[i];
        scope *s = scope_push(r, outer);
        bind_targets(r, x, s, item);
        jinja_value *loop = jinja_new_dict(r->a);
        jinja_dict_set(r->a, loop, "index", mk_int(r, (long long)i + 1));
        jinja_dict_set(r->a, loop, "index0", mk_int(r, (long long)i));
        jinja_dict_set(r->a, loop, "revindex", mk_int(r, (long long)(n - i)));
        jinja_dict_set(r->a, loop, "revindex0", mk_int(r, (long long)(n - i - 1)));
        jinja_dict_set(r->a, loop, "first", mk_bool(r, i == 0));
        jinja_dict_set(r->a, loop, "last", mk_bool(r, i + 1 == n));
        jinja_dict_set(r->a, loop, "length", mk_int(r, (long long)n));
        jinja_dict_set(r->a, loop, "depth", mk_int(r, 1));
        jinja_dict_set(r->a, loop, "depth0", mk_int(r, 0));
        jinja_dict_set(r->a, loop, "previtem",
                       i ? items->u.list.items[i - 1] : jv_undef(r->a, "loop.previtem"));
        jinja_dict_set(r->a, loop, "nextitem",
                       i + 1 < n ? items->u.list.items[i + 1] : jv_undef(r->a, "loop.nextitem"));
        scope_set(r, s, "loop", loop);
        r->sc = s;
        if (item->kind == JV_DICT && item->turn >= 0) set_turn(r, item->turn);
        exec(r, x->b);
        set_turn(r, saved_turn);
        r->sc = outer;
        int ctl = r->ctl;
        r->ctl = 0;
        if (ctl == 1) break;
    }
    if (n == 0 && x->c) exec(r, x->c);
}

static void exec(R *r, const jnode *x) {
    step(r, x);
    switch (x->kind) {
    case JS_BODY:
        for (size_t i = 0; i < x->nkids && !r->ctl; i++)
            exec(r, x->kids[i]);
        return;
    case JS_TEXT:
        sb_put_str(r->out, x->lit);
        return;
    case JS_OUT:
        jv_str_into(r->out, eval(r, x->a));
        return;
    case JS_IF:
        if (jv_truthy(eval(r, x->a)))
            exec(r, x->b);
        else if (x->c)
            exec(r, x->c);
        return;
    case JS_FOR:
        if (++r->depth > JINJA_MAX_DEPTH) fail(r, x, "loops nested too deep");
        exec_for(r, x);
        r->depth--;
        return;
    case JS_SET: {
        jinja_value *v = eval(r, x->a);
        if (x->name) { /* ns.attr = v */
            jinja_value *obj = lookup(r, x->names[0]);
            if (obj->kind != JV_DICT || !obj->is_ns)
                fail(r, x, "cannot assign attribute on non-namespace object '%s'", x->names[0]);
            jv_dict_put(r->a, obj, jv_cstr(r->a, x->name), v);
            return;
        }
        bind_targets(r, x, r->sc, v);
        return;
    }
    case JS_SETBLOCK:
        scope_set(r, r->sc, x->names[0], exec_body_capture(r, x->b));
        return;
    case JS_MACRO: {
        jinja_value *m = jv_alloc(r->a, sizeof *m);
        m->kind = JV_MACRO;
        m->turn = -1;
        m->name = x->name;
        m->u.macro.def = x;
        scope_set(r, r->sc, x->name, m);
        return;
    }
    case JS_BREAK:
        r->ctl = 1;
        return;
    case JS_CONTINUE:
        r->ctl = 2;
        return;
    default:
        fail(r, x, "internal: not a statement");
    }
}

int jinja_render(const jinja_template *t, const jinja_value *vars, const jinja_opts *opts,
                 jinja_output *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    R *r = calloc(1, sizeof *r);
    UP_CHECK(r, "out of memory");
    if (opts) r->o = *opts;
    if (!r->o.max_bytes) r->o.max_bytes = (size_t)512 << 20;
    if (!r->o.max_steps) r->o.max_steps = 100000000;
    r->a = jinja_arena_new();
    r->a->cap = r->o.max_bytes;
    r->a->oom = &r->jmp;
    char oom[200] = "";
    r->a->oom_err = oom;
    r->a->oom_errlen = sizeof oom;
    r->vars = vars && vars->kind == JV_DICT ? vars : NULL;
    r->err = err;
    r->errlen = errlen;
    r->turn = -1;
    volatile int rc = -1;
    jv_sb *b = jv_alloc(r->a, sizeof *b);
    if (setjmp(r->jmp) == 0) {
        sb_init(b, r->a);
        r->out = b;
        r->root = r->sc = scope_push(r, NULL);
        exec(r, t->root);
        out->text = malloc(b->len + 1);
        out->runs = malloc((b->nruns ? b->nruns : 1) * sizeof *out->runs);
        UP_CHECK(out->text && out->runs, "out of memory");
        if (b->len) memcpy(out->text, b->s, b->len);
        out->text[b->len] = 0;
        out->len = b->len;
        if (b->nruns) memcpy(out->runs, b->runs, b->nruns * sizeof *out->runs);
        out->nruns = b->nruns;
        rc = 0;
    } else if (oom[0]) {
        snprintf(err, errlen, "%s", oom);
    }
    jinja_arena_free(r->a);
    free(r);
    return rc;
}

void jinja_output_free(jinja_output *out) {
    free(out->text);
    free(out->runs);
    memset(out, 0, sizeof *out);
}
