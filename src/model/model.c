#include "model/model.h"

#include "core/check.h"
#include "core/mem.h"
#include "io/safetensors.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameter table ------------------------------------------------------------------------ */

static void add_tensor(model *m, int *cap, const char *name, int64_t d0, int64_t d1, int decay) {
    if (m->ntensors == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        m->tensors = realloc(m->tensors, (size_t)*cap * sizeof *m->tensors);
        UP_CHECK(m->tensors, "out of memory for the tensor table");
    }
    param_tensor *t = &m->tensors[m->ntensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = d1 > 0 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->numel = up_mul((size_t)d0, d1 > 0 ? (size_t)d1 : 1);
    t->offset = m->nparams;
    t->decay = decay;
    m->nparams = up_add(m->nparams, t->numel);
}

static void build_table(model *m) {
    const model_config *c = &m->cfg;
    int cap = 0;
    char name[MODEL_NAME_MAX];
    add_tensor(m, &cap, "model.embed_tokens.weight", c->V, c->C, 1);
    m->embed_off = m->tensors[0].offset;
    m->layer_off = calloc((size_t)c->L, sizeof *m->layer_off);
    UP_CHECK(m->layer_off, "out of memory");
    int64_t qd = (int64_t)c->NH * c->HS, kvd = (int64_t)c->NKV * c->HS;
    for (int l = 0; l < c->L; l++) {
        m->layer_off[l] = m->nparams;
        struct {
            const char *suffix;
            int64_t d0, d1;
        } spec[] = {
            {"input_layernorm.weight", c->C, 0},     {"self_attn.q_proj.weight", qd, c->C},
            {"self_attn.k_proj.weight", kvd, c->C},  {"self_attn.v_proj.weight", kvd, c->C},
            {"self_attn.o_proj.weight", c->C, qd},   {"post_attention_layernorm.weight", c->C, 0},
            {"mlp.gate_proj.weight", c->F, c->C},    {"mlp.up_proj.weight", c->F, c->C},
            {"mlp.down_proj.weight", c->C, c->F},
        };
        for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, spec[i].suffix);
            add_tensor(m, &cap, name, spec[i].d0, spec[i].d1, spec[i].d1 > 0);
        }
    }
    add_tensor(m, &cap, "model.norm.weight", c->C, 0, 0);
    m->final_norm_off = m->tensors[m->ntensors - 1].offset;
    if (c->tied) {
        m->lm_head_off = m->embed_off;
    } else {
        add_tensor(m, &cap, "lm_head.weight", c->V, c->C, 1);
        m->lm_head_off = m->tensors[m->ntensors - 1].offset;
    }
}

layer_weights model_layer_view(const model *m, float *slab, int l) {
    const model_config *c = &m->cfg;
    size_t qd = (size_t)c->NH * c->HS, kvd = (size_t)c->NKV * c->HS, C = c->C, F = c->F;
    layer_weights w;
    float *p = slab + m->layer_off[l];
    w.attn_norm = p, p += C;
    w.wq = p, p += qd * C;
    w.wk = p, p += kvd * C;
    w.wv = p, p += kvd * C;
    w.wo = p, p += C * qd;
    w.mlp_norm = p, p += C;
    w.wg = p, p += F * C;
    w.wu = p, p += F * C;
    w.wd = p;
    return w;
}

/* ---- init / free ---------------------------------------------------------------------------- */

int model_check_layout(const model_config *c, long T, int P, int R, char *err, size_t errlen) {
    /* suggestions: context-parallel degrees that divide R and satisfy every rule */
    char sug[128] = "";
    for (int p = 1; p <= R; p++) {
        if (R % p || c->NH % p || (c->NKV % p && p % c->NKV) || T % p) continue;
        size_t n = strlen(sug);
        snprintf(sug + n, sizeof sug - n, "%s%d", n ? ", " : "", p);
    }
    if (c->NH % P)
        snprintf(err, errlen, "num_attention_heads (%d) is not divisible by the context-parallel "
                 "degree (%d): use --cp %s", c->NH, P, sug);
    else if (c->NKV % P && P % c->NKV)
        snprintf(err, errlen, "num_key_value_heads (%d) and the context-parallel degree (%d) must "
                 "divide one another: use --cp %s", c->NKV, P, sug);
    else if (T % P)
        snprintf(err, errlen, "--seq-len %ld is not divisible by the context-parallel degree (%d): "
                 "use a multiple of %d, or --cp %s", T, P, P, sug);
    else
        return 0;
    return -1;
}

