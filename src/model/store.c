/* store.c — the parameter store (store.h): the slabs, the units' gather slots and gradient
 * buffers, the walk that prefetches, and the one place where the weights' element type decides
 * anything (the dtype seam below). The sharded mode's collectives are parallel/fsdp.h. */
#include "model/store.h"

#include "core/check.h"
#include "core/trace.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "parallel/fsdp.h"

#include <stdlib.h>
#include <string.h>

struct param_store {
    comm_ctx *comm;
    int R, rank; /* ranks sharing the units and this one's index; R == 1: unsharded */
    int nunits, tied_unit, bwd_first;
    mem_dtype wtype;
    size_t *unit_off;     /* (nunits + 1) offsets of the units in the full layout */
    size_t *shard_n;      /* (nunits) floats kept of each unit (padded shard; the unit at R == 1) */
    size_t *shard_off;    /* (nunits) offsets of the kept parts in the slabs */
    size_t nshard;        /* floats of a slab */
    float *slab[4];       /* params, grads, m, v (store_slab_kind), in the backend's space, or
                             offloaded in host memory (pinned on a device) */
    int gdev;             /* grads_on_device: offloaded but for the gradients */
    float *hgrad;         /* then: one unit's gradients in host memory for AdamW */
    float *hunit;         /* else: one unit of a slab in host memory for files (store_unit_host) */
    int hunit_k, hunit_u; /* what hunit holds (-1: nothing) */
    const backend_ops *be;
    mem_space space;
    /* offloaded optimizer (store_spec.offload): the slabs are on the host and the optimizer side
     * runs there (opt_be); the backend's space holds the slots, one unit's gradients and the
     * tied unit's */
    int offload;
    const backend_ops *opt_be; /* where the slabs are and the optimizer runs */
    float *dgrad[3]; /* two units' gradients in turn (the last one's on its way out while the
                        next is computed), and the tied unit's ([2]) */
    int dgrad_unit, dgrad_k;  /* the unit in backward and its buffer (-1: none) */
    int tied_loaded;          /* dgrad[2] holds the tied unit's gradients */
    int wpend[3];             /* slot k's copy in may still run: its first use waits */
    int unsettled;            /* a copy was issued since the host last waited for all of them */
    unsigned char *unit_zero; /* (nunits) the unit's gradients in the slab are zeros (none
                                 written back since store_zero_grads): nothing to load */
    void *stage[3];           /* bf16 weights: each slot's unit rounded on the host, sent */
    /* the weights the matmuls read when they are not the slab itself: slots alternate 0/1 by
     * unit, the tied unit keeps slot 2 (elements of wtype) */
    void *slot[3];
    int slot_unit[3], slot_pending[3];
    comm_req req[3];     /* the slots' gathers in flight */
    float *gradbuf;      /* (R * max shard_n) full gradients of the unit in backward (sharded) */
    float *tied_gradbuf; /* the tied unit's, accumulated over both its uses (sharded) */
    float *rs_tmp;       /* (max shard_n) reduce-scatter result before it is added */
    float *rs_recv;      /* (max shard_n) the blocks the reduce-scatter receives */
    size_t mpi_temp;     /* bytes MPI holds inside the all-reduce (unsharded; counted in comm) */
    /* staged exchanges (comm_ctx.staged: the slabs and slots in a device's space, MPI on host
     * memory): each slot's gather in host memory (sharded), the unit's full gradients and this
     * rank's shard of them for the reduce-scatter (sharded), one piece of the all-reduce
     * (unsharded); pinned on a device */
    void *hgather[3];
    float *hfull, *hshard, *hreduce;
    /* the walk of the current pass: its direction and the unit it expects next */
    int dir, next, walking;
};

/* ---- the dtype seam: the weights the matmuls read, a view of the fp32 master slab ----------- */

/* Whether the matmuls read the master itself (fp32): then an unsharded store keeps no copy. */
static int view_is_master(mem_dtype wt) {
    return wt == MEM_DTYPE_F32;
}

