/* cuda_attention_tc_int.h — private to the tensor-core attention: cuda_attention_tc.cu (the
 * forward and the entry points) and cuda_attention_tc_bwd.cu (the backward) share the tile
 * constants, the arguments of every kernel (Tc), the device primitives, the tiles in shared
 * memory and the host helpers of the launches. All of it in an unnamed namespace: each unit
 * compiles its own copy. */
#ifndef UP_CUDA_ATTENTION_TC_INT_H
#define UP_CUDA_ATTENTION_TC_INT_H

#include "cuda/cuda_int.h"

#include <math.h>
#include <mma.h>
#include <stdint.h>

#include <type_traits>

extern "C" int cu_attention_tc_supported(int HS);
extern "C" size_t cu_attention_tc_scratch_bytes(void);
/* Raises the backward kernels' shared-memory limits (cu_attention_tc_init). */
extern "C" void cu_attention_tc_bwd_init(void);

namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int NW = 4;       /* warps per block */
constexpr int NT = 32 * NW; /* threads per block */
constexpr int BR = 16 * NW; /* query rows per block (forward, kernel B); per tile (kernel A) */
constexpr int BC = 64;      /* keys per tile (forward, kernel B); per block (kernel A) */
constexpr int LDF = 20;     /* row stride of a warp's 16 x 16 fp32 staging tile */
constexpr int LDB = 24;     /* row stride of a warp's 16 x 16 bf16 staging tile */
constexpr unsigned FULL = 0xffffffffu;
constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;

static_assert(BR == BC, "kernel A's first query block is its key block's diagonal");

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBT = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>; /* rows^T */
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
constexpr int NE = FragC::num_elements; /* accumulator elements per lane */

/* Everything a kernel reads: one struct for the four kernels (unused members NULL). */
struct Tc {
    const uint16_t *q, *k, *v, *out, *dout; /* bf16 inputs */
    uint16_t *o, *dq, *dk, *dv;             /* bf16 outputs */
    float *lse;                             /* (NH, T): the forward writes it, the backward reads */
    const float *D;                         /* (NH, T): rowsum(dO * O) */
    const int32_t *doc;                     /* doc_start (T) or NULL */
    int T, NH, NKV, G;
    int vec;     /* every tensor 16-byte aligned: cp.async and 16-byte stores */
    float scale; /* 1 / sqrt(HS) */
    float sl2;   /* scale * log2 e */
};

/* ---- device primitives ----------------------------------------------------------------------- */

/* 16 bytes global -> shared, asynchronously; zeros where !in (src is then not read). */
__device__ __forceinline__ void cp16(void *dst, const void *src, bool in) {
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    int n = in ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n)
                 : "memory");
}

