/* upipe.h — UPipe: head-chunked Ulysses attention (DESIGN.md §3).
 *
 * Attention runs in NH/U stages of U query heads (U/P per rank). The GQA schedule: with
 * G = NH/NKV, the KV heads are taken in chunks of Kc = min(U, NKV); a stage takes, from each KV
 * head of the current chunk, m = U/Kc consecutive query heads of its group, so a chunk is
 * projected and exchanged once per layer pass and reused for the G/m stages that follow. Stage
 * buffers are sized by U and allocated once (category attention); stage outputs are put back in
 * model head order, the weights are never permuted (rows are addressed in place). Between
 * forward and backward only the layer input, o (T_loc, NH*HS) and the per-stage log-sum-exp are
 * kept; the backward recomputes each stage's projections and exchanges. */
#ifndef UP_UPIPE_H
#define UP_UPIPE_H

#include "model/model.h"

typedef struct upipe_plan upipe_plan;

/* 0 when U query heads per stage are valid for this config and context-parallel degree P
 * (NH % U, U % P, the GQA schedule); else -1 with a message saying what to use. */
int upipe_check(const model_config *c, int P, int U, char *err, size_t errlen);

/* Stage buffers for m (m->opt.U, m->P, m->T, m->Tg); allocated with model_buffer. */
upipe_plan *upipe_init(model *m);
void upipe_free(upipe_plan *u);

/* a->att (T_loc, NH*HS) and a->lse from m->h (the attention rmsnorm output). Collective (CP). */
void upipe_attention_forward(upipe_plan *u, const layer_weights *w, layer_acts *a);
/* From m->datt (d loss / d att): m->dh += d loss / d h; q/k/v weight gradients accumulate into g.
 * Recomputes each stage's projections and exchanges. Collective (CP). */
void upipe_attention_backward(upipe_plan *u, const layer_weights *w, const layer_weights *g,
                              const layer_acts *a);

#endif
