/* data_tok.c — documents in a model's own ids: read in blocks, cut where the tokenizer proves
 * a cut changes nothing (tok_cut_point), encoded in batches on all cores, written in order to
 * the shard (and mask) through a temporary file renamed at the end. */
#include "cmd/data_tok.h"

#include "core/check.h"
#include "core/clock.h"
#include "core/fileio.h"
#include "io/mask.h"
#include "io/shard.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <libgen.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>

#define BLOCK_BYTES (4u << 20)      /* text read per step; a cut is looked for in each block */
#define BATCH_PER_THREAD (4u << 20) /* text bytes encoded per thread between writes */
#define ITEM_BYTES                                                                                 \
    (256u << 10) /* text cut into items of about this size: many per thread in                     \
                  * a batch, so the threads finish it together */
#define BATCH_ITEMS 8192
#define WRITE_BUF 65536 /* tokens written per fwrite */

/* A piece of one document: its text, where it sits in the document, its loss mask. A chat
 * record is one item: its rendered text, with the provenance of each byte (chat.h). */
typedef struct {
    char *text;
    size_t len;
    uint8_t start, end, mask, cont; /* opens / closes a document; mask of its tokens; a cut */
    tok_ids ids;
    chat_rendered *chat; /* NULL: not a chat record */
    uint8_t *tmask;      /* chat: each token's mask (from the trained spans) */
} tok_item;

typedef struct {
    const data_tok_args *a;
    tokenizer *t;
    tok_encoder **enc; /* (nth) */
    tok_spans *spans;  /* (nth) chat: the byte spans of the ids */
    chat_template *ct; /* loaded at the first chat record */
    size_t nchat, chat_counted, chat_tokens;
    int nth, flags;
    int32_t sep, suffix[8];
    int nsuffix;
    tok_item *items, *prev; /* the batch being filled; the one encoded before it, not yet written */
    size_t nitems, nprev, batch_bytes;
    int write_oom;
    /* outputs */
    up_atomic_file shard, mask;
    int tb, have_mask;
    uint32_t buf[WRITE_BUF]; /* tokens not yet written */
    uint16_t buf16[WRITE_BUF];
    uint8_t mbuf[WRITE_BUF];
    size_t nbuf;
    size_t ntok, counted, cur_doc;
    size_t *doc_len, ndoc, doc_cap;
    int nempty;      /* inputs skipped: empty, or JSON Lines without a document */
    const char *why; /* where the separator comes from */
    /* progress */
    size_t total_in, done_in;
    double t0, last_print;
    int printed;
} tok_run;

static tok_run *g_run; /* for data_fail: the outputs to remove */

/* Removes the temporary outputs and stops with the message. */
static void data_fail(const char *fmt, ...) UP_PRINTF(1, 2);
static void data_fail(const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_run != NULL) {
        if (g_run->printed) fputc('\n', stderr);
        up_atomic_abort(&g_run->shard);
        if (g_run->have_mask) up_atomic_abort(&g_run->mask);
    }
    up_die("%s", msg);
}

static void write_out(tok_run *r) {
    if (r->tb == 2) {
        for (size_t i = 0; i < r->nbuf; i++)
            r->buf16[i] = (uint16_t)r->buf[i];
        fwrite(r->buf16, 2, r->nbuf, r->shard.f);
    } else {
        fwrite(r->buf, 4, r->nbuf, r->shard.f);
    }
    if (r->have_mask) fwrite(r->mbuf, 1, r->nbuf, r->mask.f);
    r->nbuf = 0;
}

/* Appends a token (and its mask byte) to the write buffers, flushed by write_out. */
static void put_token(tok_run *r, int32_t id, uint8_t m) {
    if (r->nbuf == WRITE_BUF) write_out(r);
    r->buf[r->nbuf] = (uint32_t)id;
    r->mbuf[r->nbuf++] = m;
    r->ntok++;
    r->cur_doc++;
    r->counted += m;
}

static void end_doc(tok_run *r) {
    if (r->ndoc == r->doc_cap) {
        size_t cap = r->doc_cap ? 2 * r->doc_cap : 1024;
        size_t *d = realloc(r->doc_len, cap * sizeof *d);
        if (d == NULL) { /* on a thread of flush_batch's team: reported after it */
            r->write_oom = 1;
            return;
        }
        r->doc_len = d, r->doc_cap = cap;
    }
    r->doc_len[r->ndoc++] = r->cur_doc;
    r->cur_doc = 0;
}

