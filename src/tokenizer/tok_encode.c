/* tok_encode.c — encoding (added tokens, normalizers, pre-tokenizer, BPE merges) and decoding. */
#include "tokenizer/tok_internal.h"

#include "core/check.h"
#include "core/heap.h"

#include <stdlib.h>
#include <string.h>

#define CACHE_SLOTS 65536     /* per-piece cache entries (power of 2), cleared when half full */
#define CACHE_MAX_PIECE 256   /* longer pieces are not cached */
#define CACHE_POOL (8u << 20) /* bytes of cached pieces and ids before a clear */

typedef struct {
    int32_t id, prev, next;
    uint32_t len; /* 0: merged into its left neighbour */
} tok_sym;

typedef struct {
    uint32_t rank;
    int32_t pos, id;
} tok_cand;

typedef struct {
    uint64_t hash; /* 0: empty */
    uint32_t key_off, key_len, ids_off, nids;
} tok_cache_slot;

struct tok_encoder {
    const tokenizer *t;
    pcre2_match_data *md;
    tok_sym *sym;
    size_t sym_cap;
    tok_cand *heap;
    size_t heap_cap;
    char *norm; /* the normalized segment */
    size_t norm_cap;
    tok_cache_slot *cache;
    size_t cache_used;
    char *cache_keys;
    int32_t *cache_ids;
    size_t keys_len, ids_len;
    tok_spans *spans; /* during tok_encode_spans: where the ids' byte spans go, else NULL */
};

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (q == NULL) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static int ids_push(tok_ids *out, int32_t id) {
    if (grow((void **)&out->ids, &out->cap, out->n + 1, sizeof *out->ids) != 0) return -1;
    out->ids[out->n++] = id;
    return 0;
}

static void cache_clear(tok_encoder *e) {
    memset(e->cache, 0, CACHE_SLOTS * sizeof *e->cache);
    e->cache_used = e->keys_len = e->ids_len = 0;
}

tok_encoder *tok_encoder_new(const tokenizer *t) {
    /* a cache line of its own: encoders of other threads are allocated next to it */
    size_t sz = (sizeof(tok_encoder) + 63) / 64 * 64;
    tok_encoder *e = aligned_alloc(64, sz);
    if (e == NULL) return NULL;
    memset(e, 0, sz);
    e->t = t;
    /* zeroed by writing (cache_clear), not calloc: a calloc'd page a lookup reads first is the
     * shared zero page, and the first store to it a copy-on-write whose TLB flush interrupts every
     * other core of the process (with 2 threads, a tenth of the encoding time on a VM).
     * aligned_alloc, as the compiler turns malloc + memset into calloc */
    e->cache = aligned_alloc(64, CACHE_SLOTS * sizeof *e->cache);
    e->cache_keys = malloc(CACHE_POOL);
    e->cache_ids = malloc(CACHE_POOL);
    if (t->re != NULL) e->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (e->cache == NULL || e->cache_keys == NULL || e->cache_ids == NULL ||
        (t->re != NULL && e->md == NULL)) {
        tok_encoder_free(e);
        return NULL;
    }
    cache_clear(e);
    return e;
}

void tok_encoder_free(tok_encoder *e) {
    if (e == NULL) return;
    if (e->md != NULL) pcre2_match_data_free(e->md);
    free(e->sym);
    free(e->heap);
    free(e->norm);
    free(e->cache);
    free(e->cache_keys);
    free(e->cache_ids);
    free(e);
}

/* The heap of merge candidates, least (rank, pos) on top (HF word.rs's order). */
static int cand_less(tok_cand a, tok_cand b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}
UP_HEAP_DEFINE(cand_heap, tok_cand, cand_less)

