/* model.h — the Llama model on one rank: its parameters (params.h, sharded by fsdp.h), the
 * tensors its forward saves, and the forward and backward lists (DESIGN.md §1).
 *
 * model_forward / model_backward read as the model's steps in order; each technique acts through
 * a named call: fsdp_gather / fsdp_reduce around every unit (parallel/fsdp.h), the context-
 * parallel attention module (parallel/cp_attention.h), offload_write / offload_prefetch of the
 * checkpoints (memory/offload.h), and the MLP and loss tiles (model.c). */
#ifndef UP_MODEL_H
#define UP_MODEL_H

#include "comm/comm.h"
#include "core/mem.h"
#include "io/config.h"
#include "io/mask.h"
#include "io/safetensors.h"
#include "io/shard.h"
#include "io/st_set.h"
#include "kernels/kernels.h"
#include "kernels/typed.h"
#include "model/params.h"
#include "parallel/cp_attention.h"
#include "parallel/fsdp.h"

#include <stddef.h>
#include <stdint.h>

/* Memory techniques (DESIGN.md §3, §4); every combination gives the numbers of the plain path. */
typedef struct {
    int checkpoint;          /* keep only each layer's input; recompute the layer in backward */
    const char *offload_dir; /* move layer inputs to a store file in this directory (implies
                                checkpoint); NULL: resident */
    int tile_mlp;            /* tokens per MLP tile (norm included), 0: untiled */
    int tile_loss;           /* tokens per loss tile (final norm, LM head, CE), 0: T_loc */
    int U;                   /* query heads per UPipe stage (staged path), 0: plain Ulysses */
    int upipe_overlap;       /* the pipe: the next stage's exchange in flight during this
                                stage's attention (staged path, P > 1); same results */
    int fsdp;                /* shard params, grads and optimizer state over all ranks */
    int docs;                /* packed documents: attention within a document, positions from
                                its start (model_set_documents after each window) */
    int forward_only;        /* evaluation: no gradients, optimizer state or tensors saved for a
                                backward (checkpoint and offload do not apply); model_evaluate
                                only */
    mem_dtype dtype;         /* --dtype: element type of the stored tensors (activations,
                                checkpoints, attention, the weights the matmuls read); master
                                weights, gradients and AdamW moments stay fp32 (DESIGN.md §5.1).
                                the kernels run in fp32 on both (kernels/typed.h) */
} model_options;

/* --upipe-overlap unless --no-upipe-overlap (DESIGN.md §3 says why this default). */
enum { MODEL_UPIPE_OVERLAP_DEFAULT = 0 };

/* Tensors the forward saves for the backward of one layer (T = T_loc rows on this rank). With
 * checkpointing every layer shares one set (the layer being recomputed), x_in apart. Elements of
 * the run's type (opt.dtype) unless typed float (DESIGN.md §5.1). */
typedef struct {
    void *x_in;              /* (T, C) layer input (residual stream): the checkpoint */
    cp_attention_saved attn; /* o (T, NH*HS), log-sum-exp, and q, k, v for plain Ulysses */
    void *x_mid;             /* (T, C) residual after attention (saved, or the recompute's;
                                with checkpointing and a tiled MLP it is dh) */
    void *gate;              /* (T, F) untiled MLP only */
    void *up;                /* (T, F) untiled MLP only */
    void *act;               /* (T, F) silu(gate) * up, untiled MLP only */
} layer_acts;

struct offload_store;

