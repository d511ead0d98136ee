/* jinja_value.c — the arena, values, tagged strings, and Python's str(), repr() and json.dumps
 * of them (jinja_impl.h). */
#include "tokenizer/jinja_impl.h"

#include "core/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct arena_block {
    struct arena_block *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

jinja_arena *jinja_arena_new(void) {
    jinja_arena *a = calloc(1, sizeof *a);
    UP_CHECK(a, "out of memory");
    return a;
}

void jinja_arena_free(jinja_arena *a) {
    if (!a) return;
    struct arena_block *b = a->head;
    while (b) {
        struct arena_block *n = b->next;
        free(b);
        b = n;
    }
    free(a);
}

void *jv_alloc(jinja_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    struct arena_block *b = a->head;
    if (!b || b->size - b->used < n) {
        size_t size = n > 65536 ? n : 65536;
        if (a->cap && (a->used + size > a->cap || size > a->cap)) {
            if (a->oom) {
                snprintf(a->oom_err, a->oom_errlen,
                         "the template needs more than %zu MiB of memory", a->cap >> 20);
                longjmp(*a->oom, 1);
            }
            UP_CHECK(0, "jinja arena over its cap");
        }
        b = malloc(sizeof *b + size);
        UP_CHECK(b, "out of memory (%zu bytes)", size);
        b->size = size;
        b->used = 0;
        b->next = a->head;
        a->head = b;
        a->used += size;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *jv_strdup(jinja_arena *a, const char *s, size_t len) {
    char *p = jv_alloc(a, len + 1);
    if (len) memcpy(p, s, len);
    p[len] = 0;
    return p;
}

/* ---- constructors ---- */

static jinja_value *jv_new(jinja_arena *a, jv_kind k) {
    jinja_value *v = jv_alloc(a, sizeof *v);
    v->kind = k;
    v->turn = -1;
    return v;
}

jinja_value *jinja_new_none(jinja_arena *a) {
    return jv_new(a, JV_NONE);
}
jinja_value *jinja_new_bool(jinja_arena *a, int b) {
    jinja_value *v = jv_new(a, JV_BOOL);
    v->u.b = !!b;
    return v;
}
jinja_value *jinja_new_int(jinja_arena *a, long long i) {
    jinja_value *v = jv_new(a, JV_INT);
    v->u.i = i;
    return v;
}
jinja_value *jinja_new_float(jinja_arena *a, double f) {
    jinja_value *v = jv_new(a, JV_FLOAT);
    v->u.f = f;
    return v;
}
jinja_value *jv_undef(jinja_arena *a, const char *name) {
    jinja_value *v = jv_new(a, JV_UNDEF);
    v->name = name;
    return v;
}

jinja_value *jv_str_tag(jinja_arena *a, const char *s, size_t len, int tag) {
    jinja_value *v = jv_new(a, JV_STR);
    v->u.str.s = jv_strdup(a, s, len);
    v->u.str.len = len;
    jv_run *r = jv_alloc(a, sizeof *r);
    r->start = 0;
    r->len = len;
    r->tag = tag;
    r->turn = -1;
    v->u.str.runs = r;
    v->u.str.nruns = 1;
    return v;
}
jinja_value *jinja_new_string(jinja_arena *a, const char *s, size_t len, int tag) {
    return jv_str_tag(a, s, len, tag);
}
jinja_value *jv_cstr(jinja_arena *a, const char *s) {
    return jv_str_tag(a, s, strlen(s), JINJA_TAG_DATA);
}

jinja_value *jinja_new_list(jinja_arena *a) {
    return jv_new(a, JV_LIST);
}
/* a container holding v: its depth grows past v's, within JINJA_MAX_NEST */
static void nest(jinja_arena *a, jinja_value *c, const jinja_value *v) {
    if (v->depth + 1 <= c->depth) return;
    c->depth = v->depth + 1;
    if (c->depth <= JINJA_MAX_NEST) return;
    if (a->oom) {
        snprintf(a->oom_err, a->oom_errlen, "values nested deeper than %d", JINJA_MAX_NEST);
        longjmp(*a->oom, 1);
    }
    UP_CHECK(0, "jinja values nested deeper than %d", JINJA_MAX_NEST);
}

void jinja_list_push(jinja_arena *a, jinja_value *l, jinja_value *v) {
    nest(a, l, v);
    if (l->u.list.n == l->u.list.cap) {
        size_t cap = l->u.list.cap ? 2 * l->u.list.cap : 4;
        jinja_value **items = jv_alloc(a, cap * sizeof *items);
        if (l->u.list.n) memcpy(items, l->u.list.items, l->u.list.n * sizeof *items);
        l->u.list.items = items;
        l->u.list.cap = cap;
    }
    l->u.list.items[l->u.list.n++] = v;
}

jinja_value *jinja_new_dict(jinja_arena *a) {
    return jv_new(a, JV_DICT);
}

jinja_value *jv_dict_find(const jinja_value *d, const jinja_value *key) {
    for (size_t i = 0; i < d->u.dict.n; i++)
        if (jv_equal(d->u.dict.keys[i], key)) return d->u.dict.vals[i];
    return NULL;
}

jinja_value *jv_dict_get(const jinja_value *d, const char *key, size_t klen) {
    for (size_t i = 0; i < d->u.dict.n; i++) {
        const jinja_value *k = d->u.dict.keys[i];
        if (k->kind == JV_STR && k->u.str.len == klen && memcmp(k->u.str.s, key, klen) == 0)
            return d->u.dict.vals[i];
    }
    return NULL;
}

void jv_dict_put(jinja_arena *a, jinja_value *d, jinja_value *key, jinja_value *v) {
    nest(a, d, v);
    for (size_t i = 0; i < d->u.dict.n; i++)
        if (jv_equal(d->u.dict.keys[i], key)) {
            d->u.dict.vals[i] = v;
            return;
        }
    if (d->u.dict.n == d->u.dict.cap) {
        size_t cap = d->u.dict.cap ? 2 * d->u.dict.cap : 4;
        jinja_value **k = jv_alloc(a, cap * sizeof *k), **w = jv_alloc(a, cap * sizeof *w);
        if (d->u.dict.n) {
            memcpy(k, d->u.dict.keys, d->u.dict.n * sizeof *k);
            memcpy(w, d->u.dict.vals, d->u.dict.n * sizeof *w);
        }
        d->u.dict.keys = k;
        d->u.dict.vals = w;
        d->u.dict.cap = cap;
    }
    d->u.dict.keys[d->u.dict.n] = key;
    d->u.dict.vals[d->u.dict.n++] = v;
}

void jinja_dict_set(jinja_arena *a, jinja_value *d, const char *key, jinja_value *v) {
    jv_dict_put(a, d, jv_str_tag(a, key, strlen(key), JINJA_TAG_DATA), v);
}

void jinja_dict_set_turn(jinja_value *d, int turn) {
    d->turn = turn;
}

jinja_value *jinja_from_json(jinja_arena *a, const json_t *j, int tag) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jinja_value *d = jinja_new_dict(a);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            jv_dict_put(a, d, jv_str_tag(a, k, strlen(k), tag), jinja_from_json(a, v, tag));
        }
        return d;
    }
    case JSON_ARRAY: {
        jinja_value *l = jinja_new_list(a);
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) jinja_list_push(a, l, jinja_from_json(a, v, tag));
        return l;
    }
    case JSON_STRING:
        return jv_str_tag(a, json_string_value(j), json_string_length(j), tag);
    case JSON_INTEGER:
        return jinja_new_int(a, (long long)json_integer_value(j));
    case JSON_REAL:
        return jinja_new_float(a, json_real_value(j));
    case JSON_TRUE:
        return jinja_new_bool(a, 1);
    case JSON_FALSE:
        return jinja_new_bool(a, 0);
    default:
        return jinja_new_none(a);
    }
}

