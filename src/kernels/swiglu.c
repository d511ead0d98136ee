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

KERNEL_CLONES
void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i]; // silu(g) * up
    }
}

KERNEL_CLONES
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, size_t n) {
    // dgate/dup may alias gate/up: each element is read before it is written, and `omp simd`
    // is correct there because iteration i touches only index i.
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], u = up[i], d = dout[i];
        float s = 1.0f / (1.0f + expf(-g)); // sigmoid(g)
        // d silu/dg = s (1 + g (1 - s))
        dgate[i] = d * u * (s * (1.0f + g * (1.0f - s)));
        dup[i] = d * (g * s);
    }
}
