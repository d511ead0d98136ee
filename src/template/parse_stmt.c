/* parse_stmt.c — the statements: one function per tag in a table by name, the bodies between
 * tags, and jinja_parse (parse.h). */
#include "template/parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static jnode *parse_body(jinja_parser *p, const char *const *ends, const char **found);

static void expect_bend(jinja_parser *p) {
    if (jp_cur(p)->t != TOK_BEND) jp_fail_tok(p, jp_cur(p), "'%}'");
    jp_next(p);
}

/* names separated by commas (for / set targets), optionally in parentheses */
static void parse_targets(jinja_parser *p, jnode *x) {
    jp_names v = {0};
    int paren = jp_is_op(jp_cur(p), "(");
    if (paren) jp_next(p);
    do {
        if (v.n) jp_next(p);
        if (paren && jp_is_op(jp_cur(p), ")")) break;
        jp_names_push(p, &v, jp_expect_name(p));
    } while (jp_is_op(jp_cur(p), ","));
    if (paren) jp_expect_op(p, ")");
    x->names = v.v;
    x->nnames = v.n;
}

static jnode *parse_if_chain(jinja_parser *p, tok *t);
/* an elif chain nests like blocks do: each link counts against JINJA_MAX_DEPTH */
static jnode *parse_if(jinja_parser *p, tok *t) {
    jp_enter(p);
    jnode *x = parse_if_chain(p, t);
    jp_leave(p);
    return x;
}

static jnode *parse_if_chain(jinja_parser *p, tok *t) {
    jnode *x = jp_node(p, JS_IF, t);
    x->a = jp_expr(p, 1);
    expect_bend(p);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *found;
    x->b = parse_body(p, ends, &found);
    if (!strcmp(found, "elif")) {
        tok *e = &p->toks[p->k - 1];
        x->c = parse_if(p, e);
        return x;
    }
    if (!strcmp(found, "else")) {
        expect_bend(p);
        static const char *const ends2[] = {"endif", NULL};
        x->c = parse_body(p, ends2, &found);
    }
    expect_bend(p);
    return x;
}

static jnode *parse_for(jinja_parser *p, tok *t) {
    jnode *x = jp_node(p, JS_FOR, t);
    parse_targets(p, x);
    if (!jp_is_name(jp_cur(p), "in")) jp_fail_tok(p, jp_cur(p), "'in'");
    jp_next(p);
    x->a = jp_expr(p, 0);
    if (jp_is_name(jp_cur(p), "if")) {
        jp_next(p);
        x->d = jp_expr(p, 1);
    }
    if (jp_is_name(jp_cur(p), "recursive"))
        jp_fail_at(p, jp_cur(p)->line, jp_cur(p)->col, "recursive for loops are not supported");
    expect_bend(p);
    static const char *const ends[] = {"else", "endfor", NULL};
    const char *found;
    x->b = parse_body(p, ends, &found);
    if (!strcmp(found, "else")) {
        expect_bend(p);
        static const char *const ends2[] = {"endfor", NULL};
        x->c = parse_body(p, ends2, &found);
    }
    expect_bend(p);
    return x;
}

/* set a = x; set a, b = x, y; set ns.attr = x; or a block: set a %}...{% endset */
static jnode *parse_set(jinja_parser *p, tok *t) {
    jnode *x = jp_node(p, JS_SET, t);
    if (jp_cur(p)->t == TOK_NAME && jp_is_op(&p->toks[p->k + 1], ".")) {
        const char *obj = jp_next(p)->s;
        jp_next(p);
        x->names = jv_alloc(p->a, sizeof *x->names);
        x->names[0] = obj;
        x->nnames = 1;
        x->name = jp_expect_name(p);
    } else {
        parse_targets(p, x);
    }
    if (jp_is_op(jp_cur(p), "=")) {
        jp_next(p);
        jnode *e = jp_expr(p, 1);
        if (jp_is_op(jp_cur(p), ",")) { /* set a, b = x, y */
            jp_nodes v = {0};
            jp_nodes_push(p, &v, e);
            while (jp_is_op(jp_cur(p), ",")) {
                jp_next(p);
                jp_nodes_push(p, &v, jp_expr(p, 1));
            }
            e = jp_node(p, JN_TUPLE, t);
            e->kids = v.v;
            e->nkids = v.n;
        }
        x->a = e;
        expect_bend(p);
        return x;
    }
    if (x->name || x->nnames != 1) jp_fail_tok(p, jp_cur(p), "'='");
    if (jp_is_op(jp_cur(p), "|"))
        jp_fail_at(p, jp_cur(p)->line, jp_cur(p)->col, "filtered set blocks are not supported");
    expect_bend(p);
    x->kind = JS_SETBLOCK;
    static const char *const ends[] = {"endset", NULL};
    const char *found;
    x->b = parse_body(p, ends, &found);
    expect_bend(p);
    return x;
}