/* ---- string builder ---- */

void sb_init(jv_sb *b, jinja_arena *a) {
    memset(b, 0, sizeof *b);
    b->a = a;
    b->turn = -1;
}

static void sb_reserve(jv_sb *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1) {
        UP_CHECK(cap < SIZE_MAX / 2, "string too long");
        cap *= 2;
    }
    char *s = jv_alloc(b->a, cap);
    if (b->len) memcpy(s, b->s, b->len);
    b->s = s;
    b->cap = cap;
}

static void sb_run(jv_sb *b, size_t start, size_t len, int tag) {
    if (b->nruns) {
        jv_run *last = &b->runs[b->nruns - 1];
        if (last->tag == tag && last->turn == b->turn && last->gen == b->gen &&
            last->start + last->len == start) {
            last->len += len;
            return;
        }
        /* a mark next to a run of its own tag adds nothing */
        if (len == 0 && last->tag == tag && last->turn == b->turn && last->gen == b->gen) return;
        if (last->len == 0 && last->tag == tag && last->turn == b->turn && last->gen == b->gen) {
            last->len = len;
            return;
        }
    }
    if (b->nruns == b->rcap) {
        size_t cap = b->rcap ? 2 * b->rcap : 8;
        jv_run *r = jv_alloc(b->a, cap * sizeof *r);
        if (b->nruns) memcpy(r, b->runs, b->nruns * sizeof *r);
        b->runs = r;
        b->rcap = cap;
    }
    b->runs[b->nruns++] = (jv_run){start, len, tag, b->turn, b->gen};
}