static void progress(tok_run *r, int final) {
    double t = now_s();
    if (r->total_in < (64u << 20) || (!final && t - r->last_print < (isatty(2) ? 1.0 : 10.0)))
        return;
    r->last_print = t;
    double mbs = (double)r->done_in / 1e6 / (t - r->t0 + 1e-9);
    char done[32], total[32], eta[48] = ""; /* no ETA before a rate */
    up_fmt_bytes(done, sizeof done, (double)r->done_in);
    up_fmt_bytes(total, sizeof total, (double)r->total_in);
    if (r->done_in > 0) {
        size_t rest = r->total_in > r->done_in ? r->total_in - r->done_in : 0;
        long long left = (long long)((double)rest / 1e6 / mbs);
        snprintf(eta, sizeof eta, ", ETA %lldm%02llds", left / 60, left % 60);
    }
    fprintf(stderr, "%supipe data: %s of %s, %.1f MB/s%s%s", isatty(2) ? "\r" : "", done, total,
            mbs, eta, isatty(2) ? "   " : "\n");
    r->printed = isatty(2);
}

static int chat_special_ok(void *ctx, size_t start, size_t end) {
    return chat_template_text(ctx, start, end);
}

/* A chat record's ids: the whole rendered text encoded once, special tokens recognised only
 * in the template's own text; each token's mask 1 when its bytes overlap a trained span (a
 * token a normalizer added alone, with no byte, takes the mask of the byte it stands before). */
static int encode_chat(tok_encoder *e, tok_spans *sp, tok_item *it) {
    sp->n = 0;
    if (tok_encode_spans(e, it->text, it->len, 0, chat_special_ok, it->chat, &it->ids, sp) != 0)
        return -1;
    it->tmask = malloc(it->ids.n + 1);
    if (it->tmask == NULL) return -1;
    for (size_t k = 0; k < it->ids.n; k++) {
        size_t a = sp->at[2 * k], b = sp->at[2 * k + 1];
        if (a == b) b = a < it->len ? a + 1 : a, a = b > 0 ? b - 1 : 0;
        it->tmask[k] = (uint8_t)(b > a && chat_trained(it->chat, a, b));
    }
    return 0;
}

/* Writes the encoded batch r->prev in order and frees it. */
static void write_items(tok_run *r) {
    for (size_t i = 0; i < r->nprev; i++) {
        tok_item *it = &r->prev[i];
        size_t k = 0;
        /* a template that writes the separator itself (Llama 3's bos_token) opens the
         * document with it: no second one */
        if (it->chat != NULL && it->ids.n > 0 && it->ids.ids[0] == r->sep)
            put_token(r, r->sep, 0), k = 1;
        else if (it->start)
            put_token(r, r->sep, 0);
        for (; k < it->ids.n; k++) {
            uint8_t m = it->tmask != NULL ? it->tmask[k] : it->mask;
            put_token(r, it->ids.ids[k], m);
            if (it->chat != NULL) r->chat_tokens++, r->chat_counted += m;
        }
        if (it->end) {
            for (int j = 0; j < r->nsuffix && it->chat == NULL; j++)
                put_token(r, r->suffix[j], it->mask);
            end_doc(r);
        }
        r->done_in += it->len;
        free(it->text);
        free(it->ids.ids);
        free(it->tmask);
        if (it->chat != NULL) chat_rendered_free(it->chat);
        free(it->chat);
    }
    r->nprev = 0;
}

static void check_written(tok_run *r) {
    if (r->write_oom) data_fail("data %s: out of memory", r->a->sub);
    if (r->ntok > (size_t)INT32_MAX)
        data_fail("data %s: over %d tokens do not fit one shard (the header count is int32): "
                  "split the input",
                  r->a->sub, INT32_MAX);
    if (ferror(r->shard.f) || (r->have_mask && ferror(r->mask.f)))
        data_fail("data %s: writing %s failed: check free disk space", r->a->sub, r->a->output);
}

/* Encodes the batch on all threads while one of them first writes the batch before it (the
 * writing, a tenth of the work on 2 threads, overlaps the encoding); the batch becomes r->prev.
 * At most two batches of text and ids are held. */
