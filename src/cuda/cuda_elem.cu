/* cuda_elem.cu — the CUDA backend's element-wise ops (cuda_int.h): zero, copy, add, embedding,
 * RMSNorm, RoPE, SwiGLU, conversions, the cross-entropy tiles and the optimizer side, all on
 * cu_stream. The functions of the CPU kernels (kernels.h, typed.h): fp32 arithmetic, each bf16
 * output rounded once (cu_bf16_round); 8-element vector loads where pointers and shapes allow.
 *
 * Determinism: no float atomics; every reduction has a fixed order for a given shape: warp
 * butterflies and a block tree for a row, per-block partials of fixed ranges summed in order
 * (RMSNorm's dw, sum_squares, the loss), and embedding_backward adds each token's rows in row
 * order (a stable sort of the tokens, then a warp per token and column chunk: the CPU's bits).
 * first_nonfinite takes a minimum of indices (order-free).
 * Scratch: one device buffer grown on demand (the stream drained before the old one is freed;
 * cu_elem_scratch_bytes), and 64 bytes of pinned memory for the results the host waits for. */
#include "cuda/cuda_int.h"

#include <cub/cub.cuh>
#include <math.h>
#include <stdint.h>

namespace {

/* ---- scratch --------------------------------------------------------------------------------- */

char *g_scr; /* device scratch, g_scr_n bytes */
size_t g_scr_n;
void *g_host; /* pinned: the scalar results copied back */

size_t al256(size_t b) {
    return (b + 255) & ~(size_t)255;
}

/* At least bytes of device scratch (its contents are not kept across a growth). */
char *scratch(size_t bytes) {
    return (char *)cu_scratch_grow((void **)&g_scr, &g_scr_n, bytes);
}

void *host_buf() {
    if (!g_host) CU_CHECK(cudaMallocHost(&g_host, 64));
    return g_host;
}

/* bytes of the device value src, on the host once every op before has run. */
void *to_host(const void *src, size_t bytes) {
    void *h = host_buf();
    CU_CHECK(cudaMemcpyAsync(h, src, bytes, cudaMemcpyDeviceToHost, cu_stream));
    CU_CHECK(cudaStreamSynchronize(cu_stream));
    return h;
}

/* ---- launch shapes --------------------------------------------------------------------------- */

enum { TPB = 256 };                    /* threads of the flat kernels */
constexpr unsigned GRID_MAX = 1048560; /* cu_blocks' cap */

bool al(const void *p, size_t a) {
    return ((uintptr_t)p % a) == 0;
}

/* One block per row (grid-stride beyond the cap). */
unsigned row_grid(size_t rows) {
    return rows < 1 ? 1 : rows > GRID_MAX ? GRID_MAX : (unsigned)rows;
}

/* Threads for a row of `units` work items: a multiple of 32 in [32, max]. */
unsigned threads_for(size_t units, unsigned max) {
    size_t t = (units + 31) / 32 * 32;
    return t < 32 ? 32 : t > max ? max : (unsigned)t;
}

/* ---- vector loads and stores: W consecutive elements (BF: bf16, else fp32), as fp32 -----------
 * W > 1 needs i a multiple of W and the address aligned to min(16, W * element size). */

template <int BF, int W>
__device__ __forceinline__ void ldv(const void *p, size_t i, float (&v)[W]) {
    if constexpr (W == 1) {
        v[0] = cu_ld(p, i, BF);
    } else if constexpr (BF) {
        const uint16_t *q = (const uint16_t *)p + i;
        uint32_t w[W / 2];
        if constexpr (W == 8) {
            uint4 u = *(const uint4 *)q;
            w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
        } else if constexpr (W == 4) {
            uint2 u = *(const uint2 *)q;
            w[0] = u.x, w[1] = u.y;
        } else {
            w[0] = *(const uint32_t *)q;
        }
#pragma unroll
        for (int k = 0; k < W / 2; k++) {
            v[2 * k] = __uint_as_float(w[k] << 16);
            v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        }
    } else {
        const float *q = (const float *)p + i;
        if constexpr (W == 2) {
            float2 u = *(const float2 *)q;
            v[0] = u.x, v[1] = u.y;
        } else {
#pragma unroll
            for (int k = 0; k < W; k += 4) {
                float4 u = *(const float4 *)(q + k);
                v[k] = u.x, v[k + 1] = u.y, v[k + 2] = u.z, v[k + 3] = u.w;
            }
        }
    }
}

template <int BF, int W>
__device__ __forceinline__ void stv(void *p, size_t i, const float (&v)[W]) {
    if constexpr (W == 1) {
        cu_st(p, i, v[0], BF);
    } else if constexpr (BF) {
        uint16_t *q = (uint16_t *)p + i;
        uint32_t w[W / 2];
#pragma unroll
        for (int k = 0; k < W / 2; k++)
            w[k] = (uint32_t)cu_bf16_round(v[2 * k]) | (uint32_t)cu_bf16_round(v[2 * k + 1]) << 16;
        if constexpr (W == 8)
            *(uint4 *)q = make_uint4(w[0], w[1], w[2], w[3]);
        else if constexpr (W == 4)
            *(uint2 *)q = make_uint2(w[0], w[1]);
        else
            *(uint32_t *)q = w[0];
    } else {
        float *q = (float *)p + i;
        if constexpr (W == 2) {
            *(float2 *)q = make_float2(v[0], v[1]);
        } else {
#pragma unroll
            for (int k = 0; k < W; k += 4)
                *(float4 *)(q + k) = make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]);
        }
    }
}

