/* cp_attention.c — context-parallel attention (DESIGN.md §2, §3): stages of U query heads over
 * chunks of Kc KV heads, each exchanged between sequence and head layout around the flash
 * attention kernel. */
#include "parallel/cp_attention.h"

#include "core/check.h"
#include "core/clock.h"
#include "core/mem.h"
#include "core/trace.h"
#include "kernels/kernels.h"
#include "parallel/heads.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cp_attention {
    cp_attention_shape s;
    int Tg;               /* T: tokens of the whole sequence */
    int Kc, mult;         /* KV heads per chunk, query heads per KV head and stage */
    int U_loc, Kc_loc;    /* per rank in head layout */
    int stages_per_chunk; /* G / mult */
    int chunks;           /* NKV / Kc */
    int stages;           /* chunks * stages_per_chunk = NH / U */
    int model_order;      /* U == NH: the one stage is every head in model order */
    int overlap;          /* the pipe: the next stage's inputs, and the previous stage's
                             outputs (o; dq, dk, dv), are in flight during attention */
    int nblk, bw;         /* the stage's q rows as nblk blocks of bw floats (one under keep_qkv) */
    /* stage tensors in the run's type (s.dtype); the kernels' workspace ws fp32 */
    void *qs, *ks, *vs; /* (T_loc, U*HS), (T_loc, Kc*HS) x2: projections, later gradients */
    /* Head-layout inputs, NULL when not owned; set [1] exists under the pipe only: q, o, do
     * alternate stage by stage, k, v chunk by chunk (when there is more than one chunk). */
    void *qh[2], *kh[2], *vh[2]; /* (T, U_loc, HS), (T, Kc_loc, HS) x2 */
    void *oh[2], *doh[2];        /* (T, U_loc, HS): NULL when they alias a sequence-layout one */
    void *dqh;                   /* (T, U_loc, HS): NULL when it aliases qs */
    void *dts;                   /* (T_loc, U*HS) the stage's d loss / d att, sequence layout */
    void *dqh1;                  /* the pipe: dq of every other stage (dq in flight back) */
    void *dkh[2], *dvh[2];       /* (T, Kc_loc, HS): accumulated over the stages of a chunk;
                                    [1] under the pipe with several chunks (dk, dv in flight) */
    void *dkh_s, *dvh_s;         /* (T, Kc_loc, HS): one stage's, when a chunk serves several */
    void *pack;                  /* all-to-all packing (and q's in flight); host memory when
                                    the exchanges are staged (comm_ctx.staged) */
    void *hx;  /* staged: the exchange's send and receive in host memory (the pack's size) */
    float *ws; /* flash attention workspace (fp32) */
    void *pack_k, *pack_v, *pack_o, *pack_do; /* the pipe: packs of the other inputs in flight */
    void *back_q, *back_k, *back_v;           /* the pipe: where o or dq, and dk, dv arrive back */
    /* the pipe: the next stage's exchanges (k, v, o, do, q) and the previous stage's back (o;
     * dq, dk, dv) */
    comm_exchange inflight[8];
    int ninflight;
    double kernel_s; /* seconds inside the attention kernels since the last reset */
};

double cp_attention_seconds(cp_attention *a, int reset) {
    double s = a->kernel_s;
    if (reset) a->kernel_s = 0;
    return s;
}

int cp_attention_check(int NH, int NKV, int P, int U, char *err, size_t errlen) {
    char sug[128] = "";
    for (int u = 1; u <= NH; u++) {
        if (NH % u || u % P || (u <= NKV ? NKV % u : u % NKV)) continue;
        size_t n = strlen(sug);
        snprintf(sug + n, sizeof sug - n, "%s%d", n ? ", " : "", u);
    }
    if (U < 1 || NH % U)
        return up_errf(err, errlen, NULL,
                       "--upipe-heads %d does not divide num_attention_heads "
                       "(%d): use one of %s",
                       U, NH, sug);
    if (U % P)
        return up_errf(err, errlen, NULL,
                       "--upipe-heads %d is not a multiple of the "
                       "context-parallel degree (%d): every rank needs U/P heads per stage; use "
                       "one of %s",
                       U, P, sug);
    if (U <= NKV ? NKV % U : U % NKV)
        return up_errf(err, errlen, NULL,
                       "--upipe-heads %d and num_key_value_heads (%d) must "
                       "divide one another for the GQA schedule: use one of %s",
                       U, NKV, sug);
    return 0;
}

int cp_attention_kv_heads_per_rank(int NKV, int P) {
    return NKV >= P ? NKV / P : 1;
}