static void flush_batch(tok_run *r) {
    int oom = 0;
#pragma omp parallel num_threads(r->nth) reduction(| : oom)
    {
#pragma omp single nowait
        write_items(r);
#pragma omp for schedule(dynamic, 1) nowait
        for (size_t i = 0; i < r->nitems; i++) {
            tok_item *it = &r->items[i];
            int th = omp_get_thread_num();
            it->ids.n = 0;
            if (it->chat != NULL)
                oom |= encode_chat(r->enc[th], &r->spans[th], it) != 0;
            else
                oom |= tok_encode(r->enc[th], it->text, it->len,
                                  r->flags | (it->cont ? TOK_CONTINUE : 0), &it->ids) != 0;
        }
    }
    if (oom) data_fail("data %s: out of memory while encoding", r->a->sub);
    check_written(r);
    tok_item *t = r->prev;
    r->prev = r->items, r->nprev = r->nitems;
    r->items = t, r->nitems = 0;
    r->batch_bytes = 0;
    progress(r, 0);
}

/* Queues a copy of text[0, len) (takes it when own). */
static void add_item(tok_run *r, const char *text, size_t len, int start, int end, int mask,
                     int cont, chat_rendered *chat) {
    char *copy = malloc(len + 1);
    if (copy == NULL) data_fail("data %s: out of memory", r->a->sub);
    memcpy(copy, text, len);
    r->items[r->nitems++] = (tok_item){
        copy, len, (uint8_t)start, (uint8_t)end, (uint8_t)mask, (uint8_t)cont, {0}, chat, NULL};
    r->batch_bytes += len;
    if (r->nitems == BATCH_ITEMS || r->batch_bytes >= BATCH_PER_THREAD * (size_t)r->nth)
        flush_batch(r);
}

/* Queues text[0, len) as items of about ITEM_BYTES, cut where tok_cut_point allows (the first
 * item opens the document when start, and continues the text before it when cont; the last
 * closes it when end). A stretch with no cut in its first ITEM_BYTES is looked at whole: a
 * window twice as long, and so on. */
static void add_text(tok_run *r, const char *text, size_t len, int start, int end, int mask,
                     int cont) {
    for (size_t w = ITEM_BYTES; len > w;) {
        size_t c = tok_cut_point(r->t, text, w);
        if (c == 0) {
            w *= 2;
            continue;
        }
        add_item(r, text, c, start, 0, mask, cont, NULL);
        text += c, len -= c, start = 0, cont = 1, w = ITEM_BYTES;
    }
    add_item(r, text, len, start, end, mask, cont, NULL);
}

/* The invalid UTF-8 of one file: runs of bytes that start no valid character (utf8proc's
 * rules), each counted as one sequence; where the first is, and its first bytes. */
typedef struct {
    size_t bad, first;
    char seq[4];
    int nseq;
} utf8_report;

/* Adds the invalid UTF-8 of text[0, n), at file offset base, to u. A run never crosses the
 * end of text: the blocks are cut before ASCII bytes (tok_cut_point). */
static void utf8_scan(utf8_report *u, const char *text, size_t n, size_t base) {
    const utf8proc_uint8_t *s = (const utf8proc_uint8_t *)text;
    int in_run = 0;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k =
            s[i] < 0x80 ? 1 : utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k > 0) {
            i += (size_t)k, in_run = 0;
            continue;
        }
        if (!in_run && u->bad++ == 0) u->first = base + i;
        if (u->bad == 1 && u->nseq < (int)sizeof u->seq) u->seq[u->nseq++] = (char)s[i];
        in_run = 1, i++;
    }
}

/* What the tokenizer makes of the bytes of the first invalid sequence, said in a few words:
 * their ids encoded alone, decoded back to bytes. */
static const char *utf8_fate(tok_run *r, const utf8_report *u, char *buf, size_t len) {
    tok_ids ids = {0};
    tok_text back = {0};
    char err[256];
    if (tok_encode(r->enc[0], u->seq, (size_t)u->nseq, TOK_CONTINUE, &ids) != 0)
        data_fail("data %s: out of memory", r->a->sub);
    int same =
        ids.n > 0 &&
        tok_decode(r->t, ids.ids, ids.n, TOK_BYTES | TOK_CONTINUE, &back, err, sizeof err) == 0 &&
        back.n == (size_t)u->nseq && memcmp(back.s, u->seq, back.n) == 0;
    if (ids.n == 0)
        snprintf(buf, len, "dropped: the tokenizer has neither byte fallback nor an unknown token");
    else if (same)
        snprintf(buf, len, "kept as byte tokens, which decode back to the same bytes");
    else
        snprintf(buf, len,
                 "encoded as token %d, which does not give them back (the unknown "
                 "token)",
                 ids.ids[0]);
    free(ids.ids);
    free(back.s);
    return buf;
}

