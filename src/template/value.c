/* value.c — the arena, values, tagged strings, and Python's truth, equality and type names
 * (jinja_impl.h). */
#include "template/jinja_impl.h"

#include "core/check.h"

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

void *jv_grow(jinja_arena *a, const void *v, size_t n, size_t *cap, size_t first, size_t elem) {
    size_t c = *cap ? 2 * *cap : first;
    void *nv = jv_alloc(a, c * elem);
    if (n) memcpy(nv, v, n * elem);
    *cap = c;
    return nv;
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
    if (l->u.list.n == l->u.list.cap)
        l->u.list.items =
            jv_grow(a, l->u.list.items, l->u.list.n, &l->u.list.cap, 4, sizeof *l->u.list.items);
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
        size_t cap = d->u.dict.cap;
        d->u.dict.keys = jv_grow(a, d->u.dict.keys, d->u.dict.n, &cap, 4, sizeof *d->u.dict.keys);
        d->u.dict.vals =
            jv_grow(a, d->u.dict.vals, d->u.dict.n, &d->u.dict.cap, 4, sizeof *d->u.dict.vals);
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
    if (b->nruns == b->rcap)
        b->runs = jv_grow(b->a, b->runs, b->nruns, &b->rcap, 8, sizeof *b->runs);
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
        return x->u.func.fn == y->u.func.fn && x->u.func.self == y->u.func.self;
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
