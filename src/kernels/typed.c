/* typed.c — kernels on stored tensors (typed.h): fp32 calls straight through, bf16 through fp32
 * row tiles (DESIGN.md §5.1). */
#include "kernels/typed.h"

#include "kernels/bf16.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/check.h"

/* Rows of a matmul's fp32 staging tile (its bf16 output rounded from it): wide enough that the
 * GEMM widens each weight panel few times and keeps its efficiency (1024 rows: 4 tiles at
 * T_loc = 4096), small beside the token-sized tensors (1024 x F floats: 59 MiB for Llama 3 8B). */
enum { TYPED_MM_ROWS = 1024 };

/* The staging tile also holds the RMSNorm backward's three tiles and its weight (the fused passes
 * take what it has, per thread). */
_Static_assert((int)TYPED_MM_ROWS >= 3 * (int)TYPED_TILE_ROWS + 1,
               "the matmul's staging tile must hold the other uses of the workspace");

size_t typed_workspace_floats(mem_dtype dt, size_t maxw, size_t C) {
    if (dt == MEM_DTYPE_F32) return 0;
    /* the staging tile, then the GEMM's own workspace */
    return up_add(up_mul((size_t)TYPED_MM_ROWS, maxw > C ? maxw : C), (size_t)GEMM_BF16_WS_FLOATS);
}

/* The workspace's parts: the staging area and, at its end, the GEMM's workspace (also the norm
 * weight of the fused RMSNorm forward, which runs no product). */
typedef struct {
    float *stage, *gemm;
    size_t stage_n;
} ws_parts;

/* The parts, checked for three element-wise tiles of rows w wide. */
static ws_parts parts_any(const typed_ctx *t, size_t w) {
    ws_parts p;
    UP_CHECK(t->ws && t->ws_n > GEMM_BF16_WS_FLOATS, "typed kernels: no workspace");
    p.gemm = t->ws + t->ws_n - GEMM_BF16_WS_FLOATS;
    p.stage = t->ws;
    p.stage_n = (size_t)(p.gemm - t->ws);
    UP_CHECK(p.stage_n >= (size_t)(3 * TYPED_TILE_ROWS + 1) * w,
             "typed kernels: workspace of %zu floats too small for rows of %zu", t->ws_n, w);
    return p;
}

/* ---- row conversions (threaded over rows; the conversion paths are single-threaded) -------- */

static void widen_rows(float *dst, size_t ldd, const uint16_t *src, size_t lds, int n, size_t w) {
    bf16_path_current(); /* chooses the path outside the parallel region */
#pragma omp parallel for schedule(static) if ((size_t)n * w > 32768)
    for (int i = 0; i < n; i++)
        f32_from_bf16(src + (size_t)i * lds, dst + (size_t)i * ldd, w);
}

static void round_rows(uint16_t *dst, size_t ldd, const float *src, size_t lds, int n, size_t w) {
    bf16_path_current();
#pragma omp parallel for schedule(static) if ((size_t)n * w > 32768)
    for (int i = 0; i < n; i++)
        bf16_from_f32(src + (size_t)i * lds, dst + (size_t)i * ldd, w);
}

static int is_f32(const typed_ctx *t) {
    return t->dt == MEM_DTYPE_F32;
}

/* ---- fused element-wise passes ----------------------------------------------------------------
 * One OpenMP region per call: each thread takes chunks of rows in turn and, in its own share of
 * the staging area (cache-sized), widens its inputs, runs the fp32 kernel's serial twin on them
 * (kernels.h) and rounds the outputs: every element makes one trip through memory
 * in bf16, where separate widen / compute / round passes made three in fp32, each in a region of
 * its own. The kernels are row-wise (or element-wise), so a row's result does not depend on the
 * chunk it falls in: the bits of the fp32 kernel on the widened tensors, rounded. */
enum { FUSED_FLOATS = 16384 }; /* floats per chunk and array: 64 KiB, L2-resident */

typedef struct {
    size_t rows, width; /* the tensor: rows of width elements */
    int arrays;         /* fp32 arrays of a chunk's size the pass needs per thread */
    void (*chunk)(const void *ctx, size_t r0, size_t nr, float *scratch, size_t stride);
    const void *ctx;
} fused_pass;