/* The invalid UTF-8 of a text file: --strict-utf8 refuses the file at the first; else a
 * warning once the file is read (HF's tokenizers cannot take such text at all). */
static void utf8_check(tok_run *r, const char *path, utf8_report *u, int end) {
    if (u->bad == 0) return;
    if (r->a->strict_utf8)
        data_fail(
            "%s: not valid UTF-8 at byte offset %zu (--strict-utf8): repair the file or leave "
            "it out",
            path, u->first);
    if (!end) return;
    char fate[160];
    if (r->printed) fputc('\n', stderr), r->printed = 0;
    fprintf(stderr,
            "upipe data: warning: %s is not valid UTF-8: %zu invalid sequence%s, the "
            "first at byte offset %zu; their bytes were %s (--strict-utf8 refuses such a file)\n",
            path, u->bad, u->bad == 1 ? "" : "s", u->first, utf8_fate(r, u, fate, sizeof fate));
}

/* One text file, one document, read in blocks and cut where the tokenizer allows. Returns 0
 * for an empty file (nothing queued), else 1. */
static int add_text_file(tok_run *r, const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) data_fail("%s: cannot open: check the path and permissions", path);
    size_t cap = 2 * (size_t)BLOCK_BYTES, len = 0, base = 0; /* base: file offset of buf[0] */
    char *buf = malloc(cap);
    if (buf == NULL) data_fail("data %s: out of memory", r->a->sub);
    utf8_report u = {0};
    int first = 1;
    for (;;) {
        if (cap - len < BLOCK_BYTES) {
            cap *= 2;
            buf = realloc(buf, cap);
            if (buf == NULL) data_fail("data %s: out of memory", r->a->sub);
        }
        size_t got = fread(buf + len, 1, BLOCK_BYTES, f);
        if (got < BLOCK_BYTES && ferror(f)) data_fail("%s: read failed", path);
        len += got;
        if (got < BLOCK_BYTES) break; /* end of file */
        size_t cut = tok_cut_point(r->t, buf, len);
        if (cut == 0) continue; /* no safe cut yet: read on (the piece grows) */
        utf8_scan(&u, buf, cut, base);
        utf8_check(r, path, &u, 0);
        add_text(r, buf, cut, first, 0, 1, !first);
        first = 0;
        memmove(buf, buf + cut, len - cut);
        len -= cut, base += cut;
    }
    fclose(f);
    if (first && len == 0) {
        free(buf);
        return 0;
    }
    utf8_scan(&u, buf, len, base);
    utf8_check(r, path, &u, 1);
    add_text(r, buf, len, first, 1, 1, !first);
    free(buf);
    return 1;
}

/* Renders a chat record {"messages": [...], ...} with the model's chat template (its other keys
 * are template variables, as apply_chat_template's keyword arguments) and queues it. */
static void add_chat(tok_run *r, const json_t *o, const char *path, size_t lineno) {
    char err[1024];
    if (r->ct == NULL) {
        char dir[4096];
        struct stat sb;
        snprintf(dir, sizeof dir, "%s", r->a->tokenizer);
        const char *folder = stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) ? dir : dirname(dir);
        r->ct = chat_template_load(folder, err, sizeof err);
        if (r->ct == NULL)
            data_fail("%s:%zu: a chat record needs the model's chat template: %s", path, lineno,
                      err);
    }
    json_t *kw = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        if (strcmp(k, "messages") != 0) json_object_set(kw, k, v);
    }
    /* strftime_now (Llama 3.1's "Today Date"): SOURCE_DATE_EPOCH when set, for shards that
     * do not change with the day they are made */
    const char *sde = getenv("SOURCE_DATE_EPOCH");
    long long now = sde != NULL && *sde != '\0' ? atoll(sde) : (long long)time(NULL);
    chat_opts opts = {r->a->add_generation_prompt, now, kw};
    chat_rendered *cr = calloc(1, sizeof *cr);
    if (cr == NULL) data_fail("data %s: out of memory", r->a->sub);
    if (chat_render(r->ct, o, &opts, cr, err, sizeof err) != 0)
        data_fail("%s:%zu: %s", path, lineno, err);
    json_decref(kw);
    if (cr->len == 0)
        data_fail("%s:%zu: the chat template wrote nothing for this record", path, lineno);
    r->nchat++;
    add_item(r, cr->text, cr->len, 1, 1, 1, 0, cr);
}