void sb_put(jv_sb *b, const char *s, size_t len, int tag) {
    sb_reserve(b, len);
    if (len) memcpy(b->s + b->len, s, len);
    sb_run(b, b->len, len, tag);
    b->len += len;
    b->s[b->len] = 0;
}

void sb_put_sub(jv_sb *b, const jinja_value *v, size_t from, size_t to) {
    sb_reserve(b, to - from);
    const jv_run *r = v->u.str.runs;
    for (size_t i = 0; i < v->u.str.nruns; i++) {
        size_t rs = r[i].start, re = r[i].start + r[i].len;
        size_t lo = rs > from ? rs : from, hi = re < to ? re : to;
        if (lo < hi) {
            memcpy(b->s + b->len, v->u.str.s + lo, hi - lo);
            sb_run(b, b->len, hi - lo, r[i].tag);
            b->len += hi - lo;
        } else if (lo == hi &&
                   (from == to ? rs <= from && from <= re : rs == re && from <= rs && rs <= to)) {
            sb_run(b, b->len, 0, r[i].tag); /* an empty piece keeps where it was */
        }
    }
    if (b->s) b->s[b->len] = 0;
}

void sb_put_str(jv_sb *b, const jinja_value *v) {
    sb_put_sub(b, v, 0, v->u.str.len);
}

jinja_value *sb_finish(jv_sb *b) {
    jinja_value *v = jv_new(b->a, JV_STR);
    if (!b->s) sb_reserve(b, 0);
    b->s[b->len] = 0;
    v->u.str.s = b->s;
    v->u.str.len = b->len;
    if (b->nruns == 0) sb_run(b, 0, 0, JINJA_TAG_DATA);
    v->u.str.runs = b->runs;
    v->u.str.nruns = b->nruns;
    return v;
}

jinja_value *jv_sub(jinja_arena *a, const jinja_value *v, size_t from, size_t to) {
    jv_sb b;
    sb_init(&b, a);
    sb_put_sub(&b, v, from, to);
    return sb_finish(&b);
}

/* ---- UTF-8 ---- */

uint32_t utf8_next(const char *s, size_t n, size_t i, size_t *len) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[i];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (k == 0 || i + k > n) {
        *len = 1;
        return c;
    }
    uint32_t cp = k == 1 ? c : k == 2 ? (c & 0x1f) : k == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t j = 1; j < k; j++) {
        if ((u[i + j] & 0xc0) != 0x80) {
            *len = 1;
            return c;
        }
        cp = (cp << 6) | (u[i + j] & 0x3f);
    }
    *len = k;
    return cp;
}

size_t utf8_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n;) {
        size_t l;
        utf8_next(s, n, i, &l);
        i += l;
        c++;
    }
    return c;
}

