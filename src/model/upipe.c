#include "model/upipe.h"

#include "comm/comm.h"
#include "core/check.h"
#include "core/mem.h"
#include "kernels/kernels.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct upipe_plan {
    model *m;
    int U, Kc, mult;       /* query heads per stage, KV heads per chunk, query heads per KV head */
    int U_loc, Kc_loc;     /* per rank in head layout */
    int stages_per_chunk;  /* G / mult */
    int chunks;            /* NKV / Kc */
    float *qs, *ks, *vs;   /* (T, U*HS), (T, Kc*HS) x2: projections, later their gradients */
    float *qh, *kh, *vh;   /* (Tg, U_loc, HS), (Tg, Kc_loc, HS) x2 */
    float *oh, *doh, *dqh; /* (Tg, U_loc, HS) */
    float *dkh, *dvh;      /* (Tg, Kc_loc, HS): accumulated over the stages of a chunk */
    float *dkh_s, *dvh_s;  /* (Tg, Kc_loc, HS): one stage's */
    float *pack, *ws;
};

int upipe_check(const model_config *c, int P, int U, char *err, size_t errlen) {
    char sug[128] = "";
    for (int u = 1; u <= c->NH; u++) {
        if (c->NH % u || u % P || (u <= c->NKV ? c->NKV % u : u % c->NKV)) continue;
        size_t n = strlen(sug);
        snprintf(sug + n, sizeof sug - n, "%s%d", n ? ", " : "", u);
    }
    if (U < 1 || c->NH % U)
        snprintf(err, errlen, "--upipe-heads %d does not divide num_attention_heads (%d): use one "
                 "of %s", U, c->NH, sug);
    else if (U % P)
        snprintf(err, errlen, "--upipe-heads %d is not a multiple of the context-parallel degree "
                 "(%d): every rank needs U/P heads per stage; use one of %s", U, P, sug);
    else if (U <= c->NKV ? c->NKV % U : U % c->NKV)
        snprintf(err, errlen, "--upipe-heads %d and num_key_value_heads (%d) must divide one "
                 "another for the GQA schedule: use one of %s", U, c->NKV, sug);
    else
        return 0;
    return -1;
}

upipe_plan *upipe_init(model *m) {
    const model_config *c = &m->cfg;
    upipe_plan *u = calloc(1, sizeof *u);
    UP_CHECK(u, "out of memory");
    u->m = m;
    u->U = m->opt.U;
    u->Kc = u->U < c->NKV ? u->U : c->NKV;
    u->mult = u->U / u->Kc;
    u->stages_per_chunk = (c->NH / c->NKV) / u->mult;
    u->chunks = c->NKV / u->Kc;
    u->U_loc = u->U / m->P;
    u->Kc_loc = u->Kc >= m->P ? u->Kc / m->P : 1;
    size_t T = (size_t)m->T, Tg = (size_t)m->Tg, HS = (size_t)c->HS;
    u->qs = model_buffer(m, MEM_ATTENTION, up_mul3(T, (size_t)u->U, HS));
    u->ks = model_buffer(m, MEM_ATTENTION, up_mul3(T, (size_t)u->Kc, HS));
    u->vs = model_buffer(m, MEM_ATTENTION, up_mul3(T, (size_t)u->Kc, HS));
    size_t qh = up_mul3(Tg, (size_t)u->U_loc, HS), kvh = up_mul3(Tg, (size_t)u->Kc_loc, HS);
    /* with P == 1 the head layout is the sequence layout: no exchange buffers */
    u->qh = m->P > 1 ? model_buffer(m, MEM_ATTENTION, qh) : u->qs;
    u->kh = m->P > 1 ? model_buffer(m, MEM_ATTENTION, kvh) : u->ks;
    u->vh = m->P > 1 ? model_buffer(m, MEM_ATTENTION, kvh) : u->vs;
    u->oh = model_buffer(m, MEM_ATTENTION, qh);
    u->doh = model_buffer(m, MEM_ATTENTION, qh);
    u->dqh = model_buffer(m, MEM_ATTENTION, qh);
    u->dkh = model_buffer(m, MEM_ATTENTION, kvh);
    u->dvh = model_buffer(m, MEM_ATTENTION, kvh);
    u->dkh_s = model_buffer(m, MEM_ATTENTION, kvh);
    u->dvh_s = model_buffer(m, MEM_ATTENTION, kvh);
    if (m->P > 1) {
        size_t pq = comm_pack_floats(m->comm, m->T, u->U, c->HS);
        size_t pkv = comm_pack_floats(m->comm, m->T, u->Kc, c->HS);
        u->pack = model_buffer(m, MEM_ATTENTION, pq > pkv ? pq : pkv);
    }
    u->ws = model_buffer(m, MEM_ATTENTION,
                         attention_workspace_floats(m->Tg, u->U_loc, u->Kc_loc, c->HS));
    return u;
}