/* Pushes the merge of the pair starting at symbol pos, if any. */
static void push_pair(tok_encoder *e, size_t *nh, int32_t pos) {
    const tokenizer *t = e->t;
    int32_t next = e->sym[pos].next;
    if (next < 0) return;
    uint32_t rank;
    int32_t id;
    if (tok_merge_find(t, e->sym[pos].id, e->sym[next].id, &rank, &id) == 0)
        cand_heap_push(e->heap, nh, (tok_cand){rank, pos, id});
}

/* Appends one SentencePiece-style symbol for the character s[0, n) (vocab, byte fallback or
 * unk), as HF's BPE::merge_word. */
static void sp_symbols(tok_encoder *e, size_t *ns, const char *s, uint32_t n) {
    const tokenizer *t = e->t;
    int32_t id = tok_vocab_find(t, s, n);
    if (id >= 0) {
        e->sym[(*ns)++] = (tok_sym){id, 0, 0, n};
        return;
    }
    if (t->byte_fallback) {
        for (uint32_t k = 0; k < n; k++)
            e->sym[(*ns)++] = (tok_sym){t->byte_id[(uint8_t)s[k]], 0, 0, 1};
        return;
    }
    if (t->unk_id < 0) return; /* HF drops a character it cannot represent without unk */
    if (t->fuse_unk && *ns > 0 && e->sym[*ns - 1].id == t->unk_id) {
        e->sym[*ns - 1].len += n;
        return;
    }
    e->sym[(*ns)++] = (tok_sym){t->unk_id, 0, 0, n};
}

/* The length of the UTF-8 character at s[0, n): 1 for each byte of an ill-formed sequence. */
static uint32_t char_len(const char *s, size_t n) {
    int32_t cp;
    int k = tok_utf8_next((const uint8_t *)s, n, &cp);
    return k > 0 ? (uint32_t)k : 1;
}