void cp_attention_saved_floats(const cp_attention_shape *s, size_t *att, size_t *lse, size_t *q,
                               size_t *kv) {
    size_t Tg = (size_t)s->T_loc * (size_t)s->P, HS = (size_t)s->HS;
    *att = up_mul3((size_t)s->T_loc, (size_t)s->NH, HS);
    *lse = up_mul(Tg, (size_t)(s->NH / s->P));
    *q = s->keep_qkv ? up_mul3(Tg, (size_t)(s->NH / s->P), HS) : 0;
    *kv = s->keep_qkv ? up_mul3(Tg, (size_t)cp_attention_kv_heads_per_rank(s->NKV, s->P), HS) : 0;
}

/* n elements of the stage tensors' type (DESIGN.md §5.1). */
static void *stage_buffer(const cp_attention_shape *s, size_t n) {
    return mem_alloc_in(backend_of(s->tk)->space, MEM_ATTENTION, mem_dtype_bytes(s->dtype, n));
}

/* n elements of the stage type in host memory, pinned on a device: what a staged exchange
 * (comm_ctx.staged) packs and moves (category comm: they exist for the exchange alone). */
static void *host_buffer(const cp_attention_shape *s, size_t n) {
    mem_space sp = backend_of(s->tk)->space == MEM_SPACE_HOST ? MEM_SPACE_HOST : MEM_SPACE_PINNED;
    return mem_alloc_in(sp, MEM_COMM, mem_dtype_bytes(s->dtype, n));
}

cp_attention *cp_attention_init(const cp_attention_shape *s) {
    UP_CHECK(s->NH % s->U == 0 && (!s->keep_qkv || s->U == s->NH),
             "cp_attention: U=%d with NH=%d (keep_qkv %d)", s->U, s->NH, s->keep_qkv);
    cp_attention *a = calloc(1, sizeof *a);
    UP_CHECK(a, "out of memory");
    a->s = *s;
    a->Tg = s->T_loc * s->P;
    a->Kc = s->U < s->NKV ? s->U : s->NKV;
    a->mult = s->U / a->Kc;
    a->stages_per_chunk = (s->NH / s->NKV) / a->mult;
    a->chunks = s->NKV / a->Kc;
    a->U_loc = s->U / s->P;
    a->Kc_loc = cp_attention_kv_heads_per_rank(a->Kc, s->P);
    a->model_order = s->U == s->NH;
    a->stages = a->chunks * a->stages_per_chunk;
    a->nblk = s->keep_qkv ? 1 : a->Kc;
    a->bw = s->keep_qkv ? s->NH * s->HS : a->mult * s->HS;
    int P1 = s->P == 1, keep = s->keep_qkv, bwd = !s->forward_only;
    /* the pipe needs exchanges (P > 1), stages that recompute (no keep_qkv) and a next stage */
    a->overlap = s->overlap && !P1 && !keep && a->stages > 1;
    UP_CHECK(!(a->overlap && (s->comm->staged || s->comm->nccl_cp)),
             "cp_attention: the pipe with staged or NCCL exchanges");
    int kv2 = a->overlap && a->chunks > 1; /* k, v exchanged again during a stage */
    size_t T = (size_t)s->T_loc, Tg = (size_t)a->Tg, HS = (size_t)s->HS;
    size_t qh = up_mul3(Tg, (size_t)a->U_loc, HS), kvh = up_mul3(Tg, (size_t)a->Kc_loc, HS);
    /* Which buffers exist. With P == 1 head layout is sequence layout, so the exchanged copies
     * are the projections themselves; under keep_qkv they are the saved tensors (and qs, ks, vs
     * serve the backward alone). */
    if (bwd || !(P1 && keep)) {
        a->qs = stage_buffer(s, up_mul3(T, (size_t)s->U, HS));
        a->ks = stage_buffer(s, up_mul3(T, (size_t)a->Kc, HS));
        a->vs = stage_buffer(s, up_mul3(T, (size_t)a->Kc, HS));
    }
    for (int b = 0; b <= a->overlap; b++) {
        if (!P1 && !keep) {
            a->qh[b] = stage_buffer(s, qh);
            if (b == 0 || kv2) {
                a->kh[b] = stage_buffer(s, kvh);
                a->vh[b] = stage_buffer(s, kvh);
            }
        }
        if (!(P1 && a->model_order)) /* else o is read in place */
            a->oh[b] = stage_buffer(s, qh);
        if (bwd && !P1) a->doh[b] = stage_buffer(s, qh); /* P == 1: do is dts itself */
    }
    if (bwd) a->dts = stage_buffer(s, up_mul3(T, (size_t)s->U, HS));
    if (bwd && !(P1 && keep)) { /* else dq, dk, dv land in qs, ks, vs */
        a->dqh = stage_buffer(s, qh);
        a->dkh[0] = stage_buffer(s, kvh);
        a->dvh[0] = stage_buffer(s, kvh);
    }
    if (bwd && a->overlap) {
        a->dqh1 = stage_buffer(s, qh);
        if (kv2) {
            a->dkh[1] = stage_buffer(s, kvh);
            a->dvh[1] = stage_buffer(s, kvh);
        }
    }
    if (bwd && a->stages_per_chunk > 1) {
        a->dkh_s = stage_buffer(s, kvh);
        a->dvh_s = stage_buffer(s, kvh);
    }
    if (!P1) {
        size_t pq = heads_pack_floats(s->comm, s->T_loc, s->U, s->HS);
        size_t pkv = heads_pack_floats(s->comm, s->T_loc, a->Kc, s->HS);
        size_t pn = pq > pkv ? pq : pkv;
        if (s->comm->staged) { /* the pack and both ends of the exchange in host memory */
            a->pack = host_buffer(s, pn);
            a->hx = host_buffer(s, pn);
        } else
            a->pack = stage_buffer(s, pn);
        if (kv2) {
            a->pack_k = stage_buffer(s, pkv);
            a->pack_v = stage_buffer(s, pkv);
        }
        if (a->overlap && bwd) {
            a->pack_o = stage_buffer(s, pq);
            a->pack_do = stage_buffer(s, pq);
            a->back_k = stage_buffer(s, pkv);
            a->back_v = stage_buffer(s, pkv);
        }
        if (a->overlap) a->back_q = stage_buffer(s, pq);
    }
    /* scores, probabilities, running statistics and accumulators: fp32 whatever the dtype */
    size_t wsn =
        backend_of(s->tk)->attention_workspace_floats(s->dtype, a->Tg, a->U_loc, a->Kc_loc, s->HS);
    a->ws = wsn ? mem_alloc_f32(MEM_ATTENTION, wsn) : NULL; /* the CPU backend's only */
    for (int i = 0; a->overlap && i < (int)(sizeof a->inflight / sizeof a->inflight[0]); i++)
        comm_exchange_init(s->comm, &a->inflight[i]);
    return a;
}