/* ---- block reductions (blockDim.x a multiple of 32; every thread gets the result) -------------
 * Each starts with a barrier, so one Red serves calls in a row. */

struct Red {
    double d[33];
    float f[33];
    int i[33];
};

enum { AM_NONE = 0x7fffffff }; /* argmax: no element yet */

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ double block_sum(double v, Red *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh->d[wid] = v;
    __syncthreads();
    if (wid == 0) {
        double s = warp_sum(lane < nw ? sh->d[lane] : 0.0);
        if (lane == 0) sh->d[32] = s;
    }
    __syncthreads();
    return sh->d[32];
}

__device__ float block_max(float v, Red *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh->f[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float m = warp_max(lane < nw ? sh->f[lane] : -INFINITY);
        if (lane == 0) sh->f[32] = m;
    }
    __syncthreads();
    return sh->f[32];
}

/* (av, ai) := the better of the two: the larger value, then the smaller index; AM_NONE loses.
 * Symmetric, so both lanes of a butterfly agree. */
__device__ __forceinline__ void am_merge(float &av, int &ai, float bv, int bi) {
    if (bi != AM_NONE && (ai == AM_NONE || bv > av || (bv == av && bi < ai))) av = bv, ai = bi;
}

__device__ __forceinline__ void warp_argmax(float &v, int &i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        am_merge(v, i, ov, oi);
    }
}

__device__ int block_argmax(float v, int i, Red *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    warp_argmax(v, i);
    __syncthreads();
    if (lane == 0) sh->f[wid] = v, sh->i[wid] = i;
    __syncthreads();
    if (wid == 0) {
        float bv = lane < nw ? sh->f[lane] : 0.0f;
        int bi = lane < nw ? sh->i[lane] : AM_NONE;
        warp_argmax(bv, bi);
        if (lane == 0) sh->i[32] = bi;
    }
    __syncthreads();
    return sh->i[32];
}

/* ---- element-wise maps: op.run<W>(i) on elements i .. i+W-1 --------------------------------- */

template <class Op> __global__ void k_map(Op op, size_t n, int vec) {
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t nt = (size_t)gridDim.x * blockDim.x, nv = vec ? n / 8 : 0;
    for (size_t j = tid; j < nv; j += nt)
        op.template run<8>(j * 8);
    for (size_t i = nv * 8 + tid; i < n; i += nt)
        op.template run<1>(i);
}

/* vec: every pointer the op touches is 16-byte aligned (8-element vectors). */
template <class Op> void map_launch(const char *name, const Op &op, size_t n, bool vec) {
    if (n == 0) return;
    size_t units = vec ? n / 8 + n % 8 : n;
    k_map<Op><<<cu_blocks(units), TPB, 0, cu_stream>>>(op, n, vec ? 1 : 0);
    CU_LAUNCHED(name);
}

template <int BF> struct AddOp {
    void *dst;
    const void *src;
    template <int W> __device__ void run(size_t i) const {
        float a[W], b[W];
        ldv<BF, W>(dst, i, a);
        ldv<BF, W>(src, i, b);
#pragma unroll
        for (int k = 0; k < W; k++)
            a[k] += b[k];
        stv<BF, W>(dst, i, a);
    }
};

