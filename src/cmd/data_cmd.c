/* data_cmd.c — the `upipe data` command: writes a byte-level corpus as an llm.c token shard,
 * optionally split into documents by a separator token, with a loss mask for chat data. */
#include "cmd/data_cmd.h"

#include "cmd/data_tok.h"

#include "core/check.h"
#include "core/fileio.h"
#include "io/corpus.h"
#include "io/docs.h"
#include "io/mask.h"
#include "io/shard.h"

#include <errno.h>
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
    "Every file is written atomically (temp file, then rename); an output may not be one of\n"
    "the inputs (or the other output).\n"
    "  --help                   this text; `upipe data SUB --help` shows one subcommand\n";

static const char data_usage_text[] =
    "\n"
    "upipe data text: every byte of every FILE becomes one token.\n"
    "  --input FILE [FILE ...]  the text files, in order (--input may also be repeated)\n"
    "  --output PATH            the shard to write\n"
    "  --doc-sep S              each file becomes one document opened by token S (written\n"
    "                           before every document, like a BOS token), S >= 0; S > 255\n"
    "                           keeps it apart from the bytes (e.g. 256: vocab_size >= 257).\n"
    "                           Without it the files are concatenated with nothing between.\n";

static const char data_usage_jsonl[] =
    "\n"
    "upipe data jsonl: one JSON object per line (empty lines are skipped), one document each:\n"
    "    {\"text\": T}                     the bytes of T; all of them count in the loss\n"
    "    {\"prompt\": P, \"response\": R}    the bytes of P then R; only R counts\n"
    "    {\"messages\": [{\"role\": ROLE, \"content\": C}, ...]}\n"
    "                                    each message as the bytes \"ROLE: C\\n\", in order;\n"
    "                                    only the C and \"\\n\" of role \"assistant\" count\n"
    "  Other keys are ignored. A bad line is refused with its line number.\n"
    "  --input FILE [FILE ...]  the JSON Lines files, in order\n"
    "  --output PATH            the shard to write\n"
    "  --doc-sep S              required: the token written before every document (like a\n"
    "                           BOS token), S >= 0; S > 255 keeps it apart from the bytes\n"
    "                           (e.g. 256: vocab_size >= 257); it never counts in the loss\n"
    "  --mask-output PATH       also write a loss mask aligned with the shard: one byte per\n"
    "                           token, 1 where predicting that token counts in the loss, else\n"
    "                           0 (header of 256 int32: magic 20261201, version 1, count)\n";

static const char data_usage_tokenizer[] =
    "\n"
    "upipe data text|jsonl --tokenizer MODEL_DIR: the model's own tokens, exactly as HF's\n"
    "tokenizers encode them (byte-level BPE: Llama 3/3.1, Qwen2/3, GPT-2; SentencePiece-style\n"
    "BPE: Llama 2, Mistral v0.1; anything else is refused naming what).\n"
    "  --tokenizer PATH         the HF model folder (tokenizer.json, tokenizer_config.json) or\n"
    "                           a tokenizer.json\n"
    "  --input, --output, --mask-output  as above; text: each file is one document; jsonl:\n"
    "                           each {\"text\": T} or {\"prompt\": P, \"response\": R} record\n"
    "                           (R encoded as continuing P; only R counts), or a chat record\n"
    "                           {\"messages\": [{\"role\": ..., \"content\": ...}, ...]}\n"
    "                           rendered by the model's chat_template (tokenizer_config.json\n"
    "                           or chat_template.jinja) as transformers renders it, the\n"
    "                           record's other keys (tools, documents, ...) passed to the\n"
    "                           template; the template's own text may hold special tokens,\n"
    "                           the messages never; no BOS/EOS added (the template writes\n"
    "                           them); with --mask-output only the assistant turns count:\n"
    "                           each assistant message's content and the end-of-turn\n"
    "                           token(s) after it\n"
    "  --add-generation-prompt  jsonl: chat records end with the assistant's header, as\n"
    "                           apply_chat_template(add_generation_prompt=True) (for prompts\n"
    "                           to evaluate; training data leaves it off). A template's\n"
    "                           strftime_now (Llama 3.1's date) reads SOURCE_DATE_EPOCH when\n"
    "                           it is set, else the clock\n"
    "  --doc-sep S              the token opening every document; default: the tokenizer's\n"
    "                           BOS (post-processor, else bos_token), else <|endoftext|>\n"
    "                           (GPT-2, Qwen), else its eos_token. The\n"
    "                           summary prints the --doc-sep to train with.\n"
    "  --allow-special          text such as \"<|eot_id|>\" becomes that special token; by\n"
    "                           default special tokens in the text stay plain text (scraped\n"
    "                           text cannot forge a turn or a document end)\n"
    "  --threads N              encoding threads (default: all, OMP_NUM_THREADS)\n"
    "  The shard holds uint32 ids when the vocabulary passes 65536. The input is streamed:\n"
    "  memory stays bounded whatever its size; a progress line (MB/s, ETA) on long inputs.\n";

