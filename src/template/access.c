/* access.c — a.name, a[key] and a[start:stop:step] with jinja2's rules: items and attributes
 * are one namespace, methods are attributes of str and dict, a missing one is undefined
 * (render.h). */
#include "template/render.h"

#include <stdio.h>
#include <string.h>

jinja_value *jr_get_attr(jinja_renderer *r, const jnode *at, jinja_value *obj, const char *name) {
    const jr_builtin *m;
    switch (obj->kind) {
    case JV_UNDEF:
        jr_fail_undef(r, at, obj);
        break;
    case JV_DICT: {
        if ((m = jr_method_find(obj, name))) return jr_func(r, m, obj);
        jinja_value *v = jv_dict_get(obj, name, strlen(name));
        if (v) return v;
        break;
    }
    case JV_STR:
        if ((m = jr_method_find(obj, name))) return jr_func(r, m, obj);
        break;
    default:
        break;
    }
    return jv_undef(r->a, name);
}

jinja_value *jr_get_item(jinja_renderer *r, const jnode *at, jinja_value *obj, jinja_value *key) {
    switch (obj->kind) {
    case JV_UNDEF:
        jr_fail_undef(r, at, obj);
        break;
    case JV_DICT: {
        jinja_value *v = jv_dict_find(obj, key);
        if (v) return v;
        if (key->kind == JV_STR) return jr_get_attr(r, at, obj, key->u.str.s);
        break;
    }
    case JV_LIST:
    case JV_STR:
        if (key->kind == JV_INT || key->kind == JV_BOOL) {
            long long i = jr_as_int(r, at, key, "index");
            if (obj->kind == JV_LIST) {
                long long n = (long long)obj->u.list.n;
                if (i < 0) i += n;
                if (i >= 0 && i < n) return obj->u.list.items[i];
            } else {
                size_t cnt;
                size_t *off = jr_cp_offsets(r, obj, &cnt);
                if (i < 0) i += (long long)cnt;
                if (i >= 0 && i < (long long)cnt) return jv_sub(r->a, obj, off[i], off[i + 1]);
            }
        } else if (key->kind == JV_STR && obj->kind == JV_STR) {
            return jr_get_attr(r, at, obj, key->u.str.s);
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
static void slice_indices(jinja_renderer *r, const jnode *at, long long len, const jinja_value *s0,
                          const jinja_value *s1, const jinja_value *s2, long long *start,
                          long long *stop, long long *stepv) {
    long long st = 1;
    if (s2 && s2->kind != JV_NONE) st = jr_as_int(r, at, s2, "slice step");
    if (st == 0) jr_fail(r, at, "slice step cannot be zero");
    long long lower = st > 0 ? 0 : -1, upper = st > 0 ? len : len - 1;
    long long a, b;
    if (!s0 || s0->kind == JV_NONE)
        a = st < 0 ? upper : lower;
    else {
        a = jr_as_int(r, at, s0, "slice index");
        if (a < 0) {
            a += len;
            if (a < lower) a = lower;
        } else if (a > upper)
            a = upper;
    }
    if (!s1 || s1->kind == JV_NONE)
        b = st < 0 ? lower : upper;
    else {
        b = jr_as_int(r, at, s1, "slice index");
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

jinja_value *jr_slice(jinja_renderer *r, const jnode *x, jinja_value *obj, const jinja_value *s0,
                      const jinja_value *s1, const jinja_value *s2) {
    if (obj->kind == JV_UNDEF) jr_fail_undef(r, x, obj);
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
        size_t *off = jr_cp_offsets(r, obj, &cnt);
        slice_indices(r, x, (long long)cnt, s0, s1, s2, &a, &b, &st);
        if (st == 1) return jv_sub(r->a, obj, off[a], off[b > a ? b : a]);
        jv_sb sb;
        sb_init(&sb, r->a);
        for (long long i = a; st > 0 ? i < b : i > b; i += st)
            sb_put_sub(&sb, obj, off[i], off[i + 1]);
        return sb_finish(&sb);
    }
    jr_fail(r, x, "'%s' object is not subscriptable", jv_type_name(obj));
    return NULL;
}