/* One document per record: {"text": T}, {"prompt": P, "response": R} (R continues P: no space
 * is added between them; only R counts), or {"messages": [...]} (add_chat). Returns the number
 * of documents (0: an empty file, or only empty lines). */
static size_t add_jsonl_file(tok_run *r, const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) data_fail("%s: cannot open: check the path and permissions", path);
    char *line = NULL;
    size_t cap = 0, lineno = 0, docs = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
            len--;
        if (len == 0) continue;
        json_error_t je;
        json_t *o = json_loadb(line, len, 0, &je);
        if (!json_is_object(o))
            data_fail("%s:%zu: not a JSON object (%s); expected {\"text\": ...}, {\"prompt\": "
                      "..., \"response\": ...} or {\"messages\": [...]}",
                      path, lineno, o ? "another JSON value" : je.text);
        const json_t *tx = json_object_get(o, "text"), *p = json_object_get(o, "prompt"),
                     *re = json_object_get(o, "response");
        if (json_object_get(o, "messages") != NULL) {
            add_chat(r, o, path, lineno);
        } else if (json_is_string(tx) && p == NULL && re == NULL && json_string_length(tx) > 0) {
            add_text(r, json_string_value(tx), json_string_length(tx), 1, 1, 1, 0);
        } else if (tx == NULL && json_is_string(p) && json_is_string(re) &&
                   json_string_length(re) > 0) {
            add_text(r, json_string_value(p), json_string_length(p), 1, 0, 0, 0);
            add_text(r, json_string_value(re), json_string_length(re), 0, 1, 1, 1);
        } else {
            data_fail("%s:%zu: expected {\"text\": non-empty string}, {\"prompt\": string, "
                      "\"response\": non-empty string} or {\"messages\": [...]}",
                      path, lineno);
        }
        docs++;
        json_decref(o);
    }
    if (ferror(f)) data_fail("%s: read failed", path);
    free(line);
    fclose(f);
    return docs;
}

static tokenizer *load_or_die(const char *path) {
    char err[1024];
    tokenizer *t = tok_load(path, err, sizeof err);
    if (t == NULL) up_die("%s", err);
    return t;
}

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static void write_header(FILE *f, int32_t magic, int32_t version, size_t n) {
    int32_t hdr[SHARD_HEADER_INTS] = {magic, version, (int32_t)n};
    if (fseek(f, 0, SEEK_SET) == 0) fwrite(hdr, sizeof hdr, 1, f);
}

/* The token that opens every document, and where it comes from (r->why). */
static void choose_sep(tok_run *r) {
    const data_tok_args *a = r->a;
    int32_t prefix[8];
    int nprefix = tok_prefix_ids(r->t, prefix, 8);
    int32_t eot = tok_token_id(r->t, "<|endoftext|>");
    if (a->sep >= 0) {
        r->sep = (int32_t)a->sep, r->why = "--doc-sep";
    } else if (nprefix > 0) {
        r->sep = prefix[0], r->why = "the post-processor's first token";
    } else if (tok_bos_id(r->t) >= 0) {
        r->sep = tok_bos_id(r->t), r->why = "bos_token of tokenizer_config.json";
    } else if (eot >= 0 && tok_is_special(r->t, eot)) {
        /* GPT-2 and Qwen separate their pretraining documents with it; Qwen3's eos_token is
         * <|im_end|>, the end of a chat turn, which a chat template writes inside documents */
        r->sep = eot, r->why = "<|endoftext|> (there is no BOS)";
    } else if (tok_eos_id(r->t) >= 0) {
        r->sep = tok_eos_id(r->t), r->why = "eos_token of tokenizer_config.json (there is no BOS)";
    } else {
        up_die("data %s: the tokenizer has no BOS or EOS token to separate documents: name one "
               "with --doc-sep ID",
               a->sub);
    }
    if (nprefix > 1 && a->sep < 0)
        up_die("data %s: the post-processor puts %d tokens before every text; only one opens a "
               "document here: name it with --doc-sep ID",
               a->sub, nprefix);
}