/* BPE of one piece, appended to out. */
static int bpe_piece(tok_encoder *e, const char *p, size_t n, tok_ids *out) {
    const tokenizer *t = e->t;
    if (t->ignore_merges) {
        int32_t id = tok_vocab_find(t, p, n);
        if (id >= 0) return ids_push(out, id);
    }
    if (grow((void **)&e->sym, &e->sym_cap, n, sizeof *e->sym) != 0) return -1;
    size_t ns = 0;
    if (t->family == TOK_BYTE_LEVEL) {
        for (size_t i = 0; i < n; i++)
            e->sym[ns++] = (tok_sym){t->byte_id[(uint8_t)p[i]], 0, 0, 1};
    } else {
        for (size_t i = 0; i < n;) {
            uint32_t cl = char_len(p + i, n - i);
            sp_symbols(e, &ns, p + i, cl);
            i += cl;
        }
    }
    for (size_t i = 0; i < ns; i++) {
        e->sym[i].prev = (int32_t)i - 1;
        e->sym[i].next = i + 1 < ns ? (int32_t)i + 1 : -1;
    }
    if (grow((void **)&e->heap, &e->heap_cap, ns + 1, sizeof *e->heap) != 0) return -1;
    size_t nh = 0;
    for (size_t i = 0; i + 1 < ns; i++)
        push_pair(e, &nh, (int32_t)i);
    while (nh > 0) {
        tok_cand top = cand_heap_pop(e->heap, &nh);
        tok_sym *cur = &e->sym[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        tok_sym *right = &e->sym[cur->next];
        uint32_t rank;
        int32_t id;
        if (tok_merge_find(t, cur->id, right->id, &rank, &id) != 0 || id != top.id)
            continue; /* stale: a neighbour changed since the push */
        cur->id = top.id;
        cur->len += right->len;
        cur->next = right->next;
        right->len = 0;
        if (cur->next >= 0) e->sym[cur->next].prev = top.pos;
        /* every push of a merge makes at most one new candidate at each side: the heap holds at
         * most ns entries plus one per merge, and merges are < ns */
        if (grow((void **)&e->heap, &e->heap_cap, nh + 2, sizeof *e->heap) != 0) return -1;
        if (cur->prev >= 0) push_pair(e, &nh, cur->prev);
        push_pair(e, &nh, top.pos);
    }
    for (int32_t i = ns > 0 ? 0 : -1; i >= 0; i = e->sym[i].next)
        if (ids_push(out, e->sym[i].id) != 0) return -1;
    return 0;
}

/* BPE of one piece through the per-piece cache. */
static int encode_piece(tok_encoder *e, const char *p, size_t n, tok_ids *out) {
    if (n == 0) return 0;
    if (n > CACHE_MAX_PIECE) return bpe_piece(e, p, n, out);
    uint64_t h = tok_hash(p, n) | 1;
    size_t i = h & (CACHE_SLOTS - 1);
    for (; e->cache[i].hash != 0; i = (i + 1) & (CACHE_SLOTS - 1)) {
        const tok_cache_slot *c = &e->cache[i];
        if (c->hash == h && c->key_len == n && memcmp(e->cache_keys + c->key_off, p, n) == 0) {
            if (grow((void **)&out->ids, &out->cap, out->n + c->nids, sizeof *out->ids) != 0)
                return -1;
            if (c->nids > 0)
                memcpy(out->ids + out->n, e->cache_ids + c->ids_off, c->nids * sizeof *out->ids);
            out->n += c->nids;
            return 0;
        }
    }
    size_t before = out->n;
    uint32_t shared_n = 0;
    const int32_t *shared = tok_shared_find(e->t->shared, h, p, n, &shared_n);
    if (shared != NULL) {
        if (grow((void **)&out->ids, &out->cap, out->n + shared_n, sizeof *out->ids) != 0)
            return -1;
        if (shared_n > 0) memcpy(out->ids + out->n, shared, shared_n * sizeof *out->ids);
        out->n += shared_n;
    } else {
        if (bpe_piece(e, p, n, out) != 0) return -1;
        tok_shared_put(e->t->shared, h, p, n, out->ids + before, (uint32_t)(out->n - before));
    }
    size_t k = out->n - before;
    if (e->cache_used + 1 > CACHE_SLOTS / 2 || e->keys_len + n > CACHE_POOL ||
        (e->ids_len + k) * sizeof(int32_t) > CACHE_POOL) {
        cache_clear(e);
        for (i = h & (CACHE_SLOTS - 1); e->cache[i].hash != 0; i = (i + 1) & (CACHE_SLOTS - 1)) {
        }
    }
    e->cache[i] =
        (tok_cache_slot){h, (uint32_t)e->keys_len, (uint32_t)n, (uint32_t)e->ids_len, (uint32_t)k};
    memcpy(e->cache_keys + e->keys_len, p, n);
    if (k > 0) memcpy(e->cache_ids + e->ids_len, out->ids + before, k * sizeof *out->ids);
    e->keys_len += n;
    e->ids_len += k;
    e->cache_used++;
    return 0;
}

/* Pre-tokenizes s[0, n) with the regex (Isolated: matches and the gaps between them are
 * pieces) and encodes each piece. */
static int encode_regex(tok_encoder *e, const char *s, size_t n, tok_ids *out) {
    size_t at = 0;
    while (at < n) {
        int rc = pcre2_match(e->t->re, (PCRE2_SPTR)s, n, at, 0, e->md, NULL);
        if (rc < 0) break; /* no further match (or a matching error): the rest is one gap */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* an empty match: no piece; step over one character */
            if (ms >= n) break;
            if (encode_piece(e, s + at, ms - at, out) != 0) return -1;
            size_t cl = char_len(s + ms, n - ms);
            if (encode_piece(e, s + ms, cl, out) != 0) return -1;
            at = ms + cl;
            continue;
        }
        if (ms > at && encode_piece(e, s + at, ms - at, out) != 0) return -1;
        if (encode_piece(e, s + ms, me - ms, out) != 0) return -1;
        at = me;
    }
    return at < n ? encode_piece(e, s + at, n - at, out) : 0;
}