/* dst (n elements of wt) := src (fp32): a copy, or rounded to nearest even (bf16). */
static void view_fill(const param_store *s, void *dst, const float *src, size_t n) {
    UP_CHECK(s->wtype == MEM_DTYPE_F32 || s->wtype == MEM_DTYPE_BF16, "store: no view of type %d",
             (int)s->wtype);
    s->be->convert(s->wtype, dst, MEM_DTYPE_F32, src, n);
}

/* Slab k is in the backend's space (else offloaded to host memory: pinned on a device). */
static int in_space(const param_store *s, store_slab_kind k) {
    return !s->offload || (k == STORE_GRADS && s->gdev);
}

/* Slab k is host memory: the CPU backend's, or offloaded. */
static int on_host(const param_store *s, store_slab_kind k) {
    return !in_space(s, k) || s->space == MEM_SPACE_HOST;
}

/* Offloaded: every copy between the slabs and the device done, before the host reads or writes
 * a slab (files, the optimizer side). */
static void settle(param_store *s) {
    if (s->unsettled && s->be->sync) s->be->sync();
    s->unsettled = 0;
}

/* ---- init ----------------------------------------------------------------------------------- */

/* The offloaded store's buffers in the backend's space: the slots of two units and the tied
 * unit's (the weights as the matmuls read them, category params), the gradients of two units in
 * turn and of the tied unit (grads), and, for bf16 weights, a host stage per slot. */
static void init_offloaded(param_store *s, int grads, mem_space hs) {
    int nk = s->tied_unit >= 0 ? 3 : 2;
    size_t maxs = 0; /* the largest unit that takes slots 0 and 1 (the tied one has its own) */
    for (int u = 0; u < s->nunits; u++)
        if (u != s->tied_unit && s->shard_n[u] > maxs) maxs = s->shard_n[u];
    for (int k = 0; k < nk; k++) {
        size_t e = k == 2 ? s->shard_n[s->tied_unit] : maxs;
        size_t wb = mem_dtype_bytes(s->wtype, e);
        s->slot[k] = mem_alloc_in(s->space, MEM_PARAMS, wb);
        if (grads) s->dgrad[k] = mem_alloc_in(s->space, MEM_GRADS, sizeof(float) * e);
        if (!view_is_master(s->wtype)) s->stage[k] = mem_alloc_in(hs, MEM_PARAMS, wb);
    }
    s->dgrad_unit = -1;
    s->unit_zero = malloc((size_t)s->nunits);
    UP_CHECK(s->unit_zero, "out of memory");
    memset(s->unit_zero, 1, (size_t)s->nunits);
}