template <int SBF, int DBF> struct ConvOp {
    void *dst;
    const void *src;
    template <int W> __device__ void run(size_t i) const {
        float a[W];
        ldv<SBF, W>(src, i, a);
        stv<DBF, W>(dst, i, a);
    }
};

/* silu(g) * u, kernels.h's expression (expf: full precision, no fast math). */
template <int BF> struct SwigluFwdOp {
    void *out;
    const void *gate, *up;
    template <int W> __device__ void run(size_t i) const {
        float g[W], u[W];
        ldv<BF, W>(gate, i, g);
        ldv<BF, W>(up, i, u);
#pragma unroll
        for (int k = 0; k < W; k++)
            g[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
        stv<BF, W>(out, i, g);
    }
};

/* dgate, dup may alias gate, up: each vector is read whole before it is written. */
template <int BF> struct SwigluBwdOp {
    void *dgate, *dup;
    const void *dout, *gate, *up;
    template <int W> __device__ void run(size_t i) const {
        float g[W], u[W], d[W];
        ldv<BF, W>(gate, i, g);
        ldv<BF, W>(up, i, u);
        ldv<BF, W>(dout, i, d);
#pragma unroll
        for (int k = 0; k < W; k++) {
            float s = 1.0f / (1.0f + expf(-g[k])); /* sigmoid(g) */
            float dg = d[k] * u[k] * (s * (1.0f + g[k] * (1.0f - s)));
            u[k] = d[k] * (g[k] * s);
            g[k] = dg;
        }
        stv<BF, W>(dgate, i, g);
        stv<BF, W>(dup, i, u);
    }
};

/* optim.c's loop, element for element (its scalars computed on the host as it does). */
struct AdamOp {
    float *param, *m, *v;
    const float *grad;
    float gs, b1, b2, one_b1, one_b2, bc2_sqrt, eps, step_size, decay_mul;
    template <int W> __device__ void run(size_t i) const {
        float p[W], g[W], mm[W], vv[W];
        ldv<0, W>(param, i, p);
        ldv<0, W>(grad, i, g);
        ldv<0, W>(m, i, mm);
        ldv<0, W>(v, i, vv);
#pragma unroll
        for (int k = 0; k < W; k++) {
            float gk = g[k] * gs;
            float mi = b1 * mm[k] + one_b1 * gk;
            float vi = b2 * vv[k] + one_b2 * (gk * gk);
            mm[k] = mi;
            vv[k] = vi;
            float denom = sqrtf(vi) / bc2_sqrt + eps;
            p[k] = p[k] * decay_mul - step_size * (mi / denom);
        }
        stv<0, W>(m, i, mm);
        stv<0, W>(v, i, vv);
        stv<0, W>(param, i, p);
    }
};

/* ---- embedding ------------------------------------------------------------------------------- */

/* out row i = wte row tokens[i], copied in units U (the bits as they are); a negative token
 * (the CPU stops on it) gives a row of zeros. */
template <class U>
__global__ void k_embed_fwd(U *out, const U *wte, const int32_t *tokens, int N, size_t upr) {
    for (size_t row = blockIdx.x; row < (size_t)N; row += gridDim.x) {
        int32_t t = tokens[row];
        U *o = out + row * upr;
        if (t < 0) {
            for (size_t u = threadIdx.x; u < upr; u += blockDim.x)
                o[u] = U{};
            continue;
        }
        const U *s = wte + (size_t)t * upr;
        for (size_t u = threadIdx.x; u < upr; u += blockDim.x)
            o[u] = s[u];
    }
}

template <class U>
void embed_fwd_go(void *out, const void *wte, const int32_t *tokens, int N, size_t row_bytes) {
    size_t upr = row_bytes / sizeof(U);
    k_embed_fwd<U><<<row_grid((size_t)N), threads_for(upr, TPB), 0, cu_stream>>>(
        (U *)out, (const U *)wte, tokens, N, upr);
    CU_LAUNCHED("embedding_forward");
}

enum { EB_PER_LANE = 8, EB_COLS = 32 * EB_PER_LANE }; /* columns of a warp's task */
constexpr unsigned EB_GRID = 4096;                    /* blocks of the accumulation */

__global__ void k_iota(int32_t *x, int n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = (int32_t)i;
}

/* flags[p] = 1 where a run of equal sorted keys starts. */
__global__ void k_heads(char *flags, const int32_t *keys, int n) {
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < (size_t)n;
         p += (size_t)gridDim.x * blockDim.x)
        flags[p] = p == 0 || keys[p] != keys[p - 1];
}