int cp_attention_overlaps(const cp_attention *a) {
    return a->overlap;
}

void cp_attention_free(cp_attention *a) {
    if (!a) return;
    void *bufs[] = {a->qs,     a->ks,     a->vs,     a->qh[0],  a->kh[0],  a->vh[0],   a->qh[1],
                    a->kh[1],  a->vh[1],  a->oh[0],  a->doh[0], a->oh[1],  a->doh[1],  a->dqh,
                    a->dqh1,   a->dkh[0], a->dvh[0], a->dkh[1], a->dvh[1], a->dkh_s,   a->dvh_s,
                    a->dts,    a->pack,   a->pack_k, a->pack_v, a->pack_o, a->pack_do, a->back_q,
                    a->back_k, a->back_v, a->ws,     a->hx};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        mem_free(bufs[i]);
    for (size_t i = 0; a->overlap && i < sizeof a->inflight / sizeof a->inflight[0]; i++)
        comm_exchange_free(&a->inflight[i]);
    free(a);
}

/* ---- helpers -------------------------------------------------------------------------------- */

/* Element i of a stage tensor. */
static void *at(const cp_attention *a, const void *p, size_t i) {
    return dtype_at(a->s.dtype, p, i);
}

/* The Ulysses exchanges through NCCL (comm_ctx.nccl_cp: ranks with GPUs of their own, DESIGN.md
 * §11): heads.h's blocks packed and unpacked on the device with the backend's row copies, moved
 * by the backend's all-to-all; replicated heads (nh < P) summed in rank order in their blocks
 * (fp32: the host's bits; bf16 rounded after each addition, the host's once: the same for two
 * replicas). */
static void nccl_to_head(cp_attention *a, const void *seq, void *head, int nh) {
    const backend_ops *be = backend_of(a->s.tk);
    int P = a->s.P, nh_out = nh >= P ? nh / P : 1;
    size_t HS = (size_t)a->s.HS, T = (size_t)a->s.T_loc, w = (size_t)nh_out * HS;
    size_t n = T * w, row = (size_t)nh * HS;
    double t0 = now_s();
    for (int j = 0; j < P; j++) { /* block j: the heads rank j holds */
        size_t h0 = nh >= P ? (size_t)j * (size_t)nh_out : (size_t)(j * nh / P);
        be->copy_rows(a->s.tk, at(a, a->pack, (size_t)j * n), w, at(a, seq, h0 * HS), row, T, w);
    }
    be->coll_alltoall(a->s.comm->nccl_cp, a->pack, head, mem_dtype_bytes(a->s.dtype, n), P);
    comm_stat_add(a->s.comm, COMM_SEQ_TO_HEAD, now_s() - t0, 1);
}

