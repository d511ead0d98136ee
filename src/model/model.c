#include "model/model.h"

#include "core/check.h"
#include "core/mem.h"
#include "io/safetensors.h"
#include "kernels/kernels.h"
#include "memory/offload.h"
#include "model/upipe.h"

#include <limits.h>
#include <math.h>
#include <mpi.h>
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

layer_weights model_layer_view(const model *m, float *layer) {
    const model_config *c = &m->cfg;
    size_t qd = (size_t)c->NH * c->HS, kvd = (size_t)c->NKV * c->HS, C = c->C, F = c->F;
    layer_weights w;
    float *p = layer;
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
    else if (P > 1 && (double)(T / P) * ((c->NH + P - 1) / P) * c->HS > INT_MAX)
        snprintf(err, errlen, "--seq-len %ld over %d ranks makes all-to-all blocks beyond MPI's "
                 "int count: use more context-parallel ranks or --upipe-heads", T, P);
    else
        return 0;
    return -1;
}

int model_check_options(const model_config *c, int P, const model_options *o, char *err,
                        size_t errlen) {
    if (o->U && upipe_check(c, P, o->U, err, errlen) != 0) return -1;
    if (o->tile_mlp < 0 || o->tile_loss < 0) {
        snprintf(err, errlen, "tile sizes must be positive token counts");
        return -1;
    }
    return 0;
}

float *model_buffer(model *m, mem_category cat, size_t n) {
    float *p = mem_alloc_f32(cat, n);
    if (p) {
        if (m->nowned == m->owned_cap) {
            m->owned_cap = m->owned_cap ? 2 * m->owned_cap : 64;
            m->owned = realloc(m->owned, sizeof *m->owned * (size_t)m->owned_cap);
            UP_CHECK(m->owned, "out of memory");
        }
        m->owned[m->nowned++] = p;
    }
    return p;
}

