/* test_bf16.c — the fp32 <-> bf16 conversions of kernels/bf16.h.
 *
 * The portable path (the reference twin) against an oracle written here from the definition
 * (the two bf16 neighbours of x compared in double, ties to the even one) on hand-picked edge
 * cases with their expected bits and on every input below; then every path this CPU runs against
 * the portable one, bit for bit: all 65536 bf16 patterns widened and rounded back, the 2^16 upper
 * halves each with the lower halves around a tie, a few million random fp32 patterns, and lengths
 * 0..70 at unaligned addresses with guards past the end. Paths the CPU lacks are skipped and
 * named. One line per failure, then a summary line; exit status 1 on any failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

#include "harness.h"
#include "kernels_util.h"

static float f_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t bits_f(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* The rules of bf16.h from their definition, independent of the integer trick the paths use. */
static uint16_t oracle(uint32_t u) {
    float x = f_bits(u);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x0040u);
    if (x == 0.0f || fpclassify(x) == FP_SUBNORMAL) return (uint16_t)((u >> 16) & 0x8000u);
    if (isinf(x)) return (uint16_t)(u >> 16);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u; // the neighbours toward and away from 0
    double dlo = (double)f_bits(lo);
    double dhi = (hi & 0x7fffffffu) == 0x7f800000u ? copysign(0x1p128, x) : (double)f_bits(hi);
    double elo = fabs((double)x - dlo), ehi = fabs(dhi - (double)x); // exact in double
    if (elo < ehi) return (uint16_t)(lo >> 16);
    if (ehi < elo) return (uint16_t)(hi >> 16);
    return (uint16_t)(((lo >> 16) & 1u) ? hi >> 16 : lo >> 16); // a tie: the even one
}

typedef struct {
    uint32_t in;
    uint16_t want;
    const char *what;
} edge_case;

static const edge_case edges[] = {
    {0x00000000u, 0x0000, "+0"},
    {0x80000000u, 0x8000, "-0"},
    {0x7f800000u, 0x7f80, "+Inf"},
    {0xff800000u, 0xff80, "-Inf"},
    {0x3f800000u, 0x3f80, "1.0 exact"},
    {0x3f808000u, 0x3f80, "tie, even kept part: down"},
    {0x3f818000u, 0x3f82, "tie, odd kept part: up"},
    {0xbf808000u, 0xbf80, "negative tie, even: down"},
    {0xbf818000u, 0xbf82, "negative tie, odd: up"},
    {0x3f807fffu, 0x3f80, "just below a tie (even)"},
    {0x3f808001u, 0x3f81, "just above a tie (even)"},
    {0x3f817fffu, 0x3f81, "just below a tie (odd)"},
    {0x3f818001u, 0x3f82, "just above a tie (odd)"},
    {0x3fffffffu, 0x4000, "carry into the exponent"},
    {0x7f7fffffu, 0x7f80, "max finite fp32: rounds to Inf"},
    {0xff7fffffu, 0xff80, "-max finite fp32: rounds to -Inf"},
    {0x7f7f8000u, 0x7f80, "tie above the max bf16 (odd): Inf"},
    {0x7f7f7fffu, 0x7f7f, "just below that tie: max bf16"},
    {0x7f7f0000u, 0x7f7f, "max bf16 exact"},
    {0x00800000u, 0x0080, "smallest normal"},
    {0x80800000u, 0x8080, "-smallest normal"},
    {0x00808000u, 0x0080, "smallest normal + half ulp: tie to even"},
    {0x00818000u, 0x0082, "tie, odd, smallest binade"},
    {0x00ffffffu, 0x0100, "largest of the smallest binade: up"},
    {0x007fffffu, 0x0000, "largest denormal: zero"},
    {0x00000001u, 0x0000, "smallest denormal: zero"},
    {0x807fffffu, 0x8000, "-largest denormal: -0"},
    {0x80000001u, 0x8000, "-smallest denormal: -0"},
    {0x00400000u, 0x0000, "denormal that is a bf16 denormal: zero"},
    {0x7fc00000u, 0x7fc0, "quiet NaN"},
    {0xffc00000u, 0xffc0, "-quiet NaN"},
    {0x7f800001u, 0x7fc0, "signalling NaN, low payload: quiet, sign kept"},
    {0xff800001u, 0xffc0, "-signalling NaN, low payload"},
    {0x7fa00000u, 0x7fe0, "signalling NaN, high payload: quieted, payload kept"},
    {0x7fffffffu, 0x7fff, "NaN, all payload bits: no carry into the sign"},
    {0xffffffffu, 0xffff, "-NaN, all payload bits"},
    {0x7fc0ffffu, 0x7fc0, "quiet NaN with low payload: truncated, not rounded"},
    {0x7f80ffffu, 0x7fc0, "NaN with only the low 16 bits: stays NaN"},
    {0x3eaaaaabu, 0x3eab, "1/3"},
    {0x40490fdbu, 0x4049, "pi"},
};
enum { NEDGES = sizeof edges / sizeof edges[0] };

