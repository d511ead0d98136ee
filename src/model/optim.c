/* optim.c — the optimizer side of a step over this rank's shards (DESIGN.md §4.5): gradients
 * reduced, their global norm, AdamW on the owned part of every tensor. The padding of an FSDP
 * shard belongs to no tensor, so no step ever reads or writes it. */
#include "model/model_int.h"

#include "core/trace.h"

#include <math.h>

void model_zero_grads(model *m) {
    store_zero_grads(model_store(m));
}

void model_reduce_grads(model *m) {
    store_reduce_grads(model_store(m));
}

double model_grad_norm(model *m) {
    return sqrt(store_grad_sumsq(model_store(m)));
}

int model_first_nonfinite_grad(model *m) {
    const backend_ops *be = store_slab_backend(model_store(m), STORE_GRADS);
    int nt = model_ntensors(m), first = nt;
    for (int t = 0; t < nt && first == nt; t++) {
        size_t i0, i1;
        if (!model_owned_part(m, t, &i0, &i1)) continue;
        if (be->first_nonfinite(model_tensor_dev_part(m, STORE_GRADS, t, i0), i1 - i0) < i1 - i0)
            first = t;
    }
    first = comm_min_int(model_comm(m), first);
    return first < nt ? first : -1;
}

void model_optimizer_step(model *m, const adamw_params *hp, int step, float clip) {
    uint64_t tt = trace_begin();
    const param_table *pt = model_table(m);
    param_store *ps = model_store(m);
    const backend_ops *be = store_opt_backend(ps);
    const float *grads = NULL; /* unit u's, where AdamW reads them (store_opt_grads) */
    for (int t = 0, u = -1; t < pt->ntensors; t++) {
        size_t i0, i1;
        if (!model_owned_part(m, t, &i0, &i1)) continue;
        const param_tensor *x = &pt->tensors[t];
        if (x->unit != u) grads = store_opt_grads(ps, u = x->unit);
        be->adamw_update(model_tensor_dev_part(m, STORE_PARAMS, t, i0),
                         store_at(ps, NULL, (float *)grads, u, x->offset + i0),
                         model_tensor_dev_part(m, STORE_M, t, i0),
                         model_tensor_dev_part(m, STORE_V, t, i0), i1 - i0, hp, step, clip,
                         pt->tensors[t].decay);
    }
    /* bytes: the shards read and written (parameters, gradients, two moments) */
    trace_end2(tt, "optimizer", "optimizer_step", "step", step, "bytes",
               (int64_t)(store_floats(model_store(m)) * 4 * sizeof(float)));
}
