/* dtype.h — the element types of stored tensors (DESIGN.md §5.1), and bf16 one element at a time.
 *
 * The lowest layer of the element type: core, io, comm and kernels all include it, and it
 * includes nothing of theirs. Whole arrays convert through kernels/bf16.h (vectorised, chosen at
 * run time); the functions here are its reference twin and every bit of it (one element: the
 * same rules, the same bits). A bf16 value is the top 16 bits of an fp32 one, stored as
 * uint16_t:
 *   - fp32 -> bf16 of a finite nonzero normal x: round to nearest, ties to even (a value past
 *     the largest finite bf16 becomes +-Inf);
 *   - zero and fp32 denormals: a zero of x's sign (as VCVTNEPS2BF16, which treats denormal
 *     inputs as zero; no bf16 result is ever denormal, since no normal fp32 rounds below the
 *     smallest normal);
 *   - +-Inf: itself;
 *   - NaN: the top 16 bits of x with the quiet bit (0x0040) set: sign and the top 6 payload
 *     bits kept, so every NaN stays a NaN and comes out quiet.
 * bf16 -> fp32 is exact (the 16 bits shifted up; bf16 denormals stay denormal). */
#ifndef UP_CORE_DTYPE_H
#define UP_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Element types of the buffers. A buffer's bytes are its element count times mem_dtype_size,
 * computed here and nowhere else, so the plan and the allocation it plans cannot disagree. */
typedef enum {
    MEM_DTYPE_F32,
    MEM_DTYPE_BF16, /* bfloat16: the top 16 bits of an fp32 (uint16_t in memory) */
    MEM_DTYPE_COUNT
} mem_dtype;

size_t mem_dtype_size(mem_dtype dt);      /* bytes per element: 4, 2 */
const char *mem_dtype_name(mem_dtype dt); /* "f32", "bf16" */
/* Bytes of n elements of dt (overflow checked). */
size_t mem_dtype_bytes(mem_dtype dt, size_t n);

/* The bf16 of x by the rules above: the SDM's convert_fp32_to_bfloat16 (VCVTNEPS2BF16), step for
 * step. Adding 0x7fff plus the kept part's lowest bit rounds to nearest with ties to even; a
 * carry out of the mantissa moves the exponent up, and out of the largest finite value gives Inf
 * (0x7f80). */
static inline uint16_t bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t a = u & 0x7fffffffu;
    if (a < 0x00800000u) return (uint16_t)((u >> 16) & 0x8000u); // zero or denormal: signed zero
    if (a > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); // NaN: truncated, made quiet
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);   // normal or Inf (no carry)
}

/* The fp32 value of b: exact. */
static inline float bf16_widen(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* dst[i] = bf16_round(src[i]), i < n (plain loop; kernels/bf16.h has the fast ones). */
static inline void bf16_round_n(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_round(src[i]);
}

/* dst[i] = bf16_widen(src[i]), i < n. */
static inline void bf16_widen_n(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_widen(src[i]);
}

/* Element i of a buffer of dt: p + i elements. */
static inline void *dtype_at(mem_dtype dt, const void *p, size_t i) {
    return (char *)p + i * mem_dtype_size(dt);
}

/* Element i of a buffer of dt as fp32 (exact), and v stored into element i (bf16: rounded):
 * for the few loops that compute on elements of either type one at a time (comm's sum of
 * replicas); bulk work goes through kernels/typed.h. */
static inline float dtype_load(mem_dtype dt, const void *p, size_t i) {
    return dt == MEM_DTYPE_BF16 ? bf16_widen(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline void dtype_store(mem_dtype dt, void *p, size_t i, float v) {
    if (dt == MEM_DTYPE_BF16)
        ((uint16_t *)p)[i] = bf16_round(v);
    else
        ((float *)p)[i] = v;
}

#endif
