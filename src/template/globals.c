/* globals.c — the functions a template sees without defining them: range, namespace, dict,
 * raise_exception and strftime_now (transformers' two), one function each in a table by name
 * (render.h). */
#include "template/render.h"

#include <limits.h>
#include <string.h>
#include <time.h>

static jinja_value *g_range(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                            cargs *c) {
    jr_check_args(r, at, c, nm, 3, NULL);
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

/* dict(d, k=v, ...) and namespace(...): a copy of d with the keywords set */
static jinja_value *make_dict(jinja_renderer *r, const jnode *at, const char *nm, cargs *c) {
    jinja_value *d = jinja_new_dict(r->a);
    if (c->n > 1) jr_fail(r, at, "%s takes at most one positional argument", nm);
    if (c->n == 1) {
        jinja_value *src = c->args[0];
        if (src->kind != JV_DICT || src->is_ns)
            jr_fail(r, at, "%s() of a %s is not supported", nm, jv_type_name(src));
        for (size_t i = 0; i < src->u.dict.n; i++)
            jv_dict_put(r->a, d, src->u.dict.keys[i], src->u.dict.vals[i]);
    }
    for (size_t i = 0; i < c->nkw; i++)
        jv_dict_put(r->a, d, jv_cstr(r->a, c->kwn[i]), c->kwv[i]);
    return d;
}
static jinja_value *g_dict(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                           cargs *c) {
    return make_dict(r, at, nm, c);
}
static jinja_value *g_namespace(jinja_renderer *r, const jnode *at, const char *nm,
                                jinja_value *self, cargs *c) {
    jinja_value *d = make_dict(r, at, nm, c);
    d->is_ns = 1;
    return d;
}

static jinja_value *g_raise(jinja_renderer *r, const jnode *at, const char *nm, jinja_value *self,
                            cargs *c) {
    jinja_value *m = c->n ? jr_to_str(r, c->args[0]) : jv_cstr(r->a, "");
    jr_fail(r, at, "raise_exception: %.*s", (int)(m->u.str.len < 300 ? m->u.str.len : 300),
            m->u.str.s);
}

static jinja_value *g_strftime(jinja_renderer *r, const jnode *at, const char *nm,
                               jinja_value *self, cargs *c) {
    jr_check_args(r, at, c, nm, 1, NULL);
    jinja_value *fmt = jr_need_str(r, at, jr_arg(c, 0, NULL), "strftime_now's format");
    time_t t = (time_t)r->o.now;
    struct tm tm;
    if (!gmtime_r(&t, &tm)) jr_fail(r, at, "strftime_now: time out of range");
    char buf[512];
    char *f0 = jv_strdup(r->a, fmt->u.str.s, fmt->u.str.len);
    size_t n = strftime(buf, sizeof buf, f0, &tm);
    if (n == 0 && fmt->u.str.len) jr_fail(r, at, "strftime_now: format too long or empty result");
    return jv_str_tag(r->a, buf, n, JINJA_TAG_DATA);
}

static const jr_builtin globals[] = {
    {"range", g_range},           {"namespace", g_namespace},   {"dict", g_dict},
    {"raise_exception", g_raise}, {"strftime_now", g_strftime}, {NULL, NULL}};

const jr_builtin *jr_global_find(const char *name) {
    for (size_t i = 0; globals[i].name; i++)
        if (!strcmp(globals[i].name, name)) return &globals[i];
    return NULL;
}
