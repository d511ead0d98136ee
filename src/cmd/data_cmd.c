/* data_cmd.c — the `upipe data` command: writes a byte-level corpus as an llm.c token shard,
 * optionally split into documents by a separator token, with a loss mask for chat data. */
#include "cmd/data_cmd.h"

#include "cmd/data_tok.h"

#include "core/check.h"
#include "core/fileio.h"
#include "core/flags.h"
#include "io/corpus.h"
#include "io/docs.h"
#include "io/mask.h"
#include "io/shard.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char data_usage_head[] =
    "usage:\n"
    "  upipe data text   --input FILE [FILE ...] --output SHARD.bin [--doc-sep S]\n"
    "  upipe data jsonl  --input FILE.jsonl [FILE.jsonl ...] --output SHARD.bin --doc-sep S\n"
    "                    [--mask-output MASK.bin]\n"
    "  upipe data recall --output SHARD.bin --tokens N [--distance D] [--seed S]\n"
    "  upipe data text|jsonl --tokenizer MODEL_DIR --input FILE ... --output SHARD.bin\n"
    "  upipe data decode --tokenizer MODEL_DIR --input SHARD.bin [--from N] [--count K]\n"
    "\n"
    "Writes an llm.c token shard with a byte-level vocabulary: token ids are byte values\n"
    "0..255, so the model's vocab_size must be at least 256, and above S with --doc-sep S;\n"
    "with --tokenizer, in the model's own ids (its HF tokenizer.json).\n"
    "The shard holds uint16 tokens (magic 20240520), or uint32 (magic 20240801) when S > 65535.\n"
    "Every file is written atomically (temp file, then rename; the temp files a killed run\n"
    "left beside an output go at the next write of it); an output may not be one of the\n"
    "inputs (or the other output). `upipe data SUB --help` shows one subcommand.\n";

typedef enum { DATA_TEXT, DATA_JSONL, DATA_RECALL, DATA_DECODE } data_kind;

/* The flags of one `upipe data` call, validated. */
typedef struct {
    const char *sub; /* "text", "jsonl", "recall", "decode" or NULL (help of the whole command) */
    data_kind kind;
    flag_list inputs; /* --input: argv strings; the array is malloc'd */
    const char *output, *mask_output;
    long sep;                                          /* --doc-sep, or -1 */
    uint64_t ntok, distance, min_distance, seed, keys; /* keys: --keys, 0: letter keys */
    int echo;                                          /* --echo */
    const char *tokenizer;                             /* --tokenizer, or NULL: bytes */
    int allow_special;                                 /* --allow-special */
    int add_generation_prompt;                         /* --add-generation-prompt */
    int strict_utf8;                                   /* --strict-utf8 */
    int threads;                                       /* --threads, 0: all */
    uint64_t from, count;                              /* decode's --from, --count (0: all) */
} data_args;

#define AT(field) offsetof(data_args, field)

/* text and jsonl */
static const flag_spec g_docs_flags[] = {
    {.name = "input",
     .arg = "FILE ...",
     .kind = FLAG_LIST,
     .off = AT(inputs),
     .help = "the input files, in order (--input may also be repeated)"},
    {.name = "output", .arg = "PATH", .kind = FLAG_STRING, .off = AT(output), .help = "the shard"},
    {.name = "doc-sep",
     .arg = "S",
     .kind = FLAG_LONG,
     .off = AT(sep),
     .lo = 0,
     .hi = INT32_MAX,
     .def = -1,
     .help = "the token written before every document"},
};

static const flag_spec g_text_flags[] = {
    {.name = "strict-utf8",
     .kind = FLAG_SET,
     .off = AT(strict_utf8),
     .help = "with --tokenizer: refuse a file that is not valid UTF-8 (one\n"
             "line naming the file and the offset; nothing is written);\n"
             "without it such a file is encoded with a warning that counts\n"
             "its invalid sequences and says what became of their bytes"},
};

