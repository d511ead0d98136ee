/* matmul.c — linear layers through sgemm_rm (OpenBLAS or oneDNN, blas_core.c; HF weight layout:
 * w (OC, IC), y = x w^T).
 * OpenBLAS threads each call itself; nothing here adds OpenMP on top. */
#include "kernels/kernels.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/check.h"
#include "kernels/dispatch.h"

void matmul_forward_ld(float *out, int ldo, const float *inp, int ldi, const float *w, int ldw,
                       int N, int IC, int OC, int acc) {
    UP_CHECK(N >= 0 && IC >= 0 && OC >= 0, "matmul_forward: negative shape N=%d IC=%d OC=%d", N, IC,
             OC);
    UP_CHECK(ldo >= OC && ldi >= IC && ldw >= IC,
             "matmul_forward: leading dimensions %d %d %d "
             "below the rows (OC=%d IC=%d)",
             ldo, ldi, ldw, OC, IC);
    if (N == 0 || OC == 0) return;
    if (IC == 0) { // BLAS wants lda >= 1; an empty sum is 0
        if (!acc)
            for (int i = 0; i < N; i++)
                memset(out + (size_t)i * ldo, 0, sizeof(float) * OC);
        return;
    }
    // out (N, OC) = inp (N, IC) @ w^T (IC, OC); beta = 0 never reads out (NaN garbage is fine)
    sgemm_rm(0, 1, N, OC, IC, 1.0f, inp, ldi, w, ldw, acc ? 1.0f : 0.0f, out, ldo);
}

void matmul_forward(float *out, const float *inp, const float *w, int N, int IC, int OC, int acc) {
    matmul_forward_ld(out, OC, inp, IC, w, IC, N, IC, OC, acc);
}

void matmul_backward_ld(float *dinp, int lddi, float *dw, int lddw, const float *dout, int ldd,
                        const float *inp, int ldi, const float *w, int ldw, int N, int IC, int OC) {
    UP_CHECK(N >= 0 && IC >= 0 && OC >= 0, "matmul_backward: negative shape N=%d IC=%d OC=%d", N,
             IC, OC);
    UP_CHECK(lddi >= IC && lddw >= IC && ldd >= OC && ldi >= IC && ldw >= IC,
             "matmul_backward: leading dimensions below the rows (OC=%d IC=%d)", OC, IC);
    if (N == 0 || IC == 0 || OC == 0) return; // every product is empty: nothing to add
    // dinp (N, IC) += dout (N, OC) @ w (OC, IC)
    if (dinp) sgemm_rm(0, 0, N, IC, OC, 1.0f, dout, ldd, w, ldw, 1.0f, dinp, lddi);
    // dw (OC, IC) += dout^T (OC, N) @ inp (N, IC)
    if (dw) sgemm_rm(1, 0, OC, IC, N, 1.0f, dout, ldd, inp, ldi, 1.0f, dw, lddw);
}

void matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     int N, int IC, int OC) {
    matmul_backward_ld(dinp, IC, dw, IC, dout, OC, inp, IC, w, IC, N, IC, OC);
}

/* One product (512, k) @ (k, n) whose operands are fresh anonymous mappings that are only read:
 * their pages are the kernel's shared zero page, so nothing of them becomes resident, while
 * OpenBLAS packs them through its per-thread buffers exactly as a real product of that width
 * would. Only the buffers' pages and the (512, n) result are touched. 512 rows: OpenBLAS 0.3.21
 * multiplies narrower products on one thread without its buffers (measured). */
int blas_touch_buffers(int n, int k) {
    const int m = 512;
    size_t abytes = (size_t)m * (size_t)k * sizeof(float);
    size_t bbytes = (size_t)k * (size_t)n * sizeof(float);
    void *a = mmap(NULL, abytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *b = mmap(NULL, bbytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    float *c = malloc((size_t)m * (size_t)n * sizeof(float));
    int rc = -1;
    if (a != MAP_FAILED && b != MAP_FAILED && c) {
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, m, b, k, 0.0f, c,
                    m);
        rc = 0;
    }
    if (a != MAP_FAILED) munmap(a, abytes);
    if (b != MAP_FAILED) munmap(b, bbytes);
    free(c);
    return rc;
}

void blas_set_threads(int n) {
    openblas_set_num_threads(n);
}

const char *blas_describe(void) {
    return openblas_get_config();
}
