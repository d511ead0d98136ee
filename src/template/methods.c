/* methods.c — the str and dict methods templates call (s.strip(), d.items(), ...), one function
 * each in a table by name, with Python's semantics (render.h). */
#include "template/render.h"

#include <string.h>

/* ---- str ---- */

static jinja_value *strip_method(jinja_renderer *r, const jnode *at, const char *nm,
                                 jinja_value *self, cargs *c, int which) {
    jr_check_args(r, at, c, nm, 1, NULL);
    jinja_value *ch = jr_arg(c, 0, NULL);
    if (ch && ch->kind == JV_NONE) ch = NULL;
    if (ch) jr_need_str(r, at, ch, "strip's characters");
    return jr_str_strip(r, self, ch, which);
}
static jinja_value *m_strip(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                            cargs *c) {
    return strip_method(r, at, nm, self, c, JR_STRIP_BOTH);
}
static jinja_value *m_lstrip(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                             cargs *c) {
    return strip_method(r, at, nm, self, c, JR_STRIP_LEFT);
}
static jinja_value *m_rstrip(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                             cargs *c) {
    return strip_method(r, at, nm, self, c, JR_STRIP_RIGHT);
}

static jinja_value *split_method(jinja_renderer *r, const jnode *at, const char *nm,
                                 jinja_value *self, cargs *c, int from_right) {
    static const char *const kws[] = {"sep", "maxsplit", NULL};
    jr_check_args(r, at, c, nm, 2, kws);
    jinja_value *sep = jr_arg(c, 0, "sep"), *ms = jr_arg(c, 1, "maxsplit");
    if (sep && sep->kind == JV_NONE) sep = NULL;
    if (sep) jr_need_str(r, at, sep, "split's separator");
    long long m = ms ? jr_as_int(r, at, ms, "maxsplit") : -1;
    if (from_right && m >= 0) jr_fail(r, at, "rsplit with maxsplit is not supported");
    return jr_str_split(r, at, self, sep, m);
}
static jinja_value *m_split(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                            cargs *c) {
    return split_method(r, at, nm, self, c, 0);
}
static jinja_value *m_rsplit(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                             cargs *c) {
    return split_method(r, at, nm, self, c, 1);
}

/* startswith / endswith: one prefix, or any of a tuple of them */
static jinja_value *affix_method(jinja_renderer *r, const jnode *at, const char *nm,
                                 jinja_value *self, cargs *c, int end) {
    jr_check_args(r, at, c, nm, 1, NULL);
    jinja_value *x = jr_arg(c, 0, NULL);
    if (!x) jr_fail(r, at, "%s takes one argument", nm);
    if (x->kind == JV_LIST) {
        for (size_t i = 0; i < x->u.list.n; i++)
            if (jr_str_starts_with(self, jr_need_str(r, at, x->u.list.items[i], nm), end))
                return jr_bool(r, 1);
        return jr_bool(r, 0);
    }
    return jr_bool(r, jr_str_starts_with(self, jr_need_str(r, at, x, nm), end));
}
static jinja_value *m_startswith(jinja_renderer *r, const jnode *at, const char *nm,
                                 jinja_value *self, cargs *c) {
    return affix_method(r, at, nm, self, c, 0);
}
static jinja_value *m_endswith(jinja_renderer *r, const jnode *at, const char *nm,
                               jinja_value *self, cargs *c) {
    return affix_method(r, at, nm, self, c, 1);
}

static jinja_value *case_method(jinja_renderer *r, const jnode *at, const char *nm,
                                jinja_value *self, cargs *c, jr_case how) {
    jr_check_args(r, at, c, nm, 0, NULL);
    return jr_str_case(r, at, self, how, nm);
}
static jinja_value *m_upper(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                            cargs *c) {
    return case_method(r, at, nm, self, c, JR_CASE_UPPER);
}
static jinja_value *m_lower(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                            cargs *c) {
    return case_method(r, at, nm, self, c, JR_CASE_LOWER);
}
static jinja_value *m_title(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                            cargs *c) {
    return case_method(r, at, nm, self, c, JR_CASE_TITLE);
}
static jinja_value *m_capitalize(jinja_renderer *r, const jnode *at, const char *nm,
                                 jinja_value *self, cargs *c) {
    return case_method(r, at, nm, self, c, JR_CASE_CAPITALIZE);
}

static jinja_value *m_replace(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                              cargs *c) {
    jr_check_args(r, at, c, nm, 3, NULL);
    if (c->n < 2) jr_fail(r, at, "replace takes two or three arguments");
    long long cnt = c->n == 3 ? jr_as_int(r, at, c->args[2], "replace's count") : -1;
    return jr_str_replace(r, self, jr_need_str(r, at, c->args[0], "replace's old"),
                          jr_need_str(r, at, c->args[1], "replace's new"), cnt);
}