param_store *store_init(comm_ctx *comm, const store_spec *sp) {
    param_store *s = calloc(1, sizeof *s);
    UP_CHECK(s, "out of memory");
    int nunits = sp->nunits, R = sp->sharded ? comm->R : 1;
    s->comm = comm;
    s->R = R;
    s->rank = R > 1 ? comm->rank : 0;
    s->nunits = nunits;
    s->tied_unit = sp->tied_unit;
    s->bwd_first = sp->bwd_first;
    s->wtype = sp->wtype;
    s->be = backend_of(sp->tk);
    s->space = s->be->space;
    s->unit_off = calloc((size_t)nunits + 1, sizeof *s->unit_off);
    s->shard_n = calloc((size_t)nunits, sizeof *s->shard_n);
    s->shard_off = calloc((size_t)nunits, sizeof *s->shard_off);
    UP_CHECK(s->unit_off && s->shard_n && s->shard_off, "out of memory");
    memcpy(s->unit_off, sp->unit_off, sizeof *s->unit_off * ((size_t)nunits + 1));
    size_t maxs = 0;
    for (int u = 0; u < nunits; u++) {
        s->shard_n[u] = fsdp_shard_floats(s->unit_off[u + 1] - s->unit_off[u], R);
        s->shard_off[u] = s->nshard;
        s->nshard = up_add(s->nshard, s->shard_n[u]);
        maxs = s->shard_n[u] > maxs ? s->shard_n[u] : maxs;
    }
    for (int k = 0; k < 3; k++) {
        s->slot_unit[k] = -1;
        s->req[k] = COMM_REQ_NULL;
    }
    int grads = sp->grads, sharded = R > 1;
    UP_CHECK(!(sp->offload && sharded), "store: an offloaded optimizer is not built for FSDP");
    s->offload = sp->offload;
    s->gdev = sp->offload && sp->grads_on_device;
    s->opt_be = s->offload ? &backend_cpu : s->be;
    /* offloaded: the slabs are the host's, pinned where a device copies to and from them */
    mem_space hs = s->space == MEM_SPACE_HOST ? MEM_SPACE_HOST : MEM_SPACE_PINNED;
    static const mem_category cats[4] = {MEM_PARAMS, MEM_GRADS, MEM_OPTIMIZER, MEM_OPTIMIZER};
    size_t bytes = up_mul(s->nshard, sizeof(float));
    int any_dev = 0;
    for (int k = 0; k < (grads ? 4 : 1); k++) {
        s->slab[k] = mem_alloc_in(in_space(s, k) ? s->space : hs, cats[k], bytes);
        any_dev |= !on_host(s, k);
    }
    s->hunit_k = s->hunit_u = -1;
    /* a device's slabs pass through the host one unit at a time (files, init): the largest
     * unit's part, counted in workspace */
    if (any_dev) s->hunit = mem_alloc_f32(MEM_WORKSPACE, maxs);
    if (grads && s->gdev) s->hgrad = mem_alloc_in(hs, MEM_GRADS, up_mul(maxs, sizeof(float)));
    if (grads) {
        /* NCCL's all-reduce, not MPI's */
        int on_dev = comm->nccl_world && in_space(s, STORE_GRADS);
        s->mpi_temp = sharded || on_dev ? 0 : comm_reduce_temp_bytes(comm, s->nshard);
        mem_count(MEM_COMM, (long long)s->mpi_temp);
    }
    if (grads && !sharded && in_space(s, STORE_GRADS) && comm->staged && comm->R > 1) {
        size_t piece = s->nshard < COMM_REDUCE_CHUNK ? s->nshard : COMM_REDUCE_CHUNK;
        s->hreduce = mem_alloc_in(hs, MEM_COMM, up_mul(piece, sizeof(float)));
    }
    if (s->offload) {
        init_offloaded(s, grads && !s->gdev, hs);
        return s;
    }
    if (!sharded && view_is_master(s->wtype)) return s; /* the matmuls read the slab itself */
    /* unsharded bf16: the units are rounded into the slots as they are used, as the sharded ones
     * are gathered, so the bf16 copy of the weights is two units, not the whole model (params:
     * nothing is communicated) */
    mem_category slots = sharded ? MEM_COMM : MEM_PARAMS;
    size_t full = up_mul(maxs, (size_t)R);
    int staged = sharded && comm->staged;
    for (int k = 0; k < (s->tied_unit >= 0 ? 3 : 2); k++) {
        size_t e = k == 2 ? up_mul(s->shard_n[s->tied_unit], (size_t)R) : full;
        s->slot[k] = mem_alloc_in(s->space, slots, mem_dtype_bytes(s->wtype, e));
        if (staged) s->hgather[k] = mem_alloc_in(hs, MEM_COMM, mem_dtype_bytes(s->wtype, e));
        if (k == 2 && grads && sharded)
            s->tied_gradbuf = mem_alloc_in(s->space, MEM_COMM, up_mul(e, sizeof(float)));
    }
    int nccl = sharded && comm->nccl_world; /* the collectives on the device */
    if (grads && sharded) {
        s->gradbuf = mem_alloc_in(s->space, MEM_COMM, up_mul(full, sizeof(float)));
        s->rs_tmp =
            mem_alloc_in(nccl ? s->space : MEM_SPACE_HOST, MEM_COMM, up_mul(maxs, sizeof(float)));
        if (!nccl) s->rs_recv = mem_alloc_f32(MEM_COMM, maxs);
    }
    if (grads && (staged || nccl)) /* saves gather on the host, over MPI */
        s->hfull = mem_alloc_in(hs, MEM_COMM, up_mul(full, sizeof(float)));
    if (grads && staged) s->hshard = mem_alloc_in(hs, MEM_COMM, up_mul(maxs, sizeof(float)));
    return s;
}

