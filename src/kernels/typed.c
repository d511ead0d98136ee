/* typed.c — kernels on stored tensors (typed.h): fp32 calls straight through, bf16 through fp32
 * row tiles (DESIGN.md §5.1). */
#include "kernels/typed.h"

#include "kernels/bf16.h"

#include <string.h>

#include "core/check.h"

/* Rows of a matmul's fp32 staging tile (its bf16 output rounded from it): wide enough that the
 * GEMM widens each weight panel few times and keeps its efficiency (1024 rows: 4 tiles at
 * T_loc = 4096), small beside the token-sized tensors (1024 x F floats: 59 MiB for Llama 3 8B). */
enum { TYPED_MM_ROWS = 1024 };
/* Rows of W widened at a time for the LM head's fp32 products. */
enum { TYPED_PANEL_ROWS = 256 };

/* The staging tile also holds three element-wise tiles and a norm weight, or a weight panel. */
_Static_assert((int)TYPED_MM_ROWS >= 3 * (int)TYPED_TILE_ROWS + 1 &&
                   (int)TYPED_MM_ROWS >= (int)TYPED_PANEL_ROWS,
               "the matmul's staging tile must hold the other uses of the workspace");

size_t typed_workspace_floats(mem_dtype dt, size_t maxw, size_t C) {
    if (dt == MEM_DTYPE_F32) return 0;
    /* the staging tile, then the GEMM's own workspace */
    return up_add(up_mul((size_t)TYPED_MM_ROWS, maxw > C ? maxw : C), (size_t)GEMM_BF16_WS_FLOATS);
}

/* The workspace's parts: the staging area (also the LM head's weight panel, never in use at the
 * same time) and, at its end, the GEMM's workspace. */
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

/* n contiguous elements, widened / rounded in threaded pieces. */
static void widen_n(float *dst, const uint16_t *src, size_t n) {
    enum { PIECE = 4096 };
    int pieces = (int)((n + PIECE - 1) / PIECE);
    bf16_path_current();
#pragma omp parallel for schedule(static) if (pieces > 8)
    for (int k = 0; k < pieces; k++) {
        size_t i = (size_t)k * PIECE, m = n - i < PIECE ? n - i : PIECE;
        f32_from_bf16(src + i, dst + i, m);
    }
}

static void round_n(uint16_t *dst, const float *src, size_t n) {
    enum { PIECE = 4096 };
    int pieces = (int)((n + PIECE - 1) / PIECE);
    bf16_path_current();
#pragma omp parallel for schedule(static) if (pieces > 8)
    for (int k = 0; k < pieces; k++) {
        size_t i = (size_t)k * PIECE, m = n - i < PIECE ? n - i : PIECE;
        bf16_from_f32(src + i, dst + i, m);
    }
}

static int is_f32(const typed_ctx *t) {
    return t->dt == MEM_DTYPE_F32;
}

/* ---- copies --------------------------------------------------------------------------------- */

void typed_zero(const typed_ctx *t, void *dst, size_t n) {
    memset(dst, 0, mem_dtype_bytes(t->dt, n));
}

void typed_copy(const typed_ctx *t, void *dst, const void *src, size_t n) {
    memcpy(dst, src, mem_dtype_bytes(t->dt, n));
}

void typed_add(const typed_ctx *t, void *dst, const void *src, size_t n) {
    if (is_f32(t)) {
        float *d = dst;
        const float *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] += s[i];
        return;
    }
    ws_parts p = parts_any(t, 1);
    size_t piece = p.stage_n / 2;
    float *a = p.stage, *b = p.stage + piece;
    for (size_t i0 = 0; i0 < n; i0 += piece) {
        size_t m = n - i0 < piece ? n - i0 : piece;
        widen_n(a, (const uint16_t *)dst + i0, m);
        widen_n(b, (const uint16_t *)src + i0, m);
#pragma omp parallel for simd schedule(static) if (m > 32768)
        for (size_t i = 0; i < m; i++)
            a[i] += b[i];
        round_n((uint16_t *)dst + i0, a, m);
    }
}

/* ---- matrix products ------------------------------------------------------------------------ */

