/* bench_typed — the typed kernels (kernels/typed.h) of one layer and the LM head of
 * configs/bench.json (C 512, F 1408, NH 8, NKV 4, HS 64, V 4096) at T tokens, fp32 against bf16:
 * every call a training step makes outside attention, timed per operation, the two types taking
 * turns within each repetition (the machines are shared: a ratio from one run is what counts).
 * Prints each operation's median seconds for f32 and bf16 and their ratio, then the sums.
 * usage: bench_typed [T (4096)] [threads (2)] [reps (7)] [gemm_bf16 paths]: with paths (e.g.
 * "converted,packed") one bf16 column per path, all taking turns. UPIPE_KERNEL, UPIPE_BLAS_CORE
 * and UPIPE_SGEMM apply as in a run (the OpenBLAS core is chosen as upipe chooses it). Also
 * prints the memory bandwidth of this host (a copy and a read of 1 GiB on the threads), the
 * yardstick of the element-wise operations (bench/bench_peak.py's roofline). */
#include "bench_util.h"
#include "kernels/bf16.h"
#include "kernels/gemm_bf16.h"
#include "kernels/typed.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { C = 512, F = 1408, NH = 8, NKV = 4, HS = 64, V = 4096, LOSS_ROWS = 1024 };

typedef struct {
    typed_ctx t;
    void *x, *xn, *q, *k, *v, *o, *g, *u, *h, *dx, *dxn, *dq, *dk, *dv, *dout, *dg, *du, *dh;
    void *wq, *wk, *wv, *wo, *wg, *wu, *wd, *wn, *wlm;
    float *rstd, *dwq, *dwk, *dwv, *dwo, *dwg, *dwu, *dwd, *dwn, *dwlm, *cos_t, *sin_t;
    float *lin, *logits, *dlogits, *dlin;
    int32_t *targets;
} layer;

static void *alloc_fill(mem_dtype dt, size_t n, float scale, unsigned *seed) {
    float *f = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        f[i] = scale * ((float)(*seed >> 8) / 16777216.0f - 0.5f);
    }
    if (dt == MEM_DTYPE_F32) return f;
    uint16_t *b = malloc(n * sizeof(uint16_t));
    bf16_from_f32(f, b, n);
    free(f);
    return b;
}

static float *falloc(size_t n, float scale, unsigned *seed) {
    return alloc_fill(MEM_DTYPE_F32, n, scale, seed);
}

