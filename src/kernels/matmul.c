/* matmul.c — linear layers through cblas_sgemm (HF weight layout: w (OC, IC), y = x w^T).
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
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, ldi, w, ldw,
                acc ? 1.0f : 0.0f, out, ldo);
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
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, ldd, w, ldw,
                    1.0f, dinp, lddi);
    // dw (OC, IC) += dout^T (OC, N) @ inp (N, IC)
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, ldd, inp, ldi,
                    1.0f, dw, lddw);
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

const char *blas_core(void) {
    return openblas_get_corename();
}

/* True for the OpenBLAS cores whose sgemm uses AVX2 or AVX-512 (the names openblas_get_corename
 * gives). */
static int blas_core_is_wide(const char *core) {
    static const char *const wide[] = {"haswell", "zen", "skylakex", "cooperlake",
                                       "sapphirerapids"};
    for (size_t i = 0; i < sizeof wide / sizeof *wide; i++)
        if (strcasecmp(core, wide[i]) == 0) return 1;
    return 0;
}

void blas_check_core(char **argv) {
#if defined(__x86_64__) && defined(__GNUC__)
    const char *core = openblas_get_corename();
    if (getenv("OPENBLAS_CORETYPE") != NULL || core == NULL || blas_core_is_wide(core)) return;
    const kernel_cpu *c = kernel_cpu_get();
    const char *want = NULL;
    if (kernel_cpu_avx512(c))
        want = "SkylakeX";
    else if (c->avx2 && c->fma)
        want = "Haswell";
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (want == NULL || n <= 0 || setenv("OPENBLAS_CORETYPE", want, 1) != 0) return;
    self[n] = '\0';
    execv(self, argv);             /* by its own path, so the process keeps its name (ps, pgrep) */
    unsetenv("OPENBLAS_CORETYPE"); /* exec failed: run on with the core OpenBLAS chose */
#else
    (void)argv;
#endif
}
