/* test_jinja.c — the template interpreter (template/jinja.h):
 *  1. fixtures/chat/jinja_cases.json: small templates on each language feature with the text
 *     (or the failure) Jinja2 gave for them (tests/tools/jinja_cases.py checks the file against
 *     Jinja2 where it is installed); each must render to the same bytes, or fail too;
 *  2. provenance: the tags of literals, data and passed strings through trim, concatenation,
 *     slicing, split and replace; zero-length marks of empty strings; turn marks in loops;
 *  3. refusals: unknown tags, filters and tests named with line and column when parsing;
 *  4. robustness: unclosed tags, deep nesting, endless loops, memory blow-up and runaway
 *     macros end in one message, never a crash. */
#include "template/jinja.h"

#include "harness.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* renders src over vars (a JSON object, strings tagged JINJA_TAG_DATA); 0 and out, or -1 */
static int render_json(const char *src, const json_t *vars, const jinja_opts *o, jinja_output *out,
                       char *err, size_t errlen) {
    jinja_template *t = jinja_parse(src, strlen(src), err, errlen);
    if (!t) return -1;
    jinja_arena *a = jinja_arena_new();
    jinja_value *v = jinja_from_json(a, vars, JINJA_TAG_DATA);
    int rc = jinja_render(t, v, o, out, err, errlen);
    jinja_arena_free(a);
    jinja_template_free(t);
    return rc;
}

static void test_cases(void) {
    json_error_t je;
    json_t *root = json_load_file("fixtures/chat/jinja_cases.json", 0, &je);
    CHECK(root, "fixtures/chat/jinja_cases.json loads (%s)", je.text);
    if (!root) return;
    const json_t *vars = json_object_get(root, "vars");
    jinja_opts o = {.now = json_integer_value(json_object_get(root, "now"))};
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *src = json_string_value(json_object_get(c, "template"));
        const json_t *exp = json_object_get(c, "expect");
        const json_t *text = json_object_get(exp, "text");
        jinja_output out;
        char err[512];
        int rc = render_json(src, vars, &o, &out, err, sizeof err);
        if (text) {
            int ok = rc == 0 && out.len == json_string_length(text) &&
                     memcmp(out.text, json_string_value(text), out.len) == 0;
            CHECK(ok, "case %zu %s: expected [%s], got [%s]", i, src, json_string_value(text),
                  rc == 0 ? out.text : err);
        } else {
            const char *want = json_string_value(json_object_get(exp, "error"));
            CHECK(rc != 0, "case %zu %s: should fail (%s), rendered [%s]", i, src, want,
                  rc == 0 ? out.text : "");
            if (rc != 0 && strstr(src, "raise_exception")) {
                char m[600];
                snprintf(m, sizeof m, "raise_exception: %s", want);
                CHECK(strstr(err, m) != NULL, "case %zu: message [%s] holds [%s]", i, err, m);
            }
        }
        if (rc == 0) jinja_output_free(&out);
    }
    json_decref(root);
}

/* the tag and turn of the byte at pos (zero-length runs skipped) */
static int tag_at(const jinja_output *o, size_t pos, int *turn) {
    for (size_t i = 0; i < o->nruns; i++)
        if (pos >= o->runs[i].start && pos < o->runs[i].start + o->runs[i].len) {
            if (turn) *turn = o->runs[i].turn;
            return o->runs[i].tag;
        }
    return -100;
}

static int runs_cover(const jinja_output *o) {
    size_t pos = 0;
    for (size_t i = 0; i < o->nruns; i++) {
        if (o->runs[i].start != pos) return 0;
        pos += o->runs[i].len;
    }
    return pos == o->len;
}