void model_init(model *m, const model_config *cfg, int T, comm_ctx *comm,
                const model_options *opt) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->opt = *opt;
    if (m->opt.offload_dir) m->opt.checkpoint = 1;
    m->comm = comm;
    m->P = comm->P;
    m->T = T;
    m->Tg = T * m->P;
    m->NH_loc = cfg->NH / m->P;
    m->NKV_loc = cfg->NKV >= m->P ? cfg->NKV / m->P : 1;
    m->tile_mlp = opt->tile_mlp > 0 && opt->tile_mlp < T ? opt->tile_mlp : T;
    m->tile_loss = opt->tile_loss > 0 && opt->tile_loss < T ? opt->tile_loss : T;
    build_table(m);
    const model_config *c = &m->cfg;
    size_t Tn = (size_t)T, Tg = (size_t)m->Tg, C = c->C, F = c->F, V = c->V, HS = c->HS;
    size_t qd = (size_t)c->NH * c->HS, kvd = (size_t)c->NKV * c->HS;
    size_t qh = up_mul3(Tg, (size_t)m->NH_loc, HS), kvh = up_mul3(Tg, (size_t)m->NKV_loc, HS);
    int P1 = m->P == 1, plain = m->opt.U == 0, tiled_mlp = m->tile_mlp < T;
    int ckpt = m->opt.checkpoint, offload = m->opt.offload_dir != NULL;

    /* model state: this rank's shards (all of it without --fsdp) */
    fsdp_layout(m, opt->fsdp ? comm->R : 1, opt->fsdp ? comm->rank : 0);
    m->params = model_buffer(m, MEM_PARAMS, m->nshard);
    m->grads = model_buffer(m, MEM_GRADS, m->nshard);
    m->m = model_buffer(m, MEM_OPTIMIZER, m->nshard);
    m->v = model_buffer(m, MEM_OPTIMIZER, m->nshard);
    if (m->R_f > 1) {
        size_t maxs = 0;
        for (int u = 0; u < m->nunits; u++) maxs = m->shard_n[u] > maxs ? m->shard_n[u] : maxs;
        size_t full = up_mul(maxs, (size_t)m->R_f);
        m->gbuf[0] = model_buffer(m, MEM_COMM, full);
        m->gbuf[1] = model_buffer(m, MEM_COMM, full);
        m->gradbuf = model_buffer(m, MEM_COMM, full);
        m->rs_tmp = model_buffer(m, MEM_COMM, maxs);
        if (c->tied) {
            size_t e = up_mul(m->shard_n[0], (size_t)m->R_f);
            m->gbuf[2] = model_buffer(m, MEM_COMM, e);
            m->embed_gradbuf = model_buffer(m, MEM_COMM, e);
        }
        m->greq = calloc(3, sizeof(MPI_Request));
        UP_CHECK(m->greq, "out of memory");
    }

    /* saved tensors: one set per layer, or one shared set when the layer is recomputed */
    m->acts = calloc((size_t)c->L, sizeof *m->acts);
    UP_CHECK(m->acts, "out of memory");
    for (int l = 0; l < c->L; l++) {
        layer_acts *a = &m->acts[l];
        if (!offload) a->x_in = model_buffer(m, MEM_CHECKPOINTS, Tn * C);
        if (ckpt && l > 0) {
            float *x_in = a->x_in;
            *a = m->acts[0];
            a->x_in = x_in;
            continue;
        }
        if (plain) {
            a->q = model_buffer(m, MEM_ATTENTION, qh);
            a->k = model_buffer(m, MEM_ATTENTION, kvh);
            a->v = model_buffer(m, MEM_ATTENTION, kvh);
        }
        a->att = model_buffer(m, MEM_ACTIVATIONS, up_mul(Tn, qd));
        a->lse = model_buffer(m, MEM_ACTIVATIONS, up_mul(Tg, (size_t)m->NH_loc));
        a->x_mid = model_buffer(m, MEM_ACTIVATIONS, Tn * C);
        if (!tiled_mlp) {
            a->gate = model_buffer(m, MEM_ACTIVATIONS, up_mul(Tn, F));
            a->up = model_buffer(m, MEM_ACTIVATIONS, up_mul(Tn, F));
            a->act = model_buffer(m, MEM_ACTIVATIONS, up_mul(Tn, F));
        }
    }
    if (offload) {
        /* three resident buffers: one in use, one in flight to the store, one prefetched */
        size_t slot = up_mul(Tn * C, sizeof(float));
        if (mem_planning()) {
            mem_alloc(MEM_CHECKPOINTS, offload_buffer_bytes(slot, 3));
            mem_add_offloaded((long long)offload_store_bytes(slot, c->L));
        } else {
            /* a store that cannot open may fail on some ranks only (their disks): every rank
             * learns of it before any collective, and all stop together with the message */
            char err[512] = "";
            m->store = offload_open(m->opt.offload_dir, slot, c->L, 3, err, sizeof err);
            if (comm_any(comm, m->store == NULL)) up_die_agreed(m->store ? NULL : err);
        }
    }

    size_t tm = (size_t)m->tile_mlp, tl = (size_t)m->tile_loss;
    m->x_final = model_buffer(m, MEM_WORKSPACE, Tn * C);
    m->h = model_buffer(m, MEM_WORKSPACE, Tn * C);
    m->rstd1 = model_buffer(m, MEM_WORKSPACE, Tn);
    m->rstd2 = model_buffer(m, MEM_WORKSPACE, Tn);
    m->inv_freq = model_buffer(m, MEM_WORKSPACE, HS / 2);
    m->rope_cos = model_buffer(m, MEM_WORKSPACE, up_mul(Tn, HS / 2));
    m->rope_sin = model_buffer(m, MEM_WORKSPACE, up_mul(Tn, HS / 2));
    if (tiled_mlp) {
        m->gate_t = model_buffer(m, MEM_WORKSPACE, up_mul(tm, F));
        m->up_t = model_buffer(m, MEM_WORKSPACE, up_mul(tm, F));
        m->act_t = model_buffer(m, MEM_WORKSPACE, up_mul(tm, F));
    }
    m->dact = model_buffer(m, MEM_WORKSPACE, up_mul(tm, F));
    m->xf = model_buffer(m, MEM_WORKSPACE, tl * C);
    m->rstdf = model_buffer(m, MEM_WORKSPACE, tl);
    m->logits = model_buffer(m, MEM_WORKSPACE, up_mul(tl, V));
    m->dxf = model_buffer(m, MEM_WORKSPACE, tl * C);
    m->dres = model_buffer(m, MEM_WORKSPACE, Tn * C);
    m->dh = model_buffer(m, MEM_WORKSPACE, Tn * C);
    m->datt = model_buffer(m, MEM_WORKSPACE, up_mul(Tn, qd)); /* like the saved o, not staged */
    if (plain) {
        m->dq = model_buffer(m, MEM_ATTENTION, up_mul(Tn, qd));
        m->dk = model_buffer(m, MEM_ATTENTION, up_mul(Tn, kvd));
        m->dv = model_buffer(m, MEM_ATTENTION, up_mul(Tn, kvd));
        m->attn_ws = model_buffer(m, MEM_ATTENTION,
                                  attention_workspace_floats(m->Tg, m->NH_loc, m->NKV_loc, c->HS));
        /* with P == 1 head layout is sequence layout: the exchange buffers are aliases. The
         * forward's projections (before the exchange) and the backward's dq/dk/dv (after it)
         * have the same shape and are never live together: one buffer each */
        m->q_seq = P1 ? NULL : m->dq;
        m->k_seq = P1 ? NULL : m->dk;
        m->v_seq = P1 ? NULL : m->dv;
        if (!P1) {
            m->att_h = model_buffer(m, MEM_ATTENTION, qh);
            m->datt_h = model_buffer(m, MEM_ATTENTION, qh);
            m->dq_h = model_buffer(m, MEM_ATTENTION, qh);
            m->dk_h = model_buffer(m, MEM_ATTENTION, kvh);
            m->dv_h = model_buffer(m, MEM_ATTENTION, kvh);
            size_t pq = comm_pack_floats(comm, T, c->NH, c->HS);
            size_t pkv = comm_pack_floats(comm, T, c->NKV, c->HS);
            m->pack = model_buffer(m, MEM_ATTENTION, pq > pkv ? pq : pkv);
        }
    } else {
        m->upipe = upipe_init(m);
    }
    m->inputs = (int32_t *)model_buffer(m, MEM_WORKSPACE, Tn);
    m->targets = (int32_t *)model_buffer(m, MEM_WORKSPACE, Tn);
    if (mem_planning()) return;

    rope_inv_freq(m->inv_freq, c->HS, c->rope_theta, &c->rope);
    /* RoPE at global positions: this rank holds tokens cp_rank * T_loc .. */
    rope_tables(m->rope_cos, m->rope_sin, m->inv_freq, (int64_t)comm->cp_rank * T, T, c->HS);
}