static void fused_run(const typed_ctx *t, const fused_pass *f) {
    if (f->rows == 0 || f->width == 0) return;
    ws_parts p = parts_any(t, 1);
    int nth = omp_get_max_threads();
    size_t share = p.stage_n / (size_t)nth / (size_t)f->arrays; /* floats per array and thread */
    size_t per = share < FUSED_FLOATS ? share : FUSED_FLOATS;
    size_t rows = per / f->width;
    UP_CHECK(rows > 0,
             "typed kernels: workspace of %zu floats too small for rows of %zu on %d "
             "threads",
             t->ws_n, f->width, nth);
    if (rows > f->rows) rows = f->rows;
    long long chunks = (long long)((f->rows + rows - 1) / rows);
    bf16_path_current();
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (long long c = 0; c < chunks; c++) {
        float *scratch = p.stage + (size_t)omp_get_thread_num() * share * (size_t)f->arrays;
        size_t r0 = (size_t)c * rows, nr = f->rows - r0 < rows ? f->rows - r0 : rows;
        f->chunk(f->ctx, r0, nr, scratch, share);
    }
}

/* ---- copies --------------------------------------------------------------------------------- */

static void cpu_zero(const typed_ctx *t, void *dst, size_t n) {
    memset(dst, 0, mem_dtype_bytes(t->dt, n));
}

static void cpu_copy(const typed_ctx *t, void *dst, const void *src, size_t n) {
    memcpy(dst, src, mem_dtype_bytes(t->dt, n));
}

static void cpu_copy_rows(const typed_ctx *t, void *dst, size_t ldd, const void *src, size_t lds,
                          size_t rows, size_t width) {
    size_t es = mem_dtype_size(t->dt), bytes = es * width;
#pragma omp parallel for schedule(static) if (rows * width > 32768)
    for (size_t i = 0; i < rows; i++)
        memcpy((char *)dst + i * ldd * es, (const char *)src + i * lds * es, bytes);
}

typedef struct {
    uint16_t *dst;
    const uint16_t *src;
} add_ctx;

static void add_chunk(const void *ctx, size_t r0, size_t nr, float *a, size_t stride) {
    const add_ctx *c = ctx;
    float *b = a + stride;
    f32_from_bf16(c->dst + r0, a, nr);
    f32_from_bf16(c->src + r0, b, nr);
    for (size_t i = 0; i < nr; i++)
        a[i] += b[i];
    bf16_from_f32(a, c->dst + r0, nr);
}

static void cpu_add(const typed_ctx *t, void *dst, const void *src, size_t n) {
    if (is_f32(t)) {
        float *d = dst;
        const float *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] += s[i];
        return;
    }
    add_ctx c = {dst, src};
    fused_pass f = {n, 1, 2, add_chunk, &c};
    fused_run(t, &f);
}

/* ---- matrix products ------------------------------------------------------------------------ */

static void cpu_matmul_forward(const typed_ctx *t, void *out, int ldo, const void *inp, int ldi,
                               const void *w, int ldw, int N, int IC, int OC, int acc) {
    if (is_f32(t)) {
        matmul_forward_ld(out, ldo, inp, ldi, w, ldw, N, IC, OC, acc);
        return;
    }
    ws_parts p = parts_any(t, 1);
    int rows = (int)(p.stage_n / (size_t)(OC > 0 ? OC : 1));
    rows = rows > TYPED_MM_ROWS ? TYPED_MM_ROWS : rows;
    UP_CHECK(rows > 0 || N == 0 || OC == 0, "typed_matmul_forward: workspace too small for OC=%d",
             OC);
    for (int i0 = 0; i0 < N && OC > 0; i0 += rows) {
        int n = N - i0 < rows ? N - i0 : rows;
        uint16_t *o = (uint16_t *)out + (size_t)i0 * ldo;
        // stage (n, OC) = inp rows @ w^T (+ out rows): fp32 accumulation, one rounding into out
        gemm_bf16_io(0, 1, n, OC, IC, 1.0f, (const uint16_t *)inp + (size_t)i0 * ldi, ldi, w, ldw,
                     0.0f, p.stage, OC, acc ? o : NULL, o, ldo, p.gemm);
    }
}