int py_isspace(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* ---- Python semantics ---- */

int jv_truthy(const jinja_value *v) {
    switch (v->kind) {
    case JV_UNDEF:
    case JV_NONE:
        return 0;
    case JV_BOOL:
        return v->u.b;
    case JV_INT:
        return v->u.i != 0;
    case JV_FLOAT:
        return v->u.f != 0.0;
    case JV_STR:
        return v->u.str.len != 0;
    case JV_LIST:
        return v->u.list.n != 0;
    case JV_DICT:
        return v->is_ns || v->u.dict.n != 0;
    default:
        return 1;
    }
}

static int jv_is_num(const jinja_value *v) {
    return v->kind == JV_BOOL || v->kind == JV_INT || v->kind == JV_FLOAT;
}

int jv_equal(const jinja_value *x, const jinja_value *y) {
    if (x == y) return 1;
    if (jv_is_num(x) && jv_is_num(y)) {
        if (x->kind == JV_FLOAT || y->kind == JV_FLOAT) {
            double a = x->kind == JV_FLOAT ? x->u.f : (double)(x->kind == JV_INT ? x->u.i : x->u.b);
            double b = y->kind == JV_FLOAT ? y->u.f : (double)(y->kind == JV_INT ? y->u.i : y->u.b);
            return a == b;
        }
        long long a = x->kind == JV_INT ? x->u.i : x->u.b, b = y->kind == JV_INT ? y->u.i : y->u.b;
        return a == b;
    }
    if (x->kind != y->kind) return 0;
    switch (x->kind) {
    case JV_UNDEF:
    case JV_NONE:
        return 1;
    case JV_STR:
        return x->u.str.len == y->u.str.len && memcmp(x->u.str.s, y->u.str.s, x->u.str.len) == 0;
    case JV_LIST:
        if (x->u.list.n != y->u.list.n || x->is_tuple != y->is_tuple) return 0;
        for (size_t i = 0; i < x->u.list.n; i++)
            if (!jv_equal(x->u.list.items[i], y->u.list.items[i])) return 0;
        return 1;
    case JV_DICT:
        if (x->is_ns || y->is_ns) return 0; /* objects compare by identity */
        if (x->u.dict.n != y->u.dict.n) return 0;
        for (size_t i = 0; i < x->u.dict.n; i++) {
            const jinja_value *w = jv_dict_find(y, x->u.dict.keys[i]);
            if (!w || !jv_equal(x->u.dict.vals[i], w)) return 0;
        }
        return 1;
    case JV_FUNC:
        return x->u.func.id == y->u.func.id && x->u.func.self == y->u.func.self;
    default:
        return 0;
    }
}

const char *jv_type_name(const jinja_value *v) {
    static const char *names[] = {"undefined", "NoneType", "bool", "int",      "float",
                                  "str",       "list",     "dict", "function", "macro"};
    if (v->kind == JV_DICT && v->is_ns) return "Namespace";
    return names[v->kind];
}

/* Python's repr of a float: the shortest digits that read back, in Python's layout. */
void py_float_repr(char *buf, size_t len, double f) {
    if (isnan(f)) {
        snprintf(buf, len, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, len, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp: [-]d.ddde[+-]XX with p digits */
    char digits[32];
    int nd = 0, neg = tmp[0] == '-';
    const char *q = tmp + neg;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (exp < -4 || exp >= 16) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++)
                out[o++] = digits[i];
        }
        o += snprintf(out + o, sizeof out - o, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
    } else if (exp < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -exp - 1; i++)
            out[o++] = '0';
        for (int i = 0; i < nd; i++)
            out[o++] = digits[i];
    } else {
        for (int i = 0; i <= exp; i++)
            out[o++] = i < nd ? digits[i] : '0';
        out[o++] = '.';
        if (nd > exp + 1)
            for (int i = exp + 1; i < nd; i++)
                out[o++] = digits[i];
        else
            out[o++] = '0';
    }
    out[o] = 0;
    snprintf(buf, len, "%s", out);
}

static void put_data(jv_sb *b, const char *s) {
    sb_put(b, s, strlen(s), JINJA_TAG_DATA);
}

static void put_scalar(jv_sb *b, const jinja_value *v) {
    char buf[64];
    switch (v->kind) {
    case JV_NONE:
        put_data(b, "None");
        break;
    case JV_BOOL:
        put_data(b, v->u.b ? "True" : "False");
        break;
    case JV_INT:
        snprintf(buf, sizeof buf, "%lld", v->u.i);
        put_data(b, buf);
        break;
    case JV_FLOAT:
        py_float_repr(buf, sizeof buf, v->u.f);
        put_data(b, buf);
        break;
    default:
        break;
    }
}