void model_free(model *m) {
    if (m->store) offload_close(m->store);
    if (m->upipe) upipe_free(m->upipe);
    for (int i = 0; i < m->nowned; i++) mem_free(m->owned[i]);
    free(m->owned);
    free(m->acts);
    free(m->tensors);
    free(m->layer_off);
    free(m->unit_off);
    free(m->shard_n);
    free(m->shard_off);
    free(m->tensor_unit);
    free(m->greq);
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

int model_owned_part(const model *m, int t, size_t *i0, size_t *i1) {
    const param_tensor *pt = &m->tensors[t];
    size_t g0, g1;
    fsdp_owned(m, m->tensor_unit[t], &g0, &g1);
    size_t end = pt->offset + pt->numel;
    size_t a = pt->offset > g0 ? pt->offset : g0, b = end < g1 ? end : g1;
    if (a >= b) return 0;
    *i0 = a - pt->offset;
    *i1 = b - pt->offset;
    return 1;
}

void model_init_random(model *m, uint64_t seed) {
    const double two_pi = 6.283185307179586;
    for (int t = 0; t < m->ntensors; t++) {
        const param_tensor *pt = &m->tensors[t];
        /* only this rank's part of the tensor: elements [i0, i1) */
        size_t i0, i1;
        if (!model_owned_part(m, t, &i0, &i1)) continue;
        float *p = fsdp_shard_at(m, m->params, m->tensor_unit[t], pt->offset + i0) - i0;
        if (pt->ndim == 1) {
            for (size_t i = i0; i < i1; i++) p[i] = 1.0f;
            continue;
        }
        uint64_t key = mix64(seed ^ mix64((uint64_t)t + 1));
        float std = m->cfg.init_std;
#pragma omp parallel for schedule(static)
        for (size_t i = i0; i < i1; i++) {
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
        size_t i0, i1;
        if (!model_owned_part(m, t, &i0, &i1)) continue; /* FSDP: keep only this rank's shard */
        float *dst = fsdp_shard_at(m, m->params, m->tensor_unit[t], pt->offset + i0);
        if (st_read_f32(&f, st, i0, i1 - i0, dst, err, sizeof err) != 0) {
            st_close(&f);
            up_die("%s", err);
        }
    }
    st_close(&f);
}

/* The data of a save in file order: the slab itself (unsharded), or one gathered unit at a time
 * (FSDP: every rank takes part in the gathers, rank 0 writes). */
typedef struct {
    model *m;
    const float *slab;
    int unit;
} save_source;

static int save_next(void *ctx, const float **chunk, size_t *count) {
    save_source *src = ctx;
    model *m = src->m;
    if (src->unit >= m->nunits) return -1;
    if (m->R_f == 1) {
        src->unit = m->nunits;
        *chunk = src->slab;
        *count = m->nparams;
        return 0;
    }
    int u = src->unit++;
    MPI_Request req;
    comm_allgather_start(m->comm, src->slab + m->shard_off[u], m->gradbuf, m->shard_n[u], &req);
    comm_wait(m->comm, &req, COMM_FSDP_GATHER);
    *chunk = m->gradbuf;
    *count = m->unit_off[u + 1] - m->unit_off[u];
    return 0;
}

void model_save_slab(model *m, const float *slab, const char *path) {
    save_source src = {m, slab, 0};
    if (m->comm->rank != 0) {
        /* the other ranks only take part in rank 0's gathers, in the same order */
        const float *chunk;
        size_t count;
        if (m->R_f > 1)
            while (save_next(&src, &chunk, &count) == 0) {
            }
        return;
    }
    st_entry *e = calloc((size_t)m->ntensors, sizeof *e);
    UP_CHECK(e, "out of memory");
    for (int t = 0; t < m->ntensors; t++) {
        const param_tensor *pt = &m->tensors[t];
        e[t].name = pt->name;
        e[t].ndim = pt->ndim;
        e[t].shape[0] = pt->shape[0];
        e[t].shape[1] = pt->shape[1];
    }
    char err[512];
    int rc = st_write_f32_stream(path, e, m->ntensors, save_next, &src, err, sizeof err);
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

/* ---- plain Ulysses attention: all heads at once, q/k/v saved in head layout ----------------- */

static void attn_plain_forward(model *m, const layer_weights *w, layer_acts *a) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C, NH = c->NH, NKV = c->NKV, HS = c->HS, qd = NH * HS, kvd = NKV * HS;
    /* with P == 1 the projections land directly in the saved head-layout buffers */
    float *qs = m->P > 1 ? m->q_seq : a->q, *ks = m->P > 1 ? m->k_seq : a->k;
    float *vs = m->P > 1 ? m->v_seq : a->v, *atth = m->P > 1 ? m->att_h : a->att;

    matmul_forward(qs, m->h, w->wq, T, C, qd, 0);                     // (T, NH*HS)
    matmul_forward(ks, m->h, w->wk, T, C, kvd, 0);                    // (T, NKV*HS)
    matmul_forward(vs, m->h, w->wv, T, C, kvd, 0);                    // (T, NKV*HS)
    rope_forward(qs, m->rope_cos, m->rope_sin, T, NH, HS);            // global positions
    rope_forward(ks, m->rope_cos, m->rope_sin, T, NKV, HS);
    ulysses_seq_to_head(m, qs, a->q, NH);                             // (Tg, NH_loc, HS)
    ulysses_seq_to_head(m, ks, a->k, NKV);                            // (Tg, NKV_loc, HS)
    ulysses_seq_to_head(m, vs, a->v, NKV);
    attention_forward(atth, a->lse, a->q, a->k, a->v, m->Tg, m->NH_loc, m->NKV_loc, HS,
                      m->attn_ws);                                     // (Tg, NH_loc, HS)
    ulysses_head_to_seq(m, atth, a->att, NH);                         // (T, NH*HS)
}

/* m->datt holds d loss / d att; dh += d loss / d h; weight gradients accumulate. */
static void attn_plain_backward(model *m, const layer_weights *w, const layer_weights *g,
                                const layer_acts *a) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C, NH = c->NH, NKV = c->NKV, HS = c->HS, qd = NH * HS, kvd = NKV * HS;
    // att = head_to_seq(attention(seq_to_head(q, k, v)))
    float *atth = m->att_h ? m->att_h : a->att, *datth = m->datt_h ? m->datt_h : m->datt;
    float *dqh = m->dq_h ? m->dq_h : m->dq, *dkh = m->dk_h ? m->dk_h : m->dk;
    float *dvh = m->dv_h ? m->dv_h : m->dv;
    ulysses_seq_to_head(m, a->att, atth, NH); /* the forward's output, for D = rowsum(dO*O) */
    ulysses_seq_to_head(m, m->datt, datth, NH);
    attention_backward(dqh, dkh, dvh, datth, a->q, a->k, a->v, atth, a->lse, m->Tg, m->NH_loc,
                       m->NKV_loc, HS, m->attn_ws);
    ulysses_head_to_seq(m, dqh, m->dq, NH);
    ulysses_head_to_seq(m, dkh, m->dk, NKV); /* sums the replicas' gradients when P > NKV */
    ulysses_head_to_seq(m, dvh, m->dv, NKV);
    // q, k = rope(q, k)
    rope_backward(m->dq, m->rope_cos, m->rope_sin, T, NH, HS);
    rope_backward(m->dk, m->rope_cos, m->rope_sin, T, NKV, HS);
    // q = h Wq^T, k = h Wk^T, v = h Wv^T
    matmul_backward(m->dh, g->wq, m->dq, m->h, w->wq, T, C, qd);
    matmul_backward(m->dh, g->wk, m->dk, m->h, w->wk, T, C, kvd);
    matmul_backward(m->dh, g->wv, m->dv, m->h, w->wv, T, C, kvd);
}

/* ---- MLP: untiled (intermediates saved) or over tiles of tile_mlp tokens (recomputed) ------- */

/* The (n, F) intermediates of the tile starting at token t0: the shared tile buffers, or the
 * saved tensors' rows when untiled (a single tile). Returns n. */
static int mlp_tile(model *m, const layer_acts *a, int t0, float **gate, float **up, float **act) {
    int T = m->T, N = m->tile_mlp, n = T - t0 < N ? T - t0 : N;
    size_t rf = (size_t)t0 * m->cfg.F;
    int tiled = N < T;
    *gate = tiled ? m->gate_t : a->gate + rf;
    *up = tiled ? m->up_t : a->up + rf;
    *act = tiled ? m->act_t : a->act + rf;
    return n;
}

static void mlp_forward(model *m, const layer_weights *w, layer_acts *a, float *x_out) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C, F = c->F;
    for (int t0 = 0; t0 < T; t0 += m->tile_mlp) {
        float *gate, *up, *act;
        int n = mlp_tile(m, a, t0, &gate, &up, &act);
        size_t r = (size_t)t0 * C;
        rmsnorm_forward(m->h + r, m->rstd2 + t0, a->x_mid + r, w->mlp_norm, n, C, c->eps);
        matmul_forward(gate, m->h + r, w->wg, n, C, F, 0);              // (n, F)
        matmul_forward(up, m->h + r, w->wu, n, C, F, 0);                // (n, F)
        swiglu_forward(act, gate, up, (size_t)n * F);                   // (n, F)
        memcpy(x_out + r, a->x_mid + r, sizeof(float) * (size_t)n * C);
        matmul_forward(x_out + r, act, w->wd, n, F, C, 1);              // x_out = x_mid + mlp
    }
}

