/* model_int.h — private to src/model: the model's struct, shared by model.c (init, the forward
 * and backward lists) and params.c, optim.c, window.c. Everything outside src/model uses
 * model.h's functions. */
#ifndef UP_MODEL_INT_H
#define UP_MODEL_INT_H

#include "kernels/typed.h"
#include "model/model.h"
#include "model/params.h"
#include "parallel/cp_attention.h"

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

struct model {
    model_config cfg;
    model_options opt;
    int T;                   /* T_loc: tokens per forward on this rank */
    int P;                   /* context-parallel degree */
    int tile_mlp, tile_loss; /* effective tile sizes (T_loc when untiled) */
    comm_ctx *comm;

    param_table params; /* the tensors and the units */
    param_store *ps;    /* params, grads, AdamW moments: this rank's shards (all without FSDP) */
    cp_attention *attn; /* stage buffers of the attention (plain Ulysses or UPipe) */
    struct offload_store *offload; /* checkpoint offload, NULL when resident */
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
};

/* The elements [i0, i1) of tensor t that this rank owns (all of them without FSDP); 0 when
 * none. model_tensor_part(m, slab, t, i0) is where element i0 lives in a slab (params.c). */
int model_owned_part(const model *m, int t, size_t *i0, size_t *i1);
float *model_tensor_part(model *m, float *slab, int t, size_t i0);

#endif
