/* recall.h — scoring the recall corpus (`upipe data recall`, io/corpus.h): facts "key=V;" and,
 * later, questions "key?V;" whose answer V only the fact reveals. A pure function of a window's
 * tokens and the model's top predictions, so a test can feed it a hand-made case.
 *
 * Positions are those of the window's inputs: the prediction at position i is the model's guess
 * for token i + 1. A question at position q (its '?') is answered by the prediction at q; its
 * fact is the latest "key=V;" before it whose key is whole inside the window (a ';' before it
 * in the window) and, with documents, in the same document; distance = q - (position of the
 * fact's '='). The answer is right when the prediction is the fact's value V. */
#ifndef UP_RECALL_H
#define UP_RECALL_H

#include <stddef.h>
#include <stdint.h>

#define RECALL_CHANCE (1.0 / 16.0) /* 16 value symbols */

typedef struct {
    long pos;    /* the question's '?' in the window (the position whose prediction answers) */
    long dist;   /* pos - the fact's '=' */
    int correct; /* the top prediction at pos is the fact's value */
} recall_question;

/* Bytes of scratch recall_score needs for a window of T tokens. */
size_t recall_scratch_bytes(long T);
/* Most questions a window of T tokens can hold (the room out needs). */
long recall_max_questions(long T);
/* Scores the questions of the window tok (T + 1 tokens: the inputs and the last target) answered
 * at positions p0 .. p0 + n - 1, whose predictions are pred[0 .. n-1]. doc_start (T, or NULL):
 * the first position of each position's document (a fact must lie in the question's). scratch:
 * recall_scratch_bytes(T) bytes, any content. Writes the questions to out in position order and
 * returns their count. Pure: no allocation, no I/O. */
long recall_score(const int32_t *tok, long T, const int32_t *doc_start, const int32_t *pred,
                  long p0, long n, void *scratch, recall_question *out);
/* 1 when the n tokens look like a recall corpus: every one a key letter, a value symbol, '=',
 * '?' or ';', and both '=' and '?' present. */
int recall_detect(const int32_t *tok, long n);

#endif