/* dst (C) += the dout rows rows[j0 .. j1) in that order, on the lane's columns c0 + 32k:
 * (((dst + r0) + r1) + ...) in fp32, as the CPU adds them. */
template <int BF>
__device__ void embed_bwd_task(float *dst, const void *dout, const int32_t *rows, int j0, int j1,
                               int c0, int C) {
    float acc[EB_PER_LANE];
#pragma unroll
    for (int k = 0; k < EB_PER_LANE; k++)
        acc[k] = c0 + 32 * k < C ? dst[c0 + 32 * k] : 0.0f;
    int j = j0;
    for (; j + 4 <= j1; j += 4) { /* four rows' loads in flight, added in row order */
        float v[4][EB_PER_LANE];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            size_t b = (size_t)rows[j + u] * C;
#pragma unroll
            for (int k = 0; k < EB_PER_LANE; k++)
                v[u][k] = c0 + 32 * k < C ? cu_ld(dout, b + c0 + 32 * k, BF) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int k = 0; k < EB_PER_LANE; k++)
                acc[k] += v[u][k];
    }
    for (; j < j1; j++) {
        size_t b = (size_t)rows[j] * C;
#pragma unroll
        for (int k = 0; k < EB_PER_LANE; k++)
            if (c0 + 32 * k < C) acc[k] += cu_ld(dout, b + c0 + 32 * k, BF);
    }
#pragma unroll
    for (int k = 0; k < EB_PER_LANE; k++)
        if (c0 + 32 * k < C) dst[c0 + 32 * k] = acc[k];
}

/* One warp per (run of equal tokens, chunk of EB_COLS columns); runs start at starts[r]. */
template <int BF>
__global__ void k_embed_bwd(float *dwte, const void *dout, const int32_t *keys, const int32_t *rows,
                            const int32_t *starts, const int *nruns_p, int N, int C, int nchunk) {
    size_t nruns = (size_t)*nruns_p, ntask = nruns * (size_t)nchunk;
    size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    size_t nwarp = ((size_t)gridDim.x * blockDim.x) >> 5;
    int lane = threadIdx.x & 31;
    for (size_t task = warp; task < ntask; task += nwarp) {
        size_t r = task / (size_t)nchunk;
        int c0 = (int)(task - r * nchunk) * EB_COLS + lane;
        int j0 = starts[r], j1 = r + 1 < nruns ? starts[r + 1] : N;
        int32_t tok = keys[j0];
        if (tok < 0) continue; /* a negative token has no row (the CPU stops on it) */
        embed_bwd_task<BF>(dwte + (size_t)tok * C, dout, rows, j0, j1, c0, C);
    }
}

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
    double *part = dw ? (double *)scratch((size_t)G * C * sizeof(double)) : NULL;
    if (C % 8 == 0 && al(dinp, 16) && al(dout, 16) && al(inp, 16) && al(w, 16))
        rms_bwd_launch<BF, DF, 8>(dinp, part, dout, inp, w, rstd, N, C, G, rows_per);
    else
        rms_bwd_launch<BF, DF, 1>(dinp, part, dout, inp, w, rstd, N, C, G, rows_per);
    if (!dw) return;
    k_colsum<<<cu_blocks((size_t)C), TPB, 0, cu_stream>>>(dw, part, G, C);
    CU_LAUNCHED("rmsnorm_backward dw");
}

/* ---- RoPE ------------------------------------------------------------------------------------ */

/* x (N, nh, HS) rotated in place by table row i (N, HS/2): x1 c - x2 s, x2 c + x1 s with
 * s = sign * sin (rope.c's row). W elements of a half per thread (HS/2 % W == 0). */
