/* store.h — the parameter store: a model's parameters, gradients and AdamW moments, cut into
 * units (for the model: 0 the embedding, 1..L the layers, L+1 the final norm and the LM head;
 * DESIGN.md §4.5, §5.1).
 *
 * Four slabs (params, grads, m, v: fp32) hold what this rank keeps of the full layout: all of it
 * (unsharded), or, sharded, its padded 1/R shard of every unit (FSDP / ZeRO-3: the collectives
 * of parallel/fsdp.h). The model reads a unit through store_acquire (its weights as the matmuls
 * read them, of the element type wtype) and writes its backward through store_grads, then
 * store_release. Sharded, acquire gathers the unit and release reduce-scatters its gradients into
 * the shard; unsharded with fp32 weights both are the unit's place in the slabs, nothing moves.
 *
 * Prefetch is the store's own policy: a pass (store_begin) walks the units in order, forward
 * 0, 1, .., nunits-1 and backward down to bwd_first, and acquiring the walk's next unit starts
 * the gather of the one after it, so it overlaps this unit's compute. An acquire off the walk
 * (the tied embedding reused by the LM head, a unit acquired again) prefetches nothing. Every
 * collective runs in the same unit order on every rank. */
#ifndef UP_STORE_H
#define UP_STORE_H

#include "comm/comm.h"
#include "core/mem.h"
#include "kernels/backend.h"

#include <stddef.h>

typedef struct param_store param_store;

typedef struct {
    const size_t *unit_off; /* (nunits + 1) offsets of the units in the full layout (floats) */
    int nunits;
    int tied_unit;       /* a unit used twice in a pass (an embedding that the LM head reuses): its
                            own gather slot and gradient buffer, filled by both uses; -1: none */
    int bwd_first;       /* the backward walk ends here: units below it take gradients only */
    int sharded;         /* FSDP over all of comm's ranks (R > 1) */
    int grads;           /* 0 (evaluation): the parameter slab and slots only; no grads, moments */
    mem_dtype wtype;     /* element type of the weights the matmuls read; the slabs stay fp32 */
    const typed_ctx *tk; /* the backend the slabs and slots live on (its memory space) */
    int offload;         /* --offload-optimizer (unsharded only): the four slabs live in host
                            memory (pinned on a device) and the optimizer side runs on the CPU;
                            the backend's space holds the weights of two units and the tied
                            unit (sent from the masters as acquired) and the gradients of the
                            unit in backward and of the tied unit (loaded from the slab by
                            store_grads, written back by store_release). The same bits as the
                            store on the device: the optimizer's ops give the device's bits
                            (backend.h) */
    int grads_on_device; /* with offload: the gradient slab stays in the backend's space (where
                            the backward accumulates into it as without offload) and goes to
                            the host a unit at a time for AdamW (store_opt_grads); the host holds
                            the masters and moments only */
} store_spec;

typedef enum { STORE_PARAMS, STORE_GRADS, STORE_M, STORE_V } store_slab_kind;
typedef enum { STORE_FORWARD, STORE_BACKWARD } store_pass;

/* Builds the unit tables and allocates the slabs (zero) and the gather slots and reduce buffers
 * the mode needs (sharded: category comm; unsharded bf16: two rounded units, three tied,
 * category params). Under mem plan mode nothing is allocated. Not collective. */
param_store *store_init(comm_ctx *comm, const store_spec *spec);
void store_free(param_store *s);

/* 1 when sharded (FSDP over more than one rank). */
int store_sharded(const param_store *s);
/* Floats of one slab on this rank (its shards, or the full layout). */
size_t store_floats(const param_store *s);
/* Unit u's kept part of slab k in host memory (its shard_n floats: the kept range, then the
 * shard's zero padding), for files and the host's init; NULL for grads and moments without
 * grads. Where the slabs are host memory (the CPU backend, or offloaded) it is the slab's own
 * place; on a device it is one host buffer of the largest unit's size (not a copy of the slabs:
 * DESIGN.md §11), filled from the device here, valid until the next call, and written back by
 * store_unit_put. */
float *store_unit_host(param_store *s, store_slab_kind k, int u);
/* The unit store_unit_host handed out last, changed on the host, back into the device's slab
 * (nothing where it was the slab's own place). */
void store_unit_put(param_store *s);
/* The backend the slabs live on and the optimizer side runs on: the store's, or the CPU's when
 * the optimizer is offloaded. */
const backend_ops *store_opt_backend(const param_store *s);
/* The backend whose space holds slab k (store_opt_backend's, except the gradients kept on the
 * device under grads_on_device: the store's). */
const backend_ops *store_slab_backend(const param_store *s, store_slab_kind k);
/* Unit u's gradients where the optimizer side reads them (unit u's part, kept range first):
 * their place in the slab, or under grads_on_device a host buffer (pinned on a device) they
 * are copied into, valid until the next call. */
const float *store_opt_grads(param_store *s, int u);
/* The slab of kind k where the optimizer side reads it (store_opt_backend's space: the host slab
 * itself on the CPU backend or offloaded), with every copy to and from it done. */
float *store_dev_slab(param_store *s, store_slab_kind k);
/* Global (full-layout) range [g0, g1) of unit u that this rank keeps (all of it unsharded). */
void store_owned(const param_store *s, int u, size_t *g0, size_t *g1);
/* Where the kept global offset g of unit u lives in a slab (unit: NULL), or in unit u's part
 * (unit: what store_unit_host returned for u; slab ignored). */
float *store_at(const param_store *s, float *slab, float *unit, int u, size_t g);

/* Starts a pass. Forward: forgets what the gather slots hold (the optimizer changed the slabs)
 * and zeroes the tied unit's gradient buffer. Backward: keeps them (the forward's last units are
 * still there). */
void store_begin(param_store *s, store_pass pass);
/* Full parameters of unit u as the matmuls read them (elements of wtype), valid until the slot
 * is reused two units later along the walk. Collective when sharded. */
void *store_acquire(param_store *s, int u);
/* Where the backward of unit u accumulates its full gradients (fp32): the slab, or a buffer that
 * store_release reduces (zeroed here, except the tied unit's, zeroed by store_begin). */
float *store_grads(param_store *s, int u);
/* Unit u's gradients are complete for this pass: sharded, reduce-scattered and added to this
 * rank's shard (accumulates over micro-batches). Collective when sharded. */
void store_release(param_store *s, int u);
/* Unit u's full contents of slab k (params or grads, fp32) in host memory, for a save: its
 * store_unit_host part, or gathered into a host buffer (a training store only), valid until the
 * next call. Collective when sharded. */
const float *store_gather_unit(param_store *s, store_slab_kind k, int u);

/* grads := 0. */
void store_zero_grads(param_store *s);
/* Unsharded: all-reduces the gradients over the replicas and context-parallel ranks (the
 * sharded ones were reduce-scattered by store_release: no-op). Collective. */
void store_reduce_grads(param_store *s);
/* Sum of squares of the whole gradient (all ranks' shards). Collective. */
double store_grad_sumsq(param_store *s);

#endif
