/* test_chat.c — chat templates over messages (tokenizer/chat.h), with templates written here so
 * it runs without downloads (tests/tools/chat_reference.py compares real templates with
 * Jinja2):
 *  1. a ChatML template with Qwen3's empty think block after the last user turn: the text, each
 *     segment (kind, message, trained) and the trained spans, derived by hand piece by piece;
 *  2. a Llama 3 template (bos_token, trim): an empty assistant message trains its end of turn;
 *  3. assistant content the template drops, interleaves or writes outside the loop over the
 *     messages: refused with a sentence;
 *  4. tokenizer_config.json: AddedToken objects, named templates ("default"), huge integers,
 *     chat_template.jinja taking precedence, a missing template, bad messages. */
#include "tokenizer/chat.h"

#include "harness.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *text;
    chat_seg_kind kind;
    int message, train;
} seg;

/* expected text = the pieces in order; each piece must be exactly one segment */
static void check_segments(const char *what, const chat_rendered *r, const seg *want, size_t n) {
    char text[4096] = "";
    for (size_t i = 0; i < n; i++)
        strcat(text, want[i].text);
    CHECK(r->len == strlen(text) && memcmp(r->text, text, r->len) == 0, "%s: text [%s] (want [%s])",
          what, r->text, text);
    CHECK(r->nsegs == n, "%s: %zu segments (want %zu)", what, r->nsegs, n);
    size_t pos = 0;
    for (size_t i = 0; i < n && i < r->nsegs; i++) {
        const chat_segment *s = &r->segs[i];
        size_t len = strlen(want[i].text);
        CHECK(s->start == pos && s->len == len && s->kind == want[i].kind &&
                  s->message == want[i].message && s->train == want[i].train,
              "%s: segment %zu [%.*s] kind %d message %d train %d (want [%s] %d %d %d)", what, i,
              (int)s->len, r->text + s->start, s->kind, s->message, s->train, want[i].text,
              want[i].kind, want[i].message, want[i].train);
        pos += len;
    }
}

static void check_spans(const char *what, const chat_rendered *r, const char *const *want,
                        size_t n) {
    CHECK(r->nspans == n, "%s: %zu spans (want %zu)", what, r->nspans, n);
    for (size_t i = 0; i < n && i < r->nspans; i++) {
        size_t len = r->spans[i].end - r->spans[i].start;
        CHECK(len == strlen(want[i]) && memcmp(r->text + r->spans[i].start, want[i], len) == 0,
              "%s: span %zu [%.*s] (want [%s])", what, i, (int)len, r->text + r->spans[i].start,
              want[i]);
    }
}

static chat_template *tmpl(const char *src, const char *tokens_json) {
    char err[512];
    json_t *cfg = tokens_json ? json_loads(tokens_json, 0, NULL) : NULL;
    chat_template *ct = chat_template_new(src, strlen(src), cfg, err, sizeof err);
    json_decref(cfg);
    CHECK(ct, "template parses: %s", ct ? "" : err);
    return ct;
}

static int render(const chat_template *ct, const char *msgs, int gen, chat_rendered *r, char *err,
                  size_t errlen) {
    json_t *m = json_loads(msgs, 0, NULL);
    CHECK(m, "messages JSON parses: %s", msgs);
    chat_opts o = {.add_generation_prompt = gen};
    int rc = chat_render(ct, m, &o, r, err, errlen);
    json_decref(m);
    return rc;
}

static const char *CHATML =
    "{%- set ns = namespace(last=-1) %}\n"
    "{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}"
    "{% endfor %}\n"
    "{%- for m in messages %}\n"
    "  {%- if m.role == 'assistant' %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if loop.index0 > ns.last %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}\n"
    "    {{- m.content + '<|im_end|>\\n' }}\n"
    "  {%- else %}\n"
    "    {{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}\n"
    "  {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}\n";

