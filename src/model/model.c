/* model.c — the model on one rank: its buffers (one table, allocated in one walk), and the
 * forward and backward lists of kernel calls (DESIGN.md §1), each technique a named call. */
#include "model/model_int.h"

#include "core/check.h"
#include "core/mem.h"
#include "core/trace.h"
#include "core/watchdog.h"
#include "kernels/kernels.h"
#include "kernels/typed.h"
#include "memory/offload.h"
#include "model/ckpt_tier.h"
#include "parallel/cp_attention.h"

#include <stdlib.h>
#include <string.h>

/* Tensors the forward saves for the backward of one layer (T = T_loc rows on this rank). With
 * checkpointing every layer shares one set (the layer being recomputed), x_in apart. Elements of
 * the run's type (opt.dtype) unless typed float (DESIGN.md §5.1). */
typedef struct {
    void *x_in;              /* (T, C) layer input (residual stream): the checkpoint */
    cp_attention_saved attn; /* o (T, NH*HS), log-sum-exp, and q, k, v for plain Ulysses */
    void *x_mid;             /* (T, C) residual after attention (saved, or the recompute's;
                                with checkpointing and a tiled MLP it is dh) */
    void *gate;              /* (T, F) untiled MLP only */
    void *up;                /* (T, F) untiled MLP only */
    void *act;               /* (T, F) silu(gate) * up, untiled MLP only */
} layer_acts;

struct offload_store;

struct model {
    model_config cfg;
    model_options opt;
    int T;                   /* T_loc: tokens per forward on this rank */
    int P;                   /* context-parallel degree */
    int tile_mlp, tile_loss; /* effective tile sizes (T_loc when untiled) */
    comm_ctx *comm;

    param_table params; /* the tensors and the units */
    param_store *ps;    /* params, grads, AdamW moments: this rank's shards (all without FSDP) */
    cp_attention *attn; /* stage buffers of the attention (plain Ulysses or UPipe) */
    struct offload_store *offload; /* checkpoint offload, NULL when resident */
    ckpt_tier *tier;               /* or to host memory (a device; --offload-host-limit) */
    layer_acts *acts;              /* (L) */

    /* shared scratch: void * in the run's type, float * fp32 (DESIGN.md §5.1) */
    typed_ctx tk;         /* the run's element type and the bf16 kernels' fp32 workspace */
    void *x_final;        /* (T, C) output of the last layer = dh (dead before the backward);
                             with the offload store the store's buffer holds it instead */
    void *h;              /* (T, C) rmsnorm output (attention, then MLP); recomputed in backward */
    float *rstd1, *rstd2; /* (T) */
    float *inv_freq;      /* (HS/2) */
    float *rope_cos, *rope_sin;         /* (T, HS/2) at this rank's global positions */
    void *gate_t, *up_t, *act_t, *dact; /* (tile_mlp, F) MLP tiles (dact also untiled) */
    float *xf, *rstdf, *logits, *dxf;   /* loss tiles: (tile_loss, C), (.), (., V), (., C) */
    void *dres;                         /* (T, C) gradient of the residual stream */
    void *dh;                           /* (T, C) (training only) */
    void *dh_t;                /* (tile_mlp, C) the MLP backward's rows of dh when tiled; else dh */
    int32_t *inputs, *targets; /* (T) */
    int32_t *window;           /* (T * P) the whole window's inputs, every rank (opt.docs only) */
    int32_t *doc_start;        /* (T * P) first position of each token's document (opt.docs only) */
    /* a device backend's copies of the host-side tables above (else the same pointers), sent by
     * send_window before a pass */
    int32_t *d_inputs, *d_targets, *d_doc_start;
    float *d_rope_cos, *d_rope_sin;
    mem_space space; /* where the tensors live (the backend's space) */
    int tables_sent; /* the RoPE tables are on the device (model_set_documents clears it) */
    long step;       /* the training step, for a device error's line (model_set_step) */

    void **owned; /* the buffers of the activation table, freed by model_free */
    int nowned, owned_cap;
};

/* ---- buffers -------------------------------------------------------------------------------- */

/* One row of the activation table: where the buffer goes, its category, element type and size
 * in elements. */
typedef struct {
    void **dst;   /* a buffer of the run's type (void *) */
    float **fdst; /* or an fp32 one */
    mem_category cat;
    mem_dtype dt;
    size_t n;
} buf_row;

typedef struct {
    buf_row *rows;
    int n, cap;
} buf_table;

static void add_row(buf_table *t, buf_row r) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->rows = realloc(t->rows, sizeof *t->rows * (size_t)t->cap);
        UP_CHECK(t->rows, "out of memory");
    }
    t->rows[t->n++] = r;
}

