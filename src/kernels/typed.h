/* typed.h — the kernels of kernels.h on tensors stored in the run's element type (DESIGN.md §5.1),
 * each call dispatched to the run's backend (t->be, backend.h: the compute seam, DESIGN.md §11).
 * What follows describes the CPU backend; the CUDA one computes the same functions on the GPU.
 *
 * Under --dtype f32 every function here is the fp32 kernel of kernels.h called as is: the same
 * bytes, nothing converted, no workspace. Under --dtype bf16 the stored tensors (token-sized
 * activations, their gradients, the weights the matmuls read) are bf16 (uint16_t) while the
 * arithmetic stays fp32: the matrix products go to gemm_bf16 (bf16 operands, fp32 accumulation);
 * element-wise kernels widen row tiles of their bf16 inputs into an fp32 workspace, run the fp32
 * kernel on the tile, and round each output to bf16 once (bf16.h's rounding). An accumulating
 * output ("+=") is widened, added to in fp32 and rounded once per call.
 *
 * Statistics (rstd), RoPE tables and weight gradients are fp32 under both types: the functions
 * take them as float. A tensor argument typed `void *` is in t->dt; one typed `float *` is fp32
 * whatever the run's type. Main thread only (the kernels thread themselves). */
#ifndef UP_KERNELS_TYPED_H
#define UP_KERNELS_TYPED_H

#include "core/mem.h"
#include "kernels/backend.h"
#include "kernels/kernels.h"

#include <stddef.h>
#include <stdint.h>

/* Rows of a tile the bf16 element-wise kernels convert at a time. */
enum { TYPED_TILE_ROWS = 256 };

/* The CPU backend's fp32 workspace for rows up to maxw elements wide (the widest of C, F,
 * NH*HS) and weights of C columns under bf16; 0 under f32. (A model asks its backend:
 * backend_of(t)->workspace_floats.) */
size_t typed_workspace_floats(mem_dtype dt, size_t maxw, size_t C);

/* dst := 0, n elements of t->dt; dst := src (n elements). */
static inline void typed_zero(const typed_ctx *t, void *dst, size_t n) {
    backend_of(t)->zero(t, dst, n);
}
static inline void typed_copy(const typed_ctx *t, void *dst, const void *src, size_t n) {
    backend_of(t)->copy(t, dst, src, n);
}
/* dst[i] += src[i] (bf16: widened, added in fp32, rounded once). */
static inline void typed_add(const typed_ctx *t, void *dst, const void *src, size_t n) {
    backend_of(t)->add(t, dst, src, n);
}

/* Matrix products of kernels.h with stored operands (the weights w in t->dt as the matmuls read
 * them); dw, the weight gradient, is fp32 and accumulates. Row strides in elements. */
static inline void typed_matmul_forward(const typed_ctx *t, void *out, int ldo, const void *inp,
                                        int ldi, const void *w, int ldw, int N, int IC, int OC,
                                        int acc) {
    backend_of(t)->matmul_forward(t, out, ldo, inp, ldi, w, ldw, N, IC, OC, acc);
}
static inline void typed_matmul_backward(const typed_ctx *t, void *dinp, int lddi, float *dw,
                                         int lddw, const void *dout, int ldd, const void *inp,
                                         int ldi, const void *w, int ldw, int N, int IC, int OC) {
    backend_of(t)->matmul_backward(t, dinp, lddi, 1, dw, lddw, dout, ldd, inp, ldi, w, ldw, N, IC,
                                   OC);
}
/* The packed forms (rows of out, inp, w, dinp, dw, dout OC, IC, IC, IC, IC, OC elements long),
 * as matmul_forward and matmul_backward call the strided ones. */
static inline void typed_mm_fwd(const typed_ctx *t, void *out, const void *inp, const void *w,
                                int N, int IC, int OC, int acc) {
    typed_matmul_forward(t, out, OC, inp, IC, w, IC, N, IC, OC, acc);
}
static inline void typed_mm_bwd(const typed_ctx *t, void *dinp, float *dw, const void *dout,
                                const void *inp, const void *w, int N, int IC, int OC) {
    typed_matmul_backward(t, dinp, IC, dw, IC, dout, OC, inp, IC, w, IC, N, IC, OC);
}
/* typed_mm_bwd with dinp overwritten rather than accumulated (dinp = dout @ w): the same bits as
 * zeroing dinp first under f32; under bf16 no zeros are widened and read. */
static inline void typed_mm_bwd_set(const typed_ctx *t, void *dinp, float *dw, const void *dout,
                                    const void *inp, const void *w, int N, int IC, int OC) {
    backend_of(t)->matmul_backward(t, dinp, IC, 0, dw, IC, dout, OC, inp, IC, w, IC, N, IC, OC);
}

/* The LM head's products: out, inp, dout, dinp fp32 (the loss tiles), w stored (bf16: its rows
 * widened in panels; the tile's fp32 operands are not rounded). */
