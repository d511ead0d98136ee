/* kernels.h — fp32 CPU kernels of the Llama forward/backward pass.
 *
 * Conventions
 *  - Row-major. Weights in HF layout: a linear layer W is (OC, IC) and y = x W^T.
 *  - Dimension names of DESIGN.md §1: N rows (tokens), C model dim, NH/NKV heads, HS head size,
 *    F ffn dim, V vocab. Sizes that can exceed 2^31 elements are size_t.
 *  - "overwrite" outputs are fully written; "accumulate" outputs are added to (+=), which is how
 *    gradients of the residual stream and of weights flow.
 *  - Every fast kernel has a plain reference twin in kernels_ref.h (same contract, simple loops,
 *    double accumulation where it matters); the twin is the oracle in tests.
 *  - Kernels use OpenMP internally where it pays; call them from the main thread.
 */
#ifndef UP_KERNELS_H
#define UP_KERNELS_H

#include "kernels/backend.h"

#include <stddef.h>
#include <stdint.h>

/* ---- matrix products (cblas_sgemm) ---------------------------------------------------------- */
/* The only BLAS calls of upipe are in src/kernels/. Every other file multiplies through these. */

/* out (N, OC) = inp (N, IC) @ w^T, w (OC, IC). overwrite (accumulate if acc != 0). */
void matmul_forward(float *out, const float *inp, const float *w, int N, int IC, int OC, int acc);
/* dinp (N, IC) += dout (N, OC) @ w        (skipped if dinp == NULL)
 * dw   (OC, IC) += dout^T @ inp           (skipped if dw == NULL)   both accumulate. */
void matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     int N, int IC, int OC);

/* Strided forms of the two above for row blocks of wider matrices: rows of out, inp, w, dinp, dw
 * and dout are ldo, ldi, ldw, lddi, lddw and ldd floats apart (>= their row length). Same
 * products, same summation order as the packed forms (which call these). */
void matmul_forward_ld(float *out, int ldo, const float *inp, int ldi, const float *w, int ldw,
                       int N, int IC, int OC, int acc);
void matmul_backward_ld(float *dinp, int lddi, float *dw, int lddw, const float *dout, int ldd,
                        const float *inp, int ldi, const float *w, int ldw, int N, int IC, int OC);

/* C (M, N) fp32 = alpha * op(A) @ op(B) + beta * C, cblas row-major semantics; A, B bf16 (bf16.h).
 * op(X) = X or X^T (transa/transb nonzero = transposed): A is (M, K) or, transposed, (K, M),
 * rows lda apart; B (K, N) or (N, K), rows ldb apart; C rows ldc apart. beta == 0 never reads C.
 * Products of bf16 values are exact in fp32 and every path sums them in fp32.
 * The path (DESIGN.md §5.1): our own packed product with the micro-kernel of the kernel path
 * (UPIPE_KERNEL or the CPU's best), on every CPU: fp32 FMA on bf16 widened while packing into ws
 * (avx512, avx2, portable), or VDPBF16PS on bf16 pairs packed as they are (avx512bf16, where the
 * dot product measured faster than FMA; its sums pair the terms, so its bits are its own). Two
 * other routes, tested: bf16 panels widened in ws and cblas_sgemm on them, and oneDNN's bf16 gemm
 * (gemm_bf16.h).
 * ws: caller-owned fp32 workspace of GEMM_BF16_WS_FLOATS floats (any content; a fixed size,
 * independent of the shape: the memory plan counts it), for the packed panels. Threads: the
 * OpenMP threads (omp_set_num_threads), splitting C's rows; oneDNN's are the OpenMP threads too.
 * Repeated calls give the same bits, and so do different thread counts on the packed path (on the
 * converted one only where OpenBLAS's sgemm does for different row counts: SkylakeX kernels yes,
 * Haswell no). Main thread only. */
enum {
    GEMM_BF16_KB = 1024, // the converted path's largest blocks of K and N; M takes the rest
    GEMM_BF16_NB = 1024, // of the workspace (DESIGN.md §5.1): 8 MiB
    GEMM_BF16_WS_FLOATS = 2 * GEMM_BF16_KB * GEMM_BF16_NB,
};
void gemm_bf16(int transa, int transb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
               const uint16_t *B, int ldb, float beta, float *C, int ldc, float *ws);