static const flag_spec g_jsonl_flags[] = {
    {.name = "mask-output",
     .arg = "PATH",
     .kind = FLAG_STRING,
     .off = AT(mask_output),
     .help = "also write a loss mask aligned with the shard: one byte per\n"
             "token, 1 where predicting that token counts in the loss, else\n"
             "0 (header of 256 int32: magic 20261201, version 1, count)"},
    {.name = "add-generation-prompt",
     .kind = FLAG_SET,
     .off = AT(add_generation_prompt),
     .help = "with --tokenizer: chat records end with the assistant's header,\n"
             "as apply_chat_template(add_generation_prompt=True) (for prompts\n"
             "to evaluate; training data leaves it off). A template's\n"
             "strftime_now (Llama 3.1's date) reads SOURCE_DATE_EPOCH when\n"
             "it is set, else the clock"},
};

/* text and jsonl with --tokenizer */
static const flag_spec g_tok_flags[] = {
    {.name = "tokenizer",
     .arg = "PATH",
     .kind = FLAG_STRING,
     .off = AT(tokenizer),
     .help = "the model's own tokens, exactly as HF's tokenizers encode them\n"
             "(byte-level BPE: Llama 3/3.1, Qwen2/3, GPT-2; SentencePiece-\n"
             "style BPE: Llama 2, Mistral v0.1; anything else is refused\n"
             "naming what): the HF model folder (tokenizer.json,\n"
             "tokenizer_config.json) or a tokenizer.json. The shard holds\n"
             "uint32 ids when the vocabulary passes 65536. The input is\n"
             "streamed (memory stays bounded whatever its size) with a\n"
             "progress line (MB/s, ETA) on long inputs; an empty file is\n"
             "skipped and counted (all of them empty: refused)"},
    {.name = "allow-special",
     .kind = FLAG_SET,
     .off = AT(allow_special),
     .help = "text such as \"<|eot_id|>\" becomes that special token; by\n"
             "default special tokens in the text stay plain text (scraped\n"
             "text cannot forge a turn or a document end)"},
    {.name = "threads",
     .arg = "N",
     .kind = FLAG_INT,
     .off = AT(threads),
     .lo = 1,
     .hi = 4096,
     .help = "encoding threads (default: all, OMP_NUM_THREADS)"},
};

static const flag_spec g_decode_flags[] = {
    {.name = "tokenizer",
     .arg = "PATH",
     .kind = FLAG_STRING,
     .off = AT(tokenizer),
     .help = "the model folder or tokenizer.json the shard was made with"},
    {.name = "input", .arg = "SHARD", .kind = FLAG_LIST, .off = AT(inputs), .help = "the shard"},
    {.name = "from",
     .arg = "N",
     .kind = FLAG_U64,
     .off = AT(from),
     .lo = 0,
     .hi = LONG_MAX,
     .help = "the first token (default 0)"},
    {.name = "count",
     .arg = "K",
     .kind = FLAG_U64,
     .off = AT(count),
     .lo = 1,
     .hi = LONG_MAX,
     .help = "how many tokens (default: to the end)"},
};