/* m->dres: d loss / d x_out on entry, d loss / d x_mid on return (the residual adds). */
static void mlp_backward(model *m, const layer_weights *w, const layer_weights *g,
                         const layer_acts *a) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C, F = c->F, tiled = m->tile_mlp < T;
    for (int t0 = 0; t0 < T; t0 += m->tile_mlp) {
        float *gate, *up, *act;
        int n = mlp_tile(m, a, t0, &gate, &up, &act);
        size_t r = (size_t)t0 * C;
        float *h2 = m->h + r;
        // recompute h2 = rmsnorm(x_mid) (cheap, not saved) and, when tiled, gate, up, act
        rmsnorm_forward(h2, m->rstd2 + t0, a->x_mid + r, w->mlp_norm, n, C, c->eps);
        if (tiled) {
            matmul_forward(gate, h2, w->wg, n, C, F, 0);
            matmul_forward(up, h2, w->wu, n, C, F, 0);
            swiglu_forward(act, gate, up, (size_t)n * F);
        }
        // x_out = x_mid + act Wd^T
        memset(m->dact, 0, sizeof(float) * (size_t)n * F);
        matmul_backward(m->dact, g->wd, m->dres + r, act, w->wd, n, F, C);
        // act = silu(gate) * up   (gradients overwrite gate and up in place)
        swiglu_backward(gate, up, m->dact, gate, up, (size_t)n * F);
        // gate = h2 Wg^T, up = h2 Wu^T
        memset(m->dh + r, 0, sizeof(float) * (size_t)n * C);
        matmul_backward(m->dh + r, g->wg, gate, h2, w->wg, n, C, F);
        matmul_backward(m->dh + r, g->wu, up, h2, w->wu, n, C, F);
        // h2 = rmsnorm(x_mid)
        rmsnorm_backward(m->dres + r, g->mlp_norm, m->dh + r, a->x_mid + r, w->mlp_norm,
                         m->rstd2 + t0, n, C);
    }
}

