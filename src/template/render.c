/* render.c — renders the parser's tree: scopes, statements and expressions, over the values,
 * operators, filters, tests, methods and globals of the files below it (render.h). Errors jump
 * to jinja_render's exit with "line L col C: message"; everything lives in one arena per render,
 * freed there, so an error leaks nothing. */
#include "template/render.h"

#include "core/check.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void scope_set(jinja_renderer *r, scope *s, const char *name, jinja_value *v) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) {
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap;
        s->names = jv_grow(r->a, s->names, s->n, &cap, 8, sizeof *s->names);
        s->vals = jv_grow(r->a, s->vals, s->n, &s->cap, 8, sizeof *s->vals);
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
}

static scope *scope_push(jinja_renderer *r, scope *parent) {
    scope *s = jv_alloc(r->a, sizeof *s);
    s->parent = parent;
    return s;
}

static jinja_value *lookup(jinja_renderer *r, const char *name) {
    for (scope *s = r->sc; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (!strcmp(s->names[i], name)) return s->vals[i];
    if (r->vars) {
        jinja_value *v = jv_dict_get(r->vars, name, strlen(name));
        if (v) return v;
    }
    const jr_builtin *g = jr_global_find(name);
    return g ? jr_func(r, g, NULL) : jv_undef(r->a, name);
}

static jinja_value *eval(jinja_renderer *r, const jnode *x);

/* ---- calls ---- */

static void eval_args(jinja_renderer *r, const jnode *x, cargs *c) {
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

static jinja_value *exec_body_capture(jinja_renderer *r, const jnode *body);

static jinja_value *call_macro(jinja_renderer *r, const jnode *at, const jinja_value *m,
                               const cargs *c) {
    const jnode *def = m->u.macro.def;
    if (r->depth > 50) jr_fail(r, at, "macro calls nested deeper than 50");
    if (c->n > def->nkw)
        jr_fail(r, at, "macro '%s' takes %zu arguments (%zu given)", def->name, def->nkw, c->n);
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
        if (!ok) jr_fail(r, at, "macro '%s' has no parameter '%s'", def->name, c->kwn[k]);
    }
    r->sc = s;
    r->depth++;
    jr_ctl ctl = r->ctl;
    jinja_value *out = exec_body_capture(r, def->b);
    r->ctl = ctl;
    r->depth--;
    r->sc = saved;
    return out;
}
/* ---- expressions ---- */

/* evaluation and execution recurse along the tree; a left-deep chain (1 + 1 + ... + 1) is as
 * deep as it is long, so the depth is bounded, not the C stack */
static void enter(jinja_renderer *r, const jnode *x) {
    if (++r->rdepth > JINJA_MAX_RENDER_DEPTH)
        jr_fail(r, x, "the template nests deeper than %d when rendering", JINJA_MAX_RENDER_DEPTH);
}

static jinja_value *eval_node(jinja_renderer *r, const jnode *x);
static jinja_value *eval(jinja_renderer *r, const jnode *x) {
    enter(r, x);
    jinja_value *v = eval_node(r, x);
    r->rdepth--;
    return v;
}

static jinja_value *eval_node(jinja_renderer *r, const jnode *x) {
    jr_step(r, x);
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
                jr_fail(r, x->kids[i], "unhashable dict key of type '%s'", jv_type_name(k));
            jv_dict_put(r->a, d, k, eval(r, x->kids[i + 1]));
        }
        return d;
    }
    case JN_ATTR:
        return jr_get_attr(r, x, eval(r, x->a), x->name);
    case JN_ITEM: {
        jinja_value *o = eval(r, x->a);
        return jr_get_item(r, x, o, eval(r, x->b));
    }
    case JN_SLICE: {
        jinja_value *o = eval(r, x->a);
        jinja_value *s0 = x->b ? eval(r, x->b) : NULL, *s1 = x->c ? eval(r, x->c) : NULL,
                    *s2 = x->d ? eval(r, x->d) : NULL;
        return jr_slice(r, x, o, s0, s1, s2);
    }
    case JN_CALL: {
        jinja_value *f = eval(r, x->a);
        cargs c;
        eval_args(r, x, &c);
        if (f->kind == JV_FUNC)
            return f->u.func.fn->call(r, x, f->u.func.fn->name, f->u.func.self, &c);
        if (f->kind == JV_MACRO) return call_macro(r, x, f, &c);
        if (f->kind == JV_UNDEF) jr_fail_undef(r, x, f);
        jr_fail(r, x, "'%s' object is not callable", jv_type_name(f));
        return NULL;
    }
    case JN_FILTER: {
        jinja_value *v = x->a ? eval(r, x->a) : exec_body_capture(r, x->b);
        cargs c;
        eval_args(r, x, &c);
        return jr_apply_filter(r, x, x->fn, v, &c);
    }
    case JN_TEST: {
        jinja_value *v = eval(r, x->a);
        cargs c;
        eval_args(r, x, &c);
        if (c.nkw) jr_fail(r, x, "tests take no keyword arguments");
        int t = jr_apply_test(r, x, x->fn, v, c.args, c.n);
        return jr_bool(r, x->op ? !t : t);
    }
    case JN_NOT:
        return jr_bool(r, !jv_truthy(eval(r, x->a)));
    case JN_NEG:
    case JN_POS: {
        jinja_value *v = eval(r, x->a);
        if (v->kind == JV_FLOAT) return jinja_new_float(r->a, x->kind == JN_NEG ? -v->u.f : v->u.f);
        if (v->kind == JV_INT || v->kind == JV_BOOL) {
            long long i = jr_as_int(r, x, v, "");
            if (x->kind == JN_NEG && i == LLONG_MIN) jr_fail(r, x, "integer overflow in '-'");
            return jr_int(r, x->kind == JN_NEG ? -i : i);
        }
        if (v->kind == JV_UNDEF) jr_fail_undef(r, x, v);
        jr_fail(r, x, "bad operand type for unary %c: '%s'", x->kind == JN_NEG ? '-' : '+',
                jv_type_name(v));
        return NULL;
    }
    case JN_BIN: {
        jinja_value *a = eval(r, x->a);
        jinja_value *b = eval(r, x->b);
        return jr_arith(r, x, x->op, a, b);
    }
    case JN_CMP: {
        jinja_value *a = eval(r, x->a);
        jinja_value *b = eval(r, x->b);
        return jr_bool(r, jr_compare(r, x, a, b, x->op));
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
    jr_fail(r, x, "internal: not an expression");
    return NULL;
}