static const char data_usage_decode[] =
    "\n"
    "upipe data decode: prints the text of a shard's tokens (for inspection), as HF's\n"
    "tokenizers library decodes them: a range cut inside a character shows U+FFFD there.\n"
    "  --tokenizer PATH         the model folder or tokenizer.json the shard was made with\n"
    "  --input SHARD            the shard\n"
    "  --from N                 the first token (default 0)\n"
    "  --count K                how many tokens (default: to the end)\n";

static const char data_usage_recall[] =
    "\n"
    "upipe data recall: a synthetic long-range recall corpus: facts \"key=V;\" and, about D\n"
    "tokens later, questions \"key?V;\" whose answer V only the earlier fact reveals.\n"
    "  --output PATH            the shard to write\n"
    "  --tokens N               number of tokens to generate, N >= 16\n"
    "  --distance D             average tokens between a fact and its question\n"
    "                           (default min(512, N/2); 4 <= D <= N/2)\n"
    "  --min-distance M         spread the distances over [M, D] instead: as many facts\n"
    "                           asked in each octave [M, 2M), [2M, 4M) ... (4 <= M <= D);\n"
    "                           short ones teach the lookup, long ones need the context\n"
    "  --keys K                 one token per key, ids 256 .. 256+K-1 (the model needs\n"
    "                           vocab_size >= 256+K), K at least four times the questions\n"
    "                           open at once on average (D/2 for a fixed distance, fewer with\n"
    "                           --min-distance or --echo: the error names the least);\n"
    "                           default: keys of lowercase\n"
    "                           letters, as many as the distance needs (2 or more at D >= 7)\n"
    "  --echo                   with --keys: every record repeats its key after the value,\n"
    "                           \"=KVK;\" and \"?KVK;\"; predicting the echo teaches a model to\n"
    "                           carry each token's predecessor, half of the lookup (an\n"
    "                           induction head), so a small model learns to answer far sooner\n"
    "  --seed S                 random seed, the corpus is a function of it (default 1)\n"
    "  --mask-output PATH       also write a loss mask that counts the answers only: 1 at\n"
    "                           every V of a question (and, with --echo, at every echoed\n"
    "                           key), 0 elsewhere (train --loss-mask)\n";

static int parse_u64(const char *s, uint64_t *out) {
    if (s == NULL || *s < '0' || *s > '9') return -1;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') return -1;
    *out = v;
    return 0;
}

typedef enum { DATA_TEXT, DATA_JSONL, DATA_RECALL, DATA_DECODE } data_kind;

/* The flags of one `upipe data` call, validated. */
typedef struct {
    const char *sub; /* "text", "jsonl", "recall" or NULL (help of the whole command) */
    data_kind kind;
    const char **inputs; /* (ninputs) argv strings; the array is malloc'd */
    int ninputs;
    const char *output, *mask_output;
    int64_t sep;                                       /* --doc-sep, or -1 */
    uint64_t ntok, distance, min_distance, seed, keys; /* keys: --keys, 0: letter keys */
    int echo;                                          /* --echo */
    const char *tokenizer;                             /* --tokenizer, or NULL: bytes */
    int allow_special;                                 /* --allow-special */
    int add_generation_prompt;                         /* --add-generation-prompt */
    uint64_t threads, from, count;                     /* --threads, decode's --from, --count */
} data_args;

