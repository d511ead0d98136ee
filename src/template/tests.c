/* tests.c — the `is` tests (x is defined, x is divisibleby(3), ...), one function each in a
 * table by name, with jinja2's semantics (render.h). */
#include "template/render.h"

#include <string.h>

/* v is the tested value, a0 the test's first argument (NULL: none); name for messages */
typedef int jr_test_fn(jinja_renderer *r, const jnode *at, const char *name, jinja_value *v,
                       jinja_value *a0);

#define TEST_ARGS                                                                                  \
    jinja_renderer *r, const jnode *at, const char *name, jinja_value *v, jinja_value *a0

static int t_defined(TEST_ARGS) {
    return v->kind != JV_UNDEF;
}
static int t_undefined(TEST_ARGS) {
    return v->kind == JV_UNDEF;
}
static int t_none(TEST_ARGS) {
    return v->kind == JV_NONE;
}
static int t_string(TEST_ARGS) {
    return v->kind == JV_STR;
}
static int t_mapping(TEST_ARGS) {
    return v->kind == JV_DICT && !v->is_ns;
}
static int t_iterable(TEST_ARGS) {
    return v->kind == JV_STR || v->kind == JV_LIST || v->kind == JV_UNDEF ||
           (v->kind == JV_DICT && !v->is_ns);
}
static int t_sequence(TEST_ARGS) {
    return v->kind == JV_STR || v->kind == JV_LIST || (v->kind == JV_DICT && !v->is_ns);
}
static int t_number(TEST_ARGS) {
    return jr_is_num(v);
}
static int t_integer(TEST_ARGS) {
    return v->kind == JV_INT;
}
static int t_float(TEST_ARGS) {
    return v->kind == JV_FLOAT;
}
static int t_boolean(TEST_ARGS) {
    return v->kind == JV_BOOL;
}
static int t_true(TEST_ARGS) {
    return v->kind == JV_BOOL && v->u.b;
}
static int t_false(TEST_ARGS) {
    return v->kind == JV_BOOL && !v->u.b;
}
static int t_callable(TEST_ARGS) {
    return v->kind == JV_FUNC || v->kind == JV_MACRO;
}

static int parity(jinja_renderer *r, const jnode *at, const jinja_value *v) {
    if (v->kind == JV_UNDEF) jr_fail_undef(r, at, v);
    return jr_as_int(r, at, v, "the tested value") % 2 != 0;
}
static int t_odd(TEST_ARGS) {
    return parity(r, at, v);
}
static int t_even(TEST_ARGS) {
    return !parity(r, at, v);
}

static int t_divisibleby(TEST_ARGS) {
    if (!a0) jr_fail(r, at, "divisibleby needs an argument");
    long long i = jr_as_int(r, at, v, "the tested value"),
              d = jr_as_int(r, at, a0, "divisibleby's argument");
    if (d == 0) jr_fail(r, at, "integer division or modulo by zero");
    return d == -1 || i % d == 0;
}

/* lower / upper: Python's str.islower / str.isupper of str(v) */
static int t_lower(TEST_ARGS) {
    return jr_str_is_case(jr_to_str(r, v), 1);
}
static int t_upper(TEST_ARGS) {
    return jr_str_is_case(jr_to_str(r, v), 0);
}

static int t_sameas(TEST_ARGS) {
    if (!a0) jr_fail(r, at, "sameas needs an argument");
    if (v->kind != a0->kind) return 0;
    if (v->kind == JV_NONE) return 1;
    if (v->kind == JV_BOOL) return v->u.b == a0->u.b;
    return v == a0;
}

/* the comparisons and `in`: v op a0 */
static int compare_test(jinja_renderer *r, const jnode *at, const char *name, jinja_value *v,
                        jinja_value *a0, int op) {
    if (!a0) jr_fail(r, at, "test '%s' needs an argument", name);
    return op == JOP_IN ? jr_contains(r, at, v, a0) : jr_compare(r, at, v, a0, op);
}
static int t_eq(TEST_ARGS) {
    return compare_test(r, at, name, v, a0, JOP_EQ);
}
static int t_ne(TEST_ARGS) {
    return compare_test(r, at, name, v, a0, JOP_NE);
}
static int t_lt(TEST_ARGS) {
    return compare_test(r, at, name, v, a0, JOP_LT);
}
static int t_le(TEST_ARGS) {
    return compare_test(r, at, name, v, a0, JOP_LE);
}
static int t_gt(TEST_ARGS) {
    return compare_test(r, at, name, v, a0, JOP_GT);
}
static int t_ge(TEST_ARGS) {
    return compare_test(r, at, name, v, a0, JOP_GE);
}
static int t_in(TEST_ARGS) {
    return compare_test(r, at, name, v, a0, JOP_IN);
}

static const struct {
    const char *name;
    jr_test_fn *fn;
} tests[] = {
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"none", t_none},
    {"string", t_string},
    {"mapping", t_mapping},
    {"iterable", t_iterable},
    {"sequence", t_sequence},
    {"number", t_number},
    {"integer", t_integer},
    {"float", t_float},
    {"boolean", t_boolean},
    {"true", t_true},
    {"false", t_false},
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"equalto", t_eq},
    {"eq", t_eq},
    {"==", t_eq},
    {"ne", t_ne},
    {"!=", t_ne},
    {"lt", t_lt},
    {"<", t_lt},
    {"le", t_le},
    {"<=", t_le},
    {"gt", t_gt},
    {">", t_gt},
    {"ge", t_ge},
    {">=", t_ge},
    {"in", t_in},
    {"sameas", t_sameas},
    {"callable", t_callable},
    {"lower", t_lower},
    {"upper", t_upper},
    {"lessthan", t_lt},
    {"greaterthan", t_gt},
};

int jinja_test_id(const char *name) {
    for (int i = 0; i < (int)(sizeof tests / sizeof *tests); i++)
        if (!strcmp(tests[i].name, name)) return i;
    return -1;
}

int jr_apply_test(jinja_renderer *r, const jnode *at, int id, jinja_value *v, jinja_value **args,
                  size_t n) {
    return tests[id].fn(r, at, tests[id].name, v, n > 0 ? args[0] : NULL);
}
