/* jinja.c — renders the tree of jinja_parse.c: scopes, statements, expressions with Python's
 * semantics (jinja.h); the filters, tests, methods and globals are jinja_lib.c's. Errors jump
 * to jinja_render's exit with "line L col C: message"; everything lives in one arena per render,
 * freed there, so an error leaks nothing. */
#include "tokenizer/jinja_eval.h"

#include "core/check.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the render state ---- */

void jr_fail(R *r, const jnode *at, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->errlen, "line %d col %d: %s", at ? at->line : 0, at ? at->col : 0, msg);
    longjmp(r->jmp, 1);
}

void jr_step(R *r, const jnode *at) {
    if (++r->steps > r->o.max_steps)
        jr_fail(r, at, "the template runs longer than %lld steps", r->o.max_steps);
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

jinja_value *jr_func(R *r, int id, jinja_value *self) {
    jinja_value *f = jv_alloc(r->a, sizeof *f);
    f->kind = JV_FUNC;
    f->turn = -1;
    f->u.func.id = id;
    f->u.func.self = self;
    f->name = jr_func_names[id];
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
        if (!strcmp(jr_func_names[i], name)) return jr_func(r, i, NULL);
    return jv_undef(r->a, name);
}

jinja_value *jr_int(R *r, long long i) {
    return jinja_new_int(r->a, i);
}
jinja_value *jr_bool(R *r, int b) {
    return jinja_new_bool(r->a, b);
}

UP_NORETURN void jr_fail_undef(R *r, const jnode *at, const jinja_value *v) {
    jr_fail(r, at, "'%s' is undefined", v->name ? v->name : "value");
}
/* ---- values ---- */

long long jr_as_int(R *r, const jnode *at, const jinja_value *v, const char *what) {
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

long long jr_length(R *r, const jnode *at, const jinja_value *v) {
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
    jr_fail(r, at, "object of type '%s' has no len()", jv_type_name(v));
    return 0;
}

/* the items a for loop or a filter walks: list items, dict keys, code points */
jinja_value *jr_iter_list(R *r, const jnode *at, const jinja_value *v) {
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

int jr_compare(R *r, const jnode *at, const jinja_value *x, const jinja_value *y, int op);

int jr_contains(R *r, const jnode *at, const jinja_value *item, const jinja_value *seq) {
    switch (seq->kind) {
    case JV_STR:
        if (item->kind != JV_STR)
            jr_fail(r, at, "'in <string>' requires string as left operand, not %s",
                    jv_type_name(item));
        return jv_memfind(seq->u.str.s, seq->u.str.len, item->u.str.s, item->u.str.len) != NULL;
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
    jr_fail(r, at, "argument of type '%s' is not iterable", jv_type_name(seq));
    return 0;
}

int jr_compare(R *r, const jnode *at, const jinja_value *x, const jinja_value *y, int op) {
    if (op == JOP_EQ) return jv_equal(x, y);
    if (op == JOP_NE) return !jv_equal(x, y);
    if (op == JOP_IN) return jr_contains(r, at, x, y);
    if (op == JOP_NOTIN) return !jr_contains(r, at, x, y);
    int c;
    if (jr_is_num(x) && jr_is_num(y)) {
        if (x->kind != JV_FLOAT && y->kind != JV_FLOAT) {
            long long a = jr_as_int(r, at, x, ""), b = jr_as_int(r, at, y, "");
            c = (a > b) - (a < b);
        } else {
            double a = jr_as_f(x), b = jr_as_f(y);
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
            return jr_compare(r, at, x->u.list.items[i], y->u.list.items[i], op);
        c = (x->u.list.n > y->u.list.n) - (x->u.list.n < y->u.list.n);
    } else {
        if (x->kind == JV_UNDEF) jr_fail_undef(r, at, x);
        if (y->kind == JV_UNDEF) jr_fail_undef(r, at, y);
        static const char *ops[] = {
            [JOP_LT] = "<", [JOP_LE] = "<=", [JOP_GT] = ">", [JOP_GE] = ">="};
        jr_fail(r, at, "'%s' not supported between instances of '%s' and '%s'", ops[op],
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

jinja_value *jr_get_attr(R *r, const jnode *at, jinja_value *obj, const char *name) {
    switch (obj->kind) {
    case JV_UNDEF:
        jr_fail_undef(r, at, obj);
        break;
    case JV_DICT: {
        if (!obj->is_ns) {
            for (int i = M_NSTR; i < M_NDICT; i++)
                if (!strcmp(jr_func_names[i], name)) return jr_func(r, i, obj);
        }
        jinja_value *v = jv_dict_get(obj, name, strlen(name));
        if (v) return v;
        break;
    }
    case JV_STR:
        for (int i = G_NGLOBALS; i < M_NSTR; i++)
            if (!strcmp(jr_func_names[i], name)) return jr_func(r, i, obj);
        break;
    default:
        break;
    }
    return jv_undef(r->a, name);
}

jinja_value *jr_get_item(R *r, const jnode *at, jinja_value *obj, jinja_value *key) {
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
static void slice_indices(R *r, const jnode *at, long long len, const jinja_value *s0,
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

static jinja_value *eval(R *r, const jnode *x);

static jinja_value *do_slice(R *r, const jnode *x, jinja_value *obj) {
    jinja_value *s0 = x->b ? eval(r, x->b) : NULL, *s1 = x->c ? eval(r, x->c) : NULL,
                *s2 = x->d ? eval(r, x->d) : NULL;
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

/* ---- arithmetic ---- */

static jinja_value *arith(R *r, const jnode *x, int op, jinja_value *a, jinja_value *b) {
    if (op == JOP_CONCAT) {
        jv_sb sb;
        sb_init(&sb, r->a);
        jv_str_into(&sb, a);
        jv_str_into(&sb, b);
        return sb_finish(&sb);
    }
    if (a->kind == JV_UNDEF) jr_fail_undef(r, x, a);
    if (b->kind == JV_UNDEF) jr_fail_undef(r, x, b);
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
            jr_fail(r, x, "can't multiply sequence by non-int of type '%s'", jv_type_name(num));
        long long k = jr_as_int(r, x, num, "count");
        if (seq->kind == JV_STR) {
            jv_sb sb;
            sb_init(&sb, r->a);
            for (long long i = 0; i < k; i++) {
                jr_step(r, x);
                sb_put_str(&sb, seq);
            }
            return sb_finish(&sb);
        }
        jinja_value *l = jinja_new_list(r->a);
        for (long long i = 0; i < k; i++) {
            jr_step(r, x);
            for (size_t j = 0; j < seq->u.list.n; j++)
                jinja_list_push(r->a, l, seq->u.list.items[j]);
        }
        return l;
    }
    static const char *ops[] = {
        [JOP_ADD] = "+",       [JOP_SUB] = "-", [JOP_MUL] = "*", [JOP_DIV] = "/",
        [JOP_FLOORDIV] = "//", [JOP_MOD] = "%", [JOP_POW] = "**"};
    if (!jr_is_num(a) || !jr_is_num(b)) {
        if (op == JOP_MOD && a->kind == JV_STR)
            jr_fail(r, x, "string formatting with '%%' is not supported");
        jr_fail(r, x, "unsupported operand type(s) for %s: '%s' and '%s'", ops[op], jv_type_name(a),
                jv_type_name(b));
    }
    if (a->kind != JV_FLOAT && b->kind != JV_FLOAT && op != JOP_DIV) {
        long long p = jr_as_int(r, x, a, ""), q = jr_as_int(r, x, b, ""), v = 0;
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
            if (q == 0) jr_fail(r, x, "integer division or modulo by zero");
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
        if (ovf) jr_fail(r, x, "integer overflow in '%s'", ops[op]);
        return jr_int(r, v);
    }
    double p = jr_as_f(a), q = jr_as_f(b), v = 0;
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
        if (q == 0) jr_fail(r, x, "division by zero");
        v = p / q;
        break;
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (q == 0) jr_fail(r, x, "float division or modulo by zero");
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

static jinja_value *exec_body_capture(R *r, const jnode *body);

static jinja_value *call_macro(R *r, const jnode *at, const jinja_value *m, const cargs *c) {
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
    int ctl = r->ctl;
    jinja_value *out = exec_body_capture(r, def->b);
    r->ctl = ctl;
    r->depth--;
    r->sc = saved;
    return out;
}
/* ---- expressions ---- */

/* evaluation and execution recurse along the tree; a left-deep chain (1 + 1 + ... + 1) is as
 * deep as it is long, so the depth is bounded, not the C stack */
static void enter(R *r, const jnode *x) {
    if (++r->rdepth > JINJA_MAX_RENDER_DEPTH)
        jr_fail(r, x, "the template nests deeper than %d when rendering", JINJA_MAX_RENDER_DEPTH);
}

static jinja_value *eval_node(R *r, const jnode *x);
static jinja_value *eval(R *r, const jnode *x) {
    enter(r, x);
    jinja_value *v = eval_node(r, x);
    r->rdepth--;
    return v;
}

static jinja_value *eval_node(R *r, const jnode *x) {
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
    case JN_SLICE:
        return do_slice(r, x, eval(r, x->a));
    case JN_CALL: {
        jinja_value *f = eval(r, x->a);
        cargs c;
        eval_args(r, x, &c);
        if (f->kind == JV_FUNC) return jr_call_func(r, x, f, &c);
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
        return arith(r, x, x->op, a, b);
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
        jr_fail(r, x, "cannot unpack a %s into %zu names", jv_type_name(item), x->nnames);
    if (item->u.list.n != x->nnames)
        jr_fail(r, x, "cannot unpack %zu values into %zu names", item->u.list.n, x->nnames);
    for (size_t i = 0; i < x->nnames; i++)
        scope_set(r, s, x->names[i], item->u.list.items[i]);
}

static void set_turn(R *r, int turn) {
    r->turn = turn;
    r->out->turn = turn;
}

static void exec_for(R *r, const jnode *x) {
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
        int ctl = r->ctl;
        r->ctl = 0;
        if (ctl == 1) break;
    }
    if (n == 0 && x->c) exec(r, x->c);
}

static void exec_node(R *r, const jnode *x);
static void exec(R *r, const jnode *x) {
    enter(r, x);
    exec_node(r, x);
    r->rdepth--;
}

static void exec_node(R *r, const jnode *x) {
    jr_step(r, x);
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
        r->ctl = 1;
        return;
    case JS_CONTINUE:
        r->ctl = 2;
        return;
    default:
        jr_fail(r, x, "internal: not a statement");
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