typedef struct {
    model_config cfg;
    model_options opt;
    int T;                   /* T_loc: tokens per forward on this rank */
    int P;                   /* context-parallel degree */
    int tile_mlp, tile_loss; /* effective tile sizes (T_loc when untiled) */
    comm_ctx *comm;

    param_table params; /* the tensors and the FSDP units */
    fsdp_state fsdp;    /* params, grads, AdamW moments: this rank's shards (all without FSDP) */
    cp_attention *attn; /* stage buffers of the attention (plain Ulysses or UPipe) */
    struct offload_store *store; /* checkpoint offload, NULL when resident */
    layer_acts *acts;   /* (L) */

    /* shared scratch: void * in the run's type, float * fp32 (DESIGN.md §5.1) */
    typed_ctx tk;         /* the run's element type and the bf16 kernels' fp32 workspace */
    void *x_final;        /* (T, C) output of the last layer = dh (dead before the backward);
                             with the offload store the store's buffer holds it instead */
    void *h;              /* (T, C) rmsnorm output (attention, then MLP); recomputed in backward */
    float *rstd1, *rstd2; /* (T) */
    float *inv_freq;      /* (HS/2) */
    float *rope_cos, *rope_sin;          /* (T, HS/2) at this rank's global positions */
    void *gate_t, *up_t, *act_t, *dact;  /* (tile_mlp, F) MLP tiles (dact also untiled) */
    float *xf, *rstdf, *logits, *dxf;    /* loss tiles: (tile_loss, C), (.), (., V), (., C) */
    void *dres; /* (T, C) gradient of the residual stream */
    void *dh;   /* (T, C) (training only) */
    void *dh_t; /* (tile_mlp, C) the MLP backward's rows of dh when tiled; else dh */
    int32_t *inputs, *targets; /* (T) */
    int32_t *window;    /* (T * P) the whole window's inputs, every rank (opt.docs only) */
    int32_t *doc_start; /* (T * P) first position of each token's document (opt.docs only) */

    void **owned; /* the buffers of the activation table, freed by model_free */
    int nowned, owned_cap;
} model;

/* ---- layout checks and FLOPs (layout.c) ---------------------------------------------------- */

/* Checks NH % P, NKV vs P, T % P for context-parallel degree P; 0, or -1 with a message saying
 * what to change (err). R = world size, for the suggestions. */
int model_check_layout(const model_config *cfg, long T, int P, int R, char *err, size_t errlen);
/* Checks the options against config and layout (U divides NH, U % P, the GQA schedule, tile
 * sizes); 0, or -1 with a message. */
int model_check_options(const model_config *cfg, int P, const model_options *opt, char *err,
                        size_t errlen);
/* Model FLOPs of one training step (forward + backward) of T tokens: 6 * (matmul params) * T plus
 * causal attention 6 * 2 * L * NH * HS * T * (T+1) / 2 ... see layout.c. */
double model_flops_per_step(const model_config *cfg, int T);

/* ---- init, forward, backward (model.c) ------------------------------------------------------ */

/* Builds the tensor table and allocates params, grads, optimizer moments (all zero) and the
 * activations for T_loc tokens on this rank of comm's context-parallel group (P = comm->P; the
 * rank holds global positions cp_rank * T_loc ..). The layout must be valid (model_check_layout,
 * model_check_options). Under mem plan mode nothing is allocated or computed: the counters then
 * hold the run's memory plan. Not collective, except that an offload store that fails to open
 * on any rank stops all of them together; forward and backward are collective. */
void model_init(model *m, const model_config *cfg, int T_loc, comm_ctx *comm,
                const model_options *opt);
void model_free(model *m);

/* Packed documents (opt.docs): from m->window (the whole window's T*P inputs, on every rank)
 * and the separator that opens a document, sets the document of every position (attention stays
 * within it) and this rank's RoPE positions (offsets from the document's start). Returns the
 * documents in the window (a window that starts mid-document counts that one). */
int model_set_documents(model *m, int32_t sep);

/* Forward over m->inputs/m->targets (this rank's T_loc tokens): returns this rank's sum of token
 * losses (double) over targets >= 0. The loss's backward runs inside, per loss tile: the LM head
 * and final norm gradients are accumulated and d loss / d x_final (scaled by grad_scale, normally
 * 1 / valid targets of the global batch) is left in m->dres for model_backward. */
double model_forward(model *m, float grad_scale);
/* Backward: grads += d loss / d params (accumulate: model_zero_grads before the first
 * micro-batch of a step). Requires model_forward just before. */
void model_backward(model *m);
/* Forward only (evaluation, validation): returns this rank's sum of token losses over targets
 * >= 0, the same value model_forward returns for the same window. When loss / pred are given,
 * also each position's loss (T_loc, 0 where the target does not count) and top prediction
 * (T_loc, the argmax of its logits), computed per loss tile. Touches no gradient, saved layer
 * input or offload store: the residual stream runs through dres and dh, so it may run on a
 * training model between steps without changing what the next step computes. Collective. */
double model_evaluate(model *m, double *loss, int32_t *pred);

