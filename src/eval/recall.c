/* recall.c — the recall corpus's questions, scored against top predictions (recall.h). */
#include "eval/recall.h"

#include "io/corpus.h"

#include <string.h>

enum { RECALL_KEY_MAX = 12 }; /* letters of a key the scorer reads (the corpus uses <= 6) */

/* One fact in the open-addressing table: key code (0: empty slot), its '=' and its value. */
typedef struct {
    uint64_t key;
    long pos;
    int32_t value;
} fact_slot;

/* Table slots: a power of two at least twice the facts a window can hold. */
static size_t table_slots(long T) {
    size_t need = 2 * (size_t)(T / 4 + 1), n = 16;
    while (n < need)
        n *= 2;
    return n;
}

size_t recall_scratch_bytes(long T) {
    return table_slots(T) * sizeof(fact_slot);
}

long recall_max_questions(long T) {
    return T / 4 + 1; /* "k?V;" takes at least 4 tokens */
}

static int is_letter(int32_t t) {
    return t >= 'a' && t <= 'z';
}
/* A key is letters, or one token >= RECALL_KEY_TOKEN0 (the corpus's --keys). */
static int is_key(int32_t t) {
    return is_letter(t) || t >= (int32_t)RECALL_KEY_TOKEN0;
}
static int is_value(int32_t t) {
    return (t >= '0' && t <= '9') || (t >= 'A' && t <= 'F');
}

/* The code of the key tok[a .. b-1] (base 27, never 0), or 0 when it is not a whole key. */
static uint64_t key_code(const int32_t *tok, long a, long b) {
    if (a < 0 || b - a < 1 || b - a > RECALL_KEY_MAX) return 0;
    if (b - a == 1 && tok[a] >= (int32_t)RECALL_KEY_TOKEN0)
        return ((uint64_t)1 << 63) | (uint64_t)tok[a]; /* above every letters' code (27^12) */
    uint64_t k = 0;
    for (long i = a; i < b; i++) {
        if (!is_letter(tok[i])) return 0;
        k = k * 27 + (uint64_t)(tok[i] - 'a' + 1);
    }
    return k;
}

static fact_slot *slot_of(fact_slot *tab, size_t nslots, uint64_t key) {
    size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 17) & (nslots - 1);
    while (tab[i].key && tab[i].key != key)
        i = (i + 1) & (nslots - 1);
    return &tab[i];
}

long recall_score(const int32_t *tok, long T, const int32_t *doc_start, const int32_t *pred,
                  long p0, long n, void *scratch, recall_question *out) {
    size_t nslots = table_slots(T);
    fact_slot *tab = scratch;
    memset(tab, 0, nslots * sizeof *tab);
    long key_start = -1, nq = 0; /* the key begins after the last ';' seen (none: unknown) */
    for (long i = 0; i < T; i++) {
        int32_t t = tok[i];
        if (t == ';') key_start = i + 1;
        if (t != '=' && t != '?') continue;
        /* "key=V;": answered at the '='/'?'; "=KV;" (one key token): answered at K */
        long at = i;
        uint64_t key = key_code(tok, key_start, i);
        key_start = -1; /* the rest of the record is no key */
        if (!key && tok[i + 1] >= (int32_t)RECALL_KEY_TOKEN0 && i + 1 < T) {
            at = i + 1;
            key = key_code(tok, at, at + 1);
        }
        if (!key || !is_value(tok[at + 1])) continue;
        fact_slot *f = slot_of(tab, nslots, key);
        if (t == '=') {
            *f = (fact_slot){key, at, tok[at + 1]};
            continue;
        }
        if (at < p0 || at >= p0 + n || !f->key) continue;  /* not answered here, or no fact */
        if (doc_start && f->pos < doc_start[at]) continue; /* the fact is in another document */
        out[nq++] = (recall_question){at, at - f->pos, pred[at - p0] == f->value};
    }
    return nq;
}

int recall_detect(const int32_t *tok, long n) {
    int eq = 0, q = 0;
    for (long i = 0; i < n; i++) {
        int32_t t = tok[i];
        eq |= t == '=';
        q |= t == '?';
        if (!is_key(t) && !is_value(t) && t != '=' && t != '?' && t != ';') return 0;
    }
    return eq && q;
}