void typed_matmul_forward(const typed_ctx *t, void *out, int ldo, const void *inp, int ldi,
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

void typed_matmul_backward(const typed_ctx *t, void *dinp, int lddi, float *dw, int lddw,
                           const void *dout, int ldd, const void *inp, int ldi, const void *w,
                           int ldw, int N, int IC, int OC) {
    if (is_f32(t)) {
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
                     1.0f, p.stage, IC, d, d, lddi, p.gemm);
    }
    // dw (OC, IC) += dout^T (OC, N) @ inp (N, IC): fp32 gradients, all N rows in one product
    if (dw) gemm_bf16(1, 0, OC, IC, N, 1.0f, dout, ldd, inp, ldi, 1.0f, dw, lddw, p.gemm);
}

/* Rows [v0, v0 + nb) of w (rows of C) widened into the panel. */
static float *widen_panel(const typed_ctx *t, const void *w, int v0, int nb, int C) {
    ws_parts p = parts_any(t, 1);
    UP_CHECK(p.stage_n >= (size_t)nb * C, "typed kernels: workspace too small for a panel");
    widen_rows(p.stage, (size_t)C, (const uint16_t *)w + (size_t)v0 * C, (size_t)C, nb, (size_t)C);
    return p.stage;
}

void typed_matmul_forward_f32(const typed_ctx *t, float *out, const float *inp, const void *w,
                              int N, int IC, int OC) {
    if (is_f32(t)) {
        matmul_forward(out, inp, w, N, IC, OC, 0);
        return;
    }
    // out[:, v0 .. v0+nb) = inp @ w[v0 .. v0+nb)^T, the rows of w widened a panel at a time
    for (int v0 = 0; v0 < OC; v0 += TYPED_PANEL_ROWS) {
        int nb = OC - v0 < TYPED_PANEL_ROWS ? OC - v0 : TYPED_PANEL_ROWS;
        const float *wp = widen_panel(t, w, v0, nb, IC);
        matmul_forward_ld(out + v0, OC, inp, IC, wp, IC, N, IC, nb, 0);
    }
}

void typed_matmul_backward_f32(const typed_ctx *t, float *dinp, float *dw, const float *dout,
                               const float *inp, const void *w, int N, int IC, int OC) {
    if (is_f32(t)) {
        matmul_backward(dinp, dw, dout, inp, w, N, IC, OC);
        return;
    }
    // dinp += dout[:, panel] @ w[panel], panels in order (a fixed summation order); dw in fp32
    for (int v0 = 0; dinp && v0 < OC; v0 += TYPED_PANEL_ROWS) {
        int nb = OC - v0 < TYPED_PANEL_ROWS ? OC - v0 : TYPED_PANEL_ROWS;
        const float *wp = widen_panel(t, w, v0, nb, IC);
        matmul_backward_ld(dinp, IC, NULL, IC, dout + v0, OC, inp, IC, wp, IC, N, IC, nb);
    }
    if (dw) matmul_backward_ld(NULL, IC, dw, IC, dout, OC, inp, IC, inp, IC, N, IC, OC);
}

/* ---- embedding ------------------------------------------------------------------------------ */