static void data_print_help(const char *sub) {
    fputs(data_usage_head, stdout);
    int all = sub == NULL;
    if (all || strcmp(sub, "text") == 0) fputs(data_usage_text, stdout);
    if (all || strcmp(sub, "jsonl") == 0) fputs(data_usage_jsonl, stdout);
    if (all || strcmp(sub, "text") == 0 || strcmp(sub, "jsonl") == 0)
        fputs(data_usage_tokenizer, stdout);
    if (all || strcmp(sub, "decode") == 0) fputs(data_usage_decode, stdout);
    if (all || strcmp(sub, "recall") == 0) fputs(data_usage_recall, stdout);
}

/* The corpus the recall flags describe. */
static recall_spec data_recall_spec(const data_args *a) {
    return (recall_spec){.distance = (size_t)a->distance,
                         .min_distance = (size_t)a->min_distance,
                         .seed = a->seed,
                         .key_tokens = (uint32_t)a->keys,
                         .echo = a->echo};
}

/* Fills a from argv (argv[0] == "data"). Returns 1 for --help, else 0; a bad or missing flag
 * stops the process with a message. */
static int data_parse_args(data_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->seed = 1;
    a->sep = -1;
    if (argc < 2)
        up_die("data: missing subcommand: use `upipe data text`, `upipe data jsonl` or `upipe "
               "data recall` (see --help)");
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) return 1;
    if (strcmp(sub, "text") == 0)
        a->kind = DATA_TEXT;
    else if (strcmp(sub, "jsonl") == 0)
        a->kind = DATA_JSONL;
    else if (strcmp(sub, "recall") == 0)
        a->kind = DATA_RECALL;
    else if (strcmp(sub, "decode") == 0)
        a->kind = DATA_DECODE;
    else
        up_die("data: unknown subcommand \"%s\": use \"text\", \"jsonl\", \"recall\" or "
               "\"decode\" (see --help)",
               sub);
    a->sub = sub;
    int docs = a->kind == DATA_TEXT || a->kind == DATA_JSONL, dec = a->kind == DATA_DECODE;
    int rec = a->kind == DATA_RECALL;
    a->inputs = malloc((size_t)argc * sizeof *a->inputs);
    UP_CHECK(a->inputs != NULL, "out of memory");
    int have_tokens = 0, have_distance = 0;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return 1;
        if (rec && strcmp(arg, "--echo") == 0) {
            a->echo = 1;
            continue;
        }
        if (docs && strcmp(arg, "--allow-special") == 0) {
            a->allow_special = 1;
            continue;
        }
        if (a->kind == DATA_JSONL && strcmp(arg, "--add-generation-prompt") == 0) {
            a->add_generation_prompt = 1;
            continue;
        }
        /* --flag value or --flag=value */
        const char *val = NULL;
        char flag[64];
        const char *eq = strchr(arg, '=');
        if (strncmp(arg, "--", 2) == 0 && eq != NULL && (size_t)(eq - arg) < sizeof flag) {
            memcpy(flag, arg, (size_t)(eq - arg));
            flag[eq - arg] = '\0';
            val = eq + 1;
        } else {
            snprintf(flag, sizeof flag, "%s", arg);
            if (i + 1 >= argc) up_die("data: flag %s needs a value (see --help)", arg);
            val = argv[++i];
        }
        if ((docs || dec) && strcmp(flag, "--tokenizer") == 0) {
            a->tokenizer = val;
        } else if (docs && strcmp(flag, "--threads") == 0) {
            if (parse_u64(val, &a->threads) != 0 || a->threads == 0 || a->threads > 4096)
                up_die("data %s: --threads \"%s\" is not a count 1 .. 4096", sub, val);
        } else if (dec && strcmp(flag, "--from") == 0) {
            if (parse_u64(val, &a->from) != 0)
                up_die("data decode: --from \"%s\" is not a token index", val);
        } else if (dec && strcmp(flag, "--count") == 0) {
            if (parse_u64(val, &a->count) != 0 || a->count == 0)
                up_die("data decode: --count \"%s\" is not a positive integer", val);
        } else if (dec && strcmp(flag, "--input") == 0) {
            a->inputs[a->ninputs++] = val;
        } else if (docs && strcmp(flag, "--input") == 0) {
            a->inputs[a->ninputs++] = val;
            /* --input A B C: the values up to the next flag */
            while (eq == NULL && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                a->inputs[a->ninputs++] = argv[++i];
        } else if (strcmp(flag, "--output") == 0)
            a->output = val;
        else if (docs && strcmp(flag, "--doc-sep") == 0) {
            uint64_t s = 0;
            if (parse_u64(val, &s) != 0 || s > (uint64_t)INT32_MAX)
                up_die("data %s: --doc-sep \"%s\" is not a token id: use an integer 0 .. %d "
                       "(256 is the usual choice: the first id after the bytes)",
                       sub, val, INT32_MAX);
            a->sep = (int64_t)s;
        } else if ((rec || a->kind == DATA_JSONL) && strcmp(flag, "--mask-output") == 0)
            a->mask_output = val;
        else if (rec && strcmp(flag, "--tokens") == 0) {
            if (parse_u64(val, &a->ntok) != 0)
                up_die("data: --tokens \"%s\" is not a positive integer", val);
            have_tokens = 1;
        } else if (rec && strcmp(flag, "--distance") == 0) {
            if (parse_u64(val, &a->distance) != 0)
                up_die("data: --distance \"%s\" is not a positive integer", val);
            have_distance = 1;
        } else if (rec && strcmp(flag, "--min-distance") == 0) {
            if (parse_u64(val, &a->min_distance) != 0 || a->min_distance == 0)
                up_die("data: --min-distance \"%s\" is not a positive integer", val);
        } else if (rec && strcmp(flag, "--keys") == 0) {
            if (parse_u64(val, &a->keys) != 0 || a->keys == 0)
                up_die("data: --keys \"%s\" is not a positive integer", val);
        } else if (rec && strcmp(flag, "--seed") == 0) {
            if (parse_u64(val, &a->seed) != 0)
                up_die("data: --seed \"%s\" is not a non-negative integer", val);
        } else
            up_die("data %s: unknown flag \"%s\" (see upipe data %s --help)", sub, flag, sub);
    }
    if (dec) {
        if (a->tokenizer == NULL || a->ninputs != 1)
            up_die("data decode: --tokenizer MODEL_DIR and one --input SHARD are required");
        return 0;
    }
    if (a->output == NULL) up_die("data %s: --output is required: name the shard to write", sub);
    if (docs) {
        if (a->ninputs == 0)
            up_die("data %s: --input is required: name the %s file(s)", sub,
                   a->kind == DATA_TEXT ? "text" : "JSON Lines");
        if ((a->allow_special || a->add_generation_prompt) && a->tokenizer == NULL)
            up_die("data %s: %s needs --tokenizer MODEL_DIR (the model's special tokens and chat "
                   "template)",
                   sub, a->allow_special ? "--allow-special" : "--add-generation-prompt");
        if (a->kind == DATA_JSONL && a->sep < 0 && a->tokenizer == NULL)
            up_die("data jsonl: --doc-sep is required: name the token that opens every "
                   "document, e.g. --doc-sep 256 (then the model needs vocab_size >= 257)");
        return 0;
    }
    if (!have_tokens) up_die("data recall: --tokens is required: say how many tokens to generate");
    if (a->ntok < 16 || a->ntok > (uint64_t)INT32_MAX)
        up_die("data recall: --tokens %llu is out of range: use 16 .. %d",
               (unsigned long long)a->ntok, INT32_MAX);
    if (!have_distance) a->distance = a->ntok / 2 < 512 ? a->ntok / 2 : 512;
    if (a->distance < 4 || a->distance > a->ntok / 2 || a->distance > ((uint64_t)1 << 26))
        up_die("data recall: --distance %llu is out of range: use 4 .. min(tokens/2, 2^26) so "
               "that questions fit in the corpus",
               (unsigned long long)a->distance);
    if (a->echo && a->keys == 0)
        up_die("data recall: --echo needs --keys K (one token per key): the echo repeats that "
               "token");
    if (a->min_distance > 0 && (a->min_distance < 4 || a->min_distance > a->distance))
        up_die("data recall: --min-distance %llu is out of range: use 4 .. --distance (%llu)",
               (unsigned long long)a->min_distance, (unsigned long long)a->distance);
    const recall_spec spec = data_recall_spec(a);
    uint64_t min_keys = corpus_recall_min_keys(&spec);
    if (a->keys > 0 && (a->keys < min_keys || a->keys > (uint64_t)INT32_MAX - RECALL_KEY_TOKEN0))
        up_die("data recall: --keys %llu is out of range: use %llu .. %llu (four times the "
               "questions open at once at these distances)",
               (unsigned long long)a->keys, (unsigned long long)min_keys,
               (unsigned long long)(INT32_MAX - RECALL_KEY_TOKEN0));
    return 0;
}

