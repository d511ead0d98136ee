/* backend.h — the compute seam (DESIGN.md §11): every operation on a tensor goes through one table
 * of functions, a backend. The CPU backend (backend_cpu, typed.c) is today's kernels; the CUDA
 * backend is a shared module (libupipe_cuda.so, src/cuda/) that `--device cuda` loads at run time
 * (backend_load), so the CPU binary starts on machines that have no CUDA libraries.
 *
 * The table is the ABI between upipe and the module: the module exports
 *     const backend_ops *upipe_backend_cuda(char *err, size_t errlen);
 * which returns its table (abi == BACKEND_ABI), or NULL with one line in err saying what is
 * missing (no device, no driver, a driver older than the runtime).
 *
 * Tensors. Every pointer a tensor op takes lives in the backend's memory space (`space`): host
 * memory for the CPU backend, device memory for CUDA. A `void *` tensor holds elements of the
 * run's type t->dt (f32 or bf16, core/dtype.h); one typed `float *` is fp32 whatever the type;
 * int32 index arrays (tokens, targets, doc_start) are in the backend's space too. The contracts
 * (shapes, layouts, overwrite or accumulate) are those of kernels.h and typed.h, op for op: the
 * CUDA ops compute the same functions (fp32 arithmetic, each bf16 output rounded once to nearest
 * even), in their own summation order. Ops run in order on the backend's one stream; a result
 * returned to the host (a loss, a sum of squares) waits for what came before it.
 *
 * The bf16 workspaces (ws) are the CPU backend's; the CUDA backend asks for none
 * (workspace_floats and attention_workspace_floats return 0) and ignores ws. */
#ifndef UP_KERNELS_BACKEND_H
#define UP_KERNELS_BACKEND_H

#include "core/dtype.h"
#include "core/mem.h" /* mem_space */

#include <stddef.h>
#include <stdint.h>

#define BACKEND_ABI 5

typedef struct backend_ops backend_ops;

/* The run's element type, the CPU backend's bf16 fp32 workspace, and the backend (NULL: CPU). */
typedef struct typed_ctx {
    mem_dtype dt; /* element type of the stored tensors */
    float *ws;    /* CPU, bf16: fp32 workspace of workspace_floats(...) floats; else NULL */
    size_t ws_n;
    const backend_ops *be; /* NULL: backend_cpu */
} typed_ctx;

/* AdamW's hyperparameters (kernels.h's adamw_params, the same layout). */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
} backend_adamw;

struct backend_ops {
    int abi;          /* BACKEND_ABI */
    const char *name; /* "cpu", "cuda" */
    mem_space space;  /* where its tensors live */

    /* ---- memory of its space (the CPU backend: NULL; mem.c allocates host memory) ---------- */
    void *(*alloc)(size_t bytes); /* zeroed; NULL when the space is short */
    void (*free)(void *p);
    void *(*alloc_pinned)(size_t bytes); /* page-locked host memory, zeroed; NULL when short */
    void (*free_pinned)(void *p);
    /* Copies between host memory (ordinary or pinned) and the space; both wait for them (the
     * CPU backend: memcpy). */
    void (*to_dev)(void *dst, const void *host_src, size_t bytes);
    void (*to_host)(void *host_dst, const void *src, size_t bytes);
    void (*sync)(void); /* waits for every op issued */
    /* The copy queue: copies between host memory (pinned, for them to overlap) and the space
     * that run beside the ops, on a stream of their own. A copy starts after every op issued
     * before it (after < 0; it may read or overwrite what they use), or after the ops issued
     * before copy_mark(after) only, and tags its completion; copy_wait makes the ops issued
     * after it wait for that completion (the host does not wait). A tag (>= 0, small) names the
     * latest copy or mark made with it; copy_sync makes the host wait for it (before it hands
     * the host side on); on a tag not used yet both return at once. The CPU backend copies at
     * once; its copy_mark, copy_wait and copy_sync do nothing. */
    /* Tags 0 .. 15 are the parameter store's (model/store.c), from 16 the checkpoints'. */
    void (*copy_out)(void *host_dst, const void *src, size_t bytes, int tag, int after);
    void (*copy_in)(void *dst, const void *host_src, size_t bytes, int tag, int after);
    void (*copy_mark)(int tag);
    void (*copy_wait)(int tag);
    void (*copy_sync)(int tag);
    void (*mem_info)(size_t *free_b, size_t *total); /* the device's free and total bytes */
    /* One line for --version and the run header: the device, its SMs and memory, the runtime,
     * driver and library versions. */
    const char *(*describe)(void);
    /* Device bytes the module holds itself (cuBLASLt's workspace, reduction scratch): the plan
     * counts them under runtime. */
    size_t (*module_bytes)(void);
    /* The device's dense bf16 rate on its datasheet, FLOP/s: the denominator of MFU on the step
     * line (0: none). */
    double peak_flops;
    /* The device this process uses (its index) and the devices the machine has: ranks of a node
     * whose indices are equal share one GPU (the CPU: 0 and 0). */
    int device, devices;
    /* Names the op running for an error message (the layer and step): set by the model. */
    void (*set_where)(const char *what, int layer, long step);
    /* Marks for the watchdog (core/watchdog.h): begin(what) before each wait of the host for the
     * device (what: the op set_where named, the backend's buffer), end() after it; set by
     * backend_load. NULL: the backend never waits (the CPU's). */
    void (*set_wait_hooks)(void (*begin)(const char *what), void (*end)(void));
    /* ---- collectives between ranks with GPUs of their own (NCCL, read on first use; NULL in
     * the CPU's). coll_unique_id (on a group's first rank: BACKEND_COLL_ID_BYTES, sent to the
     * others over MPI) and coll_init (every rank of the group, together) make a communicator;
     * -1 / NULL with one line in err when NCCL is not there or fails. The ops run on the
     * backend's stream after the ops before them (the host does not wait); the host's next
     * wait polls the communicators and stops the run with NCCL's line when a peer is lost. */
    int (*coll_unique_id)(void *id, char *err, size_t errlen);
    void *(*coll_init)(const void *id, int nranks, int rank, char *err, size_t errlen);
    void (*coll_destroy)(void *comm);
    /* nranks blocks of bytes: block j of send to rank j, block j of recv from rank j */
    void (*coll_alltoall)(void *comm, const void *send, void *recv, size_t bytes, int nranks);
    /* in place: full holds the group's blocks of bytes, this rank's at rank * bytes */
    void (*coll_allgather)(void *comm, void *full, size_t bytes, int rank);
    /* shard (n) := the sum over the group of block rank of full (nranks * n), in NCCL's order */
    void (*coll_reduce_scatter)(void *comm, const float *full, float *shard, size_t n);
    void (*coll_allreduce)(void *comm, float *x, size_t n); /* in place, NCCL's order */

