/* matmul.c — linear layers through cblas_sgemm (HF weight layout: w (OC, IC), y = x w^T).
 * OpenBLAS threads each call itself; nothing here adds OpenMP on top. */
#include "kernels/kernels.h"

#include <cblas.h>
#include <string.h>

#include "core/check.h"

void matmul_forward(float *out, const float *inp, const float *w, int N, int IC, int OC, int acc) {
    UP_CHECK(N >= 0 && IC >= 0 && OC >= 0, "matmul_forward: negative shape N=%d IC=%d OC=%d", N, IC,
             OC);
    if (N == 0 || OC == 0) return;
    if (IC == 0) { // BLAS wants lda >= 1; an empty sum is 0
        if (!acc) memset(out, 0, up_mul3((size_t)N, (size_t)OC, sizeof(float)));
        return;
    }
    // out (N, OC) = inp (N, IC) @ w^T (IC, OC); beta = 0 never reads out (NaN garbage is fine)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC,
                acc ? 1.0f : 0.0f, out, OC);
}

void matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     int N, int IC, int OC) {
    UP_CHECK(N >= 0 && IC >= 0 && OC >= 0, "matmul_backward: negative shape N=%d IC=%d OC=%d", N,
             IC, OC);
    if (N == 0 || IC == 0 || OC == 0) return; // every product is empty: nothing to add
    // dinp (N, IC) += dout (N, OC) @ w (OC, IC)
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, w, IC,
                    1.0f, dinp, IC);
    // dw (OC, IC) += dout^T (OC, N) @ inp (N, IC)
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC,
                    1.0f, dw, IC);
}

void blas_set_threads(int n) { openblas_set_num_threads(n); }

const char *blas_describe(void) { return openblas_get_config(); }