/* No output replaces an input or the other output (compared by device and inode, or by the
 * resolved path of an output that does not exist yet): the shard would overwrite its own source
 * before anything warns. Stops with a message. */
static void data_check_outputs(const data_args *a) {
    const char *flags[2] = {"--output", "--mask-output"}, *outs[2] = {a->output, a->mask_output};
    for (int k = 0; k < 2; k++) {
        if (outs[k] == NULL) continue;
        for (int i = 0; i < a->ninputs; i++)
            if (up_same_file(outs[k], a->inputs[i]))
                up_die("data %s: %s %s is the input %s: writing it would replace the data it is "
                       "made from; name another file",
                       a->sub, flags[k], outs[k], a->inputs[i]);
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
    for (int i = 0; i < a->ninputs; i++) {
        int rc = a->kind == DATA_TEXT ? docs_add_text_file(&c, a->inputs[i], err, sizeof err)
                                      : docs_add_jsonl_file(&c, a->inputs[i], err, sizeof err);
        if (rc != 0) up_die("%s", err);
    }
    docs_stats st;
    if (docs_summarize(&c, &st) != 0) up_die("data %s: out of memory", a->sub);
    int tb = a->sep > 65535 ? 4 : 2; /* shard_write's choice: every byte token is < 256 */
    char sz[32];
    data_write_shard(a->output, c.tok, c.n, tb, sz, sizeof sz);
    char what[600];
    const char *of = a->kind == DATA_TEXT ? "bytes" : "documents";
    if (a->ninputs == 1)
        snprintf(what, sizeof what, "%s of %s", of, a->inputs[0]);
    else
        snprintf(what, sizeof what, "%s of %d files", of, a->ninputs);
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

int data_main(int argc, char **argv) {
    data_args a;
    int rc = 0;
    if (data_parse_args(&a, argc, argv) == 1) {
        data_print_help(a.sub);
    } else {
        data_check_outputs(&a);
        data_tok_args ta = {.sub = a.sub,
                            .jsonl = a.kind == DATA_JSONL,
                            .inputs = a.inputs,
                            .ninputs = a.ninputs,
                            .output = a.output,
                            .mask_output = a.mask_output,
                            .tokenizer = a.tokenizer,
                            .sep = a.sep,
                            .allow_special = a.allow_special,
                            .add_generation_prompt = a.add_generation_prompt,
                            .threads = (int)a.threads,
                            .from = a.from,
                            .count = a.count};
        if (a.kind == DATA_DECODE)
            rc = data_tok_decode(&ta);
        else if (a.kind == DATA_RECALL)
            rc = data_recall(&a);
        else
            rc = a.tokenizer != NULL ? data_tok_docs(&ta) : data_docs(&a);
    }
    free(a.inputs);
    return rc;
}
