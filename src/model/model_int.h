/* model_int.h — private to src/model: what weights.c, optim.c and window.c read of a model (the
 * struct itself is model.c's). Everything outside src/model uses model.h's functions. */
#ifndef UP_MODEL_INT_H
#define UP_MODEL_INT_H

#include "model/model.h"
#include "model/params.h"

/* What weights.c and optim.c (the optimizer side) read of a model: its config, its
 * tensor table and its parameter store. */
const model_config *model_cfg(const model *m);
const param_table *model_table(const model *m);
param_store *model_store(const model *m);
/* The backend the model's tensors live and compute on. */
const backend_ops *model_backend(const model *m);
/* The writable buffers of the data window (window.c): inputs and targets (T_loc), the whole
 * window's inputs (T_loc * P, opt.docs only, else NULL). */
typedef struct {
    int T_loc, P;
    long pos0;
    int32_t *inputs, *targets, *window;
} model_window_bufs;
model_window_bufs model_window_buffers(model *m);

/* The elements [i0, i1) of tensor t that this rank owns (all of them without FSDP); 0 when
 * none. model_tensor_dev_part(m, k, t, i0) is where element i0 lives in the store's slab k where
 * the optimizer side runs (store_opt_backend's space; store_dev_slab); the host's view of a
 * device's slabs is one unit at a time (weights.c). */
int model_owned_part(const model *m, int t, size_t *i0, size_t *i1);
float *model_tensor_dev_part(model *m, store_slab_kind k, int t, size_t i0);

#endif
