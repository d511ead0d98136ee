/* fsdp.h — the sharded mode of the parameter store (model/store.h): FSDP / ZeRO-3 shards and the
 * collectives that move them (DESIGN.md §4.5). Used by store.c only.
 *
 * Each of R ranks keeps a padded 1/R shard of every unit of n floats: fsdp_shard_floats(n, R)
 * = ceil(n / R), rank i keeping [i * s, (i+1) * s) of the unit, clipped to the unit (the clipped
 * tail of the last shard is padding: zero, never a parameter). A unit is all-gathered in place
 * (each rank's shard already in its own place in the full buffer) and its full gradients are
 * reduce-scattered and added to the shard. With R == 1 the shard is the unit. */
#ifndef UP_FSDP_H
#define UP_FSDP_H

#include "comm/comm.h"
#include "core/mem.h"

#include <stddef.h>

/* Padded shard floats of a unit of n floats over R ranks. */
size_t fsdp_shard_floats(size_t n, int R);
/* The part [a, b) of a unit of n floats (offsets in the unit) that rank keeps. */
void fsdp_kept(size_t n, int R, int rank, size_t *a, size_t *b);
/* Starts the all-gather of unit u's shards of n elements of dt into full, in place. Collective. */
void fsdp_gather_start(comm_ctx *c, void *full, size_t n, mem_dtype dt, comm_req *req);
/* Waits for it (the trace's fsdp_gather span: the wait for a gather started ahead). */
void fsdp_gather_wait(comm_ctx *c, comm_req *req, int u, size_t n, mem_dtype dt);
/* The same, gathered now, without a span (a save's units). Collective. */
void fsdp_gather_now(comm_ctx *c, void *full, size_t n, mem_dtype dt);
/* shard[0..n) += the sum over ranks of this rank's part of full (R * n floats), summed in rank
 * order; tmp and recv: n floats each. Collective. */
void fsdp_reduce_add(comm_ctx *c, const float *full, float *tmp, float *recv, float *shard,
                     size_t n, int u);

#endif