void upipe_free(upipe_plan *u) { free(u); /* buffers belong to the model */ }

/* ---- helpers -------------------------------------------------------------------------------- */

static void to_head(upipe_plan *u, const float *seq, float *head, int nh) {
    if (seq != head) comm_seq_to_head(u->m->comm, seq, head, u->m->T, nh, u->m->cfg.HS, u->pack);
}

static void to_seq(upipe_plan *u, const float *head, float *seq, int nh) {
    if (seq != head) comm_head_to_seq(u->m->comm, head, seq, u->m->T, nh, u->m->cfg.HS, u->pack);
}

/* First model query head of block kk (KV head c*Kc + kk) of stage j in chunk c; a block is
 * mult consecutive query heads of one KV group. */
static int block_head(const upipe_plan *u, int c, int j, int kk) {
    int G = u->m->cfg.NH / u->m->cfg.NKV;
    return (c * u->Kc + kk) * G + j * u->mult;
}

/* qs (T, U*HS) = h @ Wq[stage rows]^T, block by block (the weights stay in model order). */
static void stage_project_q(upipe_plan *u, const float *wq, int c, int j) {
    model *m = u->m;
    int T = m->T, C = m->cfg.C, HS = m->cfg.HS, bw = u->mult * HS, ld = u->U * HS;
    for (int kk = 0; kk < u->Kc; kk++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, bw, C, 1.0f, m->h, C,
                    wq + (size_t)block_head(u, c, j, kk) * HS * C, C, 0.0f, u->qs + kk * bw, ld);
    rope_forward(u->qs, m->rope_cos, m->rope_sin, T, u->U, HS);
}

/* ks, vs (T, Kc*HS) for chunk c (its KV heads are consecutive rows of Wk, Wv). */
static void chunk_project_kv(upipe_plan *u, const layer_weights *w, int c) {
    model *m = u->m;
    int T = m->T, C = m->cfg.C, HS = m->cfg.HS, kw = u->Kc * HS;
    size_t off = (size_t)c * kw * C;
    matmul_forward(u->ks, m->h, w->wk + off, T, C, kw, 0);
    matmul_forward(u->vs, m->h, w->wv + off, T, C, kw, 0);
    rope_forward(u->ks, m->rope_cos, m->rope_sin, T, u->Kc, HS);
}

/* Copies between a stage buffer (T, U*HS) in stage order and a model-order buffer (T, NH*HS):
 * to_stage gathers the stage's heads, else scatters them back. */
static void stage_copy(upipe_plan *u, float *stage, float *full, int c, int j, int to_stage) {
    model *m = u->m;
    int HS = m->cfg.HS, bw = u->mult * HS;
    size_t ldf = (size_t)m->cfg.NH * HS, lds = (size_t)u->U * HS;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < m->T; t++)
        for (int kk = 0; kk < u->Kc; kk++) {
            float *s = stage + t * lds + (size_t)kk * bw;
            float *f = full + t * ldf + (size_t)block_head(u, c, j, kk) * HS;
            memcpy(to_stage ? s : f, to_stage ? f : s, sizeof(float) * bw);
        }
}

/* ---- forward / backward --------------------------------------------------------------------- */

