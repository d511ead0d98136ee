/* fuzz_jinja.c — any bytes as a chat template: parsed, then rendered over a conversation (tagged
 * strings, turn marks, numbers, a None) with small limits; the runs must cover the output in
 * order. Errors are fine; a crash, UB, a leak or a hang is not. */
#include "template/jinja.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    jinja_template *t = jinja_parse((const char *)data, size, err, sizeof err);
    if (!t) return 0;
    jinja_arena *a = jinja_arena_new();
    jinja_value *v = jinja_new_dict(a);
    jinja_value *ms = jinja_new_list(a);
    static const char *const role[] = {"system", "user", "assistant", "user", "assistant"};
    static const char *const content[] = {" sys ", "Grüße 👋", "", "<think>r</think>a", "x"};
    for (int k = 0; k < 5; k++) {
        jinja_value *m = jinja_new_dict(a);
        jinja_dict_set(a, m, "role", jinja_new_string(a, role[k], strlen(role[k]), JINJA_TAG_DATA));
        jinja_dict_set(a, m, "content",
                       jinja_new_string(a, content[k], strlen(content[k]), JINJA_TAG_USER + k));
        jinja_dict_set_turn(m, k);
        jinja_list_push(a, ms, m);
    }
    jinja_dict_set(a, v, "messages", ms);
    jinja_dict_set(a, v, "bos_token", jinja_new_string(a, "<s>", 3, JINJA_TAG_TEMPLATE));
    jinja_dict_set(a, v, "add_generation_prompt", jinja_new_bool(a, 1));
    jinja_dict_set(a, v, "tools", jinja_new_none(a));
    jinja_dict_set(a, v, "n", jinja_new_int(a, -3));
    jinja_dict_set(a, v, "f", jinja_new_float(a, 0.5));
    jinja_opts o = {.now = 1764633600, .max_steps = 200000, .max_bytes = (size_t)64 << 20};
    jinja_output out;
    if (jinja_render(t, v, &o, &out, err, sizeof err) == 0) {
        size_t pos = 0;
        for (size_t i = 0; i < out.nruns; i++) {
            if (out.runs[i].start != pos) abort();
            pos += out.runs[i].len;
        }
        if (pos != out.len) abort();
        jinja_output_free(&out);
    }
    jinja_arena_free(a);
    jinja_template_free(t);
    return 0;
}
