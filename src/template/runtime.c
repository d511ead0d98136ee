/* runtime.c — what every part of the renderer uses: errors, the step count, function values,
 * numbers, len(), iteration, str(), and the checks of a call's arguments (render.h). */
#include "template/render.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void jr_fail(jinja_renderer *r, const jnode *at, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->errlen, "line %d col %d: %s", at ? at->line : 0, at ? at->col : 0, msg);
    longjmp(r->jmp, 1);
}

void jr_step(jinja_renderer *r, const jnode *at) {
    if (++r->steps > r->o.max_steps)
        jr_fail(r, at, "the template runs longer than %lld steps", r->o.max_steps);
}

jinja_value *jr_func(jinja_renderer *r, const jr_builtin *fn, jinja_value *self) {
    jinja_value *f = jv_alloc(r->a, sizeof *f);
    f->kind = JV_FUNC;
    f->turn = -1;
    f->u.func.fn = fn;
    f->u.func.self = self;
    f->name = fn->name;
    return f;
}

jinja_value *jr_int(jinja_renderer *r, long long i) {
    return jinja_new_int(r->a, i);
}
jinja_value *jr_bool(jinja_renderer *r, int b) {
    return jinja_new_bool(r->a, b);
}

UP_NORETURN void jr_fail_undef(jinja_renderer *r, const jnode *at, const jinja_value *v) {
    jr_fail(r, at, "'%s' is undefined", v->name ? v->name : "value");
}

long long jr_as_int(jinja_renderer *r, const jnode *at, const jinja_value *v, const char *what) {
    if (v->kind == JV_INT) return v->u.i;
    if (v->kind == JV_BOOL) return v->u.b;
    jr_fail(r, at, "%s must be an integer, not %s", what, jv_type_name(v));
    return 0;
}

int jr_is_num(const jinja_value *v) {
    return v->kind == JV_INT || v->kind == JV_BOOL || v->kind == JV_FLOAT;
}
double jr_as_f(const jinja_value *v) {
    return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : (double)v->u.b;
}

long long jr_length(jinja_renderer *r, const jnode *at, const jinja_value *v) {
    switch (v->kind) {
    case JV_STR:
        return (long long)jv_cp_count(v->u.str.s, v->u.str.len);
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
    jr_fail(r, at, "object of type '%s' has no len()", jv_type_name(v));
    return 0;
}

/* the items a for loop or a filter walks: list items, dict keys, code points */
jinja_value *jr_iter_list(jinja_renderer *r, const jnode *at, const jinja_value *v) {
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
        size_t *off = jr_cp_offsets(r, v, &cnt);
        for (size_t i = 0; i < cnt; i++)
            jinja_list_push(r->a, l, jv_sub(r->a, v, off[i], off[i + 1]));
        return l;
    }
    jr_fail(r, at, "'%s' object is not iterable", jv_type_name(v));
    return NULL;
}

/* byte offsets of the code points of s: (*n + 1) entries, the last the length */
size_t *jr_cp_offsets(jinja_renderer *r, const jinja_value *s, size_t *n) {
    size_t cnt = jv_cp_count(s->u.str.s, s->u.str.len);
    size_t *off = jv_alloc(r->a, (cnt + 1) * sizeof *off);
    size_t k = 0;
    for (size_t i = 0; i < s->u.str.len;) {
        size_t l;
        jv_cp_at(s->u.str.s, s->u.str.len, i, &l);
        off[k++] = i;
        i += l;
    }
    off[k] = s->u.str.len;
    *n = cnt;
    return off;
}

jinja_value *jr_to_str(jinja_renderer *r, const jinja_value *v) {
    if (v->kind == JV_STR) return (jinja_value *)v;
    jv_sb b;
    sb_init(&b, r->a);
    jv_str_into(&b, v);
    jinja_value *res = sb_finish(&b);
    jv_retag_from(res, v);
    return res;
}

/* argument `pos` or keyword `name`; NULL when absent */
jinja_value *jr_arg(const cargs *c, size_t pos, const char *name) {
    if (pos < c->n) return c->args[pos];
    for (size_t i = 0; name && i < c->nkw; i++)
        if (!strcmp(c->kwn[i], name)) return c->kwv[i];
    return NULL;
}

void jr_check_args(jinja_renderer *r, const jnode *at, const cargs *c, const char *what,
                   size_t maxpos, const char *const *kws) {
    if (c->n > maxpos)
        jr_fail(r, at, "%s takes at most %zu positional arguments (%zu given)", what, maxpos, c->n);
    for (size_t i = 0; i < c->nkw; i++) {
        int ok = 0;
        for (size_t k = 0; kws && kws[k]; k++)
            if (!strcmp(kws[k], c->kwn[i])) ok = 1;
        if (!ok) jr_fail(r, at, "%s got an unexpected keyword argument '%s'", what, c->kwn[i]);
    }
}

jinja_value *jr_need_str(jinja_renderer *r, const jnode *at, jinja_value *v, const char *what) {
    if (!v || v->kind != JV_STR)
        jr_fail(r, at, "%s must be a string, not %s", what, v ? jv_type_name(v) : "nothing");
    return v;
}
