/* test_recall.c — the recall scorer on hand-made windows whose answers are known, and on the
 * generated corpus with an oracle and a constant predictor. */
#include "eval/recall.h"
#include "io/corpus.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* tok (T + 1) from a string of T + 1 characters. */
static int32_t *tokens(const char *s, long *T) {
    long n = (long)strlen(s);
    int32_t *t = malloc((size_t)n * sizeof *t);
    for (long i = 0; i < n; i++)
        t[i] = (unsigned char)s[i];
    *T = n - 1;
    return t;
}

static long score(const int32_t *tok, long T, const int32_t *doc, const int32_t *pred, long p0,
                  long n, recall_question *out) {
    void *scratch = malloc(recall_scratch_bytes(T));
    long nq = recall_score(tok, T, doc, pred, p0, n, scratch, out);
    free(scratch);
    return nq;
}

static void test_hand_made(void) {
    /*            0         1         2         3         4
     *            0123456789012345678901234567890123456789012 */
    const char *s = "x=1;ab=3;cd=7;ab?3;cd?7;zz?1;ab=9;x?1;ab?9;";
    long T;
    int32_t *tok = tokens(s, &T);
    int32_t *pred = malloc((size_t)T * sizeof *pred);
    for (long i = 0; i < T; i++)
        pred[i] = 'F';
    pred[16] = '3'; /* ab?3: right */
    pred[21] = '5'; /* cd?7: wrong */
    pred[40] = '9'; /* ab?9 after ab=9 restated it: right */
    recall_question q[16];
    long nq = score(tok, T, NULL, pred, 0, T, q);
    /* x=1 has no ';' before it in the window (its key may be cut): no fact, so x?1 is not asked;
     * zz?1 has no fact */
    CHECK(nq == 3, "hand-made window: %ld questions (want 3)", nq);
    if (nq == 3) {
        CHECK(q[0].pos == 16 && q[0].dist == 10 && q[0].correct, "ab?3: pos %ld dist %ld ok %d",
              q[0].pos, q[0].dist, q[0].correct);
        CHECK(q[1].pos == 21 && q[1].dist == 10 && !q[1].correct, "cd?7: pos %ld dist %ld ok %d",
              q[1].pos, q[1].dist, q[1].correct);
        CHECK(q[2].pos == 40 && q[2].dist == 9 && q[2].correct,
              "ab?9 takes the latest fact: pos %ld dist %ld ok %d", q[2].pos, q[2].dist,
              q[2].correct);
    }
    /* split over two "ranks": each scores the questions answered in its half */
    recall_question a[16], b[16];
    long na = score(tok, T, NULL, pred, 0, 20, a);
    long nb = score(tok, T, NULL, pred + 20, 20, T - 20, b);
    CHECK(na == 1 && nb == 2 && a[0].pos == 16 && b[0].pos == 21 && b[1].pos == 40 && !b[0].correct,
          "split at 20: %ld + %ld questions", na, nb);
    /* documents: one opens at 19, so cd?7 (21) loses its fact (11); ab?3 (16) keeps its own
     * (6, same document) and ab?9 (40) its fact at 31 */
    int32_t *doc = calloc((size_t)T, sizeof *doc);
    for (long i = 19; i < T; i++)
        doc[i] = 19;
    nq = score(tok, T, doc, pred, 0, T, q);
    CHECK(nq == 2 && q[0].pos == 16 && q[1].pos == 40,
          "a document from 19 drops cd?7 only: %ld questions", nq);
    /* the last input position answers from the window's last target */
    long T2;
    int32_t *tok2 = tokens(";k=A;k?A", &T2), pred2[8] = {0, 0, 0, 0, 0, 0, 'A', 0};
    nq = score(tok2, T2, NULL, pred2, 0, T2, q);
    CHECK(nq == 1 && q[0].pos == 6 && q[0].correct, "question at the window's last position");
    CHECK(recall_detect(tok, T + 1), "detect: a recall window");
    int32_t text[5] = {'h', 'e', 'l', 'l', 'o'};
    CHECK(!recall_detect(text, 5), "detect: text is not recall (no '=' or '?')");
    tok2[2] = ' ';
    CHECK(!recall_detect(tok2, T2 + 1), "detect: a space is not in the recall alphabet");
    free(tok), free(pred), free(doc), free(tok2);
}

/* The generated tokens c[0..T] as a window, and the oracle's predictions (the next token) in
 * *pred: every question answered right. Both malloc'd. */
static int32_t *oracle_window(const uint32_t *c, long T, int32_t **pred) {
    int32_t *tok = malloc((size_t)(T + 1) * sizeof *tok);
    *pred = malloc((size_t)T * sizeof **pred);
    for (long i = 0; i <= T; i++)
        tok[i] = (int32_t)c[i];
    for (long i = 0; i < T; i++)
        (*pred)[i] = tok[i + 1];
    return tok;
}

/* The generated corpus (letter keys, or one token per key): an oracle (the next token) answers
 * every question; a constant guess is right about 1/16 of the time; distances sit around the
 * corpus's. */