/* Python's repr of a str: single quotes unless it holds ' and no ". */
static void repr_str(jv_sb *b, const jinja_value *v) {
    const char *s = v->u.str.s;
    size_t n = v->u.str.len;
    int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char quote = sq && !dq ? '"' : '\'';
    sb_put(b, &quote, 1, JINJA_TAG_DATA);
    for (size_t i = 0; i < n;) {
        size_t l;
        uint32_t c = utf8_next(s, n, i, &l);
        char e[16];
        const char *esc = NULL;
        if (c == '\\')
            esc = "\\\\";
        else if (c == (uint32_t)quote)
            esc = quote == '\'' ? "\\'" : "\\\"";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0xa0) || c == 0xad) {
            snprintf(e, sizeof e, "\\x%02x", c);
            esc = e;
        } else if (c == 0x2028 || c == 0x2029 || (c >= 0x200b && c <= 0x200f) || c == 0xfeff) {
            snprintf(e, sizeof e, "\\u%04x", c);
            esc = e;
        }
        if (esc)
            put_data(b, esc);
        else
            sb_put_sub(b, v, i, i + l);
        i += l;
    }
    sb_put(b, &quote, 1, JINJA_TAG_DATA);
}

void jv_repr_into(jv_sb *b, const jinja_value *v) {
    switch (v->kind) {
    case JV_STR:
        repr_str(b, v);
        break;
    case JV_LIST:
        put_data(b, v->is_tuple ? "(" : "[");
        for (size_t i = 0; i < v->u.list.n; i++) {
            if (i) put_data(b, ", ");
            jv_repr_into(b, v->u.list.items[i]);
        }
        put_data(b, v->is_tuple ? (v->u.list.n == 1 ? ",)" : ")") : "]");
        break;
    case JV_DICT:
        if (v->is_ns) {
            put_data(b, "<Namespace ");
            for (size_t i = 0; i < v->u.dict.n; i++) {
                if (i) put_data(b, ", ");
                jv_str_into(b, v->u.dict.keys[i]);
                put_data(b, "=");
                jv_repr_into(b, v->u.dict.vals[i]);
            }
            put_data(b, ">");
            break;
        }
        put_data(b, "{");
        for (size_t i = 0; i < v->u.dict.n; i++) {
            if (i) put_data(b, ", ");
            jv_repr_into(b, v->u.dict.keys[i]);
            put_data(b, ": ");
            jv_repr_into(b, v->u.dict.vals[i]);
        }
        put_data(b, "}");
        break;
    case JV_UNDEF:
        break;
    case JV_FUNC:
    case JV_MACRO:
        put_data(b, "<function ");
        put_data(b, v->name ? v->name : "?");
        put_data(b, ">");
        break;
    default:
        put_scalar(b, v);
    }
}

void jv_str_into(jv_sb *b, const jinja_value *v) {
    if (v->kind == JV_STR)
        sb_put_str(b, v);
    else if (v->kind == JV_UNDEF)
        sb_put(b, "", 0, JINJA_TAG_DATA);
    else
        jv_repr_into(b, v);
}

/* ---- json.dumps(ensure_ascii=False) ---- */

static void json_str(jv_sb *b, const char *s, size_t n) {
    put_data(b, "\"");
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (i > start) sb_put(b, s + start, i - start, JINJA_TAG_DATA);
        char e[8];
        switch (c) {
        case '"':
            put_data(b, "\\\"");
            break;
        case '\\':
            put_data(b, "\\\\");
            break;
        case '\n':
            put_data(b, "\\n");
            break;
        case '\r':
            put_data(b, "\\r");
            break;
        case '\t':
            put_data(b, "\\t");
            break;
        case '\b':
            put_data(b, "\\b");
            break;
        case '\f':
            put_data(b, "\\f");
            break;
        default:
            snprintf(e, sizeof e, "\\u%04x", c);
            put_data(b, e);
        }
        start = i + 1;
    }
    if (n > start) sb_put(b, s + start, n - start, JINJA_TAG_DATA);
    put_data(b, "\"");
}

static void json_indent(jv_sb *b, int indent, int level) {
    put_data(b, "\n");
    for (int i = 0; i < indent * level; i++)
        put_data(b, " ");
}

static int key_cmp(const void *x, const void *y) {
    const jinja_value *a = *(jinja_value *const *)x, *c = *(jinja_value *const *)y;
    size_t n = a->u.str.len < c->u.str.len ? a->u.str.len : c->u.str.len;
    int r = memcmp(a->u.str.s, c->u.str.s, n);
    return r ? r : (a->u.str.len > c->u.str.len) - (a->u.str.len < c->u.str.len);
}