template <int BF, int W>
__global__ void k_rope(void *x, const float *cos_t, const float *sin_t, int N, int nh, int HS,
                       float sign) {
    int half = HS / 2, units = nh * half / W;
    for (size_t row = blockIdx.x; row < (size_t)N; row += gridDim.x) {
        for (int p = threadIdx.x; p < units; p += blockDim.x) {
            int e = p * W, h = e / half, j = e - h * half;
            size_t o = (row * nh + h) * HS + j, tb = row * half + j;
            float a[W], b[W], c[W], s[W];
            ldv<BF, W>(x, o, a);
            ldv<BF, W>(x, o + half, b);
            ldv<0, W>(cos_t, tb, c);
            ldv<0, W>(sin_t, tb, s);
#pragma unroll
            for (int k = 0; k < W; k++) {
                float sn = sign * s[k];
                float na = a[k] * c[k] - b[k] * sn;
                b[k] = b[k] * c[k] + a[k] * sn;
                a[k] = na;
            }
            stv<BF, W>(x, o, a);
            stv<BF, W>(x, o + half, b);
        }
    }
}

template <int BF>
void rope_go(void *x, const float *cos_t, const float *sin_t, int N, int nh, int HS, float sign,
             const char *name) {
    if (N <= 0 || nh <= 0 || HS < 2) return;
    size_t half = (size_t)HS / 2, units = (size_t)nh * half;
    unsigned grid = row_grid((size_t)N);
    if (half % 4 == 0 && al(x, BF ? 8 : 16) && al(cos_t, 16) && al(sin_t, 16))
        k_rope<BF, 4>
            <<<grid, threads_for(units / 4, TPB), 0, cu_stream>>>(x, cos_t, sin_t, N, nh, HS, sign);
    else
        k_rope<BF, 1>
            <<<grid, threads_for(units, TPB), 0, cu_stream>>>(x, cos_t, sin_t, N, nh, HS, sign);
    CU_LAUNCHED(name);
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

constexpr unsigned SUM_BLOCKS = 1024; /* partials of sum_squares (at most) */

/* *out = sum of p[0 .. n) in double: one block, a fixed order. */
__global__ void k_sum(const double *p, size_t n, double *out) {
    __shared__ Red sh;
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        s += p[i];
    s = block_sum(s, &sh);
    if (threadIdx.x == 0) *out = s;
}

/* part[block] = the block's share of sum x^2 (grid-stride: fixed for a given n and grid). */
template <int W> __global__ void k_sumsq(const float *x, size_t n, double *part) {
    __shared__ Red sh;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t nt = (size_t)gridDim.x * blockDim.x, nv = n / W;
    double s = 0.0;
    for (size_t j = tid; j < nv; j += nt) {
        float v[W];
        ldv<0, W>(x, j * W, v);
#pragma unroll
        for (int k = 0; k < W; k++)
            s += (double)v[k] * v[k];
    }
    for (size_t i = nv * W + tid; i < n; i += nt)
        s += (double)x[i] * x[i];
    s = block_sum(s, &sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
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

static size_t esize(mem_dtype dt) {
    return dt == MEM_DTYPE_BF16 ? 2 : 4;
}

extern "C" size_t cu_elem_scratch_bytes(void) {
    return g_scr_n;
}

void cu_elem_init(void) {
    host_buf();
}

void cu_zero(const typed_ctx *t, void *dst, size_t n) {
    if (n) CU_CHECK(cudaMemsetAsync(dst, 0, n * esize(t->dt), cu_stream));
}

void cu_zero_f32(float *x, size_t n) {
    if (n) CU_CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), cu_stream));
}

void cu_copy(const typed_ctx *t, void *dst, const void *src, size_t n) {
    if (n && dst != src)
        CU_CHECK(cudaMemcpyAsync(dst, src, n * esize(t->dt), cudaMemcpyDeviceToDevice, cu_stream));
}

void cu_add(const typed_ctx *t, void *dst, const void *src, size_t n) {
    bool vec = al(dst, 16) && al(src, 16);
    if (t->dt == MEM_DTYPE_BF16)
        map_launch("add", AddOp<1>{dst, src}, n, vec);
    else
        map_launch("add", AddOp<0>{dst, src}, n, vec);
}

void cu_convert(mem_dtype dst_t, void *dst, mem_dtype src_t, const void *src, size_t n) {
    if (n == 0) return;
    if (dst_t == src_t) {
        if (dst != src)
            CU_CHECK(
                cudaMemcpyAsync(dst, src, n * esize(dst_t), cudaMemcpyDeviceToDevice, cu_stream));
        return;
    }
    bool vec = al(dst, 16) && al(src, 16);
    if (dst_t == MEM_DTYPE_BF16)
        map_launch("convert", ConvOp<0, 1>{dst, src}, n, vec);
    else
        map_launch("convert", ConvOp<1, 0>{dst, src}, n, vec);
}

