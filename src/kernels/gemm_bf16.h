/* gemm_bf16.h — the paths behind gemm_bf16 (kernels.h), for tests and benchmarks: every path the
 * CPU runs is walked and compared, and the converted panels are timed at other block sizes.
 * The model calls gemm_bf16 only. */
#ifndef UP_KERNELS_GEMM_BF16_H
#define UP_KERNELS_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

typedef void (*gemm_bf16_fn)(int transa, int transb, int M, int N, int K, float alpha,
                             const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                             float *C, int ldc, float *ws);

typedef void (*gemm_bf16_io_fn)(int transa, int transb, int M, int N, int K, float alpha,
                                const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                                float *C, int ldc, const uint16_t *cin, uint16_t *cout, int ldco,
                                float *ws);
typedef void (*gemm_f32_bf16_fn)(int transa, int transb, int M, int N, int K, float alpha,
                                 const float *A, int lda, const uint16_t *B, int ldb, float beta,
                                 float *C, int ldc, float *ws);

/* A path (a route of the bf16 products): its name ("packed", "converted", "onednn"), what the
 * CPU needs, whether this CPU runs it, and its three products (kernels.h: gemm_bf16,
 * gemm_bf16_io, gemm_f32_bf16; arguments already checked, the product not empty). */
typedef struct {
    const char *name;
    const char *needs;
    int (*runs)(void);
    gemm_bf16_fn fn;
    gemm_bf16_io_fn io;
    gemm_f32_bf16_fn f32;
    void (*describe)(char *buf, size_t len); /* gemm_bf16_path's text */
} gemm_bf16_ops;

int gemm_bf16_path_count(void);
const gemm_bf16_ops *gemm_bf16_path_at(int i);
/* Makes the named path the one gemm_bf16 runs (tests, benchmarks); 0, or -1 if the binary lacks
 * it or this CPU cannot run it. */
int gemm_bf16_path_set(const char *name);
/* The route gemm_bf16 runs, for the header line (kernel_path_name): its name, and where it was
 * measured against oneDNN's (AMX-BF16) the ratio: "packed (onednn 0.80x packed, measured)". The
 * route is chosen at the first call. Main thread only. */
void gemm_bf16_route_name(char *buf, size_t len);

/* The converted-panel product with explicit blocks (mb, nb, kb >= 1; mb rows of A at a time per
 * thread): ws holds kb*nb + mb*kb floats per OpenMP thread (omp_get_max_threads()). gemm_bf16's
 * converted path is this with blocks that fill GEMM_BF16_WS_FLOATS. */
void gemm_bf16_converted_blocks(int transa, int transb, int M, int N, int K, float alpha,
                                const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                                float *C, int ldc, float *ws, int mb, int nb, int kb);

/* The packed path (gemm_packed.c) with explicit blocks, for tests and benchmarks: mc, nc, kc > 0
 * are capped (and rounded to whole micro-panels) to fit GEMM_BF16_WS_FLOATS, 0 takes the kernel
 * path's own; cin, cout and ldco as in gemm_bf16_io (NULL: beta C, no bf16 copy). M, N, K >= 1. */
void gemm_bf16_packed_blocks(int transa, int transb, int M, int N, int K, float alpha,
                             const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                             float *C, int ldc, const uint16_t *cin, uint16_t *cout, int ldco,
                             float *ws, int mc, int nc, int kc);
/* The packed path of gemm_f32_bf16 (kernels.h): A fp32, packed by copying. M, N, K >= 1. */
void gemm_f32_bf16_packed(int transa, int transb, int M, int N, int K, float alpha, const float *A,
                          int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc,
                          float *ws);

#endif
