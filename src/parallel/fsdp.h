/* fsdp.h — FSDP / ZeRO-3 state: sharded parameters, gradients and AdamW moments (DESIGN.md §4.5).
 *
 * The full parameter layout is cut into units (for the model: 0 the embedding, 1..L the layers,
 * L+1 the final norm and the LM head). Each of R ranks owns a padded 1/R shard of every unit:
 * shard_n[u] = ceil(unit floats / R), rank i owning [i * shard_n, (i+1) * shard_n) of the unit,
 * clipped to the unit (the clipped tail of the last shard is padding: zero, never a parameter).
 * The four slabs (params, grads, m, v) hold this rank's shards one after the other.
 *
 * A unit is all-gathered into a gather slot before use (slots alternate 0/1 by unit; the tied
 * unit, an embedding that the LM head reuses, keeps slot 2 for itself), started ahead with
 * fsdp_prefetch so the gather overlaps the previous unit's compute. Its backward writes full
 * gradients into a buffer that fsdp_reduce reduce-scatters and adds to this rank's shard. The
 * tied unit has its own gradient buffer, filled by both its uses and reduced once.
 *
 * With R == 1 nothing is sharded: the slabs are the full layout, fsdp_gather and fsdp_grads
 * return the unit's place in them and the collectives are no-ops, so one code path serves both.
 * Every collective runs in the same unit order on every rank. */
#ifndef UP_FSDP_H
#define UP_FSDP_H

#include "comm/comm.h"
#include "core/mem.h"

#include <mpi.h>
#include <stddef.h>

typedef struct {
    comm_ctx *comm;
    int R, rank;       /* ranks sharing the state and this one's index; R == 1: unsharded */
    int nunits;
    int tied_unit;     /* unit with its own gather slot and gradient buffer, -1: none */
    size_t *unit_off;  /* (nunits + 1) offsets of the units in the full layout */
    size_t *shard_n;   /* (nunits) padded shard floats */
    size_t *shard_off; /* (nunits) offsets of the shards in the slabs */
    size_t nshard;     /* floats of a slab */
    float *params, *grads, *m, *v; /* this rank's shards (the full layout when R == 1) */
    mem_dtype wtype; /* element type of the weights the matmuls read (DESIGN.md §5.1) */
    void *gbuf[3];   /* gather slots (R > 1, or R == 1 with wtype bf16), elements of wtype */
    int gbuf_unit[3], gbuf_pending[3];
    MPI_Request req[3];
    float *gradbuf;      /* (R * max shard_n) full gradients of the unit in backward */
    float *tied_gradbuf; /* the tied unit's full gradients, accumulated over both its uses */
    float *rs_tmp;       /* (max shard_n) reduce-scatter result before it is added */
    size_t mpi_temp; /* bytes MPI holds inside the gradient collective (counted in comm) */
} fsdp_state;

/* Builds the shard tables for units at unit_off (nunits + 1 offsets) over R ranks (R == 1 or
 * comm's world size) and allocates the slabs (params, grads, optimizer: zero, fp32) and, when
 * R > 1, the gather and gradient buffers (comm). Without grads (evaluation) only the parameter
 * slab and the gather slots exist: no gradients, moments or reduce buffers (fsdp_grads,
 * fsdp_reduce and fsdp_gather_slab must not be called). wtype is the element type of the weights
 * the matmuls read: with bf16 the gather slots hold bf16 (each rank converts its shard into its
 * own place in the slot and the gather runs in place, so no bf16 shard is kept), and unsharded
 * (R == 1) the slots exist too (category params): a unit is rounded into its slot when it is
 * first used after fsdp_begin_forward, so the bf16 copy is two units (three, tied), not the model. Gradients and their
 * buffers stay fp32 (the reductions add in fp32). Under mem plan mode nothing is allocated. */
void fsdp_init(fsdp_state *f, comm_ctx *comm, const size_t *unit_off, int nunits, int R,
               int tied_unit, int grads, mem_dtype wtype);
void fsdp_free(fsdp_state *f);

/* Global (full-layout) range [g0, g1) of unit u that this rank owns. */
void fsdp_owned(const fsdp_state *f, int u, size_t *g0, size_t *g1);
/* Where the owned global offset g of unit u lives in a slab (params, grads, m or v). */
float *fsdp_shard_at(const fsdp_state *f, float *slab, int u, size_t g);

/* Before a forward: forgets what the gather slots hold (the optimizer changed the shards) and
 * zeroes the tied unit's gradient buffer. */
void fsdp_begin_forward(fsdp_state *f);
/* Starts the gather of unit u into its slot (no-op when R == 1, u out of range, or the slot
 * already holds u). Collective. */
void fsdp_prefetch(fsdp_state *f, int u);
/* Full parameters of unit u as the matmuls read them (elements of wtype): its place in the slab
 * (R == 1, fp32), or its slot, waiting for a prefetch or gathering (rounding, unsharded) now.
 * Collective when it gathers. */
void *fsdp_gather(fsdp_state *f, int u);
/* Where the backward of unit u accumulates full gradients: the slab (R == 1) or a buffer that
 * fsdp_reduce reduce-scatters (zeroed here, except the tied unit's). */
float *fsdp_grads(fsdp_state *f, int u);
/* Reduce-scatter of unit u's gradient buffer, added to this rank's shard (accumulates over
 * micro-batches). No-op when R == 1. Collective. */
void fsdp_reduce(fsdp_state *f, int u);
/* Writes unit u's full contents of slab (params or grads) into the chunk buffer and returns it
 * (R == 1: the unit's place in the slab, no copy). Collective when R > 1. */
const float *fsdp_gather_slab(fsdp_state *f, const float *slab, int u);

#endif
