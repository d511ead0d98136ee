/* cuda_reduce.cu — the CUDA backend's ops that reduce rows or vectors (cuda_int.h): RMSNorm, the
 * cross-entropy tiles, sum of squares and the first non-finite element, on cu_stream, with fixed
 * orders (cuda_elem.cu's notes on determinism and scratch hold here too). */
#include "cuda/cuda_elem_int.h"

namespace {

/* ---- RMSNorm --------------------------------------------------------------------------------- */

enum { RMS_GROUPS = 256 };          /* row groups of the backward (dw partials) */
enum { RMS_SMEM_MAX = 160 * 1024 }; /* dw accumulators in shared memory up to this */

/* One block per row: rstd = 1/sqrt(mean(x^2) + eps) (double sum), out = (x * rstd) * w.
 * OF: out is fp32 (else BF). */
template <int BF, int OF, int W>
__global__ void k_rms_fwd(void *out, float *rstd, const void *inp, const void *w, int N, int C,
                          float eps) {
    __shared__ Red sh;
    int step = blockDim.x * W;
    for (size_t row = blockIdx.x; row < (size_t)N; row += gridDim.x) {
        size_t base = row * C;
        double ss = 0.0;
        for (int c = threadIdx.x * W; c < C; c += step) {
            float x[W];
            ldv<BF, W>(inp, base + c, x);
#pragma unroll
            for (int k = 0; k < W; k++)
                ss += (double)x[k] * x[k];
        }
        ss = block_sum(ss, &sh);
        float r = (float)(1.0 / sqrt(ss / C + (double)eps));
        if (threadIdx.x == 0) rstd[row] = r;
        for (int c = threadIdx.x * W; c < C; c += step) {
            float x[W], wv[W];
            ldv<BF, W>(inp, base + c, x);
            ldv<BF, W>(w, c, wv);
#pragma unroll
            for (int k = 0; k < W; k++)
                x[k] = (x[k] * r) * wv[k]; /* HF order: weight * (x * rstd) */
            stv<OF ? 0 : BF, W>(out, base + c, x);
        }
    }
}

template <int BF, int OF>
void rms_fwd_go(void *out, float *rstd, const void *inp, const void *w, int N, int C, float eps) {
    unsigned grid = row_grid((size_t)N);
    if (C % 8 == 0 && al(out, 16) && al(inp, 16) && al(w, 16))
        k_rms_fwd<BF, OF, 8>
            <<<grid, threads_for((size_t)C / 8, TPB), 0, cu_stream>>>(out, rstd, inp, w, N, C, eps);
    else
        k_rms_fwd<BF, OF, 1>
            <<<grid, threads_for((size_t)C, TPB), 0, cu_stream>>>(out, rstd, inp, w, N, C, eps);
    CU_LAUNCHED("rmsnorm_forward");
}

/* Block g takes rows [g*rows_per, (g+1)*rows_per): dinp += r d w - x r^3 (sum d w x)/C per row
 * (rmsnorm.c's expressions), and, with part, part[g][c] = sum over its rows, in order, of
 * (double)(d (x r)). The sums accumulate in shared memory when smem_acc (column c + k of a
 * vector at k (C/W) + c/W: a warp's doubles side by side, no bank conflicts), else in part
 * itself. Each thread owns its columns: no races. DF: dout is fp32 (else BF). */
template <int BF, int DF, int W>
__global__ void k_rms_bwd(void *dinp, double *part, int smem_acc, const void *dout, const void *inp,
                          const void *w, const float *rstd, int N, int C, int rows_per) {
    extern __shared__ double acc_sh[];
    __shared__ Red sh;
    size_t r0 = (size_t)blockIdx.x * rows_per, r1 = r0 + rows_per < (size_t)N ? r0 + rows_per : N;
    double *acc = !part ? NULL : smem_acc ? acc_sh : part + (size_t)blockIdx.x * C;
    int step = blockDim.x * W, cw = C / W;
    /* where column c + k of the thread's vector at c accumulates */
#define ACC(c, k) acc[smem_acc ? (size_t)(k)*cw + (c) / W : (size_t)(c) + (k)]
    for (int c = threadIdx.x * W; acc && c < C; c += step)
#pragma unroll
        for (int k = 0; k < W; k++)
            ACC(c, k) = 0.0;
    for (size_t row = r0; row < r1; row++) {
        size_t base = row * C;
        float rf = rstd[row];
        double dot = 0.0;
        for (int c = threadIdx.x * W; c < C; c += step) {
            float d[W], wv[W], x[W];
            ldv<DF ? 0 : BF, W>(dout, base + c, d);
            ldv<BF, W>(w, c, wv);
            ldv<BF, W>(inp, base + c, x);
#pragma unroll
            for (int k = 0; k < W; k++)
                dot += (double)(d[k] * wv[k]) * x[k];
        }
        dot = block_sum(dot, &sh);
        double r = rf;
        float kk = (float)(dot / C * r * r * r);
        for (int c = threadIdx.x * W; c < C; c += step) {
            float d[W], wv[W], x[W], o[W];
            ldv<DF ? 0 : BF, W>(dout, base + c, d);
            ldv<BF, W>(w, c, wv);
            ldv<BF, W>(inp, base + c, x);
            if (dinp) {
                ldv<BF, W>(dinp, base + c, o);
#pragma unroll
                for (int k = 0; k < W; k++)
                    o[k] += (d[k] * wv[k]) * rf - x[k] * kk;
                stv<BF, W>(dinp, base + c, o);
            }
            if (acc)
#pragma unroll
                for (int k = 0; k < W; k++)
                    ACC(c, k) += (double)(d[k] * (x[k] * rf));
        }
    }
    for (int c = threadIdx.x * W; acc && smem_acc && c < C; c += step)
#pragma unroll
        for (int k = 0; k < W; k++)
            part[(size_t)blockIdx.x * C + c + k] = ACC(c, k);
#undef ACC
}

/* dw[c] += (float)(sum over g = 0 .. G-1 of part[g][c]), in g order. */
__global__ void k_colsum(float *dw, const double *part, int G, int C) {
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < (size_t)C;
         c += (size_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (int g = 0; g < G; g++)
            s += part[(size_t)g * C + c];
        dw[c] += (float)s;
    }
}

template <int BF, int DF, int W>
void rms_bwd_launch(void *dinp, double *part, const void *dout, const void *inp, const void *w,
                    const float *rstd, int N, int C, int G, int rows_per) {
    size_t smem =
        part && (size_t)C * sizeof(double) <= RMS_SMEM_MAX ? (size_t)C * sizeof(double) : 0;
    if (smem > 48 * 1024)
        CU_CHECK(cudaFuncSetAttribute(k_rms_bwd<BF, DF, W>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned thr = threads_for(((size_t)C + W - 1) / W, 512);
    k_rms_bwd<BF, DF, W>
        <<<G, thr, smem, cu_stream>>>(dinp, part, smem > 0, dout, inp, w, rstd, N, C, rows_per);
    CU_LAUNCHED("rmsnorm_backward");
}

template <int BF, int DF>
void rms_bwd_go(void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                const float *rstd, int N, int C) {
    int G = N < RMS_GROUPS ? N : RMS_GROUPS;
    int rows_per = (N + G - 1) / G;
    G = (N + rows_per - 1) / rows_per;
    double *part = dw ? (double *)cu_elem_scratch((size_t)G * C * sizeof(double)) : NULL;
    if (C % 8 == 0 && al(dinp, 16) && al(dout, 16) && al(inp, 16) && al(w, 16))
        rms_bwd_launch<BF, DF, 8>(dinp, part, dout, inp, w, rstd, N, C, G, rows_per);
    else
        rms_bwd_launch<BF, DF, 1>(dinp, part, dout, inp, w, rstd, N, C, G, rows_per);
    if (!dw) return;
    k_colsum<<<cu_blocks((size_t)C), TPB, 0, cu_stream>>>(dw, part, G, C);
    CU_LAUNCHED("rmsnorm_backward dw");
}

/* ---- cross-entropy ------------------------------------------------------------------------------
 * One block per row. One pass gives the row's max M, the sum S of exp(x - M) (an online softmax:
 * each thread sums expf(x - m) against its running max m in double, rescaled when m grows, and
 * the block adds s exp(m - M)) and, for cross_entropy_rows, the first index of the largest value.
 * A second pass writes the gradient: loss.c's operations, expf(x - M) * scale, then - grad_scale
 * at the target. */

struct RowStats {
    float M;
    double S;
    int best; /* AM_NONE: no element that is not NaN */
};

template <int W, bool ARG> __device__ RowStats row_stats(const float *x, int V, Red *sh) {
    float m = -INFINITY, bv = 0.0f;
    double s = 0.0;
    int bi = AM_NONE;
    for (int v0 = threadIdx.x * W; v0 < V; v0 += blockDim.x * W) {
        float e[W];
        ldv<0, W>(x, v0, e);
#pragma unroll
        for (int k = 0; k < W; k++) {
            float xv = e[k];
            if (xv > m) {
                s = s * exp((double)m - (double)xv) + 1.0;
                m = xv;
            } else if (xv != -INFINITY) {  /* -inf adds 0 (and -inf - -inf would be NaN); */
                s += (double)expf(xv - m); /* a NaN makes s NaN, as on the CPU */
            }
            if (ARG && !isnan(xv) && (bi == AM_NONE || xv > bv)) bv = xv, bi = v0 + k;
        }
    }
    RowStats r;
    r.M = block_max(m, sh);
    r.S = block_sum(s != 0.0 ? s * exp((double)m - (double)r.M) : 0.0, sh);
    r.best = ARG ? block_argmax(bv, bi, sh) : AM_NONE;
    return r;
}

/* Rows with 0 <= target < V: the gradient in place, loss[row] = (M - x[t]) + log(S); rows with a
 * negative target: zeros, loss 0; a target >= V (the CPU stops on it): zeros, loss NaN. */
template <int W>
__global__ void k_ce_fused(float *logits, const int32_t *targets, int N, int V, float gs,
                           double *loss) {
    __shared__ Red sh;
    for (size_t row = blockIdx.x; row < (size_t)N; row += gridDim.x) {
        float *x = logits + row * V;
        int32_t t = targets[row];
        if (t < 0 || t >= V) {
            const float z[W] = {};
            for (int v0 = threadIdx.x * W; v0 < V; v0 += blockDim.x * W)
                stv<0, W>(x, v0, z);
            if (threadIdx.x == 0) loss[row] = t < 0 ? 0.0 : (double)NAN;
            continue;
        }
        float xt = x[t]; /* read before the barriers of row_stats, written after them */
        RowStats st = row_stats<W, false>(x, V, &sh);
        float scale = (float)((double)gs / st.S);
        for (int v0 = threadIdx.x * W; v0 < V; v0 += blockDim.x * W) {
            float e[W];
            ldv<0, W>(x, v0, e);
#pragma unroll
            for (int k = 0; k < W; k++) {
                float p = __fmul_rn(expf(e[k] - st.M), scale); /* no fused multiply-add */
                e[k] = v0 + k == t ? p - gs : p;
            }
            stv<0, W>(x, v0, e);
        }
        if (threadIdx.x == 0) loss[row] = ((double)st.M - (double)xt) + log(st.S);
    }
}

/* loss[row] (as k_ce_fused; 0 for a negative target) and pred[row] = the first index of the
 * largest value (0 when x[0] is NaN, as the CPU's scan keeps it). */
template <int W>
__global__ void k_ce_rows(const float *logits, const int32_t *targets, int N, int V, double *loss,
                          int32_t *pred) {
    __shared__ Red sh;
    for (size_t row = blockIdx.x; row < (size_t)N; row += gridDim.x) {
        const float *x = logits + row * V;
        RowStats st = row_stats<W, true>(x, V, &sh);
        if (threadIdx.x != 0) continue;
        int32_t t = targets ? targets[row] : -1;
        loss[row] = t < 0 ? 0.0 : t >= V ? (double)NAN : ((double)st.M - (double)x[t]) + log(st.S);
        pred[row] = isnan(x[0]) || st.best == AM_NONE ? 0 : st.best;
    }
}

/* ---- fp32 vectors ---------------------------------------------------------------------------- */

/* *out = sum of p[0 .. n) in double: one block, a fixed order. */
__global__ void k_sum(const double *p, size_t n, double *out) {
    __shared__ Red sh;
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        s += p[i];
    s = block_sum(s, &sh);
    if (threadIdx.x == 0) *out = s;
}

/* part[c] = chunk c's sum of squares in backend.h's BACKEND_SUMSQ order: a warp per chunk, lane
 * j sums elements j, j + 32, ... in order, then the shuffles fold lane j + w into lane j for
 * w = 16, ..., 1, the pairwise fold of the spec. */
static_assert(BACKEND_SUMSQ_LANES == 32, "one lane of the sum of squares per thread of a warp");
__global__ void k_sumsq_chunks(const float *x, size_t n, double *part) {
    size_t c = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    unsigned lane = threadIdx.x & 31u;
    size_t c0 = c * BACKEND_SUMSQ_CHUNK;
    if (c0 >= n) return; /* the whole warp: c is the warp's */
    size_t len = n - c0 < BACKEND_SUMSQ_CHUNK ? n - c0 : BACKEND_SUMSQ_CHUNK;
    const float *xc = x + c0;
    double s = 0.0;
    for (size_t i = lane; i < len; i += 32)
        s += (double)xc[i] * (double)xc[i];
    for (unsigned w = 16; w >= 1; w >>= 1)
        s += __shfl_down_sync(0xffffffffu, s, w);
    if (lane == 0) part[c] = s;
}

/* out[g] = the sum of group g's chunks in order, from 0 (a thread per group). */
__global__ void k_sumsq_groups(const double *part, size_t nchunks, double *out) {
    size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x, c0 = g * BACKEND_SUMSQ_GROUP;
    if (c0 >= nchunks) return;
    size_t c1 = nchunks - c0 < BACKEND_SUMSQ_GROUP ? nchunks : c0 + BACKEND_SUMSQ_GROUP;
    double s = 0.0;
    for (size_t c = c0; c < c1; c++)
        s += part[c];
    out[g] = s;
}

/* *out = p[0] + p[1] + ... in order, from 0 (one thread). */
__global__ void k_sum_in_order(const double *p, size_t n, double *out) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += p[i];
    *out = s;
}

__global__ void k_set_u64(unsigned long long *p, unsigned long long v) {
    *p = v;
}

__device__ __forceinline__ bool nonfinite(float x) {
    return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;
}

/* *res = min(*res, the smallest index of a NaN or Inf): each thread's first hit is its smallest
 * (indices grow along its stride), then a warp minimum and one atomicMin per warp. */
template <int W> __global__ void k_nonfinite(const float *x, size_t n, unsigned long long *res) {
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t nt = (size_t)gridDim.x * blockDim.x, nv = n / W;
    unsigned long long best = n;
    for (size_t j = tid; j < nv && best == n; j += nt) {
        float v[W];
        ldv<0, W>(x, j * W, v);
#pragma unroll
        for (int k = W - 1; k >= 0; k--)
            if (nonfinite(v[k])) best = j * W + k;
    }
    for (size_t i = nv * W + tid; i < n && best == n; i += nt)
        if (nonfinite(x[i])) best = i;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long ob = __shfl_xor_sync(0xffffffffu, best, o);
        best = ob < best ? ob : best;
    }
    if ((threadIdx.x & 31) == 0 && best < n) atomicMin(res, best);
}

} // namespace

