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
#include "core/mem.h"
#include "io/config.h"
#include "kernels/kernels.h"

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

/* Memory techniques (DESIGN.md §3-4); every combination gives the numbers of the plain path. */
typedef struct {
    int checkpoint;          /* keep only each layer's input; recompute the layer in backward */
    const char *offload_dir; /* move layer inputs to a store file in this directory (implies
                                checkpoint); NULL: resident */
    int tile_mlp;            /* tokens per MLP tile (norm included), 0: untiled */
    int tile_loss;           /* tokens per loss tile (final norm, LM head, CE), 0: T_loc */
    int U;                   /* query heads per UPipe stage (staged path), 0: plain Ulysses */
    int fsdp;                /* shard params, grads and optimizer state over all ranks */
} model_options;

/* Tensors the forward saves for the backward of one layer. T = T_loc rows on this rank; plain
 * attention keeps q, k, v in head layout (all Tg = T_loc * P tokens, this rank's NH_loc/NKV_loc
 * heads). With checkpointing every layer shares one set (the layer being recomputed). */
typedef struct {
    float *x_in;  /* (T, C) layer input (residual stream): the checkpoint */
    float *q;     /* (Tg, NH_loc, HS) after RoPE; plain attention only */
    float *k;     /* (Tg, NKV_loc, HS) after RoPE; plain attention only */
    float *v;     /* (Tg, NKV_loc, HS); plain attention only */
    float *att;   /* (T, NH*HS) attention output o, sequence layout, model head order */
    float *lse;   /* (NH_loc, Tg) log-sum-exp; staged: stage after stage, (U/P, Tg) each */
    float *x_mid; /* (T, C) residual after attention */
    float *gate;  /* (T, F) untiled MLP only */
    float *up;    /* (T, F) untiled MLP only */
    float *act;   /* (T, F) silu(gate) * up, untiled MLP only */
} layer_acts;

struct offload_store;
struct upipe_plan;

typedef struct {
    model_config cfg;
    model_options opt;
    int T;       /* T_loc: tokens per forward on this rank */
    int Tg;      /* T: tokens of the whole sequence (T_loc * P) */
    int P;       /* context-parallel degree */
    int NH_loc;  /* query heads per rank in head layout (NH / P) */
    int NKV_loc; /* kv heads per rank in head layout (NKV / P, or 1 when replicated) */
    int tile_mlp, tile_loss; /* effective tile sizes (T_loc when untiled) */
    comm_ctx *comm;

    param_tensor *tensors;
    int ntensors;
    size_t nparams;
    size_t embed_off, final_norm_off, lm_head_off; /* lm_head_off == embed_off when tied */
    size_t *layer_off;                              /* (L) first float of each layer */

    /* Units of FSDP (DESIGN.md §4): 0 embedding, 1..L the layers, L+1 final norm (+ lm_head).
     * This rank owns a padded 1/R_f shard of every unit: R_f = R with --fsdp, else 1 (the shard
     * is the whole unit and the slabs are the full layout). */
    int R_f, rank_f;
    int nunits;
    size_t *unit_off;  /* (nunits + 1) offsets of the units in the full layout */
    size_t *shard_n;   /* (nunits) padded shard floats: ceil(unit floats / R_f) */
    size_t *shard_off; /* (nunits) offsets of the shards in the slabs */
    size_t nshard;     /* floats of a slab */
    int *tensor_unit;  /* (ntensors) */
    float *params, *grads, *m, *v; /* this rank's shards: slabs of nshard floats */
    /* gather buffers (R_f > 1): units alternate between slots 0 and 1; slot 2 keeps a tied
     * embedding for the LM head */
    float *gbuf[3];
    int gbuf_unit[3];
    int gbuf_pending[3];
    void *greq; /* (3) MPI_Request */
    float *gradbuf;       /* (R_f * max shard_n) full gradients of the unit in backward */
    float *embed_gradbuf; /* tied + R_f > 1: embedding gradients from the LM head and the input */
    float *rs_tmp;        /* (max shard_n) reduce-scatter result before it is added */

    layer_acts *acts; /* (L) */
    struct offload_store *store; /* checkpoint offload, NULL when resident */
    struct upipe_plan *upipe;    /* staged attention, NULL for plain Ulysses */

    /* shared scratch */
    float *x_final;      /* (T, C) output of the last layer; the recompute's output scratch */
    float *h;            /* (T, C) rmsnorm output (attention, then MLP); recomputed in backward */
    float *rstd1, *rstd2; /* (T) */
    float *inv_freq;     /* (HS/2) */
    float *rope_cos, *rope_sin; /* (T, HS/2) */
    /* MLP tiles (tile_mlp rows; T when untiled only dact is used) */
    float *gate_t, *up_t, *act_t, *dact; /* (tile_mlp, F) */
    /* loss tiles */
    float *xf, *rstdf, *logits, *dxf; /* (tile_loss, C), (tile_loss), (tile_loss, V), (.., C) */
    /* plain attention exchange buffers (aliases of the saved/seq buffers when P == 1) */
    float *q_seq, *k_seq, *v_seq; /* (T, NH*HS), (T, NKV*HS) x2: projections before exchange */
    float *att_h;                 /* (Tg, NH_loc, HS) attention output in head layout */
    float *datt_h;                /* (Tg, NH_loc, HS) */
    float *dq_h, *dk_h, *dv_h;    /* (Tg, NH_loc, HS), (Tg, NKV_loc, HS) x2 */
    float *pack;                  /* all-to-all pack scratch */
    float *attn_ws;
    /* backward scratch */
    float *dres;  /* (T, C) gradient of the residual stream */
    float *dh;    /* (T, C) */
    float *dq, *dk, *dv, *datt; /* (T, NH*HS), (T, NKV*HS) x2, (T, NH*HS) */
    int32_t *inputs, *targets; /* (T) */

    void **owned; /* every mem_alloc'd buffer, freed by model_free */
    int nowned, owned_cap;
} model;