void cu_swiglu_forward(const typed_ctx *t, void *out, const void *gate, const void *up, size_t n) {
    bool vec = al(out, 16) && al(gate, 16) && al(up, 16);
    if (t->dt == MEM_DTYPE_BF16)
        map_launch("swiglu_forward", SwigluFwdOp<1>{out, gate, up}, n, vec);
    else
        map_launch("swiglu_forward", SwigluFwdOp<0>{out, gate, up}, n, vec);
}

void cu_swiglu_backward(const typed_ctx *t, void *dgate, void *dup, const void *dout,
                        const void *gate, const void *up, size_t n) {
    bool vec = al(dgate, 16) && al(dup, 16) && al(dout, 16) && al(gate, 16) && al(up, 16);
    if (t->dt == MEM_DTYPE_BF16)
        map_launch("swiglu_backward", SwigluBwdOp<1>{dgate, dup, dout, gate, up}, n, vec);
    else
        map_launch("swiglu_backward", SwigluBwdOp<0>{dgate, dup, dout, gate, up}, n, vec);
}

void cu_embedding_forward(const typed_ctx *t, void *out, const int32_t *tokens, const void *wte,
                          int N, int C) {
    if (N <= 0 || C <= 0) return;
    size_t row = (size_t)C * esize(t->dt);
    if (row % 16 == 0 && al(out, 16) && al(wte, 16))
        embed_fwd_go<uint4>(out, wte, tokens, N, row);
    else if (row % 4 == 0 && al(out, 4) && al(wte, 4))
        embed_fwd_go<uint32_t>(out, wte, tokens, N, row);
    else
        embed_fwd_go<uint16_t>(out, wte, tokens, N, row);
}

/* A stable sort of (token, row) pairs, the starts of the runs of equal tokens, then each run's
 * rows added to its dwte row in row order: deterministic, and the CPU's sums to the bit. */
void cu_embedding_backward(const typed_ctx *t, float *dwte, const void *dout, const int32_t *tokens,
                           int N, int C) {
    if (N <= 0 || C <= 0) return;
    size_t sort_b = 0, sel_b = 0, nb = al256((size_t)N * sizeof(int32_t));
    int32_t *none = NULL;
    CU_CHECK(cub::DeviceRadixSort::SortPairs(NULL, sort_b, tokens, none, none, none, N, 0, 32,
                                             cu_stream));
    CU_CHECK(cub::DeviceSelect::Flagged(NULL, sel_b, none, (char *)NULL, none, (int *)NULL, N,
                                        cu_stream));
    size_t tmp_b = sort_b > sel_b ? sort_b : sel_b;
    char *s = scratch(5 * nb + 256 + tmp_b);
    int32_t *keys = (int32_t *)s, *iota = (int32_t *)(s + nb), *rows = (int32_t *)(s + 2 * nb);
    int32_t *starts = (int32_t *)(s + 3 * nb);
    char *flags = s + 4 * nb;
    int *nruns = (int *)(s + 5 * nb);
    void *tmp = s + 5 * nb + 256;
    k_iota<<<cu_blocks((size_t)N), TPB, 0, cu_stream>>>(iota, N);
    CU_LAUNCHED("embedding_backward iota");
    CU_CHECK(cub::DeviceRadixSort::SortPairs(tmp, sort_b, tokens, keys, iota, rows, N, 0, 32,
                                             cu_stream));
    k_heads<<<cu_blocks((size_t)N), TPB, 0, cu_stream>>>(flags, keys, N);
    CU_LAUNCHED("embedding_backward heads");
    CU_CHECK(cub::DeviceSelect::Flagged(tmp, sel_b, iota, flags, starts, nruns, N, cu_stream));
    int nchunk = (C + EB_COLS - 1) / EB_COLS;
    size_t blocks = ((size_t)N * nchunk * 32 + TPB - 1) / TPB;
    unsigned grid = blocks < EB_GRID ? (unsigned)blocks : EB_GRID;
    if (t->dt == MEM_DTYPE_BF16)
        k_embed_bwd<1>
            <<<grid, TPB, 0, cu_stream>>>(dwte, dout, keys, rows, starts, nruns, N, C, nchunk);
    else
        k_embed_bwd<0>
            <<<grid, TPB, 0, cu_stream>>>(dwte, dout, keys, rows, starts, nruns, N, C, nchunk);
    CU_LAUNCHED("embedding_backward");
}

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