void store_free(param_store *s) {
    if (!s) return;
    settle(s);
    void *bufs[] = {s->hunit,      s->hgrad,        s->slab[0],  s->slab[1],  s->slab[2],
                    s->slab[3],    s->slot[0],      s->slot[1],  s->slot[2],  s->gradbuf,
                    s->rs_tmp,     s->tied_gradbuf, s->rs_recv,  s->dgrad[0], s->dgrad[1],
                    s->dgrad[2],   s->stage[0],     s->stage[1], s->stage[2], s->hgather[0],
                    s->hgather[1], s->hgather[2],   s->hfull,    s->hshard,   s->hreduce};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        mem_free(bufs[i]);
    mem_count(MEM_COMM, -(long long)s->mpi_temp);
    free(s->unit_off);
    free(s->shard_n);
    free(s->shard_off);
    free(s->unit_zero);
    free(s);
}

/* ---- tables --------------------------------------------------------------------------------- */

int store_sharded(const param_store *s) {
    return s->R > 1;
}
size_t store_floats(const param_store *s) {
    return s->nshard;
}
const backend_ops *store_opt_backend(const param_store *s) {
    return s->opt_be;
}
const backend_ops *store_slab_backend(const param_store *s, store_slab_kind k) {
    return in_space(s, k) ? s->be : s->opt_be;
}
float *store_unit_host(param_store *s, store_slab_kind k, int u) {
    settle(s);
    if (!s->slab[k]) return NULL;
    float *at = s->slab[k] + s->shard_off[u];
    if (on_host(s, k)) return at;
    s->be->to_host(s->hunit, at, sizeof(float) * s->shard_n[u]);
    s->hunit_k = (int)k;
    s->hunit_u = u;
    return s->hunit;
}
void store_unit_put(param_store *s) {
    if (s->hunit_u < 0) return;
    int u = s->hunit_u;
    s->be->to_dev(s->slab[s->hunit_k] + s->shard_off[u], s->hunit, sizeof(float) * s->shard_n[u]);
}
float *store_dev_slab(param_store *s, store_slab_kind k) {
    settle(s);
    return s->slab[k];
}

void store_owned(const param_store *s, int u, size_t *g0, size_t *g1) {
    size_t a, b;
    fsdp_kept(s->unit_off[u + 1] - s->unit_off[u], s->R, s->rank, &a, &b);
    *g0 = s->unit_off[u] + a;
    *g1 = s->unit_off[u] + b;
}

float *store_at(const param_store *s, float *slab, float *unit, int u, size_t g) {
    size_t g0, g1;
    store_owned(s, u, &g0, &g1);
    UP_CHECK(g >= g0 && g <= g1, "offset %zu is not in this rank's shard of unit %d", g, u);
    return (unit ? unit : slab + s->shard_off[u]) + (g - g0);
}

/* ---- a pass: acquire, gradients, release ---------------------------------------------------- */

void store_begin(param_store *s, store_pass pass) {
    s->dir = pass == STORE_FORWARD ? 1 : -1;
    s->walking = 0;
    s->dgrad_unit = -1;
    if (pass == STORE_BACKWARD) return;
    s->tied_loaded = 0; /* the tied unit's gradients start from the slab's again */
    for (int k = 0; k < 3; k++) {
        UP_CHECK(!s->slot_pending[k], "a gather of unit %d is still in flight", s->slot_unit[k]);
        s->slot_unit[k] = -1;
    }
    if (s->tied_gradbuf) /* the LM head's part of the tied gradient comes first */
        s->be->zero_f32(s->tied_gradbuf, s->shard_n[s->tied_unit] * (size_t)s->R);
}

