/* jinja.h — a Jinja2 subset for HF chat templates, rendered as transformers renders them
 * (ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, loop controls, the
 * raise_exception and strftime_now globals, a tojson filter that keeps non-ASCII text).
 *
 * What it knows (DESIGN.md §6.2): {{ }}, {% if/elif/else %}, {% for %} (loop.*, else, an if
 * filter, unpacking, break/continue), {% set %} (names, ns.attr, blocks), {% macro %},
 * {% generation %}, comments, whitespace control; Python values and their str()/repr(); the
 * filters, tests, string and dict methods chat templates use. A construct it lacks is refused
 * with "line L col C: ..." naming it: unknown tags and filters when parsing, unknown methods and
 * type errors when rendering. Nothing crashes on any template: parse depth, render depth, steps
 * and memory are bounded (jinja_opts).
 *
 * Provenance. Every string byte carries an integer tag: JINJA_TAG_TEMPLATE for the template's
 * own literals, JINJA_TAG_DATA for text the interpreter makes (numbers, repr, JSON), and the
 * caller's tags (>= JINJA_TAG_USER) for strings it passes in. The tags follow the bytes through
 * concatenation, slicing, strip, split, replace and the rest, so the output tells which bytes
 * came from which input. A dict may carry a turn number: while a for loop's item is such a dict,
 * the bytes written get that turn (chat.c marks each message with its index). Empty substrings
 * keep a zero-length run, so an empty message still has a position in the output. */
#ifndef UP_TEMPLATE_JINJA_H
#define UP_TEMPLATE_JINJA_H

#include <jansson.h>
#include <stddef.h>

enum { JINJA_TAG_TEMPLATE = 0, JINJA_TAG_DATA = 1, JINJA_TAG_USER = 2 };

typedef struct jinja_arena jinja_arena;
typedef struct jinja_value jinja_value;
typedef struct jinja_template jinja_template;

/* One run of output bytes [start, start + len) with one tag, written during turn `turn` (-1:
 * outside any marked loop item), inside a {% generation %} block or not. Runs are in order and
 * cover the text; len may be 0 (a mark). */
typedef struct {
    size_t start, len;
    int tag, turn;
    int gen; /* written inside a {% generation %} block */
} jinja_run;

typedef struct {
    char *text; /* (len + 1) bytes, NUL-terminated; the text may hold NULs of its own */
    size_t len;
    jinja_run *runs; /* (nruns) */
    size_t nruns;
} jinja_output;

typedef struct {
    long long now;       /* strftime_now's time, seconds since the epoch, formatted in UTC */
    size_t max_bytes;    /* memory one render may use; 0: 512 MiB */
    long long max_steps; /* expression and statement evaluations; 0: 100 million */
} jinja_opts;

/* Parses a template (len bytes, any content). The template, or NULL with err ("line L col C:
 * message"). Pair with jinja_template_free. */
jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t errlen);
void jinja_template_free(jinja_template *t);

/* Values for the render's variables live in an arena, freed at once. The constructors stop the
 * process only when malloc fails. Keys and strings are copied. */
jinja_arena *jinja_arena_new(void);
void jinja_arena_free(jinja_arena *a);
jinja_value *jinja_new_none(jinja_arena *a);
jinja_value *jinja_new_bool(jinja_arena *a, int b);
jinja_value *jinja_new_int(jinja_arena *a, long long i);
jinja_value *jinja_new_float(jinja_arena *a, double f);
jinja_value *jinja_new_string(jinja_arena *a, const char *s, size_t len, int tag);
jinja_value *jinja_new_list(jinja_arena *a);
void jinja_list_push(jinja_arena *a, jinja_value *list, jinja_value *v);
jinja_value *jinja_new_dict(jinja_arena *a);
/* Sets (or replaces) key in an insertion-ordered dict. */
void jinja_dict_set(jinja_arena *a, jinja_value *dict, const char *key, jinja_value *v);
/* The turn the bytes get while this dict is a for loop's item (see above). */
void jinja_dict_set_turn(jinja_value *dict, int turn);
/* A JSON value as a Jinja value (objects keep their key order); every string gets tag. */
jinja_value *jinja_from_json(jinja_arena *a, const json_t *j, int tag);

/* Renders t with the variables of the dict `vars` (over the globals range, dict, namespace,
 * raise_exception, strftime_now). 0 and *out (pair with jinja_output_free), or -1 with err:
 * "line L col C: message" (raise_exception's message is "raise_exception: MSG"). opts may be
 * NULL (defaults, now = 0). */
int jinja_render(const jinja_template *t, const jinja_value *vars, const jinja_opts *opts,
                 jinja_output *out, char *err, size_t errlen);
void jinja_output_free(jinja_output *out);

#endif