    /* ---- tensor ops: typed.h's contracts (t->dt the stored type) ------------------------------
     */
    size_t (*workspace_floats)(mem_dtype dt, size_t maxw, size_t C);
    void (*zero)(const typed_ctx *t, void *dst, size_t n);
    void (*copy)(const typed_ctx *t, void *dst, const void *src, size_t n);
    void (*add)(const typed_ctx *t, void *dst, const void *src, size_t n);
    /* rows x width elements of t->dt: row i of dst (ldd elements apart) := row i of src (lds). */
    void (*copy_rows)(const typed_ctx *t, void *dst, size_t ldd, const void *src, size_t lds,
                      size_t rows, size_t width);
    void (*matmul_forward)(const typed_ctx *t, void *out, int ldo, const void *inp, int ldi,
                           const void *w, int ldw, int N, int IC, int OC, int acc);
    /* dinp += dout @ w (dinp_acc) or dinp = dout @ w (!dinp_acc; dinp NULL: skipped);
     * dw += dout^T @ inp (dw NULL: skipped). dw fp32. */
    void (*matmul_backward)(const typed_ctx *t, void *dinp, int lddi, int dinp_acc, float *dw,
                            int lddw, const void *dout, int ldd, const void *inp, int ldi,
                            const void *w, int ldw, int N, int IC, int OC);
    /* The LM head: out, inp, dout, dinp fp32 (packed rows), w stored. forward overwrites out;
     * backward accumulates into dinp and dw. */
    void (*matmul_forward_f32)(const typed_ctx *t, float *out, const float *inp, const void *w,
                               int N, int IC, int OC);
    void (*matmul_backward_f32)(const typed_ctx *t, float *dinp, float *dw, const float *dout,
                                const float *inp, const void *w, int N, int IC, int OC);
    void (*embedding_forward)(const typed_ctx *t, void *out, const int32_t *tokens, const void *wte,
                              int N, int C);
    void (*embedding_backward)(const typed_ctx *t, float *dwte, const void *dout,
                               const int32_t *tokens, int N, int C);
    void (*rmsnorm_forward)(const typed_ctx *t, void *out, int out_f32, float *rstd,
                            const void *inp, const void *w, int N, int C, float eps);
    void (*rmsnorm_backward)(const typed_ctx *t, void *dinp, float *dw, const void *dout,
                             int dout_f32, const void *inp, const void *w, const float *rstd, int N,
                             int C);
    void (*rope_forward)(const typed_ctx *t, void *x, const float *cos_t, const float *sin_t, int N,
                         int nh, int HS);
    void (*rope_backward)(const typed_ctx *t, void *dx, const float *cos_t, const float *sin_t,
                          int N, int nh, int HS);
    void (*swiglu_forward)(const typed_ctx *t, void *out, const void *gate, const void *up,
                           size_t n);
    void (*swiglu_backward)(const typed_ctx *t, void *dgate, void *dup, const void *dout,
                            const void *gate, const void *up, size_t n);
    size_t (*attention_workspace_floats)(mem_dtype dt, int T, int NH, int NKV, int HS);
    void (*attention_forward)(const typed_ctx *t, void *out, float *lse, const void *q,
                              const void *k, const void *v, const int32_t *doc_start, int T, int NH,
                              int NKV, int HS, float *ws);
    void (*attention_backward)(const typed_ctx *t, void *dq, void *dk, void *dv, const void *dout,
                               const void *q, const void *k, const void *v, const void *out,
                               const float *lse, const int32_t *doc_start, int T, int NH, int NKV,
                               int HS, float *ws);
    /* dst := src, n elements, converted between the two types (f32 -> bf16 rounds to nearest
     * even by dtype.h's rules; bf16 -> f32 is exact; equal types copy). */
    void (*convert)(mem_dtype dst_t, void *dst, mem_dtype src_t, const void *src, size_t n);

