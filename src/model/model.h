/* model.h — the Llama model on one rank: parameter table, weights, activations, forward and
 * backward (DESIGN.md §1).
 *
 * Parameters live in one slab laid out by a table of tensors in HF order (embed, then per layer
 * input_layernorm, q, k, v, o, post_attention_layernorm, gate, up, down, then final norm and
 * lm_head unless tied). Gradients and the two AdamW moments are slabs of the same layout, so a
 * tensor's offset is valid in all four. model_layer_view() gives named pointers into any slab. */
#ifndef UP_MODEL_H
#define UP_MODEL_H

#include "comm/comm.h"
#include "io/config.h"

#include <stddef.h>
#include <stdint.h>

#define MODEL_NAME_MAX 96

typedef struct {
    char name[MODEL_NAME_MAX]; /* HF name, e.g. model.layers.0.self_attn.q_proj.weight */
    size_t offset;             /* in floats, into any slab */
    size_t numel;
    int ndim;
    int64_t shape[2];
    int decay; /* weight decay applies (matrices) */
} param_tensor;

/* Named pointers to one layer's tensors inside a slab (params, grads or moments). */
typedef struct {
    float *attn_norm; /* (C) */
    float *wq;        /* (NH*HS, C) */
    float *wk;        /* (NKV*HS, C) */
    float *wv;        /* (NKV*HS, C) */
    float *wo;        /* (C, NH*HS) */
    float *mlp_norm;  /* (C) */
    float *wg;        /* (F, C) */
    float *wu;        /* (F, C) */
    float *wd;        /* (C, F) */
} layer_weights;

/* Activations saved by the forward for the backward of one layer. T = T_loc rows on this rank;
 * q, k, v are kept in head layout: all Tg = T_loc * P tokens, this rank's NH_loc / NKV_loc heads
 * (with P = 1 the two layouts are the same). */
typedef struct {
    float *x_in;  /* (T, C) layer input (residual stream) */
    float *h1;    /* (T, C) attention rmsnorm output */
    float *rstd1; /* (T) */
    float *q;     /* (Tg, NH_loc, HS) after RoPE */
    float *k;     /* (Tg, NKV_loc, HS) after RoPE */
    float *v;     /* (Tg, NKV_loc, HS) */
    float *att;   /* (T, NH*HS) attention output o, sequence layout */
    float *lse;   /* (NH_loc, Tg) */
    float *x_mid; /* (T, C) residual after attention */
    float *h2;    /* (T, C) mlp rmsnorm output */
    float *rstd2; /* (T) */
    float *gate;  /* (T, F) */
    float *up;    /* (T, F) */
    float *act;   /* (T, F) silu(gate) * up */
} layer_acts;

typedef struct {
    model_config cfg;
    int T;       /* T_loc: tokens per forward on this rank */
    int Tg;      /* T: tokens of the whole sequence (T_loc * P) */
    int P;       /* context-parallel degree */
    int NH_loc;  /* query heads per rank in head layout (NH / P) */
    int NKV_loc; /* kv heads per rank in head layout (NKV / P, or 1 when replicated) */
    comm_ctx *comm;

    param_tensor *tensors;
    int ntensors;
    size_t nparams;
    size_t embed_off, final_norm_off, lm_head_off; /* lm_head_off == embed_off when tied */
    size_t *layer_off;                              /* (L) first float of each layer */

    float *params, *grads, *m, *v; /* slabs of nparams floats */

    /* activations */
    layer_acts *acts; /* (L) */
    float *x_final;   /* (T, C) output of the last layer */
    float *xf;        /* (T, C) final norm output */
    float *rstdf;     /* (T) */
    float *logits;    /* (T, V) logits, then d loss / d logits */
    float *inv_freq;  /* (HS/2) */
    float *rope_cos, *rope_sin; /* (T, HS/2) */
    /* attention exchange buffers (aliases of the saved/seq buffers when P == 1) */
    float *q_seq, *k_seq, *v_seq; /* (T, NH*HS), (T, NKV*HS) x2: projections before exchange */
    float *att_h;                 /* (Tg, NH_loc, HS) attention output in head layout */
    float *datt_h;                /* (Tg, NH_loc, HS) */
    float *dq_h, *dk_h, *dv_h;    /* (Tg, NH_loc, HS), (Tg, NKV_loc, HS) x2 */
    float *pack;                  /* all-to-all pack scratch */
    /* backward scratch */
    float *dres;  /* (T, C) gradient of the residual stream */
    float *dh;    /* (T, C) */
    float *dq, *dk, *dv, *datt; /* (T, NH*HS), (T, NKV*HS) x2, (T, NH*HS) */
    float *dact;  /* (T, F) */
    float *attn_ws;
    int32_t *inputs, *targets; /* (T) */
} model;

/* Builds the tensor table and allocates params, grads, optimizer moments (all zero) and the
 * activations for T_loc tokens on this rank of comm's context-parallel group (P = comm->P; the
 * rank holds global positions cp_rank * T_loc ..). The layout must be valid (model_check_layout).
 * Not collective; forward and backward are (over the CP group). */
void model_init(model *m, const model_config *cfg, int T_loc, comm_ctx *comm);
/* Checks NH % P, NKV vs P, T % P for context-parallel degree P; 0, or -1 with a message saying
 * what to change (err). R = world size, for the suggestions. */
int model_check_layout(const model_config *cfg, long T, int P, int R, char *err, size_t errlen);
void model_free(model *m);

/* Fills params: normal(0, init_std) for matrices, 1 for norm weights; a counter-based RNG keyed
 * by (seed, tensor, index), so the values do not depend on threads or layout. */
void model_init_random(model *m, uint64_t seed);
/* Loads params from a safetensors file with HF names (F32/BF16/F16), every tensor shape checked
 * against the config. Dies with a one-line message on any mismatch. */
void model_load(model *m, const char *path);
/* Writes a slab (params or grads) as F32 safetensors with HF names, atomically. */
void model_save_slab(const model *m, const float *slab, const char *path);

/* Named pointers of layer l into slab (m->params, m->grads, m->m or m->v). */
layer_weights model_layer_view(const model *m, float *slab, int l);

/* Forward over m->inputs/m->targets (this rank's T_loc tokens): returns this rank's sum of token
 * losses (double) over targets >= 0;
 * with grad_scale != 0 the loss gradient (scaled by grad_scale, normally 1/valid tokens) is left
 * in m->logits for model_backward. */
double model_forward(model *m, float grad_scale);
/* Backward: grads += d loss / d params (accumulate: zero m->grads before the first micro-batch
 * of a step). Requires model_forward just before. */
void model_backward(model *m);

/* Model FLOPs of one training step (forward + backward) of T tokens: 6 * (matmul params) * T plus
 * causal attention 6 * 2 * L * NH * HS * T * (T+1) / 2 ... see model.c. */
double model_flops_per_step(const model_config *cfg, int T);

#endif