/* SentencePiece-style: cut before each "▁" that follows a non-"▁" character (when safe). */
static int encode_sp(tok_encoder *e, const char *s, size_t n, tok_ids *out) {
    if (!e->t->sp_split_safe) return bpe_piece(e, s, n, out);
    size_t start = 0, i = 0;
    int prev_mark = 1;
    while (i < n) {
        if (i + 3 <= n && memcmp(s + i, SP_MARK, 3) == 0) {
            if (!prev_mark && i > start) {
                if (encode_piece(e, s + start, i - start, out) != 0) return -1;
                start = i;
            }
            prev_mark = 1;
            i += 3;
        } else {
            prev_mark = 0;
            i += char_len(s + i, n - i);
        }
    }
    return encode_piece(e, s + start, n - start, out);
}

static int norm_put(tok_encoder *e, size_t *o, const char *s, size_t n) {
    if (grow((void **)&e->norm, &e->norm_cap, *o + n + 1, 1) != 0) return -1;
    memcpy(e->norm + *o, s, n);
    *o += n;
    return 0;
}

/* How a normalized segment lines up with the text it came from, in units: `pre` bytes the
 * normalizer put before the text (a prefix space, SentencePiece's Prepend "▁") match no text;
 * a space that became "▁" is 3 bytes for 1; a stretch NFC rewrote (from the first to the last
 * changed byte) is one unit; any other byte is itself. */
typedef struct {
    const char *s; /* the segment's text */
    size_t n;
    uint32_t pre;  /* normalized bytes before the text */
    int sp_space;  /* spaces became "▁" */
    size_t mid_at; /* text offset of the NFC-rewritten stretch (SIZE_MAX: none) */
    size_t mid_n;  /* its normalized length */
    size_t mid_o;  /* its text length */
} seg_map;

/* The unit at normalized offset nq, text offset oq: its normalized and text lengths. */
static void seg_unit(const seg_map *m, size_t nq, size_t oq, size_t *un, size_t *uo) {
    if (nq < m->pre) {
        *un = m->pre, *uo = 0;
    } else if (oq == m->mid_at) {
        *un = m->mid_n, *uo = m->mid_o;
    } else if (m->sp_space && oq < m->n && m->s[oq] == ' ') {
        *un = 3, *uo = 1;
    } else {
        *un = 1, *uo = 1;
    }
}

/* The normalized length of an id the BPE wrote (byte-level: its bytes; SentencePiece-style: its
 * piece with "▁", or 1 for a byte-fallback id); 0 when unknown (unk). */
static size_t id_norm_len(const tokenizer *t, int32_t id) {
    if (id == t->unk_id) return 0;
    if (t->family == TOK_SENTENCEPIECE && t->id_byte[id] >= 0) return 1;
    return t->tok_len[id];
}

/* Writes the byte spans (text offsets + base) of ids out->ids[k0, out->n), the BPE of a
 * segment whose normalized form has nlen bytes: a sweep over the units, a token that starts
 * inside a unit starting at the unit, one that ends inside it ending at its end. Where the ids'
 * lengths do not add up to nlen (an unk), every id gets the whole segment. */
