/* tokenizer.h — a Hugging Face tokenizer.json, encoded and decoded exactly as HF's Rust library
 * `tokenizers` (the one transformers runs).
 *
 * Supported (anything else is refused at load with one line naming it):
 *  - model BPE, in two families:
 *    byte-level (GPT-2, Llama 3/3.1, Qwen2/3): pre_tokenizer Split(Regex, Isolated) and/or
 *      ByteLevel (use_regex: GPT-2's pattern), normalizer none or NFC (the library's: Unicode 9.0
 *      tables, so characters assigned since stay as they are, tok_nfc.c), decoder ByteLevel;
 *    SentencePiece-style (Llama 2, Mistral v0.1): no pre_tokenizer, normalizer Prepend("▁") +
 *      Replace(" " -> "▁"), byte_fallback, fuse_unk, decoder Replace/ByteFallback/Fuse/Strip;
 *  - merges as "a b" strings or ["a", "b"] pairs, ignore_merges;
 *  - added tokens (matched leftmost-longest before normalization, lstrip/rstrip/single_word
 *    off), the post-processor's TemplateProcessing prefix and suffix (BOS/EOS), ByteLevel.
 *
 * Stages (as HF): split on added tokens -> normalize each segment -> pre-tokenize into pieces
 * (PCRE2 with UTF+UCP+JIT; Oniguruma's \s is Unicode White_Space, translated) -> BPE merges
 * per piece (a heap of adjacent pairs ordered by (rank, position), HF's word.rs) -> ids.
 * SentencePiece-style text has no pre-tokenizer; it is cut before every "▁" that follows a
 * non-"▁" character when the load proved that no merge result holds such a "▁" (so no merge
 * crosses a cut), else merged whole.
 *
 * Text need not be valid UTF-8: invalid bytes never match the regex, become their own pieces
 * and round-trip through the byte-level alphabet or byte fallback (NFC leaves such a segment
 * unnormalized). The tokenizer is read-only after tok_load and shared by threads; each thread
 * encodes with its own tok_encoder (scratch and a per-piece cache). */
#ifndef UP_TOKENIZER_H
#define UP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;
typedef struct tok_encoder tok_encoder;

/* A growable id list (ids appended; free with free(ids)). */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} tok_ids;

/* Byte spans of ids: id k of a tok_encode_spans call covers text[at[2k], at[2k + 1]) (k counts
 * from the start of the tok_ids the call appended to; n ids described). Free with free(at). */
typedef struct {
    size_t *at;
    size_t n, cap;
} tok_spans;

/* A growable byte string (bytes appended; free with free(s)). */
typedef struct {
    char *s;
    size_t n, cap;
} tok_text;

enum {
    TOK_ADD_SPECIAL = 1,   /* add the post-processor's prefix/suffix (BOS/EOS) */
    TOK_ALLOW_SPECIAL = 2, /* match special added tokens in the text (else they stay text;
                              non-special added tokens are always matched, as HF does) */
    TOK_CONTINUE = 4,      /* text continues a text cut at tok_cut_point: no Prepend "▁" nor
                              prefix space at its start */
    TOK_BYTES = 8,         /* tok_decode: the tokens' bytes as they are, valid UTF-8 or not */
};

/* Loads path: a tokenizer.json, or a model folder holding tokenizer.json (and optionally
 * tokenizer_config.json, for bos_token/eos_token). NULL with a one-line reason in err. */
tokenizer *tok_load(const char *path, char *err, size_t errlen);
void tok_free(tokenizer *t);