int jv_json_into(jv_sb *b, const jinja_value *v, int indent, const char *item_sep,
                 const char *key_sep, int sort_keys, int depth, const char **bad) {
    if (depth > JINJA_MAX_DEPTH) {
        *bad = "a value nested too deep";
        return -1;
    }
    char buf[64];
    switch (v->kind) {
    case JV_NONE:
        put_data(b, "null");
        return 0;
    case JV_BOOL:
        put_data(b, v->u.b ? "true" : "false");
        return 0;
    case JV_INT:
        put_scalar(b, v);
        return 0;
    case JV_FLOAT:
        if (isnan(v->u.f))
            put_data(b, "NaN");
        else if (isinf(v->u.f))
            put_data(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        else {
            py_float_repr(buf, sizeof buf, v->u.f);
            put_data(b, buf);
        }
        return 0;
    case JV_STR:
        json_str(b, v->u.str.s, v->u.str.len);
        return 0;
    case JV_LIST:
        if (v->u.list.n == 0) {
            put_data(b, "[]");
            return 0;
        }
        put_data(b, "[");
        for (size_t i = 0; i < v->u.list.n; i++) {
            if (i) put_data(b, item_sep);
            if (indent >= 0) json_indent(b, indent, depth + 1);
            if (jv_json_into(b, v->u.list.items[i], indent, item_sep, key_sep, sort_keys, depth + 1,
                             bad))
                return -1;
        }
        if (indent >= 0) json_indent(b, indent, depth);
        put_data(b, "]");
        return 0;
    case JV_DICT: {
        if (v->is_ns) break;
        if (v->u.dict.n == 0) {
            put_data(b, "{}");
            return 0;
        }
        size_t n = v->u.dict.n;
        jinja_value **keys = jv_alloc(b->a, n * sizeof *keys);
        memcpy(keys, v->u.dict.keys, n * sizeof *keys);
        for (size_t i = 0; i < n; i++)
            if (keys[i]->kind != JV_STR) {
                *bad = "a dict key that is not a string";
                return -1;
            }
        if (sort_keys) qsort(keys, n, sizeof *keys, key_cmp);
        put_data(b, "{");
        for (size_t i = 0; i < n; i++) {
            if (i) put_data(b, item_sep);
            if (indent >= 0) json_indent(b, indent, depth + 1);
            json_str(b, keys[i]->u.str.s, keys[i]->u.str.len);
            put_data(b, key_sep);
            if (jv_json_into(b, jv_dict_find(v, keys[i]), indent, item_sep, key_sep, sort_keys,
                             depth + 1, bad))
                return -1;
        }
        if (indent >= 0) json_indent(b, indent, depth);
        put_data(b, "}");
        return 0;
    }
    default:
        break;
    }
    *bad = jv_type_name(v);
    return -1;
}

const char *jv_memfind(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && memcmp(h + i, nd, nn) == 0) return h + i;
    return NULL;
}

/* the one tag every string in v (keys included) carries, or -1 (none, or several) */
static int uniform_tag(const jinja_value *v, int depth) {
    if (depth > JINJA_MAX_DEPTH) return -1;
    int t = -2; /* no string seen */
    switch (v->kind) {
    case JV_STR:
        for (size_t i = 0; i < v->u.str.nruns; i++) {
            if (t == -2) t = v->u.str.runs[i].tag;
            if (v->u.str.runs[i].tag != t) return -1;
        }
        return t;
    case JV_LIST:
    case JV_DICT: {
        size_t n = v->kind == JV_LIST ? v->u.list.n : v->u.dict.n;
        for (size_t i = 0; i < 2 * n; i++) {
            const jinja_value *x = v->kind == JV_LIST ? (i < n ? v->u.list.items[i] : NULL)
                                   : i < n            ? v->u.dict.keys[i]
                                                      : v->u.dict.vals[i - n];
            if (!x) continue;
            int u = uniform_tag(x, depth + 1);
            if (u == -1) return -1;
            if (u == -2) continue;
            if (t == -2) t = u;
            if (u != t) return -1;
        }
        return t;
    }
    default:
        return -2;
    }
}

void jv_retag_from(jinja_value *out, const jinja_value *src) {
    int t = uniform_tag(src, 0);
    if (t < JINJA_TAG_USER || out->kind != JV_STR) return;
    for (size_t i = 0; i < out->u.str.nruns; i++)
        ((jv_run *)out->u.str.runs)[i].tag = t;
}