static int seg_spans(tok_encoder *e, const seg_map *m, size_t base, const tok_ids *out, size_t k0,
                     size_t nlen) {
    tok_spans *sp = e->spans;
    size_t k1 = out->n, sum = 0;
    int whole = 0;
    for (size_t k = k0; k < k1 && !whole; k++) {
        size_t l = id_norm_len(e->t, out->ids[k]);
        whole = l == 0;
        sum += l;
    }
    whole |= sum != nlen;
    if (grow((void **)&sp->at, &sp->cap, 2 * k1, sizeof *sp->at) != 0) return -1;
    size_t nq = 0, oq = 0, un = 0, uo = 0, b = 0;
    for (size_t k = k0; k < k1; k++) {
        if (whole) {
            sp->at[2 * k] = base, sp->at[2 * k + 1] = base + m->n;
            continue;
        }
        size_t a = b, lo, hi;
        b += id_norm_len(e->t, out->ids[k]);
        for (;;) { /* the unit holding normalized byte a */
            seg_unit(m, nq, oq, &un, &uo);
            if (nq + un > a) break;
            nq += un, oq += uo;
        }
        lo = oq;
        for (;;) { /* the unit holding byte b - 1 */
            seg_unit(m, nq, oq, &un, &uo);
            if (nq + un >= b) break;
            nq += un, oq += uo;
        }
        hi = oq + uo;
        if (nq + un == b) nq += un, oq += uo; /* the next token starts at the next unit */
        sp->at[2 * k] = base + lo, sp->at[2 * k + 1] = base + hi;
    }
    sp->n = k1;
    return 0;
}

/* Normalizes, pre-tokenizes and encodes one segment without added tokens. */
static int encode_segment(tok_encoder *e, const char *s, size_t n, int cont, size_t base,
                          tok_ids *out) {
    const tokenizer *t = e->t;
    if (n == 0) return 0;
    size_t k0 = out->n;
    seg_map m = {s, n, 0, 0, SIZE_MAX, 0, 0};
    if (t->family == TOK_SENTENCEPIECE) {
        size_t o = 0;
        if (t->sp_prepend && !cont && norm_put(e, &o, SP_MARK, 3) != 0) return -1;
        m.pre = (uint32_t)o;
        m.sp_space = 1;
        for (size_t i = 0; i < n; i++) {
            size_t j = i;
            while (j < n && s[j] != ' ')
                j++;
            if (norm_put(e, &o, s + i, j - i) != 0) return -1;
            if (j < n && norm_put(e, &o, SP_MARK, 3) != 0) return -1;
            i = j;
        }
        if (encode_sp(e, e->norm, o, out) != 0) return -1;
        return e->spans != NULL ? seg_spans(e, &m, base, out, k0, o) : 0;
    }
    const char *text = s;
    size_t len = n;
    char *nfc = NULL;
    if (t->nfc) {
        int ascii = 1;
        for (size_t i = 0; i < n && ascii; i++)
            ascii = (uint8_t)s[i] < 0x80;
        int r = ascii ? 0 : tok_nfc(s, n, &nfc, &len);
        if (r < 0) return -1;
        if (r > 0)
            text = nfc; /* else ASCII or invalid UTF-8: left as it is */
        else
            len = n;
    }
    size_t nlen = len;
    if (text != s && (len != n || memcmp(text, s, n) != 0)) { /* the stretch NFC rewrote */
        size_t cp = 0, cs = 0, lim = len < n ? len : n;
        while (cp < lim && text[cp] == s[cp])
            cp++;
        while (cs < lim - cp && text[len - 1 - cs] == s[n - 1 - cs])
            cs++;
        m.mid_at = cp, m.mid_n = len - cp - cs, m.mid_o = n - cp - cs;
        if (m.mid_n == 0) nlen = SIZE_MAX; /* (NFC deletes nothing) spans: the whole segment */
    }
    if (t->add_prefix_space && !cont && text[0] != ' ') {
        size_t o = 0;
        if (norm_put(e, &o, " ", 1) != 0 || norm_put(e, &o, text, len) != 0) {
            free(nfc);
            return -1;
        }
        text = e->norm;
        len = o;
        m.pre = 1;
        if (nlen != SIZE_MAX) nlen++;
    }
    int rc = t->re != NULL ? encode_regex(e, text, len, out) : encode_piece(e, text, len, out);
    free(nfc);
    if (rc == 0 && e->spans != NULL) rc = seg_spans(e, &m, base, out, k0, nlen);
    return rc;
}

