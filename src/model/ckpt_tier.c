/* ckpt_tier.c — the layer inputs kept, in pinned memory, or in the offload file (ckpt_tier.h). */
#include "model/ckpt_tier.h"

#include "core/check.h"
#include "core/mem.h"
#include "core/trace.h"
#include "memory/offload.h"

#include <stdlib.h>

/* Buffers of the offload store (one being filled or drained, one read ahead or being written),
 * and the piece of a layer input moved through one: the store's host memory is two pieces,
 * whatever the length (UPIPE_OFFLOAD_PIECE sets it, bytes rounded up to 4 KiB). */
enum { TIER_STORE_BUFS = 2 };
#define TIER_PIECE ((size_t)64 << 20)

struct ckpt_tier {
    const backend_ops *be;
    int L, n, h;  /* layers; moved (0 .. n-1); of those in pinned slots (0 .. h-1) */
    size_t bytes; /* of one layer input */
    size_t piece; /* bytes of a piece of a file layer's input; m pieces a layer */
    int m;
    void *pair[2];       /* in the backend's space */
    void **own;          /* (L) kept layers' own buffers (n .. L-3), else NULL */
    void **host;         /* (h) pinned slots (host memory on the CPU backend) */
    int last_out[2];     /* the moved layer whose copy out from pair[k] is not waited for */
    offload_store *file; /* layers h .. n-1, m pieces each: slot (l - h) * m + i */
    int out_l;           /* a file layer marked for its copy out at the next layer (-1: none) */
};

/* Tags of the copy queue (from 16: backend.h): x_l out, x_l in, the mark where x_l is
 * complete. */
static int tag_out(int l) {
    return 16 + 3 * l;
}
static int tag_in(int l) {
    return 16 + 3 * l + 1;
}
static int tag_mark(int l) {
    return 16 + 3 * l + 2;
}

static int in_pair(const ckpt_tier *t, int l) {
    return l < t->n || l >= t->L - 2;
}

static size_t piece_bytes(size_t slot) {
    const char *e = getenv("UPIPE_OFFLOAD_PIECE");
    size_t p = TIER_PIECE;
    if (e && *e) {
        char *end;
        unsigned long long v = strtoull(e, &end, 10);
        if (*end || v == 0) up_die("UPIPE_OFFLOAD_PIECE=%s: give a number of bytes", e);
        p = ((size_t)v + 4095) / 4096 * 4096;
    }
    return p < slot ? p : slot;
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
    t->piece = piece_bytes(t->bytes ? t->bytes : 1);
    t->m = (int)((t->bytes + t->piece - 1) / t->piece);
    size_t fit =
        sp->host_limit ? (size_t)(sp->host_limit / (t->bytes ? t->bytes : 1)) : (size_t)t->n;
    t->h = fit < (size_t)t->n ? (int)fit : t->n;
    t->last_out[0] = t->last_out[1] = t->out_l = -1;
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
    int nfile = (t->n - t->h) * t->m;
    if (nfile > 0 && mem_planning()) { /* offload.c's resident buffers and its file */
        mem_alloc_in(hs, MEM_CHECKPOINTS, offload_buffer_bytes(t->piece, TIER_STORE_BUFS));
        mem_add_offloaded((long long)offload_store_bytes(t->piece, nfile));
    } else if (nfile > 0) {
        t->file = offload_open_in(hs, sp->dir, t->piece, nfile, TIER_STORE_BUFS, err, errlen);
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

/* Piece i of a layer input: its offset and length, and its slot in the file. */
static size_t piece_len(const ckpt_tier *t, int i) {
    size_t off = (size_t)i * t->piece;
    return t->bytes - off < t->piece ? t->bytes - off : t->piece;
}
static int file_slot(const ckpt_tier *t, int l, int i) {
    return (l - t->h) * t->m + i;
}

/* The marked file layer's input to the file, piece by piece through the store's buffers: each
 * copied out after the mark (beside the layers the device still runs), then written by the I/O
 * thread. Before the layer that overwrites it is issued. */
static void write_out(ckpt_tier *t) {
    int l = t->out_l;
    if (l < 0) return;
    uint64_t tt = trace_begin();
    for (int i = 0; i < t->m; i++) {
        void *buf = offload_acquire(t->file);
        t->be->copy_out(buf, (char *)t->pair[l % 2] + (size_t)i * t->piece, piece_len(t, i),
                        tag_out(l), tag_mark(l));
        t->be->copy_sync(tag_out(l));
        offload_write(t->file, file_slot(t, l, i), buf);
    }
    t->out_l = -1;
    trace_end2(tt, "offload", "ckpt_out", "layer", l, "bytes", (int64_t)t->bytes);
}

/* A file layer's input back into its pair buffer, piece by piece, each read ahead by one (the
 * next piece, or the next file layer's first). */
static void read_in(ckpt_tier *t, int j) {
    uint64_t tt = trace_begin();
    for (int i = 0; i < t->m; i++) {
        void *buf = offload_wait(t->file, file_slot(t, j, i));
        if (i + 1 < t->m)
            offload_prefetch(t->file, file_slot(t, j, i + 1));
        else if (j - 1 >= t->h)
            offload_prefetch(t->file, file_slot(t, j - 1, 0));
        t->be->copy_in((char *)t->pair[j % 2] + (size_t)i * t->piece, buf, piece_len(t, i),
                       tag_in(j), -1);
        t->be->copy_sync(tag_in(j));
        offload_release(t->file, buf);
    }
    trace_end2(tt, "offload", "ckpt_in", "layer", j, "bytes", (int64_t)t->bytes);
}

void ckpt_tier_forward(ckpt_tier *t, int l) {
    write_out(t); /* layer l - 1's, marked when it started */
    if (l >= t->L) return;
    int k = (l + 1) % 2;
    if (l + 1 < t->L && in_pair(t, l + 1) && t->last_out[k] >= 0) { /* layer l writes there */
        t->be->copy_wait(tag_out(t->last_out[k]));
        t->last_out[k] = -1;
    }
    if (l >= t->n) return;
    if (l >= t->h) { /* to the file, at the next layer: x_l is complete here */
        t->be->copy_mark(tag_mark(l));
        t->out_l = l;
        return;
    }
    uint64_t tt = trace_begin();
    t->be->copy_out(t->host[l], t->pair[l % 2], t->bytes, tag_out(l), -1);
    t->last_out[l % 2] = l;
    trace_end2(tt, "offload", "ckpt_out", "layer", l, "bytes", (int64_t)t->bytes);
}

void ckpt_tier_backward(ckpt_tier *t, int l) {
    if (l < t->n) t->be->copy_wait(tag_in(l)); /* x_l, copied in while layer l + 1 ran */
    if (l < 1 || l - 1 >= t->n) return;
    int j = l - 1;
    if (j >= t->h) {
        read_in(t, j);
        return;
    }
    uint64_t tt = trace_begin();
    t->be->copy_in(t->pair[j % 2], t->host[j], t->bytes, tag_in(j), -1);
    trace_end2(tt, "offload", "ckpt_in", "layer", j, "bytes", (int64_t)t->bytes);
}