static jnode *parse_macro(jinja_parser *p, tok *t) {
    jnode *x = jp_node(p, JS_MACRO, t);
    x->name = jp_expect_name(p);
    jp_expect_op(p, "(");
    jp_names names = {0};
    jp_nodes defs = {0};
    while (!jp_is_op(jp_cur(p), ")")) {
        if (names.n) jp_expect_op(p, ",");
        if (jp_is_op(jp_cur(p), ")")) break;
        jp_names_push(p, &names, jp_expect_name(p));
        if (jp_is_op(jp_cur(p), "=")) {
            jp_next(p);
            jp_nodes_push(p, &defs, jp_expr(p, 1));
        } else {
            if (defs.n && defs.v[defs.n - 1])
                jp_fail_at(p, jp_cur(p)->line, jp_cur(p)->col,
                           "parameter without a default after one with");
            jp_nodes_push(p, &defs, NULL);
        }
    }
    jp_next(p);
    x->kwnames = names.v;
    x->kwvals = defs.v;
    x->nkw = names.n;
    expect_bend(p);
    static const char *const ends[] = {"endmacro", NULL};
    const char *found;
    x->b = parse_body(p, ends, &found);
    if (jp_cur(p)->t == TOK_NAME) jp_next(p); /* {% endmacro name %} */
    expect_bend(p);
    return x;
}

static jnode *parse_break(jinja_parser *p, tok *t) {
    jnode *x = jp_node(p, JS_BREAK, t);
    expect_bend(p);
    return x;
}

static jnode *parse_continue(jinja_parser *p, tok *t) {
    jnode *x = jp_node(p, JS_CONTINUE, t);
    expect_bend(p);
    return x;
}

/* transformers' assistant-mask marker */
static jnode *parse_generation(jinja_parser *p, tok *t) {
    expect_bend(p);
    static const char *const ends[] = {"endgeneration", NULL};
    const char *found;
    jnode *x = jp_node(p, JS_GENERATION, t);
    x->b = parse_body(p, ends, &found);
    expect_bend(p);
    return x;
}

/* {% filter name(args) %}body{% endfilter %}: the body's text through the filter, written */
static jnode *parse_filter_block(jinja_parser *p, tok *t) {
    jnode *x = jp_node(p, JN_FILTER, t);
    tok *nt = jp_cur(p);
    x->name = jp_expect_name(p);
    x->fn = jinja_filter_id(x->name);
    if (x->fn < 0) jp_fail_at(p, nt->line, nt->col, "filter '%s' is not supported", x->name);
    if (jp_is_op(jp_cur(p), "(")) jp_call_args(p, x);
    if (jp_is_op(jp_cur(p), "|"))
        jp_fail_at(p, jp_cur(p)->line, jp_cur(p)->col, "chained filter blocks are not supported");
    expect_bend(p);
    static const char *const ends[] = {"endfilter", NULL};
    const char *found;
    x->b = parse_body(p, ends, &found);
    expect_bend(p);
    jnode *o = jp_node(p, JS_OUT, t);
    o->a = x;
    return o;
}