/* Writes the span [a, b) for the ids appended since the spans were last written. */
static int span_fill(tok_encoder *e, const tok_ids *out, size_t a, size_t b) {
    tok_spans *sp = e->spans;
    if (sp == NULL) return 0;
    if (grow((void **)&sp->at, &sp->cap, 2 * out->n, sizeof *sp->at) != 0) return -1;
    for (; sp->n < out->n; sp->n++)
        sp->at[2 * sp->n] = a, sp->at[2 * sp->n + 1] = b;
    return 0;
}

static int encode_into(tok_encoder *e, const char *text, size_t len, int flags,
                       tok_special_fn special_ok, void *ctx, tok_ids *out) {
    const tokenizer *t = e->t;
    if (e->spans != NULL) e->spans->n = out->n; /* spans line up with the ids from here */
    if (flags & TOK_ADD_SPECIAL)
        for (int k = 0; k < t->nprefix; k++)
            if (ids_push(out, t->prefix[k]) != 0) return -1;
    if (span_fill(e, out, 0, 0) != 0) return -1;
    int allow = (flags & TOK_ALLOW_SPECIAL) || special_ok != NULL;
    uint8_t want = allow ? 3 : 2;
    int cont = (flags & TOK_CONTINUE) != 0;
    size_t seg = 0;
    for (size_t i = 0; i < len; i++) {
        if ((t->added_first[(uint8_t)text[i]] & want) == 0) continue;
        for (int k = 0; k < t->nadded; k++) { /* longest first: leftmost-longest */
            const tok_added *a = &t->added[k];
            if ((a->special && !allow) || a->len > len - i || memcmp(text + i, a->s, a->len) != 0 ||
                (a->special && special_ok != NULL && !special_ok(ctx, i, i + a->len)))
                continue;
            if (encode_segment(e, text + seg, i - seg, cont, seg, out) != 0 ||
                ids_push(out, a->id) != 0 || span_fill(e, out, i, i + a->len) != 0)
                return -1;
            seg = i + a->len;
            cont = 0; /* HF normalizes each segment between added tokens alone */
            i = seg - 1;
            break;
        }
    }
    if (encode_segment(e, text + seg, len - seg, cont, seg, out) != 0) return -1;
    if (flags & TOK_ADD_SPECIAL)
        for (int k = 0; k < t->nsuffix; k++)
            if (ids_push(out, t->suffix[k]) != 0) return -1;
    return span_fill(e, out, len, len);
}

/* The ids grow in a copy of *out on this thread's stack, stored back at the end: callers keep
 * one tok_ids per part side by side in an array, and a count written at every id into a cache
 * line another thread's part shares would bounce that line between the cores. */
int tok_encode(tok_encoder *e, const char *text, size_t len, int flags, tok_ids *out) {
    tok_ids mine = *out;
    int rc = encode_into(e, text, len, flags, NULL, NULL, &mine);
    *out = mine;
    return rc;
}

int tok_encode_spans(tok_encoder *e, const char *text, size_t len, int flags,
                     tok_special_fn special_ok, void *ctx, tok_ids *out, tok_spans *spans) {
    tok_ids mine = *out;
    tok_spans sp = *spans;
    e->spans = &sp;
    int rc = encode_into(e, text, len, flags, special_ok, ctx, &mine);
    e->spans = NULL;
    *out = mine;
    *spans = sp;
    return rc;
}

static int text_put(tok_text *out, const char *s, size_t n) {
    if (grow((void **)&out->s, &out->cap, out->n + n + 1, 1) != 0) return -1;
    memcpy(out->s + out->n, s, n);
    out->n += n;
    out->s[out->n] = '\0';
    return 0;
}

/* out[from, n) made valid UTF-8: each maximal ill-formed subpart becomes U+FFFD, or (per_byte:
 * the SentencePiece ByteFallback decoder's rule) the whole stretch, when it is not valid, one
 * U+FFFD per byte. */