static const flag_spec g_recall_flags[] = {
    {.name = "output",
     .arg = "PATH",
     .kind = FLAG_STRING,
     .off = AT(output),
     .help = "the shard to write"},
    {.name = "tokens",
     .arg = "N",
     .kind = FLAG_U64,
     .off = AT(ntok),
     .lo = 16,
     .hi = INT32_MAX,
     .help = "number of tokens to generate"},
    {.name = "distance",
     .arg = "D",
     .kind = FLAG_U64,
     .off = AT(distance),
     .lo = 4,
     .hi = 1 << 26,
     .help = "average tokens between a fact and its question\n"
             "(default min(512, N/2); at most N/2)"},
    {.name = "min-distance",
     .arg = "M",
     .kind = FLAG_U64,
     .off = AT(min_distance),
     .lo = 4,
     .hi = 1 << 26,
     .help = "spread the distances over [M, D] instead: as many facts\n"
             "asked in each octave [M, 2M), [2M, 4M) ... (M <= D);\n"
             "short ones teach the lookup, long ones need the context"},
    {.name = "keys",
     .arg = "K",
     .kind = FLAG_U64,
     .off = AT(keys),
     .lo = 1,
     .hi = INT32_MAX - RECALL_KEY_TOKEN0,
     .help = "one token per key, ids 256 .. 256+K-1 (the model needs\n"
             "vocab_size >= 256+K), K at least four times the questions\n"
             "open at once on average (D/2 for a fixed distance, fewer with\n"
             "--min-distance or --echo: the error names the least);\n"
             "default: keys of lowercase letters, as many as the distance\n"
             "needs (2 or more at D >= 7)"},
    {.name = "echo",
     .kind = FLAG_SET,
     .off = AT(echo),
     .help = "with --keys: every record repeats its key after the value,\n"
             "\"=KVK;\" and \"?KVK;\"; predicting the echo teaches a model to\n"
             "carry each token's predecessor, half of the lookup (an\n"
             "induction head), so a small model learns to answer far sooner"},
    {.name = "seed",
     .arg = "S",
     .kind = FLAG_U64,
     .off = AT(seed),
     .lo = 0,
     .hi = LONG_MAX,
     .def = 1,
     .help = "random seed, the corpus is a function of it (default 1)"},
    {.name = "mask-output",
     .arg = "PATH",
     .kind = FLAG_STRING,
     .off = AT(mask_output),
     .help = "also write a loss mask that counts the answers only: 1 at\n"
             "every V of a question (and, with --echo, at every echoed\n"
             "key), 0 elsewhere (train --loss-mask)"},
};

static const flag_help_line g_text_page[] = {
    {NULL, "\nupipe data text: every byte of every FILE becomes one token (with --tokenizer:\n"
           "the model's ids); each file is one document."},
    {"input", "the text files, in order (--input may also be repeated)"},
    {"output", "the shard to write"},
    {"doc-sep", "each file becomes one document opened by token S (written\n"
                "before every document, like a BOS token), S >= 0; S > 255\n"
                "keeps it apart from the bytes (e.g. 256: vocab_size >= 257).\n"
                "Without it the files are concatenated with nothing between;\n"
                "with --tokenizer the default is the tokenizer's BOS (post-\n"
                "processor, else bos_token), else <|endoftext|> (GPT-2, Qwen),\n"
                "else its eos_token, and the summary prints the --doc-sep to\n"
                "train with"},
    {"tokenizer", NULL},
    {"allow-special", NULL},
    {"threads", NULL},
    {"strict-utf8", NULL},
    {"help", NULL},
};

static const flag_help_line g_jsonl_page[] = {
    {NULL,
     "\nupipe data jsonl: one JSON object per line (empty lines are skipped), one document\n"
     "each:\n"
     "    {\"text\": T}                     the bytes of T; all of them count in the loss\n"
     "    {\"prompt\": P, \"response\": R}    the bytes of P then R; only R counts\n"
     "    {\"messages\": [{\"role\": ROLE, \"content\": C}, ...]}\n"
     "                                    each message as the bytes \"ROLE: C\\n\", in order;\n"
     "                                    only the C and \"\\n\" of role \"assistant\" count\n"
     "Other keys are ignored. A bad line is refused with its line number. With --tokenizer\n"
     "the response is encoded as continuing the prompt, and a chat record is rendered by\n"
     "the model's chat_template (tokenizer_config.json or chat_template.jinja) as\n"
     "transformers renders it, the record's other keys (tools, documents, ...) passed to\n"
     "the template; the template's own text may hold special tokens, the messages never;\n"
     "no BOS/EOS is added (the template writes them); with --mask-output only each\n"
     "assistant message's content and the end-of-turn token(s) after it count."},
    {"input", "the JSON Lines files, in order"},
    {"output", "the shard to write"},
    {"doc-sep", "the token written before every document (like a BOS token),\n"
                "S >= 0; S > 255 keeps it apart from the bytes (e.g. 256:\n"
                "vocab_size >= 257); it never counts in the loss. Required\n"
                "without --tokenizer; with it, the default is as for text"},
    {"mask-output", NULL},
    {"tokenizer", "as for text: the model folder or a tokenizer.json; a file\n"
                  "without a document is skipped and counted (all of them: refused)"},
    {"allow-special", NULL},
    {"add-generation-prompt", NULL},
    {"threads", NULL},
    {"help", NULL},
};