/* A buffer of n floats owned by the model (freed by model_free). NULL under plan mode. */
float *model_buffer(model *m, mem_category cat, size_t n);

/* Builds the tensor table and allocates params, grads, optimizer moments (all zero) and the
 * activations for T_loc tokens on this rank of comm's context-parallel group (P = comm->P; the
 * rank holds global positions cp_rank * T_loc ..). The layout must be valid (model_check_layout,
 * model_check_options). Under mem plan mode nothing is allocated or computed: the counters then
 * hold the run's memory plan. Not collective; forward and backward are (over the CP group). */
void model_init(model *m, const model_config *cfg, int T_loc, comm_ctx *comm,
                const model_options *opt);
/* Checks NH % P, NKV vs P, T % P for context-parallel degree P; 0, or -1 with a message saying
 * what to change (err). R = world size, for the suggestions. */
int model_check_layout(const model_config *cfg, long T, int P, int R, char *err, size_t errlen);
/* Checks the options against config and layout (U divides NH, U % P, the GQA schedule, tile
 * sizes); 0, or -1 with a message. */
int model_check_options(const model_config *cfg, int P, const model_options *opt, char *err,
                        size_t errlen);
void model_free(model *m);

/* Fills params: normal(0, init_std) for matrices, 1 for norm weights; a counter-based RNG keyed
 * by (seed, tensor, index), so the values do not depend on threads or layout. */
void model_init_random(model *m, uint64_t seed);
/* Loads params from a safetensors file with HF names (F32/BF16/F16), every tensor shape checked
 * against the config. Dies with a one-line message on any mismatch. */
void model_load(model *m, const char *path);
/* Writes a slab (params or grads) as F32 safetensors with HF names, atomically, from rank 0;
 * with FSDP the units are gathered one at a time and streamed (no full copy). Collective. */
void model_save_slab(model *m, const float *slab, const char *path);

/* Named pointers into a layer's full data (a gathered unit or the unit's place in a slab). */
layer_weights model_layer_view(const model *m, float *layer);

/* ---- FSDP units (fsdp.c) --------------------------------------------------------------------- */
/* Builds the unit and shard tables for R_f ranks (1: unsharded). */
void fsdp_layout(model *m, int R_f, int rank_f);
/* The elements [i0, i1) of tensor t that this rank owns (all of them without FSDP); 0 when
 * none. fsdp_shard_at(m, slab, m->tensor_unit[t], tensor offset + i0) is where they live. */
int model_owned_part(const model *m, int t, size_t *i0, size_t *i1);
/* Full parameters of unit u: with R_f == 1 its place in the slab; else a gather buffer (waits for
 * a prefetch, or gathers now). Collective when it gathers. */
float *fsdp_gather(model *m, int u);
/* Forgets what the gather buffers hold (the shards changed: after an optimizer step). */
void fsdp_invalidate(model *m);
/* Starts the gather of unit u into its slot ahead of use (no-op when R_f == 1). Collective. */
void fsdp_prefetch(model *m, int u);
/* Where the backward of unit u accumulates full gradients: the slab (R_f == 1) or a zeroed
 * buffer that fsdp_reduce reduce-scatters into this rank's shard. */
float *fsdp_grads(model *m, int u);
/* Reduce-scatter of unit u's gradient buffer, added to the shard (no-op when R_f == 1).
 * Collective. */
void fsdp_reduce(model *m, int u);
/* Global (full-layout) range [g0, g1) of unit u owned by this rank. */
void fsdp_owned(const model *m, int u, size_t *g0, size_t *g1);
/* Pointer into a shard slab for the owned global offset g of unit u. */
float *fsdp_shard_at(const model *m, float *slab, int u, size_t g);


/* Forward over m->inputs/m->targets (this rank's T_loc tokens): returns this rank's sum of token
 * losses (double) over targets >= 0. The loss's backward runs inside, per loss tile: the LM head
 * and final norm gradients are accumulated and d loss / d x_final (scaled by grad_scale, normally
 * 1 / valid targets of the global batch) is left in m->dres for model_backward. */
double model_forward(model *m, float grad_scale);
/* Backward: grads += d loss / d params (accumulate: zero m->grads before the first micro-batch
 * of a step). Requires model_forward just before. */
void model_backward(model *m);

/* ---- the optimizer side of a step (over this rank's shards; the caller never walks them) ---- */
/* grads := 0 (before the first micro-batch of a step). */
void model_zero_grads(model *m);
/* Sums the gradients of the data-parallel replicas and context-parallel ranks (all-reduce) when
 * unsharded; with FSDP they were reduce-scattered unit by unit in model_backward (no-op).
 * Collective. */
void model_reduce_grads(model *m);
/* Norm of the whole gradient (all shards). Collective. */
double model_grad_norm(model *m);
/* One AdamW step (1-based step) on every tensor's owned part, gradients scaled by clip (the
 * clipping factor); weight decay on the tensors that take it. Forgets gathered units. */
void model_optimizer_step(model *m, const adamw_params *hp, int step, float clip);
/* Writes the weights / the gradients (safetensors, F32, HF names). Collective. */
void model_save_params(model *m, const char *path);
void model_save_grads(model *m, const char *path);

/* Model FLOPs of one training step (forward + backward) of T tokens: 6 * (matmul params) * T plus
 * causal attention 6 * 2 * L * NH * HS * T * (T+1) / 2 ... see model.c. */
double model_flops_per_step(const model_config *cfg, int T);

#endif
