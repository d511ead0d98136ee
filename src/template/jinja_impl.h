/* jinja_impl.h — private to src/template: the arena, values, tagged strings and the syntax tree. */
#ifndef UP_TEMPLATE_JINJA_IMPL_H
#define UP_TEMPLATE_JINJA_IMPL_H

#include "template/jinja.h"

#include <setjmp.h>
#include <stdint.h>

/* ---- arena (value.c): blocks freed together; an optional byte cap (0: none) makes jv_alloc fail
 * ---- */
struct jinja_arena {
    struct arena_block *head;
    size_t used, cap;
    jmp_buf *oom;  /* where a capped arena jumps when full (the render's error exit) */
    char *oom_err; /* ... after writing this message */
    size_t oom_errlen;
};
void *jv_alloc(jinja_arena *a, size_t n); /* zeroed, 16-aligned */
char *jv_strdup(jinja_arena *a, const char *s, size_t len);
/* An array of elem-byte elements full at *cap (n in use) grown to twice *cap (first when empty):
 * the new array, its first n elements copied, and *cap its capacity */
void *jv_grow(jinja_arena *a, const void *v, size_t n, size_t *cap, size_t first, size_t elem);

/* ---- values ---- */
typedef enum {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_FUNC,  /* a builtin global, or a method bound to `self` */
    JV_MACRO, /* a {% macro %} */
} jv_kind;

/* A run of a string: bytes [start, start + len) carry tag (turn only in the output). */
typedef jinja_run jv_run;

struct jinja_value {
    jv_kind kind;
    int is_ns;        /* a namespace() object: its attributes may be assigned */
    int depth;        /* containers: 1 + the deepest item's (bounded: JINJA_MAX_NEST) */
    int is_tuple;     /* a list that is a Python tuple (repr in parentheses) */
    int turn;         /* dict: the turn mark, -1 none */
    const char *name; /* undefined: the missing name (for messages); func: its name */
    union {
        int b;
        long long i;
        double f;
        struct {
            const char *s;
            size_t len;
            const jv_run *runs;
            size_t nruns;
        } str;
        struct {
            jinja_value **items;
            size_t n, cap;
        } list; /* tuples are lists */
        struct {
            jinja_value **keys, **vals;
            size_t n, cap;
        } dict;
        struct {
            const struct jr_builtin *fn; /* its entry in a table of globals or methods */
            jinja_value *self;           /* bound object, or NULL */
        } func;
        struct {
            const struct jnode *def;
        } macro;
    } u;
};

/* ---- string builder with runs (value.c) ---- */
typedef struct {
    jinja_arena *a;
    char *s;
    size_t len, cap;
    jv_run *runs;
    size_t nruns, rcap;
    int turn; /* the turn given to runs appended (-1 in strings) */
    int gen;  /* ... and whether they are inside a {% generation %} block */
} jv_sb;
void sb_init(jv_sb *b, jinja_arena *a);
void sb_put(jv_sb *b, const char *s, size_t len, int tag);
/* Appends bytes [from, to) of string value v with their tags (an empty range keeps a mark of
 * the run it touches). */
void sb_put_sub(jv_sb *b, const jinja_value *v, size_t from, size_t to);
void sb_put_str(jv_sb *b, const jinja_value *v);
jinja_value *sb_finish(jv_sb *b); /* the string value (the builder is spent) */

jinja_value *jv_undef(jinja_arena *a, const char *name);
jinja_value *jv_str_tag(jinja_arena *a, const char *s, size_t len, int tag);
jinja_value *jv_cstr(jinja_arena *a, const char *s); /* JINJA_TAG_DATA */
jinja_value *jv_sub(jinja_arena *a, const jinja_value *v, size_t from, size_t to);

/* ---- UTF-8 and Python's notion of characters (text.c) ---- */
/* The code point at s[i] (i < n), read by utf8proc_iterate; its byte length in *len. A byte
 * that does not start a well-formed sequence reads as itself, one byte long. */
uint32_t jv_cp_at(const char *s, size_t n, size_t i, size_t *len);
size_t jv_cp_count(const char *s, size_t n); /* code points, as jv_cp_at reads them */
/* the first occurrence of nd (nn bytes) in h (hn bytes); h itself for an empty nd; or NULL */
const char *jv_memfind(const char *h, size_t hn, const char *nd, size_t nn);
int py_isspace(uint32_t c); /* str.isspace() */