/* The tokenizer, the separator, the encoders and the batches; the inputs' total size. */
static void run_init(tok_run *r, const data_tok_args *a) {
    memset(r, 0, sizeof *r);
    r->a = a;
    r->t = load_or_die(a->tokenizer);
    r->nsuffix = tok_suffix_ids(r->t, r->suffix, 8);
    choose_sep(r);
    if (a->sep >= 0) r->nsuffix = 0; /* an explicit separator replaces the post-processor */
    r->tb = (uint64_t)r->sep + 1 > 65536 || tok_vocab_size(r->t) > 65536 ? 4 : 2;
    r->flags = a->allow_special ? TOK_ALLOW_SPECIAL : 0;
    r->nth = a->threads > 0 ? a->threads : omp_get_max_threads();
    r->enc = calloc((size_t)r->nth, sizeof *r->enc);
    r->items = calloc(BATCH_ITEMS, sizeof *r->items);
    r->prev = calloc(BATCH_ITEMS, sizeof *r->prev);
    r->spans = calloc((size_t)r->nth, sizeof *r->spans);
    if (r->enc == NULL || r->items == NULL || r->prev == NULL || r->spans == NULL)
        up_die("data %s: out of memory", a->sub);
    for (int i = 0; i < r->nth; i++)
        if ((r->enc[i] = tok_encoder_new(r->t)) == NULL) up_die("data %s: out of memory", a->sub);
    for (int i = 0; i < a->ninputs; i++) {
        struct stat sb;
        if (stat(a->inputs[i], &sb) != 0 || !S_ISREG(sb.st_mode))
            up_die("%s: not a readable file: check the path", a->inputs[i]);
        r->total_in += (size_t)sb.st_size;
    }
}

static void run_free(tok_run *r) {
    for (int i = 0; i < r->nth; i++) {
        tok_encoder_free(r->enc[i]);
        free(r->spans[i].at);
    }
    free(r->enc);
    free(r->spans);
    chat_template_free(r->ct);
    free(r->items);
    free(r->prev);
    free(r->doc_len);
    tok_free(r->t);
}

/* The temporary shard (and mask) with placeholder headers; from here a failure removes them. */
static void open_outputs(tok_run *r) {
    const data_tok_args *a = r->a;
    char err[1024];
    if (up_atomic_open(&r->shard, a->output, err, sizeof err) != 0) up_die("%s", err);
    g_run = r;
    if (a->mask_output != NULL) {
        if (up_atomic_open(&r->mask, a->mask_output, err, sizeof err) != 0) data_fail("%s", err);
        r->have_mask = 1;
        write_header(r->mask.f, MASK_MAGIC, MASK_VERSION, 0);
    }
    write_header(r->shard.f, r->tb == 2 ? SHARD_MAGIC_U16 : SHARD_MAGIC_U32, r->tb == 2 ? 1 : 7, 0);
}

/* The last batch written, the headers' counts, the files renamed into place. */
static void close_outputs(tok_run *r) {
    const data_tok_args *a = r->a;
    char err[1024];
    flush_batch(r);
    write_items(r);
    check_written(r);
    write_out(r);
    progress(r, 1);
    if (r->printed) fputc('\n', stderr);
    write_header(r->shard.f, r->tb == 2 ? SHARD_MAGIC_U16 : SHARD_MAGIC_U32, r->tb == 2 ? 1 : 7,
                 r->ntok);
    if (r->have_mask) write_header(r->mask.f, MASK_MAGIC, MASK_VERSION, r->ntok);
    if (r->have_mask && up_atomic_commit(&r->mask, err, sizeof err) != 0) data_fail("%s", err);
    r->have_mask = 0;
    if (up_atomic_commit(&r->shard, err, sizeof err) != 0) {
        if (a->mask_output != NULL) unlink(a->mask_output);
        g_run = NULL;
        up_die("%s", err);
    }
    g_run = NULL;
}