/* dinp_acc 0: dinp overwritten. Under f32 that is zeroing and the accumulating kernel (its bits);
 * under bf16 the product reads no C (no widening of zeros, no fp32 C read). */
static void matmul_backward_any(const typed_ctx *t, void *dinp, int lddi, int dinp_acc, float *dw,
                                int lddw, const void *dout, int ldd, const void *inp, int ldi,
                                const void *w, int ldw, int N, int IC, int OC) {
    if (is_f32(t)) {
        for (int i = 0; dinp && !dinp_acc && i < N; i++)
            memset((float *)dinp + (size_t)i * lddi, 0, sizeof(float) * (size_t)IC);
        matmul_backward_ld(dinp, lddi, dw, lddw, dout, ldd, inp, ldi, w, ldw, N, IC, OC);
        return;
    }
    if (N == 0 || IC == 0 || OC == 0) return;
    ws_parts p = parts_any(t, 1);
    int rows = (int)(p.stage_n / (size_t)IC);
    rows = rows > TYPED_MM_ROWS ? TYPED_MM_ROWS : rows;
    UP_CHECK(rows > 0, "typed_matmul_backward: workspace too small for IC=%d", IC);
    // dinp (N, IC) += dout (N, OC) @ w (OC, IC), a row tile at a time
    for (int i0 = 0; dinp && i0 < N; i0 += rows) {
        int n = N - i0 < rows ? N - i0 : rows;
        uint16_t *d = (uint16_t *)dinp + (size_t)i0 * lddi;
        gemm_bf16_io(0, 0, n, IC, OC, 1.0f, (const uint16_t *)dout + (size_t)i0 * ldd, ldd, w, ldw,
                     0.0f, p.stage, IC, dinp_acc ? d : NULL, d, lddi, p.gemm);
    }
    // dw (OC, IC) += dout^T (OC, N) @ inp (N, IC): fp32 gradients, all N rows in one product
    if (dw) gemm_bf16(1, 0, OC, IC, N, 1.0f, dout, ldd, inp, ldi, 1.0f, dw, lddw, p.gemm);
}

static void cpu_matmul_forward_f32(const typed_ctx *t, float *out, const float *inp, const void *w,
                                   int N, int IC, int OC) {
    if (is_f32(t)) {
        matmul_forward(out, inp, w, N, IC, OC, 0);
        return;
    }
    ws_parts p = parts_any(t, 1);
    gemm_f32_bf16(0, 1, N, OC, IC, 1.0f, inp, IC, w, IC, 0.0f, out, OC, p.gemm);
}

static void cpu_matmul_backward_f32(const typed_ctx *t, float *dinp, float *dw, const float *dout,
                                    const float *inp, const void *w, int N, int IC, int OC) {
    if (is_f32(t)) {
        matmul_backward(dinp, dw, dout, inp, w, N, IC, OC);
        return;
    }
    ws_parts p = parts_any(t, 1);
    // dinp += dout @ w (K = OC in blocks, in order: a fixed summation order); dw in fp32
    if (dinp) gemm_f32_bf16(0, 0, N, IC, OC, 1.0f, dout, OC, w, IC, 1.0f, dinp, IC, p.gemm);
    if (dw) matmul_backward_ld(NULL, IC, dw, IC, dout, OC, inp, IC, inp, IC, N, IC, OC);
}

/* ---- embedding ------------------------------------------------------------------------------ */

static void cpu_embedding_forward(const typed_ctx *t, void *out, const int32_t *tokens,
                                  const void *wte, int N, int C) {
    if (is_f32(t)) {
        embedding_forward(out, tokens, wte, N, C);
        return;
    }
    UP_CHECK(N >= 0 && C >= 0, "embedding_forward: negative shape N=%d C=%d", N, C);
    size_t row = mem_dtype_bytes(t->dt, (size_t)C);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        UP_CHECK(tokens[i] >= 0, "embedding_forward: token %d at row %d is negative",
                 (int)tokens[i], i);
        memcpy((char *)out + (size_t)i * row, (const char *)wte + (size_t)tokens[i] * row, row);
    }
}

