/* params.c — the parameter table and views (one layer spec drives both). The weights of a model
 * (init, load, save) are weights.c's. */
#include "model/params.h"

#include "core/check.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- one spec of a layer's tensors ---------------------------------------------------------- */

typedef enum { DIM_1, DIM_C, DIM_QD, DIM_KVD, DIM_F } dim_sym; /* DIM_1: a vector's 2nd dim */

static const struct {
    const char *suffix;
    size_t field; /* offsetof the tensor's pointer in layer_weights */
    dim_sym d0, d1;
} LAYER_SPEC[] = {
    {"input_layernorm.weight", offsetof(layer_weights, attn_norm), DIM_C, DIM_1},
    {"self_attn.q_proj.weight", offsetof(layer_weights, wq), DIM_QD, DIM_C},
    {"self_attn.k_proj.weight", offsetof(layer_weights, wk), DIM_KVD, DIM_C},
    {"self_attn.v_proj.weight", offsetof(layer_weights, wv), DIM_KVD, DIM_C},
    {"self_attn.o_proj.weight", offsetof(layer_weights, wo), DIM_C, DIM_QD},
    {"post_attention_layernorm.weight", offsetof(layer_weights, mlp_norm), DIM_C, DIM_1},
    {"mlp.gate_proj.weight", offsetof(layer_weights, wg), DIM_F, DIM_C},
    {"mlp.up_proj.weight", offsetof(layer_weights, wu), DIM_F, DIM_C},
    {"mlp.down_proj.weight", offsetof(layer_weights, wd), DIM_C, DIM_F},
};
enum { LAYER_NT = sizeof LAYER_SPEC / sizeof LAYER_SPEC[0] };

static int64_t dim_of(const model_config *c, dim_sym d) {
    switch (d) {
    case DIM_C:
        return c->C;
    case DIM_QD:
        return (int64_t)c->NH * c->HS;
    case DIM_KVD:
        return (int64_t)c->NKV * c->HS;
    case DIM_F:
        return c->F;
    default:
        return 0;
    }
}

layer_weights param_layer_view(const model_config *c, void *layer, mem_dtype dt) {
    layer_weights w;
    char *p = layer;
    for (int i = 0; i < LAYER_NT; i++) {
        *(void **)((char *)&w + LAYER_SPEC[i].field) = p;
        int64_t d1 = dim_of(c, LAYER_SPEC[i].d1);
        p += mem_dtype_bytes(dt, (size_t)dim_of(c, LAYER_SPEC[i].d0) * (size_t)(d1 > 0 ? d1 : 1));
    }
    return w;
}

/* ---- the table ------------------------------------------------------------------------------ */

static void add_tensor(param_table *t, int unit, const char *name, int64_t d0, int64_t d1,
                       int decay) {
    param_tensor *pt = &t->tensors[t->ntensors++];
    memset(pt, 0, sizeof *pt);
    snprintf(pt->name, sizeof pt->name, "%s", name);
    pt->ndim = d1 > 0 ? 2 : 1;
    pt->shape[0] = d0;
    pt->shape[1] = d1;
    pt->numel = up_mul((size_t)d0, d1 > 0 ? (size_t)d1 : 1);
    pt->offset = t->nparams;
    pt->decay = decay;
    pt->unit = unit;
    t->nparams = up_add(t->nparams, pt->numel);
}

void param_table_build(param_table *t, const model_config *c) {
    memset(t, 0, sizeof *t);
    t->nunits = c->L + 2;
    t->tensors = calloc((size_t)c->L * LAYER_NT + 3, sizeof *t->tensors);
    t->unit_off = calloc((size_t)t->nunits + 1, sizeof *t->unit_off);
    UP_CHECK(t->tensors && t->unit_off, "out of memory for the tensor table");
    char name[PARAM_NAME_MAX];
    add_tensor(t, 0, "model.embed_tokens.weight", c->V, c->C, 1);
    for (int l = 0; l < c->L; l++) {
        t->unit_off[l + 1] = t->nparams;
        for (int i = 0; i < LAYER_NT; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, LAYER_SPEC[i].suffix);
            int64_t d1 = dim_of(c, LAYER_SPEC[i].d1);
            add_tensor(t, l + 1, name, dim_of(c, LAYER_SPEC[i].d0), d1, d1 > 0);
        }
    }
    int head = c->L + 1;
    t->unit_off[head] = t->nparams;
    add_tensor(t, head, "model.norm.weight", c->C, 0, 0);
    t->lm_head_off = t->unit_off[0];
    if (!c->tied) {
        t->lm_head_off = t->nparams;
        add_tensor(t, head, "lm_head.weight", c->V, c->C, 1);
    }
    t->unit_off[t->nunits] = t->nparams;
}

void param_table_free(param_table *t) {
    free(t->tensors);
    free(t->unit_off);
    memset(t, 0, sizeof *t);
}
