/* data_tok.h — `upipe data text|jsonl --tokenizer` and `upipe data decode`: documents in a
 * model's own ids (src/tokenizer), streamed to the shard with bounded memory on all cores. */
#ifndef UP_DATA_TOK_H
#define UP_DATA_TOK_H

#include <stdint.h>

typedef struct {
    const char *sub; /* "text", "jsonl" or "decode" */
    int jsonl;
    const char **inputs; /* (ninputs) */
    int ninputs;
    const char *output, *mask_output;
    const char *tokenizer;     /* a model folder or a tokenizer.json */
    int64_t sep;               /* --doc-sep, or -1: the tokenizer's own (see data_tok_docs) */
    int allow_special;         /* --allow-special: special tokens in the text become special ids */
    int threads;               /* --threads, 0: all (OpenMP's count) */
    int add_generation_prompt; /* --add-generation-prompt: chat records end with the prompt */
    int strict_utf8;           /* --strict-utf8: a text file that is not UTF-8 is refused */
    uint64_t from, count;      /* decode: --from, --count (0: to the end) */
} data_tok_args;

/* Writes the shard (and mask) of the documents: each text file, or each JSON Lines record, is
 * one document opened by the separator: --doc-sep S, else the post-processor's first token (a
 * BOS), else tokenizer_config.json's bos_token, else the special token <|endoftext|> (GPT-2,
 * Qwen), else its eos_token; the post-processor's suffix
 * (an EOS) closes each document. A JSON Lines record {"messages": [...]} is rendered by the
 * model's chat template (tokenizer/chat.h) and encoded as one text: no BOS or EOS is added (the
 * template writes them), a first token equal to the separator opens the document itself, and
 * each token's mask is 1 inside an assistant turn. Stops with a message on bad input; nothing is
 * left at the outputs then. Returns 0. */
int data_tok_docs(const data_tok_args *a);
/* Prints the text of tokens [from, from + count) of the shard a->inputs[0]. Returns 0. */
int data_tok_decode(const data_tok_args *a);

#endif
