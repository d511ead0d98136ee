/* kernels_ref.h — plain reference twins of kernels.h: same contracts, simple loops, double
 * accumulation. Slow; the oracle in tests. The attention twin materialises one (T) score row at
 * a time per (head, query) and is O(T^2 * HS) time. */
#ifndef UP_KERNELS_REF_H
#define UP_KERNELS_REF_H

#include "kernels/kernels.h"

void ref_matmul_forward(float *out, const float *inp, const float *w, int N, int IC, int OC,
                        int acc);
void ref_matmul_backward(float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, int N, int IC, int OC);
void ref_embedding_forward(float *out, const int32_t *tokens, const float *wte, int N, int C);
void ref_embedding_backward(float *dwte, const float *dout, const int32_t *tokens, int N, int C);
void ref_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         float eps);
void ref_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C);
void ref_rope_forward(float *x, const float *inv_freq, int64_t pos0, int N, int nh, int HS);
void ref_rope_backward(float *dx, const float *inv_freq, int64_t pos0, int N, int nh, int HS);
void ref_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void ref_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n);
/* doc_start (T) or NULL as in attention_forward: query i sees keys doc_start[i] .. i. */
void ref_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                           const int32_t *doc_start, int T, int NH, int NKV, int HS);
void ref_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                            const float *k, const float *v, const int32_t *doc_start, int T, int NH,
                            int NKV, int HS);
double ref_cross_entropy_fused(float *logits, const int32_t *targets, int N, int V,
                               float grad_scale);
void ref_cross_entropy_rows(const float *logits, const int32_t *targets, int N, int V, double *loss,
                            int32_t *pred);
void ref_adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                      const adamw_params *hp, int step, float grad_scale, int decay);

#endif