static const flag_help_line g_decode_page[] = {
    {NULL, "\nupipe data decode: prints the text of a shard's tokens (for inspection), as HF's\n"
           "tokenizers library decodes them: a range cut inside a character shows U+FFFD there."},
    {"tokenizer", NULL},
    {"input", NULL},
    {"from", NULL},
    {"count", NULL},
    {"help", NULL},
};

static const flag_help_line g_recall_page[] = {
    {NULL,
     "\nupipe data recall: a synthetic long-range recall corpus: facts \"key=V;\" and, about D\n"
     "tokens later, questions \"key?V;\" whose answer V only the earlier fact reveals."},
    {"output", NULL},
    {"tokens", NULL},
    {"distance", NULL},
    {"min-distance", NULL},
    {"keys", NULL},
    {"echo", NULL},
    {"seed", NULL},
    {"mask-output", NULL},
    {"help", NULL},
};

/* The tables of a subcommand (pointing into a), its help page; returns the number of tables. */
static int data_tables(data_kind kind, data_args *a, flag_table *t, const flag_help_line **page,
                       int *npage) {
#define TABLE(rows) ((flag_table){rows, FLAGS_COUNT(rows), a})
#define PAGE(lines) (*page = lines, *npage = FLAGS_COUNT(lines))
    switch (kind) {
    case DATA_TEXT:
        PAGE(g_text_page);
        t[0] = TABLE(g_text_flags), t[1] = TABLE(g_docs_flags), t[2] = TABLE(g_tok_flags);
        return 3;
    case DATA_JSONL:
        PAGE(g_jsonl_page);
        t[0] = TABLE(g_jsonl_flags), t[1] = TABLE(g_docs_flags), t[2] = TABLE(g_tok_flags);
        return 3;
    case DATA_DECODE:
        PAGE(g_decode_page);
        t[0] = TABLE(g_decode_flags);
        return 1;
    case DATA_RECALL:
        break;
    }
    PAGE(g_recall_page);
    t[0] = TABLE(g_recall_flags);
    return 1;
#undef TABLE
#undef PAGE
}

static const char *const g_data_subs[] = {"text", "jsonl", "recall", "decode"}; /* data_kind */

/* The help of one subcommand, or of all (sub NULL). */
static void data_print_help(const char *sub) {
    fputs(data_usage_head, stdout);
    for (int k = 0; k < FLAGS_COUNT(g_data_subs); k++) {
        if (sub != NULL && strcmp(sub, g_data_subs[k]) != 0) continue;
        data_args a; /* the tables' base; nothing is stored */
        flag_table t[3];
        const flag_help_line *page;
        int npage, nt = data_tables((data_kind)k, &a, t, &page, &npage);
        flags_print_help(t, nt, page, npage);
    }
}

/* The corpus the recall flags describe. */
static recall_spec data_recall_spec(const data_args *a) {
    return (recall_spec){.distance = (size_t)a->distance,
                         .min_distance = (size_t)a->min_distance,
                         .seed = a->seed,
                         .key_tokens = (uint32_t)a->keys,
                         .echo = a->echo};
}

