/* fuzz_tokenizer.c — tok_load on any tokenizer.json; when it loads, the input itself encoded as
 * text (special tokens refused and allowed, cut at tok_cut_point) and decoded back. */
#include "tokenizer/tokenizer.h"

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[1024];
    tokenizer *t = tok_load(fuzz_write("tokenizer.json", data, size), err, sizeof err);
    if (t == NULL) return 0;
    tok_encoder *e = tok_encoder_new(t);
    tok_ids ids = {0};
    tok_text back = {0};
    if (e != NULL) {
        const char *text = (const char *)data;
        size_t cut = tok_cut_point(t, text, size);
        tok_encode(e, text, size, TOK_ADD_SPECIAL, &ids);
        tok_encode(e, text, size, TOK_ALLOW_SPECIAL, &ids);
        tok_encode(e, text, cut, 0, &ids);
        tok_encode(e, text + cut, size - cut, TOK_CONTINUE, &ids);
        tok_decode(t, ids.ids, ids.n, 0, &back, err, sizeof err);
    }
    free(ids.ids);
    free(back.s);
    tok_encoder_free(e);
    tok_free(t);
    return 0;
}
