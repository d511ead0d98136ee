/* test_store.c — the parameter store (model/store.h) on 1 rank (plain) and under mpiexec on 2 and 3
 * (sharded: FSDP). Each rank fills its own part of every slab from the global offset alone, so
 * every rank knows what a gather, a reduce-scatter or a save must give without a reference run
 * (nccl-tests style); the error counts are agreed over the ranks. Checked, for fp32 and bf16
 * weights, with and without a tied unit: acquire along the forward and the backward walk and off
 * it (the tied unit again), gradients accumulated over two passes and reduced into the shards,
 * the padding of a shard left zero, the gradient norm, and a save's gathered units; unsharded,
 * also with the optimizer offloaded (the slabs on the host, one unit's gradients and the slots in
 * the backend's space: the same checks hold). */
#include <mpi.h>

#include "harness.h" /* after <mpi.h>: harness_init_mpi, harness_finish_mpi */

#include "core/check.h"
#include "core/mem.h"
#include "kernels/bf16.h"
#include "model/store.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Parameter and gradient values by global offset g (small integers and halves: exact in fp32,
 * and sums of a few of them too). */
static float param_of(size_t g) {
    return (float)((long)(g * 7 % 23) - 11) * 0.5f;
}
static float grad_of(size_t g) {
    return (float)((long)(g * 5 % 13) - 6);
}

/* The weights a matmul reads for a master value: itself, or rounded to bf16. */
static int view_equals(mem_dtype wt, const void *view, size_t i, float master) {
    if (wt == MEM_DTYPE_F32) return ((const float *)view)[i] == master;
    return ((const uint16_t *)view)[i] == bf16_round(master);
}

static long check_case(comm_ctx *c, int sharded, int tied, mem_dtype wt, int offload) {
    const size_t unit_off[] = {0, 7, 31, 49, 52}; /* units of 7, 24, 18 and 3 floats */
    const int nunits = 4;
    int R = sharded ? c->R : 1, rank = c->rank;
    store_spec sp = {.unit_off = unit_off,
                     .nunits = nunits,
                     .tied_unit = tied ? 0 : -1,
                     .bwd_first = 1,
                     .sharded = sharded,
                     .grads = 1,
                     .wtype = wt,
                     .offload = offload};
    param_store *s = store_init(c, &sp);
    long errors = 0;
    errors += store_sharded(s) != (R > 1);
    for (int u = 0; u < nunits; u++) { /* every rank fills what it keeps */
        size_t g0, g1;
        store_owned(s, u, &g0, &g1);
        float *p = store_unit_host(s, STORE_PARAMS, u);
        for (size_t g = g0; g < g1; g++)
            *store_at(s, NULL, p, u, g) = param_of(g);
        store_unit_put(s);
    }
    store_zero_grads(s);
    for (int pass = 0; pass < 2; pass++) { /* gradients accumulate over micro-batches */
        store_begin(s, STORE_FORWARD);
        for (int u = 0; u < nunits; u++) {
            const void *w = store_acquire(s, u);
            for (size_t g = unit_off[u]; g < unit_off[u + 1]; g++)
                errors += !view_equals(wt, w, g - unit_off[u], param_of(g));
        }
        const void *w0 = store_acquire(s, 0); /* off the walk: a tied LM head */
        for (size_t g = 0; g < unit_off[1]; g++)
            errors += !view_equals(wt, w0, g, param_of(g));
        store_begin(s, STORE_BACKWARD);
        for (int u = nunits - 1; u >= 0; u--) {
            if (u >= 1) {
                const void *w = store_acquire(s, u);
                for (size_t g = unit_off[u]; g < unit_off[u + 1]; g++)
                    errors += !view_equals(wt, w, g - unit_off[u], param_of(g));
            }
            float *gr = store_grads(s, u); /* each rank adds (rank + 1) * grad_of */
            for (size_t g = unit_off[u]; g < unit_off[u + 1]; g++)
                gr[g - unit_off[u]] += (float)(rank + 1) * grad_of(g);
            store_release(s, u);
        }
    }
    /* sharded: the sum over the ranks, twice; unsharded: this rank's own, twice */
    double sumsq = 0;
    for (int u = 0; u < nunits; u++) {
        size_t g0, g1;
        store_owned(s, u, &g0, &g1);
        float mult = R > 1 ? (float)(R * (R + 1) / 2) : (float)(rank + 1);
        float *q = store_unit_host(s, STORE_GRADS, u);
        for (size_t g = g0; g < g1; g++) {
            float want = 2 * mult * grad_of(g);
            errors += *store_at(s, NULL, q, u, g) != want;
            sumsq += (double)want * want;
        }
        /* the padding of the shard (past g1) stays zero in every slab */
        size_t n = unit_off[u + 1] - unit_off[u], kept = R > 1 ? (n + R - 1) / R : n;
        for (size_t i = g1 - g0; i < kept; i++)
            errors += q[i] != 0;
        float *p = store_unit_host(s, STORE_PARAMS, u);
        for (size_t i = g1 - g0; i < kept; i++)
            errors += p[i] != 0;
    }
    if (R > 1) MPI_Allreduce(MPI_IN_PLACE, &sumsq, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    errors += fabs(store_grad_sumsq(s) - sumsq) > 1e-9 * sumsq; /* summed in another order */
    for (int u = 0; u < nunits; u++) { /* a save's units, whole on every rank */
        const float *full = store_gather_unit(s, STORE_PARAMS, u);
        for (size_t g = unit_off[u]; g < unit_off[u + 1]; g++)
            errors += full[g - unit_off[u]] != param_of(g);
    }
    store_free(s);
    return errors;
}

int main(int argc, char **argv) {
    int rank, R;
    harness_init_mpi(&argc, &argv, &rank, &R); /* every verdict below is agreed; rank 0 says it */
    comm_ctx c;
    comm_init(&c, MPI_COMM_WORLD, 1);
    for (int sharded = 0; sharded <= (R > 1); sharded++)
        for (int off = 0; off <= !sharded; off++)
            for (int tied = 0; tied <= 1; tied++)
                for (int dt = 0; dt < MEM_DTYPE_COUNT; dt++) {
                    long e = check_case(&c, sharded, tied, (mem_dtype)dt, off), total = 0;
                    MPI_Allreduce(&e, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
                    CHECK(total == 0, "R=%d %s%s%s weights %s (%ld wrong)", R,
                          sharded ? "sharded" : "plain", off ? " offloaded" : "",
                          tied ? " tied" : "", mem_dtype_name((mem_dtype)dt), total);
                }
    comm_free(&c);
    int rc = harness_finish_mpi("test_store", MPI_COMM_WORLD);
    MPI_Finalize();
    return rc;
}
