/* test_typed — the kernels on stored tensors (kernels/typed.h) against their definition: under
 * f32 each is the fp32 kernel, byte for byte; under bf16 each is the fp32 kernel run on the
 * widened inputs with every output rounded once (bf16_round), which for the row-independent
 * kernels (RMSNorm's output, RoPE, SwiGLU, the embedding, the additions) is exact bit for bit
 * whatever the tiling, and for the matrix products holds within the rounding of the output plus
 * the fp32 summation bound (the GEMM may block its sums differently from one cblas_sgemm). Shapes
 * span several tiles (TYPED_TILE_ROWS, and the matmuls' 1024-row staging) with ragged ends. */
#include "kernels/typed.h"

#include "kernels/bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* Every buffer of the test, freed at the end (the sanitizer run checks for leaks). */
static void *bufs[256];
static int nbufs;
static void *keep(void *p) {
    if (!p || nbufs == (int)(sizeof bufs / sizeof bufs[0])) abort();
    return bufs[nbufs++] = p;
}
static void *tmalloc(size_t n) {
    return keep(malloc(n));
}
static void *tcalloc(size_t n, size_t m) {
    return keep(calloc(n, m));
}

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* xorshift, uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1 << 23)) - 1.0);
}

/* n random bf16 values, and their fp32 widening. */
static uint16_t *rand_bf16(size_t n, float **wide) {
    uint16_t *b = tmalloc(n * 2 + 2);
    *wide = tmalloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) {
        b[i] = bf16_round(frand());
        (*wide)[i] = bf16_widen(b[i]);
    }
    return b;
}

/* Elements of a bf16 result that differ from the rounded fp32 reference. */
static size_t count_diff(const uint16_t *got, const float *ref, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += got[i] != bf16_round(ref[i]);
    return bad;
}

static typed_ctx bf16_ctx(size_t maxw, size_t C) {
    typed_ctx t = {.dt = MEM_DTYPE_BF16, .ws_n = typed_workspace_floats(MEM_DTYPE_BF16, maxw, C)};
    t.ws = tmalloc(t.ws_n * sizeof(float));
    return t;
}