/* gemm_bf16 for a product whose result is stored in bf16: C (fp32, the caller's staging, M x N)
 * = alpha op(A) op(B) + widen(cin) (cin NULL: + beta C), then cout = bf16_from_f32(C) (cout NULL:
 * none). cin and cout are (M, N) bf16 with rows ldco apart; they may be the same (an accumulation
 * in place). Same sums as gemm_bf16; the widening and rounding run inside its threads. */
void gemm_bf16_io(int transa, int transb, int M, int N, int K, float alpha, const uint16_t *A,
                  int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc,
                  const uint16_t *cin, uint16_t *cout, int ldco, float *ws);
/* gemm_bf16 with an fp32 A (the LM head: fp32 loss-tile activations times bf16 weights): the
 * packed path copies A's panels where gemm_bf16 widens them; the converted one (also taken when
 * gemm_bf16's path is oneDNN, which has no such product) widens B's panels and lets each thread's
 * sgemm read A in place. Same ws. */
void gemm_f32_bf16(int transa, int transb, int M, int N, int K, float alpha, const float *A,
                   int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc, float *ws);
/* The path gemm_bf16 runs, for benchmark and run headers ("packed, avx512 micro-kernel (bf16
 * avx512bf16)", "openblas sgemm on converted panels (bf16 avx2)", "onednn 2.6 avx512_core_bf16");
 * chooses it first if needed. */
const char *gemm_bf16_path(void);

/* Threads of the BLAS library for the calls above (the OpenMP kernels follow omp_set_num_threads),
 * and a one-line description of the BLAS build, for the run summary. */
void blas_set_threads(int n);
const char *blas_describe(void);
/* The OpenBLAS core its kernels are for ("Haswell", "SkylakeX", ...: openblas_get_corename). */
const char *blas_core(void);
/* OpenBLAS (DYNAMIC_ARCH) fixes its kernels when it loads, from the CPU model or OPENBLAS_CORETYPE,
 * and both can be wrong for the host (Debian 12's 0.3.21 takes SSE3 kernels on Sapphire and
 * Emerald Rapids; OPENBLAS_CORETYPE=Haswell on an AVX-512 host runs at half the rate). Where the
 * core is narrower than the CPU's vectors, this measures it against the core that matches them
 * (a child process checks that core's products and reports its rate, blas_core.c) and, unless
 * that is below 0.8x, re-executes the program (argv as given) with OPENBLAS_CORETYPE naming it.
 * UPIPE_BLAS_CORE=NAME forces a core. Call first thing in main, before MPI starts. */
void blas_check_core(char **argv);
/* Why the core is the one it is: "CPU" (OpenBLAS's own choice), "OPENBLAS_CORETYPE",
 * "UPIPE_BLAS_CORE" or "calibrated: 1.93x Haswell of OPENBLAS_CORETYPE" (blas_check_core). */
const char *blas_core_reason(void);
/* C = alpha op(A) op(B) + beta C, row-major fp32 (cblas_sgemm's contract, arguments checked by
 * the caller): every fp32 product of the model. OpenBLAS, or oneDNN's sgemm where it measured
 * 1.5x faster at the first call (blas_core.c; UPIPE_SGEMM=openblas|onednn forces one). */
void sgemm_rm(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);
/* 1 if sgemm_rm runs oneDNN (measuring first if it has not); sgemm_agree makes it onednn or
 * OpenBLAS, so that all ranks of a job run the one their measurements agree on
 * (front_check_kernels). Main thread, before the first product of the run. */
int sgemm_uses_onednn(void);
void sgemm_agree(int onednn);
/* Which library sgemm_rm runs and why ("openblas (onednn 0.98x openblas, measured)"). */
const char *sgemm_route(void);
/* Makes OpenBLAS's per-thread packing buffers resident as a product n columns wide and k deep
 * would (DESIGN.md §5: the `runtime` category measures them). 0, or -1 out of memory. */
int blas_touch_buffers(int n, int k);

/* ---- embedding ------------------------------------------------------------------------------ */

