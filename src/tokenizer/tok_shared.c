/* tok_shared.c — the per-piece cache the encoders of one tokenizer share (tok_internal.h).
 *
 * Each encoder keeps a cache of its own (tok_encode.c); a piece it has not seen is looked up
 * here before its BPE runs, and its ids put here after, so a piece costs one BPE in the whole
 * process rather than one per thread: with per-thread caches alone the threads of a run each
 * paid for every piece of the text's vocabulary, a quarter of a thread's work on 10 MB of
 * mixed text (SentencePiece-style pieces are whole words). Insert-only and lock-free:
 *
 *   slot state 0           empty: a lookup that reaches it misses
 *              CLAIMED     a thread is writing the entry: skipped
 *              DEAD        the arena was full when it was claimed: skipped
 *              hash | 1    the entry is complete (its fields and bytes written before this
 *                          state is stored with release order; readers load it with acquire)
 *
 * A writer claims an empty slot by compare-and-swap and owns the arena bytes a fetch-and-add
 * gave it, so nothing is written twice. Probes are bounded; when the slots are half used or the
 * arena is spent, nothing more is put (the entries stay; tok_cache_reset empties it while no
 * encoder runs). */
#include "tokenizer/tok_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SHARED_SLOTS (1u << 18) /* power of 2 */
#define SHARED_ARENA (32u << 20)
#define SHARED_PROBES 32
#define CLAIMED 2u
#define DEAD 4u

typedef struct {
    _Atomic uint64_t state;
    uint32_t off, key_len, nids;
} shared_slot;

struct tok_shared {
    shared_slot *slots;
    char *arena;
    _Atomic size_t used, count;
};

tok_shared *tok_shared_new(void) {
    tok_shared *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->slots = aligned_alloc(64, SHARED_SLOTS * sizeof *c->slots);
    c->arena = malloc(SHARED_ARENA);
    if (c->slots == NULL || c->arena == NULL) {
        tok_shared_free(c);
        return NULL;
    }
    tok_shared_reset(c); /* zeroed by writing, as the encoders' caches (tok_encoder_new) */
    return c;
}

void tok_shared_free(tok_shared *c) {
    if (c == NULL) return;
    free(c->slots);
    free(c->arena);
    free(c);
}

void tok_shared_reset(tok_shared *c) {
    if (c == NULL) return;
    memset(c->slots, 0, SHARED_SLOTS * sizeof *c->slots);
    atomic_store(&c->used, 0);
    atomic_store(&c->count, 0);
}

const int32_t *tok_shared_find(tok_shared *c, uint64_t h, const char *p, size_t n, uint32_t *nids) {
    for (uint32_t k = 0; k < SHARED_PROBES; k++) {
        shared_slot *s = &c->slots[(h + k) & (SHARED_SLOTS - 1)];
        uint64_t st = atomic_load_explicit(&s->state, memory_order_acquire);
        if (st == 0) return NULL;
        if (st == h && s->key_len == n && memcmp(c->arena + s->off, p, n) == 0) {
            *nids = s->nids;
            return (const int32_t *)(c->arena + s->off + ((n + 3) & ~(size_t)3));
        }
    }
    return NULL;
}

void tok_shared_put(tok_shared *c, uint64_t h, const char *p, size_t n, const int32_t *ids,
                    uint32_t nids) {
    if (atomic_load_explicit(&c->count, memory_order_relaxed) >= SHARED_SLOTS / 2) return;
    for (uint32_t k = 0; k < SHARED_PROBES; k++) {
        shared_slot *s = &c->slots[(h + k) & (SHARED_SLOTS - 1)];
        uint64_t st = atomic_load_explicit(&s->state, memory_order_acquire);
        if (st == h && s->key_len == n && memcmp(c->arena + s->off, p, n) == 0) return;
        if (st != 0) continue;
        uint64_t zero = 0;
        if (!atomic_compare_exchange_strong_explicit(&s->state, &zero, CLAIMED,
                                                     memory_order_acq_rel, memory_order_acquire))
            continue; /* another thread took it first: this piece goes further on */
        size_t kb = (n + 3) & ~(size_t)3, need = kb + (size_t)nids * sizeof *ids;
        size_t off = atomic_fetch_add_explicit(&c->used, need, memory_order_relaxed);
        if (off + need > SHARED_ARENA) {
            atomic_store_explicit(&s->state, DEAD, memory_order_release);
            return;
        }
        memcpy(c->arena + off, p, n);
        if (nids > 0) memcpy(c->arena + off + kb, ids, (size_t)nids * sizeof *ids);
        s->off = (uint32_t)off, s->key_len = (uint32_t)n, s->nids = nids;
        atomic_fetch_add_explicit(&c->count, 1, memory_order_relaxed);
        atomic_store_explicit(&s->state, h, memory_order_release);
        return;
    }
}