/* One past the largest id (model vocabulary and added tokens). */
uint32_t tok_vocab_size(const tokenizer *t);
/* A one-line description: "byte-level BPE, 128256 ids, 280147 merges, ...". */
const char *tok_describe(const tokenizer *t);
/* The id of the token whose content is s (added tokens first, then the vocabulary), or -1. */
int32_t tok_token_id(const tokenizer *t, const char *s);
/* The ids the post-processor adds before/after one sequence; returns how many (<= max). */
int tok_prefix_ids(const tokenizer *t, int32_t *ids, int max);
int tok_suffix_ids(const tokenizer *t, int32_t *ids, int max);
/* tokenizer_config.json's bos_token / eos_token id, or -1 when absent. */
int32_t tok_bos_id(const tokenizer *t);
int32_t tok_eos_id(const tokenizer *t);
/* 1 when id is a special added token. */
int tok_is_special(const tokenizer *t, int32_t id);

/* Empties the per-piece cache the encoders share (for benchmarks that start cold); no encoder
 * of t may be encoding meanwhile. */
void tok_cache_reset(tokenizer *t);

/* Per-thread encoding state (a per-piece cache of its own in front of the one all encoders of
 * the tokenizer share). NULL when out of memory. */
tok_encoder *tok_encoder_new(const tokenizer *t);
void tok_encoder_free(tok_encoder *e);
/* Appends the ids of text[0, len) to out (flags: TOK_*). 0, or -1 when out of memory. */
int tok_encode(tok_encoder *e, const char *text, size_t len, int flags, tok_ids *out);

/* 1 when a special token may be matched at text[start, end) (see tok_encode_spans). */
typedef int (*tok_special_fn)(void *ctx, size_t start, size_t end);
/* tok_encode, and also:
 * - with special_ok: special added tokens are matched only where special_ok says so (as if
 *   TOK_ALLOW_SPECIAL held there), plain text elsewhere; a chat template's own text can so hold
 *   special tokens while the messages' contents cannot (tokenizer/chat.h);
 * - with spans: the byte span of the text each appended id stands for. Through the normalizers
 *   a span is exact: a prefix space or "▁" the normalizer added belongs to no byte (an empty
 *   span where it is a token alone), a "▁" for a space to that space; where NFC rewrote part
 *   of a segment, a token inside that stretch spans all of it; an id from an unknown character
 *   (unk) gives every id of its segment the segment's span. An added token spans its match,
 *   the post-processor's ids the empty spans at the ends. */
int tok_encode_spans(tok_encoder *e, const char *text, size_t len, int flags,
                     tok_special_fn special_ok, void *ctx, tok_ids *out, tok_spans *spans);

/* A place to cut text[0, n) so that encoding the two parts (the second with TOK_CONTINUE) gives
 * the ids of the whole: the last such offset in (0, n), or 0 when there is none (or the
 * tokenizer has no proven cut). Byte-level with a Llama 3 / Qwen style pattern (it has
 * "\s*[\r\n]+"): after "\n" before printable ASCII; SentencePiece-style with the safe split:
 * before a space that follows a non-space. Never inside an added token. */
size_t tok_cut_point(const tokenizer *t, const char *text, size_t n);

/* Appends the text of ids to out as HF's decoder writes it (special tokens as their content);
 * the SentencePiece Strip decoder applies at the start of this call unless flags holds
 * TOK_CONTINUE (ids that continue those of an earlier call). Ids that do not make valid UTF-8
 * (a window cut inside a character) decode as HF's Rust library decodes them: byte-level, each
 * maximal ill-formed subpart of the bytes between special tokens becomes U+FFFD (ByteLevel's
 * from_utf8_lossy); SentencePiece-style, a run of byte-fallback tokens that is not valid UTF-8
 * becomes one U+FFFD per token (ByteFallback). TOK_BYTES: the raw bytes. 0, or -1 with err (an
 * id out of range, out of memory). */
int tok_decode(const tokenizer *t, const int32_t *ids, size_t n, int flags, tok_text *out,
               char *err, size_t errlen);
/* 1 when a decode may be cut before id (the ids before it in one tok_decode call, the rest with
 * TOK_CONTINUE in the next) and give the text of one call: a special token, a SentencePiece
 * token that is not a byte-fallback one, a byte-level token that does not start with a UTF-8
 * continuation byte. */
int tok_decode_boundary(const tokenizer *t, int32_t id);

#endif