static void test_elementwise(void) {
    const int N = 2 * TYPED_TILE_ROWS + 37, C = 96, nh = 3, HS = 32, F = 160;
    typed_ctx t = bf16_ctx(F, C);
    size_t nc = (size_t)N * C;
    float *x, *w, *g, *d0;
    uint16_t *xb = rand_bf16(nc, &x), *wb = rand_bf16((size_t)C, &w);
    uint16_t *gb = rand_bf16(nc, &g), *db = rand_bf16(nc, &d0);
    float *ref = tmalloc(nc * 4), *rstd = tmalloc((size_t)N * 4), *rstd2 = tmalloc((size_t)N * 4);
    uint16_t *out = tmalloc(nc * 2);
    float *outf = tmalloc(nc * 4);
    // RMSNorm forward: bf16 and fp32 outputs
    rmsnorm_forward(ref, rstd, x, w, N, C, 1e-5f);
    typed_rmsnorm_forward(&t, out, 0, rstd2, xb, wb, N, C, 1e-5f);
    CHECK(count_diff(out, ref, nc) == 0 && memcmp(rstd, rstd2, (size_t)N * 4) == 0,
          "rmsnorm_forward bf16 = round(fp32 on widened inputs), rstd equal");
    typed_rmsnorm_forward(&t, outf, 1, rstd2, xb, wb, N, C, 1e-5f);
    CHECK(memcmp(outf, ref, nc * 4) == 0, "rmsnorm_forward with an fp32 output = fp32 kernel");
    // RMSNorm backward: dinp += (accumulates into the widened dinp, rounds once); dw fp32
    float *dinp = tmalloc(nc * 4), *dw = tcalloc((size_t)C, 4), *dw2 = tcalloc((size_t)C, 4);
    memcpy(dinp, d0, nc * 4);
    rmsnorm_backward(dinp, dw, g, x, w, rstd, N, C);
    uint16_t *din = tmalloc(nc * 2);
    memcpy(din, db, nc * 2);
    typed_rmsnorm_backward(&t, din, dw2, gb, 0, xb, wb, rstd, N, C);
    /* dw_i = sum over rows of dout * x * rstd: the tiles add their partial sums in another order
     * than one call; two fp32 orders of N terms differ by at most 2 N 2^-24 sum|terms| */
    size_t dwbad = 0;
    for (int i = 0; i < C; i++) {
        double s = 0;
        for (int n = 0; n < N; n++)
            s += fabs((double)g[(size_t)n * C + i] * x[(size_t)n * C + i] * rstd[n]);
        dwbad += fabs((double)dw[i] - dw2[i]) > 2 * (N + 2) * 0x1p-24 * s;
    }
    CHECK(count_diff(din, dinp, nc) == 0, "rmsnorm_backward dinp bf16 = round(fp32 +=)");
    CHECK(dwbad == 0, "rmsnorm_backward dw within the fp32 reassociation bound (%zu off)", dwbad);
    // RoPE forward and backward in place on (N, nh, HS)
    size_t nr = (size_t)N * nh * HS, half = (size_t)HS / 2;
    float *r, *cs = tmalloc((size_t)N * half * 4), *sn = tmalloc((size_t)N * half * 4);
    float inv[64];
    rope_inv_freq(inv, HS, 10000.0f);
    rope_tables(cs, sn, inv, 1000, N, HS);
    uint16_t *rb = rand_bf16(nr, &r);
    for (int back = 0; back < 2; back++) {
        float *rr = tmalloc(nr * 4);
        uint16_t *rt = tmalloc(nr * 2);
        memcpy(rr, r, nr * 4);
        memcpy(rt, rb, nr * 2);
        if (back) {
            rope_backward(rr, cs, sn, N, nh, HS);
            typed_rope_backward(&t, rt, cs, sn, N, nh, HS);
        } else {
            rope_forward(rr, cs, sn, N, nh, HS);
            typed_rope_forward(&t, rt, cs, sn, N, nh, HS);
        }
        CHECK(count_diff(rt, rr, nr) == 0, "rope_%s bf16 = round(fp32)",
              back ? "backward" : "forward");
    }
    // SwiGLU forward and backward (in place on gate, up)
    size_t nf = (size_t)N * F;
    float *ga, *up, *dd;
    uint16_t *gab = rand_bf16(nf, &ga), *upb = rand_bf16(nf, &up), *ddb = rand_bf16(nf, &dd);
    float *act = tmalloc(nf * 4);
    uint16_t *actb = tmalloc(nf * 2);
    swiglu_forward(act, ga, up, nf);
    typed_swiglu_forward(&t, actb, gab, upb, nf);
    CHECK(count_diff(actb, act, nf) == 0, "swiglu_forward bf16 = round(fp32)");
    swiglu_backward(ga, up, dd, ga, up, nf);
    typed_swiglu_backward(&t, gab, upb, ddb, gab, upb, nf);
    CHECK(count_diff(gab, ga, nf) == 0 && count_diff(upb, up, nf) == 0,
          "swiglu_backward bf16 = round(fp32), in place");
    // embedding: rows copied exactly; the backward adds rows in order into fp32
    int32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)((i * 7) % 11);
    float *wte;
    uint16_t *wteb = rand_bf16((size_t)11 * C, &wte), *eb = tmalloc(nc * 2);
    float *ef = tmalloc(nc * 4);
    embedding_forward(ef, tok, wte, N, C);
    typed_embedding_forward(&t, eb, tok, wteb, N, C);
    CHECK(count_diff(eb, ef, nc) == 0, "embedding_forward bf16 copies rows exactly");
    float *de = tcalloc((size_t)11 * C, 4), *de2 = tcalloc((size_t)11 * C, 4);
    embedding_backward(de, g, tok, N, C);
    typed_embedding_backward(&t, de2, gb, tok, N, C);
    CHECK(memcmp(de, de2, (size_t)11 * C * 4) == 0,
          "embedding_backward bf16 = fp32 on widened rows");
    // addition: fp32 sum rounded once
    uint16_t *sum = tmalloc(nc * 2);
    memcpy(sum, xb, nc * 2);
    typed_add(&t, sum, gb, nc);
    float *sref = tmalloc(nc * 4);
    for (size_t i = 0; i < nc; i++)
        sref[i] = x[i] + g[i];
    CHECK(count_diff(sum, sref, nc) == 0, "typed_add bf16 = round(fp32 sum)");
}

/* A stored-output matmul against fp32 on the widened operands: each element within half a bf16
 * ulp of the exact fp32-accumulated value plus the two fp32 sums' bound, K * 2^-23 * sum|a b|
 * (the GEMM and cblas_sgemm may block the sum differently); the exact bf16 grid lets a rounding
 * land either side of a tie, so one bf16 ulp of the result is allowed. */