/* out (N, C) = wte[tokens[i]] (wte (V, C)). overwrite. */
void embedding_forward(float *out, const int32_t *tokens, const float *wte, int N, int C);
/* dwte[tokens[i]] += dout[i]. accumulate; serial over i (duplicates), parallel over C chunks. */
void embedding_backward(float *dwte, const float *dout, const int32_t *tokens, int N, int C);

/* ---- RMSNorm -------------------------------------------------------------------------------- */

/* rstd[i] = 1/sqrt(mean(inp[i]^2) + eps); out[i] = inp[i] * rstd[i] * w. overwrite out, rstd. */
void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                     float eps);
/* dinp (N, C) += d/dinp; dw (C) += d/dw (dw may be NULL). Uses the saved rstd. accumulate. */
void rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                      const float *rstd, int N, int C);
/* rmsnorm_forward on the calling thread (no OpenMP region), the same bits: for a caller that
 * runs its own region over chunks of rows (typed.c). Likewise the _serial kernels below. */
void rmsnorm_forward_serial(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                            float eps);

/* ---- RoPE (HF "rotate_half" layout) --------------------------------------------------------- */

/* inv_freq (HS/2): theta^(-2i/HS) in float32, as HF computes it. overwrite. */
void rope_inv_freq(float *inv_freq, int HS, float theta);
/* The llama3 rule of HF transformers (_compute_llama3_parameters) applied to inv_freq in place:
 * low frequencies divided by factor, the band between blended. */
void rope_llama3_scale(float *inv_freq, int HS, float factor, float low_freq_factor,
                       float high_freq_factor, int original_max_pos);
/* cos, sin (N, HS/2) for positions pos0 .. pos0+N-1; angle computed in double. overwrite. */
void rope_tables(float *cos_t, float *sin_t, const float *inv_freq, int64_t pos0, int N, int HS);
/* In place on x (N, nh, HS), row i rotated by table row i:
 *   x1 = x[:HS/2], x2 = x[HS/2:]; out1 = x1*cos - x2*sin; out2 = x2*cos + x1*sin. */
void rope_forward(float *x, const float *cos_t, const float *sin_t, int N, int nh, int HS);
/* In place on dx (N, nh, HS): the transpose of rope_forward (rotation by -angle). */
void rope_backward(float *dx, const float *cos_t, const float *sin_t, int N, int nh, int HS);
void rope_forward_serial(float *x, const float *cos_t, const float *sin_t, int N, int nh, int HS);
void rope_backward_serial(float *dx, const float *cos_t, const float *sin_t, int N, int nh, int HS);

/* ---- SwiGLU --------------------------------------------------------------------------------- */

/* out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + exp(-x)). overwrite. n elements. */
void swiglu_forward(float *out, const float *gate, const float *up, size_t n);
/* dgate, dup overwrite (they may alias gate and up: computed element-wise in place). */
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, size_t n);
/* The same element by element on the calling thread (the bits where the parallel kernel's lanes
 * are vector lanes too: both inline one body in `omp simd` loops). */
void swiglu_forward_serial(float *out, const float *gate, const float *up, size_t n);
void swiglu_backward_serial(float *dgate, float *dup, const float *dout, const float *gate,
                            const float *up, size_t n);

/* ---- kernel path (run-time dispatch) -------------------------------------------------------- */
/* One binary holds every path; one table (src/kernels/kernel_path.h, DESIGN.md §8.1) says what
 * each kernel family runs on each: "avx512" (AVX-512 F, BW, DQ, VL), "avx2" (AVX2 and FMA) and
 * "portable" (plain C and cblas_sgemm; any CPU, the only path off x86-64) set the attention tiles,
 * the packed GEMM's micro-kernel and the bf16 conversions together. The first use (or
 * kernel_path_init) chooses: the row the environment variable UPIPE_KERNEL names, else the best
 * row this CPU runs (and then the CPU's best bf16 conversions); a refused UPIPE_KERNEL at first
 * use stops the process with the message (front ends call kernel_path_init first to say it
 * properly). The element-wise loops (src/kernels/dispatch.h) and OpenBLAS follow the CPU.
 * The path fixes the attention workspace size: never change it between
 * attention_workspace_floats and the calls that use that workspace. Main thread only. */