/* Runs the path on src (n elements) and compares with the portable path; counts one CHECK. */
static void check_path_bits(const bf16_ops *p, const float *src, size_t n, const char *what) {
    const bf16_ops *ref = bf16_path(bf16_path_count() - 1);
    uint16_t *want = xmalloc(n * sizeof(uint16_t)), *got = xmalloc(n * sizeof(uint16_t));
    ref->from_f32(src, want, n);
    p->from_f32(src, got, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i] && bad++ == 0) first = i;
    CHECK(bad == 0,
          "%s: %s, %zu elements: %zu differ from portable (first: in 0x%08x, got 0x%04x, "
          "want 0x%04x)",
          p->name, what, n, bad, n ? bits_f(src[first]) : 0u, n ? got[first] : 0u,
          n ? want[first] : 0u);
    free(want);
    free(got);
}

/* The portable path against the oracle on n inputs. */
static void check_oracle(const float *src, size_t n, const char *what) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (bf16_round(src[i]) != oracle(bits_f(src[i])) && bad++ == 0) first = i;
    CHECK(bad == 0, "portable vs oracle: %s, %zu elements: %zu differ (first: in 0x%08x)", what, n,
          bad, n ? bits_f(src[first]) : 0u);
}

static void test_edges(void) {
    float src[NEDGES];
    for (int i = 0; i < NEDGES; i++) {
        src[i] = f_bits(edges[i].in);
        CHECK(oracle(edges[i].in) == edges[i].want, "oracle: %s: 0x%08x -> 0x%04x, want 0x%04x",
              edges[i].what, edges[i].in, oracle(edges[i].in), edges[i].want);
        CHECK(bf16_round(src[i]) == edges[i].want, "portable: %s: 0x%08x -> 0x%04x, want 0x%04x",
              edges[i].what, edges[i].in, bf16_round(src[i]), edges[i].want);
    }
    for (int k = 0; k < bf16_path_count(); k++) {
        const bf16_ops *p = bf16_path(k);
        if (!p->runs()) continue;
        uint16_t got[NEDGES];
        p->from_f32(src, got, NEDGES);
        for (int i = 0; i < NEDGES; i++)
            CHECK(got[i] == edges[i].want, "%s: %s: 0x%08x -> 0x%04x, want 0x%04x", p->name,
                  edges[i].what, edges[i].in, got[i], edges[i].want);
    }
}

/* All 65536 bf16 patterns: widened exactly (the shift), and rounded back to themselves, except
 * NaNs (a NaN, quieted: b | 0x0040) and bf16 denormals (their fp32 is a denormal: signed zero,
 * as VCVTNEPS2BF16 does). */
static void test_all_bf16(void) {
    enum { NB = 65536 };
    uint16_t *b = xmalloc(NB * sizeof(uint16_t)), *back = xmalloc(NB * sizeof(uint16_t));
    float *f = xmalloc(NB * sizeof(float));
    for (int i = 0; i < NB; i++)
        b[i] = (uint16_t)i;
    for (int k = 0; k < bf16_path_count(); k++) {
        const bf16_ops *p = bf16_path(k);
        if (!p->runs()) continue;
        memset(f, 0xa5, NB * sizeof(float));
        p->to_f32(b, f, NB);
        size_t bad_widen = 0, bad_back = 0, nan_kept = 0, nans = 0;
        for (int i = 0; i < NB; i++)
            if (bits_f(f[i]) != (uint32_t)i << 16) bad_widen++;
        p->from_f32(f, back, NB);
        for (int i = 0; i < NB; i++) {
            uint16_t want = (uint16_t)i;
            int e = (i >> 7) & 0xff, m = i & 0x7f;
            if (e == 0xff && m) {
                want = (uint16_t)(i | 0x40);
                nans++;
                nan_kept += isnan(bf16_widen(back[i])) != 0;
            } else if (e == 0 && m) {
                want = (uint16_t)(i & 0x8000);
            }
            if (back[i] != want) bad_back++;
        }
        CHECK(bad_widen == 0, "%s: bf16 -> fp32 is the shift for all 65536 patterns (%zu differ)",
              p->name, bad_widen);
        CHECK(bad_back == 0 && nan_kept == nans,
              "%s: all 65536 bf16 -> fp32 -> bf16: %zu differ from themselves (NaNs quieted, "
              "denormals to signed zero); %zu of %zu NaNs stay NaN",
              p->name, bad_back, nan_kept, nans);
    }
    free(b);
    free(back);
    free(f);
}

/* Every upper half with lower halves at and around the tie, and random ones. */
static void test_structured_and_random(void) {
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7ffe, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff};
    enum { NL = sizeof lows / sizeof lows[0] };
    size_t n = (size_t)65536 * (NL + 1);
    float *src = xmalloc(n * sizeof(float));
    size_t j = 0;
    for (uint32_t hi = 0; hi < 65536; hi++) {
        for (int l = 0; l < NL; l++)
            src[j++] = f_bits(hi << 16 | lows[l]);
        src[j++] = f_bits(hi << 16 | (uint32_t)(rng_next() & 0xffff));
    }
    check_oracle(src, n, "every upper half x ties and neighbours");
    for (int k = 0; k < bf16_path_count(); k++)
        if (bf16_path(k)->runs())
            check_path_bits(bf16_path(k), src, n, "every upper half x ties and neighbours");
    free(src);

    n = (size_t)4 << 20; // 4M random patterns, all classes
    src = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        src[i] = f_bits((uint32_t)rng_next());
    check_oracle(src, n, "random fp32 patterns");
    for (int k = 0; k < bf16_path_count(); k++)
        if (bf16_path(k)->runs()) check_path_bits(bf16_path(k), src, n, "random fp32 patterns");
    free(src);
}

