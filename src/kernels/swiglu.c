/* swiglu.c — SwiGLU gate: out = silu(gate) * up. */
#include "kernels/kernels.h"

#include "dispatch.h"

#include <math.h>

#include "core/check.h"

#if defined(__GLIBC__) && defined(__x86_64__) && defined(_OPENMP)
/* glibc declares its vector expf (libmvec, <= 4 ulp) only under -ffast-math, which we never use.
 * Declaring the SIMD variants here lets `omp simd` loops call them (about 5x faster than
 * scalar expf); -lm pulls libmvec in as needed. */
#pragma omp declare simd notinbranch
extern float expf(float);
#endif

/* The element bodies both drivers below inline in `omp simd` loops (so their bits agree). */
static inline float swiglu_elem(float g, float u) {
    return g / (1.0f + expf(-g)) * u; // silu(g) * up
}

static inline void swiglu_grad(float g, float u, float d, float *dg, float *du) {
    float s = 1.0f / (1.0f + expf(-g)); // sigmoid(g)
    // d silu/dg = s (1 + g (1 - s))
    *dg = d * u * (s * (1.0f + g * (1.0f - s)));
    *du = d * (g * s);
}

KERNEL_CLONES
void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = swiglu_elem(gate[i], up[i]);
}

KERNEL_CLONES
void swiglu_forward_serial(float *out, const float *gate, const float *up, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        out[i] = swiglu_elem(gate[i], up[i]);
}

// dgate/dup may alias gate/up: each element is read before it is written, and `omp simd` is
// correct there because iteration i touches only index i.
KERNEL_CLONES
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        swiglu_grad(gate[i], up[i], dout[i], dgate + i, dup + i);
}

KERNEL_CLONES
void swiglu_backward_serial(float *dgate, float *dup, const float *dout, const float *gate,
                            const float *up, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        swiglu_grad(gate[i], up[i], dout[i], dgate + i, dup + i);
}
