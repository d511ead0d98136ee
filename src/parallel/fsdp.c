/* fsdp.c — FSDP / ZeRO-3 units and shards (DESIGN.md §4.5). */
#include "parallel/fsdp.h"

#include "core/check.h"
#include "core/mem.h"
#include "core/trace.h"
#include "kernels/bf16.h"

#include <stdlib.h>
#include <string.h>

void fsdp_init(fsdp_state *f, comm_ctx *comm, const size_t *unit_off, int nunits, int R,
               int tied_unit, int grads, mem_dtype wtype) {
    memset(f, 0, sizeof *f);
    UP_CHECK(R == 1 || R == comm->R, "fsdp: %d ranks, the world has %d", R, comm->R);
    f->comm = comm;
    f->R = R;
    f->rank = R > 1 ? comm->rank : 0;
    f->nunits = nunits;
    f->tied_unit = tied_unit;
    f->wtype = wtype;
    f->unit_off = calloc((size_t)nunits + 1, sizeof *f->unit_off);
    f->shard_n = calloc((size_t)nunits, sizeof *f->shard_n);
    f->shard_off = calloc((size_t)nunits, sizeof *f->shard_off);
    UP_CHECK(f->unit_off && f->shard_n && f->shard_off, "out of memory");
    memcpy(f->unit_off, unit_off, sizeof *unit_off * ((size_t)nunits + 1));
    size_t maxs = 0;
    for (int u = 0; u < nunits; u++) {
        size_t n = unit_off[u + 1] - unit_off[u];
        f->shard_n[u] = (n + (size_t)R - 1) / (size_t)R;
        f->shard_off[u] = f->nshard;
        f->nshard = up_add(f->nshard, f->shard_n[u]);
        maxs = f->shard_n[u] > maxs ? f->shard_n[u] : maxs;
    }
    for (int k = 0; k < 3; k++) {
        f->gbuf_unit[k] = -1;
        f->req[k] = MPI_REQUEST_NULL;
    }
    f->params = mem_alloc_f32(MEM_PARAMS, f->nshard);
    if (grads) {
        f->grads = mem_alloc_f32(MEM_GRADS, f->nshard);
        f->m = mem_alloc_f32(MEM_OPTIMIZER, f->nshard);
        f->v = mem_alloc_f32(MEM_OPTIMIZER, f->nshard);
        f->mpi_temp = R == 1 ? comm_reduce_temp_bytes(comm, f->nshard)
                             : comm_reduce_scatter_temp_bytes(comm, maxs);
        mem_count(MEM_COMM, (long long)f->mpi_temp);
    }
    if (R == 1 && wtype == MEM_DTYPE_F32) return; /* the matmuls read the slab itself */
    /* unsharded bf16: the units are rounded into the slots as they are used, as the sharded ones
     * are gathered, so the bf16 copy of the weights is two units, not the whole model (params:
     * nothing is communicated) */
    mem_category slots = R == 1 ? MEM_PARAMS : MEM_COMM;
    size_t full = up_mul(maxs, (size_t)R);
    f->gbuf[0] = mem_alloc_n(slots, wtype, full);
    f->gbuf[1] = mem_alloc_n(slots, wtype, full);
    if (grads && R > 1) {
        f->gradbuf = mem_alloc_f32(MEM_COMM, full);
        f->rs_tmp = mem_alloc_f32(MEM_COMM, maxs);
    }
    if (tied_unit >= 0) {
        size_t e = up_mul(f->shard_n[tied_unit], (size_t)R);
        f->gbuf[2] = mem_alloc_n(slots, wtype, e);
        if (grads && R > 1) f->tied_gradbuf = mem_alloc_f32(MEM_COMM, e);
    }
}

