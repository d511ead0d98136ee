/* cuda_gemm.cu — the matrix products of typed.h on the device: cuBLASLt (cublasLtMatmul) on
 * cu_stream, fp32 accumulation, cu_lt_ws as its workspace. bf16 operands run on the tensor cores
 * with CUBLAS_COMPUTE_32F; fp32 operands in fp32 (CUBLAS_COMPUTE_32F_FAST_TF32 only when
 * UPIPE_TF32=1 set cu_tf32). A bf16 output is rounded once from the fp32 result; dw is fp32.
 *
 * Row-major to cuBLASLt's column-major. A row-major X (R, K) whose rows are ld elements apart is,
 * byte for byte, the column-major X^T (K, R) with leading dimension ld. So each product is written
 * for the transposes, D^T = op(A) op(B), with m x n the transposed output and k the inner size:
 *   forward  out (N, OC) = inp @ w^T  ->  out^T (OC, N) = w^T^T inp^T:
 *            A = w   stored (IC, OC) ld ldw, op T;  B = inp  stored (IC, N) ld ldi, op N;
 *            m = OC, n = N, k = IC;  C = D = out (OC, N) ld ldo                       ("TN")
 *   dinp     (N, IC) = dout @ w      ->  dinp^T (IC, N) = w^T dout^T:
 *            A = w   stored (IC, OC) ld ldw, op N;  B = dout stored (OC, N) ld ldd, op N;
 *            m = IC, n = N, k = OC;  C = D = dinp (IC, N) ld lddi                     ("NN")
 *   dw       (OC, IC) += dout^T @ inp ->  dw^T (IC, OC) += inp^T dout:
 *            A = inp stored (IC, N) ld ldi, op N;   B = dout stored (OC, N) ld ldd, op T;
 *            m = IC, n = OC, k = N;  C = D = dw (IC, OC) ld lddw                       ("NT")
 * The LM head's fp32 forms use the same three with packed rows; under bf16 its weights are
 * widened to fp32 a panel of rows at a time into a module-owned scratch (the activations are never
 * rounded to bf16), and the products run panel after panel on the TF32 tensor cores: a bf16 run
 * accepts each stored tensor rounded to 8 significant bits, and TF32 keeps 11 of the fp32
 * operands (bf16 weights exactly), so the LM head adds errors 8x below the run's own (DESIGN.md
 * §11), at about 8x fp32's speed. An fp32 run's LM head stays in fp32.
 *
 * Descriptors (the matmul descriptor, the A/B/C layouts) and the heuristic's first algorithm are
 * cached by the whole problem (types, transposes, shape, leading dimensions, beta's use, pointer
 * alignment), so a step reuses them and every call of a shape runs the same algorithm: the same
 * bits run to run. Split-K schemes that add partial sums in the output type are excluded for
 * bf16 outputs (one rounding per output). */
#include "cuda/cuda_int.h"

#include <stdio.h>
#include <string.h>

/* The LM head's widened weight panel: rows of fp32 weights (a multiple of 64 rows at a time). */
#define CU_GEMM_PANEL_BYTES BACKEND_CUDA_GEMM_PANEL
static float *cu_panel;

/* ---- the descriptor cache ---------------------------------------------------------------------
 */

/* One product: D = alpha op(A) op(B) + beta C, column-major terms (see the header); C is D. */
typedef struct {
    cudaDataType_t ab, cd; /* stored types of A, B and of C, D */
    cublasOperation_t ta, tb;
    int m, n, k;
    const void *a;
    int64_t lda;
    const void *b;
    int64_t ldb;
    void *c;
    int64_t ldc;
    float beta;
    int tf32; /* fp32 operands on TF32 tensor cores (a bf16 run's LM head) */
} lt_prod;

/* Everything the descriptors and the algorithm depend on (memset before filling: compared as
 * bytes). */
typedef struct {
    int32_t ab, cd, compute, ta, tb, m, n, k;
    int64_t lda, ldb, ldc;
    int32_t beta_used, align_a, align_b, align_c;
} lt_key;

typedef struct {
    int used;
    lt_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} lt_entry;

enum { LT_CACHE = 64 };
static lt_entry lt_cache[LT_CACHE];
static int lt_next; /* round-robin victim once the table is full */

static size_t dt_bytes(cudaDataType_t t) {
    return t == CUDA_R_16BF ? 2 : 4;
}

