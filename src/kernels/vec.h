/* vec.h — private to src/kernels: the contract of the per-instruction-set primitives layer (in
 * the spirit of ggml's SIMD mappings). A kernel body (attention_body.h, gemm_packed_body.h) is
 * written once over these names; each per-ISA compile unit includes exactly one primitives header
 * before the body, and the body is compiled once per instruction set:
 *     vec_avx512.h   16 lanes, AVX-512 F/BW/DQ/VL (attention_avx512.c, gemm_packed_avx512.c)
 *     vec_avx2.h     8 lanes, AVX2 + FMA         (attention_avx2.c, gemm_packed_avx2.c)
 *     vec_portable.h 8 lanes as a plain C array   (gemm_packed.c's portable micro-kernel)
 *
 * Every header defines (VEC_FN: static inline, always inlined):
 *   VEC_W                       lanes of a vector (fp32)
 *   vf                          a vector of VEC_W floats; vm a lane mask; vi VEC_W int32 lanes
 *   vf_load(p) vf_store(p, x)   unaligned; vf_loada / vf_storea: p aligned to the vector size
 *   vf_zero() vf_set1(s)        vf_bcast(p): all lanes *p
 *   vf_add vf_sub vf_mul        lane-wise, one rounding each
 *   vf_fma(a, b, c)             a * b + c with one rounding
 *   vf_max(a, b)                the x86 rule: the second operand where either is NaN
 *   vf_exp(x)                   the Cephes expf of attention_tiles.h, operation for operation
 *                               (2^n by scalef or by exponent bits: exact either way)
 *   vm_all() vm_below(n)        all lanes; lanes < n (none for n <= 0, all for n >= VEC_W)
 *   vm_from(t) vm_upto(t)       lanes >= t; lanes <= t
 *   vm_and(a, b)
 *   vf_load_m(p, m)             lanes of m loaded, the others 0 (no fault past them)
 *   vf_store_m(p, m, x)         lanes of m stored, memory of the others untouched
 *   vf_maskz(m, x)              x on m, +0 elsewhere
 *   vf_max_m(mx, m, s)          max(mx, s) on m, mx elsewhere
 *   vf_neginf_to_zero(x)        0 where x is -inf, x elsewhere
 *   vi_load_m(p, m) vm_le(v, j) int32 lanes of m (0 elsewhere); lanes with v <= j; vi_zero()
 *   vf_load_bf16(p)             VEC_W bf16 widened (exact); vf_store_bf16_n(d, s, n) widens the
 *                               first n < VEC_W of s into d (a row's tail)
 *   vbf_store_round(p, x)       VEC_W bf16 of x by bf16.h's rounding
 *   VEC_PIN(x)                  keeps x in a register where the compiler would fold its load
 *                               into every use (AVX2's attention micro-kernel); may be empty
 *   vec_prefetch_l1(p)          a read prefetch into L1
 *
 * Adding an instruction-set path: one vec_<isa>.h with these names, one attention_<isa>.c and
 * gemm_packed_<isa>.c that include it and set the block constants (see the existing ones), the
 * compile flags in CMakeLists.txt, and the table entry in kernel_path.c. */
#ifndef UP_KERNELS_VEC_H
#define UP_KERNELS_VEC_H

#include <stddef.h>
#include <stdint.h>

#define VEC_FN static inline __attribute__((always_inline))

/* ---- exp ------------------------------------------------------------------------------------- */
/* exp(x) in fp32, Cephes expf scheme: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two parts so
 * r is exact), exp(r) by a degree-7 polynomial, times 2^n. Relative error ~2 ulp. Inputs below
 * ln(FLT_MIN) give 0 (no denormals: a softmax weight 1e-38 below the row maximum is irrelevant),
 * inputs above 88 are clamped (arguments here are scores minus their running maximum or their
 * log-sum-exp, so <= ~0). NaN stays NaN. */
#define ATTN_EXP_LO (-87.3365447f) /* ln(FLT_MIN) */
#define ATTN_EXP_C1 0.693359375f
#define ATTN_EXP_C2 (-2.12194440e-4f)
#define ATTN_EXP_P0 1.9875691500e-4f
#define ATTN_EXP_P1 1.3981999507e-3f
#define ATTN_EXP_P2 8.3334519073e-3f
#define ATTN_EXP_P3 4.1665795894e-2f
#define ATTN_EXP_P4 1.6666665459e-1f
#define ATTN_EXP_P5 5.0000001201e-1f

#endif
