/* model.h — the Llama model on one rank: its parameters (a parameter store, store.h), the
 * tensors its forward saves, and the forward and backward lists (DESIGN.md §1). The struct is
 * opaque: jobs (train, eval, ckpt, output) use the functions below.
 *
 * model_forward / model_backward read as the model's steps in order; each technique acts through
 * a named call: store_acquire / store_release around every unit (model/store.h; FSDP when
 * sharded), the context-parallel attention module (parallel/cp_attention.h), offload_write /
 * offload_prefetch of the checkpoints (memory/offload.h), and the MLP and loss tiles (model.c). */
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
#include "model/store.h"

#include <stddef.h>
#include <stdint.h>

/* Memory techniques (DESIGN.md §3, §4); every combination gives the numbers of the plain path. */
typedef struct {
    int checkpoint;          /* keep only each layer's input; recompute the layer in backward */
    const char *offload_dir; /* move layer inputs to a store file in this directory (implies
                                checkpoint); NULL: resident. On a device backend, or with
                                offload_host_limit, to host memory instead (model/ckpt_tier.h) */
    unsigned long long offload_host_limit; /* --offload-host-limit: host bytes for them */
    int offload_keep;       /* --offload-keep: layer inputs kept on the device (0: 2) */
    int tile_mlp;           /* tokens per MLP tile (norm included), 0: untiled */
    int tile_loss;          /* tokens per loss tile (final norm, LM head, CE), 0: T_loc */
    int U;                  /* query heads per UPipe stage (staged path), 0: plain Ulysses */
    int upipe_overlap;      /* the pipe: the next stage's exchange in flight during this
                               stage's attention (staged path, P > 1); same results; only
                               where a context-parallel group spans nodes ... */
    int upipe_overlap_node; /* ... unless this is set: also within a node (DESIGN.md §3) */
    int fsdp;               /* shard params, grads and optimizer state over all ranks */
    int offload_opt;        /* --offload-optimizer: masters, gradients and AdamW moments in
                               host memory (pinned on a device), AdamW on the CPU; the device
                               keeps the weights and gradients of the units at hand
                               (model/store.h); unsharded only */
    int grads_on_device;    /* --grads-on-device: with offload_opt, the fp32 gradients stay in
                               the backend's space and go to the host a unit at a time */
    int docs;               /* packed documents: attention within a document, positions from
                               its start (model_set_documents after each window) */
    int forward_only;       /* evaluation: no gradients, optimizer state or tensors saved for a
                               backward (checkpoint and offload do not apply); model_evaluate
                               only */
    mem_dtype dtype;        /* --dtype: element type of the stored tensors (activations,
                               checkpoints, attention, the weights the matmuls read); master
                               weights, gradients and AdamW moments stay fp32 (DESIGN.md §5.1).
                               the kernels run in fp32 on both (kernels/typed.h) */
    const backend_ops *be;  /* --device: the backend the tensors live and compute on (NULL:
                               the CPU's); a device backend holds host copies of the window
                               and the RoPE tables, sent before each pass (DESIGN.md §11) */
} model_options;

/* --upipe-overlap unless --no-upipe-overlap (DESIGN.md §3 says why this default). */
enum { MODEL_UPIPE_OVERLAP_DEFAULT = 0 };

/* The model on one rank: config, options, the parameter store, the attention module, the
 * activations and the data window (model_int.h, private to src/model). */
typedef struct model model;

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
/* Bytes one rank sends per step in each kind of collective (as comm_stats counts them: the
 * all-to-all blocks to its CP peers, FSDP's shards to every other rank, the gradients'
 * all-reduce), from the shapes and options alone, for a step of `micro` micro-batches:
 * --dry-run's table (DESIGN.md §8.3). bytes[COMM_LOSS_REDUCE] and [COMM_OTHER] (a few bytes)
 * are left 0. overwrite bytes. */
void model_comm_per_step(const model_config *cfg, int T_loc, const comm_ctx *comm,
                         const model_options *opt, int micro, double bytes[COMM_KIND_COUNT]);

/* ---- init, forward, backward (model.c) ------------------------------------------------------ */

/* A new model: builds the tensor table and allocates the parameter store (params, grads,
 * optimizer moments, all zero) and the activations for T_loc tokens on this rank of comm's
 * context-parallel group (P = comm->P; the rank holds global positions cp_rank * T_loc ..). The
 * layout must be valid (model_check_layout, model_check_options). Under mem plan mode nothing
 * is allocated or computed: the counters then hold the run's memory plan. Not collective,
 * except that an offload store that fails to open on any rank stops all of them together;
 * forward and backward are collective. model_free frees it all (NULL: nothing). */