static int slot_of(const param_store *s, int u) {
    return u == s->tied_unit ? 2 : u % 2;
}

/* Offloaded, the copy queue's tags (0 .. 15: backend.h): slot k's weights in, dgrad[k]'s
 * gradients out and in. */
static int tag_w(int k) {
    return k;
}
static int tag_gout(int k) {
    return 3 + k;
}
static int tag_gin(int k) {
    return 6 + k;
}

/* Offloaded: unit u's weights from the host's masters into slot k (rounded on the host to the
 * weights' type by dtype.h's rule, the device's bits), on the copy queue while the unit before
 * computes; its first use waits (store_acquire). */
static void send_unit(param_store *s, int k, int u) {
    uint64_t tt = trace_begin();
    const float *src = s->slab[STORE_PARAMS] + s->shard_off[u];
    size_t n = s->shard_n[u], b = mem_dtype_bytes(s->wtype, n);
    if (!view_is_master(s->wtype)) {
        s->be->copy_sync(tag_w(k)); /* the stage's last copy has read it */
        backend_cpu.convert(s->wtype, s->stage[k], MEM_DTYPE_F32, src, n);
        src = s->stage[k];
    }
    s->be->copy_in(s->slot[k], src, b, tag_w(k), -1);
    s->wpend[k] = s->unsettled = 1;
    trace_end2(tt, "offload", "weights_in", "unit", u, "bytes", (int64_t)b);
}

/* Offloaded: dgrad[k] := unit u's gradients in the slab (where the backward accumulates over
 * the micro-batches as into the slab itself), after the buffer's last copy out. */
static float *load_grads(param_store *s, int k, int u) {
    size_t n = s->shard_n[u];
    float *buf = s->dgrad[k];
    if (s->unit_zero[u]) {
        s->be->copy_wait(tag_gout(k)); /* the buffer's last copy out */
        s->be->zero_f32(buf, n);
    } else { /* the copy queue runs in order: after the copy out */
        uint64_t tt = trace_begin();
        s->be->copy_in(buf, s->slab[STORE_GRADS] + s->shard_off[u], sizeof(float) * n, tag_gin(k),
                       -1);
        s->be->copy_wait(tag_gin(k));
        s->unsettled = 1;
        trace_end2(tt, "offload", "grads_in", "unit", u, "bytes", (int64_t)(sizeof(float) * n));
    }
    return buf;
}

/* Starts filling unit u's slot (no-op without slots, u out of range, or the slot holding u
 * already): unsharded, the unit's view now; sharded, this rank's shard into its own
 * place, then the in-place gather. */
static void prefetch(param_store *s, int u) {
    if (!s->slot[0] || u < 0 || u >= s->nunits) return;
    int k = slot_of(s, u);
    if (s->slot_unit[k] == u) return;
    UP_CHECK(!s->slot_pending[k], "gather slot %d busy with unit %d", k, s->slot_unit[k]);
    size_t n = s->shard_n[u];
    s->slot_unit[k] = u;
    if (s->offload) {
        send_unit(s, k, u);
        return;
    }
    size_t own_b = mem_dtype_bytes(s->wtype, (size_t)s->rank * n);
    void *own = (char *)s->slot[k] + own_b;
    view_fill(s, own, s->slab[STORE_PARAMS] + s->shard_off[u], n);
    if (s->R == 1) return;
    if (s->comm->nccl_world) { /* in place, on the stream: nothing to wait for */
        s->be->coll_allgather(s->comm->nccl_world, s->slot[k], mem_dtype_bytes(s->wtype, n),
                              s->rank);
        return;
    }
    void *full = s->slot[k];
    if (s->hgather[k]) { /* staged: the shard out, gathered in host memory (in at the wait) */
        full = s->hgather[k];
        s->be->to_host((char *)full + own_b, own, mem_dtype_bytes(s->wtype, n));
    }
    fsdp_gather_start(s->comm, full, n, s->wtype, &s->req[k]);
    s->slot_pending[k] = 1;
}