static void layer_init(layer *L, mem_dtype dt, int T) {
    unsigned s = 12345;
    memset(L, 0, sizeof *L);
    L->t.dt = dt;
    L->t.ws_n = typed_workspace_floats(dt, F > V ? F : V, C);
    L->t.ws = L->t.ws_n ? malloc(L->t.ws_n * sizeof(float)) : NULL;
    size_t TC = (size_t)T * C, TQ = (size_t)T * NH * HS, TK = (size_t)T * NKV * HS,
           TF = (size_t)T * F;
    void **tok[] = {&L->x, &L->xn, &L->o, &L->dx, &L->dxn, &L->dout};
    for (size_t i = 0; i < sizeof tok / sizeof *tok; i++)
        *tok[i] = alloc_fill(dt, TC, 2.0f, &s);
    L->q = alloc_fill(dt, TQ, 2.0f, &s), L->dq = alloc_fill(dt, TQ, 2.0f, &s);
    L->k = alloc_fill(dt, TK, 2.0f, &s), L->dk = alloc_fill(dt, TK, 2.0f, &s);
    L->v = alloc_fill(dt, TK, 2.0f, &s), L->dv = alloc_fill(dt, TK, 2.0f, &s);
    void **ff[] = {&L->g, &L->u, &L->h, &L->dg, &L->du, &L->dh};
    for (size_t i = 0; i < sizeof ff / sizeof *ff; i++)
        *ff[i] = alloc_fill(dt, TF, 2.0f, &s);
    L->wq = alloc_fill(dt, (size_t)NH * HS * C, 0.05f, &s);
    L->wk = alloc_fill(dt, (size_t)NKV * HS * C, 0.05f, &s);
    L->wv = alloc_fill(dt, (size_t)NKV * HS * C, 0.05f, &s);
    L->wo = alloc_fill(dt, (size_t)C * NH * HS, 0.05f, &s);
    L->wg = alloc_fill(dt, (size_t)F * C, 0.05f, &s);
    L->wu = alloc_fill(dt, (size_t)F * C, 0.05f, &s);
    L->wd = alloc_fill(dt, (size_t)C * F, 0.05f, &s);
    L->wn = alloc_fill(dt, C, 1.0f, &s);
    L->wlm = alloc_fill(dt, (size_t)V * C, 0.05f, &s);
    L->rstd = falloc((size_t)T, 1.0f, &s);
    L->dwq = falloc((size_t)NH * HS * C, 0.0f, &s), L->dwk = falloc((size_t)NKV * HS * C, 0.0f, &s);
    L->dwv = falloc((size_t)NKV * HS * C, 0.0f, &s), L->dwo = falloc((size_t)C * NH * HS, 0.0f, &s);
    L->dwg = falloc((size_t)F * C, 0.0f, &s), L->dwu = falloc((size_t)F * C, 0.0f, &s);
    L->dwd = falloc((size_t)C * F, 0.0f, &s), L->dwn = falloc(C, 0.0f, &s);
    L->dwlm = falloc((size_t)V * C, 0.0f, &s);
    L->cos_t = falloc((size_t)T * HS / 2, 1.0f, &s),
    L->sin_t = falloc((size_t)T * HS / 2, 1.0f, &s);
    L->lin = falloc((size_t)LOSS_ROWS * C, 2.0f, &s);
    L->logits = falloc((size_t)LOSS_ROWS * V, 0.0f, &s);
    L->dlogits = falloc((size_t)LOSS_ROWS * V, 0.01f, &s);
    L->dlin = falloc((size_t)LOSS_ROWS * C, 0.0f, &s);
    L->targets = malloc(sizeof(int32_t) * LOSS_ROWS);
    for (int i = 0; i < LOSS_ROWS; i++)
        L->targets[i] = (int32_t)((unsigned)i * 2654435761u % V);
}

enum {
    OP_NORM_F,
    OP_QKV_F,
    OP_ROPE_F,
    OP_O_F,
    OP_GATEUP_F,
    OP_SWIGLU_F,
    OP_DOWN_F,
    OP_ADD,
    OP_LM_F,
    OP_LOSS,
    OP_LM_B,
    OP_DOWN_B,
    OP_SWIGLU_B,
    OP_GATEUP_B,
    OP_O_B,
    OP_ROPE_B,
    OP_QKV_B,
    OP_NORM_B,
    NOPS
};
static const char *const op_names[NOPS] = {
    "rmsnorm fwd", "q,k,v fwd",    "rope fwd",    "o fwd",     "gate,up fwd", "swiglu fwd",
    "down fwd",    "residual add", "lm head fwd", "loss tile", "lm head bwd", "down bwd",
    "swiglu bwd",  "gate,up bwd",  "o bwd",       "rope bwd",  "q,k,v bwd",   "rmsnorm bwd"};