/* ---- layers --------------------------------------------------------------------------------- */

static void layer_forward(model *m, int l, const float *x_in, float *x_out) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C;
    layer_weights w = model_layer_view(m, fsdp_gather(m, l + 1));
    layer_acts *a = &m->acts[l];

    rmsnorm_forward(m->h, m->rstd1, x_in, w.attn_norm, T, C, c->eps);    // h = rmsnorm(x) (T, C)
    if (m->upipe) upipe_attention_forward(m->upipe, &w, a);              // att (T, NH*HS)
    else attn_plain_forward(m, &w, a);
    memcpy(a->x_mid, x_in, sizeof(float) * (size_t)T * C);
    matmul_forward(a->x_mid, a->att, w.wo, T, c->NH * c->HS, C, 1);     // x_mid = x + o Wo^T
    mlp_forward(m, &w, a, x_out);                                        // x_out = x_mid + mlp
}

/* m->dres: d loss / d x_out on entry, d loss / d x_in on return. */
static void layer_backward(model *m, int l, const float *x_in) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C, qd = c->NH * c->HS;
    layer_weights w = model_layer_view(m, fsdp_gather(m, l + 1));
    layer_weights g = model_layer_view(m, fsdp_grads(m, l + 1));
    layer_acts *a = &m->acts[l];

    mlp_backward(m, &w, &g, a);
    // x_mid = x_in + att Wo^T
    memset(m->datt, 0, sizeof(float) * (size_t)T * qd);
    matmul_backward(m->datt, g.wo, m->dres, a->att, w.wo, T, qd, C);
    // recompute h = rmsnorm(x_in) (cheap, not saved)
    rmsnorm_forward(m->h, m->rstd1, x_in, w.attn_norm, T, C, c->eps);
    memset(m->dh, 0, sizeof(float) * (size_t)T * C);
    if (m->upipe) upipe_attention_backward(m->upipe, &w, &g, a);        // dh += d/dh
    else attn_plain_backward(m, &w, &g, a);
    // h = rmsnorm(x_in)
    rmsnorm_backward(m->dres, g.attn_norm, m->dh, x_in, w.attn_norm, m->rstd1, T, C);
}