static void cpu_embedding_backward(const typed_ctx *t, float *dwte, const void *dout,
                                   const int32_t *tokens, int N, int C) {
    if (is_f32(t)) {
        embedding_backward(dwte, dout, tokens, N, C);
        return;
    }
    ws_parts p = parts_any(t, (size_t)C);
    // tiles in row order: a token's rows add in the order of the fp32 kernel
    for (int i0 = 0; i0 < N; i0 += TYPED_TILE_ROWS) {
        int n = N - i0 < TYPED_TILE_ROWS ? N - i0 : TYPED_TILE_ROWS;
        widen_rows(p.stage, (size_t)C, (const uint16_t *)dout + (size_t)i0 * C, (size_t)C, n,
                   (size_t)C);
        embedding_backward(dwte, p.stage, tokens + i0, n, C);
    }
}

/* ---- RMSNorm -------------------------------------------------------------------------------- */

/* The norm weight (C) widened into the last C floats of the stage's third tile. */
static float *norm_weight(const ws_parts *p, const void *w, int C) {
    float *wf = p->stage + (size_t)3 * TYPED_TILE_ROWS * C;
    f32_from_bf16(w, wf, (size_t)C);
    return wf;
}

typedef struct {
    void *out;
    int out_f32;
    float *rstd;
    const uint16_t *inp;
    const float *w;
    int C;
    float eps;
} norm_ctx;

static void norm_chunk(const void *ctx, size_t r0, size_t nr, float *a, size_t stride) {
    const norm_ctx *c = ctx;
    size_t C = (size_t)c->C;
    f32_from_bf16(c->inp + r0 * C, a, nr * C);
    float *o = c->out_f32 ? (float *)c->out + r0 * C : a + stride;
    rmsnorm_forward_serial(o, c->rstd + r0, a, c->w, (int)nr, c->C, c->eps);
    if (!c->out_f32) bf16_from_f32(o, (uint16_t *)c->out + r0 * C, nr * C);
}

static void cpu_rmsnorm_forward(const typed_ctx *t, void *out, int out_f32, float *rstd,
                                const void *inp, const void *w, int N, int C, float eps) {
    if (is_f32(t)) {
        rmsnorm_forward(out, rstd, inp, w, N, C, eps);
        return;
    }
    ws_parts p = parts_any(t, (size_t)C);
    float *wf = p.gemm; /* the norm weight, widened where no chunk's scratch lies */
    f32_from_bf16(w, wf, (size_t)C);
    norm_ctx c = {out, out_f32, rstd, inp, wf, C, eps};
    fused_pass f = {(size_t)N, (size_t)C, out_f32 ? 1 : 2, norm_chunk, &c};
    fused_run(t, &f);
}

static void cpu_rmsnorm_backward(const typed_ctx *t, void *dinp, float *dw, const void *dout,
                                 int dout_f32, const void *inp, const void *w, const float *rstd,
                                 int N, int C) {
    if (is_f32(t)) {
        rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
        return;
    }
    ws_parts p = parts_any(t, (size_t)C);
    size_t tile = (size_t)TYPED_TILE_ROWS * C;
    float *a = p.stage, *b = a + tile, *d = b + tile, *wf = norm_weight(&p, w, C);
    for (int i0 = 0; i0 < N; i0 += TYPED_TILE_ROWS) {
        int n = N - i0 < TYPED_TILE_ROWS ? N - i0 : TYPED_TILE_ROWS;
        size_t r = (size_t)i0 * C;
        widen_rows(a, (size_t)C, (const uint16_t *)inp + r, (size_t)C, n, (size_t)C);
        const float *g = (const float *)dout + r;
        if (!dout_f32) {
            widen_rows(b, (size_t)C, (const uint16_t *)dout + r, (size_t)C, n, (size_t)C);
            g = b;
        }
        widen_rows(d, (size_t)C, (uint16_t *)dinp + r, (size_t)C, n, (size_t)C);
        rmsnorm_backward(d, dw, g, a, wf, rstd + i0, n, C);
        round_rows((uint16_t *)dinp + r, (size_t)C, d, (size_t)C, n, (size_t)C);
    }
}

/* ---- RoPE ----------------------------------------------------------------------------------- */

typedef struct {
    uint16_t *x;
    const float *cos_t, *sin_t;
    int nh, HS, backward;
} rope_ctx;