static void test_corpus(uint32_t keys) {
    long T = 4096, D = 300;
    uint32_t *c = corpus_make_recall(
        (size_t)T + 1, &(recall_spec){.distance = (size_t)D, .seed = 7, .key_tokens = keys}, NULL);
    int32_t *pred = NULL, *tok = oracle_window(c, T, &pred);
    recall_question *q = malloc((size_t)recall_max_questions(T) * sizeof *q);
    long nq = score(tok, T, NULL, pred, 0, T, q), ok = 0, near = 0;
    for (long i = 0; i < nq; i++) {
        ok += q[i].correct;
        near += q[i].dist >= D / 2 && q[i].dist <= 2 * D;
    }
    CHECK(nq > 100 && ok == nq, "oracle (keys %u): %ld of %ld questions right", keys, ok, nq);
    CHECK(near == nq, "distances (keys %u): %ld of %ld within [D/2, 2D]", keys, near, nq);
    CHECK(recall_detect(tok, T + 1), "detect: the generated corpus (keys %u)", keys);
    long keytok = 0;
    for (long i = 0; i <= T; i++)
        keytok += tok[i] >= 256;
    CHECK(keys ? keytok > T / 5 : keytok == 0, "keys %u: %ld key tokens >= 256", keys, keytok);
    for (long i = 0; i < T; i++)
        pred[i] = '0';
    nq = score(tok, T, NULL, pred, 0, T, q);
    ok = 0;
    for (long i = 0; i < nq; i++)
        ok += q[i].correct;
    double acc = (double)ok / (double)nq;
    CHECK(acc > 0.01 && acc < 0.15, "constant guess: accuracy %.3f near chance %.4f", acc,
          RECALL_CHANCE);
    free(c), free(tok), free(pred), free(q);
}

/* --min-distance: distances spread over [M, D] with about as many questions per octave, and the
 * mask marks exactly the answer of every question and, with the echo, the echoed key of every
 * record "=KVK;" (and nothing else). */
static void test_spread(uint32_t keys, int echo) {
    long T = 65536, M = 16, D = 2048, oct = 7; /* octaves [16,32) .. [1024,2048] */
    uint8_t *mask = malloc((size_t)T + 1);
    uint32_t *c = corpus_make_recall((size_t)T + 1,
                                     &(recall_spec){.distance = (size_t)D,
                                                    .min_distance = (size_t)M,
                                                    .seed = 11,
                                                    .key_tokens = keys,
                                                    .echo = echo},
                                     mask);
    int32_t *pred = NULL, *tok = oracle_window(c, T, &pred);
    recall_question *q = malloc((size_t)recall_max_questions(T) * sizeof *q);
    long nq = score(tok, T, NULL, pred, 0, T, q), ok = 0, out = 0, per[16] = {0};
    for (long i = 0; i < nq; i++) {
        ok += q[i].correct;
        long d = q[i].dist, o = 0;
        /* a due question waits while others are due, and gaps round to whole records */
        out += d < M - 4 || d > 2 * D;
        while (o < oct - 1 && d >= (M << (o + 1)))
            o++;
        per[o]++;
    }
    CHECK(nq > 1000 && ok == nq && out == 0,
          "spread (keys %u, echo %d): %ld right, %ld outside [M, 2D] of %ld", keys, echo, ok, out,
          nq);
    for (long o = 0; o < oct; o++)
        CHECK(per[o] > nq / oct / 2 && per[o] < 2 * nq / oct,
              "spread (keys %u): %ld of %ld questions in octave [%ld, %ld)", keys, per[o], nq,
              M << o, M << (o + 1));
    /* the answer of the question at '?' position p is the target of the prediction at p */
    long marked = 0, hit = 0, echoes = 0, bad_echo = 0;
    for (long i = 0; i <= T; i++)
        marked += mask[i];
    for (long i = 0; i < nq; i++)
        hit += mask[q[i].pos + 1] == 1;
    for (long i = 0; echo && i + 4 <= T; i++)
        if ((tok[i] == '=' || tok[i] == '?') && tok[i + 1] >= 256) {
            int ok_rec = tok[i + 3] == tok[i + 1] && tok[i + 4] == ';' && mask[i + 3] == 1;
            echoes += ok_rec;
            bad_echo += !ok_rec;
        }
    CHECK(bad_echo == 0 && (echo ? echoes > T / 6 : echoes == 0),
          "echo (keys %u, echo %d): %ld records echo their key, %ld do not", keys, echo, echoes,
          bad_echo);
    CHECK(hit == nq && marked >= nq + echoes && marked <= nq + echoes + 3,
          "mask (keys %u, echo %d): %ld of %ld answers and %ld echoes marked, %ld marks in all",
          keys, echo, hit, nq, echoes, marked);
    free(mask), free(c), free(tok), free(pred), free(q);
}

/* The fewest keys --keys accepts (corpus_recall_min_keys): a question is asked early only when
 * half the keys are open, so the draw of a free key always ends, every answer is still the
 * latest fact's, and early questions (shorter than the least distance) stay rare. */
static void test_tight_keys(void) {
    long T = 65536, M = 16, D = 2048;
    recall_spec spec = {.distance = (size_t)D, .min_distance = (size_t)M, .seed = 5, .echo = 1};
    spec.key_tokens = (uint32_t)corpus_recall_min_keys(&spec);
    uint32_t *c = corpus_make_recall((size_t)T + 1, &spec, NULL);
    int32_t *pred = NULL, *tok = oracle_window(c, T, &pred);
    recall_question *q = malloc((size_t)recall_max_questions(T) * sizeof *q);
    long nq = score(tok, T, NULL, pred, 0, T, q), ok = 0, early = 0;
    for (long i = 0; i < nq; i++) {
        ok += q[i].correct;
        early += q[i].dist < M - 4;
    }
    CHECK(nq > 1000 && ok == nq && early * 100 < nq,
          "tight keys (%u): %ld of %ld right, %ld asked early", spec.key_tokens, ok, nq, early);
    free(c), free(tok), free(pred), free(q);
}

int main(void) {
    harness.verbose = 1;
    test_hand_made();
    test_corpus(0);
    test_corpus(512);
    test_spread(0, 0);
    test_spread(4096, 0);
    test_spread(4096, 1);
    test_tight_keys();
    return harness_finish("test_recall");
}
