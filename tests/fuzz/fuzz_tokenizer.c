/* fuzz_tokenizer.c — tok_load on any tokenizer.json; when it loads, the input itself encoded as
 * text (special tokens refused and allowed, cut at tok_cut_point; with byte spans, special
 * tokens allowed at every other byte) and decoded back. The spans must lie in the text, in
 * order. */
#include "tokenizer/tokenizer.h"

#include "fuzz_util.h"

static int even_start(void *ctx, size_t start, size_t end) {
    (void)ctx, (void)end;
    return start % 2 == 0;
}

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
        tok_ids sids = {0};
        tok_spans sp = {0};
        if (tok_encode_spans(e, text, size, 0, even_start, NULL, &sids, &sp) == 0) {
            if (sp.n != sids.n) __builtin_trap();
            for (size_t k = 0; k < sp.n; k++)
                if (sp.at[2 * k] > sp.at[2 * k + 1] || sp.at[2 * k + 1] > size ||
                    (k > 0 && sp.at[2 * k] < sp.at[2 * k - 2]))
                    __builtin_trap();
        }
        free(sids.ids);
        free(sp.at);
        tok_decode(t, ids.ids, ids.n, 0, &back, err, sizeof err);
    }
    free(ids.ids);
    free(back.s);
    tok_encoder_free(e);
    tok_free(t);
    return 0;
}
