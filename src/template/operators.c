/* operators.c — Python's comparisons, `in` and arithmetic on values (render.h). */
#include "template/render.h"

#include <limits.h>
#include <math.h>
#include <string.h>

int jr_contains(jinja_renderer *r, const jnode *at, const jinja_value *item,
                const jinja_value *seq) {
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

int jr_compare(jinja_renderer *r, const jnode *at, const jinja_value *x, const jinja_value *y,
               int op) {
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

/* ---- arithmetic ---- */

static const char *const arith_ops[] = {
    [JOP_ADD] = "+",       [JOP_SUB] = "-", [JOP_MUL] = "*", [JOP_DIV] = "/",
    [JOP_FLOORDIV] = "//", [JOP_MOD] = "%", [JOP_POW] = "**"};

/* seq * k for a str or list seq and an int k */
static jinja_value *repeat(jinja_renderer *r, const jnode *x, jinja_value *seq, jinja_value *num) {
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

/* str + str, list + list, and a sequence times an int; NULL for other operands */
static jinja_value *seq_arith(jinja_renderer *r, const jnode *x, int op, jinja_value *a,
                              jinja_value *b) {
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
        return repeat(r, x, seq, seq == a ? b : a);
    }
    return NULL;
}

/* p ** q for q >= 0; *ovf when it overflows */
static long long int_pow(long long p, long long q, int *ovf) {
    long long v = 1;
    for (long long i = 0; i < q && !*ovf; i++) {
        *ovf = __builtin_mul_overflow(v, p, &v);
        if (v == 0 || v == 1) break;
        if (v == -1) {
            v = (q - i - 1) % 2 ? -v : v;
            break;
        }
    }
    return v;
}

/* int op int (not /), with Python's floor division and modulo; overflow is refused */
static jinja_value *int_arith(jinja_renderer *r, const jnode *x, int op, long long p, long long q) {
    long long v = 0;
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
        v = int_pow(p, q, &ovf);
        break;
    }
    if (ovf) jr_fail(r, x, "integer overflow in '%s'", arith_ops[op]);
    return jr_int(r, v);
}

static jinja_value *float_arith(jinja_renderer *r, const jnode *x, int op, double p, double q) {
    double v = 0;
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

jinja_value *jr_arith(jinja_renderer *r, const jnode *x, int op, jinja_value *a, jinja_value *b) {
    if (op == JOP_CONCAT) {
        jv_sb sb;
        sb_init(&sb, r->a);
        jv_str_into(&sb, a);
        jv_str_into(&sb, b);
        return sb_finish(&sb);
    }
    if (a->kind == JV_UNDEF) jr_fail_undef(r, x, a);
    if (b->kind == JV_UNDEF) jr_fail_undef(r, x, b);
    jinja_value *s = seq_arith(r, x, op, a, b);
    if (s) return s;
    if (!jr_is_num(a) || !jr_is_num(b)) {
        if (op == JOP_MOD && a->kind == JV_STR)
            jr_fail(r, x, "string formatting with '%%' is not supported");
        jr_fail(r, x, "unsupported operand type(s) for %s: '%s' and '%s'", arith_ops[op],
                jv_type_name(a), jv_type_name(b));
    }
    if (a->kind != JV_FLOAT && b->kind != JV_FLOAT && op != JOP_DIV)
        return int_arith(r, x, op, jr_as_int(r, x, a, ""), jr_as_int(r, x, b, ""));
    return float_arith(r, x, op, jr_as_f(a), jr_as_f(b));
}
