/* optim.c — the optimizer side of a step over this rank's shards (DESIGN.md §4.5): gradients
 * reduced, their global norm, AdamW on the owned part of every tensor. The padding of an FSDP
 * shard belongs to no tensor, so no step ever reads or writes it. */
#include "model/model.h"

#include "core/trace.h"

#include <math.h>
#include <string.h>

void model_zero_grads(model *m) { memset(m->fsdp.grads, 0, sizeof(float) * m->fsdp.nshard); }

void model_reduce_grads(model *m) {
    if (m->fsdp.R == 1) comm_reduce_grads(m->comm, m->fsdp.grads, m->fsdp.nshard);
}

double model_grad_norm(model *m) {
    double sq = sum_squares(m->fsdp.grads, m->fsdp.nshard);
    if (m->fsdp.R > 1) comm_sum_double(m->comm, &sq); /* shards: the norm of the whole gradient */
    return sqrt(sq);
}

int model_first_nonfinite_grad(model *m) {
    int first = m->params.ntensors;
    for (int t = 0; t < m->params.ntensors && first == m->params.ntensors; t++) {
        size_t i0, i1;
        if (!model_owned_part(m, t, &i0, &i1)) continue;
        const float *g = model_tensor_part(m, m->fsdp.grads, t, i0);
        for (size_t i = 0; i < i1 - i0; i++)
            if (!isfinite(g[i])) {
                first = t;
                break;
            }
    }
    first = comm_min_int(m->comm, first);
    return first < m->params.ntensors ? first : -1;
}

void model_optimizer_step(model *m, const adamw_params *hp, int step, float clip) {
    uint64_t tt = trace_begin();
    for (int t = 0; t < m->params.ntensors; t++) {
        size_t i0, i1;
        if (!model_owned_part(m, t, &i0, &i1)) continue;
        adamw_update(model_tensor_part(m, m->fsdp.params, t, i0),
                     model_tensor_part(m, m->fsdp.grads, t, i0),
                     model_tensor_part(m, m->fsdp.m, t, i0), model_tensor_part(m, m->fsdp.v, t, i0),
                     i1 - i0, hp, step, clip, m->params.tensors[t].decay);
    }
    /* bytes: the shards read and written (parameters, gradients, two moments) */
    trace_end2(tt, "optimizer", "optimizer_step", "step", step,
               "bytes", (int64_t)(m->fsdp.nshard * 4 * sizeof(float)));
}
