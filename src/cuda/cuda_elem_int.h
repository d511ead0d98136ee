/* cuda_elem_int.h — private to the CUDA backend's element-wise units (cuda_elem.cu: the maps,
 * embedding, RoPE, the optimizer; cuda_reduce.cu: RMSNorm, the cross-entropy tiles, the fp32
 * vector reductions): launch shapes, vector loads and stores, block reductions, the map kernel,
 * and the scratch they share (cuda_elem.cu's). The helpers are in an unnamed namespace: each unit
 * compiles its own copy. */
#ifndef UP_CUDA_ELEM_INT_H
#define UP_CUDA_ELEM_INT_H

#include "cuda/cuda_int.h"

#include <math.h>
#include <stdint.h>

/* At least bytes of device scratch, shared by the element-wise ops (its contents are not kept
 * across a growth, nor from one op to the next). */
char *cu_elem_scratch(size_t bytes);
/* bytes of the device value src, on the host (pinned) once every op before has run. */
void *cu_elem_to_host(const void *src, size_t bytes);

namespace {

/* b rounded up to a multiple of 256 (the offsets of scratch parts). */
inline size_t al256(size_t b) {
    return (b + 255) & ~(size_t)255;
}

/* ---- launch shapes --------------------------------------------------------------------------- */

enum { TPB = 256 };                    /* threads of the flat kernels */
constexpr unsigned GRID_MAX = 1048560; /* cu_blocks' cap */

inline bool al(const void *p, size_t a) {
    return ((uintptr_t)p % a) == 0;
}

/* One block per row (grid-stride beyond the cap). */
inline unsigned row_grid(size_t rows) {
    return rows < 1 ? 1 : rows > GRID_MAX ? GRID_MAX : (unsigned)rows;
}

/* Threads for a row of `units` work items: a multiple of 32 in [32, max]. */
inline unsigned threads_for(size_t units, unsigned max) {
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

} // namespace

#endif