static jinja_value *m_find(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                           cargs *c) {
    jr_check_args(r, at, c, nm, 1, NULL);
    jinja_value *x = jr_need_str(r, at, jr_arg(c, 0, NULL), nm);
    const char *h = self->u.str.s;
    const char *f = jv_memfind(h, self->u.str.len, x->u.str.s, x->u.str.len);
    return jr_int(r, f ? (long long)jv_cp_count(h, (size_t)(f - h)) : -1);
}

static jinja_value *m_count(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                            cargs *c) {
    jr_check_args(r, at, c, nm, 1, NULL);
    jinja_value *x = jr_need_str(r, at, jr_arg(c, 0, NULL), nm);
    const char *h = self->u.str.s;
    size_t hn = self->u.str.len;
    if (x->u.str.len == 0) return jr_int(r, (long long)jv_cp_count(h, hn) + 1);
    long long k = 0;
    for (const char *f = h; (f = jv_memfind(f, hn - (size_t)(f - h), x->u.str.s, x->u.str.len));
         f += x->u.str.len)
        k++;
    return jr_int(r, k);
}

static jinja_value *m_join(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                           cargs *c) {
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

static jinja_value *m_isdigit(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                              cargs *c) {
    jr_check_args(r, at, c, nm, 0, NULL);
    int ok = self->u.str.len > 0;
    for (size_t i = 0; i < self->u.str.len; i++)
        if (self->u.str.s[i] < '0' || self->u.str.s[i] > '9') ok = 0;
    return jr_bool(r, ok);
}

/* ---- dict ---- */

jinja_value *jr_dict_items(jinja_renderer *r, const jinja_value *d) {
    jinja_value *l = jinja_new_list(r->a);
    for (size_t i = 0; i < d->u.dict.n; i++) {
        jinja_value *t = jinja_new_list(r->a);
        t->is_tuple = 1;
        jinja_list_push(r->a, t, d->u.dict.keys[i]);
        jinja_list_push(r->a, t, d->u.dict.vals[i]);
        jinja_list_push(r->a, l, t);
    }
    return l;
}

static jinja_value *m_items(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                            cargs *c) {
    jr_check_args(r, at, c, nm, 0, NULL);
    return jr_dict_items(r, self);
}

static jinja_value *m_keys(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                           cargs *c) {
    jr_check_args(r, at, c, nm, 0, NULL);
    jinja_value *l = jinja_new_list(r->a);
    for (size_t i = 0; i < self->u.dict.n; i++)
        jinja_list_push(r->a, l, self->u.dict.keys[i]);
    return l;
}

static jinja_value *m_values(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                             cargs *c) {
    jr_check_args(r, at, c, nm, 0, NULL);
    jinja_value *l = jinja_new_list(r->a);
    for (size_t i = 0; i < self->u.dict.n; i++)
        jinja_list_push(r->a, l, self->u.dict.vals[i]);
    return l;
}

static jinja_value *m_get(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                          cargs *c) {
    jr_check_args(r, at, c, nm, 2, NULL);
    if (c->n < 1) jr_fail(r, at, "get takes one or two arguments");
    jinja_value *v = jv_dict_find(self, c->args[0]);
    return v ? v : c->n > 1 ? c->args[1] : jinja_new_none(r->a);
}

static const jr_builtin str_methods[] = {{"strip", m_strip},
                                         {"lstrip", m_lstrip},
                                         {"rstrip", m_rstrip},
                                         {"split", m_split},
                                         {"startswith", m_startswith},
                                         {"endswith", m_endswith},
                                         {"upper", m_upper},
                                         {"lower", m_lower},
                                         {"title", m_title},
                                         {"capitalize", m_capitalize},
                                         {"replace", m_replace},
                                         {"find", m_find},
                                         {"count", m_count},
                                         {"join", m_join},
                                         {"isdigit", m_isdigit},
                                         {"rsplit", m_rsplit},
                                         {NULL, NULL}};

static const jr_builtin dict_methods[] = {
    {"items", m_items}, {"keys", m_keys}, {"values", m_values}, {"get", m_get}, {NULL, NULL}};

const jr_builtin *jr_method_find(const jinja_value *self, const char *name) {
    const jr_builtin *t = self->kind == JV_STR                    ? str_methods
                          : self->kind == JV_DICT && !self->is_ns ? dict_methods
                                                                  : NULL;
    for (size_t i = 0; t && t[i].name; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    return NULL;
}