static void rope_chunk(const void *ctx, size_t r0, size_t nr, float *a, size_t stride) {
    const rope_ctx *c = ctx;
    size_t w = (size_t)c->nh * c->HS, half = (size_t)c->HS / 2;
    (void)stride;
    f32_from_bf16(c->x + r0 * w, a, nr * w);
    if (c->backward)
        rope_backward_serial(a, c->cos_t + r0 * half, c->sin_t + r0 * half, (int)nr, c->nh, c->HS);
    else
        rope_forward_serial(a, c->cos_t + r0 * half, c->sin_t + r0 * half, (int)nr, c->nh, c->HS);
    bf16_from_f32(a, c->x + r0 * w, nr * w);
}

static void rope_typed(const typed_ctx *t, void *x, const float *cos_t, const float *sin_t, int N,
                       int nh, int HS, int backward) {
    rope_ctx c = {x, cos_t, sin_t, nh, HS, backward};
    fused_pass f = {(size_t)N, (size_t)nh * HS, 1, rope_chunk, &c};
    fused_run(t, &f);
}

static void cpu_rope_forward(const typed_ctx *t, void *x, const float *cos_t, const float *sin_t,
                             int N, int nh, int HS) {
    if (is_f32(t))
        rope_forward(x, cos_t, sin_t, N, nh, HS);
    else
        rope_typed(t, x, cos_t, sin_t, N, nh, HS, 0);
}

static void cpu_rope_backward(const typed_ctx *t, void *dx, const float *cos_t, const float *sin_t,
                              int N, int nh, int HS) {
    if (is_f32(t))
        rope_backward(dx, cos_t, sin_t, N, nh, HS);
    else
        rope_typed(t, dx, cos_t, sin_t, N, nh, HS, 1);
}

/* ---- SwiGLU --------------------------------------------------------------------------------- */

typedef struct {
    uint16_t *out, *dgate, *dup;
    const uint16_t *gate, *up, *dout;
} swiglu_ctx;

static void swiglu_fwd_chunk(const void *ctx, size_t r0, size_t nr, float *g, size_t stride) {
    const swiglu_ctx *c = ctx;
    float *u = g + stride;
    f32_from_bf16(c->gate + r0, g, nr);
    f32_from_bf16(c->up + r0, u, nr);
    swiglu_forward_serial(g, g, u, nr); /* in place: element i reads only index i */
    bf16_from_f32(g, c->out + r0, nr);
}

static void swiglu_bwd_chunk(const void *ctx, size_t r0, size_t nr, float *g, size_t stride) {
    const swiglu_ctx *c = ctx;
    float *u = g + stride, *d = u + stride;
    f32_from_bf16(c->gate + r0, g, nr);
    f32_from_bf16(c->up + r0, u, nr);
    f32_from_bf16(c->dout + r0, d, nr);
    swiglu_backward_serial(g, u, d, g, u, nr); /* in place: inputs read before the rounding */
    bf16_from_f32(g, c->dgate + r0, nr);
    bf16_from_f32(u, c->dup + r0, nr);
}

static void cpu_swiglu_forward(const typed_ctx *t, void *out, const void *gate, const void *up,
                               size_t n) {
    if (is_f32(t)) {
        swiglu_forward(out, gate, up, n);
        return;
    }
    swiglu_ctx c = {.out = out, .gate = gate, .up = up};
    fused_pass f = {n, 1, 2, swiglu_fwd_chunk, &c};
    fused_run(t, &f);
}

static void cpu_swiglu_backward(const typed_ctx *t, void *dgate, void *dup, const void *dout,
                                const void *gate, const void *up, size_t n) {
    if (is_f32(t)) {
        swiglu_backward(dgate, dup, dout, gate, up, n);
        return;
    }
    swiglu_ctx c = {.dgate = dgate, .dup = dup, .gate = gate, .up = up, .dout = dout};
    fused_pass f = {n, 1, 3, swiglu_bwd_chunk, &c};
    fused_run(t, &f);
}

/* ---- attention ------------------------------------------------------------------------------ */

size_t typed_attention_workspace_floats(mem_dtype dt, int T, int NH, int NKV, int HS) {
    return dt == MEM_DTYPE_F32 ? attention_workspace_floats(T, NH, NKV, HS)
                               : attention_workspace_floats_bf16(T, NH, NKV, HS);
}