/* ---- data windows (window.c) ---------------------------------------------------------------- */

/* Reads this rank's slice of the window of T = T_loc * P tokens that starts at token first of the
 * shard (DESIGN.md §1: inputs at first + cp_rank * T_loc .., targets shifted by one before the
 * split, wrapping around the shard's end). mask (NULL: none) clears targets whose mask byte is 0
 * (mask_buf: T_loc bytes of scratch); with doc_sep >= 0 the whole window's inputs go to m->window
 * and targets equal to the separator are cleared (DESIGN.md §1.1). */
void model_read_window(model *m, const token_shard *shard, const mask_shard *mask,
                       uint8_t *mask_buf, long doc_sep, size_t first);

/* ---- weights (params.c) --------------------------------------------------------------------- */

/* Fills params: normal(0, init_std) for matrices, 1 for norm weights; a counter-based RNG keyed
 * by (seed, tensor, index), so the values do not depend on threads or layout. */
void model_init_random(model *m, uint64_t seed);
/* Loads params from a safetensors file with HF names (F32/BF16/F16), every tensor shape checked
 * against the config; with FSDP each rank reads only its shard. Dies with a one-line message on
 * any mismatch, on a NaN/Inf value (model_read_owned), and on a tensor the config does not use
 * (e.g. a 4-layer file for a 2-layer config; checked here only, not in model_read_owned, whose
 * files may hold several prefixes). */
void model_load(model *m, const char *path);
/* Writes the weights (F32, or BF16 rounded to nearest even) / the gradients (F32) as
 * safetensors with HF names, atomically, from rank 0;
 * with FSDP the units are gathered one at a time and streamed (no full copy). Collective. */
void model_save_params(model *m, const char *path, mem_dtype file_dtype);
void model_save_grads(model *m, const char *path);
/* Reads this rank's owned part of every tensor, named prefix + HF name, from set into slab
 * (params, m or v), every shape checked, every value read checked finite (the first NaN/Inf is
 * named with its tensor and row, column). Tensors of set it does not read are ignored. 0, or -1
 * with a message. Not collective. */
int model_read_owned(model *m, float *slab, const st_set *set, const char *prefix,
                     char *err, size_t errlen);
/* Safetensors entries (names, shapes) of nslabs slabs, slab k's tensors named prefixes[k] + HF
 * name, in table order, so that the data section of such a file is the slabs' full layouts one
 * after another. One allocation (names inside): free() it. */
st_entry *model_st_entries(const model *m, int nslabs, const char *const *prefixes);
/* Hands this rank's owned ranges of slab to write(ctx, bytes, length, file offset), for a file
 * whose copy of the full layout (F32) starts at byte data_off: ranks own disjoint ranges. Stops at
 * the first non-zero return and returns it; 0 when all are written. */
typedef int (*model_range_fn)(void *ctx, const void *src, size_t len, uint64_t off);
int model_write_owned(const model *m, const float *slab, uint64_t data_off, model_range_fn write,
                      void *ctx);
/* The elements [i0, i1) of tensor t that this rank owns (all of them without FSDP); 0 when
 * none. model_tensor_part(m, slab, t, i0) is where element i0 lives in a slab. */
int model_owned_part(const model *m, int t, size_t *i0, size_t *i1);
float *model_tensor_part(model *m, float *slab, int t, size_t i0);

/* ---- the optimizer side of a step (optim.c; the caller never walks shards) ------------------ */

/* grads := 0 (before the first micro-batch of a step). */
void model_zero_grads(model *m);
/* Sums the gradients of the data-parallel replicas and context-parallel ranks (all-reduce) when
 * unsharded; with FSDP they were reduce-scattered unit by unit in model_backward (no-op).
 * Collective. */
void model_reduce_grads(model *m);
/* Norm of the whole gradient (all shards). Collective. */
double model_grad_norm(model *m);
/* The first tensor (table index) with a NaN or Inf in its gradient, over every rank's owned
 * part (FSDP: the smallest index any rank finds); -1 when all are finite. Collective. */
int model_first_nonfinite_grad(model *m);
/* One AdamW step (1-based step) on every tensor's owned part, gradients scaled by clip (the
 * clipping factor); weight decay on the tensors that take it. */
void model_optimizer_step(model *m, const adamw_params *hp, int step, float clip);

#endif