void fsdp_free(fsdp_state *f) {
    float *bufs[] = {f->params, f->grads,   f->m,      f->v,           f->gbuf[0],
                     f->gbuf[1], f->gbuf[2], f->gradbuf, f->tied_gradbuf, f->rs_tmp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(bufs[i]);
    mem_count(MEM_COMM, -(long long)f->mpi_temp);
    free(f->unit_off);
    free(f->shard_n);
    free(f->shard_off);
    memset(f, 0, sizeof *f);
}

void fsdp_owned(const fsdp_state *f, int u, size_t *g0, size_t *g1) {
    size_t n = f->unit_off[u + 1] - f->unit_off[u], s = f->shard_n[u];
    size_t a = (size_t)f->rank * s, b = a + s;
    *g0 = f->unit_off[u] + (a < n ? a : n);
    *g1 = f->unit_off[u] + (b < n ? b : n);
}

float *fsdp_shard_at(const fsdp_state *f, float *slab, int u, size_t g) {
    size_t g0, g1;
    fsdp_owned(f, u, &g0, &g1);
    UP_CHECK(g >= g0 && g <= g1, "offset %zu is not in this rank's shard of unit %d", g, u);
    return slab + f->shard_off[u] + (g - g0);
}

/* dst (bf16) := src (fp32) rounded, n elements, in threaded pieces. */
static void round_into(uint16_t *dst, const float *src, size_t n) {
    enum { PIECE = 1 << 16 };
    long pieces = (long)((n + PIECE - 1) / PIECE);
    bf16_path_current(); /* chosen outside the parallel region */
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (long k = 0; k < pieces; k++) {
        size_t i = (size_t)k * PIECE, m = n - i < PIECE ? n - i : PIECE;
        bf16_from_f32(src + i, dst + i, m);
    }
}

void fsdp_begin_forward(fsdp_state *f) {
    for (int k = 0; k < 3; k++) {
        UP_CHECK(!f->gbuf_pending[k], "a gather of unit %d is still in flight", f->gbuf_unit[k]);
        f->gbuf_unit[k] = -1;
    }
    if (f->tied_gradbuf) /* the LM head's part of the tied gradient comes first */
        memset(f->tied_gradbuf, 0, sizeof(float) * f->shard_n[f->tied_unit] * (size_t)f->R);
}

/* Bytes this rank sends in a gather or reduce-scatter of unit u (the spans' argument). */
static int64_t fsdp_unit_bytes(const fsdp_state *f, int u, mem_dtype dt) {
    return (int64_t)mem_dtype_bytes(dt, f->shard_n[u]) * (f->R - 1);
}

static int slot_of(const fsdp_state *f, int u) { return u == f->tied_unit ? 2 : u % 2; }

void fsdp_prefetch(fsdp_state *f, int u) {
    if (!f->gbuf[0] || u < 0 || u >= f->nunits) return;
    int k = slot_of(f, u);
    if (f->gbuf_unit[k] == u) return;
    if (f->R == 1) { /* unsharded bf16: the unit rounded into its slot, now */
        round_into(f->gbuf[k], f->params + f->shard_off[u], f->shard_n[u]);
        f->gbuf_unit[k] = u;
        return;
    }
    UP_CHECK(!f->gbuf_pending[k], "gather slot %d busy with unit %d", k, f->gbuf_unit[k]);
    if (f->wtype == MEM_DTYPE_F32) {
        comm_allgather_start(f->comm, f->params + f->shard_off[u], f->gbuf[k], f->shard_n[u],
                             MEM_DTYPE_F32, &f->req[k]);
    } else { /* the shard rounded into its own place in the slot, then gathered in place */
        uint16_t *own = (uint16_t *)f->gbuf[k] + (size_t)f->rank * f->shard_n[u];
        round_into(own, f->params + f->shard_off[u], f->shard_n[u]);
        comm_allgather_start(f->comm, NULL, f->gbuf[k], f->shard_n[u], f->wtype, &f->req[k]);
    }
    f->gbuf_unit[k] = u;
    f->gbuf_pending[k] = 1;
}

void *fsdp_gather(fsdp_state *f, int u) {
    if (!f->gbuf[0]) return f->params + f->shard_off[u]; /* unsharded fp32 */
    int k = slot_of(f, u);
    fsdp_prefetch(f, u);
    if (f->gbuf_pending[k]) { /* the span: the wait for a gather started by a prefetch */
        uint64_t tt = trace_begin();
        comm_wait(f->comm, &f->req[k], COMM_FSDP_GATHER);
        trace_end2(tt, "fsdp", "fsdp_gather", "unit", u, "bytes",
                   fsdp_unit_bytes(f, u, f->wtype));
        f->gbuf_pending[k] = 0;
    }
    return f->gbuf[k];
}

float *fsdp_grads(fsdp_state *f, int u) {
    if (f->R == 1) return f->grads + f->shard_off[u];
    if (u == f->tied_unit) return f->tied_gradbuf; /* holds the LM head's part already */
    memset(f->gradbuf, 0, sizeof(float) * f->shard_n[u] * (size_t)f->R);
    return f->gradbuf;
}

void fsdp_reduce(fsdp_state *f, int u) {
    if (f->R == 1) return;
    const float *g = u == f->tied_unit ? f->tied_gradbuf : f->gradbuf;
    size_t n = f->shard_n[u];
    uint64_t tt = trace_begin();
    /* the reduce-scatter overwrites; the shard accumulates over micro-batches */
    comm_reduce_scatter(f->comm, g, f->rs_tmp, n);
    float *dst = f->grads + f->shard_off[u];
    for (size_t i = 0; i < n; i++) dst[i] += f->rs_tmp[i];
    trace_end2(tt, "fsdp", "fsdp_reduce_scatter", "unit", u, "bytes",
               fsdp_unit_bytes(f, u, MEM_DTYPE_F32));
}

const float *fsdp_gather_slab(fsdp_state *f, const float *slab, int u) {
    if (f->R == 1) return slab + f->shard_off[u];
    MPI_Request req;
    comm_allgather_start(f->comm, slab + f->shard_off[u], f->gradbuf, f->shard_n[u],
                         MEM_DTYPE_F32, &req);
    comm_wait(f->comm, &req, COMM_FSDP_GATHER);
    return f->gradbuf;
}
