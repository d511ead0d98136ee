/* jinja_eval.h — private to jinja.c (the evaluator) and jinja_lib.c (filters, tests, methods,
 * globals): the render state and the functions they share. Errors jump to jinja_render's exit
 * (jr_fail); values live in the render's arena. */
#ifndef UP_JINJA_EVAL_H
#define UP_JINJA_EVAL_H

#include "tokenizer/jinja_impl.h"

#include "core/check.h"

#define JINJA_MAX_RENDER_DEPTH 1000 /* eval and exec frames on the C stack */

typedef struct scope {
    struct scope *parent;
    const char **names;
    jinja_value **vals;
    size_t n, cap;
} scope;

typedef struct {
    jinja_arena *a;
    const jinja_value *vars;
    jinja_opts o;
    jv_sb *out;
    scope *sc, *root;
    int turn;
    long long steps;
    int depth;  /* macro calls and loops */
    int rdepth; /* eval and exec frames */
    int ctl;    /* 1 break, 2 continue */
    jmp_buf jmp;
    char *err;
    size_t errlen;
} R;

typedef struct {
    jinja_value **args;
    size_t n;
    const char **kwn;
    jinja_value **kwv;
    size_t nkw;
} cargs;

/* globals and methods by number (jr_func_names) */
enum {
    G_RANGE,
    G_NAMESPACE,
    G_DICT,
    G_RAISE,
    G_STRFTIME,
    G_NGLOBALS,
    M_STRIP = G_NGLOBALS,
    M_LSTRIP,
    M_RSTRIP,
    M_SPLIT,
    M_STARTSWITH,
    M_ENDSWITH,
    M_UPPER,
    M_LOWER,
    M_TITLE,
    M_CAPITALIZE,
    M_REPLACE,
    M_FIND,
    M_COUNT,
    M_JOIN,
    M_ISDIGIT,
    M_RSPLIT,
    M_NSTR,
    M_ITEMS = M_NSTR,
    M_KEYS,
    M_VALUES,
    M_GET,
    M_NDICT
};
extern const char *const jr_func_names[];

/* "line L col C: message" into the caller's buffer, then the jump to jinja_render's exit */
UP_NORETURN void jr_fail(R *r, const jnode *at, const char *fmt, ...) UP_PRINTF(3, 4);
UP_NORETURN void jr_fail_undef(R *r, const jnode *at, const jinja_value *v);
void jr_step(R *r, const jnode *at);                   /* counts one evaluation against max_steps */
jinja_value *jr_func(R *r, int id, jinja_value *self); /* a global, or a method bound to self */
jinja_value *jr_int(R *r, long long i);
jinja_value *jr_bool(R *r, int b);
long long jr_as_int(R *r, const jnode *at, const jinja_value *v, const char *what);
int jr_is_num(const jinja_value *v);
double jr_as_f(const jinja_value *v);
long long jr_length(R *r, const jnode *at, const jinja_value *v);       /* len() */
jinja_value *jr_iter_list(R *r, const jnode *at, const jinja_value *v); /* what for walks */
int jr_compare(R *r, const jnode *at, const jinja_value *x, const jinja_value *y, int op);
int jr_contains(R *r, const jnode *at, const jinja_value *item, const jinja_value *seq);
jinja_value *jr_get_attr(R *r, const jnode *at, jinja_value *obj, const char *name);
jinja_value *jr_get_item(R *r, const jnode *at, jinja_value *obj, jinja_value *key);
/* byte offsets of a string's code points: (*n + 1) entries */
size_t *jr_cp_offsets(R *r, const jinja_value *s, size_t *n);
jinja_value *jr_to_str(R *r, const jinja_value *v); /* str() */
jinja_value *jr_arg(const cargs *c, size_t pos, const char *name);
void jr_check_args(R *r, const jnode *at, const cargs *c, const char *what, size_t maxpos,
                   const char *const *kws);
jinja_value *jr_need_str(R *r, const jnode *at, jinja_value *v, const char *what);
jinja_value *jr_call_func(R *r, const jnode *at, jinja_value *f, cargs *c);
int jr_apply_test(R *r, const jnode *at, int id, jinja_value *v, jinja_value **args, size_t n);
jinja_value *jr_apply_filter(R *r, const jnode *at, int id, jinja_value *v, cargs *c);

#endif
