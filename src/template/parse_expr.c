/* parse_expr.c — expressions by recursive descent with jinja2's precedence (or, and, not,
 * comparisons, + -, ~, * / // %, **, unary, filters and tests, postfix, primaries), building the
 * tree of jinja_impl.h (parse.h). */
#include "template/parse.h"

#include <string.h>

static jnode *parse_unary(jinja_parser *p, int with_filter);
static jnode *parse_primary(jinja_parser *p);

void jp_call_args(jinja_parser *p, jnode *x) {
    jp_nodes args = {0}, kwv = {0};
    jp_names kwn = {0};
    jp_expect_op(p, "(");
    while (!jp_is_op(jp_cur(p), ")")) {
        if (args.n + kwv.n) jp_expect_op(p, ",");
        if (jp_is_op(jp_cur(p), ")")) break;
        if (jp_is_op(jp_cur(p), "*") || jp_is_op(jp_cur(p), "**"))
            jp_fail_at(p, jp_cur(p)->line, jp_cur(p)->col,
                       "*args and **kwargs in calls are not supported");
        if (jp_cur(p)->t == TOK_NAME && jp_is_op(&p->toks[p->k + 1], "=")) {
            jp_names_push(p, &kwn, jp_next(p)->s);
            jp_next(p);
            jp_nodes_push(p, &kwv, jp_expr(p, 1));
        } else {
            if (kwv.n)
                jp_fail_at(p, jp_cur(p)->line, jp_cur(p)->col,
                           "positional argument after keywords");
            jp_nodes_push(p, &args, jp_expr(p, 1));
        }
    }
    jp_next(p);
    x->kids = args.v;
    x->nkids = args.n;
    x->kwnames = kwn.v;
    x->kwvals = kwv.v;
    x->nkw = kwn.n;
}

/* x(args...), t the "(" */
static jnode *parse_call(jinja_parser *p, jnode *x, tok *t) {
    jnode *y = jp_node(p, JN_CALL, t);
    y->a = x;
    y->line = x->line; /* a call is where its callee starts */
    y->col = x->col;
    jp_call_args(p, y);
    return y;
}

static jnode *parse_postfix(jinja_parser *p, jnode *x) {
    for (;;) {
        tok *t = jp_cur(p);
        if (jp_is_op(t, ".")) {
            jp_next(p);
            jnode *y = jp_node(p, JN_ATTR, t);
            y->a = x;
            if (jp_cur(p)->t == TOK_NAME) {
                y->name = jp_next(p)->s;
            } else if (jp_cur(p)->t == TOK_INT) {
                y->kind = JN_ITEM;
                jnode *k = jp_node(p, JN_LIT, jp_cur(p));
                k->lit = jinja_new_int(p->a, jp_next(p)->i);
                y->b = k;
            } else {
                jp_fail_tok(p, jp_cur(p), "an attribute name");
            }
            x = y;
        } else if (jp_is_op(t, "[")) {
            jp_next(p);
            jnode *parts[3] = {NULL, NULL, NULL};
            int slice = 0;
            for (int k = 0; k < 3; k++) {
                if (!jp_is_op(jp_cur(p), ":") && !jp_is_op(jp_cur(p), "]"))
                    parts[k] = jp_expr(p, 1);
                if (k < 2 && jp_is_op(jp_cur(p), ":")) {
                    slice = 1;
                    jp_next(p);
                } else {
                    break;
                }
            }
            jp_expect_op(p, "]");
            jnode *y = jp_node(p, slice ? JN_SLICE : JN_ITEM, t);
            y->a = x;
            y->b = parts[0];
            y->c = parts[1];
            y->d = parts[2];
            if (!slice && !parts[0]) jp_fail_at(p, t->line, t->col, "empty subscript");
            x = y;
        } else if (jp_is_op(t, "(")) {
            x = parse_call(p, x, t);
        } else {
            return x;
        }
    }
}

