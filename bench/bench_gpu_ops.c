/* bench_gpu_ops.c — where a GPU step's time goes: each operation of the CUDA backend timed alone
 * at one model's shapes (the median of 5 runs after one warm-up, the stream drained around each),
 * with its rate: TFLOP/s for products and attention, GB/s of its tensors for the rest.
 *
 *   bench_gpu_ops [T] [C F NH NKV HS V] [f32|bf16]
 *   (default: T = 8192 at the Llama-3.2-1B shape 2048 8192 32 8 64 128256, bf16; the loss tile is
 *    2048 tokens, as --tile-loss gives at C = 2048). UPIPE_CUDA_MODULE names the module.
 * Without a GPU it prints why and exits 77. */
#include "bench_util.h"
#include "kernels/backend.h"
#include "kernels/kernels.h"

#include <math.h>

static const backend_ops *cu;
static typed_ctx tc;

static void *dzero(size_t bytes) {
    void *p = cu->alloc(bytes);
    if (!p) {
        fprintf(stderr, "bench_gpu_ops: out of GPU memory for %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

/* Random ids in [0, V) on the device. */
static int32_t *ids(size_t n, int V) {
    int32_t *h = malloc(n * sizeof *h), *d = dzero(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = (int32_t)((i * 2654435761u) % (unsigned)V);
    cu->to_dev(d, h, n * sizeof *h);
    free(h);
    return d;
}

/* Small random values in a stored tensor (bf16 or f32): finite inputs for every op. */
static void *randt(mem_dtype dt, size_t n, float scale) {
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = scale * (float)((int)((i * 2246822519u) % 2001u) - 1000) / 1000.0f;
    void *d = dzero(mem_dtype_bytes(dt, n));
    float *df = dzero(n * sizeof *h);
    cu->to_dev(df, h, n * sizeof *h);
    cu->convert(dt, d, MEM_DTYPE_F32, df, n);
    cu->sync();
    cu->free(df);
    free(h);
    return d;
}

typedef void (*op_fn)(void *ctx);

/* Median seconds of fn over 5 runs after a warm-up. */
static double timed(op_fn fn, void *ctx) {
    double t[5];
    fn(ctx);
    cu->sync();
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        fn(ctx);
        cu->sync();
        t[r] = now_s() - t0;
    }
    return median(t, 5);
}

static void row(const char *name, double s, double flops, double bytes) {
    if (flops > 0)
        printf("  %-34s %9.3f ms %9.1f TFLOP/s\n", name, s * 1e3, flops / s / 1e12);
    else
        printf("  %-34s %9.3f ms %9.1f GB/s\n", name, s * 1e3, bytes / s / 1e9);
}

typedef struct {
    void *out, *inp, *w, *dout;
    float *dw;
    int N, IC, OC;
} mm_case;

static void mm_fwd(void *c) {
    mm_case *m = c;
    cu->matmul_forward(&tc, m->out, m->OC, m->inp, m->IC, m->w, m->IC, m->N, m->IC, m->OC, 0);
}
static void mm_bwd(void *c) {
    mm_case *m = c;
    cu->matmul_backward(&tc, m->inp, m->IC, 0, m->dw, m->IC, m->dout, m->OC, m->inp, m->IC, m->w,
                        m->IC, m->N, m->IC, m->OC);
}
static void mm_fwd_f32(void *c) {
    mm_case *m = c;
    cu->matmul_forward_f32(&tc, m->out, m->inp, m->w, m->N, m->IC, m->OC);
}
static void mm_bwd_f32(void *c) {
    mm_case *m = c;
    cu->matmul_backward_f32(&tc, m->inp, m->dw, m->dout, m->inp, m->w, m->N, m->IC, m->OC);
}

static void products(mem_dtype dt, int T, int C, int F, int NH, int NKV, int HS, int V) {
    int shapes[][3] = {{T, C, NH * HS}, {T, C, NKV * HS}, {T, NH * HS, C}, {T, C, F}, {T, F, C}};
    const char *names[] = {"q proj", "k or v proj", "o proj", "gate or up proj", "down proj"};
    for (int i = 0; i < 5; i++) {
        mm_case m = {.N = shapes[i][0], .IC = shapes[i][1], .OC = shapes[i][2]};
        size_t ni = (size_t)m.N * m.IC, no = (size_t)m.N * m.OC, nw = (size_t)m.OC * m.IC;
        m.inp = randt(dt, ni, 1), m.out = dzero(mem_dtype_bytes(dt, no));
        m.dout = randt(dt, no, 1), m.w = randt(dt, nw, 0.02f), m.dw = dzero(nw * 4);
        double fl = 2.0 * m.N * m.IC * m.OC;
        char nm[64];
        snprintf(nm, sizeof nm, "%s forward", names[i]);
        row(nm, timed(mm_fwd, &m), fl, 0);
        snprintf(nm, sizeof nm, "%s backward (dinp, dw)", names[i]);
        row(nm, timed(mm_bwd, &m), 2 * fl, 0);
        cu->free(m.inp), cu->free(m.out), cu->free(m.dout), cu->free(m.w), cu->free(m.dw);
    }
    mm_case m = {.N = C < T ? C : T, .IC = C, .OC = V}; /* one loss tile of --tile-loss */
    size_t ni = (size_t)m.N * m.IC, no = (size_t)m.N * m.OC, nw = (size_t)m.OC * m.IC;
    m.inp = randt(MEM_DTYPE_F32, ni, 1), m.out = dzero(no * 4),
    m.dout = randt(MEM_DTYPE_F32, no, 1);
    m.w = randt(dt, nw, 0.02f), m.dw = dzero(nw * 4);
    double fl = 2.0 * m.N * m.IC * m.OC;
    char nm[64];
    snprintf(nm, sizeof nm, "LM head forward (tile %d)", m.N);
    row(nm, timed(mm_fwd_f32, &m), fl, 0);
    snprintf(nm, sizeof nm, "LM head backward (tile %d)", m.N);
    row(nm, timed(mm_bwd_f32, &m), 2 * fl, 0);
    cu->free(m.inp), cu->free(m.out), cu->free(m.dout), cu->free(m.w), cu->free(m.dw);
}

typedef struct {
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *lse;
    int T, NH, NKV, HS;
} att_case;

static void att_fwd(void *c) {
    att_case *a = c;
    cu->attention_forward(&tc, a->o, a->lse, a->q, a->k, a->v, NULL, a->T, a->NH, a->NKV, a->HS,
                          NULL);
}
static void att_bwd(void *c) {
    att_case *a = c;
    cu->attention_backward(&tc, a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->o, a->lse, NULL,
                           a->T, a->NH, a->NKV, a->HS, NULL);
}

static void attention(mem_dtype dt, int T, int NH, int NKV, int HS) {
    att_case a = {.T = T, .NH = NH, .NKV = NKV, .HS = HS};
    size_t nq = (size_t)T * NH * HS, nk = (size_t)T * NKV * HS;
    a.q = randt(dt, nq, 1), a.k = randt(dt, nk, 1), a.v = randt(dt, nk, 1);
    a.o = dzero(mem_dtype_bytes(dt, nq)), a.dout = randt(dt, nq, 1);
    a.dq = dzero(mem_dtype_bytes(dt, nq)), a.dk = dzero(mem_dtype_bytes(dt, nk));
    a.dv = dzero(mem_dtype_bytes(dt, nk)), a.lse = dzero((size_t)NH * T * 4);
    double pairs = (double)T * (T + 1) / 2, fl = 4.0 * NH * HS * pairs; /* causal */
    char nm[64];
    snprintf(nm, sizeof nm, "attention forward (HS %d)", HS);
    row(nm, timed(att_fwd, &a), fl, 0);
    snprintf(nm, sizeof nm, "attention backward (HS %d)", HS);
    row(nm, timed(att_bwd, &a), 2 * fl, 0);
    void *b[] = {a.q, a.k, a.v, a.o, a.dout, a.dq, a.dk, a.dv, a.lse};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        cu->free(b[i]);
}

typedef struct {
    void *x, *y, *w, *g, *u;
    float *rstd, *dw, *cs, *sn, *logits;
    int32_t *tok;
    int N, C, V, NH, HS;
    size_t n;
} el_case;

static void rms_f(void *c) {
    el_case *e = c;
    cu->rmsnorm_forward(&tc, e->y, 0, e->rstd, e->x, e->w, e->N, e->C, 1e-5f);
}
static void rms_b(void *c) {
    el_case *e = c;
    cu->rmsnorm_backward(&tc, e->x, e->dw, e->y, 0, e->x, e->w, e->rstd, e->N, e->C);
}
static void swi_f(void *c) {
    el_case *e = c;
    cu->swiglu_forward(&tc, e->y, e->g, e->u, e->n);
}
static void swi_b(void *c) {
    el_case *e = c;
    cu->swiglu_backward(&tc, e->g, e->u, e->y, e->g, e->u, e->n);
}
static void rope_f(void *c) {
    el_case *e = c;
    cu->rope_forward(&tc, e->x, e->cs, e->sn, e->N, e->NH, e->HS);
}
static void emb_b(void *c) {
    el_case *e = c;
    cu->embedding_backward(&tc, e->dw, e->x, e->tok, e->N, e->C);
}
static void ce(void *c) {
    el_case *e = c;
    cu->cross_entropy_fused(e->logits, e->tok, e->N < e->C ? e->N : e->C, e->V, 1.0f);
}

static void elementwise(mem_dtype dt, int T, int C, int F, int NH, int HS, int V) {
    el_case e = {.N = T, .C = C, .V = V, .NH = NH, .HS = HS, .n = (size_t)T * F};
    size_t es = mem_dtype_size(dt), tc_ = (size_t)T * C;
    e.x = randt(dt, tc_ > (size_t)T * NH * HS ? tc_ : (size_t)T * NH * HS, 1);
    e.y = randt(dt, e.n, 1), e.w = randt(dt, (size_t)C, 1), e.g = randt(dt, e.n, 1);
    e.u = randt(dt, e.n, 1), e.rstd = dzero((size_t)T * 4), e.dw = dzero((size_t)V * C * 4);
    e.cs = randt(MEM_DTYPE_F32, (size_t)T * HS / 2, 1);
    e.sn = randt(MEM_DTYPE_F32, (size_t)T * HS / 2, 1);
    e.tok = ids((size_t)T, V);
    int nt = C < T ? C : T;
    e.logits = randt(MEM_DTYPE_F32, (size_t)nt * V, 1);
    row("rmsnorm forward", timed(rms_f, &e), 0, 2.0 * tc_ * es);
    row("rmsnorm backward", timed(rms_b, &e), 0, 3.0 * tc_ * es);
    row("swiglu forward", timed(swi_f, &e), 0, 3.0 * e.n * es);
    row("swiglu backward", timed(swi_b, &e), 0, 5.0 * e.n * es);
    row("rope forward (q)", timed(rope_f, &e), 0, 2.0 * T * NH * HS * es);
    row("embedding backward", timed(emb_b, &e), 0, 2.0 * tc_ * es);
    row("cross-entropy (one loss tile)", timed(ce, &e), 0, 2.0 * nt * V * 4);
    void *b[] = {e.x, e.y, e.w, e.g, e.u, e.rstd, e.dw, e.cs, e.sn, e.tok, e.logits};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        cu->free(b[i]);
}

int main(int argc, char **argv) {
    int T = argc > 1 ? atoi(argv[1]) : 8192;
    int C = 2048, F = 8192, NH = 32, NKV = 8, HS = 64, V = 128256;
    if (argc > 7)
        C = atoi(argv[2]), F = atoi(argv[3]), NH = atoi(argv[4]), NKV = atoi(argv[5]),
        HS = atoi(argv[6]), V = atoi(argv[7]);
    mem_dtype dt = argc > 8 && !strcmp(argv[8], "f32") ? MEM_DTYPE_F32 : MEM_DTYPE_BF16;
    char err[512];
    cu = backend_load("cuda", err, sizeof err);
    if (!cu) {
        printf("bench_gpu_ops: skipped: %s\n", err);
        return 77;
    }
    tc = (typed_ctx){.dt = dt, .be = cu};
    printf("%s\nT %d, C %d, F %d, NH %d, NKV %d, HS %d, V %d, %s\n", cu->describe(), T, C, F, NH,
           NKV, HS, V, mem_dtype_name(dt));
    products(dt, T, C, F, NH, NKV, HS, V);
    attention(dt, T, NH, NKV, HS);
    elementwise(dt, T, C, F, NH, HS, V);
    return 0;
}