void model_init(model *m, const model_config *cfg, int T, comm_ctx *comm) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->comm = comm;
    m->P = comm->P;
    m->T = T;
    m->Tg = T * m->P;
    m->NH_loc = cfg->NH / m->P;
    m->NKV_loc = cfg->NKV >= m->P ? cfg->NKV / m->P : 1;
    build_table(m);
    const model_config *c = &m->cfg;
    size_t Tn = (size_t)T, Tg = (size_t)m->Tg, C = c->C, F = c->F, V = c->V, HS = c->HS;
    size_t qd = (size_t)c->NH * c->HS, kvd = (size_t)c->NKV * c->HS;
    size_t qh = up_mul3(Tg, (size_t)m->NH_loc, HS), kvh = up_mul3(Tg, (size_t)m->NKV_loc, HS);
    int P1 = m->P == 1;

    m->params = mem_alloc_f32(MEM_PARAMS, m->nparams);
    m->grads = mem_alloc_f32(MEM_GRADS, m->nparams);
    m->m = mem_alloc_f32(MEM_OPTIMIZER, m->nparams);
    m->v = mem_alloc_f32(MEM_OPTIMIZER, m->nparams);

    m->acts = calloc((size_t)c->L, sizeof *m->acts);
    UP_CHECK(m->acts, "out of memory");
    for (int l = 0; l < c->L; l++) {
        layer_acts *a = &m->acts[l];
        a->x_in = mem_alloc_f32(MEM_CHECKPOINTS, Tn * C);
        a->h1 = mem_alloc_f32(MEM_ACTIVATIONS, Tn * C);
        a->rstd1 = mem_alloc_f32(MEM_ACTIVATIONS, Tn);
        a->q = mem_alloc_f32(MEM_ATTENTION, qh);
        a->k = mem_alloc_f32(MEM_ATTENTION, kvh);
        a->v = mem_alloc_f32(MEM_ATTENTION, kvh);
        a->att = mem_alloc_f32(MEM_ACTIVATIONS, up_mul(Tn, qd));
        a->lse = mem_alloc_f32(MEM_ACTIVATIONS, up_mul(Tg, (size_t)m->NH_loc));
        a->x_mid = mem_alloc_f32(MEM_ACTIVATIONS, Tn * C);
        a->h2 = mem_alloc_f32(MEM_ACTIVATIONS, Tn * C);
        a->rstd2 = mem_alloc_f32(MEM_ACTIVATIONS, Tn);
        a->gate = mem_alloc_f32(MEM_ACTIVATIONS, up_mul(Tn, F));
        a->up = mem_alloc_f32(MEM_ACTIVATIONS, up_mul(Tn, F));
        a->act = mem_alloc_f32(MEM_ACTIVATIONS, up_mul(Tn, F));
    }
    m->x_final = mem_alloc_f32(MEM_CHECKPOINTS, Tn * C);
    m->xf = mem_alloc_f32(MEM_ACTIVATIONS, Tn * C);
    m->rstdf = mem_alloc_f32(MEM_ACTIVATIONS, Tn);
    m->logits = mem_alloc_f32(MEM_WORKSPACE, up_mul(Tn, V));
    m->inv_freq = mem_alloc_f32(MEM_WORKSPACE, HS / 2);
    m->rope_cos = mem_alloc_f32(MEM_WORKSPACE, up_mul(Tn, HS / 2));
    m->rope_sin = mem_alloc_f32(MEM_WORKSPACE, up_mul(Tn, HS / 2));
    m->dres = mem_alloc_f32(MEM_WORKSPACE, Tn * C);
    m->dh = mem_alloc_f32(MEM_WORKSPACE, Tn * C);
    m->dq = mem_alloc_f32(MEM_ATTENTION, up_mul(Tn, qd));
    m->dk = mem_alloc_f32(MEM_ATTENTION, up_mul(Tn, kvd));
    m->dv = mem_alloc_f32(MEM_ATTENTION, up_mul(Tn, kvd));
    m->datt = mem_alloc_f32(MEM_ATTENTION, up_mul(Tn, qd));
    m->dact = mem_alloc_f32(MEM_WORKSPACE, up_mul(Tn, F));
    m->attn_ws = mem_alloc_f32(MEM_ATTENTION,
                               attention_workspace_floats(m->Tg, m->NH_loc, m->NKV_loc, c->HS));
    /* with P == 1 head layout is sequence layout: the exchange buffers are aliases */
    /* the forward's projections (before the exchange) and the backward's dq/dk/dv (after it)
     * have the same shape and are never live together: one buffer each */
    m->q_seq = P1 ? NULL : m->dq;
    m->k_seq = P1 ? NULL : m->dk;
    m->v_seq = P1 ? NULL : m->dv;
    m->att_h = P1 ? NULL : mem_alloc_f32(MEM_ATTENTION, qh);
    m->datt_h = P1 ? NULL : mem_alloc_f32(MEM_ATTENTION, qh);
    m->dq_h = P1 ? NULL : mem_alloc_f32(MEM_ATTENTION, qh);
    m->dk_h = P1 ? NULL : mem_alloc_f32(MEM_ATTENTION, kvh);
    m->dv_h = P1 ? NULL : mem_alloc_f32(MEM_ATTENTION, kvh);
    if (!P1) {
        size_t pq = comm_pack_floats(comm, T, c->NH, c->HS);
        size_t pkv = comm_pack_floats(comm, T, c->NKV, c->HS);
        m->pack = mem_alloc_f32(MEM_ATTENTION, pq > pkv ? pq : pkv);
    }
    m->inputs = mem_alloc(MEM_WORKSPACE, up_mul(Tn, sizeof(int32_t)));
    m->targets = mem_alloc(MEM_WORKSPACE, up_mul(Tn, sizeof(int32_t)));

    rope_inv_freq(m->inv_freq, c->HS, c->rope_theta, &c->rope);
    /* RoPE at global positions: this rank holds tokens cp_rank * T_loc .. */
    rope_tables(m->rope_cos, m->rope_sin, m->inv_freq, (int64_t)comm->cp_rank * T, T, c->HS);
}

