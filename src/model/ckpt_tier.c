/* ckpt_tier.c — the layer inputs kept, in pinned memory, or in the offload file (ckpt_tier.h). */
#include "model/ckpt_tier.h"

#include "core/check.h"
#include "core/mem.h"
#include "core/trace.h"
#include "memory/offload.h"

#include <stdlib.h>

/* Buffers of the offload store: one being copied out or in, one read ahead, one being written. */
enum { TIER_STORE_BUFS = 3 };

struct ckpt_tier {
    const backend_ops *be;
    int L, n, h;         /* layers; moved (0 .. n-1); of those in pinned slots (0 .. h-1) */
    size_t bytes;        /* of one layer input */
    void *pair[2];       /* in the backend's space */
    void **own;          /* (L) kept layers' own buffers (n .. L-3), else NULL */
    void **host;         /* (h) pinned slots (host memory on the CPU backend) */
    int last_out[2];     /* the moved layer whose copy out from pair[k] is not waited for */
    offload_store *file; /* layers h .. n-1, slot l - h */
    int out_l, in_l;     /* a file layer whose store buffer waits for its copy (-1: none) */
    void *out_buf, *in_buf;
};

/* Tags of the copy queue: x_l out, x_l in. */
static int tag_out(int l) {
    return 2 * l;
}
static int tag_in(int l) {
    return 2 * l + 1;
}

static int in_pair(const ckpt_tier *t, int l) {
    return l < t->n || l >= t->L - 2;
}

ckpt_tier *ckpt_tier_init(const backend_ops *be, const ckpt_tier_spec *sp, char *err,
                          size_t errlen) {
    ckpt_tier *t = calloc(1, sizeof *t);
    UP_CHECK(t, "out of memory");
    int L = sp->L, keep = sp->keep > 2 ? sp->keep : 2;
    t->be = be;
    t->L = L;
    t->n = L > keep ? L - keep : 0;
    t->bytes = sp->slot_bytes;
    size_t fit = sp->host_limit ? (size_t)(sp->host_limit / (sp->slot_bytes ? sp->slot_bytes : 1))
                                : (size_t)t->n;
    t->h = fit < (size_t)t->n ? (int)fit : t->n;
    t->last_out[0] = t->last_out[1] = t->out_l = t->in_l = -1;
    mem_space hs = be->space == MEM_SPACE_HOST ? MEM_SPACE_HOST : MEM_SPACE_PINNED;
    t->own = calloc((size_t)L + 1, sizeof *t->own);
    t->host = calloc((size_t)t->h + 1, sizeof *t->host);
    UP_CHECK(t->own && t->host, "out of memory");
    for (int k = 0; k < 2 && k < L; k++)
        t->pair[k] = mem_alloc_in(be->space, MEM_CHECKPOINTS, t->bytes);
    for (int l = 0; l < L; l++)
        if (!in_pair(t, l)) t->own[l] = mem_alloc_in(be->space, MEM_CHECKPOINTS, t->bytes);
    for (int l = 0; l < t->h; l++)
        t->host[l] = mem_alloc_in(hs, MEM_CHECKPOINTS, t->bytes);
    int nfile = t->n - t->h;
    if (nfile > 0 && mem_planning()) { /* offload.c's resident buffers and its file */
        mem_alloc(MEM_CHECKPOINTS, offload_buffer_bytes(t->bytes, TIER_STORE_BUFS));
        mem_add_offloaded((long long)offload_store_bytes(t->bytes, nfile));
    } else if (nfile > 0) {
        t->file = offload_open(sp->dir, t->bytes, nfile, TIER_STORE_BUFS, err, errlen);
        if (!t->file) {
            ckpt_tier_free(t);
            return NULL;
        }
    }
    return t;
}

void ckpt_tier_free(ckpt_tier *t) {
    if (!t) return;
    if (t->be->sync) t->be->sync(); /* no copy in flight into what is freed */
    offload_close(t->file);
    for (int l = 0; l < t->h; l++)
        mem_free(t->host[l]);
    for (int l = 0; l < t->L; l++)
        mem_free(t->own[l]);
    mem_free(t->pair[0]);
    mem_free(t->pair[1]);
    free(t->own);
    free(t->host);
    free(t);
}

void *ckpt_tier_x(const ckpt_tier *t, int l) {
    return in_pair(t, l) ? t->pair[l % 2] : t->own[l];
}

/* The store buffer of a file layer's copy out, to the I/O thread once the copy is done. */
static void hand_out(ckpt_tier *t) {
    if (t->out_l < 0) return;
    t->be->copy_sync(tag_out(t->out_l));
    offload_write(t->file, t->out_l - t->h, t->out_buf);
    t->out_l = -1;
}

void ckpt_tier_forward(ckpt_tier *t, int l) {
    hand_out(t); /* layer l - 1's, copied while it ran */
    if (l >= t->L) return;
    int k = (l + 1) % 2;
    if (l + 1 < t->L && in_pair(t, l + 1) && t->last_out[k] >= 0) { /* layer l writes there */
        t->be->copy_wait(tag_out(t->last_out[k]));
        t->last_out[k] = -1;
    }
    if (l >= t->n) return;
    uint64_t tt = trace_begin();
    void *dst = l < t->h ? t->host[l] : (t->out_buf = offload_acquire(t->file));
    t->be->copy_out(dst, t->pair[l % 2], t->bytes, tag_out(l));
    if (l >= t->h) t->out_l = l;
    t->last_out[l % 2] = l;
    trace_end2(tt, "offload", "ckpt_out", "layer", l, "bytes", (int64_t)t->bytes);
}

void ckpt_tier_backward(ckpt_tier *t, int l) {
    if (l < t->n) t->be->copy_wait(tag_in(l)); /* x_l, copied in while layer l + 1 ran */
    if (t->in_l >= 0) {                        /* its store buffer, free once copied */
        t->be->copy_sync(tag_in(t->in_l));
        offload_release(t->file, t->in_buf);
        t->in_l = -1;
    }
    if (l < 1 || l - 1 >= t->n) return;
    int j = l - 1;
    uint64_t tt = trace_begin();
    const void *src;
    if (j < t->h) {
        src = t->host[j];
    } else {
        src = t->in_buf = offload_wait(t->file, j - t->h); /* read ahead at layer j + 2 */
        t->in_l = j;
        if (j - 1 >= t->h) offload_prefetch(t->file, j - 1 - t->h);
    }
    t->be->copy_in(t->pair[j % 2], src, t->bytes, tag_in(j));
    trace_end2(tt, "offload", "ckpt_in", "layer", j, "bytes", (int64_t)t->bytes);
}