/* ---- the ops --------------------------------------------------------------------------------- */

void cu_rmsnorm_forward(const typed_ctx *t, void *out, int out_f32, float *rstd, const void *inp,
                        const void *w, int N, int C, float eps) {
    if (N <= 0 || C <= 0) return;
    if (t->dt != MEM_DTYPE_BF16)
        rms_fwd_go<0, 1>(out, rstd, inp, w, N, C, eps);
    else if (out_f32)
        rms_fwd_go<1, 1>(out, rstd, inp, w, N, C, eps);
    else
        rms_fwd_go<1, 0>(out, rstd, inp, w, N, C, eps);
}

void cu_rmsnorm_backward(const typed_ctx *t, void *dinp, float *dw, const void *dout, int dout_f32,
                         const void *inp, const void *w, const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    if (t->dt != MEM_DTYPE_BF16)
        rms_bwd_go<0, 1>(dinp, dw, dout, inp, w, rstd, N, C);
    else if (dout_f32)
        rms_bwd_go<1, 1>(dinp, dw, dout, inp, w, rstd, N, C);
    else
        rms_bwd_go<1, 0>(dinp, dw, dout, inp, w, rstd, N, C);
}

/* Row losses into scratch, then one block adds them in a fixed order: a host double. */
double cu_cross_entropy_fused(float *logits, const int32_t *targets, int N, int V,
                              float grad_scale) {
    if (N <= 0 || V <= 0) return 0.0;
    size_t lb = al256((size_t)N * sizeof(double));
    char *s = cu_elem_scratch(lb + 256);
    double *loss = (double *)s, *sum = (double *)(s + lb);
    unsigned grid = row_grid((size_t)N);
    if (V % 4 == 0 && al(logits, 16))
        k_ce_fused<4><<<grid, threads_for((size_t)V / 4, 512), 0, cu_stream>>>(logits, targets, N,
                                                                               V, grad_scale, loss);
    else
        k_ce_fused<1><<<grid, threads_for((size_t)V, 512), 0, cu_stream>>>(logits, targets, N, V,
                                                                           grad_scale, loss);
    CU_LAUNCHED("cross_entropy_fused");
    k_sum<<<1, 1024, 0, cu_stream>>>(loss, (size_t)N, sum);
    CU_LAUNCHED("cross_entropy_fused sum");
    return *(const double *)cu_elem_to_host(sum, sizeof(double));
}

