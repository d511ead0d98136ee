/* render.h — private to the renderer's files: the render state and the functions they share.
 * The files stack without loops, each using only the ones above it in this list:
 *   runtime.c    errors, step count, conversions, len(), iteration, call arguments
 *   operators.c  comparisons, `in`, arithmetic
 *   strings.c    Python's string operations on tagged strings (strip, split, replace, case)
 *   methods.c    str and dict methods, globals.c the globals (tables of one function each)
 *   access.c     attributes, items, slices
 *   tests.c      the `is` tests, filters.c the filters (tables of one function each)
 *   render.c     scopes, expressions, statements, jinja_render
 * Errors jump to jinja_render's exit (jr_fail); values live in the render's arena. */
#ifndef UP_TEMPLATE_RENDER_H
#define UP_TEMPLATE_RENDER_H

#include "template/jinja_impl.h"

#include "core/check.h"

#define JINJA_MAX_RENDER_DEPTH 1000 /* eval and exec frames on the C stack */

typedef struct scope {
    struct scope *parent;
    const char **names;
    jinja_value **vals;
    size_t n, cap;
} scope;

/* a {% break %} or {% continue %} on its way out to its loop */
typedef enum { JR_CTL_NONE, JR_CTL_BREAK, JR_CTL_CONTINUE } jr_ctl;

typedef struct jinja_renderer {
    jinja_arena *a;
    const jinja_value *vars;
    jinja_opts o;
    jv_sb *out;
    scope *sc, *root;
    int turn;
    long long steps;
    int depth;  /* macro calls and loops */
    int rdepth; /* eval and exec frames */
    jr_ctl ctl;
    jmp_buf jmp;
    char *err;
    size_t errlen;
} jinja_renderer;

/* a call's evaluated arguments */
typedef struct {
    jinja_value **args;
    size_t n;
    const char **kwn;
    jinja_value **kwv;
    size_t nkw;
} cargs;

/* A global (self NULL) or a method bound to self; name is its table entry's, for messages. */
typedef jinja_value *jr_builtin_fn(jinja_renderer *r, const jnode *at, const char *name,
                                   jinja_value *self, cargs *c);
typedef struct jr_builtin {
    const char *name;
    jr_builtin_fn *call;
} jr_builtin;

/* ---- runtime.c ---- */
/* "line L col C: message" into the caller's buffer, then the jump to jinja_render's exit */
UP_NORETURN void jr_fail(jinja_renderer *r, const jnode *at, const char *fmt, ...) UP_PRINTF(3, 4);
UP_NORETURN void jr_fail_undef(jinja_renderer *r, const jnode *at, const jinja_value *v);
void jr_step(jinja_renderer *r, const jnode *at); /* counts one evaluation against max_steps */
/* a function value: a global, or a method bound to self */
jinja_value *jr_func(jinja_renderer *r, const jr_builtin *fn, jinja_value *self);
jinja_value *jr_int(jinja_renderer *r, long long i);
jinja_value *jr_bool(jinja_renderer *r, int b);
long long jr_as_int(jinja_renderer *r, const jnode *at, const jinja_value *v, const char *what);
int jr_is_num(const jinja_value *v);
double jr_as_f(const jinja_value *v);
long long jr_length(jinja_renderer *r, const jnode *at, const jinja_value *v); /* len() */
/* what for walks: list items, dict keys, code points */
jinja_value *jr_iter_list(jinja_renderer *r, const jnode *at, const jinja_value *v);
/* byte offsets of a string's code points: (*n + 1) entries */
size_t *jr_cp_offsets(jinja_renderer *r, const jinja_value *s, size_t *n);
jinja_value *jr_to_str(jinja_renderer *r, const jinja_value *v); /* str() */
/* argument `pos` or keyword `name`; NULL when absent */
jinja_value *jr_arg(const cargs *c, size_t pos, const char *name);
void jr_check_args(jinja_renderer *r, const jnode *at, const cargs *c, const char *what,
                   size_t maxpos, const char *const *kws);
jinja_value *jr_need_str(jinja_renderer *r, const jnode *at, jinja_value *v, const char *what);

/* ---- operators.c ---- */
/* x op y for the JOP_ comparisons (== != < <= > >= in, not in) */
int jr_compare(jinja_renderer *r, const jnode *at, const jinja_value *x, const jinja_value *y,
               int op);
int jr_contains(jinja_renderer *r, const jnode *at, const jinja_value *item,
                const jinja_value *seq);
/* a op b for the JOP_ arithmetic (+ - * / // % ** ~) */
jinja_value *jr_arith(jinja_renderer *r, const jnode *at, int op, jinja_value *a, jinja_value *b);

/* ---- strings.c ---- */
enum { JR_STRIP_LEFT = 1, JR_STRIP_RIGHT = 2, JR_STRIP_BOTH = 3 };
/* str.strip / lstrip / rstrip (which: JR_STRIP_*); chars NULL: whitespace */
jinja_value *jr_str_strip(jinja_renderer *r, const jinja_value *s, const jinja_value *chars,
                          int which);
/* str.split(sep, maxsplit); sep NULL: runs of whitespace; maxsplit < 0: no limit */
jinja_value *jr_str_split(jinja_renderer *r, const jnode *at, const jinja_value *s,
                          const jinja_value *sep, long long maxsplit);
/* str.replace(old, new, count); count < 0: all */
jinja_value *jr_str_replace(jinja_renderer *r, const jinja_value *s, const jinja_value *old,
                            const jinja_value *nw, long long count);
int jr_str_starts_with(const jinja_value *s, const jinja_value *x, int end);
typedef enum {
    JR_CASE_UPPER,
    JR_CASE_LOWER,
    JR_CASE_CAPITALIZE,
    JR_CASE_TITLE, /* str.title: a word starts after a character that is not cased */
    JR_CASE_WORDS, /* jinja2's title filter: each word upper-cased at its start, lowered after;
                    * a word starts after whitespace or one of - ( { [ < */
} jr_case;
/* Python's str.islower (lower) or str.isupper of the string s */
int jr_str_is_case(const jinja_value *s, int lower);
/* str.upper / lower / capitalize / title; nm names the operation in a refusal */
jinja_value *jr_str_case(jinja_renderer *r, const jnode *at, const jinja_value *s, jr_case how,
                         const char *nm);

/* ---- methods.c, globals.c ---- */
/* s's or d's method called name; NULL when it has none */
const jr_builtin *jr_method_find(const jinja_value *self, const char *name);
jinja_value *jr_dict_items(jinja_renderer *r, const jinja_value *d); /* dict.items() */
const jr_builtin *jr_global_find(const char *name);                  /* NULL: not a global */

/* ---- access.c ---- */
jinja_value *jr_get_attr(jinja_renderer *r, const jnode *at, jinja_value *obj, const char *name);
jinja_value *jr_get_item(jinja_renderer *r, const jnode *at, jinja_value *obj, jinja_value *key);
/* obj[s0:s1:s2] (NULL parts absent) */
jinja_value *jr_slice(jinja_renderer *r, const jnode *at, jinja_value *obj, const jinja_value *s0,
                      const jinja_value *s1, const jinja_value *s2);

/* ---- tests.c, filters.c (by the number jinja_test_id / jinja_filter_id gave) ---- */
int jr_apply_test(jinja_renderer *r, const jnode *at, int id, jinja_value *v, jinja_value **args,
                  size_t n);
jinja_value *jr_apply_filter(jinja_renderer *r, const jnode *at, int id, jinja_value *v, cargs *c);

#endif