static void test_provenance(void) {
    const char *src = "{{ '<' + x|trim + '>' }}{{ x[2:4] }}{{ y.split(',')[1] }}"
                      "{{ y.replace(',', ';') }}{{ n }}{{ e }}|{{ 'a' + e + 'b' }}";
    char err[512];
    jinja_template *t = jinja_parse(src, strlen(src), err, sizeof err);
    CHECK(t, "provenance template parses: %s", t ? "" : err);
    if (!t) return;
    jinja_arena *a = jinja_arena_new();
    jinja_value *v = jinja_new_dict(a);
    jinja_dict_set(a, v, "x", jinja_new_string(a, "  hi  ", 6, 5));
    jinja_dict_set(a, v, "y", jinja_new_string(a, "p,q", 3, 6));
    jinja_dict_set(a, v, "n", jinja_new_int(a, 42));
    jinja_dict_set(a, v, "e", jinja_new_string(a, "", 0, 7));
    jinja_output o;
    int rc = jinja_render(t, v, NULL, &o, err, sizeof err);
    CHECK(rc == 0, "provenance renders: %s", rc ? err : "");
    if (rc == 0) {
        /* "<hi>" "hi" "q" "p;q" "42" "" "|" "a" "" "b" */
        CHECK(strcmp(o.text, "<hi>hiqp;q42|ab") == 0, "text [%s]", o.text);
        CHECK(runs_cover(&o), "runs cover the text in order");
        CHECK(tag_at(&o, 0, NULL) == JINJA_TAG_TEMPLATE && tag_at(&o, 1, NULL) == 5 &&
                  tag_at(&o, 2, NULL) == 5 && tag_at(&o, 3, NULL) == JINJA_TAG_TEMPLATE,
              "trim keeps the passed string's tag, literals are template text");
        CHECK(tag_at(&o, 4, NULL) == 5 && tag_at(&o, 5, NULL) == 5, "a slice keeps the tag");
        CHECK(tag_at(&o, 6, NULL) == 6, "split pieces keep the tag");
        CHECK(tag_at(&o, 7, NULL) == 6 && tag_at(&o, 8, NULL) == JINJA_TAG_TEMPLATE &&
                  tag_at(&o, 9, NULL) == 6,
              "replace: the kept text its tag, the replacement the literal's");
        CHECK(tag_at(&o, 10, NULL) == JINJA_TAG_DATA, "a number printed is data");
        /* the empty string e: a zero-length run of tag 7 at 12 and at 14 (between a and b) */
        int marks = 0;
        for (size_t i = 0; i < o.nruns; i++)
            if (o.runs[i].len == 0 && o.runs[i].tag == 7 &&
                (o.runs[i].start == 12 || o.runs[i].start == 14))
                marks++;
        CHECK(marks == 2, "an empty string leaves a mark where it was written (%d of 2)", marks);
        jinja_output_free(&o);
    }
    jinja_arena_free(a);
    jinja_template_free(t);

    /* turn marks: bytes written while a marked dict is the loop item carry its turn */
    src = "<{% for m in ms %}[{{ m.c }}{% for k in [1] %}.{% endfor %}]{% endfor %}>";
    t = jinja_parse(src, strlen(src), err, sizeof err);
    a = jinja_arena_new();
    v = jinja_new_dict(a);
    jinja_value *ms = jinja_new_list(a);
    for (int k = 0; k < 2; k++) {
        jinja_value *m = jinja_new_dict(a);
        jinja_dict_set(a, m, "c", jinja_new_string(a, k ? "B" : "A", 1, JINJA_TAG_USER + k));
        jinja_dict_set_turn(m, k);
        jinja_list_push(a, ms, m);
    }
    jinja_dict_set(a, v, "ms", ms);
    rc = jinja_render(t, v, NULL, &o, err, sizeof err);
    CHECK(rc == 0 && strcmp(o.text, "<[A.][B.]>") == 0, "turn template renders [%s]",
          rc ? err : o.text);
    if (rc == 0) {
        int tu[10];
        for (int i = 0; i < 10; i++)
            tag_at(&o, (size_t)i, &tu[i]);
        CHECK(tu[0] == -1 && tu[1] == 0 && tu[2] == 0 && tu[3] == 0 && tu[4] == 0 && tu[5] == 1 &&
                  tu[8] == 1 && tu[9] == -1,
              "turns: outside -1, each message's iteration its index, inner loops keep it");
        jinja_output_free(&o);
    }
    jinja_arena_free(a);
    jinja_template_free(t);
}

static void expect_parse_error(const char *src, const char *want) {
    char err[512] = "";
    jinja_template *t = jinja_parse(src, strlen(src), err, sizeof err);
    CHECK(!t && strstr(err, want), "parse of [%.60s] refused with [%s] (got [%s])", src, want, err);
    jinja_template_free(t);
}

static void expect_render_error(const char *src, const jinja_opts *o, const char *want) {
    char err[512] = "";
    jinja_output out;
    json_t *vars = json_object();
    int rc = render_json(src, vars, o, &out, err, sizeof err);
    json_decref(vars);
    CHECK(rc != 0 && strstr(err, want), "render of [%.60s] fails with [%s] (got [%s])", src, want,
          rc ? err : out.text);
    if (rc == 0) jinja_output_free(&out);
}

