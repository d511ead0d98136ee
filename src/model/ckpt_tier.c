/* ckpt_tier.c — layer inputs in host memory, moved by the backend's copy queue (ckpt_tier.h). */
#include "model/ckpt_tier.h"

#include "core/check.h"
#include "core/mem.h"
#include "core/trace.h"

#include <stdlib.h>

struct ckpt_tier {
    const backend_ops *be;
    int L, n;      /* layers; host slots (layers 0 .. n-1) */
    size_t bytes;  /* of one layer input */
    void *pair[2]; /* in the backend's space */
    void **host;   /* (n) pinned host slots (host memory on the CPU backend) */
};

/* Tags of the copy queue: x_l out, x_l in. */
static int tag_out(int l) {
    return 2 * l;
}
static int tag_in(int l) {
    return 2 * l + 1;
}

int ckpt_tier_slots(int L) {
    return L > 2 ? L - 2 : 0;
}

ckpt_tier *ckpt_tier_init(const backend_ops *be, int L, size_t slot_bytes,
                          unsigned long long host_limit) {
    size_t need = up_mul((size_t)ckpt_tier_slots(L), slot_bytes);
    if (host_limit && need > host_limit) {
        char a[32], b[32];
        up_die_all("--offload: the layer inputs take %s of host memory but --offload-host-limit is "
                   "%s, and the offload file past the limit is not built for this yet: raise "
                   "--offload-host-limit%s",
                   up_fmt_bytes(a, sizeof a, (double)need),
                   up_fmt_bytes(b, sizeof b, (double)host_limit),
                   be->space == MEM_SPACE_HOST ? ", or drop it (all of them to the file)" : "");
    }
    ckpt_tier *t = calloc(1, sizeof *t);
    UP_CHECK(t, "out of memory");
    t->be = be;
    t->L = L;
    t->n = ckpt_tier_slots(L);
    t->bytes = slot_bytes;
    mem_space hs = be->space == MEM_SPACE_HOST ? MEM_SPACE_HOST : MEM_SPACE_PINNED;
    for (int k = 0; k < 2 && k < L; k++)
        t->pair[k] = mem_alloc_in(be->space, MEM_CHECKPOINTS, slot_bytes);
    t->host = calloc((size_t)(t->n ? t->n : 1), sizeof *t->host);
    UP_CHECK(t->host, "out of memory");
    for (int l = 0; l < t->n; l++)
        t->host[l] = mem_alloc_in(hs, MEM_CHECKPOINTS, slot_bytes);
    return t;
}

void ckpt_tier_free(ckpt_tier *t) {
    if (!t) return;
    if (t->be->sync) t->be->sync(); /* no copy in flight into what is freed */
    for (int l = 0; l < t->n; l++)
        mem_free(t->host[l]);
    mem_free(t->pair[0]);
    mem_free(t->pair[1]);
    free(t->host);
    free(t);
}

void *ckpt_tier_x(const ckpt_tier *t, int l) {
    return t->pair[l % 2];
}

void ckpt_tier_forward(ckpt_tier *t, int l) {
    if (l >= 1 && l - 1 < t->n) t->be->copy_wait(tag_out(l - 1)); /* its buffer is next */
    if (l >= t->n) return;
    uint64_t tt = trace_begin();
    t->be->copy_out(t->host[l], t->pair[l % 2], t->bytes, tag_out(l));
    trace_end2(tt, "offload", "ckpt_out", "layer", l, "bytes", (int64_t)t->bytes);
}

void ckpt_tier_backward(ckpt_tier *t, int l) {
    if (l < t->n) t->be->copy_wait(tag_in(l));
    if (l < 1 || l - 1 >= t->n) return;
    uint64_t tt = trace_begin();
    t->be->copy_in(t->pair[(l - 1) % 2], t->host[l - 1], t->bytes, tag_in(l - 1));
    trace_end2(tt, "offload", "ckpt_in", "layer", l - 1, "bytes", (int64_t)t->bytes);
}