void typed_embedding_forward(const typed_ctx *t, void *out, const int32_t *tokens, const void *wte,
                             int N, int C) {
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

void typed_embedding_backward(const typed_ctx *t, float *dwte, const void *dout,
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

void typed_rmsnorm_forward(const typed_ctx *t, void *out, int out_f32, float *rstd, const void *inp,
                           const void *w, int N, int C, float eps) {
    if (is_f32(t)) {
        rmsnorm_forward(out, rstd, inp, w, N, C, eps);
        return;
    }
    ws_parts p = parts_any(t, (size_t)C);
    float *a = p.stage, *b = p.stage + (size_t)TYPED_TILE_ROWS * C, *wf = norm_weight(&p, w, C);
    for (int i0 = 0; i0 < N; i0 += TYPED_TILE_ROWS) {
        int n = N - i0 < TYPED_TILE_ROWS ? N - i0 : TYPED_TILE_ROWS;
        size_t r = (size_t)i0 * C;
        widen_rows(a, (size_t)C, (const uint16_t *)inp + r, (size_t)C, n, (size_t)C);
        float *o = out_f32 ? (float *)out + r : b;
        rmsnorm_forward(o, rstd + i0, a, wf, n, C, eps);
        if (!out_f32) round_rows((uint16_t *)out + r, (size_t)C, b, (size_t)C, n, (size_t)C);
    }
}

void typed_rmsnorm_backward(const typed_ctx *t, void *dinp, float *dw, const void *dout,
                            int dout_f32, const void *inp, const void *w, const float *rstd, int N,
                            int C) {
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

static void rope_typed(const typed_ctx *t, void *x, const float *cos_t, const float *sin_t, int N,
                       int nh, int HS, int backward) {
    size_t w = (size_t)nh * HS, half = (size_t)HS / 2;
    ws_parts p = parts_any(t, w);
    for (int i0 = 0; i0 < N; i0 += TYPED_TILE_ROWS) {
        int n = N - i0 < TYPED_TILE_ROWS ? N - i0 : TYPED_TILE_ROWS;
        uint16_t *xr = (uint16_t *)x + (size_t)i0 * w;
        widen_rows(p.stage, w, xr, w, n, w);
        if (backward)
            rope_backward(p.stage, cos_t + (size_t)i0 * half, sin_t + (size_t)i0 * half, n, nh, HS);
        else
            rope_forward(p.stage, cos_t + (size_t)i0 * half, sin_t + (size_t)i0 * half, n, nh, HS);
        round_rows(xr, w, p.stage, w, n, w);
    }
}

void typed_rope_forward(const typed_ctx *t, void *x, const float *cos_t, const float *sin_t, int N,
                        int nh, int HS) {
    if (is_f32(t))
        rope_forward(x, cos_t, sin_t, N, nh, HS);
    else
        rope_typed(t, x, cos_t, sin_t, N, nh, HS, 0);
}

void typed_rope_backward(const typed_ctx *t, void *dx, const float *cos_t, const float *sin_t,
                         int N, int nh, int HS) {
    if (is_f32(t))
        rope_backward(dx, cos_t, sin_t, N, nh, HS);
    else
        rope_typed(t, dx, cos_t, sin_t, N, nh, HS, 1);
}

/* ---- SwiGLU --------------------------------------------------------------------------------- */

void typed_swiglu_forward(const typed_ctx *t, void *out, const void *gate, const void *up,
                          size_t n) {
    if (is_f32(t)) {
        swiglu_forward(out, gate, up, n);
        return;
    }
    ws_parts p = parts_any(t, 1);
    size_t piece = p.stage_n / 3;
    float *g = p.stage, *u = g + piece, *o = u + piece;
    for (size_t i0 = 0; i0 < n; i0 += piece) {
        size_t m = n - i0 < piece ? n - i0 : piece;
        widen_n(g, (const uint16_t *)gate + i0, m);
        widen_n(u, (const uint16_t *)up + i0, m);
        swiglu_forward(o, g, u, m);
        round_n((uint16_t *)out + i0, o, m);
    }
}

void typed_swiglu_backward(const typed_ctx *t, void *dgate, void *dup, const void *dout,
                           const void *gate, const void *up, size_t n) {
    if (is_f32(t)) {
        swiglu_backward(dgate, dup, dout, gate, up, n);
        return;
    }
    ws_parts p = parts_any(t, 1);
    size_t piece = p.stage_n / 3;
    float *g = p.stage, *u = g + piece, *d = u + piece;
    for (size_t i0 = 0; i0 < n; i0 += piece) {
        size_t m = n - i0 < piece ? n - i0 : piece;
        widen_n(g, (const uint16_t *)gate + i0, m);
        widen_n(u, (const uint16_t *)up + i0, m);
        widen_n(d, (const uint16_t *)dout + i0, m);
        swiglu_backward(g, u, d, g, u, m); /* in place: all inputs read before the rounding */
        round_n((uint16_t *)dgate + i0, g, m);
        round_n((uint16_t *)dup + i0, u, m);
    }
}