static void test_refusals(void) {
    expect_parse_error("ok\n  {% include 'x.j2' %}",
                       "line 2 col 6: tag 'include' is not supported");
    expect_parse_error("{% extends 'base' %}", "tag 'extends' is not supported");
    expect_parse_error("{% raw %}x{% endraw %}", "tag 'raw' is not supported");
    expect_parse_error("{{ x | wordcount }}", "line 1 col 8: filter 'wordcount' is not supported");
    expect_parse_error("{{ x is prime }}", "test 'prime' is not supported");
    expect_parse_error("{% for x in y recursive %}{% endfor %}", "recursive for loops");
    expect_parse_error("{{ f(*args) }}", "*args");
    expect_parse_error("{{ 'a' }", "not closed");
    expect_parse_error("{{ x", "not closed");
    expect_parse_error("{% if x %}open", "'{% endif %}'");
    expect_parse_error("{% endfor %}", "unexpected 'endfor'");
    expect_parse_error("{# never closed", "unclosed comment");
    expect_parse_error("{{ 'abc }}", "unterminated string");
    expect_parse_error("{{ 99999999999999999999 }}", "too large");
    expect_parse_error("{{ '\\N{DASH}' }}", "\\N{...}");
    expect_parse_error("{{ x @ y }}", "unexpected character '@'");
    expect_render_error("{{ 'x'.format(1) }}", NULL, "'format' is undefined");
    expect_render_error("{{ 'a %s' % 1 }}", NULL, "string formatting");
    expect_render_error("{{ 'straße'|upper }}", NULL, "U+00DF is not supported");
    expect_render_error("{{ 'ΟΔΟΣ'.lower() }}", NULL, "U+03A3 is not supported");
    expect_render_error("{{ x|tojson }}", NULL, "is not JSON serializable");
    expect_render_error("line1\n{{ raise_exception('stop here') }}", NULL,
                        "line 2 col 4: raise_exception: stop here");
    expect_render_error("{{ 9223372036854775807 + 1 }}", NULL, "integer overflow");
}

static void test_limits(void) {
    /* nesting deeper than the parser allows: refused, no stack overflow */
    size_t n = 5000;
    char *deep = malloc(2 * n + 16);
    strcpy(deep, "{{ ");
    for (size_t i = 0; i < n; i++)
        strcat(deep, "(");
    strcat(deep, "1");
    for (size_t i = 0; i < n; i++)
        strcat(deep, ")");
    strcat(deep, " }}");
    expect_parse_error(deep, "nested more than");
    strcpy(deep, "");
    for (size_t i = 0; i < 300; i++)
        strcat(deep, "{% if 1 %}");
    expect_parse_error(deep, "nested more than");
    free(deep);
    jinja_opts small = {.max_steps = 100000, .max_bytes = (size_t)32 << 20};
    expect_render_error("{% for i in range(1000000) %}{{ i }}{% endfor %}", &small, "steps");
    expect_render_error("{% set ns = namespace(s='xy') %}{% for i in range(40) %}"
                        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
                        &small, "MiB of memory");
    expect_render_error("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", &small,
                        "nested deeper");
    expect_render_error("{{ 'ab' * 100000000 }}", &small, "");
    /* left-deep chains and long elif chains: refused, not a stack overflow */
    char *chain = malloc(200000);
    strcpy(chain, "{{ 1");
    for (int i = 0; i < 20000; i++)
        strcat(chain + 4 + 4 * i, " + 1");
    strcat(chain, " }}");
    expect_render_error(chain, &small, "nests deeper than");
    strcpy(chain, "{% if 0 %}");
    size_t len = strlen(chain);
    for (int i = 0; i < 5000; i++) {
        memcpy(chain + len, "{% elif 0 %}", 12);
        len += 12;
    }
    strcpy(chain + len, "{% endif %}");
    expect_parse_error(chain, "nested more than");
    free(chain);
    /* a value wrapped in a loop: refused before repr or == could recurse that deep */
    expect_render_error("{% set ns = namespace(x=[]) %}{% for i in range(20000) %}"
                        "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x == ns.x }}{{ ns.x }}",
                        &small, "nested deeper than 4096");
}

int main(void) {
    test_cases();
    test_provenance();
    test_refusals();
    test_limits();
    return harness_finish("test_jinja");
}
