/* cuda_elem.cu — the CUDA backend's element-wise ops (cuda_int.h): zero, copy, add, embedding,
 * RoPE, SwiGLU, conversions and the optimizer's update, all on cu_stream (RMSNorm, the
 * cross-entropy tiles and the fp32 vector reductions: cuda_reduce.cu; the helpers both use:
 * cuda_elem_int.h). The functions of the CPU kernels (kernels.h, typed.h): fp32 arithmetic, each
 * bf16 output rounded once (cu_bf16_round); 8-element vector loads where pointers and shapes allow.
 *
 * Determinism: no float atomics; every reduction has a fixed order for a given shape: warp
 * butterflies and a block tree for a row, per-block partials of fixed ranges summed in order
 * (RMSNorm's dw, sum_squares, the loss), and embedding_backward adds each token's rows in row
 * order (a stable sort of the tokens, then a warp per token and column chunk: the CPU's bits).
 * first_nonfinite takes a minimum of indices (order-free).
 * Scratch: one device buffer grown on demand (the stream drained before the old one is freed;
 * cu_elem_scratch_bytes), and 64 bytes of pinned memory for the results the host waits for. */
#include "cuda/cuda_elem_int.h"

#include <cub/cub.cuh>

namespace {

/* ---- scratch --------------------------------------------------------------------------------- */

char *g_scr; /* device scratch, g_scr_n bytes */
size_t g_scr_n;
void *g_host; /* pinned: the scalar results copied back */

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
    cu_wait_stream(cu_stream);
    return h;
}

/* ---- the maps' operations (map_launch, cuda_elem_int.h) -------------------------------------- */

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

/* optim.c's loop, element for element (its scalars computed on the host as it does), with no
 * contraction into a fused multiply-add, as the C build has none: the CPU's bits, so an optimizer
 * offloaded to the CPU gives the weights this one gives. */
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
        for (int k = 0; k < W; k++) { /* optim.c's expression, each operation rounded alone */
            float gk = __fmul_rn(g[k], gs);
            float mi = __fadd_rn(__fmul_rn(b1, mm[k]), __fmul_rn(one_b1, gk));
            float vi = __fadd_rn(__fmul_rn(b2, vv[k]), __fmul_rn(one_b2, __fmul_rn(gk, gk)));
            mm[k] = mi;
            vv[k] = vi;
            float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
            p[k] = __fsub_rn(__fmul_rn(p[k], decay_mul), __fmul_rn(step_size, __fdiv_rn(mi, denom)));
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

} // namespace

char *cu_elem_scratch(size_t bytes) {
    return scratch(bytes);
}

void *cu_elem_to_host(const void *src, size_t bytes) {
    return to_host(src, bytes);
}

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