static void nccl_to_seq(cp_attention *a, const void *head, void *seq, int nh) {
    const backend_ops *be = backend_of(a->s.tk);
    int P = a->s.P, nh_out = nh >= P ? nh / P : 1, rep = nh >= P ? 1 : P / nh;
    size_t HS = (size_t)a->s.HS, T = (size_t)a->s.T_loc, w = (size_t)nh_out * HS;
    size_t n = T * w, row = (size_t)nh * HS;
    double t0 = now_s();
    be->coll_alltoall(a->s.comm->nccl_cp, head, a->pack, mem_dtype_bytes(a->s.dtype, n), P);
    for (int j = 0; j < P; j += rep) { /* block j (its replicas after it) back to its heads */
        for (int r = 1; r < rep; r++)
            be->add(a->s.tk, at(a, a->pack, (size_t)j * n), at(a, a->pack, (size_t)(j + r) * n), n);
        size_t h0 = nh >= P ? (size_t)j * (size_t)nh_out : (size_t)(j / rep);
        be->copy_rows(a->s.tk, at(a, seq, h0 * HS), row, at(a, a->pack, (size_t)j * n), w, T, w);
    }
    comm_stat_add(a->s.comm, COMM_HEAD_TO_SEQ, now_s() - t0, 1);
}

/* The Ulysses exchanges (DESIGN.md §2), to head layout (head_out) or back: nothing to do when
 * both layouts are one buffer, a copy on the backend with one rank (the buffers may be the
 * device's), NCCL's where the group has a communicator (above). Staged (comm_ctx.staged, a
 * device's tensors: DESIGN.md §11), the tensor goes out to hx, is exchanged there in place (the
 * pack is complete before the transfers, and the transfers before the unpacking) and comes
 * back: the host exchange of the same bytes, so the same bits as a host run's; the copies are
 * counted in the direction's time. */
static void exchange(cp_attention *a, const void *src, void *dst, int nh, int head_out) {
    if (src == dst) return;
    size_t ns = (size_t)a->s.T_loc * (size_t)nh * (size_t)a->s.HS;
    if (a->s.P == 1) {
        typed_copy(a->s.tk, dst, src, ns);
        return;
    }
    if (a->s.comm->nccl_cp) {
        (head_out ? nccl_to_head : nccl_to_seq)(a, src, dst, nh);
        return;
    }
    void (*host)(comm_ctx *, const void *, void *, int, int, int, mem_dtype, void *) =
        head_out ? heads_seq_to_head : heads_head_to_seq;
    if (!a->hx) {
        host(a->s.comm, src, dst, a->s.T_loc, nh, a->s.HS, a->s.dtype, a->pack);
        return;
    }
    const backend_ops *be = backend_of(a->s.tk);
    comm_kind kind = head_out ? COMM_SEQ_TO_HEAD : COMM_HEAD_TO_SEQ;
    size_t seq_b = mem_dtype_bytes(a->s.dtype, ns);
    size_t head_b =
        mem_dtype_bytes(a->s.dtype, heads_pack_floats(a->s.comm, a->s.T_loc, nh, a->s.HS));
    double t0 = now_s();
    be->to_host(a->hx, src, head_out ? seq_b : head_b);
    comm_stat_add(a->s.comm, kind, now_s() - t0, 0);
    host(a->s.comm, a->hx, a->hx, a->s.T_loc, nh, a->s.HS, a->s.dtype, a->pack);
    t0 = now_s();
    be->to_dev(dst, a->hx, head_out ? head_b : seq_b);
    comm_stat_add(a->s.comm, kind, now_s() - t0, 0);
}

static void to_head(cp_attention *a, const void *seq, void *head, int nh) {
    exchange(a, seq, head, nh, 1);
}

static void to_seq(cp_attention *a, const void *head, void *seq, int nh) {
    exchange(a, head, seq, nh, 0);
}

/* First model query head of block kk of stage j in chunk c (DESIGN.md §3): a block is the
 * stage's query heads of one KV group (mult of them; under keep_qkv the one block is all). */
static int block_head(const cp_attention *a, int c, int j, int kk) {
    int G = a->s.NH / a->s.NKV;
    return (c * a->Kc + kk) * G + j * a->mult;
}

/* qs (T_loc, U*HS) = rope(h @ Wq[stage rows]^T), block by block (weights stay in model order). */
static void stage_project_q(cp_attention *a, void *qs, const void *h, const void *wq, int c,
                            int j) {
    int T = a->s.T_loc, C = a->s.C, HS = a->s.HS, ld = a->s.U * HS;
    for (int kk = 0; kk < a->nblk; kk++)
        typed_matmul_forward(a->s.tk, at(a, qs, (size_t)kk * a->bw), ld, h, C,
                             at(a, wq, (size_t)block_head(a, c, j, kk) * HS * C), C, T, C, a->bw,
                             0);
    typed_rope_forward(a->s.tk, qs, a->s.rope_cos, a->s.rope_sin, T, a->s.U, HS);
}