/* Chooses the path if none is chosen yet. 0, or -1 with "UPIPE_KERNEL: ..." in err (a name this
 * binary lacks, or a path this CPU cannot run). */
int kernel_path_init(char *err, size_t len);
/* Chooses the named path now, as UPIPE_KERNEL would (tests, benchmarks); 0, or -1 with the
 * message in err. */
int kernel_path_set(const char *name, char *err, size_t len);
/* 1 if this binary has the named path and this CPU runs it. */
int kernel_path_supported(const char *name);
/* The ranks' verdict on a row that must win a measurement (the avx512bf16 row: every rank
 * measured VDPBF16PS faster, all_win 1): where UPIPE_KERNEL is unset and this rank chose such a
 * row but another rank did not, this rank takes the next row without one, as if its own
 * measurement had lost (ranks on one kind of CPU then agree however loaded their cores were at
 * start). Main thread, before the kernels run. */
void kernel_path_agree(int all_win);
/* 1 when the choice is a row that won its measurement on this rank. */
int kernel_path_won(void);
/* The choice, one line for --version and the run header: the path ("avx512", "avx2+fma",
 * "portable"), ";", then what each family runs ("avx512; attention avx512, gemm avx512, bf16
 * avx512bf16 (CPU best), bf16 gemm packed, element-wise x86-64-v4 (CPU), openblas Cooperlake
 * (CPU)"). Chooses first if needed. */
const char *kernel_path_name(void);

/* VDPBF16PS's multiply-adds per second over fp32 FMA's on one core of this CPU, measured once at
 * the first call (about 4 ms; calibrate.c); 0 where the CPU lacks AVX512_BF16. The avx512bf16
 * row is the default only where it is at least KERNEL_DOT_MIN. */
double kernel_dot_ratio(void);
/* The loops it times (and bench_bf16dot, longer): n iterations of KERNEL_LOOP_CHAINS independent
 * VFMADD231PS zmm, or VDPBF16PS zmm, in registers; the result only keeps them from being folded.
 * x86-64 with AVX-512 F (and AVX512_BF16 for the second) only. */
enum { KERNEL_LOOP_CHAINS = 16 };
/* Seconds of CPU time of the calling thread: the clock of every start-up measurement (the dot
 * product, the OpenBLAS core, oneDNN's sgemm, the bf16 route), which another process sharing the
 * core does not advance. */
double kernel_thread_seconds(void);
float kernel_loop_fma(int n);
float kernel_loop_dot(int n);
#define KERNEL_DOT_MIN 1.3

/* ---- causal GQA attention, FlashAttention-2 style -------------------------------------------- */

/* Layouts: q (T, NH, HS), k and v (T, NKV, HS), out (T, NH, HS), all rows packed.
 * Query head h uses KV head h / (NH/NKV). Scale 1/sqrt(HS). Causal: query i sees keys 0..i.
 * Documents (packed sequences): doc_start (T) or NULL. doc_start[i] is the first position of the
 * document holding token i: 0 <= doc_start[i] <= i, and documents are contiguous (for i < j,
 * doc_start[j] == doc_start[i] or doc_start[j] > i). Query i then sees keys doc_start[i] .. i.
 * NULL: one document (doc_start[i] == 0), the plain causal case.
 * lse (NH, T): log-sum-exp of the scaled scores per (head, query), saved for backward.
 * Tiled with online softmax; tiles above the diagonal and tiles wholly before a query block's
 * documents skipped (work ~ sum of the documents' squares); no buffer grows with T*T.
 * ws: workspace of attention_workspace_floats(T, NH, NKV, HS) floats (caller-owned, any content).
 */
size_t attention_workspace_floats(int T, int NH, int NKV, int HS);
void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       const int32_t *doc_start, int T, int NH, int NKV, int HS, float *ws);
/* Progress hook: while set, both kernels call fn(arg) on the calling thread (thread 0 of their
 * OpenMP team, the main thread) after each task it runs, a few milliseconds apart at long T: the
 * exchanges UPipe keeps in flight during attention advance only inside MPI calls (MPI_Test).
 * fn must not touch the kernels' buffers; results do not change. NULL: none. Main thread only. */