/* Waits for all of this thread's cp.async copies (a __syncthreads must follow before others
 * read them). */
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/* Closes this thread's group of cp.async copies issued since the last one. */
__device__ __forceinline__ void cp_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most one of this thread's groups (the newest) is in flight. */
__device__ __forceinline__ void cp_wait_but_one() {
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

__device__ __forceinline__ const bf16 *bp(const uint16_t *s) {
    return reinterpret_cast<const bf16 *>(s);
}

/* ---- tiles in shared memory ------------------------------------------------------------------ */

/* s := the ROWS x HS tile (row stride HS + 8) of rows row0.. of head hx of the (T, nhx, HS) bf16
 * tensor g, zero past T. Asynchronous where p.vec: cp_wait and __syncthreads before reading. */
template <int HS, int ROWS>
__device__ __forceinline__ void load_tile(uint16_t *s, const uint16_t *g, int row0, int hx, int nhx,
                                          const Tc &p) {
    constexpr int LDH = HS + 8, CPR = HS / 8, N = ROWS * CPR / NT; /* 16-byte chunks */
    static_assert(ROWS * CPR % NT == 0, "whole chunks per thread");
#pragma unroll
    for (int n = 0; n < N; n++) {
        const int idx = n * NT + (int)threadIdx.x, r = idx / CPR, c = 8 * (idx % CPR);
        const int i = row0 + r;
        const bool in = i < p.T;
        const uint16_t *src = in ? g + ((size_t)i * nhx + hx) * HS + c : g;
        uint16_t *dst = s + r * LDH + c;
        if (p.vec) {
            cp16(dst, src, in);
        } else {
#pragma unroll
            for (int u = 0; u < 8; u++)
                dst[u] = in ? src[u] : (uint16_t)0;
        }
    }
}

/* Per query row q0 + r (r < BR): the first key it sees (lo_s); with lse2_s, its lse * log2 e and
 * D of head h. Zeros past T. */
__device__ __forceinline__ void load_rows(int *lo_s, float *lse2_s, float *D_s, int q0, int h,
                                          const Tc &p) {
    for (int r = threadIdx.x; r < BR; r += NT) {
        const int i = q0 + r;
        const bool in = i < p.T;
        const size_t x = (size_t)h * p.T + i;
        lo_s[r] = in && p.doc ? p.doc[i] : 0;
        if (lse2_s) {
            lse2_s[r] = in ? p.lse[x] * LOG2E : 0.f;
            D_s[r] = in ? p.D[x] : 0.f;
        }
    }
}

/* Rows r0.. r0 + 15 (< T) of head hx of the (T, nhx, HS) bf16 tensor g, columns c0.. c0 + 15 :=
 * f times mul (rowmul[r] per row where rowmul is not NULL), rounded once. Through the warp's
 * 16 x 16 fp32 staging tile st; a warp call. */
template <int HS>
__device__ __forceinline__ void store_frag(uint16_t *g, const FragC &f, float *st,
                                           const float *rowmul, float mul, int r0, int c0, int hx,
                                           int nhx, const Tc &p, int lane) {
    __syncwarp(); /* earlier reads of st are done */
    wmma::store_matrix_sync(st, f, LDF, wmma::mem_row_major);
    __syncwarp();
    const int r = lane >> 1, c = 8 * (lane & 1), i = r0 + r;
    if (i >= p.T) return;
    const float s = rowmul ? rowmul[r] : mul;
    uint16_t b[8];
#pragma unroll
    for (int u = 0; u < 8; u++)
        b[u] = cu_bf16_round(st[r * LDF + c + u] * s);
    uint16_t *dst = g + ((size_t)i * nhx + hx) * HS + c0 + c;
    if (p.vec) {
        uint4 w;
        w.x = b[0] | (unsigned)b[1] << 16, w.y = b[2] | (unsigned)b[3] << 16;
        w.z = b[4] | (unsigned)b[5] << 16, w.w = b[6] | (unsigned)b[7] << 16;
        *reinterpret_cast<uint4 *>(dst) = w;
    } else {
#pragma unroll
        for (int u = 0; u < 8; u++)
            dst[u] = b[u];
    }
}

/* Blocks an SM the kernels are built for (registers a thread: 65536 / (128 minb), at most 255):
 * 2 at HS > 64 (shared memory allows no more at HS = 128), 3 at HS 48 and 64, 4 below. */
constexpr int minb(int HS) {
    return HS > 64 ? 2 : HS > 32 ? 3 : 4;
}

/* b rounded up to a multiple of 128 (the shared-memory layouts' offsets). */
__host__ __device__ constexpr size_t al128(size_t b) {
    return (b + 127) / 128 * 128;
}

/* ---- launches: shared helpers ---------------------------------------------------------------- */

/* Lets kernel use bytes of dynamic shared memory (beyond the default 48 KiB). */
template <typename K> void allow_smem(K *kernel, size_t bytes) {
    CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    /* the most shared memory an SM has (minb blocks of the largest layouts need it) */
    CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  (int)cudaSharedmemCarveoutMaxShared));
}

/* f(std::integral_constant<int, HS>) for the supported head size HS (a multiple of 16 in
 * 16..128; every kernel is instantiated for each). */
template <typename F> void with_hs(int HS, F &&f) {
    switch (HS) {
    case 16:
        f(std::integral_constant<int, 16>());
        break;
    case 32:
        f(std::integral_constant<int, 32>());
        break;
    case 48:
        f(std::integral_constant<int, 48>());
        break;
    case 64:
        f(std::integral_constant<int, 64>());
        break;
    case 80:
        f(std::integral_constant<int, 80>());
        break;
    case 96:
        f(std::integral_constant<int, 96>());
        break;
    case 112:
        f(std::integral_constant<int, 112>());
        break;
    default:
        f(std::integral_constant<int, 128>());
        break;
    }
}

bool al16(const void *x) {
    return x == nullptr || (uintptr_t)x % 16 == 0;
}

/* The common members of Tc, the sizes checked. */
Tc tc_make(const int32_t *doc_start, int T, int NH, int NKV, int HS, const char *op) {
    if (!cu_attention_tc_supported(HS) || NH < 1 || NKV < 1 || NH % NKV != 0)
        cu_fail(op, "head size not a multiple of 16 in 16..128, or NH not a multiple of NKV",
                __FILE__, __LINE__);
    if ((T + BR - 1) / BR > 65535) /* the grids' y: query or key blocks */
        cu_fail(op, "T over 65535 * 64", __FILE__, __LINE__);
    Tc p = {};
    p.doc = doc_start;
    p.T = T, p.NH = NH, p.NKV = NKV, p.G = NH / NKV;
    p.scale = 1.f / sqrtf((float)HS);
    p.sl2 = p.scale * LOG2E;
    return p;
}

/* p.vec: every tensor pointer 16-byte aligned (rows of HS bf16 are then too). */
void tc_align(Tc &p) {
    p.vec = al16(p.q) && al16(p.k) && al16(p.v) && al16(p.out) && al16(p.dout) && al16(p.o) &&
            al16(p.dq) && al16(p.dk) && al16(p.dv);
}

} // namespace

#endif