/* The alignment cuBLASLt may assume for a matrix: the largest power of two (at most 256) that
 * divides both its address and its row stride in bytes. */
static int32_t align_of(const void *p, int64_t ld, cudaDataType_t t) {
    uint64_t v = (uint64_t)(uintptr_t)p | (uint64_t)ld * dt_bytes(t) | 256u;
    return (int32_t)(v & (~v + 1));
}

static cublasComputeType_t compute_of(cudaDataType_t ab, int tf32) {
    if (ab == CUDA_R_32F && (cu_tf32 || tf32)) return CUBLAS_COMPUTE_32F_FAST_TF32;
    return CUBLAS_COMPUTE_32F;
}

static lt_key key_of(const lt_prod *g) {
    lt_key k;
    memset(&k, 0, sizeof k);
    k.ab = g->ab, k.cd = g->cd, k.compute = compute_of(g->ab, g->tf32);
    k.ta = g->ta, k.tb = g->tb, k.m = g->m, k.n = g->n, k.k = g->k;
    k.lda = g->lda, k.ldb = g->ldb, k.ldc = g->ldc;
    k.beta_used = g->beta != 0.0f;
    k.align_a = align_of(g->a, g->lda, g->ab);
    k.align_b = align_of(g->b, g->ldb, g->ab);
    k.align_c = align_of(g->c, g->ldc, g->cd);
    return k;
}

static void entry_destroy(lt_entry *e) {
    if (!e->used) return;
    LT_CHECK(cublasLtMatrixLayoutDestroy(e->la));
    LT_CHECK(cublasLtMatrixLayoutDestroy(e->lb));
    LT_CHECK(cublasLtMatrixLayoutDestroy(e->lc));
    LT_CHECK(cublasLtMatmulDescDestroy(e->desc));
    e->used = 0;
}

static const char *type_name(int32_t t) {
    return t == CUDA_R_16BF ? "bf16" : "f32";
}

/* The heuristic's first algorithm for e's descriptors under k's alignments; none: cu_fail. */
static void entry_pick_algo(lt_entry *e, const lt_key *k) {
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = CU_LT_WS;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws, sizeof ws));
    // a bf16 output is rounded once: no split-K partial sums kept in the output type
    uint32_t mask =
        k->cd == CUDA_R_16BF
            ? (uint32_t)(CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
            : (uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                  &mask, sizeof mask));
    const struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        int32_t v;
    } al[4] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k->align_a},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k->align_b},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k->align_c},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k->align_c}};
    for (int i = 0; i < 4; i++) {
        uint32_t v = (uint32_t)al[i].v;
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, al[i].attr, &v, sizeof v));
    }
    cublasLtMatmulHeuristicResult_t res;
    int count = 0;
    memset(&res, 0, sizeof res);
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(cu_lt, e->desc, e->la, e->lb, e->lc, e->lc, pref, 1,
                                            &res, &count));
    LT_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (count < 1 || res.state != CUBLAS_STATUS_SUCCESS) {
        static char msg[320];
        snprintf(msg, sizeof msg,
                 "no cuBLASLt algorithm for m=%d n=%d k=%d, A/B %s op %c%c, C/D %s, lda=%lld "
                 "ldb=%lld ldc=%lld, alignments %d/%d/%d bytes",
                 k->m, k->n, k->k, type_name(k->ab), k->ta == CUBLAS_OP_T ? 'T' : 'N',
                 k->tb == CUBLAS_OP_T ? 'T' : 'N', type_name(k->cd), (long long)k->lda,
                 (long long)k->ldb, (long long)k->ldc, k->align_a, k->align_b, k->align_c);
        cu_fail("cublasLtMatmulAlgoGetHeuristic", msg, __FILE__, __LINE__);
    }
    e->algo = res.algo;
}

