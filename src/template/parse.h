/* parse.h — private to the parser's files: lex.c (the lexer and the cursor over its tokens),
 * parse_expr.c (expressions), parse_stmt.c (statements and jinja_parse). Errors jump to
 * jinja_parse's exit (jp_fail_at); the tree lives in the template's arena. */
#ifndef UP_TEMPLATE_PARSE_H
#define UP_TEMPLATE_PARSE_H

#include "template/jinja_impl.h"

#include "core/check.h"

typedef enum {
    TOK_DATA,
    TOK_VBEGIN,
    TOK_VEND,
    TOK_BBEGIN,
    TOK_BEND,
    TOK_NAME,
    TOK_STR,
    TOK_INT,
    TOK_FLOAT,
    TOK_OP,
    TOK_EOF
} tok_kind;

typedef struct {
    tok_kind t;
    int line, col;
    const char *s; /* DATA, STR: the text (decoded); NAME, OP: the spelling */
    size_t len;
    long long i;
    double f;
} tok;

typedef struct jinja_parser {
    jinja_arena *a;
    const char *src; /* normalised */
    size_t n, pos;
    size_t lc_pos; /* line/column cursor */
    int line, col;
    tok *toks;
    size_t ntoks, cap;
    size_t k; /* parser position */
    int depth;
    char *err;
    size_t errlen;
    jmp_buf jmp;
} jinja_parser;

/* nodes and names collected while parsing, in the arena */
typedef struct {
    jnode **v;
    size_t n, cap;
} jp_nodes;
typedef struct {
    const char **v;
    size_t n, cap;
} jp_names;
/* ---- lex.c ---- */
/* "line L col C: message" into the caller's buffer, then the jump to jinja_parse's exit */
UP_NORETURN void jp_fail_at(jinja_parser *p, int line, int col, const char *fmt, ...)
    UP_PRINTF(4, 5);
/* "expected WHAT, found <t>" at t */
UP_NORETURN void jp_fail_tok(jinja_parser *p, const tok *t, const char *what);
void jp_lex(jinja_parser *p); /* p->src into p->toks, ending with TOK_EOF */
tok *jp_cur(jinja_parser *p);
tok *jp_next(jinja_parser *p); /* the current token; the cursor moves on (not past TOK_EOF) */
int jp_is_op(const tok *t, const char *op);
int jp_is_name(const tok *t, const char *nm);
void jp_expect_op(jinja_parser *p, const char *op);
const char *jp_expect_name(jinja_parser *p);
jnode *jp_node(jinja_parser *p, jn_kind k, const tok *at); /* a zeroed node at t's place */
void jp_nodes_push(jinja_parser *p, jp_nodes *v, jnode *x);
void jp_names_push(jinja_parser *p, jp_names *v, const char *s);
void jp_enter(jinja_parser *p); /* one level deeper, within JINJA_MAX_DEPTH */
void jp_leave(jinja_parser *p);

/* ---- parse_expr.c ---- */
/* an expression; with_cond: with `a if b else c` (not in a for loop's sequence) */
jnode *jp_expr(jinja_parser *p, int with_cond);
/* (args..., name=value...) into x's kids and keywords, the cursor at '(' */
void jp_call_args(jinja_parser *p, jnode *x);

#endif
