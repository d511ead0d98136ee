/* fuzz_docs.c — docs_add_jsonl_file on any bytes (separator 256), then the summary. */
#include "io/docs.h"

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_write("x.jsonl", data, size);
    doc_corpus c;
    docs_init(&c, 256);
    char err[512];
    docs_add_jsonl_file(&c, p, err, sizeof err);
    docs_stats st;
    if (docs_summarize(&c, &st) == 0 && st.ntok != c.n) abort();
    size_t sum = 0;
    for (size_t d = 0; d < c.ndoc; d++)
        sum += c.doc_len[d];
    if (sum != c.n) abort(); /* documents tile the stream */
    for (size_t t = 0; t < c.n; t++)
        if (c.mask[t] > 1 || c.tok[t] > 256) abort();
    docs_free(&c);
    return 0;
}