static int text_lossy(tok_text *out, size_t from, int per_byte) {
    static const char fffd[] = "\xEF\xBF\xBD";
    size_t n = out->n - from, bad = 0;
    const unsigned char *s = (const unsigned char *)out->s + from;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        int k = tok_utf8_next(s + i, n - i, &cp);
        bad += k < 0;
        i += (size_t)(k < 0 ? -k : k);
    }
    if (bad == 0) return 0;
    char *copy = malloc(n);
    if (copy == NULL) return -1;
    memcpy(copy, s, n);
    out->n = from;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0;) {
        int32_t cp;
        int k = per_byte ? -1 : tok_utf8_next((const uint8_t *)copy + i, n - i, &cp);
        rc = k > 0 ? text_put(out, copy + i, (size_t)k) : text_put(out, fffd, 3);
        i += (size_t)(k < 0 ? -k : k);
    }
    free(copy);
    return rc;
}

int tok_decode_boundary(const tokenizer *t, int32_t id) {
    if (id < 0 || (uint32_t)id >= t->nids || t->tok_len[id] == UINT32_MAX) return 1;
    if (t->special[id]) return 1;
    if (t->family == TOK_SENTENCEPIECE) return t->id_byte[id] < 0;
    unsigned char c = (unsigned char)t->pool[t->tok_off[id]];
    return t->tok_len[id] > 0 && (c < 0x80 || c >= 0xC0); /* not a continuation byte */
}

int tok_decode(const tokenizer *t, const int32_t *ids, size_t n, int flags, tok_text *out,
               char *err, size_t errlen) {
    size_t start = out->n;
    int lossy = !(flags & TOK_BYTES);
    /* The stretch the lossy rule covers as one text: byte-level, the bytes since the last special
     * token (HF's ByteLevel decoder); SentencePiece-style, the current run of byte-fallback
     * tokens (ByteFallback; SIZE_MAX: none) */
    int sp = t->family == TOK_SENTENCEPIECE;
    size_t from = sp ? SIZE_MAX : out->n;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (uint32_t)id >= t->nids || t->tok_len[id] == UINT32_MAX)
            return up_errf(err, errlen, NULL, "token id %d is not in the vocabulary (0 .. %u)", id,
                           t->nids - 1);
        const char *s = t->pool + t->tok_off[id];
        size_t len = t->tok_len[id];
        int is_byte = sp && !t->special[id] && t->id_byte[id] >= 0;
        int ends = sp ? from != SIZE_MAX && !is_byte : t->special[id] != 0;
        int rc = lossy && ends ? text_lossy(out, from, sp) : 0;
        if (rc != 0) return up_errf(err, errlen, NULL, "out of memory");
        if (!sp || t->special[id]) {
            rc = text_put(out, s, len);
        } else if (is_byte) {
            char b = (char)t->id_byte[id];
            if (from == SIZE_MAX) from = out->n;
            rc = text_put(out, &b, 1);
        } else {
            for (size_t k = 0; k < len && rc == 0;) { /* "▁" -> " " */
                if (k + 3 <= len && memcmp(s + k, SP_MARK, 3) == 0) {
                    rc = text_put(out, " ", 1);
                    k += 3;
                } else {
                    rc = text_put(out, s + k, 1);
                    k++;
                }
            }
        }
        if (rc != 0) return up_errf(err, errlen, NULL, "out of memory");
        if (ends) from = sp ? SIZE_MAX : out->n; /* byte-level: after the special token */
    }
    if (lossy && from != SIZE_MAX && text_lossy(out, from, sp) != 0)
        return up_errf(err, errlen, NULL, "out of memory");
    int strip = 0; /* HF's Strip decoder, after Fuse: leading spaces of the whole text */
    while (!(flags & TOK_CONTINUE) && strip < t->dec_strip && start + (size_t)strip < out->n &&
           out->s[start + strip] == ' ')
        strip++;
    if (strip > 0) {
        memmove(out->s + start, out->s + start + strip, out->n - start - (size_t)strip);
        out->n -= (size_t)strip;
        out->s[out->n] = '\0';
    }
    return 0;
}