static void print_summary(tok_run *r, double secs) {
    const data_tok_args *a = r->a;
    int nfiles = a->ninputs - r->nempty;
    char sz[32], skipped[64] = "";
    qsort(r->doc_len, r->ndoc, sizeof *r->doc_len, cmp_size);
    up_fmt_bytes(sz, sizeof sz, (double)(SHARD_HEADER_BYTES + (size_t)r->tb * r->ntok));
    if (r->nempty > 0)
        snprintf(skipped, sizeof skipped, ", %d empty file%s skipped", r->nempty,
                 r->nempty == 1 ? "" : "s");
    printf("upipe data: wrote %zu tokens (%zu document%s of %d file%s%s, %.1f MB/s on %d "
           "thread%s) to %s (%s, uint%d)\n",
           r->ntok, r->ndoc, r->ndoc == 1 ? "" : "s", nfiles, nfiles == 1 ? "" : "s", skipped,
           (double)r->total_in / 1e6 / (secs + 1e-9), r->nth, r->nth == 1 ? "" : "s", a->output, sz,
           r->tb * 8);
    printf("  tokenizer: %s\n", tok_describe(r->t));
    printf("  every document opens with token %d (%s)%s; document length (tokens, separator "
           "included): shortest %zu, median %zu, longest %zu\n",
           r->sep, r->why, r->nsuffix > 0 ? " and closes with the post-processor's suffix" : "",
           r->doc_len[0], r->doc_len[r->ndoc / 2], r->doc_len[r->ndoc - 1]);
    if (r->nchat > 0)
        printf("  %zu chat record%s rendered by the model's chat template%s: %zu of their %zu "
               "tokens are assistant turns (content and end of turn)\n",
               r->nchat, r->nchat == 1 ? "" : "s",
               a->add_generation_prompt ? " with the generation prompt" : "", r->chat_counted,
               r->chat_tokens);
    if (a->mask_output != NULL)
        printf("  wrote the loss mask (%zu of %zu targets count) to %s\n", r->counted, r->ntok,
               a->mask_output);
    uint64_t vocab = tok_vocab_size(r->t), need = (uint64_t)r->sep + 1;
    printf("  train with: --doc-sep %d (the model needs vocab_size >= %llu)\n", r->sep,
           (unsigned long long)(need > vocab ? need : vocab));
}

int data_tok_docs(const data_tok_args *a) {
    static tok_run r; /* one run per process; its write buffers are large */
    run_init(&r, a);
    open_outputs(&r);
    r.t0 = now_s();
    for (int i = 0; i < a->ninputs; i++) {
        int any = a->jsonl ? add_jsonl_file(&r, a->inputs[i]) > 0 : add_text_file(&r, a->inputs[i]);
        r.nempty += !any;
    }
    if (r.nempty == a->ninputs && a->ninputs == 1)
        data_fail("%s: %s: nothing to write", a->inputs[0],
                  a->jsonl ? "no document in the file (only empty lines)" : "the file is empty");
    if (r.nempty == a->ninputs)
        data_fail("data %s: all %d inputs are empty%s: nothing to write", a->sub, a->ninputs,
                  a->jsonl ? " (or only empty lines)" : "");
    close_outputs(&r);
    print_summary(&r, now_s() - r.t0);
    run_free(&r);
    return 0;
}

int data_tok_decode(const data_tok_args *a) {
    tokenizer *t = load_or_die(a->tokenizer);
    token_shard s;
    char err[1024];
    if (shard_open(&s, a->inputs[0], (int)tok_vocab_size(t), err, sizeof err) != 0)
        up_die("%s", err);
    if (a->from >= s.ntok)
        up_die("data decode: --from %llu is past the shard's %zu tokens",
               (unsigned long long)a->from, s.ntok);
    size_t n = s.ntok - (size_t)a->from;
    if (a->count > 0 && a->count < n) n = (size_t)a->count;
    enum { CHUNK = 65536 };
    int32_t *ids = malloc(CHUNK * sizeof *ids);
    tok_text out = {0};
    if (ids == NULL) up_die("data decode: out of memory");
    for (size_t done = 0; done < n;) {
        size_t k = n - done < CHUNK ? n - done : CHUNK;
        shard_read(&s, (size_t)a->from + done, k, ids);
        /* a chunk that is not the last ends where the text of separate calls is that of one
         * call (not inside a character's bytes: HF replaces a broken one by U+FFFD) */
        if (done + k < n) {
            size_t j = k - 1;
            while (j > 0 && !tok_decode_boundary(t, ids[j]))
                j--;
            if (j > 0) k = j; /* the next chunk starts at ids[j] */
        }
        out.n = 0;
        if (tok_decode(t, ids, k, done > 0 ? TOK_CONTINUE : 0, &out, err, sizeof err) != 0)
            up_die("data decode: %s", err);
        if (fwrite(out.s, 1, out.n, stdout) != out.n) up_die("data decode: writing failed");
        done += k;
    }
    free(out.s);
    free(ids);
    shard_close(&s);
    tok_free(t);
    return 0;
}