/* ks, vs (T_loc, Kc*HS) for chunk c (its KV heads are consecutive rows of Wk, Wv). */
static void chunk_project_kv(cp_attention *a, void *ks, void *vs, const void *h,
                             const cp_attention_weights *w, int c) {
    int T = a->s.T_loc, C = a->s.C, HS = a->s.HS, kw = a->Kc * HS;
    size_t off = (size_t)c * kw * C;
    typed_mm_fwd(a->s.tk, ks, h, at(a, w->wk, off), T, C, kw, 0);
    typed_mm_fwd(a->s.tk, vs, h, at(a, w->wv, off), T, C, kw, 0);
    typed_rope_forward(a->s.tk, ks, a->s.rope_cos, a->s.rope_sin, T, a->Kc, HS);
}

/* Copies between a stage buffer (T_loc, U*HS) in stage order and a model-order buffer
 * (T_loc, NH*HS): to_stage gathers the stage's heads, else scatters them back. */
static void stage_copy(cp_attention *a, void *stage, const void *full_src, void *full_dst, int c,
                       int j) {
    size_t HS = (size_t)a->s.HS, bw = (size_t)a->mult * HS;
    size_t ldf = (size_t)a->s.NH * HS, lds = (size_t)a->s.U * HS;
    const backend_ops *be = backend_of(a->s.tk);
    for (int kk = 0; kk < a->Kc; kk++) {
        void *st = at(a, stage, (size_t)kk * bw);
        size_t f = (size_t)block_head(a, c, j, kk) * HS;
        if (full_src)
            be->copy_rows(a->s.tk, st, lds, at(a, full_src, f), ldf, (size_t)a->s.T_loc, bw);
        else
            be->copy_rows(a->s.tk, at(a, full_dst, f), ldf, st, lds, (size_t)a->s.T_loc, bw);
    }
}

/* ---- the stages' inputs in head layout ------------------------------------------------------ */

/* Sequence -> head layout of one input of a stage: at once, or (pack given: the pipe) packed
 * into its own pack and left in flight until inputs_wait. Nothing when both layouts are one
 * buffer. */
static void input_to_head(cp_attention *a, const void *seq, void *head, int nh, void *pack) {
    if (seq == head) return;
    if (!pack) {
        to_head(a, seq, head, nh);
        return;
    }
    UP_CHECK(a->ninflight < (int)(sizeof a->inflight / sizeof a->inflight[0]),
             "cp_attention: too many exchanges in flight");
    int i = a->ninflight++; /* the tag tells the exchanges in flight together apart */
    heads_seq_to_head_start(a->s.comm, seq, head, a->s.T_loc, nh, a->s.HS, a->s.dtype, pack, i,
                            &a->inflight[i]);
}

/* The attention kernels' progress hook: MPI advances the exchanges in flight only inside MPI
 * calls, so the kernels test them between tasks. */
static void inputs_progress(void *arg) {
    cp_attention *a = arg;
    for (int i = 0; i < a->ninflight; i++)
        comm_exchange_test(a->s.comm, &a->inflight[i]);
}

/* Completes the exchanges in flight (their time not hidden by the attention is counted). */
static void inputs_wait(cp_attention *a) {
    for (int i = 0; i < a->ninflight; i++)
        comm_exchange_wait(a->s.comm, &a->inflight[i]);
    a->ninflight = 0;
}

/* Buffer set of stage s (q, o, do) and of chunk c (k, v): they alternate under the pipe. */
static int qset(const cp_attention *a, int s) {
    return a->overlap ? s & 1 : 0;
}
static int kvset(const cp_attention *a, int c) {
    return a->overlap && a->chunks > 1 ? c & 1 : 0;
}

/* Head-layout q, k, v of stage s / chunk c: the saved tensors under keep_qkv, the projections
 * themselves with P == 1. */
static void *head_q(const cp_attention *a, const cp_attention_saved *sv, int s) {
    return a->s.keep_qkv ? sv->q : a->s.P == 1 ? a->qs : a->qh[qset(a, s)];
}
static void *head_k(const cp_attention *a, const cp_attention_saved *sv, int c) {
    return a->s.keep_qkv ? sv->k : a->s.P == 1 ? a->ks : a->kh[kvset(a, c)];
}
static void *head_v(const cp_attention *a, const cp_attention_saved *sv, int c) {
    return a->s.keep_qkv ? sv->v : a->s.P == 1 ? a->vs : a->vh[kvset(a, c)];
}

/* A stage's slice of a model-order (T_loc, NH*HS) tensor into head layout: exchanged straight
 * from the tensor when the stage is all heads in model order (nothing when head is NULL: P == 1,
 * read in place), else gathered into qs first (qs is free between the stages' q projections). */