static inline void typed_matmul_forward_f32(const typed_ctx *t, float *out, const float *inp,
                                            const void *w, int N, int IC, int OC) {
    backend_of(t)->matmul_forward_f32(t, out, inp, w, N, IC, OC);
}
static inline void typed_matmul_backward_f32(const typed_ctx *t, float *dinp, float *dw,
                                             const float *dout, const float *inp, const void *w,
                                             int N, int IC, int OC) {
    backend_of(t)->matmul_backward_f32(t, dinp, dw, dout, inp, w, N, IC, OC);
}

/* embedding_forward / embedding_backward: out and wte stored (a bf16 row copied exactly), dout
 * stored, dwte fp32. */
static inline void typed_embedding_forward(const typed_ctx *t, void *out, const int32_t *tokens,
                                           const void *wte, int N, int C) {
    backend_of(t)->embedding_forward(t, out, tokens, wte, N, C);
}
static inline void typed_embedding_backward(const typed_ctx *t, float *dwte, const void *dout,
                                            const int32_t *tokens, int N, int C) {
    backend_of(t)->embedding_backward(t, dwte, dout, tokens, N, C);
}

/* rmsnorm_forward with inp and w stored; out stored (out_f32 == 0) or fp32 (out_f32 != 0: the
 * final norm's output, the loss tile's input). rstd fp32. */
static inline void typed_rmsnorm_forward(const typed_ctx *t, void *out, int out_f32, float *rstd,
                                         const void *inp, const void *w, int N, int C, float eps) {
    backend_of(t)->rmsnorm_forward(t, out, out_f32, rstd, inp, w, N, C, eps);
}
/* rmsnorm_backward: dinp, inp, w stored; dout stored or fp32 (dout_f32); dw fp32 (may be NULL). */
static inline void typed_rmsnorm_backward(const typed_ctx *t, void *dinp, float *dw,
                                          const void *dout, int dout_f32, const void *inp,
                                          const void *w, const float *rstd, int N, int C) {
    backend_of(t)->rmsnorm_backward(t, dinp, dw, dout, dout_f32, inp, w, rstd, N, C);
}

/* rope_forward / rope_backward in place on a stored (N, nh, HS) tensor. */
static inline void typed_rope_forward(const typed_ctx *t, void *x, const float *cos_t,
                                      const float *sin_t, int N, int nh, int HS) {
    backend_of(t)->rope_forward(t, x, cos_t, sin_t, N, nh, HS);
}
static inline void typed_rope_backward(const typed_ctx *t, void *dx, const float *cos_t,
                                       const float *sin_t, int N, int nh, int HS) {
    backend_of(t)->rope_backward(t, dx, cos_t, sin_t, N, nh, HS);
}

/* swiglu_forward / swiglu_backward over n stored elements (dgate, dup may alias gate, up). */
static inline void typed_swiglu_forward(const typed_ctx *t, void *out, const void *gate,
                                        const void *up, size_t n) {
    backend_of(t)->swiglu_forward(t, out, gate, up, n);
}
static inline void typed_swiglu_backward(const typed_ctx *t, void *dgate, void *dup,
                                         const void *dout, const void *gate, const void *up,
                                         size_t n) {
    backend_of(t)->swiglu_backward(t, dgate, dup, dout, gate, up, n);
}

/* ---- attention (kernels.h) ------------------------------------------------------------------ */
/* attention_forward / attention_backward on q, k, v, out, dout, dq, dk, dv stored in t->dt (under
 * bf16 the _bf16 kernels: fp32 arithmetic, each output rounded once); lse fp32; same layouts,
 * documents, contracts and progress hook. ws: fp32 workspace of the backend's
 * attention_workspace_floats(t->dt, ...) floats (the CPU's: typed_attention_workspace_floats),
 * separate from t->ws (the kernels' own scratch, sized by the kernel path: never change the path
 * in between). */
size_t typed_attention_workspace_floats(mem_dtype dt, int T, int NH, int NKV, int HS);
static inline void typed_attention_forward(const typed_ctx *t, void *out, float *lse, const void *q,
                                           const void *k, const void *v, const int32_t *doc_start,
                                           int T, int NH, int NKV, int HS, float *ws) {
    backend_of(t)->attention_forward(t, out, lse, q, k, v, doc_start, T, NH, NKV, HS, ws);
}
static inline void typed_attention_backward(const typed_ctx *t, void *dq, void *dk, void *dv,
                                            const void *dout, const void *q, const void *k,
                                            const void *v, const void *out, const float *lse,
                                            const int32_t *doc_start, int T, int NH, int NKV,
                                            int HS, float *ws) {
    backend_of(t)->attention_backward(t, dq, dk, dv, dout, q, k, v, out, lse, doc_start, T, NH, NKV,
                                      HS, ws);
}

#endif