/* ---- statements ---- */

static void exec(jinja_renderer *r, const jnode *x);

static jinja_value *exec_body_capture(jinja_renderer *r, const jnode *body) {
    jv_sb b, *saved = r->out;
    sb_init(&b, r->a);
    r->out = &b;
    exec(r, body);
    r->out = saved;
    return sb_finish(&b);
}

static void bind_targets(jinja_renderer *r, const jnode *x, scope *s, jinja_value *item) {
    if (x->nnames == 1) {
        scope_set(r, s, x->names[0], item);
        return;
    }
    if (item->kind != JV_LIST)
        jr_fail(r, x, "cannot unpack a %s into %zu names", jv_type_name(item), x->nnames);
    if (item->u.list.n != x->nnames)
        jr_fail(r, x, "cannot unpack %zu values into %zu names", item->u.list.n, x->nnames);
    for (size_t i = 0; i < x->nnames; i++)
        scope_set(r, s, x->names[i], item->u.list.items[i]);
}

static void set_turn(jinja_renderer *r, int turn) {
    r->turn = turn;
    r->out->turn = turn;
}

static void exec_for(jinja_renderer *r, const jnode *x) {
    jinja_value *seq = eval(r, x->a);
    jinja_value *items = jr_iter_list(r, x->a, seq);
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
        jr_step(r, x);
        jinja_value *item = items->u.list.items[i];
        scope *s = scope_push(r, outer);
        bind_targets(r, x, s, item);
        jinja_value *loop = jinja_new_dict(r->a);
        jinja_dict_set(r->a, loop, "index", jr_int(r, (long long)i + 1));
        jinja_dict_set(r->a, loop, "index0", jr_int(r, (long long)i));
        jinja_dict_set(r->a, loop, "revindex", jr_int(r, (long long)(n - i)));
        jinja_dict_set(r->a, loop, "revindex0", jr_int(r, (long long)(n - i - 1)));
        jinja_dict_set(r->a, loop, "first", jr_bool(r, i == 0));
        jinja_dict_set(r->a, loop, "last", jr_bool(r, i + 1 == n));
        jinja_dict_set(r->a, loop, "length", jr_int(r, (long long)n));
        jinja_dict_set(r->a, loop, "depth", jr_int(r, 1));
        jinja_dict_set(r->a, loop, "depth0", jr_int(r, 0));
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
        jr_ctl ctl = r->ctl;
        r->ctl = JR_CTL_NONE;
        if (ctl == JR_CTL_BREAK) break;
    }
    if (n == 0 && x->c) exec(r, x->c);
}

static void exec_node(jinja_renderer *r, const jnode *x);
static void exec(jinja_renderer *r, const jnode *x) {
    enter(r, x);
    exec_node(r, x);
    r->rdepth--;
}

static void exec_node(jinja_renderer *r, const jnode *x) {
    jr_step(r, x);
    switch (x->kind) {
    case JS_BODY:
        for (size_t i = 0; i < x->nkids && r->ctl == JR_CTL_NONE; i++)
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
        if (++r->depth > JINJA_MAX_DEPTH) jr_fail(r, x, "loops nested too deep");
        exec_for(r, x);
        r->depth--;
        return;
    case JS_SET: {
        jinja_value *v = eval(r, x->a);
        if (x->name) { /* ns.attr = v */
            jinja_value *obj = lookup(r, x->names[0]);
            if (obj->kind != JV_DICT || !obj->is_ns)
                jr_fail(r, x, "cannot assign attribute on non-namespace object '%s'", x->names[0]);
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
    case JS_GENERATION: {
        int gen = r->out->gen;
        r->out->gen = 1;
        exec(r, x->b);
        r->out->gen = gen;
        return;
    }
    case JS_BREAK:
        r->ctl = JR_CTL_BREAK;
        return;
    case JS_CONTINUE:
        r->ctl = JR_CTL_CONTINUE;
        return;
    default:
        jr_fail(r, x, "internal: not a statement");
    }
}

int jinja_render(const jinja_template *t, const jinja_value *vars, const jinja_opts *opts,
                 jinja_output *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    jinja_renderer *r = calloc(1, sizeof *r);
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
