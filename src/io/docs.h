/* docs.h — a corpus assembled from documents for `upipe data`: byte-level tokens (id = byte
 * value 0..255), an optional separator token that opens every document (like a BOS token), a
 * per-token loss mask and the length of every document.
 *
 * Layout of one document in the token stream: [sep] content...; the mask byte of token t says
 * whether predicting token t counts in the loss: the separator is 0; text is 1; a prompt is 0
 * and its response 1; a chat message is 0 unless its role is "assistant".
 *
 * Chat rendering (jsonl "messages"): each message becomes the bytes "<role>: <content>\n" in
 * order. For an assistant message the prefix "assistant: " is 0 and the content and its
 * closing "\n" are 1 (the model learns to end its turn). */
#ifndef UP_DOCS_H
#define UP_DOCS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t *tok; /* (n) token ids */
    uint8_t *mask; /* (n) 1 = predicting this token counts in the loss, else 0 */
    size_t n, cap;
    size_t *doc_len; /* (ndoc) tokens of each document, its separator included */
    size_t ndoc, doc_cap;
    int64_t sep; /* separator id written before every document, or -1: none */
} doc_corpus;

/* An empty corpus whose documents open with token sep (sep < 0: no separator). Pair with
 * docs_free. */
void docs_init(doc_corpus *c, int64_t sep);
void docs_free(doc_corpus *c);

/* Appends the file's bytes as one document (mask 1, separator 0). 0, or -1 with err (a missing
 * or empty file, out of memory); on failure c is unchanged. */
int docs_add_text_file(doc_corpus *c, const char *path, char *err, size_t errlen);
/* Appends one document per non-empty line of a JSON Lines file. Each line is one object of one
 * of the shapes {"text": s}, {"prompt": s, "response": s} (rendered prompt then response, no
 * byte between) or {"messages": [{"role": s, "content": s}, ...]} (see the chat rendering
 * above); other keys are ignored. A bad line (invalid JSON, unknown or ambiguous shape, a
 * non-string field, an empty document) gives -1 with err "PATH:LINE: what is wrong; expected
 * ...". A file without any document is refused too. On failure c holds the documents of the
 * lines before the bad one. */
int docs_add_jsonl_file(doc_corpus *c, const char *path, char *err, size_t errlen);

typedef struct {
    size_t ndoc, ntok;
    size_t counted;                      /* tokens with mask 1 */
    size_t min_len, median_len, max_len; /* tokens per document, separator included;
                                          * median = the lower middle for an even count */
} docs_stats;

/* Summary of c (all zero when c has no documents). 0, or -1 when out of memory. */
int docs_summarize(const doc_corpus *c, docs_stats *s);

#endif