/* The checks across recall's flags, and the default distance. */
static void data_check_recall(data_args *a) {
    if (a->ntok == 0) up_die("data recall: --tokens is required: say how many tokens to generate");
    if (a->distance == 0) a->distance = a->ntok / 2 < 512 ? a->ntok / 2 : 512;
    if (a->distance > a->ntok / 2)
        up_die("data recall: --distance %llu is out of range: use 4 .. min(tokens/2, 2^26) so "
               "that questions fit in the corpus",
               (unsigned long long)a->distance);
    if (a->echo && a->keys == 0)
        up_die("data recall: --echo needs --keys K (one token per key): the echo repeats that "
               "token");
    if (a->min_distance > a->distance)
        up_die("data recall: --min-distance %llu is out of range: use 4 .. --distance (%llu)",
               (unsigned long long)a->min_distance, (unsigned long long)a->distance);
    const recall_spec spec = data_recall_spec(a);
    uint64_t min_keys = corpus_recall_min_keys(&spec);
    if (a->keys > 0 && a->keys < min_keys)
        up_die("data recall: --keys %llu is out of range: use %llu .. %llu (four times the "
               "questions open at once at these distances)",
               (unsigned long long)a->keys, (unsigned long long)min_keys,
               (unsigned long long)(INT32_MAX - RECALL_KEY_TOKEN0));
}

/* The checks across the flags of text and jsonl. */
static void data_check_docs(const data_args *a) {
    const char *sub = a->sub;
    if (a->inputs.n == 0)
        up_die("data %s: --input is required: name the %s file(s)", sub,
               a->kind == DATA_TEXT ? "text" : "JSON Lines");
    if ((a->allow_special || a->add_generation_prompt) && a->tokenizer == NULL)
        up_die("data %s: %s needs --tokenizer MODEL_DIR (the model's special tokens and chat "
               "template)",
               sub, a->allow_special ? "--allow-special" : "--add-generation-prompt");
    if (a->strict_utf8 && a->tokenizer == NULL)
        up_die("data text: --strict-utf8 needs --tokenizer MODEL_DIR (without it every byte is "
               "a token: any bytes are fine)");
    if (a->kind == DATA_JSONL && a->sep < 0 && a->tokenizer == NULL)
        up_die("data jsonl: --doc-sep is required: name the token that opens every "
               "document, e.g. --doc-sep 256 (then the model needs vocab_size >= 257)");
}

/* Fills a from argv (argv[0] == "data"). Returns 1 for --help, else 0; a bad or missing flag
 * stops the process with a message. */
static int data_parse_args(data_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    if (argc < 2)
        up_die("data: missing subcommand: use `upipe data text`, `upipe data jsonl`, `upipe data "
               "recall` or `upipe data decode` (see --help)");
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) return 1;
    int k = 0;
    while (k < FLAGS_COUNT(g_data_subs) && strcmp(sub, g_data_subs[k]) != 0)
        k++;
    if (k == FLAGS_COUNT(g_data_subs))
        up_die("data: unknown subcommand \"%s\": use \"text\", \"jsonl\", \"recall\" or "
               "\"decode\" (see --help)",
               sub);
    a->sub = sub;
    a->kind = (data_kind)k;
    flag_table t[3];
    const flag_help_line *page;
    int npage, nt = data_tables(a->kind, a, t, &page, &npage);
    char cmd[32];
    snprintf(cmd, sizeof cmd, "data %s", sub);
    flags_defaults(t, nt);
    if (flags_parse(cmd, t, nt, argc - 1, argv + 1) == 1) return 1;
    if (a->kind == DATA_DECODE) {
        if (a->tokenizer == NULL || a->inputs.n != 1)
            up_die("data decode: --tokenizer MODEL_DIR and one --input SHARD are required");
        return 0;
    }
    if (a->output == NULL) up_die("data %s: --output is required: name the shard to write", sub);
    if (a->kind == DATA_RECALL)
        data_check_recall(a);
    else
        data_check_docs(a);
    return 0;
}