void cu_rope_forward(const typed_ctx *t, void *x, const float *cos_t, const float *sin_t, int N,
                     int nh, int HS) {
    if (t->dt == MEM_DTYPE_BF16)
        rope_go<1>(x, cos_t, sin_t, N, nh, HS, 1.0f, "rope_forward");
    else
        rope_go<0>(x, cos_t, sin_t, N, nh, HS, 1.0f, "rope_forward");
}

void cu_rope_backward(const typed_ctx *t, void *dx, const float *cos_t, const float *sin_t, int N,
                      int nh, int HS) {
    if (t->dt == MEM_DTYPE_BF16)
        rope_go<1>(dx, cos_t, sin_t, N, nh, HS, -1.0f, "rope_backward");
    else
        rope_go<0>(dx, cos_t, sin_t, N, nh, HS, -1.0f, "rope_backward");
}

/* Row losses into scratch, then one block adds them in a fixed order: a host double. */
double cu_cross_entropy_fused(float *logits, const int32_t *targets, int N, int V,
                              float grad_scale) {
    if (N <= 0 || V <= 0) return 0.0;
    size_t lb = al256((size_t)N * sizeof(double));
    char *s = scratch(lb + 256);
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
    return *(const double *)to_host(sum, sizeof(double));
}

void cu_cross_entropy_rows(const float *logits, const int32_t *targets, int N, int V, double *loss,
                           int32_t *pred) {
    if (N <= 0 || V <= 0 || (!loss && !pred)) return;
    size_t lb = al256((size_t)N * sizeof(double));
    char *s = scratch(lb + al256((size_t)N * sizeof(int32_t)));
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
    CU_CHECK(cudaStreamSynchronize(cu_stream));
}

/* Block partials over a grid fixed by n, then one block adds them in order. */
double cu_sum_squares(const float *x, size_t n) {
    if (n == 0) return 0.0;
    bool vec = al(x, 16);
    size_t b = cu_blocks(vec ? n / 4 + n % 4 : n);
    unsigned G = b < SUM_BLOCKS ? (unsigned)b : SUM_BLOCKS;
    char *s = scratch(al256((size_t)G * sizeof(double)) + 256);
    double *part = (double *)s, *sum = (double *)(s + al256((size_t)G * sizeof(double)));
    if (vec)
        k_sumsq<4><<<G, TPB, 0, cu_stream>>>(x, n, part);
    else
        k_sumsq<1><<<G, TPB, 0, cu_stream>>>(x, n, part);
    CU_LAUNCHED("sum_squares");
    k_sum<<<1, 1024, 0, cu_stream>>>(part, G, sum);
    CU_LAUNCHED("sum_squares sum");
    return *(const double *)to_host(sum, sizeof(double));
}

size_t cu_first_nonfinite(const float *x, size_t n) {
    if (n == 0) return 0;
    unsigned long long *res = (unsigned long long *)scratch(256);
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
    return (size_t) * (const unsigned long long *)to_host(res, sizeof *res);
}

/* optim.c's scalars: the bias corrections in double, cast to float where it casts them. */
void cu_adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                     const backend_adamw *hp, int step, float grad_scale, int decay) {
    if (step < 1) cu_fail("adamw_update", "step is 1-based", __FILE__, __LINE__);
    double bc1 = 1.0 - pow((double)hp->beta1, step);
    double bc2 = 1.0 - pow((double)hp->beta2, step);
    AdamOp op;
    op.param = param, op.grad = grad, op.m = m, op.v = v, op.gs = grad_scale;
    op.b1 = hp->beta1, op.b2 = hp->beta2, op.eps = hp->eps;
    op.one_b1 = (float)(1.0 - (double)hp->beta1);
    op.one_b2 = (float)(1.0 - (double)hp->beta2);
    op.bc2_sqrt = (float)sqrt(bc2);
    op.step_size = (float)((double)hp->lr / bc1);
    op.decay_mul = decay ? (float)(1.0 - (double)hp->lr * (double)hp->weight_decay) : 1.0f;
    bool vec = al(param, 16) && al(grad, 16) && al(m, 16) && al(v, 16);
    map_launch("adamw_update", op, n, vec);
}