void model_free(model *m) {
    for (int l = 0; l < m->cfg.L && m->acts; l++) {
        layer_acts *a = &m->acts[l];
        float *bufs[] = {a->x_in, a->h1,  a->rstd1, a->q,    a->k,    a->v,  a->att,
                         a->lse,  a->x_mid, a->h2, a->rstd2, a->gate, a->up, a->act};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(bufs[i]);
    }
    free(m->acts);
    void *bufs[] = {m->params, m->grads,  m->m,        m->v,        m->x_final, m->xf,
                    m->rstdf,  m->logits, m->inv_freq, m->rope_cos, m->rope_sin, m->dres,
                    m->dh,     m->dq,     m->dk,       m->dv,       m->datt,     m->dact,
                    m->attn_ws, m->inputs, m->targets,
                    m->att_h,  m->datt_h, m->dq_h, m->dk_h, m->dv_h, m->pack};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(bufs[i]);
    free(m->tensors);
    free(m->layer_off);
    memset(m, 0, sizeof *m);
}

/* ---- weights -------------------------------------------------------------------------------- */

/* splitmix64: a counter-based generator, so element i of tensor t is the same whatever the
 * thread count or the shard layout. */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double unit_open(uint64_t x) { return ((double)(x >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

void model_init_random(model *m, uint64_t seed) {
    const double two_pi = 6.283185307179586;
    for (int t = 0; t < m->ntensors; t++) {
        const param_tensor *pt = &m->tensors[t];
        float *p = m->params + pt->offset;
        if (pt->ndim == 1) {
            for (size_t i = 0; i < pt->numel; i++) p[i] = 1.0f;
            continue;
        }
        uint64_t key = mix64(seed ^ mix64((uint64_t)t + 1));
        float std = m->cfg.init_std;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < pt->numel; i++) {
            /* Box-Muller on two hashed uniforms of this element's counter */
            double u1 = unit_open(mix64(key + 2 * (uint64_t)i));
            double u2 = unit_open(mix64(key + 2 * (uint64_t)i + 1));
            p[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
        }
    }
}

void model_load(model *m, const char *path) {
    char err[512];
    st_file f;
    if (st_open(&f, path, err, sizeof err) != 0) up_die("%s", err);
    for (int t = 0; t < m->ntensors; t++) {
        const param_tensor *pt = &m->tensors[t];
        const st_tensor *st = st_find(&f, pt->name);
        if (!st) {
            st_close(&f);
            up_die("%s: tensor %s is missing: the file does not match the config (or is not an "
                   "HF Llama checkpoint)", path, pt->name);
        }
        int ok = st->ndim == pt->ndim && st->shape[0] == pt->shape[0] &&
                 (pt->ndim == 1 || st->shape[1] == pt->shape[1]);
        if (!ok) {
            char got[128] = "", want[64];
            for (int d = 0; d < st->ndim && d < 8; d++) {
                size_t n = strlen(got);
                snprintf(got + n, sizeof got - n, "%s%lld", d ? ", " : "", (long long)st->shape[d]);
            }
            if (pt->ndim == 1) snprintf(want, sizeof want, "%lld", (long long)pt->shape[0]);
            else snprintf(want, sizeof want, "%lld, %lld", (long long)pt->shape[0],
                          (long long)pt->shape[1]);
            st_close(&f);
            up_die("%s: tensor %s has shape [%s] but the config needs [%s]: use the "
                   "config.json that belongs to these weights", path, pt->name, got, want);
        }
        if (st_read_f32(&f, st, 0, pt->numel, m->params + pt->offset, err, sizeof err) != 0) {
            st_close(&f);
            up_die("%s", err);
        }
    }
    st_close(&f);
}

void model_save_slab(const model *m, const float *slab, const char *path) {
    st_entry *e = calloc((size_t)m->ntensors, sizeof *e);
    UP_CHECK(e, "out of memory");
    for (int t = 0; t < m->ntensors; t++) {
        const param_tensor *pt = &m->tensors[t];
        e[t].name = pt->name;
        e[t].data = slab + pt->offset;
        e[t].ndim = pt->ndim;
        e[t].shape[0] = pt->shape[0];
        e[t].shape[1] = pt->shape[1];
    }
    char err[512];
    int rc = st_write_f32(path, e, m->ntensors, err, sizeof err);
    free(e);
    if (rc != 0) up_die("%s", err);
}

/* ---- forward / backward --------------------------------------------------------------------- */

/* The Ulysses exchanges of DESIGN.md §2 over the context-parallel group; nothing to do when the
 * two layouts are one buffer (P == 1). */
static void ulysses_seq_to_head(model *m, const float *seq, float *head, int nh) {
    if (seq != head) comm_seq_to_head(m->comm, seq, head, m->T, nh, m->cfg.HS, m->pack);
}

static void ulysses_head_to_seq(model *m, const float *head, float *seq, int nh) {
    if (seq != head) comm_head_to_seq(m->comm, head, seq, m->T, nh, m->cfg.HS, m->pack);
}

static void layer_forward(model *m, int l, float *x_out) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C, F = c->F, NH = c->NH, NKV = c->NKV, HS = c->HS;
    int qd = NH * HS, kvd = NKV * HS;
    layer_weights w = model_layer_view(m, m->params, l);
    layer_acts *a = &m->acts[l];

    /* with P == 1 the projections land directly in the saved head-layout buffers */
    float *qs = m->P > 1 ? m->q_seq : a->q, *ks = m->P > 1 ? m->k_seq : a->k;
    float *vs = m->P > 1 ? m->v_seq : a->v, *atth = m->P > 1 ? m->att_h : a->att;

    rmsnorm_forward(a->h1, a->rstd1, a->x_in, w.attn_norm, T, C, c->eps);  // (T, C)
    matmul_forward(qs, a->h1, w.wq, T, C, qd, 0);                         // (T, NH*HS)
    matmul_forward(ks, a->h1, w.wk, T, C, kvd, 0);                        // (T, NKV*HS)
    matmul_forward(vs, a->h1, w.wv, T, C, kvd, 0);                        // (T, NKV*HS)
    rope_forward(qs, m->rope_cos, m->rope_sin, T, NH, HS);                // global positions
    rope_forward(ks, m->rope_cos, m->rope_sin, T, NKV, HS);
    ulysses_seq_to_head(m, qs, a->q, NH);                                 // (Tg, NH_loc, HS)
    ulysses_seq_to_head(m, ks, a->k, NKV);                                // (Tg, NKV_loc, HS)
    ulysses_seq_to_head(m, vs, a->v, NKV);
    attention_forward(atth, a->lse, a->q, a->k, a->v, m->Tg, m->NH_loc, m->NKV_loc, HS,
                      m->attn_ws);                                         // (Tg, NH_loc, HS)
    ulysses_head_to_seq(m, atth, a->att, NH);                             // (T, NH*HS)
    memcpy(a->x_mid, a->x_in, sizeof(float) * (size_t)T * C);
    matmul_forward(a->x_mid, a->att, w.wo, T, qd, C, 1);                  // x_mid = x + o Wo^T

    rmsnorm_forward(a->h2, a->rstd2, a->x_mid, w.mlp_norm, T, C, c->eps);  // (T, C)
    matmul_forward(a->gate, a->h2, w.wg, T, C, F, 0);                     // (T, F)
    matmul_forward(a->up, a->h2, w.wu, T, C, F, 0);                       // (T, F)
    swiglu_forward(a->act, a->gate, a->up, (size_t)T * F);                // (T, F)
    memcpy(x_out, a->x_mid, sizeof(float) * (size_t)T * C);
    matmul_forward(x_out, a->act, w.wd, T, F, C, 1);                      // x_out = x_mid + mlp
}

double model_forward(model *m, float grad_scale) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C, V = c->V;
    embedding_forward(m->acts[0].x_in, m->inputs, m->params + m->embed_off, T, C); // (T, C)
    for (int l = 0; l < c->L; l++) {
        float *x_out = l + 1 < c->L ? m->acts[l + 1].x_in : m->x_final;
        layer_forward(m, l, x_out);
    }
    rmsnorm_forward(m->xf, m->rstdf, m->x_final, m->params + m->final_norm_off, T, C, c->eps);
    matmul_forward(m->logits, m->xf, m->params + m->lm_head_off, T, C, V, 0); // (T, V)
    /* the loss's backward runs here: logits become d loss / d logits */
    return cross_entropy_fused(m->logits, m->targets, T, V, grad_scale);
}

static void layer_backward(model *m, int l) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C, F = c->F, NH = c->NH, NKV = c->NKV, HS = c->HS;
    int qd = NH * HS, kvd = NKV * HS;
    layer_weights w = model_layer_view(m, m->params, l);
    layer_weights g = model_layer_view(m, m->grads, l);
    layer_acts *a = &m->acts[l];
    size_t TC = (size_t)T * C;

    /* m->dres holds d loss / d x_out; it becomes d loss / d x_in in place (residual adds). */
    // x_out = x_mid + act Wd^T
    memset(m->dact, 0, sizeof(float) * (size_t)T * F);
    matmul_backward(m->dact, g.wd, m->dres, a->act, w.wd, T, F, C);
    // act = silu(gate) * up   (gradients overwrite gate and up in place)
    swiglu_backward(a->gate, a->up, m->dact, a->gate, a->up, (size_t)T * F);
    // gate = h2 Wg^T, up = h2 Wu^T
    memset(m->dh, 0, sizeof(float) * TC);
    matmul_backward(m->dh, g.wg, a->gate, a->h2, w.wg, T, C, F);
    matmul_backward(m->dh, g.wu, a->up, a->h2, w.wu, T, C, F);
    // h2 = rmsnorm(x_mid)
    rmsnorm_backward(m->dres, g.mlp_norm, m->dh, a->x_mid, w.mlp_norm, a->rstd2, T, C);

    // x_mid = x_in + att Wo^T
    memset(m->datt, 0, sizeof(float) * (size_t)T * qd);
    matmul_backward(m->datt, g.wo, m->dres, a->att, w.wo, T, qd, C);
    // att = head_to_seq(attention(seq_to_head(q, k, v)))
    float *atth = m->att_h ? m->att_h : a->att, *datth = m->datt_h ? m->datt_h : m->datt;
    float *dqh = m->dq_h ? m->dq_h : m->dq, *dkh = m->dk_h ? m->dk_h : m->dk;
    float *dvh = m->dv_h ? m->dv_h : m->dv;
    ulysses_seq_to_head(m, a->att, atth, NH); /* the forward's output, needed for D = rowsum(dO*O) */
    ulysses_seq_to_head(m, m->datt, datth, NH);
    attention_backward(dqh, dkh, dvh, datth, a->q, a->k, a->v, atth, a->lse, m->Tg, m->NH_loc,
                       m->NKV_loc, HS, m->attn_ws);
    ulysses_head_to_seq(m, dqh, m->dq, NH);
    ulysses_head_to_seq(m, dkh, m->dk, NKV); /* sums the replicas' gradients when P > NKV */
    ulysses_head_to_seq(m, dvh, m->dv, NKV);
    // q, k = rope(q, k)
    rope_backward(m->dq, m->rope_cos, m->rope_sin, T, NH, HS);
    rope_backward(m->dk, m->rope_cos, m->rope_sin, T, NKV, HS);
    // q = h1 Wq^T, k = h1 Wk^T, v = h1 Wv^T
    memset(m->dh, 0, sizeof(float) * TC);
    matmul_backward(m->dh, g.wq, m->dq, a->h1, w.wq, T, C, qd);
    matmul_backward(m->dh, g.wk, m->dk, a->h1, w.wk, T, C, kvd);
    matmul_backward(m->dh, g.wv, m->dv, a->h1, w.wv, T, C, kvd);
    // h1 = rmsnorm(x_in)
    rmsnorm_backward(m->dres, g.attn_norm, m->dh, a->x_in, w.attn_norm, a->rstd1, T, C);
}

