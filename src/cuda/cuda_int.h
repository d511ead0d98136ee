/* cuda_int.h — private to the CUDA backend module (src/cuda/): its stream, its cuBLASLt handle,
 * the error check and the ops each file defines. The table itself is cuda_backend.cu's. */
#ifndef UP_CUDA_INT_H
#define UP_CUDA_INT_H

#include "kernels/backend.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

/* The module's one stream: every op is issued on it, in order. */
extern cudaStream_t cu_stream;
/* cuBLASLt's handle and its workspace (CU_LT_WS bytes of device memory). */
extern cublasLtHandle_t cu_lt;
extern void *cu_lt_ws;
#define CU_LT_WS BACKEND_CUDA_LT_WORKSPACE
/* 1 when the user asked for TF32 in the fp32 products (UPIPE_TF32=1); else fp32 arithmetic. */
extern int cu_tf32;

/* Stops the process with one line naming the operation, the op the model said it runs
 * (set_where: the layer and the step) and CUDA's message; exit status 1. */
void cu_fail(const char *op, const char *what, const char *file, int line);
#define CU_CHECK(call)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) cu_fail(#call, cudaGetErrorString(e_), __FILE__, __LINE__);         \
    } while (0)
#define CU_LAUNCHED(name)                                                                          \
    do {                                                                                           \
        cudaError_t e_ = cudaGetLastError();                                                       \
        if (e_ != cudaSuccess) cu_fail(name, cudaGetErrorString(e_), __FILE__, __LINE__);          \
    } while (0)
#define LT_CHECK(call)                                                                             \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            cu_fail(#call, cublasLt_status_name(s_), __FILE__, __LINE__);                          \
    } while (0)
const char *cublasLt_status_name(cublasStatus_t s);

/* The host's waits for the GPU: the stream, an event, the whole device; each marked for upipe's
 * watchdog (backend.h's set_wait_hooks) with the op set_where named, so a hung kernel is named. */
void cu_wait_stream(cudaStream_t s);
/* NCCL (cuda_nccl.cu): the communicators alive, and a poll of their asynchronous errors that
 * stops the run on one; the backend's coll_* ops. */
int cu_coll_live(void);
void cu_coll_poll(void);
extern "C" int cu_coll_unique_id(void *id, char *err, size_t errlen);
extern "C" void *cu_coll_init(const void *id, int nranks, int rank, char *err, size_t errlen);
extern "C" void cu_coll_destroy(void *comm);
extern "C" void cu_coll_alltoall(void *comm, const void *send, void *recv, size_t bytes,
                                 int nranks);
extern "C" void cu_coll_allgather(void *comm, void *full, size_t bytes, int rank);
extern "C" void cu_coll_reduce_scatter(void *comm, const float *full, float *shard, size_t n);
extern "C" void cu_coll_allreduce(void *comm, float *x, size_t n);
void cu_wait_event(cudaEvent_t e);
void cu_wait_device(void);

/* bf16 of dtype.h (round to nearest even; zero and denormals to a signed zero; NaN kept quiet):
 * the same bits as the CPU's bf16_round, on the device. */
