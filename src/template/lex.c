/* lex.c — Jinja2's lexer (trim_blocks, lstrip_blocks, whitespace control, newlines normalised
 * to \n and one trailing newline dropped, as jinja2 does), and the cursor the parser moves over
 * its tokens (parse.h). */
#include "template/parse.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jp_fail_at(jinja_parser *p, int line, int col, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "line %d col %d: %s", line, col, msg);
    longjmp(p->jmp, 1);
}

static void where(jinja_parser *p, size_t pos, int *line, int *col) {
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

static tok *push(jinja_parser *p, tok_kind t, size_t at) {
    if (p->ntoks == p->cap)
        p->toks = jv_grow(p->a, p->toks, p->ntoks, &p->cap, 256, sizeof *p->toks);
    tok *x = &p->toks[p->ntoks++];
    memset(x, 0, sizeof *x);
    x->t = t;
    where(p, at, &x->line, &x->col);
    return x;
}

/* Whitespace as Python's \s sees it (str.isspace), at s[i]; its byte length, or 0. */
static size_t space_at(const char *s, size_t n, size_t i) {
    size_t l;
    uint32_t c = jv_cp_at(s, n, i, &l);
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
            jv_cp_at(s, n, i, &cl);
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
static void decode_string(jinja_parser *p, const char *s, size_t n, tok *t) {
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
            jp_fail_at(p, t->line, t->col, "\\N{...} escapes in strings are not supported");
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
                if (d < 0) jp_fail_at(p, t->line, t->col, "truncated \\%c escape in a string", c);
                cp = cp * 16 + (uint32_t)d;
                i++;
            }
        }
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            jp_fail_at(p, t->line, t->col, "escape \\%c of a code point UTF-8 cannot hold", c);
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

static double parse_num(jinja_parser *p, const char *s, size_t n, tok *t, int is_float) {
    char buf[128];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < sizeof buf; i++)
        if (s[i] != '_') buf[o++] = s[i];
    buf[o] = 0;
    if (is_float) return strtod(buf, NULL);
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    if (errno == ERANGE || n >= sizeof buf)
        jp_fail_at(p, t->line, t->col, "integer literal %s is too large", buf);
    t->i = v;
    return 0;
}

/* Tokens of one {{ }} or {% %} from p->pos (just after the opening and its sign) to the end
 * marker; returns after pushing the end token. */
static void lex_tag(jinja_parser *p, int block) {
    const char *s = p->src;
    size_t n = p->n;
    int balance = 0;
    for (;;) {
        size_t i = skip_space(s, n, p->pos);
        p->pos = i;
        if (i >= n) {
            int l, c;
            where(p, i, &l, &c);
            jp_fail_at(p, l, c, "unexpected end of template: %s not closed", block ? "{%" : "{{");
        }
        if (balance == 0) {
            const char *end = block ? "%}" : "}}";
            if (s[i] == '-' && i + 2 < n + 1 && strncmp(s + i + 1, end, 2) == 0) {
                push(p, block ? TOK_BEND : TOK_VEND, i);
                p->pos = skip_space(s, n, i + 3);
                return;
            }
            if (block && s[i] == '+' && i + 2 < n + 1 && strncmp(s + i + 1, end, 2) == 0) {
                push(p, TOK_BEND, i);
                p->pos = i + 3;
                return;
            }
            if (i + 1 < n && strncmp(s + i, end, 2) == 0) {
                push(p, block ? TOK_BEND : TOK_VEND, i);
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
            tok *t = push(p, flt ? TOK_FLOAT : TOK_INT, i);
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
            tok *t = push(p, TOK_NAME, i);
            t->s = jv_strdup(p->a, s + i, j - i);
            t->len = j - i;
            p->pos = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != c)
                j += s[j] == '\\' ? 2 : 1;
            tok *t = push(p, TOK_STR, i);
            if (j >= n) jp_fail_at(p, t->line, t->col, "unterminated string");
            decode_string(p, s + i + 1, j - i - 1, t);
            p->pos = j + 1;
            continue;
        }
        static const char *ops2[] = {"//", "**", "==", "!=", ">=", "<="};
        size_t len = 0;
        for (size_t k = 0; k < sizeof ops2 / sizeof *ops2; k++)
            if (i + 1 < n && strncmp(s + i, ops2[k], 2) == 0) len = 2;
        if (!len && strchr("+-*/%~[](){}><=.:|,;", c) && c) len = 1;
        tok *t = push(p, TOK_OP, i);
        if (!len) jp_fail_at(p, t->line, t->col, "unexpected character '%c' in a tag", c);
        t->s = jv_strdup(p->a, s + i, len);
        t->len = len;
        if (c == '(' || c == '[' || c == '{') balance++;
        if ((c == ')' || c == ']' || c == '}') && balance > 0) balance--;
        p->pos = i + len;
    }
}