static jnode *parse_filter_expr(jinja_parser *p, jnode *x) {
    for (;;) {
        tok *t = jp_cur(p);
        if (jp_is_op(t, "|")) {
            jp_next(p);
            tok *nt = jp_cur(p);
            const char *name = jp_expect_name(p);
            while (jp_is_op(jp_cur(p), ".")) { /* dotted filter names: none known */
                jp_next(p);
                jp_expect_name(p);
                jp_fail_at(p, nt->line, nt->col, "dotted filter names are not supported");
            }
            jnode *y = jp_node(p, JN_FILTER, nt);
            y->a = x;
            y->name = name;
            y->fn = jinja_filter_id(name);
            if (y->fn < 0) jp_fail_at(p, nt->line, nt->col, "filter '%s' is not supported", name);
            if (jp_is_op(jp_cur(p), "(")) jp_call_args(p, y);
            x = y;
        } else if (jp_is_name(t, "is")) {
            jp_next(p);
            jnode *y = jp_node(p, JN_TEST, t);
            if (jp_is_name(jp_cur(p), "not")) {
                jp_next(p);
                y->op = 1;
            }
            tok *nt = jp_cur(p);
            const char *name;
            if (nt->t == TOK_NAME) {
                name = jp_next(p)->s;
            } else if (jp_is_op(nt, "==") || jp_is_op(nt, "!=") || jp_is_op(nt, "<") ||
                       jp_is_op(nt, ">") || jp_is_op(nt, "<=") || jp_is_op(nt, ">=")) {
                name = jp_next(p)->s;
            } else {
                jp_fail_tok(p, nt, "a test name");
                name = NULL;
            }
            while (jp_is_op(jp_cur(p), ".")) {
                jp_fail_at(p, nt->line, nt->col, "dotted test names are not supported");
            }
            y->a = x;
            y->name = name;
            y->fn = jinja_test_id(name);
            if (y->fn < 0) jp_fail_at(p, nt->line, nt->col, "test '%s' is not supported", name);
            tok *q = jp_cur(p);
            if (jp_is_op(q, "(")) {
                jp_call_args(p, y);
            } else if ((q->t == TOK_NAME || q->t == TOK_STR || q->t == TOK_INT ||
                        q->t == TOK_FLOAT || jp_is_op(q, "[") || jp_is_op(q, "{")) &&
                       !jp_is_name(q, "else") && !jp_is_name(q, "or") && !jp_is_name(q, "and")) {
                if (jp_is_name(q, "is"))
                    jp_fail_at(p, q->line, q->col, "tests cannot be chained with 'is'");
                jnode *arg = parse_postfix(p, parse_primary(p));
                y->kids = jv_alloc(p->a, sizeof *y->kids);
                y->kids[0] = arg;
                y->nkids = 1;
            }
            x = y;
        } else if (jp_is_op(t, "(")) {
            x = parse_call(p, x, t);
        } else {
            return x;
        }
    }
}

