/* chat_render — renders conversations with a chat template for the comparison against Jinja2
 * (tests/tools/chat_reference.py) and prints each result as one JSON line:
 *   {"text": "...", "spans": [[start, end], ...], "segments": [[start, len, kind, message, train]]}
 * or {"error": "..."}. Byte offsets; kind: 0 template, 1 content, 2 assistant, 3 end of turn.
 *
 * Usage: chat_render (--config MODEL_DIR_OR_TOKENIZER_CONFIG | --template FILE [--tokens JSON])
 *                    --cases CASES.json
 * CASES.json: a list of {"messages": [...], "add_generation_prompt": bool, "now": seconds,
 * "kwargs": {...}}. */
#include "tokenizer/chat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *config = NULL, *tmpl = NULL, *tokens = NULL, *cases_path = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--config"))
            config = argv[i + 1];
        else if (!strcmp(argv[i], "--template"))
            tmpl = argv[i + 1];
        else if (!strcmp(argv[i], "--tokens"))
            tokens = argv[i + 1];
        else if (!strcmp(argv[i], "--cases"))
            cases_path = argv[i + 1];
        else {
            fprintf(stderr, "chat_render: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if ((!config && !tmpl) || !cases_path) {
        fprintf(stderr, "usage: chat_render (--config PATH | --template FILE [--tokens JSON]) "
                        "--cases CASES.json\n");
        return 2;
    }
    char err[1024];
    chat_template *ct = NULL;
    if (config) {
        ct = chat_template_load(config, err, sizeof err);
    } else {
        FILE *f = fopen(tmpl, "rb");
        if (!f) {
            perror(tmpl);
            return 2;
        }
        static char src[1 << 20];
        size_t n = fread(src, 1, sizeof src, f);
        fclose(f);
        json_t *tok = NULL;
        if (tokens) {
            json_error_t je;
            tok = json_load_file(tokens, 0, &je);
            if (!tok) {
                fprintf(stderr, "chat_render: %s: %s\n", tokens, je.text);
                return 2;
            }
        }
        ct = chat_template_new(src, n, tok, err, sizeof err);
        json_decref(tok);
    }
    if (!ct) {
        json_t *o = json_pack("{s:s}", "template_error", err);
        char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
        printf("%s\n", s);
        free(s);
        json_decref(o);
        return 0;
    }
    json_error_t je;
    json_t *cases = json_load_file(cases_path, 0, &je);
    if (!json_is_array(cases)) {
        fprintf(stderr, "chat_render: %s: not a JSON list (%s)\n", cases_path, je.text);
        return 2;
    }
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        chat_opts o = {0};
        o.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt"));
        o.now = json_integer_value(json_object_get(c, "now"));
        o.kwargs = json_object_get(c, "kwargs");
        chat_rendered r;
        json_t *res;
        if (chat_render(ct, json_object_get(c, "messages"), &o, &r, err, sizeof err) == 0) {
            json_t *spans = json_array(), *segs = json_array();
            for (size_t k = 0; k < r.nspans; k++)
                json_array_append_new(spans, json_pack("[I,I]", (json_int_t)r.spans[k].start,
                                                       (json_int_t)r.spans[k].end));
            for (size_t k = 0; k < r.nsegs; k++)
                json_array_append_new(segs,
                                      json_pack("[I,I,i,i,b]", (json_int_t)r.segs[k].start,
                                                (json_int_t)r.segs[k].len, (int)r.segs[k].kind,
                                                r.segs[k].message, r.segs[k].train));
            res = json_pack("{s:s%,s:o,s:o}", "text", r.text, r.len, "spans", spans, "segments",
                            segs);
            chat_rendered_free(&r);
        } else {
            res = json_pack("{s:s}", "error", err);
        }
        char *s = json_dumps(res, JSON_COMPACT | JSON_ENSURE_ASCII);
        printf("%s\n", s);
        free(s);
        json_decref(res);
    }
    json_decref(cases);
    chat_template_free(ct);
    return 0;
}
