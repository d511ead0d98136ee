/* embed.c — token embedding lookup and its gradient. */
#include "kernels/kernels.h"

#include "dispatch.h"

#include <string.h>

#include "core/check.h"

/* Columns per task in embedding_backward: 64 floats = 4 cache lines, so tasks never share a
 * line of dwte and C = 4096 still gives 64 tasks. */
enum { EMBED_COL_CHUNK = 64 };

static void embed_check_tokens(const char *who, const int32_t *tokens, int N) {
    for (int i = 0; i < N; i++)
        UP_CHECK(tokens[i] >= 0, "%s: token %d at row %d is negative", who, (int)tokens[i], i);
}

void embedding_forward(float *out, const int32_t *tokens, const float *wte, int N, int C) {
    UP_CHECK(N >= 0 && C >= 0, "embedding_forward: negative shape N=%d C=%d", N, C);
    embed_check_tokens("embedding_forward", tokens, N);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        // out[i] (C) = wte[tokens[i]] (C)
        memcpy(out + (size_t)i * C, wte + (size_t)tokens[i] * C, (size_t)C * sizeof(float));
    }
}

KERNEL_CLONES
void embedding_backward(float *dwte, const float *dout, const int32_t *tokens, int N, int C) {
    UP_CHECK(N >= 0 && C >= 0, "embedding_backward: negative shape N=%d C=%d", N, C);
    embed_check_tokens("embedding_backward", tokens, N);
    // Parallel over column chunks, serial over rows inside a chunk: a token that appears twice
    // adds into the same dwte row from one thread only, in row order (deterministic, no race).
    int nchunk = (C + EMBED_COL_CHUNK - 1) / EMBED_COL_CHUNK;
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < nchunk; ch++) {
        int c0 = ch * EMBED_COL_CHUNK;
        int c1 = c0 + EMBED_COL_CHUNK < C ? c0 + EMBED_COL_CHUNK : C;
        for (int i = 0; i < N; i++) {
            float *dst = dwte + (size_t)tokens[i] * C; // (C) row of dwte
            const float *src = dout + (size_t)i * C;   // (C) row of dout
#pragma omp simd
            for (int c = c0; c < c1; c++)
                dst[c] += src[c];
        }
    }
}