/* Final norm, LM head and cross-entropy over tiles of tile_loss tokens; the loss's backward runs
 * here too, so the (T, V) logits never exist: dres := d loss / d x_final. */
static double loss_forward_backward(model *m, float grad_scale) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C, V = c->V, N = m->tile_loss, head = c->L + 1;
    /* the head unit (final norm, then lm_head unless tied: then the embedding's weights) */
    float *wn = fsdp_gather(m, head), *gn = fsdp_grads(m, head);
    const float *wlm = c->tied ? fsdp_gather(m, 0) : wn + C;
    float *glm = c->tied ? fsdp_grads(m, 0) : gn + C;
    double loss = 0;
    memset(m->dres, 0, sizeof(float) * (size_t)T * C);
    for (int t0 = 0; t0 < T; t0 += N) {
        int n = T - t0 < N ? T - t0 : N;
        size_t r = (size_t)t0 * C;
        rmsnorm_forward(m->xf, m->rstdf, m->x_final + r, wn, n, C, c->eps);   // (n, C)
        matmul_forward(m->logits, m->xf, wlm, n, C, V, 0);                    // (n, V)
        loss += cross_entropy_fused(m->logits, m->targets + t0, n, V, grad_scale); // -> dlogits
        // logits = xf Wlm^T
        memset(m->dxf, 0, sizeof(float) * (size_t)n * C);
        matmul_backward(m->dxf, glm, m->logits, m->xf, wlm, n, C, V);
        // xf = rmsnorm(x_final)
        rmsnorm_backward(m->dres + r, gn, m->dxf, m->x_final + r, wn, m->rstdf, n, C);
    }
    fsdp_reduce(m, head); /* a tied embedding's gradients are reduced after its own backward */
    return loss;
}

