/* chat.h — a model's chat template (tokenizer_config.json's chat_template) rendered over
 * {"messages": [...]} as transformers' apply_chat_template(tokenize=False) renders it, with the
 * provenance of every byte: which bytes the template wrote (its literals and the special-token
 * variables bos_token, eos_token, ...), which came from a message, and which spans to train on
 * (DESIGN.md §6.2).
 *
 * The text is cut into segments that cover it in order:
 *   CHAT_SEG_TEMPLATE      the template's own text: encode with special tokens recognised
 *   CHAT_SEG_CONTENT       a message's text (any role but assistant, or data the template
 *                          formatted, such as numbers or JSON): plain text, never special
 *   CHAT_SEG_ASSISTANT     an assistant message's text: plain text, trained on
 *   CHAT_SEG_END_OF_TURN   the template's text right after an assistant message, in the same
 *                          loop iteration over the messages (e.g. "<|eot_id|>", "<|im_end|>\n",
 *                          " </s>"): special tokens recognised, trained on
 * A segment's `train` says whether its bytes are inside a trained span: an assistant message's
 * span runs from its first to its last byte of content (template text between, such as Qwen3's
 * "\n</think>\n\n" after reasoning, is inside) plus the end of turn. Text the template writes
 * before the content (role headers, Qwen3's empty "<think>\n\n</think>\n\n") is not. A template
 * with {% generation %} blocks marks its trained text itself: then exactly what those blocks
 * write is trained (as transformers' return_assistant_tokens_mask), template text included.
 *
 * Tokenizing: the whole text must be encoded as one string (segment boundaries are not token
 * boundaries: Llama 2's "[INST] " + "hello" merges across them), with special tokens matched
 * only inside TEMPLATE and END_OF_TURN segments; a token is a target when the byte span of the
 * token overlaps a trained span (the loss mask marks the position predicting it). */
#ifndef UP_CHAT_H
#define UP_CHAT_H

#include <jansson.h>
#include <stddef.h>

typedef enum {
    CHAT_SEG_TEMPLATE,
    CHAT_SEG_CONTENT,
    CHAT_SEG_ASSISTANT,
    CHAT_SEG_END_OF_TURN,
} chat_seg_kind;

typedef struct {
    size_t start, len; /* bytes of chat_rendered.text */
    chat_seg_kind kind;
    int message; /* index into messages, -1 where none */
    int train;   /* inside a trained span */
} chat_segment;

typedef struct {
    size_t start, end; /* [start, end) bytes: the content and its end of turn */
    int message;
} chat_span;

typedef struct {
    char *text; /* NUL-terminated, len bytes */
    size_t len;
    chat_segment *segs;
    size_t nsegs;
    chat_span *spans; /* one per assistant message the template writes, in order (one whose
                         content it drops has none); with {% generation %} blocks in
                         the template, one per stretch they write (transformers' assistant
                         mask) instead */
    size_t nspans;
} chat_rendered;

typedef struct chat_template chat_template;

/* Loads the chat template of a model folder or tokenizer_config.json: chat_template.jinja in
 * the folder when present, else "chat_template" (a string, or a list of {"name", "template"}:
 * "default" is taken); and the special tokens (bos_token, eos_token, unk_token, pad_token,
 * sep_token, cls_token, mask_token: a string or an AddedToken object {"content": ...};
 * additional_special_tokens), passed to the template as transformers does (only those set).
 * NULL with err when there is no template, it does not parse, or the file is not valid. */
chat_template *chat_template_load(const char *path, char *err, size_t errlen);
/* A template from its source; config: a tokenizer_config.json object for the special tokens
 * (NULL: none). */
chat_template *chat_template_new(const char *source, size_t len, const json_t *config, char *err,
                                 size_t errlen);
void chat_template_free(chat_template *ct);

typedef struct {
    int add_generation_prompt;
    long long now;        /* strftime_now's time (seconds since the epoch, UTC) */
    const json_t *kwargs; /* extra template variables (an object), or NULL */
} chat_opts;

/* Renders messages (a JSON array of objects with a string "role"; or an object holding
 * "messages") into *out (pair with chat_rendered_free). 0, or -1 with err: a bad message list,
 * the template's error (raise_exception: its message), or an assistant message whose span
 * cannot be found (its content interleaved with another message's, or written outside a loop
 * over the messages). opts may be NULL (no generation prompt, now = 0). */
int chat_render(const chat_template *ct, const json_t *messages, const chat_opts *opts,
                chat_rendered *out, char *err, size_t errlen);
void chat_rendered_free(chat_rendered *r);

/* For the tokenizer, given a token's bytes [start, end) of r->text (start < end):
 * chat_trained: 1 when they overlap a trained span (the token is a target of the loss);
 * chat_template_text: 1 when they lie wholly in template text (TEMPLATE or END_OF_TURN
 * segments), where a special token may be recognised; 0 when any byte is a message's or data.
 * Both O(log segments). */
int chat_trained(const chat_rendered *r, size_t start, size_t end);
int chat_template_text(const chat_rendered *r, size_t start, size_t end);

#endif
