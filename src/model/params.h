/* params.h — the parameters of the Llama model: one table of tensors in HF order, built from one
 * spec of a layer's layout, and named views into it (DESIGN.md §1, §6).
 *
 * Layout: embed, then per layer input_layernorm, q, k, v, o, post_attention_layernorm, gate, up,
 * down, then the final norm and lm_head (absent when tied). Parameters, gradients and the two
 * AdamW moments are slabs of this layout (or of its FSDP shards), so a tensor's offset is valid
 * in all four. The FSDP units are: 0 the embedding, 1..L the layers, L+1 final norm + lm_head. */
#ifndef UP_PARAMS_H
#define UP_PARAMS_H

#include "core/mem.h"
#include "io/config.h"

#include <stddef.h>
#include <stdint.h>

#define PARAM_NAME_MAX 96

typedef struct {
    char name[PARAM_NAME_MAX]; /* HF name, e.g. model.layers.0.self_attn.q_proj.weight */
    size_t offset;             /* in floats, into the full layout */
    size_t numel;
    int ndim;
    int64_t shape[2];
    int decay; /* weight decay applies (matrices) */
    int unit;  /* FSDP unit holding the tensor */
} param_tensor;

/* Named pointers to one layer's tensors inside a slab (params, grads or moments: fp32), or inside
 * the weights the matmuls read (a gathered unit, or the unsharded copy: the run's element type,
 * DESIGN.md §5.1). */
typedef struct {
    void *attn_norm; /* (C) */
    void *wq;        /* (NH*HS, C) */
    void *wk;        /* (NKV*HS, C) */
    void *wv;        /* (NKV*HS, C) */
    void *wo;        /* (C, NH*HS) */
    void *mlp_norm;  /* (C) */
    void *wg;        /* (F, C) */
    void *wu;        /* (F, C) */
    void *wd;        /* (C, F) */
} layer_weights;

typedef struct {
    param_tensor *tensors;
    int ntensors;
    size_t nparams;
    int nunits;         /* L + 2 */
    size_t *unit_off;   /* (nunits + 1) first float of each unit; unit_off[nunits] = nparams */
    size_t lm_head_off; /* == unit_off[0] (the embedding) when tied */
} param_table;

/* Builds the table of cfg. */
void param_table_build(param_table *t, const model_config *cfg);
void param_table_free(param_table *t);
/* Named pointers into a layer's full data (a gathered unit, or the unit's place in a slab) whose
 * elements are of type dt. */
layer_weights param_layer_view(const model_config *cfg, void *layer, mem_dtype dt);

#endif