void attention_set_progress(void (*fn)(void *), void *arg);
/* dq (T, NH, HS), dk and dv (T, NKV, HS): overwrite. Needs out and lse of the forward and the
 * same doc_start. */
void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                        const float *k, const float *v, const float *out, const float *lse,
                        const int32_t *doc_start, int T, int NH, int NKV, int HS, float *ws);

/* The same with bf16 operands (--dtype bf16, DESIGN.md §5.1): q, k, v, out, dout, dq, dk, dv are
 * bf16 (uint16_t, src/kernels/bf16.h), same layouts, documents, masking, progress hook and
 * contracts; lse stays fp32. Everything summed or exponentiated is fp32 (scores, softmax state,
 * accumulators, D, the dQ sums); each output element is rounded to bf16 once, at the end. On the
 * widening paths (avx512, avx2, portable) the results are bf16_round of the fp32 kernels' results
 * on the widened inputs, bit for bit (same path, same thread count), lse equal; the avx512bf16
 * path's products take P and dS rounded to bf16 (VDPBF16PS, FlashAttention-2's recipe), within
 * the bound of DESIGN.md §5.1. ws: attention_workspace_floats_bf16(T, NH, NKV, HS) fp32
 * floats (per thread the path's tiles and the widened blocks; D (NH, T); the low 16 bits of the
 * fp32 dQ accumulator, (T, NH, HS) uint16, whose top 16 bits live in dq until the end; (nt-1)
 * fp32 (T, NH, HS) buffers where the fp32 backward has its private dQ buffers), same rules as ws
 * above. */
size_t attention_workspace_floats_bf16(int T, int NH, int NKV, int HS);
void attention_forward_bf16(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k,
                            const uint16_t *v, const int32_t *doc_start, int T, int NH, int NKV,
                            int HS, float *ws);
void attention_backward_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout,
                             const uint16_t *q, const uint16_t *k, const uint16_t *v,
                             const uint16_t *out, const float *lse, const int32_t *doc_start, int T,
                             int NH, int NKV, int HS, float *ws);

/* ---- cross-entropy -------------------------------------------------------------------------- */

/* Fused forward + backward over N rows of logits (N, V), in place:
 *   returns sum over rows with 0 <= targets[i] < V of -log softmax(logits[i])[targets[i]] (double);
 *   logits[i] becomes grad_scale * (softmax(logits[i]) - onehot(targets[i])) for valid rows and
 *   0 for ignored rows (targets[i] < 0, e.g. -1). */
double cross_entropy_fused(float *logits, const int32_t *targets, int N, int V, float grad_scale);
/* Per-row statistics for evaluation, logits (N, V) unchanged: loss[i] = -log softmax(logits[i])
 * [targets[i]] (the value cross_entropy_fused adds for that row; 0 for ignored rows) and pred[i]
 * = the first index of the largest logit of row i (the top prediction, for every row). Either
 * output may be NULL. */
void cross_entropy_rows(const float *logits, const int32_t *targets, int N, int V, double *loss,
                        int32_t *pred);

/* ---- optimizer ------------------------------------------------------------------------------ */

/* AdamW's hyperparameters: the backends' one struct (backend.h). */
typedef backend_adamw adamw_params;

/* AdamW on n elements, decoupled weight decay, bias correction; step is 1-based.
 * g = grad * grad_scale (the clipping factor); m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * param -= lr * (mhat / (sqrt(vhat) + eps) + wd * param). decay != 0 applies weight decay. */
void adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                  const adamw_params *hp, int step, float grad_scale, int decay);
/* Sum of squares in double (for the global gradient norm), in backend.h's BACKEND_SUMSQ order:
 * the same bits for any thread count and on every backend. */
double sum_squares(const float *x, size_t n);
/* Clip factor for global norm clipping: min(1, max_norm / (norm + 1e-6)); max_norm <= 0: 1. */
float clip_factor(double norm, float max_norm);
/* Learning rate at step (0-based) of total: linear warm-up over `warmup` steps from lr/warmup
 * to lr, then cosine decay to lr * min_frac at the last step. */
float lr_schedule(int step, int total, float lr, int warmup, float min_frac);

#endif
