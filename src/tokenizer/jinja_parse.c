/* jinja_parse.c — Jinja2's lexer (trim_blocks, lstrip_blocks, whitespace control, newlines
 * normalised to \n and one trailing newline dropped, as jinja2 does) and a recursive-descent
 * parser with jinja2's precedence, building the tree of jinja_impl.h. */
#include "tokenizer/jinja_impl.h"

#include "core/check.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    T_DATA,
    T_VBEGIN,
    T_VEND,
    T_BBEGIN,
    T_BEND,
    T_NAME,
    T_STR,
    T_INT,
    T_FLOAT,
    T_OP,
    T_EOF
} ttype;

typedef struct {
    ttype t;
    int line, col;
    const char *s; /* DATA, STR: the text (decoded); NAME, OP: the spelling */
    size_t len;
    long long i;
    double f;
} tok;

typedef struct {
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
} P;

UP_NORETURN static void P_fail_at(P *p, int line, int col, const char *fmt, ...) UP_PRINTF(4, 5);
static void P_fail_at(P *p, int line, int col, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "line %d col %d: %s", line, col, msg);
    longjmp(p->jmp, 1);
}

static void where(P *p, size_t pos, int *line, int *col) {
    while (p->lc_pos < pos) {
        if (p->src[p->lc_pos] == '\n') {
            p->line++;
            p->col = 1;
        } else if (((unsigned char)p->src[p->lc_pos] & 0xc0) != 0x80) {
            p->col++;
        }
        p->lc_pos++;
    }
    *line = p->line;
    *col = p->col;
}

static tok *push(P *p, ttype t, size_t at) {
    if (p->ntoks == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        tok *nt = jv_alloc(p->a, cap * sizeof *nt);
        if (p->ntoks) memcpy(nt, p->toks, p->ntoks * sizeof *nt);
        p->toks = nt;
        p->cap = cap;
    }
    tok *x = &p->toks[p->ntoks++];
    memset(x, 0, sizeof *x);
    x->t = t;
    where(p, at, &x->line, &x->col);
    return x;
}

/* Whitespace as Python's \s sees it (str.isspace), at s[i]; its byte length, or 0. */
static size_t space_at(const char *s, size_t n, size_t i) {
    size_t l;
    uint32_t c = utf8_next(s, n, i, &l);
    return py_isspace(c) ? l : 0;
}

static size_t rstrip_len(const char *s, size_t n) {
    /* walk forward remembering where the trailing whitespace began */
    size_t end = 0;
    for (size_t i = 0; i < n;) {
        size_t l = space_at(s, n, i);
        if (l) {
            i += l;
        } else {
            size_t cl;
            utf8_next(s, n, i, &cl);
            i += cl;
            end = i;
        }
    }
    return end;
}

static size_t skip_space(const char *s, size_t n, size_t i) {
    size_t l;
    while (i < n && (l = space_at(s, n, i)) != 0)
        i += l;
    return i;
}