/* A buffer of type dt (the run's: a void * field), and an fp32 one (a float * field). */
static void want(buf_table *t, int cond, void **dst, mem_category cat, mem_dtype dt, size_t n) {
    if (cond) add_row(t, (buf_row){dst, NULL, cat, dt, n});
}
static void wantf(buf_table *t, int cond, float **dst, mem_category cat, size_t n) {
    if (cond) add_row(t, (buf_row){NULL, dst, cat, MEM_DTYPE_F32, n});
}

/* With checkpointing and a tiled MLP the recompute's x_mid lives in dh: it is read only by the
 * MLP's backward, whose dh rows then go through the tile buffer dh_t, and dh fills only after it,
 * in the attention's backward. */
static int x_mid_in_dh(const model *m) {
    return m->opt.checkpoint && !m->opt.forward_only && m->tile_mlp < m->T;
}

/* Every buffer the model itself holds (the attention module, the parameter store and the
 * offload store hold theirs): the saved tensors of each layer, one shared set when layers are
 * recomputed, and the scratch of the forward and backward lists (DESIGN.md §5). Element types
 * (§5.1): st, the run's --dtype, for the residual stream, its gradient and every tensor the
 * matmuls read or write (saved or scratch, tiled MLP or not: a tile holds what the untiled
 * buffer would); fp32 for statistics (log-sum-exp, the norms' rstd), the RoPE tables and the
 * loss tiles. */
static void activation_table(model *m, buf_table *t, const cp_attention_shape *as) {
    const model_config *c = &m->cfg;
    size_t T = (size_t)m->T, C = c->C, F = c->F, V = c->V, HS = c->HS;
    size_t tm = (size_t)m->tile_mlp, tl = (size_t)m->tile_loss;
    int tiled_mlp = m->tile_mlp < m->T, ckpt = m->opt.checkpoint;
    int offload = m->opt.offload_dir != NULL, fwd = m->opt.forward_only;
    const mem_dtype st = m->opt.dtype;
    size_t att, lse, q, kv;
    cp_attention_saved_floats(as, &att, &lse, &q, &kv);
    for (int l = 0; l < c->L; l++) {
        layer_acts *a = &m->acts[l];
        int own = (!ckpt && !fwd) || l == 0; /* else the layer shares layer 0's set */
        want(t, !offload && !fwd, &a->x_in, MEM_CHECKPOINTS, st, T * C); /* fwd: dres instead */
        want(t, own && q, &a->attn.q, MEM_ATTENTION, st, q);
        want(t, own && kv, &a->attn.k, MEM_ATTENTION, st, kv);
        want(t, own && kv, &a->attn.v, MEM_ATTENTION, st, kv);
        want(t, own, &a->attn.att, MEM_ACTIVATIONS, st, att);
        wantf(t, own, &a->attn.lse, MEM_ACTIVATIONS, lse);
        /* a layer's forward pass writes x_mid into its output (model_x_mid_in_dh: the recompute
         * puts it in dh), so only saved and untiled-recompute sets own one */
        want(t, own && !fwd && !x_mid_in_dh(m), &a->x_mid, MEM_ACTIVATIONS, st, T * C);
        want(t, own && !tiled_mlp, &a->gate, MEM_ACTIVATIONS, st, up_mul(T, F));
        want(t, own && !tiled_mlp, &a->up, MEM_ACTIVATIONS, st, up_mul(T, F));
        want(t, own && !tiled_mlp, &a->act, MEM_ACTIVATIONS, st, up_mul(T, F));
    }
    want(t, 1, &m->h, MEM_WORKSPACE, st, T * C);
    wantf(t, 1, &m->rstd1, MEM_WORKSPACE, T);
    wantf(t, 1, &m->rstd2, MEM_WORKSPACE, T);
    want(t, tiled_mlp, &m->gate_t, MEM_WORKSPACE, st, up_mul(tm, F));
    want(t, tiled_mlp, &m->up_t, MEM_WORKSPACE, st, up_mul(tm, F));
    want(t, tiled_mlp, &m->act_t, MEM_WORKSPACE, st, up_mul(tm, F));
    want(t, !fwd, &m->dact, MEM_WORKSPACE, st, up_mul(tm, F));
    want(t, !fwd && tiled_mlp, &m->dh_t, MEM_WORKSPACE, st, tm * C);
    wantf(t, 1, &m->xf, MEM_WORKSPACE, tl * C);
    wantf(t, 1, &m->rstdf, MEM_WORKSPACE, tl);
    wantf(t, 1, &m->logits, MEM_WORKSPACE, up_mul(tl, V));
    wantf(t, !fwd, &m->dxf, MEM_WORKSPACE, tl * C);
    /* bf16: the fp32 row tiles of the kernels on stored tensors (kernels/typed.h); none in f32 */
    size_t maxw = C > F ? C : F, qd = (size_t)c->NH * HS;
    maxw = maxw > qd ? maxw : qd;
    m->tk.ws_n = backend_of(&m->tk)->workspace_floats(st, maxw, C);
    wantf(t, m->tk.ws_n > 0, &m->tk.ws, MEM_WORKSPACE, m->tk.ws_n);
    want(t, 1, &m->dres, MEM_WORKSPACE, st, T * C);  /* fwd: the residual stream */
    want(t, !fwd, &m->dh, MEM_WORKSPACE, st, T * C); /* also x_final, and x_mid (x_mid_in_dh) */
}