void cu_cross_entropy_rows(const float *logits, const int32_t *targets, int N, int V, double *loss,
                           int32_t *pred) {
    if (N <= 0 || V <= 0 || (!loss && !pred)) return;
    size_t lb = al256((size_t)N * sizeof(double));
    char *s = cu_elem_scratch(lb + al256((size_t)N * sizeof(int32_t)));
    double *dloss = (double *)s;
    int32_t *dpred = (int32_t *)(s + lb);
    unsigned grid = row_grid((size_t)N);
    if (V % 4 == 0 && al(logits, 16))
        k_ce_rows<4><<<grid, threads_for((size_t)V / 4, 512), 0, cu_stream>>>(logits, targets, N, V,
                                                                              dloss, dpred);
    else
        k_ce_rows<1><<<grid, threads_for((size_t)V, 512), 0, cu_stream>>>(logits, targets, N, V,
                                                                          dloss, dpred);
    CU_LAUNCHED("cross_entropy_rows");
    if (loss)
        CU_CHECK(cudaMemcpyAsync(loss, dloss, (size_t)N * sizeof(double), cudaMemcpyDeviceToHost,
                                 cu_stream));
    if (pred)
        CU_CHECK(cudaMemcpyAsync(pred, dpred, (size_t)N * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                 cu_stream));
    cu_wait_stream(cu_stream);
}