static void test_matmul(void) {
    const int N = 1024 + 77, IC = 72, OC = 136;
    typed_ctx t = bf16_ctx(OC > IC ? OC : IC, IC);
    float *x, *w, *o0, *dy;
    uint16_t *xb = rand_bf16((size_t)N * IC, &x), *wb = rand_bf16((size_t)OC * IC, &w);
    uint16_t *ob = rand_bf16((size_t)N * OC, &o0), *dyb = rand_bf16((size_t)N * OC, &dy);
    for (int acc = 0; acc < 2; acc++) {
        float *ref = tmalloc((size_t)N * OC * 4);
        memcpy(ref, o0, (size_t)N * OC * 4);
        matmul_forward(ref, x, w, N, IC, OC, acc);
        uint16_t *got = tmalloc((size_t)N * OC * 2);
        memcpy(got, ob, (size_t)N * OC * 2);
        typed_mm_fwd(&t, got, xb, wb, N, IC, OC, acc);
        size_t bad = 0;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < OC; j++) {
                double s = acc ? fabs(o0[(size_t)i * OC + j]) : 0;
                for (int k = 0; k < IC; k++)
                    s += fabs((double)x[(size_t)i * IC + k] * w[(size_t)j * IC + k]);
                double r = ref[(size_t)i * OC + j], g = bf16_widen(got[(size_t)i * OC + j]);
                bad += fabs(g - r) > fabs(r) * (1.0 / 128) + 2 * (IC + 2) * 0x1p-23 * s;
            }
        CHECK(bad == 0, "matmul_forward acc=%d bf16 within a bf16 ulp of fp32 (%zu off)", acc, bad);
    }
    // backward: dinp (bf16, +=) and dw (fp32, +=, all rows in one product)
    float *dinp = tmalloc((size_t)N * IC * 4), *dw = tcalloc((size_t)OC * IC, 4),
          *dw2 = tcalloc((size_t)OC * IC, 4);
    float *di0;
    uint16_t *dib = rand_bf16((size_t)N * IC, &di0);
    memcpy(dinp, di0, (size_t)N * IC * 4);
    matmul_backward(dinp, dw, dy, x, w, N, IC, OC);
    typed_mm_bwd(&t, dib, dw2, dyb, xb, wb, N, IC, OC);
    size_t bad = 0;
    for (size_t i = 0; i < (size_t)N * IC; i++)
        bad += fabs(bf16_widen(dib[i]) - dinp[i]) >
               fabs(dinp[i]) / 128 + 2 * (OC + 2) * 0x1p-23 * (OC + 1);
    double e = 0;
    for (size_t i = 0; i < (size_t)OC * IC; i++)
        e = fmax(e, fabs((double)dw[i] - dw2[i]));
    CHECK(bad == 0, "matmul_backward dinp bf16 within a bf16 ulp of fp32 (%zu off)", bad);
    CHECK(e <= 2 * (N + 2) * 0x1p-23 * N, "matmul_backward dw fp32 within the summation bound (%g)",
          e);
    // the overwriting form: dinp = dout @ w, whatever dinp held (NaN here)
    float *dset = tcalloc((size_t)N * IC, 4);
    matmul_backward(dset, NULL, dy, x, w, N, IC, OC);
    uint16_t *dsb = tmalloc((size_t)N * IC * 2);
    memset(dsb, 0xff, (size_t)N * IC * 2);
    typed_mm_bwd_set(&t, dsb, NULL, dyb, xb, wb, N, IC, OC);
    bad = 0;
    for (size_t i = 0; i < (size_t)N * IC; i++)
        bad += !(fabs(bf16_widen(dsb[i]) - dset[i]) <=
                 fabs(dset[i]) / 128 + 2 * (OC + 2) * 0x1p-23 * OC);
    CHECK(bad == 0, "matmul_backward_set dinp bf16 within a bf16 ulp of fp32 (%zu off)", bad);
}

/* The LM head's products, fp32 activations times bf16 weights into fp32, against the fp32 kernels
 * on the widened weights, within the two fp32 sums' bound (no rounding to bf16 on the way). V
 * spans several of the GEMM's 1024 blocks: the forward's N, the backward's K. */