/* Python's unicode-escape of a string literal's body (after the lexer kept non-ASCII text). */
static void decode_string(P *p, const char *s, size_t n, tok *t) {
    char *out = jv_alloc(p->a, n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            out[o++] = s[i];
            continue;
        }
        char c = s[++i];
        uint32_t cp = 0;
        int hex = 0;
        switch (c) {
        case '\n':
            continue;
        case '\\':
            out[o++] = '\\';
            continue;
        case '\'':
            out[o++] = '\'';
            continue;
        case '"':
            out[o++] = '"';
            continue;
        case 'a':
            out[o++] = 7;
            continue;
        case 'b':
            out[o++] = 8;
            continue;
        case 'f':
            out[o++] = 12;
            continue;
        case 'n':
            out[o++] = 10;
            continue;
        case 'r':
            out[o++] = 13;
            continue;
        case 't':
            out[o++] = 9;
            continue;
        case 'v':
            out[o++] = 11;
            continue;
        case 'x':
            hex = 2;
            break;
        case 'u':
            hex = 4;
            break;
        case 'U':
            hex = 8;
            break;
        case 'N':
            P_fail_at(p, t->line, t->col, "\\N{...} escapes in strings are not supported");
        default:
            if (c >= '0' && c <= '7') {
                int k = 0;
                while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7')
                    cp = cp * 8 + (uint32_t)(s[i++] - '0'), k++;
                i--;
                break;
            }
            out[o++] = '\\';
            out[o++] = c;
            continue;
        }
        if (hex) {
            for (int k = 0; k < hex; k++) {
                char h = i + 1 < n ? s[i + 1] : 0;
                int d = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
                if (d < 0) P_fail_at(p, t->line, t->col, "truncated \\%c escape in a string", c);
                cp = cp * 16 + (uint32_t)d;
                i++;
            }
        }
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            P_fail_at(p, t->line, t->col, "escape \\%c of a code point UTF-8 cannot hold", c);
        /* the escape's code point as UTF-8 (at most 4 bytes, never more than the escape) */
        if (cp < 0x80)
            out[o++] = (char)cp;
        else if (cp < 0x800) {
            out[o++] = (char)(0xc0 | (cp >> 6));
            out[o++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            out[o++] = (char)(0xe0 | (cp >> 12));
            out[o++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            out[o++] = (char)(0x80 | (cp & 0x3f));
        } else {
            out[o++] = (char)(0xf0 | (cp >> 18));
            out[o++] = (char)(0x80 | ((cp >> 12) & 0x3f));
            out[o++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            out[o++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    out[o] = 0;
    t->s = out;
    t->len = o;
}

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}
static int is_name0(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* digits with single underscores between them: (\d+_)*\d+ ; returns the end, or i */
static size_t scan_digits(const char *s, size_t n, size_t i) {
    size_t j = i;
    if (j >= n || !is_digit(s[j])) return i;
    while (j < n && is_digit(s[j])) {
        j++;
        if (j + 1 < n && s[j] == '_' && is_digit(s[j + 1])) j++;
    }
    return j;
}

static double parse_num(P *p, const char *s, size_t n, tok *t, int is_float) {
    char buf[128];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < sizeof buf; i++)
        if (s[i] != '_') buf[o++] = s[i];
    buf[o] = 0;
    if (is_float) return strtod(buf, NULL);
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    if (errno == ERANGE || n >= sizeof buf)
        P_fail_at(p, t->line, t->col, "integer literal %s is too large", buf);
    t->i = v;
    return 0;
}

/* Tokens of one {{ }} or {% %} from p->pos (just after the opening and its sign) to the end
 * marker; returns after pushing the end token. */
static void lex_tag(P *p, int block) {
    const char *s = p->src;
    size_t n = p->n;
    int balance = 0;
    for (;;) {
        size_t i = skip_space(s, n, p->pos);
        p->pos = i;
        if (i >= n) {
            int l, c;
            where(p, i, &l, &c);
            P_fail_at(p, l, c, "unexpected end of template: %s not closed", block ? "{%" : "{{");
        }
        if (balance == 0) {
            const char *end = block ? "%}" : "}}";
            if (s[i] == '-' && i + 2 < n + 1 && strncmp(s + i + 1, end, 2) == 0) {
                push(p, block ? T_BEND : T_VEND, i);
                p->pos = skip_space(s, n, i + 3);
                return;
            }
            if (block && s[i] == '+' && i + 2 < n + 1 && strncmp(s + i + 1, end, 2) == 0) {
                push(p, T_BEND, i);
                p->pos = i + 3;
                return;
            }
            if (i + 1 < n && strncmp(s + i, end, 2) == 0) {
                push(p, block ? T_BEND : T_VEND, i);
                p->pos = i + 2;
                if (block && p->pos < n && s[p->pos] == '\n') p->pos++; /* trim_blocks */
                return;
            }
        }
        char c = s[i];
        if (is_digit(c)) {
            size_t j = scan_digits(s, n, i), k = j;
            int flt = 0;
            if (!(i > 0 && s[i - 1] == '.')) {
                if (k + 1 < n && s[k] == '.' && is_digit(s[k + 1])) {
                    k = scan_digits(s, n, k + 1);
                    flt = 1;
                }
                if (k < n && (s[k] == 'e' || s[k] == 'E')) {
                    size_t m = k + 1;
                    if (m < n && (s[m] == '+' || s[m] == '-')) m++;
                    size_t e = scan_digits(s, n, m);
                    if (e > m) {
                        k = e;
                        flt = 1;
                    }
                }
            }
            if (!flt) k = j;
            tok *t = push(p, flt ? T_FLOAT : T_INT, i);
            t->s = s + i;
            t->len = k - i;
            if (flt)
                t->f = parse_num(p, s + i, k - i, t, 1);
            else
                parse_num(p, s + i, k - i, t, 0);
            p->pos = k;
            continue;
        }
        if (is_name0(c)) {
            size_t j = i;
            while (j < n && (is_name0(s[j]) || is_digit(s[j])))
                j++;
            tok *t = push(p, T_NAME, i);
            t->s = jv_strdup(p->a, s + i, j - i);
            t->len = j - i;
            p->pos = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != c)
                j += s[j] == '\\' ? 2 : 1;
            tok *t = push(p, T_STR, i);
            if (j >= n) P_fail_at(p, t->line, t->col, "unterminated string");
            decode_string(p, s + i + 1, j - i - 1, t);
            p->pos = j + 1;
            continue;
        }
        static const char *ops2[] = {"//", "**", "==", "!=", ">=", "<="};
        size_t len = 0;
        for (size_t k = 0; k < sizeof ops2 / sizeof *ops2; k++)
            if (i + 1 < n && strncmp(s + i, ops2[k], 2) == 0) len = 2;
        if (!len && strchr("+-*/%~[](){}><=.:|,;", c) && c) len = 1;
        tok *t = push(p, T_OP, i);
        if (!len) P_fail_at(p, t->line, t->col, "unexpected character '%c' in a tag", c);
        t->s = jv_strdup(p->a, s + i, len);
        t->len = len;
        if (c == '(' || c == '[' || c == '{') balance++;
        if ((c == ')' || c == ']' || c == '}') && balance > 0) balance--;
        p->pos = i + len;
    }
}

static void lex(P *p) {
    const char *s = p->src;
    size_t n = p->n;
    int line_starting = 1;
    while (p->pos < n) {
        /* the next tag opening */
        size_t i = p->pos, open = n;
        int kind = 0; /* '{', '%', '#' */
        for (; i + 1 < n; i++)
            if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) {
                open = i;
                kind = s[i + 1];
                break;
            }
        size_t text_end = open;
        char sign = open + 2 < n ? s[open + 2] : 0;
        if (open < n) {
            if (sign == '-') {
                text_end = p->pos + rstrip_len(s + p->pos, open - p->pos);
            } else if (sign != '+' && kind != '{') {
                /* lstrip_blocks: only whitespace between the line's start and the tag */
                size_t l_pos = open;
                while (l_pos > p->pos && s[l_pos - 1] != '\n')
                    l_pos--;
                if (l_pos > p->pos || line_starting) {
                    size_t j = skip_space(s, open, l_pos);
                    if (j == open && open > l_pos) text_end = l_pos;
                }
            }
        }
        if (text_end > p->pos) {
            tok *t = push(p, T_DATA, p->pos);
            t->s = s + p->pos;
            t->len = text_end - p->pos;
        }
        if (open >= n) {
            p->pos = n;
            break;
        }
        size_t after = open + 2 + (sign == '-' || sign == '+');
        if (kind == '#') {
            const char *e = NULL;
            for (size_t j = after; j + 1 < n; j++)
                if (s[j] == '#' && s[j + 1] == '}') {
                    e = s + j;
                    break;
                }
            if (!e) {
                int l, c;
                where(p, open, &l, &c);
                P_fail_at(p, l, c, "unclosed comment");
            }
            size_t j = (size_t)(e - s);
            if (j > after && s[j - 1] == '-')
                p->pos = skip_space(s, n, j + 2);
            else if (j > after && s[j - 1] == '+')
                p->pos = j + 2;
            else
                p->pos = j + 2 + (j + 2 < n && s[j + 2] == '\n');
            line_starting = p->pos > 0 && s[p->pos - 1] == '\n';
            continue;
        }
        push(p, kind == '{' ? T_VBEGIN : T_BBEGIN, open);
        p->pos = after;
        lex_tag(p, kind == '%');
        line_starting = p->pos > 0 && s[p->pos - 1] == '\n';
    }
    push(p, T_EOF, n);
}

/* ---- parser ---- */

static tok *cur(P *p) {
    return &p->toks[p->k];
}
static tok *next(P *p) {
    return &p->toks[p->k < p->ntoks - 1 ? p->k++ : p->k];
}
static int is_op(const tok *t, const char *op) {
    return t->t == T_OP && strcmp(t->s, op) == 0;
}
static int is_name(const tok *t, const char *nm) {
    return t->t == T_NAME && strcmp(t->s, nm) == 0;
}

static const char *tok_desc(const tok *t, char *buf, size_t len) {
    switch (t->t) {
    case T_DATA:
        return "template text";
    case T_VBEGIN:
        return "'{{'";
    case T_VEND:
        return "'}}'";
    case T_BBEGIN:
        return "'{%'";
    case T_BEND:
        return "'%}'";
    case T_EOF:
        return "the end of the template";
    case T_STR:
        return "a string";
    case T_INT:
    case T_FLOAT:
        return "a number";
    default:
        snprintf(buf, len, "'%s'", t->s);
        return buf;
    }
}

static void P_fail_tok(P *p, const tok *t, const char *what) {
    char buf[80];
    P_fail_at(p, t->line, t->col, "expected %s, found %s", what, tok_desc(t, buf, sizeof buf));
}

static void expect_op(P *p, const char *op) {
    if (!is_op(cur(p), op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        P_fail_tok(p, cur(p), w);
    }
    next(p);
}

static const char *expect_name(P *p) {
    if (cur(p)->t != T_NAME) P_fail_tok(p, cur(p), "a name");
    return next(p)->s;
}

static jnode *mk(P *p, jn_kind k, const tok *at) {
    jnode *x = jv_alloc(p->a, sizeof *x);
    x->kind = k;
    x->line = at->line;
    x->col = at->col;
    return x;
}

typedef struct {
    jnode **v;
    size_t n, cap;
} nvec;
static void nv_push(P *p, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 4;
        jnode **nn = jv_alloc(p->a, cap * sizeof *nn);
        if (v->n) memcpy(nn, v->v, v->n * sizeof *nn);
        v->v = nn;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}
typedef struct {
    const char **v;
    size_t n, cap;
} svec;
static void sv_push(P *p, svec *v, const char *s) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 4;
        const char **nn = jv_alloc(p->a, cap * sizeof *nn);
        if (v->n) memcpy(nn, v->v, v->n * sizeof *nn);
        v->v = nn;
        v->cap = cap;
    }
    v->v[v->n++] = s;
}

static void enter(P *p) {
    if (++p->depth > JINJA_MAX_DEPTH)
        P_fail_at(p, cur(p)->line, cur(p)->col, "nested more than %d deep", JINJA_MAX_DEPTH);
}
static void leave(P *p) {
    p->depth--;
}

static jnode *parse_expr(P *p, int with_cond);
static jnode *parse_unary(P *p, int with_filter);
static jnode *parse_primary(P *p);

/* (args..., name=value...) after '(' */
static void parse_call_args(P *p, jnode *x) {
    nvec args = {0}, kwv = {0};
    svec kwn = {0};
    expect_op(p, "(");
    while (!is_op(cur(p), ")")) {
        if (args.n + kwv.n) expect_op(p, ",");
        if (is_op(cur(p), ")")) break;
        if (is_op(cur(p), "*") || is_op(cur(p), "**"))
            P_fail_at(p, cur(p)->line, cur(p)->col,
                      "*args and **kwargs in calls are not supported");
        if (cur(p)->t == T_NAME && is_op(&p->toks[p->k + 1], "=")) {
            sv_push(p, &kwn, next(p)->s);
            next(p);
            nv_push(p, &kwv, parse_expr(p, 1));
        } else {
            if (kwv.n)
                P_fail_at(p, cur(p)->line, cur(p)->col, "positional argument after keywords");
            nv_push(p, &args, parse_expr(p, 1));
        }
    }
    next(p);
    x->kids = args.v;
    x->nkids = args.n;
    x->kwnames = kwn.v;
    x->kwvals = kwv.v;
    x->nkw = kwn.n;
}

static jnode *parse_postfix(P *p, jnode *x) {
    for (;;) {
        tok *t = cur(p);
        if (is_op(t, ".")) {
            next(p);
            jnode *y = mk(p, JN_ATTR, t);
            y->a = x;
            if (cur(p)->t == T_NAME) {
                y->name = next(p)->s;
            } else if (cur(p)->t == T_INT) {
                y->kind = JN_ITEM;
                jnode *k = mk(p, JN_LIT, cur(p));
                k->lit = jinja_new_int(p->a, next(p)->i);
                y->b = k;
            } else {
                P_fail_tok(p, cur(p), "an attribute name");
            }
            x = y;
        } else if (is_op(t, "[")) {
            next(p);
            jnode *parts[3] = {NULL, NULL, NULL};
            int slice = 0;
            for (int k = 0; k < 3; k++) {
                if (!is_op(cur(p), ":") && !is_op(cur(p), "]")) parts[k] = parse_expr(p, 1);
                if (k < 2 && is_op(cur(p), ":")) {
                    slice = 1;
                    next(p);
                } else {
                    break;
                }
            }
            expect_op(p, "]");
            jnode *y = mk(p, slice ? JN_SLICE : JN_ITEM, t);
            y->a = x;
            y->b = parts[0];
            y->c = parts[1];
            y->d = parts[2];
            if (!slice && !parts[0]) P_fail_at(p, t->line, t->col, "empty subscript");
            x = y;
        } else if (is_op(t, "(")) {
            jnode *y = mk(p, JN_CALL, t);
            y->a = x;
            y->line = x->line; /* a call is where its callee starts */
            y->col = x->col;
            parse_call_args(p, y);
            x = y;
        } else {
            return x;
        }
    }
}

static jnode *parse_filter_expr(P *p, jnode *x) {
    for (;;) {
        tok *t = cur(p);
        if (is_op(t, "|")) {
            next(p);
            tok *nt = cur(p);
            const char *name = expect_name(p);
            while (is_op(cur(p), ".")) { /* dotted filter names: none known */
                next(p);
                expect_name(p);
                P_fail_at(p, nt->line, nt->col, "dotted filter names are not supported");
            }
            jnode *y = mk(p, JN_FILTER, nt);
            y->a = x;
            y->name = name;
            y->fn = jinja_filter_id(name);
            if (y->fn < 0) P_fail_at(p, nt->line, nt->col, "filter '%s' is not supported", name);
            if (is_op(cur(p), "(")) parse_call_args(p, y);
            x = y;
        } else if (is_name(t, "is")) {
            next(p);
            jnode *y = mk(p, JN_TEST, t);
            if (is_name(cur(p), "not")) {
                next(p);
                y->op = 1;
            }
            tok *nt = cur(p);
            const char *name;
            if (nt->t == T_NAME) {
                name = next(p)->s;
            } else if (is_op(nt, "==") || is_op(nt, "!=") || is_op(nt, "<") || is_op(nt, ">") ||
                       is_op(nt, "<=") || is_op(nt, ">=")) {
                name = next(p)->s;
            } else {
                P_fail_tok(p, nt, "a test name");
                name = NULL;
            }
            while (is_op(cur(p), ".")) {
                P_fail_at(p, nt->line, nt->col, "dotted test names are not supported");
            }
            y->a = x;
            y->name = name;
            y->fn = jinja_test_id(name);
            if (y->fn < 0) P_fail_at(p, nt->line, nt->col, "test '%s' is not supported", name);
            tok *q = cur(p);
            if (is_op(q, "(")) {
                parse_call_args(p, y);
            } else if ((q->t == T_NAME || q->t == T_STR || q->t == T_INT || q->t == T_FLOAT ||
                        is_op(q, "[") || is_op(q, "{")) &&
                       !is_name(q, "else") && !is_name(q, "or") && !is_name(q, "and")) {
                if (is_name(q, "is"))
                    P_fail_at(p, q->line, q->col, "tests cannot be chained with 'is'");
                jnode *arg = parse_postfix(p, parse_primary(p));
                y->kids = jv_alloc(p->a, sizeof *y->kids);
                y->kids[0] = arg;
                y->nkids = 1;
            }
            x = y;
        } else if (is_op(t, "(")) {
            jnode *y = mk(p, JN_CALL, t);
            y->a = x;
            y->line = x->line; /* a call is where its callee starts */
            y->col = x->col;
            parse_call_args(p, y);
            x = y;
        } else {
            return x;
        }
    }
}

static jnode *parse_primary(P *p) {
    tok *t = cur(p);
    jnode *x;
    enter(p);
    if (t->t == T_NAME) {
        next(p);
        x = mk(p, JN_LIT, t);
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
    } else if (t->t == T_STR) {
        /* adjacent strings join */
        jv_sb b;
        sb_init(&b, p->a);
        while (cur(p)->t == T_STR) {
            tok *s = next(p);
            sb_put(&b, s->s, s->len, JINJA_TAG_TEMPLATE);
        }
        x = mk(p, JN_LIT, t);
        x->lit = sb_finish(&b);
    } else if (t->t == T_INT) {
        next(p);
        x = mk(p, JN_LIT, t);
        x->lit = jinja_new_int(p->a, t->i);
    } else if (t->t == T_FLOAT) {
        next(p);
        x = mk(p, JN_LIT, t);
        x->lit = jinja_new_float(p->a, t->f);
    } else if (is_op(t, "(")) {
        next(p);
        if (is_op(cur(p), ")")) {
            next(p);
            x = mk(p, JN_TUPLE, t);
        } else {
            jnode *e = parse_expr(p, 1);
            if (is_op(cur(p), ",")) {
                nvec v = {0};
                nv_push(p, &v, e);
                while (is_op(cur(p), ",")) {
                    next(p);
                    if (is_op(cur(p), ")")) break;
                    nv_push(p, &v, parse_expr(p, 1));
                }
                x = mk(p, JN_TUPLE, t);
                x->kids = v.v;
                x->nkids = v.n;
            } else {
                x = e;
            }
            expect_op(p, ")");
        }
    } else if (is_op(t, "[")) {
        next(p);
        nvec v = {0};
        while (!is_op(cur(p), "]")) {
            if (v.n) expect_op(p, ",");
            if (is_op(cur(p), "]")) break;
            nv_push(p, &v, parse_expr(p, 1));
        }
        next(p);
        x = mk(p, JN_LIST, t);
        x->kids = v.v;
        x->nkids = v.n;
    } else if (is_op(t, "{")) {
        next(p);
        nvec v = {0};
        while (!is_op(cur(p), "}")) {
            if (v.n) expect_op(p, ",");
            if (is_op(cur(p), "}")) break;
            nv_push(p, &v, parse_expr(p, 1));
            expect_op(p, ":");
            nv_push(p, &v, parse_expr(p, 1));
        }
        next(p);
        x = mk(p, JN_DICT, t);
        x->kids = v.v;
        x->nkids = v.n;
    } else {
        P_fail_tok(p, t, "an expression");
        x = NULL;
    }
    leave(p);
    return x;
}

static jnode *parse_unary(P *p, int with_filter) {
    tok *t = cur(p);
    jnode *x;
    enter(p);
    if (is_op(t, "-") || is_op(t, "+")) {
        next(p);
        x = mk(p, is_op(t, "-") ? JN_NEG : JN_POS, t);
        x->a = parse_unary(p, 0);
    } else {
        x = parse_primary(p);
    }
    x = parse_postfix(p, x);
    if (with_filter) x = parse_filter_expr(p, x);
    leave(p);
    return x;
}

static jnode *bin(P *p, int op, jnode *l, jnode *r, const tok *t) {
    jnode *x = mk(p, JN_BIN, t);
    x->op = op;
    x->a = l;
    x->b = r;
    return x;
}

static jnode *parse_pow(P *p) {
    jnode *x = parse_unary(p, 1);
    while (is_op(cur(p), "**")) {
        tok *t = next(p);
        x = bin(p, JOP_POW, x, parse_unary(p, 1), t);
    }
    return x;
}

static jnode *parse_math2(P *p) {
    jnode *x = parse_pow(p);
    for (;;) {
        tok *t = cur(p);
        int op = is_op(t, "*")    ? JOP_MUL
                 : is_op(t, "/")  ? JOP_DIV
                 : is_op(t, "//") ? JOP_FLOORDIV
                 : is_op(t, "%")  ? JOP_MOD
                                  : 0;
        if (!op) return x;
        next(p);
        x = bin(p, op, x, parse_pow(p), t);
    }
}

static jnode *parse_concat(P *p) {
    jnode *x = parse_math2(p);
    while (is_op(cur(p), "~")) {
        tok *t = next(p);
        x = bin(p, JOP_CONCAT, x, parse_math2(p), t);
    }
    return x;
}

static jnode *parse_math1(P *p) {
    jnode *x = parse_concat(p);
    for (;;) {
        tok *t = cur(p);
        int op = is_op(t, "+") ? JOP_ADD : is_op(t, "-") ? JOP_SUB : 0;
        if (!op) return x;
        next(p);
        x = bin(p, op, x, parse_concat(p), t);
    }
}

static jnode *parse_compare(P *p) {
    jnode *x = parse_math1(p);
    jnode *chain = NULL;
    for (;;) {
        tok *t = cur(p);
        int op = is_op(t, "==")     ? JOP_EQ
                 : is_op(t, "!=")   ? JOP_NE
                 : is_op(t, "<")    ? JOP_LT
                 : is_op(t, "<=")   ? JOP_LE
                 : is_op(t, ">")    ? JOP_GT
                 : is_op(t, ">=")   ? JOP_GE
                 : is_name(t, "in") ? JOP_IN
                                    : 0;
        if (!op && is_name(t, "not") && is_name(&p->toks[p->k + 1], "in")) {
            next(p);
            op = JOP_NOTIN;
        }
        if (!op) break;
        next(p);
        jnode *r = parse_math1(p);
        jnode *c = mk(p, JN_CMP, t);
        c->op = op;
        c->a = chain ? chain->b : x;
        c->b = r;
        if (chain) {
            /* a < b < c is (a < b) and (b < c) */
            jnode *both = mk(p, JN_AND, t);
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

static jnode *parse_not(P *p) {
    if (is_name(cur(p), "not")) {
        tok *t = next(p);
        enter(p);
        jnode *x = mk(p, JN_NOT, t);
        x->a = parse_not(p);
        leave(p);
        return x;
    }
    return parse_compare(p);
}

static jnode *parse_and(P *p) {
    jnode *x = parse_not(p);
    while (is_name(cur(p), "and")) {
        tok *t = next(p);
        jnode *y = mk(p, JN_AND, t);
        y->a = x;
        y->b = parse_not(p);
        x = y;
    }
    return x;
}

static jnode *parse_or(P *p) {
    jnode *x = parse_and(p);
    while (is_name(cur(p), "or")) {
        tok *t = next(p);
        jnode *y = mk(p, JN_OR, t);
        y->a = x;
        y->b = parse_and(p);
        x = y;
    }
    return x;
}

static jnode *parse_expr(P *p, int with_cond) {
    enter(p);
    jnode *x = parse_or(p);
    while (with_cond && is_name(cur(p), "if")) {
        tok *t = next(p);
        jnode *y = mk(p, JN_COND, t);
        y->b = x;
        y->a = parse_or(p);
        if (is_name(cur(p), "else")) {
            next(p);
            y->c = parse_expr(p, 1);
        }
        x = y;
    }
    leave(p);
    return x;
}

/* ---- statements ---- */

static jnode *parse_body(P *p, const char *const *ends, const char **found);

static void expect_bend(P *p) {
    if (cur(p)->t != T_BEND) P_fail_tok(p, cur(p), "'%}'");
    next(p);
}

/* names separated by commas (for / set targets), optionally in parentheses */
static void parse_targets(P *p, jnode *x) {
    svec v = {0};
    int paren = is_op(cur(p), "(");
    if (paren) next(p);
    do {
        if (v.n) next(p);
        if (paren && is_op(cur(p), ")")) break;
        sv_push(p, &v, expect_name(p));
    } while (is_op(cur(p), ","));
    if (paren) expect_op(p, ")");
    x->names = v.v;
    x->nnames = v.n;
}

static jnode *parse_if_chain(P *p, tok *t);
/* an elif chain nests like blocks do: each link counts against JINJA_MAX_DEPTH */
static jnode *parse_if(P *p, tok *t) {
    enter(p);
    jnode *x = parse_if_chain(p, t);
    leave(p);
    return x;
}

static jnode *parse_if_chain(P *p, tok *t) {
    jnode *x = mk(p, JS_IF, t);
    x->a = parse_expr(p, 1);
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

static jnode *parse_stmt(P *p) {
    tok *t = cur(p);
    if (t->t != T_NAME) P_fail_tok(p, t, "a tag name");
    const char *name = next(p)->s;
    if (!strcmp(name, "if")) return parse_if(p, t);
    if (!strcmp(name, "for")) {
        jnode *x = mk(p, JS_FOR, t);
        parse_targets(p, x);
        if (!is_name(cur(p), "in")) P_fail_tok(p, cur(p), "'in'");
        next(p);
        x->a = parse_expr(p, 0);
        if (is_name(cur(p), "if")) {
            next(p);
            x->d = parse_expr(p, 1);
        }
        if (is_name(cur(p), "recursive"))
            P_fail_at(p, cur(p)->line, cur(p)->col, "recursive for loops are not supported");
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
    if (!strcmp(name, "set")) {
        jnode *x = mk(p, JS_SET, t);
        if (cur(p)->t == T_NAME && is_op(&p->toks[p->k + 1], ".")) {
            const char *obj = next(p)->s;
            next(p);
            x->names = jv_alloc(p->a, sizeof *x->names);
            x->names[0] = obj;
            x->nnames = 1;
            x->name = expect_name(p);
        } else {
            parse_targets(p, x);
        }
        if (is_op(cur(p), "=")) {
            next(p);
            jnode *e = parse_expr(p, 1);
            if (is_op(cur(p), ",")) { /* set a, b = x, y */
                nvec v = {0};
                nv_push(p, &v, e);
                while (is_op(cur(p), ",")) {
                    next(p);
                    nv_push(p, &v, parse_expr(p, 1));
                }
                e = mk(p, JN_TUPLE, t);
                e->kids = v.v;
                e->nkids = v.n;
            }
            x->a = e;
            expect_bend(p);
            return x;
        }
        if (x->name || x->nnames != 1) P_fail_tok(p, cur(p), "'='");
        if (is_op(cur(p), "|"))
            P_fail_at(p, cur(p)->line, cur(p)->col, "filtered set blocks are not supported");
        expect_bend(p);
        x->kind = JS_SETBLOCK;
        static const char *const ends[] = {"endset", NULL};
        const char *found;
        x->b = parse_body(p, ends, &found);
        expect_bend(p);
        return x;
    }
    if (!strcmp(name, "macro")) {
        jnode *x = mk(p, JS_MACRO, t);
        x->name = expect_name(p);
        expect_op(p, "(");
        svec names = {0};
        nvec defs = {0};
        while (!is_op(cur(p), ")")) {
            if (names.n) expect_op(p, ",");
            if (is_op(cur(p), ")")) break;
            sv_push(p, &names, expect_name(p));
            if (is_op(cur(p), "=")) {
                next(p);
                nv_push(p, &defs, parse_expr(p, 1));
            } else {
                if (defs.n && defs.v[defs.n - 1])
                    P_fail_at(p, cur(p)->line, cur(p)->col,
                              "parameter without a default after one with");
                nv_push(p, &defs, NULL);
            }
        }
        next(p);
        x->kwnames = names.v;
        x->kwvals = defs.v;
        x->nkw = names.n;
        expect_bend(p);
        static const char *const ends[] = {"endmacro", NULL};
        const char *found;
        x->b = parse_body(p, ends, &found);
        if (cur(p)->t == T_NAME) next(p); /* {% endmacro name %} */
        expect_bend(p);
        return x;
    }
    if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        jnode *x = mk(p, name[0] == 'b' ? JS_BREAK : JS_CONTINUE, t);
        expect_bend(p);
        return x;
    }
    if (!strcmp(name, "generation")) { /* transformers' assistant-mask marker */
        expect_bend(p);
        static const char *const ends[] = {"endgeneration", NULL};
        const char *found;
        jnode *x = mk(p, JS_GENERATION, t);
        x->b = parse_body(p, ends, &found);
        expect_bend(p);
        return x;
    }
    if (!strcmp(name, "filter")) {
        jnode *x = mk(p, JN_FILTER, t);
        tok *nt = cur(p);
        x->name = expect_name(p);
        x->fn = jinja_filter_id(x->name);
        if (x->fn < 0) P_fail_at(p, nt->line, nt->col, "filter '%s' is not supported", x->name);
        if (is_op(cur(p), "(")) parse_call_args(p, x);
        if (is_op(cur(p), "|"))
            P_fail_at(p, cur(p)->line, cur(p)->col, "chained filter blocks are not supported");
        expect_bend(p);
        static const char *const ends[] = {"endfilter", NULL};
        const char *found;
        x->b = parse_body(p, ends, &found);
        expect_bend(p);
        jnode *o = mk(p, JS_OUT, t);
        o->a = x;
        return o;
    }
    P_fail_at(p, t->line, t->col, "tag '%s' is not supported", name);
    return NULL;
}

/* Statements until one of `ends` (a block tag name, consumed with its '{%' and name; *found
 * names it) or, with ends NULL, the end of the template. */
static jnode *parse_body(P *p, const char *const *ends, const char **found) {
    enter(p);
    tok *start = cur(p);
    nvec v = {0};
    for (;;) {
        tok *t = cur(p);
        if (t->t == T_EOF) {
            if (ends) {
                size_t last = 0;
                while (ends[last + 1])
                    last++;
                char what[64];
                snprintf(what, sizeof what, "'{%% %s %%}'", ends[last]);
                P_fail_tok(p, t, what);
            }
            break;
        }
        if (t->t == T_DATA) {
            next(p);
            jnode *x = mk(p, JS_TEXT, t);
            x->lit = jv_str_tag(p->a, t->s, t->len, JINJA_TAG_TEMPLATE);
            nv_push(p, &v, x);
        } else if (t->t == T_VBEGIN) {
            next(p);
            jnode *x = mk(p, JS_OUT, t);
            x->a = parse_expr(p, 1);
            if (cur(p)->t != T_VEND) P_fail_tok(p, cur(p), "'}}'");
            next(p);
            nv_push(p, &v, x);
        } else if (t->t == T_BBEGIN) {
            tok *nt = &p->toks[p->k + 1];
            if (ends && nt->t == T_NAME) {
                int hit = 0;
                for (size_t i = 0; ends[i]; i++)
                    if (!strcmp(nt->s, ends[i])) {
                        *found = ends[i];
                        hit = 1;
                    }
                if (hit) {
                    next(p);
                    next(p);
                    break;
                }
            }
            if (nt->t == T_NAME &&
                (!strncmp(nt->s, "end", 3) || !strcmp(nt->s, "elif") || !strcmp(nt->s, "else")))
                P_fail_at(p, nt->line, nt->col, "unexpected '%s'%s", nt->s,
                          ends ? "" : " outside its block");
            next(p);
            nv_push(p, &v, parse_stmt(p));
        } else {
            P_fail_tok(p, t, "template text or a tag");
        }
    }
    jnode *body = mk(p, JS_BODY, start);
    body->kids = v.v;
    body->nkids = v.n;
    leave(p);
    return body;
}

jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t errlen) {
    P *p = calloc(1, sizeof *p);
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
        lex(p);
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