static void stage_to_head(cp_attention *a, const void *full, void *head, int c, int j, void *pack) {
    if (a->model_order) {
        if (head) input_to_head(a, full, head, a->s.U, pack);
        return;
    }
    stage_copy(a, a->qs, full, NULL, c, j);
    input_to_head(a, a->qs, head, a->s.U, pack);
}

/* Forward inputs of stage s: the chunk's k, v when s opens a chunk, then q; exchanged at once,
 * or (async: the pipe) left in flight on their own packs. */
static void forward_inputs(cp_attention *a, const void *h, const cp_attention_weights *w,
                           const cp_attention_saved *sv, int s, int async) {
    int c = s / a->stages_per_chunk, j = s % a->stages_per_chunk;
    int keep1 = a->s.P == 1 && a->s.keep_qkv; /* projections land in the saved tensors */
    void *qs = keep1 ? sv->q : a->qs, *ks = keep1 ? sv->k : a->ks, *vs = keep1 ? sv->v : a->vs;
    if (j == 0) {
        chunk_project_kv(a, ks, vs, h, w, c); // (T_loc, Kc*HS) x2
        input_to_head(a, ks, head_k(a, sv, c), a->Kc, async ? a->pack_k : NULL); // (T, Kc_loc, HS)
        input_to_head(a, vs, head_v(a, sv, c), a->Kc, async ? a->pack_v : NULL);
    }
    stage_project_q(a, qs, h, w->wq, c, j);                                 // (T_loc, U*HS)
    input_to_head(a, qs, head_q(a, sv, s), a->s.U, async ? a->pack : NULL); // (T, U_loc, HS)
}

/* dts (T_loc, U*HS) = the stage's columns of d loss / d att = dres Wo[:, stage heads], block by
 * block (the whole (T_loc, NH*HS) never exists). */
static void stage_datt(cp_attention *a, const void *dres, const void *wo, int c, int j) {
    int T = a->s.T_loc, C = a->s.C, HS = a->s.HS, ld = a->s.U * HS, qd = a->s.NH * HS;
    typed_zero(a->s.tk, a->dts, (size_t)T * ld);
    for (int kk = 0; kk < a->nblk; kk++)
        typed_matmul_backward(a->s.tk, at(a, a->dts, (size_t)kk * a->bw), ld, NULL, a->bw, dres, C,
                              NULL, a->bw, at(a, wo, (size_t)block_head(a, c, j, kk) * HS), qd, T,
                              a->bw, C);
}

/* Backward inputs of stage s: the recomputed k, v when s opens a chunk, the stage's saved
 * output o and its gradient do (formed here from dres), the recomputed q (after the gathers:
 * qs is their staging buffer); at once, or (async) left in flight (packed: dts is free again). */
static void backward_inputs(cp_attention *a, const void *h, const cp_attention_weights *w,
                            const void *dres, const void *wo, const cp_attention_saved *sv, int s,
                            int async) {
    int c = s / a->stages_per_chunk, j = s % a->stages_per_chunk, b = qset(a, s);
    int keep = a->s.keep_qkv;
    if (!keep && j == 0) {
        chunk_project_kv(a, a->ks, a->vs, h, w, c);
        input_to_head(a, a->ks, head_k(a, sv, c), a->Kc, async ? a->pack_k : NULL);
        input_to_head(a, a->vs, head_v(a, sv, c), a->Kc, async ? a->pack_v : NULL);
    }
    stage_to_head(a, sv->att, a->oh[b], c, j, async ? a->pack_o : NULL);
    stage_datt(a, dres, wo, c, j);
    input_to_head(a, a->dts, a->doh[b] ? a->doh[b] : a->dts, a->s.U, async ? a->pack_do : NULL);
    if (!keep) {
        stage_project_q(a, a->qs, h, w->wq, c, j);
        input_to_head(a, a->qs, head_q(a, sv, s), a->s.U, async ? a->pack : NULL);
    }
}

/* ---- the attention kernels in the run's type (typed.h) ------------------------------------- */

static void kernel_forward(cp_attention *a, void *o, float *lse, const void *q, const void *k,
                           const void *v) {
    typed_attention_forward(a->s.tk, o, lse, q, k, v, a->s.doc_start, a->Tg, a->U_loc, a->Kc_loc,
                            a->s.HS, a->ws);
}

static void kernel_backward(cp_attention *a, void *dq, void *dk, void *dv, const void *dout,
                            const void *q, const void *k, const void *v, const void *o,
                            const float *lse) {
    typed_attention_backward(a->s.tk, dq, dk, dv, dout, q, k, v, o, lse, a->s.doc_start, a->Tg,
                             a->U_loc, a->Kc_loc, a->s.HS, a->ws);
}

/* ---- the pipe's exchanges back ------------------------------------------------------------ */

/* Head -> sequence layout of a stage's output, left in flight: from head (which must not change
 * until inputs_wait) into back, unpacked after the wait by heads_head_to_seq_finish. */