double model_forward(model *m, float grad_scale) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C, L = c->L;
    float *x = m->store ? offload_acquire(m->store) : m->acts[0].x_in;
    fsdp_invalidate(m); /* the optimizer may have changed the shards since the last gathers */
    if (m->embed_gradbuf) /* tied + FSDP: the LM head's part of the embedding gradient */
        memset(m->embed_gradbuf, 0, sizeof(float) * m->shard_n[0] * (size_t)m->R_f);
    float *wte = fsdp_gather(m, 0);
    fsdp_prefetch(m, 1);
    embedding_forward(x, m->inputs, wte, T, C);                          // (T, C)
    for (int l = 0; l < L; l++) {
        fsdp_prefetch(m, l + 2); /* the next unit's gather overlaps this layer */
        float *x_out = l + 1 == L ? m->x_final
                       : m->store ? offload_acquire(m->store) : m->acts[l + 1].x_in;
        layer_forward(m, l, x, x_out);
        if (m->store) offload_write(m->store, l, x); /* x_l leaves working memory */
        x = x_out;
    }
    return loss_forward_backward(m, grad_scale);
}

void model_backward(model *m) {
    const model_config *c = &m->cfg;
    if (m->store) offload_prefetch(m->store, c->L - 1);
    for (int l = c->L - 1; l >= 0; l--) {
        const float *x_in = m->store ? offload_wait(m->store, l) : m->acts[l].x_in;
        if (m->store && l > 0) offload_prefetch(m->store, l - 1); /* one layer ahead */
        fsdp_gather(m, l + 1);
        if (l > 0) fsdp_prefetch(m, l); /* the next layer's gather overlaps this one */
        if (m->opt.checkpoint) layer_forward(m, l, x_in, m->x_final); /* recompute */
        layer_backward(m, l, x_in);
        fsdp_reduce(m, l + 1); /* right after the unit's backward */
        if (m->store) offload_release(m->store, (float *)x_in);
    }
    // x_0 = embed[inputs]
    embedding_backward(fsdp_grads(m, 0), m->dres, m->inputs, m->T, c->C);
    fsdp_reduce(m, 0);
}

void model_zero_grads(model *m) { memset(m->grads, 0, sizeof(float) * m->nshard); }

void model_reduce_grads(model *m) {
    if (m->R_f == 1) comm_reduce_grads(m->comm, m->grads, m->nshard); /* FSDP reduced per unit */
}

double model_grad_norm(model *m) {
    double sq = sum_squares(m->grads, m->nshard);
    if (m->R_f > 1) comm_sum_double(m->comm, &sq); /* shards: the norm of the whole gradient */
    return sqrt(sq);
}

void model_optimizer_step(model *m, const adamw_params *hp, int step, float clip) {
    /* every tensor's owned part: the whole tensor, or this rank's FSDP shard of it */
    for (int t = 0; t < m->ntensors; t++) {
        size_t i0, i1;
        if (!model_owned_part(m, t, &i0, &i1)) continue;
        int u = m->tensor_unit[t];
        size_t g = m->tensors[t].offset + i0;
        adamw_update(fsdp_shard_at(m, m->params, u, g), fsdp_shard_at(m, m->grads, u, g),
                     fsdp_shard_at(m, m->m, u, g), fsdp_shard_at(m, m->v, u, g), i1 - i0, hp, step,
                     clip, m->tensors[t].decay);
    }
}

void model_save_params(model *m, const char *path) { model_save_slab(m, m->params, path); }
void model_save_grads(model *m, const char *path) { model_save_slab(m, m->grads, path); }

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