static void *owned_in(model *m, mem_space sp, mem_category cat, size_t bytes) {
    void *p = mem_alloc_in(sp, cat, bytes);
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

/* A buffer of the tensors' space. */
static void *owned_buffer(model *m, mem_category cat, size_t bytes) {
    return owned_in(m, m->space, cat, bytes);
}

/* A host-side table (filled by the host: the window, the RoPE tables) and its copy in the
 * tensors' space, the same buffer on the CPU backend. */
static void *owned_mirror(model *m, mem_category cat, size_t bytes, void **dev) {
    void *h = owned_in(m, MEM_SPACE_HOST, cat, bytes);
    *dev = m->space == MEM_SPACE_HOST ? h : owned_buffer(m, cat, bytes);
    return h;
}

/* The window and the RoPE tables to the device (nothing on the CPU backend). */
static void send_window(model *m) {
    if (m->space == MEM_SPACE_HOST) return;
    const backend_ops *be = backend_of(&m->tk);
    size_t T = (size_t)m->T, Tg = T * (size_t)m->P, half = (size_t)m->cfg.HS / 2;
    be->to_dev(m->d_inputs, m->inputs, T * sizeof(int32_t));
    be->to_dev(m->d_targets, m->targets, T * sizeof(int32_t));
    if (m->tables_sent) return; /* the same tables as the last pass */
    if (m->doc_start) be->to_dev(m->d_doc_start, m->doc_start, Tg * sizeof(int32_t));
    be->to_dev(m->d_rope_cos, m->rope_cos, T * half * sizeof(float));
    be->to_dev(m->d_rope_sin, m->rope_sin, T * half * sizeof(float));
    m->tables_sent = 1;
}

/* --offload: through ckpt_tier.h (a device, or --offload-host-limit), else all to the file with
 * one resident buffer, the residual stream, written out while it is read (offload.h). A store
 * that cannot open on some ranks (their disks) stops all of them together, before a collective. */
static void open_checkpoint_store(model *m, comm_ctx *comm) {
    const model_config *c = &m->cfg;
    size_t slot = mem_dtype_bytes(m->opt.dtype, up_mul((size_t)m->T, (size_t)c->C)); /* x_l */
    char err[512] = "";
    if (m->space != MEM_SPACE_HOST || m->opt.offload_host_limit) {
        ckpt_tier_spec ts = {c->L, slot, m->opt.offload_keep, m->opt.offload_host_limit,
                             m->opt.offload_dir};
        m->tier = ckpt_tier_init(backend_of(&m->tk), &ts, err, sizeof err);
        if (comm_any(comm, m->tier == NULL)) up_die_agreed(m->tier ? NULL : err);
        for (int l = 0; l < c->L; l++)
            m->acts[l].x_in = ckpt_tier_x(m->tier, l);
    } else if (mem_planning()) {
        mem_alloc(MEM_CHECKPOINTS, offload_buffer_bytes(slot, 1));
        mem_add_offloaded((long long)offload_store_bytes(slot, c->L));
    } else {
        m->offload = offload_open(m->opt.offload_dir, slot, c->L, 1, err, sizeof err);
        if (comm_any(comm, m->offload == NULL)) up_die_agreed(m->offload ? NULL : err);
    }
}

model *model_init(const model_config *cfg, int T, comm_ctx *comm, const model_options *opt) {
    model *m = calloc(1, sizeof *m);
    UP_CHECK(m, "out of memory");
    m->cfg = *cfg;
    m->opt = *opt;
    if (m->opt.forward_only) { /* nothing is kept for a backward: nothing to recompute */
        m->opt.offload_dir = NULL;
        m->opt.checkpoint = 0;
    }
    if (m->opt.offload_dir) m->opt.checkpoint = 1;
    m->comm = comm;
    m->tk.be = opt->be;
    m->step = -1; /* none yet */
    m->tk.dt = opt->dtype;
    m->space = backend_of(&m->tk)->space;
    m->P = comm->P;
    m->T = T;
    m->tile_mlp = opt->tile_mlp > 0 && opt->tile_mlp < T ? opt->tile_mlp : T;
    m->tile_loss = opt->tile_loss > 0 && opt->tile_loss < T ? opt->tile_loss : T;
    const model_config *c = &m->cfg;

    param_table_build(&m->params, c); /* model state (this rank's shards) */
    store_spec sp = {.unit_off = m->params.unit_off,
                     .nunits = m->params.nunits,
                     .tied_unit = c->tied ? 0 : -1,
                     .bwd_first = 1, /* the embedding's unit takes gradients only */
                     .sharded = opt->fsdp,
                     .grads = !opt->forward_only,
                     .wtype = opt->dtype,
                     .tk = &m->tk,
                     .offload = opt->offload_opt && !opt->forward_only,
                     .grads_on_device = opt->grads_on_device};
    m->ps = store_init(comm, &sp);

    /* the activation table, walked once */
    m->acts = calloc((size_t)c->L, sizeof *m->acts);
    UP_CHECK(m->acts, "out of memory");
    cp_attention_shape as = {.T_loc = T,
                             .P = m->P,
                             .C = c->C,
                             .NH = c->NH,
                             .NKV = c->NKV,
                             .HS = c->HS,
                             .U = opt->U ? opt->U : c->NH,
                             .keep_qkv = opt->U == 0,
                             .comm = comm,
                             .forward_only = opt->forward_only,
                             .overlap = model_pipe_wanted(opt, comm),
                             .dtype = opt->dtype,
                             .tk = &m->tk};
    buf_table t = {0};
    activation_table(m, &t, &as);
    for (int i = 0; i < t.n; i++) {
        void *p = owned_buffer(m, t.rows[i].cat, mem_dtype_bytes(t.rows[i].dt, t.rows[i].n));
        if (t.rows[i].dst)
            *t.rows[i].dst = p;
        else
            *t.rows[i].fdst = p;
    }
    free(t.rows);

    size_t ib = up_mul((size_t)T, sizeof(int32_t));
    m->inputs = owned_mirror(m, MEM_WORKSPACE, ib, (void **)&m->d_inputs);
    m->targets = owned_mirror(m, MEM_WORKSPACE, ib, (void **)&m->d_targets);
    size_t rb = up_mul(up_mul((size_t)T, (size_t)c->HS / 2), sizeof(float));
    m->rope_cos = owned_mirror(m, MEM_WORKSPACE, rb, (void **)&m->d_rope_cos);
    m->rope_sin = owned_mirror(m, MEM_WORKSPACE, rb, (void **)&m->d_rope_sin);
    m->inv_freq = owned_in(m, MEM_SPACE_HOST, MEM_WORKSPACE, sizeof(float) * (size_t)(c->HS / 2));
    if (opt->docs) {
        size_t Tg = up_mul((size_t)T, (size_t)m->P);
        m->window = owned_in(m, MEM_SPACE_HOST, MEM_WORKSPACE, up_mul(Tg, sizeof(int32_t)));
        m->doc_start =
            owned_mirror(m, MEM_WORKSPACE, up_mul(Tg, sizeof(int32_t)), (void **)&m->d_doc_start);
    }
    if (x_mid_in_dh(m)) m->acts[0].x_mid = m->dh;
    if (!m->dh_t) m->dh_t = m->dh; /* untiled: the MLP's backward writes dh's rows */
    m->x_final = m->dh; /* the last layer's output lives only until the loss (training) */
    int shared = m->opt.checkpoint || m->opt.forward_only;
    for (int l = 1; shared && l < c->L; l++) { /* one shared set, own checkpoints */
        void *x_in = m->acts[l].x_in;
        m->acts[l] = m->acts[0];
        m->acts[l].x_in = x_in;
    }
    as.rope_cos = m->d_rope_cos;
    as.rope_sin = m->d_rope_sin;
    as.doc_start = m->d_doc_start; /* NULL without documents: the plain causal kernel */
    m->attn = cp_attention_init(&as);

    if (m->opt.offload_dir) open_checkpoint_store(m, comm);
    if (mem_planning()) return m;

    rope_inv_freq(m->inv_freq, c->HS, c->rope_theta);
    if (c->rope.type == ROPE_SCALING_LLAMA3)
        rope_llama3_scale(m->inv_freq, c->HS, c->rope.factor, c->rope.low_freq_factor,
                          c->rope.high_freq_factor, c->rope.original_max_pos);
    /* RoPE at global positions: this rank holds tokens cp_rank * T_loc .. */
    rope_tables(m->rope_cos, m->rope_sin, m->inv_freq, (int64_t)comm->cp_rank * T, T, c->HS);
    return m;
}

void model_free(model *m) {
    if (!m) return;
    if (m->offload) offload_close(m->offload);
    ckpt_tier_free(m->tier);
    cp_attention_free(m->attn);
    store_free(m->ps);
    for (int i = 0; i < m->nowned; i++)
        mem_free(m->owned[i]);
    free(m->owned);
    free(m->acts);
    param_table_free(&m->params);
    free(m);
}

/* ---- what jobs read ------------------------------------------------------------------------- */

model_window model_window_of(const model *m) {
    return (model_window){m->T,      m->P,       (long)m->comm->cp_rank * m->T,
                          m->inputs, m->targets, m->doc_start};
}
comm_ctx *model_comm(const model *m) {
    return m->comm;
}
size_t model_nparams(const model *m) {
    return m->params.nparams;
}
int model_ntensors(const model *m) {
    return m->params.ntensors;
}
const char *model_tensor_name(const model *m, int t) {
    return m->params.tensors[t].name;
}
const model_config *model_cfg(const model *m) {
    return &m->cfg;
}
const param_table *model_table(const model *m) {
    return &m->params;
}
param_store *model_store(const model *m) {
    return m->ps;
}
const backend_ops *model_backend(const model *m) {
    return backend_of(&m->tk);
}
model_window_bufs model_window_buffers(model *m) {
    return (model_window_bufs){m->T,      m->P,       (long)m->comm->cp_rank * m->T,
                               m->inputs, m->targets, m->window};
}
int model_sharded(const model *m) {
    return store_sharded(m->ps);
}
double model_attention_seconds(model *m, int reset) {
    return cp_attention_seconds(m->attn, reset);
}
int model_attention_overlaps(const model *m) {
    return cp_attention_overlaps(m->attn);
}

/* ---- MLP: untiled (intermediates saved) or over tiles of tile_mlp tokens (recomputed) ------- */

/* Element i of a tensor of the run's type. */
static void *at(const model *m, const void *p, size_t i) {
    return dtype_at(m->opt.dtype, p, i);
}

/* The (n, F) intermediates of the tile starting at token t0: the shared tile buffers, or the
 * saved tensors' rows when untiled (a single tile). Returns n. */
static int mlp_tile(model *m, const layer_acts *a, int t0, void **gate, void **up, void **act) {
    int T = m->T, N = m->tile_mlp, n = T - t0 < N ? T - t0 : N;
    size_t rf = (size_t)t0 * m->cfg.F;
    int tiled = N < T;
    *gate = tiled ? m->gate_t : at(m, a->gate, rf);
    *up = tiled ? m->up_t : at(m, a->up, rf);
    *act = tiled ? m->act_t : at(m, a->act, rf);
    return n;
}

/* x_out = x_mid + mlp(x_mid), tile by tile; x_out may be x_mid (in place: a tile reads only its
 * own rows), or NULL (the recompute of an untiled MLP: only gate, up and act are wanted). */
static void mlp_forward(model *m, const layer_weights *w, layer_acts *a, const void *x_mid,
                        void *x_out) {
    const model_config *c = &m->cfg;
    const typed_ctx *tk = &m->tk;
    int T = m->T, C = c->C, F = c->F;
    for (int t0 = 0; t0 < T; t0 += m->tile_mlp) {
        void *gate, *up, *act;
        int n = mlp_tile(m, a, t0, &gate, &up, &act);
        size_t r = (size_t)t0 * C;
        void *h2 = at(m, m->h, r);
        watchdog_tick();
        typed_rmsnorm_forward(tk, h2, 0, m->rstd2 + t0, at(m, x_mid, r), w->mlp_norm, n, C, c->eps);
        typed_mm_fwd(tk, gate, h2, w->wg, n, C, F, 0);          // (n, F)
        typed_mm_fwd(tk, up, h2, w->wu, n, C, F, 0);            // (n, F)
        typed_swiglu_forward(tk, act, gate, up, (size_t)n * F); // (n, F)
        if (!x_out) continue;
        if (x_out != x_mid) typed_copy(tk, at(m, x_out, r), at(m, x_mid, r), (size_t)n * C);
        typed_mm_fwd(tk, at(m, x_out, r), act, w->wd, n, F, C, 1); // x_out = x_mid + mlp
    }
}

/* m->dres: d loss / d x_out on entry, d loss / d x_mid on return (the residual adds). */
static void mlp_backward(model *m, const layer_weights *w, const layer_weights *g,
                         const layer_acts *a) {
    const model_config *c = &m->cfg;
    const typed_ctx *tk = &m->tk;
    int T = m->T, C = c->C, F = c->F, tiled = m->tile_mlp < T;
    for (int t0 = 0; t0 < T; t0 += m->tile_mlp) {
        void *gate, *up, *act;
        int n = mlp_tile(m, a, t0, &gate, &up, &act);
        size_t r = (size_t)t0 * C;
        void *h2 = at(m, m->h, r), *x_mid = at(m, a->x_mid, r), *dres = at(m, m->dres, r);
        watchdog_tick();
        // recompute h2 = rmsnorm(x_mid) (cheap, not saved) and, when tiled, gate, up, act
        typed_rmsnorm_forward(tk, h2, 0, m->rstd2 + t0, x_mid, w->mlp_norm, n, C, c->eps);
        if (tiled) {
            typed_mm_fwd(tk, gate, h2, w->wg, n, C, F, 0);
            typed_mm_fwd(tk, up, h2, w->wu, n, C, F, 0);
            typed_swiglu_forward(tk, act, gate, up, (size_t)n * F);
        }
        // x_out = x_mid + act Wd^T
        typed_mm_bwd_set(tk, m->dact, g->wd, dres, act, w->wd, n, F, C);
        // act = silu(gate) * up   (gradients overwrite gate and up in place)
        typed_swiglu_backward(tk, gate, up, m->dact, gate, up, (size_t)n * F);
        // gate = h2 Wg^T, up = h2 Wu^T
        void *dh2 = tiled ? m->dh_t : at(m, m->dh, r); /* dh may hold x_mid (x_mid_in_dh) */
        typed_mm_bwd_set(tk, dh2, g->wg, gate, h2, w->wg, n, C, F);
        typed_mm_bwd(tk, dh2, g->wu, up, h2, w->wu, n, C, F);
        // h2 = rmsnorm(x_mid)
        typed_rmsnorm_backward(tk, dres, g->mlp_norm, dh2, 0, x_mid, w->mlp_norm, m->rstd2 + t0, n,
                               C);
    }
}

/* ---- packed documents (DESIGN.md §1.1) ---------------------------------------------------- */

int model_set_documents(model *m, int32_t sep) {
    m->tables_sent = 0; /* new starts and positions for the device (send_window) */
    int Tg = m->T * m->P, ndocs = 1, half = m->cfg.HS / 2;
    int32_t cur = 0;
    for (int i = 0; i < Tg; i++) {
        if (m->window[i] == sep) {
            cur = i;
            ndocs += i > 0;
        }
        m->doc_start[i] = cur;
    }
    /* RoPE positions of this rank's tokens: offsets from their document's start, one contiguous
     * run per document */
    int g0 = m->comm->cp_rank * m->T;
    for (int i = 0; i < m->T;) {
        int32_t st = m->doc_start[g0 + i];
        int j = i + 1;
        while (j < m->T && m->doc_start[g0 + j] == st)
            j++;
        size_t r = (size_t)i * half;
        rope_tables(m->rope_cos + r, m->rope_sin + r, m->inv_freq, (int64_t)g0 + i - st, j - i,
                    m->cfg.HS);
        i = j;
    }
    return ndocs;
}

/* ---- layers --------------------------------------------------------------------------------- */

static cp_attention_weights attn_weights(const layer_weights *w) {
    return (cp_attention_weights){w->wq, w->wk, w->wv};
}

/* The weights of unit u as the matmuls read them, and its gradients (fp32). */
static layer_weights layer_w(model *m, int u) {
    return param_layer_view(&m->cfg, store_acquire(m->ps, u), m->opt.dtype);
}
static layer_weights layer_g(model *m, int u) {
    return param_layer_view(&m->cfg, store_grads(m->ps, u), MEM_DTYPE_F32);
}

/* How a layer's forward runs. SAVE keeps x_mid for the backward (no checkpointing). PASS (the
 * forward of checkpointing and of evaluation) needs no x_mid afterwards: it is built in x_out,
 * which may be x_in itself (the offload store's one buffer: with store given, x_in is written
 * to slot l while the attention runs, before it changes). RECOMPUTE (backward, checkpointing)
 * rebuilds what the backward reads: att, log-sum-exp and x_mid, and gate, up, act of an untiled
 * MLP (a tiled one recomputes its tiles in the backward), but no output. */
typedef enum { LAYER_SAVE, LAYER_PASS, LAYER_RECOMPUTE } layer_mode;

/* Names what runs for a device error's line (layer -1: none). */
static void where(model *m, const char *what, int layer) {
    const backend_ops *be = backend_of(&m->tk);
    if (be->set_where) be->set_where(what, layer, m->step);
}

void model_set_step(model *m, long step) {
    m->step = step + 1; /* as the step lines count */
}

static void layer_forward(model *m, int l, void *x_in, void *x_out, layer_mode mode,
                          offload_store *store) {
    const model_config *c = &m->cfg;
    const typed_ctx *tk = &m->tk;
    int T = m->T, C = c->C, in_place = x_out == x_in;
    layer_weights w = layer_w(m, l + 1);
    cp_attention_weights wa = attn_weights(&w);
    layer_acts *a = &m->acts[l];
    void *x_mid = mode == LAYER_PASS ? x_out : a->x_mid;
    watchdog_tick();
    where(m, mode == LAYER_RECOMPUTE ? "the recompute" : "the forward", l);

    typed_rmsnorm_forward(tk, m->h, 0, m->rstd1, x_in, w.attn_norm, T, C, c->eps); // h (T, C)
    if (store) offload_write_keep(store, l, x_in);      // x_l to its slot
    cp_attention_forward(m->attn, m->h, &wa, &a->attn); // att (T, NH*HS)
    if (store) offload_written(store, x_in);
    if (!in_place) typed_copy(tk, x_mid, x_in, (size_t)T * C);
    typed_mm_fwd(tk, x_mid, a->attn.att, w.wo, T, c->NH * c->HS, C, 1); // x_mid = x + o Wo^T
    if (mode != LAYER_RECOMPUTE)
        mlp_forward(m, &w, a, x_mid, x_out); // x_out = x_mid + mlp
    else if (m->tile_mlp == T)
        mlp_forward(m, &w, a, x_mid, NULL); // gate, up, act
}

/* m->dres: d loss / d x_out on entry, d loss / d x_in on return. */
static void layer_backward(model *m, int l, const void *x_in) {
    const model_config *c = &m->cfg;
    const typed_ctx *tk = &m->tk;
    int T = m->T, C = c->C, qd = c->NH * c->HS;
    layer_weights w = layer_w(m, l + 1), g = layer_g(m, l + 1);
    cp_attention_weights wa = attn_weights(&w), ga = attn_weights(&g);
    layer_acts *a = &m->acts[l];
    where(m, "the backward", l);

    mlp_backward(m, &w, &g, a);
    // x_mid = x_in + att Wo^T: dWo here, d att stage by stage inside the attention's backward
    typed_mm_bwd(tk, NULL, g.wo, m->dres, a->attn.att, w.wo, T, qd, C);
    // recompute h = rmsnorm(x_in) (cheap, not saved)
    typed_rmsnorm_forward(tk, m->h, 0, m->rstd1, x_in, w.attn_norm, T, C, c->eps);
    // att = attention(h)
    typed_zero(tk, m->dh, (size_t)T * C);
    cp_attention_backward(m->attn, m->h, &wa, &ga, m->dres, w.wo, &a->attn, m->dh);
    // h = rmsnorm(x_in)
    typed_rmsnorm_backward(tk, m->dres, g.attn_norm, m->dh, 0, x_in, w.attn_norm, m->rstd1, T, C);
}

/* The logits (n, V) of the loss tile at token t0: final norm into xf (fp32), then the LM head. */
static void loss_tile_logits(model *m, const void *x_final, int t0, int n, const void *wn,
                             const void *wlm) {
    const model_config *c = &m->cfg;
    watchdog_tick();
    typed_rmsnorm_forward(&m->tk, m->xf, 1, m->rstdf, at(m, x_final, (size_t)t0 * c->C), wn, n,
                          c->C, c->eps);                                    // (n, C)
    typed_matmul_forward_f32(&m->tk, m->logits, m->xf, wlm, n, c->C, c->V); // (n, V)
}

/* Final norm, LM head and cross-entropy over tiles of tile_loss tokens; the loss's backward runs
 * here too, so the (T, V) logits never exist: dres := d loss / d x_final. */
static double loss_forward_backward(model *m, const void *x_final, float grad_scale) {
    const model_config *c = &m->cfg;
    const typed_ctx *tk = &m->tk;
    const backend_ops *be = backend_of(tk);
    int T = m->T, C = c->C, V = c->V, N = m->tile_loss, head = c->L + 1;
    /* the head unit (final norm, then lm_head unless tied: then the embedding's weights) */
    void *wn = store_acquire(m->ps, head);
    float *gn = store_grads(m->ps, head);
    const void *wlm = c->tied ? store_acquire(m->ps, 0) : at(m, wn, (size_t)C);
    float *glm = c->tied ? store_grads(m->ps, 0) : gn + C;
    double loss = 0;
    where(m, "the loss", -1);
    typed_zero(tk, m->dres, (size_t)T * C);
    for (int t0 = 0; t0 < T; t0 += N) {
        int n = T - t0 < N ? T - t0 : N;
        size_t r = (size_t)t0 * C;
        uint64_t tt = trace_begin();
        loss_tile_logits(m, x_final, t0, n, wn, wlm);                                    // (n, V)
        loss += be->cross_entropy_fused(m->logits, m->d_targets + t0, n, V, grad_scale); // dlogits
        // logits = xf Wlm^T
        be->zero_f32(m->dxf, (size_t)n * C);
        typed_matmul_backward_f32(tk, m->dxf, glm, m->logits, m->xf, wlm, n, C, V);
        // xf = rmsnorm(x_final)
        typed_rmsnorm_backward(tk, at(m, m->dres, r), gn, m->dxf, 1, at(m, x_final, r), wn,
                               m->rstdf, n, C);
        trace_end2(tt, "loss", "loss_tile", "tile", t0 / N, "tokens", n);
    }
    store_release(m->ps, head); /* a tied embedding's: after its own backward */
    return loss;
}

/* The loss tiles of a forward-only pass: final norm, LM head, then per row the loss and top
 * prediction (when asked for) before cross_entropy_fused adds the tile's loss exactly as
 * loss_forward_backward does (its gradient output is dropped). */
static double loss_forward(model *m, const void *x_final, double *loss, int32_t *pred) {
    const model_config *c = &m->cfg;
    const backend_ops *be = backend_of(&m->tk);
    int T = m->T, C = c->C, V = c->V, N = m->tile_loss, head = c->L + 1;
    void *wn = store_acquire(m->ps, head);
    const void *wlm = c->tied ? store_acquire(m->ps, 0) : at(m, wn, (size_t)C);
    double sum = 0;
    for (int t0 = 0; t0 < T; t0 += N) {
        int n = T - t0 < N ? T - t0 : N;
        uint64_t tt = trace_begin();
        loss_tile_logits(m, x_final, t0, n, wn, wlm); // (n, V)
        if (loss || pred)
            be->cross_entropy_rows(m->logits, m->d_targets + t0, n, V, loss ? loss + t0 : NULL,
                                   pred ? pred + t0 : NULL);
        sum += be->cross_entropy_fused(m->logits, m->d_targets + t0, n, V, 1.0f);
        trace_end2(tt, "loss", "loss_tile", "tile", t0 / N, "tokens", n);
    }
    return sum;
}

double model_evaluate(model *m, double *loss, int32_t *pred) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C, L = c->L;
    void *x = m->dres; /* the residual stream, updated in place layer by layer */
    send_window(m);
    store_begin(m->ps, STORE_FORWARD);
    void *wte = store_acquire(m->ps, 0);
    typed_embedding_forward(&m->tk, x, m->d_inputs, wte, T, C); // (T, C)
    for (int l = 0; l < L; l++) {
        uint64_t tt = trace_begin();
        layer_forward(m, l, x, x, LAYER_PASS, NULL);
        trace_end1(tt, "layer", "forward", "layer", l);
    }
    return loss_forward(m, x, loss, pred);
}