static void output_to_seq(cp_attention *a, const void *head, void *back, int nh) {
    UP_CHECK(a->ninflight < (int)(sizeof a->inflight / sizeof a->inflight[0]),
             "cp_attention: too many exchanges in flight");
    int i = a->ninflight++;
    heads_head_to_seq_start(a->s.comm, head, a->s.T_loc, nh, a->s.HS, a->s.dtype, back, i,
                            &a->inflight[i]);
}

static void output_unpack(cp_attention *a, const void *back, void *seq, int nh) {
    heads_head_to_seq_finish(a->s.comm, back, seq, a->s.T_loc, nh, a->s.HS, a->s.dtype);
}

/* Stage s's o (T, U_loc, HS) back into the saved o (T_loc, NH*HS) in model head order: from the
 * head-layout buffer at once, or (back: the pipe) from where its exchange arrived. */
static void forward_output(cp_attention *a, cp_attention_saved *sv, const void *oh,
                           const void *back, int s) {
    int c = s / a->stages_per_chunk, j = s % a->stages_per_chunk, U = a->s.U;
    void *seq = a->model_order ? sv->att : a->qs; /* qs is free again */
    if (back)
        output_unpack(a, back, seq, U);
    else
        to_seq(a, oh, seq, U);
    if (!a->model_order) stage_copy(a, a->qs, NULL, sv->att, c, j);
}

/* Stage s's dq, in sequence layout in qs: q = rope(h Wq[stage rows]^T), so RoPE^T, then
 * dh += dq Wq[rows], dWq[rows] += dq^T h. */
static void backward_q_tail(cp_attention *a, const void *h, const cp_attention_weights *w,
                            const cp_attention_weights *g, void *dh, int s) {
    int T = a->s.T_loc, C = a->s.C, HS = a->s.HS, ld = a->s.U * HS;
    int c = s / a->stages_per_chunk, j = s % a->stages_per_chunk;
    typed_rope_backward(a->s.tk, a->qs, a->s.rope_cos, a->s.rope_sin, T, a->s.U, HS);
    for (int kk = 0; kk < a->nblk; kk++) {
        size_t qo = (size_t)block_head(a, c, j, kk) * HS * C;
        typed_matmul_backward(a->s.tk, dh, C, (float *)g->wq + qo, C,
                              at(a, a->qs, (size_t)kk * a->bw), ld, h, C, at(a, w->wq, qo), C, T, C,
                              a->bw);
    }
}

/* Chunk c's dk, dv, in sequence layout in ks, vs (replica gradients summed on the way back):
 * k = rope(h Wk[chunk]^T), v = h Wv[chunk]^T. */
static void backward_kv_tail(cp_attention *a, const void *h, const cp_attention_weights *w,
                             const cp_attention_weights *g, void *dh, int c) {
    int T = a->s.T_loc, C = a->s.C, HS = a->s.HS, kw = a->Kc * HS;
    typed_rope_backward(a->s.tk, a->ks, a->s.rope_cos, a->s.rope_sin, T, a->Kc, HS);
    size_t off = (size_t)c * kw * C;
    typed_mm_bwd(a->s.tk, dh, (float *)g->wk + off, a->ks, h, at(a, w->wk, off), T, C, kw);
    typed_mm_bwd(a->s.tk, dh, (float *)g->wv + off, a->vs, h, at(a, w->wv, off), T, C, kw);
}

/* Under the pipe, the tails of stage s (after the wait that completed its exchanges back): dq,
 * and dk, dv when s closes its chunk; the same order of additions into dh as without the pipe. */
static void backward_back_done(cp_attention *a, const void *h, const cp_attention_weights *w,
                               const cp_attention_weights *g, void *dh, int s) {
    output_unpack(a, a->back_q, a->qs, a->s.U);
    backward_q_tail(a, h, w, g, dh, s);
    if (s % a->stages_per_chunk < a->stages_per_chunk - 1) return;
    output_unpack(a, a->back_k, a->ks, a->Kc);
    output_unpack(a, a->back_v, a->vs, a->Kc);
    backward_kv_tail(a, h, w, g, dh, s / a->stages_per_chunk);
}

/* ---- forward / backward --------------------------------------------------------------------- */

/* Every stage: its inputs (at once for the first stage, or for all without the pipe), the next
 * stage's inputs started (the pipe), attention, the exchanges completed, the output back (at
 * once; under the pipe started here and unpacked after the next stage's attention). */