static void op_run(layer *L, int op, int T) {
    const typed_ctx *t = &L->t;
    int Q = NH * HS, K = NKV * HS;
    switch (op) {
    case OP_NORM_F:
        typed_rmsnorm_forward(t, L->xn, 0, L->rstd, L->x, L->wn, T, C, 1e-5f);
        break;
    case OP_QKV_F:
        typed_mm_fwd(t, L->q, L->xn, L->wq, T, C, Q, 0);
        typed_mm_fwd(t, L->k, L->xn, L->wk, T, C, K, 0);
        typed_mm_fwd(t, L->v, L->xn, L->wv, T, C, K, 0);
        break;
    case OP_ROPE_F:
        typed_rope_forward(t, L->q, L->cos_t, L->sin_t, T, NH, HS);
        typed_rope_forward(t, L->k, L->cos_t, L->sin_t, T, NKV, HS);
        break;
    case OP_O_F:
        typed_mm_fwd(t, L->x, L->o, L->wo, T, Q, C, 1);
        break;
    case OP_GATEUP_F:
        typed_mm_fwd(t, L->g, L->xn, L->wg, T, C, F, 0);
        typed_mm_fwd(t, L->u, L->xn, L->wu, T, C, F, 0);
        break;
    case OP_SWIGLU_F:
        typed_swiglu_forward(t, L->h, L->g, L->u, (size_t)T * F);
        break;
    case OP_DOWN_F:
        typed_mm_fwd(t, L->x, L->h, L->wd, T, F, C, 1);
        break;
    case OP_ADD:
        typed_add(t, L->dx, L->dxn, (size_t)T * C);
        break;
    case OP_LM_F:
        for (int i0 = 0; i0 < T; i0 += LOSS_ROWS)
            typed_matmul_forward_f32(t, L->logits, L->lin, L->wlm, LOSS_ROWS, C, V);
        break;
    case OP_LOSS: /* softmax, loss and dlogits in place, a tile at a time (fp32 in both types) */
        for (int i0 = 0; i0 < T; i0 += LOSS_ROWS) {
            memcpy(L->dlogits, L->logits, sizeof(float) * LOSS_ROWS * V);
            cross_entropy_fused(L->dlogits, L->targets, LOSS_ROWS, V, 1.0f / (float)T);
        }
        break;
    case OP_LM_B:
        for (int i0 = 0; i0 < T; i0 += LOSS_ROWS)
            typed_matmul_backward_f32(t, L->dlin, L->dwlm, L->dlogits, L->lin, L->wlm, LOSS_ROWS, C,
                                      V);
        break;
    case OP_DOWN_B:
        typed_mm_bwd(t, L->dh, L->dwd, L->dout, L->h, L->wd, T, F, C);
        break;
    case OP_SWIGLU_B:
        typed_swiglu_backward(t, L->dg, L->du, L->dh, L->g, L->u, (size_t)T * F);
        break;
    case OP_GATEUP_B:
        typed_mm_bwd(t, L->dxn, L->dwg, L->dg, L->xn, L->wg, T, C, F);
        typed_mm_bwd(t, L->dxn, L->dwu, L->du, L->xn, L->wu, T, C, F);
        break;
    case OP_O_B:
        typed_mm_bwd(t, L->o, L->dwo, L->dout, L->o, L->wo, T, Q, C);
        break;
    case OP_ROPE_B:
        typed_rope_backward(t, L->dq, L->cos_t, L->sin_t, T, NH, HS);
        typed_rope_backward(t, L->dk, L->cos_t, L->sin_t, T, NKV, HS);
        break;
    case OP_QKV_B:
        typed_mm_bwd(t, L->dxn, L->dwq, L->dq, L->xn, L->wq, T, C, Q);
        typed_mm_bwd(t, L->dxn, L->dwk, L->dk, L->xn, L->wk, T, C, K);
        typed_mm_bwd(t, L->dxn, L->dwv, L->dv, L->xn, L->wv, T, C, K);
        break;
    case OP_NORM_B:
        typed_rmsnorm_backward(t, L->dx, L->dwn, L->dxn, 0, L->x, L->wn, L->rstd, T, C);
        break;
    }
}

/* GB/s of a copy (bytes read + written; the write-allocate read of the destination not counted,
 * as the operations' byte counts do not count it), of an update in place (read + written, no
 * write-allocate: the roof of the element-wise operations in bench_peak.py) and of a read (a sum)
 * of 512 MiB buffers on the threads, medians of 5 after a first touch. */
static void bandwidth(double *copy, double *update, double *read) {
    const size_t n = (size_t)1 << 27; /* floats: 512 MiB each side */
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    *copy = *update = *read = 0.0;
    if (!a || !b) return;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        a[i] = 1.0f, b[i] = 0.0f;
    double tc[5], tu[5], tr[5];
    volatile float sink = 0.0f;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++)
            b[i] = a[i];
        double t1 = now_s();
        float acc = 0.0f;
#pragma omp parallel for schedule(static) reduction(+ : acc)
        for (size_t i = 0; i < n; i++)
            acc += b[i];
        sink += acc;
        double t2 = now_s();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++)
            a[i] = a[i] * 0.999f;
        tc[r] = t1 - t0, tr[r] = t2 - t1, tu[r] = now_s() - t2;
    }
    qsort(tc, 5, sizeof *tc, cmp_double);
    qsort(tr, 5, sizeof *tr, cmp_double);
    qsort(tu, 5, sizeof *tu, cmp_double);
    *update = 2.0 * (double)n * sizeof(float) / tu[2] / 1e9;
    *copy = 2.0 * (double)n * sizeof(float) / tc[2] / 1e9;
    *read = (double)n * sizeof(float) / tr[2] / 1e9;
    free(a), free(b);
}