model *model_init(const model_config *cfg, int T_loc, comm_ctx *comm, const model_options *opt);
/* The training step now running (0-based), named by a device error's line. */
void model_set_step(model *m, long step);
void model_free(model *m);

/* ---- what jobs read of a model (model.c) ----------------------------------------------------- */

/* This rank's view of the current data window (model_read_window): T_loc tokens at global
 * positions pos0 .. pos0 + T_loc of a window of T_loc * P; inputs and targets (T_loc; targets
 * -1 where they do not count), doc_start (T_loc * P, opt.docs only, else NULL). */
typedef struct {
    int T_loc, P;
    long pos0;
    const int32_t *inputs, *targets, *doc_start;
} model_window;
model_window model_window_of(const model *m);
/* The communicator the model was built on. */
comm_ctx *model_comm(const model *m);
/* Parameters of the model (all ranks), tensors of its table. */
size_t model_nparams(const model *m);
int model_ntensors(const model *m);
/* HF name of tensor t of the table (0 <= t < model_ntensors). */
const char *model_tensor_name(const model *m, int t);
/* 1 when parameters, gradients and moments are sharded (--fsdp over more than one rank). */
int model_sharded(const model *m);
/* This rank's seconds in the attention kernels since the last reset (reset: start over). */
double model_attention_seconds(model *m, int reset);
/* 1 when the UPipe stages overlap the next stage's exchange with this one's attention. */
int model_attention_overlaps(const model *m);
/* Whether the options ask for the pipe on this layout: --upipe-overlap where a context-parallel
 * group spans nodes (within a node the exchange is a copy on the cores attention runs on, so the
 * pipe cannot hide it: DESIGN.md §3), --upipe-overlap-on-node everywhere; never when the
 * exchanges are staged through host memory (comm_ctx.staged). The pipe then runs where it has
 * something to overlap (cp_attention_init). */
int model_pipe_wanted(const model_options *opt, const comm_ctx *comm);

/* Packed documents (opt.docs): from the window's T*P inputs (model_read_window, every rank)
 * and the separator that opens a document, sets the document of every position (attention stays
 * within it) and this rank's RoPE positions (offsets from the document's start). Returns the
 * documents in the window (a window that starts mid-document counts that one). */
int model_set_documents(model *m, int32_t sep);

/* Forward over the window's inputs and targets (this rank's T_loc tokens): returns this rank's
 * sum of token losses (double) over targets >= 0. The loss's backward runs inside, per loss
 * tile: the LM head and final norm gradients are accumulated and d loss / d x_final (scaled
 * by grad_scale, normally 1 / valid targets of the global batch) is kept for model_backward. */
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
 * (mask_buf: T_loc bytes of scratch); with doc_sep >= 0 the whole window's inputs are kept
 * and targets equal to the separator are cleared (DESIGN.md §1.1). */
void model_read_window(model *m, const token_shard *shard, const mask_shard *mask,
                       uint8_t *mask_buf, long doc_sep, size_t first);

/* ---- weights (weights.c) -------------------------------------------------------------------- */

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
/* Reads this rank's owned part of every tensor, named prefix + HF name, from set into the
 * store's slab k (params, m or v), every shape checked, every value read checked finite (the
 * first NaN/Inf is named with its tensor and row, column). Tensors of set it does not read are
 * ignored. 0, or -1 with a message. Not collective. */
int model_read_owned(model *m, store_slab_kind k, const st_set *set, const char *prefix, char *err,
                     size_t errlen);
/* Safetensors entries (names, shapes) of nslabs slabs, slab k's tensors named prefixes[k] + HF
 * name, in table order, so that the data section of such a file is the slabs' full layouts one
 * after another. One allocation (names inside): free() it. */
st_entry *model_st_entries(const model *m, int nslabs, const char *const *prefixes);
/* Hands this rank's owned ranges of the store's slab k to write(ctx, bytes, length, file
 * offset), for a file whose copy of the full layout (F32) starts at byte data_off: ranks own
 * disjoint ranges. Stops at the first non-zero return and returns it; 0 when all are written. */
typedef int (*model_range_fn)(void *ctx, const void *src, size_t len, uint64_t off);
int model_write_owned(model *m, store_slab_kind k, uint64_t data_off, model_range_fn write,
                      void *ctx);
/* Floats of all tensors that this rank owns (all of them without FSDP; the padding apart). */
size_t model_owned_floats(const model *m);

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
