/* repr.c — Python's str(), repr() and json.dumps(ensure_ascii=False) of values, and the tag a
 * formatted value takes from its source (jinja_impl.h). */
#include "template/jinja_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        uint32_t c = jv_cp_at(s, n, i, &l);
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