/* Builds e for key k (g the product it came from). */
static void entry_build(lt_entry *e, const lt_key *k, const lt_prod *g) {
    LT_CHECK(cublasLtMatmulDescCreate(&e->desc, (cublasComputeType_t)k->compute, CUDA_R_32F));
    LT_CHECK(
        cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &g->ta, sizeof g->ta));
    LT_CHECK(
        cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &g->tb, sizeof g->tb));
    // stored shapes: op(A) is m x k, op(B) is k x n
    uint64_t ar = g->ta == CUBLAS_OP_N ? g->m : g->k, ac = g->ta == CUBLAS_OP_N ? g->k : g->m;
    uint64_t br = g->tb == CUBLAS_OP_N ? g->k : g->n, bc = g->tb == CUBLAS_OP_N ? g->n : g->k;
    LT_CHECK(cublasLtMatrixLayoutCreate(&e->la, g->ab, ar, ac, g->lda));
    LT_CHECK(cublasLtMatrixLayoutCreate(&e->lb, g->ab, br, bc, g->ldb));
    LT_CHECK(cublasLtMatrixLayoutCreate(&e->lc, g->cd, (uint64_t)g->m, (uint64_t)g->n, g->ldc));
    e->key = *k;
    e->used = 1;
    entry_pick_algo(e, k);
}

static lt_entry *entry_for(const lt_prod *g) {
    lt_key k = key_of(g);
    for (int i = 0; i < LT_CACHE; i++)
        if (lt_cache[i].used && memcmp(&lt_cache[i].key, &k, sizeof k) == 0) return &lt_cache[i];
    lt_entry *e = NULL;
    for (int i = 0; i < LT_CACHE && !e; i++)
        if (!lt_cache[i].used) e = &lt_cache[i];
    if (!e) {
        e = &lt_cache[lt_next];
        lt_next = (lt_next + 1) % LT_CACHE;
        entry_destroy(e);
    }
    entry_build(e, &k, g);
    return e;
}

/* Runs one product on cu_stream (m, n, k all > 0). */
static void lt_run(const lt_prod *g) {
    lt_entry *e = entry_for(g);
    float alpha = 1.0f, beta = g->beta;
    LT_CHECK(cublasLtMatmul(cu_lt, e->desc, &alpha, g->a, e->la, g->b, e->lb, &beta, g->c, e->lc,
                            g->c, e->lc, &e->algo, cu_lt_ws, CU_LT_WS, cu_stream));
}

/* ---- helpers ----------------------------------------------------------------------------------
 */