void cp_attention_forward(cp_attention *a, const void *h, const cp_attention_weights *w,
                          cp_attention_saved *sv) {
    size_t lse_stage = (size_t)a->U_loc * a->Tg;
    if (a->overlap) attention_set_progress(inputs_progress, a);
    for (int s = 0; s < a->stages; s++) {
        int c = s / a->stages_per_chunk;
        uint64_t tt = trace_begin();
        if (s == 0 || !a->overlap) forward_inputs(a, h, w, sv, s, 0);
        if (a->overlap && s + 1 < a->stages) forward_inputs(a, h, w, sv, s + 1, 1);
        void *oh = a->oh[qset(a, s)] ? a->oh[qset(a, s)] : sv->att; // P == 1, model order
        double t0 = now_s();
        uint64_t tk = trace_begin();
        kernel_forward(a, oh, sv->lse + s * lse_stage, head_q(a, sv, s), head_k(a, sv, c),
                       head_v(a, sv, c)); // (T, U_loc, HS)
        trace_end(tk, "attention", "flash_forward");
        a->kernel_s += now_s() - t0;
        inputs_wait(a);
        if (!a->overlap) {
            forward_output(a, sv, oh, NULL, s);
        } else {
            if (s > 0) forward_output(a, sv, NULL, a->back_q, s - 1);
            output_to_seq(a, oh, a->back_q, a->s.U);
        }
        trace_end2(tt, "attention", "stage_forward", "stage", s, "heads", a->s.U);
    }
    if (a->overlap) {
        inputs_wait(a);
        forward_output(a, sv, NULL, a->back_q, a->stages - 1);
    }
    attention_set_progress(NULL, NULL);
}

void cp_attention_backward(cp_attention *a, const void *h, const cp_attention_weights *w,
                           const cp_attention_weights *g, const void *dres, const void *wo,
                           const cp_attention_saved *sv, void *dh) {
    int U = a->s.U;
    size_t lse_stage = (size_t)a->U_loc * a->Tg, kvh = (size_t)a->Tg * a->Kc_loc * a->s.HS;
    if (a->overlap) attention_set_progress(inputs_progress, a);
    for (int s = 0; s < a->stages; s++) {
        int c = s / a->stages_per_chunk, j = s % a->stages_per_chunk, b = qset(a, s);
        int last = j == a->stages_per_chunk - 1, kv = kvset(a, c);
        uint64_t tt = trace_begin();
        if (s == 0 || !a->overlap) backward_inputs(a, h, w, dres, wo, sv, s, 0);
        if (a->overlap && s + 1 < a->stages) backward_inputs(a, h, w, dres, wo, sv, s + 1, 1);
        const void *oh = a->oh[b] ? a->oh[b] : sv->att;   // P == 1, model order: in place
        const void *doh = a->doh[b] ? a->doh[b] : a->dts; // P == 1: where it was formed
        // dq, dk, dv in head layout; P == 1 with keep_qkv: in qs, ks, vs themselves. Under the
        // pipe dq alternates stage by stage (one is in flight back), dk, dv chunk by chunk
        void *dqh = b ? a->dqh1 : a->dqh ? a->dqh : a->qs;
        void *dkh = a->dkh[kv] ? a->dkh[kv] : a->ks, *dvh = a->dvh[kv] ? a->dvh[kv] : a->vs;
        // the first stage of a chunk writes dk, dv; later ones add theirs
        void *dk = j == 0 ? dkh : a->dkh_s, *dv = j == 0 ? dvh : a->dvh_s;
        double t0 = now_s();
        uint64_t tk = trace_begin();
        kernel_backward(a, dqh, dk, dv, doh, head_q(a, sv, s), head_k(a, sv, c), head_v(a, sv, c),
                        oh, sv->lse + s * lse_stage);
        trace_end(tk, "attention", "flash_backward");
        a->kernel_s += now_s() - t0;
        inputs_wait(a);
        if (j > 0) { /* the chunk's KV heads serve G/mult stages */
            typed_add(a->s.tk, dkh, dk, kvh);
            typed_add(a->s.tk, dvh, dv, kvh);
        }
        if (a->overlap) { /* the previous stage's tails; this stage's gradients start back */
            if (s > 0) backward_back_done(a, h, w, g, dh, s - 1);
            output_to_seq(a, dqh, a->back_q, U);
            if (last) {
                output_to_seq(a, dkh, a->back_k, a->Kc);
                output_to_seq(a, dvh, a->back_v, a->Kc);
            }
        } else {
            to_seq(a, dqh, a->qs, U); // dq (T_loc, U*HS)
            backward_q_tail(a, h, w, g, dh, s);
            if (last) {
                to_seq(a, dkh, a->ks, a->Kc);
                to_seq(a, dvh, a->vs, a->Kc);
                backward_kv_tail(a, h, w, g, dh, c);
            }
        }
        trace_end2(tt, "attention", "stage_backward", "stage", s, "heads", U);
    }
    if (a->overlap) {
        inputs_wait(a);
        backward_back_done(a, h, w, g, dh, a->stages - 1);
    }
    attention_set_progress(NULL, NULL);
}