/* backend.h's BACKEND_SUMSQ order: the chunks (a warp each), their groups (a thread each), then
 * the groups in order (one thread): the CPU's bits. */
double cu_sum_squares(const float *x, size_t n) {
    if (n == 0) return 0.0;
    size_t nch = (n + BACKEND_SUMSQ_CHUNK - 1) / BACKEND_SUMSQ_CHUNK;
    size_t ng = (nch + BACKEND_SUMSQ_GROUP - 1) / BACKEND_SUMSQ_GROUP;
    size_t pb = al256(nch * sizeof(double)), gb = al256(ng * sizeof(double));
    char *s = cu_elem_scratch(pb + gb + 256);
    double *part = (double *)s, *grp = (double *)(s + pb), *sum = (double *)(s + pb + gb);
    unsigned warps = TPB / 32;
    k_sumsq_chunks<<<(unsigned)((nch + warps - 1) / warps), TPB, 0, cu_stream>>>(x, n, part);
    CU_LAUNCHED("sum_squares");
    k_sumsq_groups<<<(unsigned)((ng + TPB - 1) / TPB), TPB, 0, cu_stream>>>(part, nch, grp);
    CU_LAUNCHED("sum_squares groups");
    k_sum_in_order<<<1, 1, 0, cu_stream>>>(grp, ng, sum);
    CU_LAUNCHED("sum_squares sum");
    return *(const double *)cu_elem_to_host(sum, sizeof(double));
}

size_t cu_first_nonfinite(const float *x, size_t n) {
    if (n == 0) return 0;
    unsigned long long *res = (unsigned long long *)cu_elem_scratch(256);
    k_set_u64<<<1, 1, 0, cu_stream>>>(res, (unsigned long long)n);
    CU_LAUNCHED("first_nonfinite init");
    bool vec = al(x, 16);
    unsigned grid = cu_blocks(vec ? n / 4 + n % 4 : n);
    grid = grid < 4096 ? grid : 4096;
    if (vec)
        k_nonfinite<4><<<grid, TPB, 0, cu_stream>>>(x, n, res);
    else
        k_nonfinite<1><<<grid, TPB, 0, cu_stream>>>(x, n, res);
    CU_LAUNCHED("first_nonfinite");
    return (size_t) * (const unsigned long long *)cu_elem_to_host(res, sizeof *res);
}