static cudaDataType_t stored(const typed_ctx *t) {
    return t->dt == MEM_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* rows x cols elements of es bytes, rows ld elements apart, := 0 (a product with k = 0). */
static void zero_rows(void *p, int64_t ld, int rows, int cols, size_t es) {
    if (rows <= 0 || cols <= 0) return;
    CU_CHECK(cudaMemset2DAsync(p, (size_t)ld * es, 0, (size_t)cols * es, (size_t)rows, cu_stream));
}

static lt_prod prod(cudaDataType_t ab, cudaDataType_t cd, cublasOperation_t ta,
                    cublasOperation_t tb, int m, int n, int k, const void *a, int64_t lda,
                    const void *b, int64_t ldb, void *c, int64_t ldc, float beta) {
    lt_prod g = {ab, cd, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta, 0};
    return g;
}

__global__ void cu_widen_rows(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = cu_bf16_widen(src[i]);
}

/* Rows [r0, r0 + nr) of the bf16 (rows, IC) w widened into cu_panel (nr x IC, packed). */
static const float *widen_panel(const void *w, int r0, int nr, int IC) {
    size_t n = (size_t)nr * (size_t)IC;
    cu_widen_rows<<<cu_blocks(n), 256, 0, cu_stream>>>(
        cu_panel, (const uint16_t *)w + (size_t)r0 * (size_t)IC, n);
    CU_LAUNCHED("cu_widen_rows (LM head weights)");
    return cu_panel;
}

/* Rows of the LM head's weights per widened panel: a multiple of 64 (the offsets into out and
 * dout keep their alignment) unless a single panel holds them all. */
static int panel_rows(int OC, int IC) {
    size_t cap = CU_GEMM_PANEL_BYTES / sizeof(float) / (size_t)IC;
    if (cap >= (size_t)OC) return OC;
    if (cap < 64) {
        static char msg[160];
        snprintf(msg, sizeof msg, "LM head rows of %d elements do not fit the %zu MiB panel", IC,
                 CU_GEMM_PANEL_BYTES >> 20);
        cu_fail("matmul_forward_f32", msg, __FILE__, __LINE__);
    }
    return (int)(cap / 64 * 64);
}

/* ---- the ops ----------------------------------------------------------------------------------
 */

extern "C" void cu_matmul_forward(const typed_ctx *t, void *out, int ldo, const void *inp, int ldi,
                                  const void *w, int ldw, int N, int IC, int OC, int acc) {
    if (N <= 0 || OC <= 0) return;
    cudaDataType_t dt = stored(t);
    if (IC <= 0) {
        if (!acc) zero_rows(out, ldo, N, OC, dt_bytes(dt));
        return;
    }
    lt_prod g = prod(dt, dt, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, w, ldw, inp, ldi, out, ldo,
                     acc ? 1.0f : 0.0f);
    lt_run(&g);
}

extern "C" void cu_matmul_backward(const typed_ctx *t, void *dinp, int lddi, int dinp_acc,
                                   float *dw, int lddw, const void *dout, int ldd, const void *inp,
                                   int ldi, const void *w, int ldw, int N, int IC, int OC) {
    if (N <= 0 || IC <= 0) return;
    cudaDataType_t dt = stored(t);
    if (dinp && OC <= 0 && !dinp_acc) zero_rows(dinp, lddi, N, IC, dt_bytes(dt));
    if (OC <= 0) return;
    if (dinp) { // dinp^T (IC, N) (+)= w^T (IC, OC) dout^T (OC, N)
        lt_prod g = prod(dt, dt, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, w, ldw, dout, ldd, dinp, lddi,
                         dinp_acc ? 1.0f : 0.0f);
        lt_run(&g);
    }
    if (dw) { // dw^T (IC, OC) += inp^T (IC, N) dout (N, OC): fp32 C/D
        lt_prod g = prod(dt, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, ldi, dout, ldd,
                         dw, lddw, 1.0f);
        lt_run(&g);
    }
}

extern "C" void cu_matmul_forward_f32(const typed_ctx *t, float *out, const float *inp,
                                      const void *w, int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (IC <= 0) {
        zero_rows(out, OC, N, OC, sizeof(float));
        return;
    }
    if (t->dt != MEM_DTYPE_BF16) {
        lt_prod g = prod(CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, w, IC, inp,
                         IC, out, OC, 0.0f);
        lt_run(&g);
        return;
    }
    // out[:, v0 : v0 + nv] = inp @ panel^T, a widened panel of w's rows at a time
    int rows = panel_rows(OC, IC);
    for (int v0 = 0; v0 < OC; v0 += rows) {
        int nv = OC - v0 < rows ? OC - v0 : rows;
        const float *p = widen_panel(w, v0, nv, IC);
        lt_prod g = prod(CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, nv, N, IC, p, IC, inp,
                         IC, out + v0, OC, 0.0f);
        g.tf32 = 1;
        lt_run(&g);
    }
}

extern "C" void cu_matmul_backward_f32(const typed_ctx *t, float *dinp, float *dw,
                                       const float *dout, const float *inp, const void *w, int N,
                                       int IC, int OC) {
    if (N <= 0 || IC <= 0 || OC <= 0) return;
    if (dinp && t->dt != MEM_DTYPE_BF16) {
        lt_prod g = prod(CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, w, IC, dout,
                         OC, dinp, IC, 1.0f);
        lt_run(&g);
    } else if (dinp) { // dinp += dout[:, v0 : v0 + nv] @ panel, panels in order of v0
        int rows = panel_rows(OC, IC);
        for (int v0 = 0; v0 < OC; v0 += rows) {
            int nv = OC - v0 < rows ? OC - v0 : rows;
            const float *p = widen_panel(w, v0, nv, IC);
            lt_prod g = prod(CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, nv, p, IC,
                             dout + v0, OC, dinp, IC, 1.0f);
            g.tf32 = 1;
            lt_run(&g);
        }
    }
    if (dw) { // dw^T (IC, OC) += inp^T (IC, N) dout (N, OC), all fp32
        lt_prod g = prod(CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, dout,
                         OC, dw, IC, 1.0f);
        g.tf32 = t->dt == MEM_DTYPE_BF16;
        lt_run(&g);
    }
}

extern "C" void cu_gemm_init(void) {
    for (int i = 0; i < LT_CACHE; i++)
        entry_destroy(&lt_cache[i]);
    lt_next = 0;
    if (!cu_panel) CU_CHECK(cudaMalloc((void **)&cu_panel, CU_GEMM_PANEL_BYTES));
}

/* Device bytes this file holds beyond cu_lt_ws: the LM head's widened weight panel. */
extern "C" size_t cu_gemm_scratch_bytes(void) {
    return CU_GEMM_PANEL_BYTES;
}