    /* ---- loss tiles (fp32 logits, kernels.h's cross_entropy_*) ------------------------------- */
    /* logits (N, V) in place become grad_scale * (softmax - onehot) (0 for targets < 0); returns
     * the sum of the valid rows' losses (a host double: waits). */
    double (*cross_entropy_fused)(float *logits, const int32_t *targets, int N, int V,
                                  float grad_scale);
    /* loss (N) and pred (N) are host arrays (either may be NULL); logits unchanged. */
    void (*cross_entropy_rows)(const float *logits, const int32_t *targets, int N, int V,
                               double *loss, int32_t *pred);

    /* ---- fp32 vectors: the optimizer side -------------------------------------------------- */
    void (*zero_f32)(float *x, size_t n);
    /* In double, in BACKEND_SUMSQ's order on every backend (the same bits on each); a host
     * result: waits. */
    double (*sum_squares)(const float *x, size_t n);
    /* Index of the first element that is NaN or +-Inf, or n when all are finite (waits). */
    size_t (*first_nonfinite)(const float *x, size_t n);
    /* kernels.h's adamw_update on n elements of the space. */
    void (*adamw_update)(float *param, const float *grad, float *m, float *v, size_t n,
                         const backend_adamw *hp, int step, float grad_scale, int decay);
};

/* sum_squares's order, one on every backend and every thread count, so the clipping norm, and
 * every weight after it, is the same wherever it is summed (an optimizer offloaded to the CPU
 * gives the device optimizer's bits): x is cut into chunks of BACKEND_SUMSQ_CHUNK floats; in a
 * chunk, lane j (< BACKEND_SUMSQ_LANES) sums the squares of elements j, j + LANES, j + 2 LANES,
 * ... in order, in double, from 0; the lanes are then added pairwise, lane j += lane j + w for
 * w = LANES / 2, ..., 2, 1, and the chunk's sum is lane 0. The chunks' sums are added in order,
 * from 0, within groups of BACKEND_SUMSQ_GROUP chunks, and the groups' sums in order, from 0.
 * The square of a float is exact in double, so a fused multiply-add gives the same bits. */
#define BACKEND_COLL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */
#define BACKEND_SUMSQ_CHUNK 4096
#define BACKEND_SUMSQ_LANES 32
#define BACKEND_SUMSQ_GROUP 256
/* The CPU backend: today's kernels (typed.c), on host memory. */
extern const backend_ops backend_cpu;

/* t's backend (the CPU's when t->be is NULL). */
static inline const backend_ops *backend_of(const typed_ctx *t) {
    return t && t->be ? t->be : &backend_cpu;
}

/* Loads the backend named by --device ("cpu": backend_cpu; "cuda": libupipe_cuda.so from the
 * folder of the running program, then the library path). NULL with one line in err saying what is
 * missing: the module, a library it needs, the driver, or a GPU. */
const backend_ops *backend_load(const char *name, char *err, size_t errlen);

/* The device memory the CUDA module holds from its start (its module_bytes when a run is
 * checked, before a step grows a scratch): cuBLASLt's workspace and the products' panel. */
#define BACKEND_CUDA_LT_WORKSPACE ((size_t)64 << 20)
#define BACKEND_CUDA_GEMM_PANEL ((size_t)64 << 20)

/* The CUDA backend as the plan sees it, without the module or a GPU (--dry-run --device-mem):
 * its space, its workspace sizes (none), its fixed bytes and a device with free_bytes free. It
 * runs no op: every tensor op is NULL. */
const backend_ops *backend_plan_cuda(size_t free_bytes);

#endif