/* No output replaces an input or the other output (compared by device and inode, or by the
 * resolved path of an output that does not exist yet): the shard would overwrite its own source
 * before anything warns. Stops with a message. */
static void data_check_outputs(const data_args *a) {
    const char *flags[2] = {"--output", "--mask-output"}, *outs[2] = {a->output, a->mask_output};
    for (int k = 0; k < 2; k++) {
        if (outs[k] == NULL) continue;
        for (int i = 0; i < a->inputs.n; i++)
            if (up_same_file(outs[k], a->inputs.v[i]))
                up_die("data %s: %s %s is the input %s: writing it would replace the data it is "
                       "made from; name another file",
                       a->sub, flags[k], outs[k], a->inputs.v[i]);
    }
    if (a->mask_output != NULL && up_same_file(a->mask_output, a->output))
        up_die("data %s: --mask-output %s and --output %s are the same file: name two", a->sub,
               a->mask_output, a->output);
}

/* Writes the shard of n tokens and prints its size into sz; stops with a message on failure. */
static void data_write_shard(const char *path, const uint32_t *tok, size_t n, int tb, char *sz,
                             size_t szlen) {
    char err[1024];
    if (shard_write(path, tok, n, err, sizeof err) != 0) up_die("%s", err);
    up_fmt_bytes(sz, szlen, (double)(SHARD_HEADER_BYTES + (size_t)tb * n));
}

static int data_recall(const data_args *a) {
    size_t n = (size_t)a->ntok;
    uint8_t *mask = NULL;
    if (a->mask_output != NULL) {
        mask = malloc(n);
        if (mask == NULL) up_die("data recall: out of memory for the mask of %zu tokens", n);
    }
    const recall_spec spec = data_recall_spec(a);
    uint32_t *tok = corpus_make_recall(n, &spec, mask);
    if (tok == NULL) up_die("data recall: out of memory for %zu tokens", n);
    char sz[32], dist[64];
    data_write_shard(a->output, tok, n, 2, sz, sizeof sz);
    free(tok);
    if (a->min_distance > 0)
        snprintf(dist, sizeof dist, "%llu .. %llu", (unsigned long long)a->min_distance,
                 (unsigned long long)a->distance);
    else
        snprintf(dist, sizeof dist, "%llu", (unsigned long long)a->distance);
    printf("upipe data: wrote %zu tokens (recall%s, distance %s, seed %llu) to %s (%s)\n", n,
           a->echo ? " with the echo" : "", dist, (unsigned long long)a->seed, a->output, sz);
    if (mask != NULL) {
        char err[1024];
        size_t answers = 0;
        for (size_t i = 0; i < n; i++)
            answers += mask[i];
        if (mask_write(a->mask_output, mask, n, err, sizeof err) != 0) up_die("%s", err);
        free(mask);
        printf("upipe data: wrote the loss mask (%zu of %zu targets: the answers%s) to %s\n",
               answers, n, a->echo ? " and the echoes" : "", a->mask_output);
    }
    return 0;
}