void *store_acquire(param_store *s, int u) {
    if (!s->slot[0]) return s->slab[STORE_PARAMS] + s->shard_off[u]; /* unsharded fp32 */
    prefetch(s, u);                    /* started already when the walk expected u */
    if (!s->walking || u == s->next) { /* on the walk: the next unit's gather starts now */
        s->walking = 1;
        s->next = u + s->dir;
        if (s->next >= (s->dir > 0 ? 0 : s->bwd_first)) prefetch(s, s->next);
    }
    int k = slot_of(s, u);
    if (s->wpend[k]) { /* offloaded: the weights sent in */
        s->be->copy_wait(tag_w(k));
        s->wpend[k] = 0;
    }
    if (s->slot_pending[k]) {
        fsdp_gather_wait(s->comm, &s->req[k], u, s->shard_n[u], s->wtype);
        s->slot_pending[k] = 0;
        if (s->hgather[k])
            s->be->to_dev(s->slot[k], s->hgather[k],
                          mem_dtype_bytes(s->wtype, s->shard_n[u] * (size_t)s->R));
    }
    return s->slot[k];
}

float *store_grads(param_store *s, int u) {
    if (s->offload && !s->gdev && u == s->tied_unit) {
        if (!s->tied_loaded) load_grads(s, 2, u);
        s->tied_loaded = 1;
        return s->dgrad[2];
    }
    if (s->offload && !s->gdev) {
        UP_CHECK(s->dgrad_unit < 0 || s->dgrad_unit == u,
                 "store: unit %d's gradients asked for before unit %d's were released", u,
                 s->dgrad_unit);
        if (s->dgrad_unit != u) { /* the other buffer: the last unit's may still go out */
            s->dgrad_k ^= 1;
            load_grads(s, s->dgrad_k, u);
        }
        s->dgrad_unit = u;
        return s->dgrad[s->dgrad_k];
    }
    if (s->R == 1) return s->slab[STORE_GRADS] + s->shard_off[u];
    if (u == s->tied_unit) return s->tied_gradbuf; /* holds the LM head's part already */
    s->be->zero_f32(s->gradbuf, s->shard_n[u] * (size_t)s->R);
    return s->gradbuf;
}

void store_release(param_store *s, int u) {
    if (s->offload && !s->gdev) { /* the unit's gradients back into the slab */
        int tied = u == s->tied_unit;
        UP_CHECK(tied ? s->tied_loaded : s->dgrad_unit == u,
                 "store: unit %d released without its gradients", u);
        int k = tied ? 2 : s->dgrad_k;
        uint64_t tt = trace_begin();
        s->be->copy_out(s->slab[STORE_GRADS] + s->shard_off[u], s->dgrad[k],
                        sizeof(float) * s->shard_n[u], tag_gout(k), -1);
        s->unsettled = 1;
        trace_end2(tt, "offload", "grads_out", "unit", u, "bytes",
                   (int64_t)(sizeof(float) * s->shard_n[u]));
        if (tied)
            s->tied_loaded = 0;
        else
            s->dgrad_unit = -1;
        s->unit_zero[u] = 0;
        return;
    }
    if (s->R == 1) return;
    const float *g = u == s->tied_unit ? s->tied_gradbuf : s->gradbuf;
    size_t n = s->shard_n[u];
    float *shard = s->slab[STORE_GRADS] + s->shard_off[u];
    if (s->comm->nccl_world) { /* on the device: NCCL's sum, then added to the shard */
        uint64_t tt = trace_begin();
        typed_ctx f32 = {.dt = MEM_DTYPE_F32, .be = s->be};
        s->be->coll_reduce_scatter(s->comm->nccl_world, g, s->rs_tmp, n);
        s->be->add(&f32, shard, s->rs_tmp, n);
        trace_end2(tt, "fsdp", "fsdp_reduce_scatter", "unit", u, "bytes",
                   (int64_t)(sizeof(float) * n * (size_t)(s->R - 1)));
        return;
    }
    if (!s->hshard) { /* not staged */
        fsdp_reduce_add(s->comm, g, s->rs_tmp, s->rs_recv, shard, n, u);
        return;
    }
    /* staged: the unit's gradients and this rank's shard out, the host's reduce-scatter and
     * sum (the same bits), the shard back */
    s->be->to_host(s->hfull, g, sizeof(float) * n * (size_t)s->R);
    s->be->to_host(s->hshard, shard, sizeof(float) * n);
    fsdp_reduce_add(s->comm, s->hfull, s->rs_tmp, s->rs_recv, s->hshard, n, u);
    s->be->to_dev(shard, s->hshard, sizeof(float) * n);
}

