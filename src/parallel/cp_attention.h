/* cp_attention.h — context-parallel attention: Ulysses and UPipe as one schedule (DESIGN.md §2,
 * §3).
 *
 * Attention of one layer over the whole sequence of T = T_loc * P tokens, with the tokens split
 * over the P ranks of the context-parallel group. Query heads run in NH/U stages of U heads (U/P
 * per rank after the exchange); KV heads in chunks of Kc = min(U, NKV) heads, each chunk
 * projected and exchanged once and reused for the G/mult stages that take their query heads from
 * its groups (mult = U/Kc query heads per KV head and stage). Plain Ulysses is U = NH: one chunk
 * of all KV heads, one stage of all query heads in model order.
 *
 * keep_qkv (plain Ulysses only, U = NH): the stage's q, k, v are saved per layer in head layout
 * and the backward reuses them instead of recomputing the projections and their exchange; the
 * stage's q projection is then one product over all of Wq. Without it, only o (sequence layout,
 * model head order) and the log-sum-exp are saved, and the backward recomputes each stage.
 *
 * overlap (the pipe, DESIGN.md §3): while a stage's attention runs, the next stage's inputs (q,
 * and k, v when it opens a chunk; in the backward also o and do) are already projected and their
 * exchange is in flight, non-blocking, into a second set of head-layout buffers; the attention
 * kernel's progress hook lets MPI advance it. Data moves, nothing is summed differently: the
 * results are the same bytes with and without it.
 *
 * The module knows only shapes, the communicator and its own stage buffers: weights, saved
 * tensors, inputs and gradients are passed per call, never read from a model. */
#ifndef UP_CP_ATTENTION_H
#define UP_CP_ATTENTION_H

#include "comm/comm.h"
#include "core/mem.h"
#include "kernels/typed.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int T_loc, P;             /* tokens on this rank; context-parallel degree (comm->P) */
    int C, NH, NKV, HS;       /* model shapes */
    int U;                    /* query heads per stage (global); NH: one stage */
    int keep_qkv;             /* save q, k, v in head layout (requires U == NH) */
    comm_ctx *comm;           /* exchanges over the context-parallel group */
    const float *rope_cos;    /* (T_loc, HS/2) at this rank's global positions */
    const float *rope_sin;    /* (T_loc, HS/2) */
    const int32_t *doc_start; /* (T) packed documents of the whole window, or NULL (one) */
    int forward_only;         /* no backward: its buffers are not allocated */
    int overlap;              /* the pipe (staged path, P > 1, more than one stage): the next
                                 stage's inputs are exchanged during this stage's attention,
                                 on a second set of head-layout buffers; else ignored */
    mem_dtype dtype;          /* element type of q, k, v, o, their gradients and the exchange
                                 packs (DESIGN.md §5.1); the kernels' workspace is fp32 */
    const typed_ctx *tk;      /* the kernels on stored tensors (its type is dtype) */
} cp_attention_shape;

/* What the forward of one layer saves for its backward (buffers owned by the caller). */
/* (Elements of the run's type, lse fp32.) */
typedef struct {
    void *att;  /* (T_loc, NH*HS) output o, sequence layout, model head order */
    float *lse; /* (NH/P, T) log-sum-exp, stage after stage ((U/P, T) each) */
    void *q;    /* (T, NH/P, HS) after RoPE, head layout: keep_qkv only */
    void *k;    /* (T, NKV_loc, HS) after RoPE: keep_qkv only */
    void *v;    /* (T, NKV_loc, HS): keep_qkv only */
} cp_attention_saved;

/* The weights of one layer's attention (in place, model head order; the run's type) or their
 * gradients (fp32). */
typedef struct {
    void *wq; /* (NH*HS, C) */
    void *wk; /* (NKV*HS, C) */
    void *wv; /* (NKV*HS, C) */
} cp_attention_weights;

typedef struct cp_attention cp_attention;

/* 0 when U query heads per stage are valid for this config and context-parallel degree P
 * (NH % U, U % P, U and NKV divide one another); else -1 with a message saying what to use. */
int cp_attention_check(int NH, int NKV, int P, int U, char *err, size_t errlen);
/* KV heads per rank in head layout: NKV/P, or 1 when each KV head is replicated (P > NKV). */
int cp_attention_kv_heads_per_rank(int NKV, int P);
/* Elements of each saved tensor of one layer (att, lse, and q, k, v under keep_qkv; else 0). */
void cp_attention_saved_floats(const cp_attention_shape *s, size_t *att, size_t *lse, size_t *q,
                               size_t *kv);

/* The stage buffers (category attention, elements of s->dtype, the workspace fp32; counted, not
 * allocated, under mem plan mode). */
cp_attention *cp_attention_init(const cp_attention_shape *s);
void cp_attention_free(cp_attention *a);

/* sv->att and sv->lse (and sv->q, k, v under keep_qkv) from h (T_loc, C), the attention
 * rmsnorm output. Collective over the context-parallel group. */
void cp_attention_forward(cp_attention *a, const void *h, const cp_attention_weights *w,
                          cp_attention_saved *sv);
/* From dres (T_loc, C) = d loss / d x_mid and wo (C, NH*HS), the output projection (x_mid = x +
 * att wo^T): dh (T_loc, C) += d loss / d h; g's q/k/v weight gradients accumulate (wo's are the
 * caller's). d loss / d att = dres wo is formed stage by stage, so only a stage's columns of it
 * exist at a time. Needs the forward's saved tensors and the same h. Collective. */
void cp_attention_backward(cp_attention *a, const void *h, const cp_attention_weights *w,
                           const cp_attention_weights *g, const void *dres, const void *wo,
                           const cp_attention_saved *sv, void *dh);

/* 1 when the pipe runs (overlap asked for, P > 1, the staged path with more than one stage). */
int cp_attention_overlaps(const cp_attention *a);

/* Seconds spent inside the attention kernels (forward and backward) since the last reset. */
double cp_attention_seconds(cp_attention *a, int reset);

#endif