static void test_matmul_f32(void) {
    const int N = 301, IC = 72, V = 2100;
    typed_ctx t = bf16_ctx(IC, IC);
    float *w, *x = tmalloc((size_t)N * IC * 4), *dy = tmalloc((size_t)N * V * 4);
    uint16_t *wb = rand_bf16((size_t)V * IC, &w);
    for (size_t i = 0; i < (size_t)N * IC; i++)
        x[i] = frand();
    for (size_t i = 0; i < (size_t)N * V; i++)
        dy[i] = frand();
    float *ref = tmalloc((size_t)N * V * 4), *got = tmalloc((size_t)N * V * 4);
    matmul_forward(ref, x, w, N, IC, V, 0);
    typed_matmul_forward_f32(&t, got, x, wb, N, IC, V);
    size_t bad = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < V; j++) {
            double s = 0;
            for (int k = 0; k < IC; k++)
                s += fabs((double)x[(size_t)i * IC + k] * w[(size_t)j * IC + k]);
            bad += fabs((double)got[(size_t)i * V + j] - ref[(size_t)i * V + j]) >
                   2 * (IC + 2) * 0x1p-23 * s;
        }
    CHECK(bad == 0, "LM head forward fp32 x bf16 within the fp32 summation bound (%zu off)", bad);
    float *di = tmalloc((size_t)N * IC * 4), *di2 = tmalloc((size_t)N * IC * 4),
          *dw = tcalloc((size_t)V * IC, 4), *dw2 = tcalloc((size_t)V * IC, 4);
    for (size_t i = 0; i < (size_t)N * IC; i++)
        di[i] = di2[i] = frand();
    matmul_backward(di, dw, dy, x, w, N, IC, V);
    typed_matmul_backward_f32(&t, di2, dw2, dy, x, wb, N, IC, V);
    bad = 0;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < IC; k++) {
            double s = 1; /* |dinp| before: below 1 */
            for (int j = 0; j < V; j++)
                s += fabs((double)dy[(size_t)i * V + j] * w[(size_t)j * IC + k]);
            bad += fabs((double)di2[(size_t)i * IC + k] - di[(size_t)i * IC + k]) >
                   2 * (V + 2) * 0x1p-23 * s;
        }
    CHECK(bad == 0, "LM head backward dinp within the fp32 summation bound (%zu off)", bad);
    CHECK(memcmp(dw, dw2, (size_t)V * IC * 4) == 0, "LM head dw: the fp32 product itself");
}

/* Under f32 every function is the fp32 kernel itself. */
static void test_f32_passthrough(void) {
    typed_ctx t = {.dt = MEM_DTYPE_F32};
    CHECK(typed_workspace_floats(MEM_DTYPE_F32, 4096, 4096) == 0, "f32 needs no workspace");
    const int N = 33, C = 40;
    float *x = tmalloc((size_t)N * C * 4), *w = tmalloc((size_t)C * 4),
          *a = tmalloc((size_t)N * C * 4), *b = tmalloc((size_t)N * C * 4), r1[33], r2[33];
    for (int i = 0; i < N * C; i++)
        x[i] = frand();
    for (int i = 0; i < C; i++)
        w[i] = frand();
    rmsnorm_forward(a, r1, x, w, N, C, 1e-6f);
    typed_rmsnorm_forward(&t, b, 0, r2, x, w, N, C, 1e-6f);
    CHECK(memcmp(a, b, (size_t)N * C * 4) == 0 && memcmp(r1, r2, sizeof r1) == 0,
          "f32 rmsnorm is the fp32 kernel");
    matmul_forward(a, x, x, N, C, N, 0);
    typed_mm_fwd(&t, b, x, x, N, C, N, 0);
    CHECK(memcmp(a, b, (size_t)N * N * 4) == 0, "f32 matmul is the fp32 kernel");
    // dout a (N, N), inp x (N, C), w x (N, C): OC = N, IC = C
    float *d1 = tcalloc((size_t)N * C, 4), *d2 = tmalloc((size_t)N * C * 4),
          *g1 = tcalloc((size_t)N * C, 4), *g2 = tcalloc((size_t)N * C, 4);
    for (int i = 0; i < N * C; i++)
        d2[i] = NAN;
    matmul_backward(d1, g1, a, x, x, N, C, N);
    typed_mm_bwd_set(&t, d2, g2, a, x, x, N, C, N);
    CHECK(memcmp(d1, d2, (size_t)N * C * 4) == 0 && memcmp(g1, g2, (size_t)N * C * 4) == 0,
          "f32 matmul_backward_set is zeroing and the fp32 kernel");
}

int main(void) {
    test_elementwise();
    test_matmul();
    test_matmul_f32();
    test_f32_passthrough();
    for (int i = 0; i < nbufs; i++)
        free(bufs[i]);
    return harness_finish("test_typed");
}