void model_backward(model *m) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C, V = c->V;
    size_t TC = (size_t)T * C;

    // logits = xf Wlm^T   (m->logits already holds d loss / d logits)
    memset(m->dh, 0, sizeof(float) * TC);
    matmul_backward(m->dh, m->grads + m->lm_head_off, m->logits, m->xf,
                    m->params + m->lm_head_off, T, C, V);
    // xf = rmsnorm(x_final)
    memset(m->dres, 0, sizeof(float) * TC);
    rmsnorm_backward(m->dres, m->grads + m->final_norm_off, m->dh, m->x_final,
                     m->params + m->final_norm_off, m->rstdf, T, C);
    for (int l = c->L - 1; l >= 0; l--) layer_backward(m, l);
    // x_0 = embed[inputs]
    embedding_backward(m->grads + m->embed_off, m->dres, m->inputs, T, C);
}

double model_flops_per_step(const model_config *c, int T) {
    /* Matmul parameters (the embedding lookup does no FLOPs; a tied lm_head still multiplies):
     * 2 FLOPs per parameter per token forward, 4 backward. Causal attention per layer and head:
     * forward S = Q K^T and O = P V over T(T+1)/2 (query, key) pairs, 2 FLOPs per multiply-add
     * and 2 matmuls: 4 * HS * T(T+1)/2; backward 2x that (dV, dP, dS->dQ, dK): 8 * HS * ...
     * Backward's recompute of S is not counted (as in the usual 6N + attention convention). */
    double C = c->C, F = c->F, qd = (double)c->NH * c->HS, kvd = (double)c->NKV * c->HS;
    double per_layer = C * qd * 2 + C * kvd * 2 + 3 * C * F;
    double matmul_params = c->L * per_layer + (double)c->V * C;
    double pairs = (double)T * (T + 1) / 2;
    double attn = 12.0 * c->L * c->NH * c->HS * pairs;
    return 6.0 * matmul_params * T + attn;
}