void jp_lex(jinja_parser *p) {
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
            tok *t = push(p, TOK_DATA, p->pos);
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
                jp_fail_at(p, l, c, "unclosed comment");
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
        push(p, kind == '{' ? TOK_VBEGIN : TOK_BBEGIN, open);
        p->pos = after;
        lex_tag(p, kind == '%');
        line_starting = p->pos > 0 && s[p->pos - 1] == '\n';
    }
    push(p, TOK_EOF, n);
}

/* ---- the cursor over the tokens ---- */

tok *jp_cur(jinja_parser *p) {
    return &p->toks[p->k];
}
tok *jp_next(jinja_parser *p) {
    return &p->toks[p->k < p->ntoks - 1 ? p->k++ : p->k];
}
int jp_is_op(const tok *t, const char *op) {
    return t->t == TOK_OP && strcmp(t->s, op) == 0;
}
int jp_is_name(const tok *t, const char *nm) {
    return t->t == TOK_NAME && strcmp(t->s, nm) == 0;
}

static const char *tok_desc(const tok *t, char *buf, size_t len) {
    switch (t->t) {
    case TOK_DATA:
        return "template text";
    case TOK_VBEGIN:
        return "'{{'";
    case TOK_VEND:
        return "'}}'";
    case TOK_BBEGIN:
        return "'{%'";
    case TOK_BEND:
        return "'%}'";
    case TOK_EOF:
        return "the end of the template";
    case TOK_STR:
        return "a string";
    case TOK_INT:
    case TOK_FLOAT:
        return "a number";
    default:
        snprintf(buf, len, "'%s'", t->s);
        return buf;
    }
}

void jp_fail_tok(jinja_parser *p, const tok *t, const char *what) {
    char buf[80];
    jp_fail_at(p, t->line, t->col, "expected %s, found %s", what, tok_desc(t, buf, sizeof buf));
}

void jp_expect_op(jinja_parser *p, const char *op) {
    if (!jp_is_op(jp_cur(p), op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        jp_fail_tok(p, jp_cur(p), w);
    }
    jp_next(p);
}

const char *jp_expect_name(jinja_parser *p) {
    if (jp_cur(p)->t != TOK_NAME) jp_fail_tok(p, jp_cur(p), "a name");
    return jp_next(p)->s;
}

jnode *jp_node(jinja_parser *p, jn_kind k, const tok *at) {
    jnode *x = jv_alloc(p->a, sizeof *x);
    x->kind = k;
    x->line = at->line;
    x->col = at->col;
    return x;
}

void jp_nodes_push(jinja_parser *p, jp_nodes *v, jnode *x) {
    if (v->n == v->cap) v->v = jv_grow(p->a, v->v, v->n, &v->cap, 4, sizeof *v->v);
    v->v[v->n++] = x;
}
void jp_names_push(jinja_parser *p, jp_names *v, const char *s) {
    if (v->n == v->cap) v->v = jv_grow(p->a, v->v, v->n, &v->cap, 4, sizeof *v->v);
    v->v[v->n++] = s;
}

void jp_enter(jinja_parser *p) {
    if (++p->depth > JINJA_MAX_DEPTH)
        jp_fail_at(p, jp_cur(p)->line, jp_cur(p)->col, "nested more than %d deep", JINJA_MAX_DEPTH);
}
void jp_leave(jinja_parser *p) {
    p->depth--;
}