/* ---- Python semantics (value.c) ---- */
int jv_truthy(const jinja_value *v);
int jv_equal(const jinja_value *x, const jinja_value *y);
const char *jv_type_name(const jinja_value *v);
jinja_value *jv_dict_get(const jinja_value *d, const char *key, size_t klen);
void jv_dict_put(jinja_arena *a, jinja_value *d, jinja_value *key, jinja_value *v);
jinja_value *jv_dict_find(const jinja_value *d, const jinja_value *key);

/* ---- str(), repr(), json.dumps (repr.c) ---- */
/* str(v) appended to b (strings keep their tags; the rest is JINJA_TAG_DATA). */
void jv_str_into(jv_sb *b, const jinja_value *v);
/* repr(v) appended to b. */
void jv_repr_into(jv_sb *b, const jinja_value *v);
/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys): 0, or -1 when v holds
 * something JSON cannot (the offending type in *bad). indent < 0: none. */
int jv_json_into(jv_sb *b, const jinja_value *v, int indent, const char *item_sep,
                 const char *key_sep, int sort_keys, int depth, const char **bad);
void py_float_repr(char *buf, size_t len, double f);
/* out (a string made from src by tojson or str()) gets the tag of src's strings when they all
 * carry one caller's tag (>= JINJA_TAG_USER): a message's tool call as JSON is that message's
 * text, not data. */
void jv_retag_from(jinja_value *out, const jinja_value *src);

/* ---- syntax tree ---- */
typedef enum {
    /* expressions */
    JN_LIT,    /* lit */
    JN_NAME,   /* name */
    JN_LIST,   /* kids */
    JN_TUPLE,  /* kids */
    JN_DICT,   /* kids: key, value, key, value ... */
    JN_ATTR,   /* a.name */
    JN_ITEM,   /* a[b] */
    JN_SLICE,  /* a[b:c:d] (NULL parts absent) */
    JN_CALL,   /* a(kids, kw) */
    JN_FILTER, /* a | name(kids, kw); a NULL: a filter block's body */
    JN_TEST,   /* a is [not: op] name(kids) */
    JN_NOT,    /* not a */
    JN_NEG,    /* -a */
    JN_POS,    /* +a */
    JN_BIN,    /* a op b: + - * / // % ** ~ */
    JN_CMP,    /* a op b: == != < <= > >= in notin */
    JN_AND,
    JN_OR,
    JN_COND, /* b if a else c (c may be NULL) */
    /* statements */
    JS_BODY,       /* kids */
    JS_TEXT,       /* lit: a template string */
    JS_OUT,        /* {{ a }} */
    JS_IF,         /* if a: b, else c (c: body, or another JS_IF for elif) */
    JS_FOR,        /* for targets(names) in a [if d]: b else c */
    JS_SET,        /* set targets = a; or set name.attr = a (attr set) */
    JS_SETBLOCK,   /* set name %} b {% endset */
    JS_MACRO,      /* macro name(params = defaults) b */
    JS_GENERATION, /* {% generation %} b {% endgeneration %} */
    JS_BREAK,
    JS_CONTINUE,
} jn_kind;

enum {
    JOP_ADD = 1,
    JOP_SUB,
    JOP_MUL,
    JOP_DIV,
    JOP_FLOORDIV,
    JOP_MOD,
    JOP_POW,
    JOP_CONCAT,
    JOP_EQ,
    JOP_NE,
    JOP_LT,
    JOP_LE,
    JOP_GT,
    JOP_GE,
    JOP_IN,
    JOP_NOTIN
};

typedef struct jnode {
    jn_kind kind;
    int op;        /* JOP_*; JN_TEST: 1 when negated */
    int line, col; /* where it starts in the template */
    struct jnode *a, *b, *c, *d;
    struct jnode **kids;
    size_t nkids;
    const char **kwnames;  /* call keywords; macro parameter names */
    struct jnode **kwvals; /* their values; macro defaults (NULL: none) */
    size_t nkw;
    const char **names; /* for / set targets */
    size_t nnames;
    const char *name; /* name, attribute, filter, test, macro; JS_SET: attribute target */
    jinja_value *lit;
    int fn; /* filter / test number, resolved when parsing */
} jnode;

struct jinja_template {
    jinja_arena *arena; /* the tree and its literals */
    jnode *root;
};

/* Filters and tests known to the parser (filters.c, tests.c); -1 when unknown. */
int jinja_filter_id(const char *name);
int jinja_test_id(const char *name);

#define JINJA_MAX_DEPTH 200 /* nesting of expressions and blocks when parsing */
/* nesting of values (JSON input stops at 2048): deeper is refused, so repr, == and tojson never
 * recurse deeper than this */
#define JINJA_MAX_NEST 4096

#endif