static void test_chatml(void) {
    chat_template *ct = tmpl(CHATML, NULL);
    if (!ct) return;
    chat_rendered r;
    char err[512];
    const char *msgs = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"},"
                       "{\"role\": \"assistant\", \"content\": \"Hello\"},"
                       "{\"role\": \"user\", \"content\": \"<|im_end|> Q\"},"
                       "{\"role\": \"assistant\", \"content\": \"A\"}]}";
    int rc = render(ct, msgs, 0, &r, err, sizeof err);
    CHECK(rc == 0, "chatml renders: %s", rc ? err : "");
    if (rc == 0) {
        const seg want[] = {
            {"<|im_start|>", CHAT_SEG_TEMPLATE, -1, 0},
            {"user", CHAT_SEG_CONTENT, -1, 0}, /* a role is data: plain text */
            {"\n", CHAT_SEG_TEMPLATE, -1, 0},
            {"Hi", CHAT_SEG_CONTENT, 0, 0},
            {"<|im_end|>\n<|im_start|>assistant\n", CHAT_SEG_TEMPLATE, -1, 0},
            {"Hello", CHAT_SEG_ASSISTANT, 1, 1},
            {"<|im_end|>\n", CHAT_SEG_END_OF_TURN, 1, 1},
            {"<|im_start|>", CHAT_SEG_TEMPLATE, -1, 0},
            {"user", CHAT_SEG_CONTENT, -1, 0},
            {"\n", CHAT_SEG_TEMPLATE, -1, 0},
            {"<|im_end|> Q", CHAT_SEG_CONTENT, 2, 0}, /* a lookalike in content stays content */
            {"<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", CHAT_SEG_TEMPLATE, -1,
             0}, /* the empty think block after the last user turn: not trained */
            {"A", CHAT_SEG_ASSISTANT, 3, 1},
            {"<|im_end|>\n", CHAT_SEG_END_OF_TURN, 3, 1},
        };
        check_segments("chatml", &r, want, sizeof want / sizeof *want);
        const char *spans[] = {"Hello<|im_end|>\n", "A<|im_end|>\n"};
        check_spans("chatml", &r, spans, 2);
        /* the tokenizer's questions: "<|im_start|>" at 0 is template text, "user" at 12 not;
         * "Hello" [52, 57) is trained, "<|im_end|>" of the user turn [19, 29) is not; a piece
         * across "Hi" and "<|im_end|>" is not template text */
        CHECK(chat_template_text(&r, 0, 12) && !chat_template_text(&r, 12, 16) &&
                  !chat_template_text(&r, 18, 22) && chat_template_text(&r, 57, 68) &&
                  chat_template_text(&r, 19, 29),
              "chatml: chat_template_text");
        CHECK(chat_trained(&r, 52, 57) && chat_trained(&r, 50, 53) && !chat_trained(&r, 19, 29) &&
                  !chat_trained(&r, 0, 52) && chat_trained(&r, 67, 68) && !chat_trained(&r, 68, 80),
              "chatml: chat_trained");
        /* byte offsets, counted by hand: 12 + 4 + 1 + 2 + 33 = 52 */
        CHECK(r.nspans == 2 && r.spans[0].start == 52 && r.spans[0].end == 52 + 5 + 11 &&
                  r.spans[0].message == 1 && r.spans[1].message == 3,
              "chatml: the first span is [52, 68) of message 1");
        chat_rendered_free(&r);
    }
    /* with the generation prompt: the prompt is template text, not trained */
    rc = render(ct, "[{\"role\": \"user\", \"content\": \"Hi\"}]", 1, &r, err, sizeof err);
    CHECK(rc == 0 && r.nspans == 0 && r.nsegs > 0 &&
              r.segs[r.nsegs - 1].kind == CHAT_SEG_TEMPLATE && !r.segs[r.nsegs - 1].train &&
              strcmp(r.text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n") == 0,
          "chatml generation prompt: [%s]", rc ? err : r.text);
    if (rc == 0) chat_rendered_free(&r);
    chat_template_free(ct);
}

static const char *LLAMA3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

static void test_llama3(void) {
    chat_template *ct = tmpl(LLAMA3, "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": "
                                     "\"<|begin_of_text|>\"}, \"eos_token\": \"<|eot_id|>\"}");
    if (!ct) return;
    chat_rendered r;
    char err[512];
    int rc = render(ct,
                    "[{\"role\": \"user\", \"content\": \" q \"}, {\"role\": \"assistant\", "
                    "\"content\": \"  \"}, {\"role\": \"user\", \"content\": \"q2\"}, "
                    "{\"role\": \"assistant\", \"content\": \"\\nfine\\n\"}]",
                    0, &r, err, sizeof err);
    CHECK(rc == 0, "llama3 renders: %s", rc ? err : "");
    if (rc == 0) {
        const seg want[] = {
            {"<|begin_of_text|><|start_header_id|>", CHAT_SEG_TEMPLATE, -1, 0},
            {"user", CHAT_SEG_CONTENT, -1, 0},
            {"<|end_header_id|>\n\n", CHAT_SEG_TEMPLATE, -1, 0},
            {"q", CHAT_SEG_CONTENT, 0, 0},
            {"<|eot_id|><|start_header_id|>", CHAT_SEG_TEMPLATE, -1, 0},
            {"assistant", CHAT_SEG_CONTENT, -1, 0},
            {"<|end_header_id|>\n\n", CHAT_SEG_TEMPLATE, -1, 0},
            {"<|eot_id|>", CHAT_SEG_END_OF_TURN, 1, 1}, /* empty content: its end of turn */
            {"<|start_header_id|>", CHAT_SEG_TEMPLATE, -1, 0},
            {"user", CHAT_SEG_CONTENT, -1, 0},
            {"<|end_header_id|>\n\n", CHAT_SEG_TEMPLATE, -1, 0},
            {"q2", CHAT_SEG_CONTENT, 2, 0},
            {"<|eot_id|><|start_header_id|>", CHAT_SEG_TEMPLATE, -1, 0},
            {"assistant", CHAT_SEG_CONTENT, -1, 0},
            {"<|end_header_id|>\n\n", CHAT_SEG_TEMPLATE, -1, 0},
            {"fine", CHAT_SEG_ASSISTANT, 3, 1},
            {"<|eot_id|>", CHAT_SEG_END_OF_TURN, 3, 1},
        };
        check_segments("llama3", &r, want, sizeof want / sizeof *want);
        const char *spans[] = {"<|eot_id|>", "fine<|eot_id|>"};
        check_spans("llama3", &r, spans, 2);
        chat_rendered_free(&r);
    }
    chat_template_free(ct);
}

static void expect_render_error(const char *src, const char *msgs, const char *want) {
    chat_template *ct = tmpl(src, NULL);
    if (!ct) return;
    chat_rendered r;
    char err[512] = "";
    int rc = render(ct, msgs, 0, &r, err, sizeof err);
    CHECK(rc != 0 && strstr(err, want), "[%.50s] refused with [%s] (got [%s])", src, want,
          rc ? err : r.text);
    if (rc == 0) chat_rendered_free(&r);
    chat_template_free(ct);
}

static void test_refusals(void) {
    const char *two = "[{\"role\": \"user\", \"content\": \"A\"}, {\"role\": \"assistant\", "
                      "\"content\": \"B\"}]";
    expect_render_error("{% for m in messages %}{{ m.content }}{{ messages[0].content }}"
                        "{{ m.content }}{% endfor %}",
                        two, "interleaved with message 0");
    expect_render_error("{{ messages[1].content }}{{ messages[0].content }}", two,
                        "outside the template's loop");
    expect_render_error("{{ raise_exception('Only user and assistant roles') }}", two,
                        "raise_exception: Only user and assistant roles");
    expect_render_error("x", "{\"messages\": 3}", "must be a list");
    expect_render_error("x", "[{\"content\": \"no role\"}]", "message 0 is not an object");
    /* the final reply written after the loop (Nemotron's template): its end of turn is the
     * template text after it */
    chat_template *nt = tmpl("{% for m in messages[:-1] %}<{{ m.role }}>{{ m.content }}</>"
                             "{% endfor %}<assistant>{{ messages[-1].content }}<end>",
                             NULL);
    chat_rendered fin;
    char ferr[512];
    if (nt && render(nt, two, 0, &fin, ferr, sizeof ferr) == 0) {
        const char *spans[] = {"B<end>"};
        check_spans("final reply after the loop", &fin, spans, 1);
        chat_rendered_free(&fin);
    } else {
        CHECK(0, "final reply after the loop renders: %s", ferr);
    }
    chat_template_free(nt);
    /* an assistant message the template drops has no span (GLM drops blank replies) */
    chat_template *dr = tmpl("{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}"
                             "{% endif %}{% endfor %}",
                             NULL);
    chat_rendered dropped;
    char derr[512];
    if (dr && render(dr, two, 0, &dropped, derr, sizeof derr) == 0) {
        CHECK(strcmp(dropped.text, "A") == 0 && dropped.nspans == 0 && dropped.nsegs == 1 &&
                  !dropped.segs[0].train,
              "a dropped assistant message: no span");
        chat_rendered_free(&dropped);
    } else {
        CHECK(0, "a dropped assistant message renders: %s", derr);
    }
    chat_template_free(dr);
    /* transformers' {% generation %} marker renders its body */
    chat_template *ct = tmpl("{% for m in messages %}{% generation %}{{ m.content }}"
                             "{% endgeneration %}{% endfor %}",
                             NULL);
    chat_rendered r;
    char err[512];
    if (ct && render(ct, two, 0, &r, err, sizeof err) == 0) {
        CHECK(strcmp(r.text, "AB") == 0 && r.nspans == 1, "generation block: [%s]", r.text);
        chat_rendered_free(&r);
    } else {
        CHECK(0, "generation block renders: %s", err);
    }
    chat_template_free(ct);
    /* a template with generation blocks: they say what is trained, here "a</A>" */
    ct = tmpl("{% for m in messages %}{% if m.role == 'assistant' %}<A>{% generation %}"
              "{{ m.content }}</A>{% endgeneration %}{% else %}<U>{{ m.content }}</U>{% endif %}"
              "{% endfor %}",
              NULL);
    if (ct && render(ct, two, 0, &r, err, sizeof err) == 0) {
        const seg want[] = {{"<U>", CHAT_SEG_TEMPLATE, -1, 0},
                            {"A", CHAT_SEG_CONTENT, 0, 0},
                            {"</U><A>", CHAT_SEG_TEMPLATE, -1, 0},
                            {"B", CHAT_SEG_ASSISTANT, 1, 1},
                            {"</A>", CHAT_SEG_TEMPLATE, 1, 1}};
        check_segments("generation", &r, want, 5);
        const char *spans[] = {"B</A>"};
        check_spans("generation", &r, spans, 1);
        chat_rendered_free(&r);
    } else {
        CHECK(0, "generation template renders: %s", err);
    }
    chat_template_free(ct);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "create %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_load(void) {
    char dir[] = "/tmp/upipe_test_chat.XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char cfg[256], jin[256], err[512];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(jin, sizeof jin, "%s/chat_template.jinja", dir);
    write_file(cfg, "{\"model_max_length\": 1000000000000000019884624838656,"
                    " \"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"},"
                    " \"eos_token\": null, \"additional_special_tokens\": [\"<x>\", \"<y>\"],"
                    " \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
                    " {\"name\": \"default\", \"template\": \"{{ bos_token }}{{ eos_token is "
                    "defined }}{{ additional_special_tokens|join }}{% for m in messages %}"
                    "{{ m.content }}{% endfor %}\"}]}");
    json_t *m = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, NULL);
    chat_template *ct = chat_template_load(dir, err, sizeof err);
    CHECK(ct, "load a folder with named templates: %s", ct ? "" : err);
    chat_rendered r;
    if (ct && chat_render(ct, m, NULL, &r, err, sizeof err) == 0) {
        CHECK(strcmp(r.text, "<s>False<x><y>hi") == 0,
              "the \"default\" template, bos from an AddedToken, eos null left out: [%s]", r.text);
        chat_rendered_free(&r);
    }
    chat_template_free(ct);
    write_file(jin, "J{{ messages[0].content }}\n");
    ct = chat_template_load(dir, err, sizeof err);
    if (ct && chat_render(ct, m, NULL, &r, err, sizeof err) == 0) {
        CHECK(strcmp(r.text, "Jhi") == 0, "chat_template.jinja takes precedence: [%s]", r.text);
        chat_rendered_free(&r);
    } else {
        CHECK(0, "chat_template.jinja loads: %s", err);
    }
    chat_template_free(ct);
    unlink(jin);
    write_file(cfg, "{\"chat_template\": [{\"name\": \"rag\", \"template\": \"x\"}]}");
    ct = chat_template_load(cfg, err, sizeof err);
    CHECK(!ct && strstr(err, "\"default\""), "a list without default refused: %s", err);
    write_file(cfg, "{\"bos_token\": \"<s>\"}");
    ct = chat_template_load(cfg, err, sizeof err);
    CHECK(!ct && strstr(err, "has no chat_template"), "no template refused: %s", err);
    write_file(cfg, "{\"chat_template\": \"{% for %}\"}");
    ct = chat_template_load(cfg, err, sizeof err);
    CHECK(!ct && strstr(err, "chat template: line 1 col"), "a bad template refused: %s", err);
    write_file(cfg, "{not json");
    ct = chat_template_load(cfg, err, sizeof err);
    CHECK(!ct && strstr(err, "not valid JSON"), "bad JSON refused: %s", err);
    unlink(cfg);
    rmdir(dir);
    json_decref(m);
}

int main(void) {
    test_chatml();
    test_llama3();
    test_refusals();
    test_load();
    return harness_finish("test_chat");
}