static jnode *parse_primary(jinja_parser *p) {
    tok *t = jp_cur(p);
    jnode *x;
    jp_enter(p);
    if (t->t == TOK_NAME) {
        jp_next(p);
        x = jp_node(p, JN_LIT, t);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True"))
            x->lit = jinja_new_bool(p->a, 1);
        else if (!strcmp(t->s, "false") || !strcmp(t->s, "False"))
            x->lit = jinja_new_bool(p->a, 0);
        else if (!strcmp(t->s, "none") || !strcmp(t->s, "None"))
            x->lit = jinja_new_none(p->a);
        else {
            x->kind = JN_NAME;
            x->name = t->s;
        }
    } else if (t->t == TOK_STR) {
        /* adjacent strings join */
        jv_sb b;
        sb_init(&b, p->a);
        while (jp_cur(p)->t == TOK_STR) {
            tok *s = jp_next(p);
            sb_put(&b, s->s, s->len, JINJA_TAG_TEMPLATE);
        }
        x = jp_node(p, JN_LIT, t);
        x->lit = sb_finish(&b);
    } else if (t->t == TOK_INT) {
        jp_next(p);
        x = jp_node(p, JN_LIT, t);
        x->lit = jinja_new_int(p->a, t->i);
    } else if (t->t == TOK_FLOAT) {
        jp_next(p);
        x = jp_node(p, JN_LIT, t);
        x->lit = jinja_new_float(p->a, t->f);
    } else if (jp_is_op(t, "(")) {
        jp_next(p);
        if (jp_is_op(jp_cur(p), ")")) {
            jp_next(p);
            x = jp_node(p, JN_TUPLE, t);
        } else {
            jnode *e = jp_expr(p, 1);
            if (jp_is_op(jp_cur(p), ",")) {
                jp_nodes v = {0};
                jp_nodes_push(p, &v, e);
                while (jp_is_op(jp_cur(p), ",")) {
                    jp_next(p);
                    if (jp_is_op(jp_cur(p), ")")) break;
                    jp_nodes_push(p, &v, jp_expr(p, 1));
                }
                x = jp_node(p, JN_TUPLE, t);
                x->kids = v.v;
                x->nkids = v.n;
            } else {
                x = e;
            }
            jp_expect_op(p, ")");
        }
    } else if (jp_is_op(t, "[")) {
        jp_next(p);
        jp_nodes v = {0};
        while (!jp_is_op(jp_cur(p), "]")) {
            if (v.n) jp_expect_op(p, ",");
            if (jp_is_op(jp_cur(p), "]")) break;
            jp_nodes_push(p, &v, jp_expr(p, 1));
        }
        jp_next(p);
        x = jp_node(p, JN_LIST, t);
        x->kids = v.v;
        x->nkids = v.n;
    } else if (jp_is_op(t, "{")) {
        jp_next(p);
        jp_nodes v = {0};
        while (!jp_is_op(jp_cur(p), "}")) {
            if (v.n) jp_expect_op(p, ",");
            if (jp_is_op(jp_cur(p), "}")) break;
            jp_nodes_push(p, &v, jp_expr(p, 1));
            jp_expect_op(p, ":");
            jp_nodes_push(p, &v, jp_expr(p, 1));
        }
        jp_next(p);
        x = jp_node(p, JN_DICT, t);
        x->kids = v.v;
        x->nkids = v.n;
    } else {
        jp_fail_tok(p, t, "an expression");
        x = NULL;
    }
    jp_leave(p);
    return x;
}

static jnode *parse_unary(jinja_parser *p, int with_filter) {
    tok *t = jp_cur(p);
    jnode *x;
    jp_enter(p);
    if (jp_is_op(t, "-") || jp_is_op(t, "+")) {
        jp_next(p);
        x = jp_node(p, jp_is_op(t, "-") ? JN_NEG : JN_POS, t);
        x->a = parse_unary(p, 0);
    } else {
        x = parse_primary(p);
    }
    x = parse_postfix(p, x);
    if (with_filter) x = parse_filter_expr(p, x);
    jp_leave(p);
    return x;
}

static jnode *bin(jinja_parser *p, int op, jnode *l, jnode *r, const tok *t) {
    jnode *x = jp_node(p, JN_BIN, t);
    x->op = op;
    x->a = l;
    x->b = r;
    return x;
}

static jnode *parse_pow(jinja_parser *p) {
    jnode *x = parse_unary(p, 1);
    while (jp_is_op(jp_cur(p), "**")) {
        tok *t = jp_next(p);
        x = bin(p, JOP_POW, x, parse_unary(p, 1), t);
    }
    return x;
}