/* Lengths 0..70 (every tail of every vector width) at element offsets 0..3 of src and dst: the
 * portable bits, and the guard words past the end (and before the start) untouched. */
static void test_tails(void) {
    enum { MAXN = 70, PAD = 8, GUARD = 0xdead };
    float fsrc[MAXN + PAD], fdst[MAXN + 2 * PAD];
    uint16_t bsrc[MAXN + PAD], bdst[MAXN + 2 * PAD], want[MAXN];
    for (int i = 0; i < MAXN + PAD; i++) {
        // ties, NaNs, denormals and plain values mixed, so each lane position sees each kind
        static const uint32_t kinds[] = {0x3f818000u, 0x7f800001u, 0x00000001u, 0xbf808000u};
        fsrc[i] = i % 3 ? rng_unif(-4.0f, 4.0f) : f_bits(kinds[(i / 3) % 4]);
        bsrc[i] = (uint16_t)rng_next();
    }
    const float guard_f = f_bits(0x7fbadbadu);
    for (int k = 0; k < bf16_path_count(); k++) {
        const bf16_ops *p = bf16_path(k);
        if (!p->runs()) continue;
        size_t bad = 0;
        for (int so = 0; so < 4; so++)
            for (int dofs = 0; dofs < 4; dofs++)
                for (int n = 0; n <= MAXN; n++) {
                    for (int i = 0; i < MAXN + 2 * PAD; i++)
                        bdst[i] = GUARD;
                    p->from_f32(fsrc + so, bdst + PAD + dofs, (size_t)n);
                    for (int i = 0; i < n; i++)
                        want[i] = bf16_round(fsrc[so + i]);
                    for (int i = 0; i < MAXN + 2 * PAD; i++) {
                        int at = i - PAD - dofs;
                        uint16_t w = at >= 0 && at < n ? want[at] : GUARD;
                        bad += bdst[i] != w;
                    }
                    for (int i = 0; i < MAXN + 2 * PAD; i++)
                        fdst[i] = guard_f;
                    p->to_f32(bsrc + so, fdst + PAD + dofs, (size_t)n);
                    for (int i = 0; i < MAXN + 2 * PAD; i++) {
                        int at = i - PAD - dofs;
                        uint32_t w =
                            at >= 0 && at < n ? (uint32_t)bsrc[so + at] << 16 : bits_f(guard_f);
                        bad += bits_f(fdst[i]) != w;
                    }
                }
        CHECK(bad == 0, "%s: lengths 0..%d at offsets 0..3, both ways, guards kept (%zu wrong)",
              p->name, MAXN, bad);
    }
}

/* The dispatched entry points: UPIPE_KERNEL=avx2 (set before the first call) chooses the avx2
 * row's conversions, and they give the portable bits. A CPU that cannot run the avx2 kernel
 * path (UPIPE_KERNEL=avx2 would be refused) gets the CPU's best conversions instead. */
static void test_dispatch(void) {
    int has_avx2 = kernel_path_supported("avx2");
    if (has_avx2) setenv("UPIPE_KERNEL", "avx2", 1);
    const bf16_ops *cur = bf16_path_current();
    const char *want = has_avx2 ? "avx2" : NULL;
    for (int k = 0; !want && k < bf16_path_count(); k++)
        if (bf16_path(k)->runs()) want = bf16_path(k)->name;
    CHECK(cur && cur->runs() && !strcmp(cur->name, want), "UPIPE_KERNEL=%s chooses %s (got %s)",
          has_avx2 ? "avx2" : "(unset)", want, cur ? cur->name : "nothing");
    enum { N = 1000 };
    float src[N], wide[N];
    uint16_t got[N];
    for (int i = 0; i < N; i++)
        src[i] = f_bits((uint32_t)rng_next());
    bf16_from_f32(src, got, N);
    f32_from_bf16(got, wide, N);
    size_t bad = 0;
    for (int i = 0; i < N; i++)
        bad += got[i] != bf16_round(src[i]) || bits_f(wide[i]) != (uint32_t)got[i] << 16;
    CHECK(bad == 0, "bf16_from_f32 and f32_from_bf16 give the portable bits (%zu wrong)", bad);
}

int main(void) {
    test_edges();
    test_all_bf16();
    test_structured_and_random();
    test_tails();
    test_dispatch();
    for (int k = 0; k < bf16_path_count(); k++)
        printf("path %-10s %s\n", bf16_path(k)->name,
               bf16_path(k)->runs() ? "tested" : "skipped (this CPU lacks it)");
    return harness_finish("test_bf16");
}