int main(int argc, char **argv) {
    blas_check_core(argv); /* the core upipe itself runs on */
    int T = argc > 1 ? atoi(argv[1]) : 4096, threads = argc > 2 ? atoi(argv[2]) : 2,
        reps = argc > 3 ? atoi(argv[3]) : 7;
    /* bf16 columns: one per gemm_bf16 path named in argv[4] (comma-separated), all taking turns
     * with f32; the default path if none. */
    enum { MAXP = 4 };
    const char *paths[MAXP] = {NULL};
    int np = 0;
    char list[128] = "";
    if (argc > 4) snprintf(list, sizeof list, "%s", argv[4]);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && np < MAXP;
         tok = strtok_r(NULL, ",", &save))
        paths[np++] = tok;
    if (np == 0) np = 1;
    if (T < LOSS_ROWS || T % LOSS_ROWS || threads < 1 || reps < 1 || reps > 100) {
        fprintf(stderr,
                "usage: bench_typed [T, a multiple of %d] [threads] [reps 1..100] "
                "[gemm_bf16 paths, comma-separated]\n",
                LOSS_ROWS);
        return 2;
    }
    for (int i = 0; i < np; i++)
        if (paths[i] && gemm_bf16_path_set(paths[i]) != 0) {
            fprintf(stderr, "bench_typed: no gemm_bf16 path '%s' on this CPU\n", paths[i]);
            return 2;
        }
    omp_set_num_threads(threads);
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    static layer L[2];
    layer_init(&L[0], MEM_DTYPE_F32, T);
    layer_init(&L[1], MEM_DTYPE_BF16, T);
    printf("typed kernels of one layer + LM head, configs/bench.json shapes, T=%d, %d threads, "
           "median of %d\n",
           T, threads, reps);
    printf("CPU: %s; bf16 conversions: %s\n", cpu, bf16_path_current()->name);
    printf("kernels: %s\n", kernel_path_name());
    double bw_copy, bw_update, bw_read;
    bandwidth(&bw_copy, &bw_update, &bw_read);
    printf("memory: copy %.1f GB/s, update in place %.1f GB/s, read %.1f GB/s (%d threads)\n",
           bw_copy, bw_update, bw_read, threads);
    for (int i = 0; i < np; i++) {
        if (paths[i]) gemm_bf16_path_set(paths[i]);
        printf("GEMM %d: %s\n", i + 1, gemm_bf16_path());
    }
    int ncol = 1 + np; // f32, then bf16 per path
    double *ts = calloc((size_t)ncol * NOPS * reps, sizeof(double));
    for (int r = -1; r < reps; r++) // r = -1: the warm-up
        for (int op = 0; op < NOPS; op++)
            for (int d = 0; d < ncol; d++) {
                if (d > 0 && paths[d - 1]) gemm_bf16_path_set(paths[d - 1]);
                double t0 = now_s();
                op_run(&L[d > 0], op, T);
                double dt = now_s() - t0;
                if (r >= 0) ts[((size_t)d * NOPS + op) * reps + r] = dt;
            }
    printf("| operation | f32 ms |");
    for (int i = 0; i < np; i++)
        printf(" bf16 ms (%d) | bf16 / f32 (%d) |", i + 1, i + 1);
    printf("\n|---|---:|");
    for (int i = 0; i < np; i++)
        printf("---:|---:|");
    printf("\n");
    double sum[1 + MAXP] = {0};
    for (int op = 0; op < NOPS; op++) {
        double med[1 + MAXP];
        for (int d = 0; d < ncol; d++) {
            double *x = ts + ((size_t)d * NOPS + op) * reps;
            qsort(x, (size_t)reps, sizeof *x, cmp_double);
            med[d] = x[reps / 2];
            sum[d] += med[d];
        }
        printf("| %s | %.2f |", op_names[op], 1e3 * med[0]);
        for (int d = 1; d < ncol; d++)
            printf(" %.2f | %.3f |", 1e3 * med[d], med[d] / med[0]);
        printf("\n");
    }
    printf("| **sum** | %.2f |", 1e3 * sum[0]);
    for (int d = 1; d < ncol; d++)
        printf(" %.2f | %.3f |", 1e3 * sum[d], sum[d] / sum[0]);
    printf("\n");
    free(ts);
    return 0;
}