static jnode *parse_math2(jinja_parser *p) {
    jnode *x = parse_pow(p);
    for (;;) {
        tok *t = jp_cur(p);
        int op = jp_is_op(t, "*")    ? JOP_MUL
                 : jp_is_op(t, "/")  ? JOP_DIV
                 : jp_is_op(t, "//") ? JOP_FLOORDIV
                 : jp_is_op(t, "%")  ? JOP_MOD
                                     : 0;
        if (!op) return x;
        jp_next(p);
        x = bin(p, op, x, parse_pow(p), t);
    }
}

static jnode *parse_concat(jinja_parser *p) {
    jnode *x = parse_math2(p);
    while (jp_is_op(jp_cur(p), "~")) {
        tok *t = jp_next(p);
        x = bin(p, JOP_CONCAT, x, parse_math2(p), t);
    }
    return x;
}

static jnode *parse_math1(jinja_parser *p) {
    jnode *x = parse_concat(p);
    for (;;) {
        tok *t = jp_cur(p);
        int op = jp_is_op(t, "+") ? JOP_ADD : jp_is_op(t, "-") ? JOP_SUB : 0;
        if (!op) return x;
        jp_next(p);
        x = bin(p, op, x, parse_concat(p), t);
    }
}

static jnode *parse_compare(jinja_parser *p) {
    jnode *x = parse_math1(p);
    jnode *chain = NULL;
    for (;;) {
        tok *t = jp_cur(p);
        int op = jp_is_op(t, "==")     ? JOP_EQ
                 : jp_is_op(t, "!=")   ? JOP_NE
                 : jp_is_op(t, "<")    ? JOP_LT
                 : jp_is_op(t, "<=")   ? JOP_LE
                 : jp_is_op(t, ">")    ? JOP_GT
                 : jp_is_op(t, ">=")   ? JOP_GE
                 : jp_is_name(t, "in") ? JOP_IN
                                       : 0;
        if (!op && jp_is_name(t, "not") && jp_is_name(&p->toks[p->k + 1], "in")) {
            jp_next(p);
            op = JOP_NOTIN;
        }
        if (!op) break;
        jp_next(p);
        jnode *r = parse_math1(p);
        jnode *c = jp_node(p, JN_CMP, t);
        c->op = op;
        c->a = chain ? chain->b : x;
        c->b = r;
        if (chain) {
            /* a < b < c is (a < b) and (b < c) */
            jnode *both = jp_node(p, JN_AND, t);
            both->a = x;
            both->b = c;
            x = both;
        } else {
            x = c;
        }
        chain = c;
    }
    return x;
}

static jnode *parse_not(jinja_parser *p) {
    if (jp_is_name(jp_cur(p), "not")) {
        tok *t = jp_next(p);
        jp_enter(p);
        jnode *x = jp_node(p, JN_NOT, t);
        x->a = parse_not(p);
        jp_leave(p);
        return x;
    }
    return parse_compare(p);
}

static jnode *parse_and(jinja_parser *p) {
    jnode *x = parse_not(p);
    while (jp_is_name(jp_cur(p), "and")) {
        tok *t = jp_next(p);
        jnode *y = jp_node(p, JN_AND, t);
        y->a = x;
        y->b = parse_not(p);
        x = y;
    }
    return x;
}

static jnode *parse_or(jinja_parser *p) {
    jnode *x = parse_and(p);
    while (jp_is_name(jp_cur(p), "or")) {
        tok *t = jp_next(p);
        jnode *y = jp_node(p, JN_OR, t);
        y->a = x;
        y->b = parse_and(p);
        x = y;
    }
    return x;
}

jnode *jp_expr(jinja_parser *p, int with_cond) {
    jp_enter(p);
    jnode *x = parse_or(p);
    while (with_cond && jp_is_name(jp_cur(p), "if")) {
        tok *t = jp_next(p);
        jnode *y = jp_node(p, JN_COND, t);
        y->b = x;
        y->a = parse_or(p);
        if (jp_is_name(jp_cur(p), "else")) {
            jp_next(p);
            y->c = jp_expr(p, 1);
        }
        x = y;
    }
    jp_leave(p);
    return x;
}
