/* filters.c — the filters (x | trim, x | tojson(indent=2), ...), one function each in a table by
 * name, with jinja2's semantics; strings keep their bytes' tags (render.h). */
#include "template/render.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* v is the filtered value, c the filter's arguments; name for messages */
typedef jinja_value *jr_filter_fn(jinja_renderer *r, const jnode *at, const char *name,
                                  jinja_value *v, cargs *c);

#define FILTER_ARGS jinja_renderer *r, const jnode *at, const char *name, jinja_value *v, cargs *c

/* obj's attribute path "a.b" as jinja2's attribute getters do (items first, then attributes) */
static jinja_value *attr_path(jinja_renderer *r, const jnode *at, jinja_value *obj,
                              const jinja_value *path) {
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

/* select / reject / selectattr / rejectattr */
static jinja_value *select_items(jinja_renderer *r, const jnode *at, jinja_value *v, cargs *c,
                                 int attr, int keep) {
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

static jinja_value *html_escape(jinja_renderer *r, jinja_value *s) {
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

static jinja_value *f_trim(FILTER_ARGS) {
    jr_check_args(r, at, c, name, 1, NULL);
    jinja_value *ch = jr_arg(c, 0, NULL);
    if (ch && ch->kind == JV_NONE) ch = NULL;
    if (ch) jr_need_str(r, at, ch, "trim's characters");
    return jr_str_strip(r, jr_to_str(r, v), ch, JR_STRIP_BOTH);
}

static jinja_value *f_length(FILTER_ARGS) {
    jr_check_args(r, at, c, name, 0, NULL);
    return jr_int(r, jr_length(r, at, v));
}

static jinja_value *f_tojson(FILTER_ARGS) {
    static const char *const kws[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    jr_check_args(r, at, c, name, 4, kws);
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

static jinja_value *f_string(FILTER_ARGS) {
    jr_check_args(r, at, c, name, 0, NULL);
    return jr_to_str(r, v);
}

static jinja_value *f_list(FILTER_ARGS) {
    jr_check_args(r, at, c, name, 0, NULL);
    jinja_value *l = jr_iter_list(r, at, v), *o = jinja_new_list(r->a);
    for (size_t i = 0; i < l->u.list.n; i++)
        jinja_list_push(r->a, o, l->u.list.items[i]);
    return o;
}

static jinja_value *first_or_last(FILTER_ARGS, int last) {
    jr_check_args(r, at, c, name, 0, NULL);
    if (v->kind == JV_UNDEF) jr_fail_undef(r, at, v);
    jinja_value *l = jr_iter_list(r, at, v);
    if (l->u.list.n == 0) return jv_undef(r->a, "first/last of an empty sequence");
    return l->u.list.items[last ? l->u.list.n - 1 : 0];
}
static jinja_value *f_first(FILTER_ARGS) {
    return first_or_last(r, at, name, v, c, 0);
}
static jinja_value *f_last(FILTER_ARGS) {
    return first_or_last(r, at, name, v, c, 1);
}

static jinja_value *f_default(FILTER_ARGS) {
    static const char *const kws[] = {"default_value", "boolean", NULL};
    jr_check_args(r, at, c, name, 2, kws);
    jinja_value *dv = jr_arg(c, 0, "default_value"), *bo = jr_arg(c, 1, "boolean");
    int use = v->kind == JV_UNDEF || (bo && jv_truthy(bo) && !jv_truthy(v));
    if (!use) return v;
    return dv ? dv : jv_str_tag(r->a, "", 0, JINJA_TAG_DATA);
}

static jinja_value *case_filter(FILTER_ARGS, jr_case how) {
    jr_check_args(r, at, c, name, 0, NULL);
    return jr_str_case(r, at, jr_to_str(r, v), how, name);
}
static jinja_value *f_upper(FILTER_ARGS) {
    return case_filter(r, at, name, v, c, JR_CASE_UPPER);
}
static jinja_value *f_lower(FILTER_ARGS) {
    return case_filter(r, at, name, v, c, JR_CASE_LOWER);
}
static jinja_value *f_capitalize(FILTER_ARGS) {
    return case_filter(r, at, name, v, c, JR_CASE_CAPITALIZE);
}
static jinja_value *f_title(FILTER_ARGS) {
    return case_filter(r, at, name, v, c, JR_CASE_WORDS);
}

static jinja_value *f_replace(FILTER_ARGS) {
    jr_check_args(r, at, c, name, 3, NULL);
    if (c->n < 2) jr_fail(r, at, "replace takes two or three arguments");
    long long cnt =
        c->n == 3 && c->args[2]->kind != JV_NONE ? jr_as_int(r, at, c->args[2], "count") : -1;
    return jr_str_replace(r, jr_to_str(r, v), jr_to_str(r, c->args[0]), jr_to_str(r, c->args[1]),
                          cnt);
}

static jinja_value *f_join(FILTER_ARGS) {
    static const char *const kws[] = {"d", "attribute", NULL};
    jr_check_args(r, at, c, name, 2, kws);
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

static jinja_value *f_select(FILTER_ARGS) {
    return select_items(r, at, v, c, 0, 1);
}
static jinja_value *f_reject(FILTER_ARGS) {
    return select_items(r, at, v, c, 0, 0);
}
static jinja_value *f_selectattr(FILTER_ARGS) {
    return select_items(r, at, v, c, 1, 1);
}
static jinja_value *f_rejectattr(FILTER_ARGS) {
    return select_items(r, at, v, c, 1, 0);
}

static jinja_value *f_map(FILTER_ARGS) {
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
    if (fid < 0 || fid == jinja_filter_id("map"))
        jr_fail(r, at, "filter '%s' is not supported", fn->u.str.s);
    cargs sub = *c;
    sub.args++;
    sub.n--;
    for (size_t i = 0; i < l->u.list.n; i++)
        jinja_list_push(r->a, o, jr_apply_filter(r, at, fid, l->u.list.items[i], &sub));
    return o;
}

static jinja_value *f_items(FILTER_ARGS) {
    jr_check_args(r, at, c, name, 0, NULL);
    if (v->kind == JV_UNDEF) return jinja_new_list(r->a);
    if (v->kind != JV_DICT || v->is_ns)
        jr_fail(r, at, "items: %s is not a mapping", jv_type_name(v));
    return jr_dict_items(r, v);
}

static jinja_value *f_reverse(FILTER_ARGS) {
    jr_check_args(r, at, c, name, 0, NULL);
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

/* a string's text up to trailing blanks, when it reads whole as a number (no '_') */
static int numeric_text(const char *s, const char *e) {
    while (*e == ' ' || *e == '\t' || *e == '\n')
        e++;
    return e != s && !*e && !strchr(s, '_');
}

static jinja_value *f_int(FILTER_ARGS) {
    static const char *const kws[] = {"default", "base", NULL};
    jr_check_args(r, at, c, name, 2, kws);
    jinja_value *dv = jr_arg(c, 0, "default");
    if (v->kind == JV_INT) return v;
    if (v->kind == JV_BOOL) return jr_int(r, v->u.b);
    if (v->kind == JV_FLOAT && isfinite(v->u.f) && fabs(v->u.f) < 9.2e18)
        return jr_int(r, (long long)v->u.f);
    if (v->kind == JV_STR) {
        char *s = jv_strdup(r->a, v->u.str.s, v->u.str.len), *e;
        long long x = strtoll(s, &e, 10);
        if (numeric_text(s, e)) return jr_int(r, x);
    }
    return dv ? dv : jr_int(r, 0);
}

static jinja_value *f_float(FILTER_ARGS) {
    static const char *const kws[] = {"default", "base", NULL};
    jr_check_args(r, at, c, name, 2, kws);
    jinja_value *dv = jr_arg(c, 0, "default");
    if (v->kind == JV_FLOAT) return v;
    if (v->kind == JV_INT || v->kind == JV_BOOL) return jinja_new_float(r->a, jr_as_f(v));
    if (v->kind == JV_STR) {
        char *s = jv_strdup(r->a, v->u.str.s, v->u.str.len), *e;
        double x = strtod(s, &e);
        if (numeric_text(s, e) && !strchr(s, 'x') && !strchr(s, 'X'))
            return jinja_new_float(r->a, x);
    }
    return dv ? dv : jinja_new_float(r->a, 0.0);
}

static jinja_value *f_abs(FILTER_ARGS) {
    jr_check_args(r, at, c, name, 0, NULL);
    if (v->kind == JV_FLOAT) return jinja_new_float(r->a, fabs(v->u.f));
    if (v->kind == JV_INT || v->kind == JV_BOOL) {
        long long i = jr_as_int(r, at, v, "abs");
        if (i == LLONG_MIN) jr_fail(r, at, "integer overflow in abs");
        return jr_int(r, i < 0 ? -i : i);
    }
    jr_fail(r, at, "bad operand type for abs(): '%s'", jv_type_name(v));
}

static jinja_value *f_safe(FILTER_ARGS) {
    jr_check_args(r, at, c, name, 0, NULL);
    return v;
}

static jinja_value *f_escape(FILTER_ARGS) {
    jr_check_args(r, at, c, name, 0, NULL);
    return html_escape(r, jr_to_str(r, v));
}

static const struct {
    const char *name;
    jr_filter_fn *fn;
} filters[] = {
    {"trim", f_trim},
    {"length", f_length},
    {"count", f_length},
    {"tojson", f_tojson},
    {"string", f_string},
    {"list", f_list},
    {"first", f_first},
    {"last", f_last},
    {"default", f_default},
    {"d", f_default},
    {"upper", f_upper},
    {"lower", f_lower},
    {"capitalize", f_capitalize},
    {"title", f_title},
    {"replace", f_replace},
    {"join", f_join},
    {"select", f_select},
    {"reject", f_reject},
    {"selectattr", f_selectattr},
    {"rejectattr", f_rejectattr},
    {"map", f_map},
    {"items", f_items},
    {"reverse", f_reverse},
    {"int", f_int},
    {"float", f_float},
    {"abs", f_abs},
    {"safe", f_safe},
    {"e", f_escape},
    {"escape", f_escape},
};

int jinja_filter_id(const char *name) {
    for (int i = 0; i < (int)(sizeof filters / sizeof *filters); i++)
        if (!strcmp(filters[i].name, name)) return i;
    return -1;
}

jinja_value *jr_apply_filter(jinja_renderer *r, const jnode *at, int id, jinja_value *v, cargs *c) {
    return filters[id].fn(r, at, filters[id].name, v, c);
}