/* the tags, each parsed from just after its name (t) to its end */
static const struct {
    const char *name;
    jnode *(*parse)(jinja_parser *p, tok *t);
} tags[] = {
    {"if", parse_if},
    {"for", parse_for},
    {"set", parse_set},
    {"macro", parse_macro},
    {"break", parse_break},
    {"continue", parse_continue},
    {"generation", parse_generation},
    {"filter", parse_filter_block},
};

static jnode *parse_stmt(jinja_parser *p) {
    tok *t = jp_cur(p);
    if (t->t != TOK_NAME) jp_fail_tok(p, t, "a tag name");
    const char *name = jp_next(p)->s;
    for (size_t i = 0; i < sizeof tags / sizeof *tags; i++)
        if (!strcmp(tags[i].name, name)) return tags[i].parse(p, t);
    jp_fail_at(p, t->line, t->col, "tag '%s' is not supported", name);
}

/* Statements until one of `ends` (a block tag name, consumed with its '{%' and name; *found
 * names it) or, with ends NULL, the end of the template. */
static jnode *parse_body(jinja_parser *p, const char *const *ends, const char **found) {
    jp_enter(p);
    tok *start = jp_cur(p);
    jp_nodes v = {0};
    for (;;) {
        tok *t = jp_cur(p);
        if (t->t == TOK_EOF) {
            if (ends) {
                size_t last = 0;
                while (ends[last + 1])
                    last++;
                char what[64];
                snprintf(what, sizeof what, "'{%% %s %%}'", ends[last]);
                jp_fail_tok(p, t, what);
            }
            break;
        }
        if (t->t == TOK_DATA) {
            jp_next(p);
            jnode *x = jp_node(p, JS_TEXT, t);
            x->lit = jv_str_tag(p->a, t->s, t->len, JINJA_TAG_TEMPLATE);
            jp_nodes_push(p, &v, x);
        } else if (t->t == TOK_VBEGIN) {
            jp_next(p);
            jnode *x = jp_node(p, JS_OUT, t);
            x->a = jp_expr(p, 1);
            if (jp_cur(p)->t != TOK_VEND) jp_fail_tok(p, jp_cur(p), "'}}'");
            jp_next(p);
            jp_nodes_push(p, &v, x);
        } else if (t->t == TOK_BBEGIN) {
            tok *nt = &p->toks[p->k + 1];
            if (ends && nt->t == TOK_NAME) {
                int hit = 0;
                for (size_t i = 0; ends[i]; i++)
                    if (!strcmp(nt->s, ends[i])) {
                        *found = ends[i];
                        hit = 1;
                    }
                if (hit) {
                    jp_next(p);
                    jp_next(p);
                    break;
                }
            }
            if (nt->t == TOK_NAME &&
                (!strncmp(nt->s, "end", 3) || !strcmp(nt->s, "elif") || !strcmp(nt->s, "else")))
                jp_fail_at(p, nt->line, nt->col, "unexpected '%s'%s", nt->s,
                           ends ? "" : " outside its block");
            jp_next(p);
            jp_nodes_push(p, &v, parse_stmt(p));
        } else {
            jp_fail_tok(p, t, "template text or a tag");
        }
    }
    jnode *body = jp_node(p, JS_BODY, start);
    body->kids = v.v;
    body->nkids = v.n;
    jp_leave(p);
    return body;
}

jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t errlen) {
    jinja_parser *p = calloc(1, sizeof *p);
    UP_CHECK(p, "out of memory");
    p->a = jinja_arena_new();
    p->err = err;
    p->errlen = errlen;
    p->line = p->col = 1;
    /* newlines normalised to \n; one trailing newline dropped (keep_trailing_newline=False) */
    char *s = jv_alloc(p->a, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    p->src = s;
    p->n = n;
    jinja_template *t = NULL;
    if (setjmp(p->jmp) == 0) {
        jp_lex(p);
        jnode *root = parse_body(p, NULL, NULL);
        t = calloc(1, sizeof *t);
        UP_CHECK(t, "out of memory");
        t->arena = p->a;
        t->root = root;
    } else {
        jinja_arena_free(p->a);
    }
    free(p);
    return t;
}

void jinja_template_free(jinja_template *t) {
    if (!t) return;
    jinja_arena_free(t->arena);
    free(t);
}
