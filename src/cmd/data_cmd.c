/* data_cmd.c — the `upipe data` command: writes a byte-level corpus as an llm.c token shard. */
#include "cmd/data_cmd.h"

#include "core/check.h"
#include "io/corpus.h"
#include "io/shard.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char data_usage[] =
    "usage:\n"
    "  upipe data text   --input FILE --output SHARD.bin\n"
    "  upipe data recall --output SHARD.bin --tokens N [--distance D] [--seed S]\n"
    "\n"
    "Writes an llm.c token shard (uint16 tokens) with a byte-level vocabulary: token ids are\n"
    "byte values 0..255, so the model's vocab_size must be at least 256.\n"
    "\n"
    "  text      every byte of FILE becomes one token.\n"
    "  recall    a synthetic long-range recall corpus: facts \"key=V;\" and, about D tokens\n"
    "            later, questions \"key?V;\" whose answer V only the earlier fact reveals.\n"
    "\n"
    "flags:\n"
    "  --input FILE     (text) the text file to tokenize\n"
    "  --output PATH    the shard to write (written atomically: temp file, then rename)\n"
    "  --tokens N       (recall) number of tokens to generate, N >= 16\n"
    "  --distance D     (recall) average tokens between a fact and its question\n"
    "                   (default min(512, N/2); 4 <= D <= N/2)\n"
    "  --seed S         (recall) random seed, the corpus is a function of it (default 1)\n"
    "  --help           this text\n";

static int parse_u64(const char *s, uint64_t *out) {
    if (s == NULL || *s < '0' || *s > '9') return -1;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') return -1;
    *out = v;
    return 0;
}

/* The flags of one `upipe data` call, validated. */
typedef struct {
    const char *sub; /* "text" or "recall" */
    int is_text;
    const char *input, *output;
    uint64_t ntok, distance, seed;
} data_args;

/* Fills a from argv (argv[0] == "data"). Returns 1 for --help, else 0; a bad or missing flag
 * stops the process with a message. */
static int data_parse_args(data_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->seed = 1;
    if (argc < 2)
        up_die("data: missing subcommand: use `upipe data text` or `upipe data recall` (see "
               "--help)");
    const char *sub = argv[1];
    a->sub = sub;
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0)
        return 1;
    int is_text = strcmp(sub, "text") == 0, is_recall = strcmp(sub, "recall") == 0;
    if (!is_text && !is_recall)
        up_die("data: unknown subcommand \"%s\": use \"text\" or \"recall\" (see --help)", sub);
    a->is_text = is_text;
    int have_tokens = 0, have_distance = 0;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return 1;
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
        if (is_text && strcmp(flag, "--input") == 0)
            a->input = val;
        else if (strcmp(flag, "--output") == 0)
            a->output = val;
        else if (is_recall && strcmp(flag, "--tokens") == 0) {
            if (parse_u64(val, &a->ntok) != 0)
                up_die("data: --tokens \"%s\" is not a positive integer", val);
            have_tokens = 1;
        } else if (is_recall && strcmp(flag, "--distance") == 0) {
            if (parse_u64(val, &a->distance) != 0)
                up_die("data: --distance \"%s\" is not a positive integer", val);
            have_distance = 1;
        } else if (is_recall && strcmp(flag, "--seed") == 0) {
            if (parse_u64(val, &a->seed) != 0)
                up_die("data: --seed \"%s\" is not a non-negative integer", val);
        } else
            up_die("data %s: unknown flag \"%s\" (see upipe data --help)", sub, flag);
    }
    if (a->output == NULL) up_die("data %s: --output is required: name the shard to write", sub);
    if (is_text) {
        if (a->input == NULL) up_die("data text: --input is required: name the text file");
        return 0;
    }
    if (!have_tokens)
        up_die("data recall: --tokens is required: say how many tokens to generate");
    if (a->ntok < 16 || a->ntok > (uint64_t)INT32_MAX)
        up_die("data recall: --tokens %llu is out of range: use 16 .. %d",
               (unsigned long long)a->ntok, INT32_MAX);
    if (!have_distance) a->distance = a->ntok / 2 < 512 ? a->ntok / 2 : 512;
    if (a->distance < 4 || a->distance > a->ntok / 2 || a->distance > ((uint64_t)1 << 26))
        up_die("data recall: --distance %llu is out of range: use 4 .. min(tokens/2, 2^26) so "
               "that questions fit in the corpus",
               (unsigned long long)a->distance);
    return 0;
}

/* The corpus a asks for: (n) tokens, malloc'd. Stops the process with a message on failure. */
static uint32_t *data_make_tokens(const data_args *a, size_t *n) {
    if (a->is_text) {
        char err[1024];
        uint32_t *tok = corpus_tokenize_bytes(a->input, n, err, sizeof err);
        if (tok == NULL) up_die("%s", err);
        return tok;
    }
    *n = (size_t)a->ntok;
    uint32_t *tok = corpus_make_recall(*n, (size_t)a->distance, a->seed);
    if (tok == NULL) up_die("data recall: out of memory for %zu tokens", *n);
    return tok;
}

int data_main(int argc, char **argv) {
    data_args a;
    if (data_parse_args(&a, argc, argv) == 1) {
        fputs(data_usage, stdout);
        return 0;
    }
    size_t n = 0;
    uint32_t *tok = data_make_tokens(&a, &n);
    char err[1024];
    int rc = shard_write(a.output, tok, n, err, sizeof err);
    free(tok);
    if (rc != 0) up_die("%s", err);
    char sz[32];
    up_fmt_bytes(sz, sizeof sz, (double)(SHARD_HEADER_BYTES + 2 * n)); /* bytes: uint16 format */
    if (a.is_text)
        printf("upipe data: wrote %zu tokens (bytes of %s) to %s (%s)\n", n, a.input, a.output,
               sz);
    else
        printf("upipe data: wrote %zu tokens (recall, distance %llu, seed %llu) to %s (%s)\n", n,
               (unsigned long long)a.distance, (unsigned long long)a.seed, a.output, sz);
    return 0;
}