static void cpu_attention_forward(const typed_ctx *t, void *out, float *lse, const void *q,
                                  const void *k, const void *v, const int32_t *doc_start, int T,
                                  int NH, int NKV, int HS, float *ws) {
    if (is_f32(t))
        attention_forward(out, lse, q, k, v, doc_start, T, NH, NKV, HS, ws);
    else
        attention_forward_bf16(out, lse, q, k, v, doc_start, T, NH, NKV, HS, ws);
}

static void cpu_attention_backward(const typed_ctx *t, void *dq, void *dk, void *dv,
                                   const void *dout, const void *q, const void *k, const void *v,
                                   const void *out, const float *lse, const int32_t *doc_start,
                                   int T, int NH, int NKV, int HS, float *ws) {
    if (is_f32(t))
        attention_backward(dq, dk, dv, dout, q, k, v, out, lse, doc_start, T, NH, NKV, HS, ws);
    else
        attention_backward_bf16(dq, dk, dv, dout, q, k, v, out, lse, doc_start, T, NH, NKV, HS, ws);
}

/* ---- the rest of the CPU backend: conversions, loss tiles, the optimizer side --------------- */

/* In threaded pieces (the conversion paths are single-threaded; element-wise, so the pieces
 * change no bit). */
static void cpu_convert(mem_dtype dst_t, void *dst, mem_dtype src_t, const void *src, size_t n) {
    if (dst_t == src_t) {
        memcpy(dst, src, mem_dtype_bytes(dst_t, n));
        return;
    }
    enum { PIECE = 1 << 16 };
    long pieces = (long)((n + PIECE - 1) / PIECE);
    bf16_path_current(); /* chooses the path outside the parallel region */
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (long k = 0; k < pieces; k++) {
        size_t i = (size_t)k * PIECE, m = n - i < PIECE ? n - i : PIECE;
        if (dst_t == MEM_DTYPE_BF16)
            bf16_from_f32((const float *)src + i, (uint16_t *)dst + i, m);
        else
            f32_from_bf16((const uint16_t *)src + i, (float *)dst + i, m);
    }
}

static void cpu_zero_f32(float *x, size_t n) {
    memset(x, 0, sizeof(float) * n);
}

static size_t cpu_first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

static void cpu_adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                             const backend_adamw *hp, int step, float grad_scale, int decay) {
    adamw_update(param, grad, m, v, n, hp, step, grad_scale, decay);
}

/* Copies to and from the space, which is host memory: memcpy (the staged exchanges' path). */
static void cpu_memcpy(void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
}

/* The copy queue on host memory: copies at once, nothing to wait for. */
static void cpu_copy_out(void *host_dst, const void *src, size_t bytes, int tag, int after) {
    (void)tag, (void)after;
    memcpy(host_dst, src, bytes);
}
static void cpu_copy_in(void *dst, const void *host_src, size_t bytes, int tag, int after) {
    (void)tag, (void)after;
    memcpy(dst, host_src, bytes);
}
static void cpu_copy_tag(int tag) { /* mark and wait: nothing to order */
    (void)tag;
}

const backend_ops backend_cpu = {
    .abi = BACKEND_ABI,
    .name = "cpu",
    .space = MEM_SPACE_HOST,
    .to_dev = cpu_memcpy,
    .to_host = cpu_memcpy,
    .copy_out = cpu_copy_out,
    .copy_in = cpu_copy_in,
    .copy_mark = cpu_copy_tag,
    .copy_wait = cpu_copy_tag,
    .copy_sync = cpu_copy_tag,
    .workspace_floats = typed_workspace_floats,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .add = cpu_add,
    .copy_rows = cpu_copy_rows,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = matmul_backward_any,
    .matmul_forward_f32 = cpu_matmul_forward_f32,
    .matmul_backward_f32 = cpu_matmul_backward_f32,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .attention_workspace_floats = typed_attention_workspace_floats,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .convert = cpu_convert,
    .cross_entropy_fused = cross_entropy_fused,
    .cross_entropy_rows = cross_entropy_rows,
    .zero_f32 = cpu_zero_f32,
    .sum_squares = sum_squares,
    .first_nonfinite = cpu_first_nonfinite,
    .adamw_update = cpu_adamw_update,
};