void upipe_attention_forward(upipe_plan *u, const layer_weights *w, layer_acts *a) {
    model *m = u->m;
    int HS = m->cfg.HS;
    size_t lse_stage = (size_t)u->U_loc * m->Tg;
    for (int c = 0; c < u->chunks; c++) {
        chunk_project_kv(u, w, c);                                    // (T, Kc*HS) x2
        to_head(u, u->ks, u->kh, u->Kc);                              // (Tg, Kc_loc, HS)
        to_head(u, u->vs, u->vh, u->Kc);
        for (int j = 0; j < u->stages_per_chunk; j++) {
            int s = c * u->stages_per_chunk + j;
            stage_project_q(u, w->wq, c, j);                          // (T, U*HS)
            to_head(u, u->qs, u->qh, u->U);                           // (Tg, U_loc, HS)
            attention_forward(u->oh, a->lse + s * lse_stage, u->qh, u->kh, u->vh, m->Tg, u->U_loc,
                              u->Kc_loc, HS, u->ws);                  // (Tg, U_loc, HS)
            to_seq(u, u->oh, u->qs, u->U);                            // (T, U*HS), qs is free
            stage_copy(u, u->qs, a->att, c, j, 0);                    // model head order
        }
    }
}

void upipe_attention_backward(upipe_plan *u, const layer_weights *w, const layer_weights *g,
                              const layer_acts *a) {
    model *m = u->m;
    int T = m->T, C = m->cfg.C, HS = m->cfg.HS, bw = u->mult * HS, ld = u->U * HS;
    int kw = u->Kc * HS;
    size_t lse_stage = (size_t)u->U_loc * m->Tg, kvh = (size_t)m->Tg * u->Kc_loc * HS;
    for (int c = 0; c < u->chunks; c++) {
        // recompute the chunk's k, v and their exchange
        chunk_project_kv(u, w, c);
        to_head(u, u->ks, u->kh, u->Kc);
        to_head(u, u->vs, u->vh, u->Kc);
        memset(u->dkh, 0, sizeof(float) * kvh);
        memset(u->dvh, 0, sizeof(float) * kvh);
        for (int j = 0; j < u->stages_per_chunk; j++) {
            int s = c * u->stages_per_chunk + j;
            // the stage's saved output o and its gradient, exchanged to head layout
            stage_copy(u, u->qs, a->att, c, j, 1);
            to_head(u, u->qs, u->oh, u->U);
            stage_copy(u, u->qs, m->datt, c, j, 1);
            to_head(u, u->qs, u->doh, u->U);
            // recompute q (after the gathers: qs is their staging buffer; qh may alias qs)
            stage_project_q(u, w->wq, c, j);
            to_head(u, u->qs, u->qh, u->U);
            attention_backward(u->dqh, u->dkh_s, u->dvh_s, u->doh, u->qh, u->kh, u->vh, u->oh,
                               a->lse + s * lse_stage, m->Tg, u->U_loc, u->Kc_loc, HS, u->ws);
            for (size_t i = 0; i < kvh; i++) {
                u->dkh[i] += u->dkh_s[i]; /* the chunk's KV heads serve G/m stages */
                u->dvh[i] += u->dvh_s[i];
            }
            // q = rope(h Wq[stage rows]^T)
            to_seq(u, u->dqh, u->qs, u->U);                           // dq (T, U*HS)
            rope_backward(u->qs, m->rope_cos, m->rope_sin, T, u->U, HS);
            for (int kk = 0; kk < u->Kc; kk++) {
                size_t wo = (size_t)block_head(u, c, j, kk) * HS * C;
                const float *dq = u->qs + kk * bw;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, C, bw, 1.0f, dq, ld,
                            w->wq + wo, C, 1.0f, m->dh, C);           // dh += dq Wq
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bw, C, T, 1.0f, dq, ld, m->h,
                            C, 1.0f, g->wq + wo, C);                  // dWq += dq^T h
            }
        }
        // k = rope(h Wk[chunk]^T), v = h Wv[chunk]^T  (replica gradients summed on the way back)
        to_seq(u, u->dkh, u->ks, u->Kc);
        to_seq(u, u->dvh, u->vs, u->Kc);
        rope_backward(u->ks, m->rope_cos, m->rope_sin, T, u->Kc, HS);
        size_t off = (size_t)c * kw * C;
        matmul_backward(m->dh, g->wk + off, u->ks, m->h, w->wk + off, T, C, kw);
        matmul_backward(m->dh, g->wv + off, u->vs, m->h, w->wv + off, T, C, kw);
    }
}