double model_forward(model *m, float grad_scale) {
    const model_config *c = &m->cfg;
    int T = m->T, C = c->C, L = c->L;
    /* with the offload store, its one buffer carries the residual stream in place, each x_l
     * written to its slot while layer l's attention runs */
    void *x = m->offload ? offload_acquire(m->offload) : m->acts[0].x_in;
    layer_mode mode = m->opt.checkpoint ? LAYER_PASS : LAYER_SAVE;
    send_window(m);
    store_begin(m->ps, STORE_FORWARD); /* the optimizer may have changed the parameters */
    void *wte = store_acquire(m->ps, 0);
    typed_embedding_forward(&m->tk, x, m->d_inputs, wte, T, C); // (T, C)
    for (int l = 0; l < L; l++) {
        void *x_out = m->offload ? x : l + 1 == L ? m->x_final : m->acts[l + 1].x_in;
        if (m->tier) ckpt_tier_forward(m->tier, l);
        uint64_t tt = trace_begin();
        layer_forward(m, l, x, x_out, mode, m->offload);
        trace_end1(tt, "layer", "forward", "layer", l);
        x = x_out;
    }
    if (m->tier) ckpt_tier_forward(m->tier, L); /* the last file copy on its way */
    double loss = loss_forward_backward(m, x, grad_scale);
    if (m->offload) offload_release(m->offload, x);
    return loss;
}

void model_backward(model *m) {
    const model_config *c = &m->cfg;
    store_begin(m->ps, STORE_BACKWARD);
    for (int l = c->L - 1; l >= 0; l--) {
        if (m->tier) ckpt_tier_backward(m->tier, l);
        void *x_in = m->offload ? offload_wait(m->offload, l) : m->acts[l].x_in;
        uint64_t tt = trace_begin();
        if (m->opt.checkpoint) {
            layer_forward(m, l, x_in, NULL, LAYER_RECOMPUTE, NULL);
            trace_end1(tt, "layer", "recompute", "layer", l);
            tt = trace_begin();
        }
        layer_backward(m, l, x_in);
        trace_end1(tt, "layer", "backward", "layer", l);
        store_release(m->ps, l + 1); /* right after the unit's backward */
        if (m->offload) offload_release(m->offload, x_in);
    }
    // x_0 = embed[inputs]
    typed_embedding_backward(&m->tk, store_grads(m->ps, 0), m->dres, m->d_inputs, m->T, c->C);
    store_release(m->ps, 0);
}