/* text and jsonl: documents, shard, mask, summary. */
static int data_docs(const data_args *a) {
    char err[1024];
    doc_corpus c;
    docs_init(&c, a->sep);
    for (int i = 0; i < a->inputs.n; i++) {
        int rc = a->kind == DATA_TEXT ? docs_add_text_file(&c, a->inputs.v[i], err, sizeof err)
                                      : docs_add_jsonl_file(&c, a->inputs.v[i], err, sizeof err);
        if (rc != 0) up_die("%s", err);
    }
    docs_stats st;
    if (docs_summarize(&c, &st) != 0) up_die("data %s: out of memory", a->sub);
    int tb = a->sep > 65535 ? 4 : 2; /* shard_write's choice: every byte token is < 256 */
    char sz[32];
    data_write_shard(a->output, c.tok, c.n, tb, sz, sizeof sz);
    char what[600];
    const char *of = a->kind == DATA_TEXT ? "bytes" : "documents";
    if (a->inputs.n == 1)
        snprintf(what, sizeof what, "%s of %s", of, a->inputs.v[0]);
    else
        snprintf(what, sizeof what, "%s of %d files", of, a->inputs.n);
    printf("upipe data: wrote %zu tokens (%s) to %s (%s)\n", c.n, what, a->output, sz);
    if (a->mask_output != NULL) {
        if (mask_write(a->mask_output, c.mask, c.n, err, sizeof err) != 0) up_die("%s", err);
        char msz[32];
        up_fmt_bytes(msz, sizeof msz, (double)(MASK_HEADER_BYTES + c.n));
        printf("upipe data: wrote the loss mask of those %zu tokens to %s (%s)\n", c.n,
               a->mask_output, msz);
    }
    long long vocab = a->sep >= 256 ? (long long)a->sep + 1 : 256;
    if (a->sep >= 0)
        printf("  %zu document%s opened by separator %lld; %zu tokens; document length "
               "(tokens, separator included): shortest %zu, median %zu, longest %zu\n",
               st.ndoc, st.ndoc == 1 ? "" : "s", (long long)a->sep, st.ntok, st.min_len,
               st.median_len, st.max_len);
    else
        printf("  %zu document%s (one per file, no separator between); %zu tokens; "
               "document length (tokens): shortest %zu, median %zu, longest %zu\n",
               st.ndoc, st.ndoc == 1 ? "" : "s", st.ntok, st.min_len, st.median_len, st.max_len);
    if (a->kind == DATA_JSONL)
        printf("  counted tokens (mask 1): %zu of %zu (%.1f%%)%s\n", st.counted, st.ntok,
               100.0 * (double)st.counted / (double)st.ntok,
               a->mask_output ? "" : "; no --mask-output: the mask was not written");
    printf("  needs vocab_size >= %lld%s\n", vocab,
           a->sep >= 256 ? " (the separator id must be below the model's vocab_size)" : "");
    if (a->sep >= 0 && a->sep < 256)
        printf("  note: separator %lld is also a byte value, so a document boundary looks like "
               "that byte in the text; --doc-sep 256 keeps them apart\n",
               (long long)a->sep);
    docs_free(&c);
    return 0;
}

/* The temporary files killed runs left beside an output (path.tmp.<pid>) go before it is
 * written again. */
static void data_sweep(const char *path) {
    int n = path != NULL ? up_sweep_stale(path) : 0;
    if (n > 0)
        fprintf(stderr,
                "upipe data: removed %d temporary file%s of %s left by a run that was "
                "killed\n",
                n, n == 1 ? "" : "s", path);
}

int data_main(int argc, char **argv) {
    data_args a;
    int rc = 0;
    if (data_parse_args(&a, argc, argv) == 1) {
        data_print_help(a.sub);
        free(a.inputs.v);
        return 0;
    }
    data_check_outputs(&a);
    if (a.kind != DATA_DECODE) {
        data_sweep(a.output);
        data_sweep(a.mask_output);
    }
    data_tok_args ta = {.sub = a.sub,
                        .jsonl = a.kind == DATA_JSONL,
                        .inputs = a.inputs.v,
                        .ninputs = a.inputs.n,
                        .output = a.output,
                        .mask_output = a.mask_output,
                        .tokenizer = a.tokenizer,
                        .sep = a.sep,
                        .allow_special = a.allow_special,
                        .add_generation_prompt = a.add_generation_prompt,
                        .strict_utf8 = a.strict_utf8,
                        .threads = a.threads,
                        .from = a.from,
                        .count = a.count};
    if (a.kind == DATA_DECODE)
        rc = data_tok_decode(&ta);
    else if (a.kind == DATA_RECALL)
        rc = data_recall(&a);
    else
        rc = a.tokenizer != NULL ? data_tok_docs(&ta) : data_docs(&a);
    free(a.inputs.v);
    return rc;
}