__device__ __forceinline__ uint16_t cu_bf16_round(float x) {
    uint32_t u = __float_as_uint(x);
    uint32_t a = u & 0x7fffffffu;
    if (a < 0x00800000u) return (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float cu_bf16_widen(uint16_t b) {
    return __uint_as_float((uint32_t)b << 16);
}
/* Element i of a stored tensor (dt: 0 f32, 1 bf16), as fp32; and its store. */
__device__ __forceinline__ float cu_ld(const void *p, size_t i, int bf16) {
    return bf16 ? cu_bf16_widen(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
__device__ __forceinline__ void cu_st(void *p, size_t i, float x, int bf16) {
    if (bf16)
        ((uint16_t *)p)[i] = cu_bf16_round(x);
    else
        ((float *)p)[i] = x;
}

/* A module-owned device scratch *buf of *have bytes grown to at least bytes (whole MiB; the
 * stream drained before the old one is freed, since ops issued may still read it; the contents
 * are not kept). Returns *buf. */
void *cu_scratch_grow(void **buf, size_t *have, size_t bytes);

/* Blocks of 256 threads covering n elements (at most 65535 * 16 blocks: grid-stride loops). */
static inline unsigned cu_blocks(size_t n) {
    size_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 1048560 ? 1048560 : b);
}

#ifdef __cplusplus
extern "C" {
#endif
/* cuda_gemm.cu: the matrix products (cuBLASLt, fp32 accumulation). */
void cu_matmul_forward(const typed_ctx *t, void *out, int ldo, const void *inp, int ldi,
                       const void *w, int ldw, int N, int IC, int OC, int acc);
void cu_matmul_backward(const typed_ctx *t, void *dinp, int lddi, int dinp_acc, float *dw, int lddw,
                        const void *dout, int ldd, const void *inp, int ldi, const void *w, int ldw,
                        int N, int IC, int OC);
void cu_matmul_forward_f32(const typed_ctx *t, float *out, const float *inp, const void *w, int N,
                           int IC, int OC);
void cu_matmul_backward_f32(const typed_ctx *t, float *dinp, float *dw, const float *dout,
                            const float *inp, const void *w, int N, int IC, int OC);
void cu_gemm_init(void); /* after cu_lt exists: anything the products cache */

/* cuda_elem.cu: element-wise ops, norms, RoPE, SwiGLU, embedding, conversions, loss, optimizer. */
void cu_zero(const typed_ctx *t, void *dst, size_t n);
void cu_copy(const typed_ctx *t, void *dst, const void *src, size_t n);
void cu_add(const typed_ctx *t, void *dst, const void *src, size_t n);
/* cuda_copy.cu: strided row copies (UPipe's stage gathers). */
void cu_copy_rows(const typed_ctx *t, void *dst, size_t ldd, const void *src, size_t lds,
                  size_t rows, size_t width);
void cu_embedding_forward(const typed_ctx *t, void *out, const int32_t *tokens, const void *wte,
                          int N, int C);
void cu_embedding_backward(const typed_ctx *t, float *dwte, const void *dout, const int32_t *tokens,
                           int N, int C);
void cu_rmsnorm_forward(const typed_ctx *t, void *out, int out_f32, float *rstd, const void *inp,
                        const void *w, int N, int C, float eps);
void cu_rmsnorm_backward(const typed_ctx *t, void *dinp, float *dw, const void *dout, int dout_f32,
                         const void *inp, const void *w, const float *rstd, int N, int C);
void cu_rope_forward(const typed_ctx *t, void *x, const float *cos_t, const float *sin_t, int N,
                     int nh, int HS);
void cu_rope_backward(const typed_ctx *t, void *dx, const float *cos_t, const float *sin_t, int N,
                      int nh, int HS);
void cu_swiglu_forward(const typed_ctx *t, void *out, const void *gate, const void *up, size_t n);
void cu_swiglu_backward(const typed_ctx *t, void *dgate, void *dup, const void *dout,
                        const void *gate, const void *up, size_t n);
void cu_convert(mem_dtype dst_t, void *dst, mem_dtype src_t, const void *src, size_t n);
double cu_cross_entropy_fused(float *logits, const int32_t *targets, int N, int V,
                              float grad_scale);
void cu_cross_entropy_rows(const float *logits, const int32_t *targets, int N, int V, double *loss,
                           int32_t *pred);
void cu_zero_f32(float *x, size_t n);
double cu_sum_squares(const float *x, size_t n);
size_t cu_first_nonfinite(const float *x, size_t n);
void cu_adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                     const backend_adamw *hp, int step, float grad_scale, int decay);
void cu_elem_init(void);

/* cuda_attention.cu: causal GQA flash attention with documents (kernels.h's contract). */
void cu_attention_forward(const typed_ctx *t, void *out, float *lse, const void *q, const void *k,
                          const void *v, const int32_t *doc_start, int T, int NH, int NKV, int HS,
                          float *ws);
void cu_attention_backward(const typed_ctx *t, void *dq, void *dk, void *dv, const void *dout,
                           const void *q, const void *k, const void *v, const void *out,
                           const float *lse, const int32_t *doc_start, int T, int NH, int NKV,
                           int HS, float *ws);
void cu_attention_init(void);
size_t cu_attention_scratch_bytes(void);

/* cuda_attention_tc.cu: the same attention on bf16 tensor cores (WMMA), P and dS rounded to bf16
 * before their products (FlashAttention-2's recipe, as the CPU's avx512bf16 path); bf16 tensors
 * of a head size that is a multiple of 16 up to 128 (cu_attention_tc_supported). cuda_attention.cu
 * routes to it when UPIPE_CUDA_ATTENTION=tc. */
int cu_attention_tc_supported(int HS);
void cu_attention_tc_forward(void *out, float *lse, const void *q, const void *k, const void *v,
                             const int32_t *doc_start, int T, int NH, int NKV, int HS);
void cu_attention_tc_backward(void *dq, void *dk, void *dv, const void *dout, const void *q,
                              const void *k, const void *v, const void *out, const float *lse,
                              const int32_t *doc_start, int T, int NH, int NKV, int HS);
size_t cu_attention_tc_scratch_bytes(void);
void cu_attention_tc_init(void);
#ifdef __cplusplus
}
#endif

#endif