const float *store_gather_unit(param_store *s, store_slab_kind k, int u) {
    const float *own = store_unit_host(s, k, u);
    if (s->R == 1) return own;
    size_t n = s->shard_n[u];
    float *full = s->hfull ? s->hfull : s->gradbuf; /* host memory, free outside a backward */
    UP_CHECK(full, "store: a sharded save needs the gradient buffers (a training store)");
    memcpy(full + (size_t)s->rank * n, own, sizeof(float) * n);
    fsdp_gather_now(s->comm, full, n, MEM_DTYPE_F32);
    return full;
}

/* ---- the optimizer side --------------------------------------------------------------------- */

const float *store_opt_grads(param_store *s, int u) {
    settle(s);
    const float *at = s->slab[STORE_GRADS] + s->shard_off[u];
    if (!s->gdev) return at;
    /* from the backend's space (the CPU's too: the same path, memcpy) */
    s->be->to_host(s->hgrad, at, sizeof(float) * s->shard_n[u]);
    return s->hgrad;
}

void store_zero_grads(param_store *s) {
    settle(s);
    store_slab_backend(s, STORE_GRADS)->zero_f32(s->slab[STORE_GRADS], s->nshard);
    if (s->unit_zero) memset(s->unit_zero, 1, (size_t)s->nunits);
}

void store_reduce_grads(param_store *s) {
    settle(s);
    if (s->R > 1) return;
    if (s->comm->nccl_world && in_space(s, STORE_GRADS)) { /* NCCL's order (one rank: as is) */
        s->be->coll_allreduce(s->comm->nccl_world, s->slab[STORE_GRADS], s->nshard);
        return;
    }
    if (!s->hreduce) {
        comm_reduce_grads(s->comm, s->slab[STORE_GRADS], s->nshard);
        return;
    }
    /* staged: piece by piece through host memory (each element's sum is the same whatever the
     * piece: comm.h) */
    float *g = s->slab[STORE_GRADS];
    for (size_t i = 0; i < s->nshard; i += COMM_REDUCE_CHUNK) {
        size_t m = s->nshard - i < COMM_REDUCE_CHUNK ? s->nshard - i : COMM_REDUCE_CHUNK;
        s->be->to_host(s->hreduce, g + i, sizeof(float) * m);
        comm_reduce_grads(s->comm, s->hreduce, m);
        s->be->to_dev(g + i, s->hreduce, sizeof(float) * m);
    }
}

double store_grad_sumsq(param_store *s) {
    settle(s);
    double sq = store_slab_backend(s, STORE_GRADS)->sum_squares(s->slab[STORE_GRADS], s->nshard);
    if (s->R > 1) comm_sum_double(s->comm, &sq); /* shards: the norm of the whole gradient */
    return sq;
}
