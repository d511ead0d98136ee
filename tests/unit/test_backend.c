/* test_backend — the CUDA backend (libupipe_cuda.so, kernels/backend.h) against the CPU backend,
 * op for op: every tensor op of the table under --dtype f32 and bf16, then the conversions, the
 * loss tiles and the optimizer's vector ops, on odd shapes (N 1, 7, 129, 257, 1000; C 48 ... 1408;
 * V 260, 4099; HS 16, 24, 32, 64, 128; T 1 ... 2049 and a Llama-like 512 x 32/8 heads x 128), with
 * strided rows, accumulating and overwriting outputs, NULL outputs, in-place aliasing, documents,
 * duplicate tokens, ignored targets, ties and non-finite values. It proves that the module computes
 * the functions of kernels.h and typed.h: each result, read back from the device, matches the CPU
 * backend's on the same inputs within the bound its arithmetic allows (TOL_* below, one per
 * family, each a claim of the test), and matmul_backward and attention_backward give the same bits
 * when run twice.
 *
 * Inputs are N(0, 1) from a fixed seed, scaled per op, and under bf16 rounded first, so both sides
 * read the same exact values. Outputs an op overwrites start as NaN on the device (an op that
 * reads them shows it); accumulating outputs start random on both sides. Row padding (ld > width)
 * must come back untouched. The CPU reference runs a widening kernel path (avx512, avx2 or
 * portable: fp32 arithmetic and one rounding per bf16 output, the CUDA backend's contract), not
 * avx512bf16, whose attention rounds P and dS to bf16; UPIPE_TF32 is unset, so fp32 products are
 * fp32.
 *
 * One line per check: "ok   op dtype shape err=E" or "FAIL op dtype shape err=E (tol T): where",
 * then "test_backend: N checks, M failed"; exit 1 on any failure. Without a loadable CUDA backend
 * (no module, no driver, no GPU) it prints one line and exits 77, ctest's skip. With
 * UPIPE_TEST_BACKEND_SELF=1 the CPU backend stands in for the device (host memory): every check
 * runs and must pass with err 0, which tests the test where no GPU is. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* unsetenv, clock_gettime */
#endif
#include "core/dtype.h"
#include "kernels/backend.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- tolerances: the claims --------------------------------------------------------------------
 * err = max|got - want| / max(max|want|, TINY) over an output, want the CPU backend's result.
 *  exact: data movement (zero, copy, copy_rows, embedding forward, convert both ways, zero_f32)
 *     and add (one fp32 addition; bf16: widened, one addition, one rounding) are bit for bit, as
 *     are first_nonfinite's index, cross_entropy_rows' pred and a repeated run's outputs. So are
 *     AdamW (the module rounds each operation alone, with no fused multiply-add, as the C build)
 *     and sum_squares (backend.h fixes its order): an optimizer offloaded to the CPU must give
 *     the device's weights.
 *  TOL_ELEM 1e-6: fp32 outputs of element-wise ops with more than one rounding (RoPE, SwiGLU):
 *     the sides may fuse a multiply-add (nvcc contracts by default) or use
 *     another expf (a few ulps, and SwiGLU's sigmoid damps them), so an element differs by a few
 *     ulps of its operands, 2^-23 = 1.2e-7 each: a few of those, of the largest element.
 *  bf16 element-wise (RoPE, SwiGLU): each element within one bf16 ulp of the CPU's (both round an
 *     fp32 value a few fp32 ulps apart, so the roundings land on the same or a neighbouring bf16),
 *     plus TOL_ELEM of the largest element where a cancellation (RoPE's x1 cos - x2 sin, SwiGLU's
 *     1 + g (1 - s) near g = -1.28) leaves a small result of large operands.
 *  TOL_RED 1e-5: fp32 outputs of reductions (the products, RMSNorm and rstd, the embedding's and
 *     the norm's weight gradients): the device sums in another order (cuBLASLt's
 *     tiles and split K, block trees, atomics); two orders of K terms differ by about
 *     sqrt(K) 2^-24 times the terms' scale, 64 x 6e-8 = 4e-6 at K = 4099, less after the
 *     normalisation by the largest element.
 *  TOL_ATT 1e-4: fp32 attention (out, lse, dq, dk, dv): exponentials (exp2 with log2 e folded in
 *     on the GPU) and the online softmax's rescaling over up to 2049 keys, and the backward's
 *     dP - D, which cancels.
 *  TOL_LOSS 1e-5: the cross-entropy loss (relative; a double sum of fp32 row log-sum-exps over V up
 *     to 4099 terms: sqrt(V) eps of the exponentials' sum is 4e-6 of a log-sum-exp's argument, far
 *     less of the loss) and its gradient, and the per-row losses.
 *  TOL_BF16 1/128: bf16 outputs of products, norms and attention: both sides round fp32 results
 *     that differ in their last places once to an 8-bit significand; one rounding landing on the
 *     neighbouring bf16 is one ulp, 2^-8 to 2^-7 of the element, so at most 2^-7 of the largest.
 *     (dw, rstd and lse stay fp32 under bf16: TOL_RED and TOL_ATT.) */
static const double TOL_ELEM = 1e-6, TOL_RED = 1e-5, TOL_ATT = 1e-4, TOL_LOSS = 1e-5,
                    TOL_BF16 = 1.0 / 128, TINY = 1e-30;
/* TOL_TF32 1/256: a bf16 run's LM head on the GPU multiplies its fp32 operands on TF32 tensor
 * cores (DESIGN.md §11): each operand keeps 11 significant bits (bf16 weights exactly), so a
 * term is off by at most 2^-11 relative and a sum by 2^-11 of the sum of its terms' magnitudes,
 * which for these operands (N(0,1), K up to 4099, weights scaled by 1/sqrt(IC)) stays within a
 * few times the largest output: 2^-8 bounds it, half of TOL_BF16. */
static const double TOL_TF32 = 1.0 / 256;

static double tol_prod(mem_dtype dt) { /* products and norms: a stored output */
    return dt == MEM_DTYPE_F32 ? TOL_RED : TOL_BF16;
}
/* TOL_BF16_TC 1/64: the tensor-core route (UPIPE_CUDA_ATTENTION=tc, bf16) rounds P and dS to bf16
 * before their products (FlashAttention-2's recipe; the CPU's avx512bf16 path does the same), a
 * second rounding of each term beside the output's own, while the CPU reference here keeps them
 * fp32: each rounding bounded by TOL_BF16 of the largest element, the two by twice that. */
static const double TOL_BF16_TC = 1.0 / 64;
static double tol_att(mem_dtype dt) {
    const char *route = getenv("UPIPE_CUDA_ATTENTION");
    if (dt == MEM_DTYPE_BF16 && route && !strcmp(route, "tc")) return TOL_BF16_TC;
    return dt == MEM_DTYPE_F32 ? TOL_ATT : TOL_BF16;
}

static const mem_dtype F32 = MEM_DTYPE_F32, BF16 = MEM_DTYPE_BF16;

/* ---- state: the backend under test, the counts, the case being checked --------------------------
 */

static const backend_ops *cu;
static int n_checks, n_failed;
static const char *cur_dt = "";
static char cur_shape[192];

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
set_case(const char *dt, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cur_shape, sizeof cur_shape, fmt, ap);
    va_end(ap);
    cur_dt = dt;
}

/* Names the op for the module's error message (cu_fail: "during ..."; it keeps 63 characters),
 * should it stop the run. */
static void where(const char *op) {
    char w[320];
    snprintf(w, sizeof w, "%s %s %s", op, cur_dt, cur_shape);
    if (cu->set_where) cu->set_where(w, -1, -1);
}

static void fatal(const char *what) {
    printf("test_backend: fatal: %s (%s %s)\n", what, cur_dt, cur_shape);
    exit(1);
}

/* ---- memory of a case: host and device buffers, all freed by release() -------------------------
 */

enum { ARENA_MAX = 256 };
static struct {
    void *p[ARENA_MAX];
    unsigned char dev[ARENA_MAX];
    int n;
} arena;

static void *track(void *p, int dev) {
    if (!p) fatal(dev ? "device memory exhausted" : "host memory exhausted");
    if (arena.n == ARENA_MAX) fatal("too many buffers in one case");
    arena.p[arena.n] = p;
    arena.dev[arena.n++] = (unsigned char)dev;
    return p;
}
static void *halloc(size_t bytes) {
    return track(malloc(bytes ? bytes : 1), 0);
}
static void *dalloc(size_t bytes) {
    return track(cu->alloc(bytes ? bytes : 16), 1);
}
static void release(void) {
    while (arena.n > 0) {
        arena.n--;
        if (arena.dev[arena.n])
            cu->free(arena.p[arena.n]);
        else
            free(arena.p[arena.n]);
    }
}

/* A device copy of host bytes; a host copy of device bytes (waits); a host copy. */
static void *dev_of(const void *h, size_t bytes) {
    void *d = dalloc(bytes);
    if (bytes) cu->to_dev(d, h, bytes);
    return d;
}
static void *host_of(const void *d, size_t bytes) {
    void *h = halloc(bytes);
    if (bytes) cu->to_host(h, d, bytes);
    return h;
}
static void *hdup(const void *h, size_t bytes) {
    void *c = halloc(bytes);
    memcpy(c, h, bytes);
    return c;
}
/* All bits set: a NaN in f32 and in bf16. */
static void *nans(size_t bytes) {
    void *h = halloc(bytes);
    memset(h, 0xff, bytes);
    return h;
}
static size_t nb(mem_dtype dt, size_t n) {
    return mem_dtype_bytes(dt, n);
}

/* The contexts: the CPU's with its bf16 workspace for rows up to maxw wide; the device's with
 * what it asks for (the CUDA backend: none, NULL). */
static typed_ctx cpu_ctx(mem_dtype dt, size_t maxw, size_t C) {
    typed_ctx t = {.dt = dt, .ws_n = backend_cpu.workspace_floats(dt, maxw, C)};
    t.ws = t.ws_n ? halloc(t.ws_n * sizeof(float)) : NULL;
    return t;
}
static typed_ctx dev_ctx(mem_dtype dt, size_t maxw, size_t C) {
    typed_ctx t = {.dt = dt, .be = cu, .ws_n = cu->workspace_floats(dt, maxw, C)};
    t.ws = t.ws_n ? dalloc(t.ws_n * sizeof(float)) : NULL;
    return t;
}

/* ---- data (splitmix64, fixed seed) -------------------------------------------------------------
 */

static uint64_t rng_s = 0x243F6A8885A308D3ull;
static uint64_t rng_u64(void) {
    uint64_t z = (rng_s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int rng_int(int n) {
    return (int)(rng_u64() % (uint64_t)n);
}
static float rng_normal(void) { /* Box-Muller */
    double u = ((double)(rng_u64() >> 11) + 0.5) * 0x1p-53, v = (double)(rng_u64() >> 11) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}
static float *rand_f(size_t n, float scale) {
    float *x = halloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = scale * rng_normal();
    return x;
}
/* x as n elements of dt (bf16: rounded, so that the value is the bf16's exactly). */
static void *as_t(mem_dtype dt, const float *x, size_t n) {
    if (dt == F32) return hdup(x, n * sizeof(float));
    uint16_t *b = halloc(n * sizeof(uint16_t));
    bf16_round_n(b, x, n);
    return b;
}
static void *rand_t(mem_dtype dt, size_t n, float scale) {
    return as_t(dt, rand_f(n, scale), n);
}

/* ---- verdicts and comparisons ------------------------------------------------------------------
 */

static void verdict(int ok, const char *op, double err, const char *tol, const char *why) {
    n_checks++;
    if (ok) {
        printf("ok   %s %s %s err=%.3g\n", op, cur_dt, cur_shape, err);
    } else {
        n_failed++;
        printf("FAIL %s %s %s err=%.3g (tol %s)%s%s\n", op, cur_dt, cur_shape, err, tol,
               why[0] ? ": " : "", why);
    }
    fflush(stdout);
}

/* The smallest scale an error is measured against (cmp_tol): 0 but for the attention's dq and dk.
 */
static double cmp_floor;

/* got against want, rows x width elements of dt with rows ld apart: err <= tol, no NaN, and the
 * elements between rows (ld > width; the op never writes them) the same bits on both sides. */
static void cmp_tol(const char *op, mem_dtype dt, const void *got, const void *want, size_t rows,
                    size_t width, size_t ld, double tol) {
    double maxd = 0, maxw = 0;
    size_t worst = 0, nan = 0, pad = 0, es = mem_dtype_size(dt);
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < width; c++) {
            size_t i = r * ld + c;
            double a = dtype_load(dt, got, i), b = dtype_load(dt, want, i), d = fabs(a - b);
            if (isnan(d)) {
                if (!nan++) worst = i;
                continue;
            }
            if (!nan && d > maxd) worst = i;
            maxd = fmax(maxd, d);
            maxw = fmax(maxw, fabs(b));
        }
        size_t p0 = (r * ld + width) * es;
        if (ld > width &&
            memcmp((const char *)got + p0, (const char *)want + p0, (ld - width) * es))
            pad++;
    }
    double err = nan ? INFINITY : maxd / fmax(maxw, fmax(cmp_floor, TINY));
    char why[256], ts[32];
    snprintf(why, sizeof why,
             "worst [%zu,%zu] got %.9g want %.9g; max|want| %.3g; %zu NaN; padding "
             "changed in %zu rows",
             worst / ld, worst % ld, dtype_load(dt, got, worst), dtype_load(dt, want, worst), maxw,
             nan, pad);
    snprintf(ts, sizeof ts, "%.3g", tol);
    verdict(err <= tol && pad == 0, op, err, ts, why);
}

/* One bf16 ulp at x: 2^(e-8) for |x| in [2^(e-1), 2^e). */
static double bf16_ulp(double x) {
    int e;
    if (x == 0) return 0;
    frexp(x, &e);
    return ldexp(1.0, e - 8);
}

/* A pure element-wise op's output: fp32 within TOL_ELEM; bf16 each element within one bf16 ulp
 * plus TOL_ELEM of the largest (see the tolerances). */
static void cmp_elem(const char *op, mem_dtype dt, const void *got, const void *want, size_t n) {
    if (dt == F32) {
        cmp_tol(op, dt, got, want, 1, n, n, TOL_ELEM);
        return;
    }
    double maxw = 0, maxd = 0;
    for (size_t i = 0; i < n; i++)
        maxw = fmax(maxw, fabs(dtype_load(dt, want, i)));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        double a = dtype_load(dt, got, i), b = dtype_load(dt, want, i), d = fabs(a - b);
        maxd = isnan(d) ? INFINITY : fmax(maxd, d);
        if (!(d <= bf16_ulp(fmax(fabs(a), fabs(b))) + TOL_ELEM * maxw) && !bad++) first = i;
    }
    char why[200];
    snprintf(why, sizeof why, "%zu of %zu elements beyond it, first [%zu] got %.9g want %.9g", bad,
             n, first, dtype_load(dt, got, first), dtype_load(dt, want, first));
    verdict(bad == 0, op, maxd / fmax(maxw, TINY), "1 bf16 ulp + 1e-6", why);
}

/* Bit for bit; err is the number of elements that differ. */
static void cmp_exact(const char *op, mem_dtype dt, const void *got, const void *want, size_t n) {
    size_t es = mem_dtype_size(dt), bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) && !bad++)
            first = i;
    uint32_t g = 0, w = 0;
    if (bad) {
        memcpy(&g, (const char *)got + first * es, es); /* little-endian: the low bytes */
        memcpy(&w, (const char *)want + first * es, es);
    }
    char why[200];
    snprintf(why, sizeof why,
             "%zu of %zu elements differ, first [%zu] got 0x%0*x (%.9g) want "
             "0x%0*x (%.9g)",
             bad, n, first, (int)es * 2, (unsigned)g, bad ? dtype_load(dt, got, first) : 0.0,
             (int)es * 2, (unsigned)w, bad ? dtype_load(dt, want, first) : 0.0);
    verdict(bad == 0, op, (double)bad, "exact (err: elements that differ)", why);
}

static void cmp_index(const char *op, const int32_t *got, const int32_t *want, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i] && !bad++) first = i;
    char why[160];
    snprintf(why, sizeof why, "%zu of %zu differ, first [%zu] got %d want %d", bad, n, first,
             (int)got[first], (int)want[first]);
    verdict(bad == 0, op, (double)bad, "exact (err: elements that differ)", why);
}

static void cmp_scalar(const char *op, double got, double want, double tol) {
    double err = fabs(got - want) / fmax(fabs(want), TINY);
    char why[120], ts[32];
    snprintf(why, sizeof why, "got %.12g want %.12g", got, want);
    snprintf(ts, sizeof ts, "%.3g relative", tol);
    verdict(err <= tol, op, isnan(err) ? INFINITY : err, ts, why);
}

/* n doubles (host arrays) normalised as cmp_tol. */
static void cmp_doubles(const char *op, const double *got, const double *want, size_t n,
                        double tol) {
    double maxd = 0, maxw = 0;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]);
        if (isnan(d) || d > maxd) worst = i;
        maxd = isnan(d) ? INFINITY : fmax(maxd, d);
        maxw = fmax(maxw, fabs(want[i]));
    }
    char why[160], ts[32];
    snprintf(why, sizeof why, "worst [%zu] got %.12g want %.12g", worst, got[worst], want[worst]);
    snprintf(ts, sizeof ts, "%.3g", tol);
    double err = maxd / fmax(maxw, TINY);
    verdict(err <= tol, op, err, ts, why);
}

/* ---- zero, copy, add, copy_rows: exact ------------------------------------------------------- */

static void basic_case(mem_dtype dt, size_t n) {
    size_t b = nb(dt, n);
    set_case(mem_dtype_name(dt), "n=%zu", n);
    typed_ctx hc = cpu_ctx(dt, 4096, 4096), dc = dev_ctx(dt, 4096, 4096);
    void *z = rand_t(dt, n, 1), *dz = dev_of(z, b);
    backend_cpu.zero(&hc, z, n);
    where("zero");
    cu->zero(&dc, dz, n);
    cmp_exact("zero", dt, host_of(dz, b), z, n);

    void *src = rand_t(dt, n, 1), *dst = rand_t(dt, n, 1), *dsrc = dev_of(src, b);
    void *ddst = dev_of(dst, b), *sum = hdup(dst, b), *dsum = dev_of(sum, b);
    backend_cpu.copy(&hc, dst, src, n);
    where("copy");
    cu->copy(&dc, ddst, dsrc, n);
    cmp_exact("copy", dt, host_of(ddst, b), dst, n);
    backend_cpu.add(&hc, sum, src, n);
    where("add");
    cu->add(&dc, dsum, dsrc, n);
    cmp_exact("add", dt, host_of(dsum, b), sum, n);
    release();
}

static void copy_rows_case(mem_dtype dt, size_t rows, size_t width, size_t ldd, size_t lds) {
    set_case(mem_dtype_name(dt), "rows=%zu width=%zu ldd=%zu lds=%zu", rows, width, ldd, lds);
    typed_ctx hc = cpu_ctx(dt, 4096, 4096), dc = dev_ctx(dt, 4096, 4096);
    size_t bd = nb(dt, rows * ldd), bs = nb(dt, rows * lds);
    void *dst = rand_t(dt, rows * ldd, 1), *src = rand_t(dt, rows * lds, 1);
    void *ddst = dev_of(dst, bd), *dsrc = dev_of(src, bs);
    backend_cpu.copy_rows(&hc, dst, ldd, src, lds, rows, width);
    where("copy_rows");
    cu->copy_rows(&dc, ddst, ldd, dsrc, lds, rows, width);
    cmp_exact("copy_rows", dt, host_of(ddst, bd), dst, rows * ldd);
    release();
}

static void test_basic(mem_dtype dt) {
    static const size_t ns[] = {1, 7, 100003};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        basic_case(dt, ns[i]);
    copy_rows_case(dt, 1, 48, 48, 48);
    copy_rows_case(dt, 129, 100, 177, 100);
    copy_rows_case(dt, 7, 64, 64, 200);
    copy_rows_case(dt, 1000, 33, 40, 35);
}

/* ---- matrix products ---------------------------------------------------------------------------
 */

typedef struct {
    int N, IC, OC, acc, pad; /* pad: added to the row strides (0: packed) */
} mm_case;

static void matmul_forward_case(mem_dtype dt, const mm_case *c) {
    int ldi = c->IC + c->pad, ldw = c->IC + 2 * c->pad, ldo = c->OC + 3 * c->pad;
    size_t ni = (size_t)c->N * ldi, nw = (size_t)c->OC * ldw, no = (size_t)c->N * ldo;
    set_case(mem_dtype_name(dt), "N=%d IC=%d OC=%d acc=%d ldi=%d ldw=%d ldo=%d", c->N, c->IC, c->OC,
             c->acc, ldi, ldw, ldo);
    int maxw = c->IC > c->OC ? c->IC : c->OC;
    typed_ctx hc = cpu_ctx(dt, (size_t)maxw, (size_t)c->IC),
              dc = dev_ctx(dt, (size_t)maxw, (size_t)c->IC);
    void *inp = rand_t(dt, ni, 1), *w = rand_t(dt, nw, 1 / sqrtf((float)c->IC));
    void *out = c->acc ? rand_t(dt, no, 1) : nans(nb(dt, no));
    void *dinp = dev_of(inp, nb(dt, ni)), *dw = dev_of(w, nb(dt, nw)),
         *dout = dev_of(out, nb(dt, no));
    backend_cpu.matmul_forward(&hc, out, ldo, inp, ldi, w, ldw, c->N, c->IC, c->OC, c->acc);
    where("matmul_forward");
    cu->matmul_forward(&dc, dout, ldo, dinp, ldi, dw, ldw, c->N, c->IC, c->OC, c->acc);
    cmp_tol("matmul_forward", dt, host_of(dout, nb(dt, no)), out, (size_t)c->N, (size_t)c->OC,
            (size_t)ldo, tol_prod(dt));
    release();
}

/* matmul_backward: dinp overwritten (0), accumulated (1) or NULL (2); dw accumulated or NULL. */
typedef struct {
    int N, IC, OC, dinp_mode, with_dw, pad;
} mmb_case;

typedef struct {
    int ldd, ldi, ldw, lddi, lddw;
    void *dinp;
    float *dw;
    const void *dout, *inp, *w;
} mmb_io;

static mmb_io mmb_strides(const mmb_case *c) {
    mmb_io io = {.ldd = c->OC + c->pad,
                 .ldi = c->IC + 2 * c->pad,
                 .ldw = c->IC + c->pad,
                 .lddi = c->IC + 3 * c->pad,
                 .lddw = c->IC + 2 * c->pad};
    return io;
}

static void mmb_call(const backend_ops *be, const typed_ctx *t, const mmb_case *c,
                     const mmb_io *io) {
    be->matmul_backward(t, c->dinp_mode == 2 ? NULL : io->dinp, io->lddi, c->dinp_mode == 1,
                        c->with_dw ? io->dw : NULL, io->lddw, io->dout, io->ldd, io->inp, io->ldi,
                        io->w, io->ldw, c->N, c->IC, c->OC);
}

static void matmul_backward_case(mem_dtype dt, const mmb_case *c) {
    static const char *const modes[] = {"overwrite", "accumulate", "NULL"};
    mmb_io h = mmb_strides(c), d = h;
    size_t N = (size_t)c->N, nd = N * h.ldd, ni = N * h.ldi, nw = (size_t)c->OC * h.ldw,
           ndi = N * h.lddi, ndw = (size_t)c->OC * h.lddw;
    set_case(mem_dtype_name(dt), "N=%d IC=%d OC=%d dinp=%s dw=%s ld+%d", c->N, c->IC, c->OC,
             modes[c->dinp_mode], c->with_dw ? "accumulate" : "NULL", c->pad);
    int maxw = c->IC > c->OC ? c->IC : c->OC;
    typed_ctx hc = cpu_ctx(dt, (size_t)maxw, (size_t)c->IC),
              dc = dev_ctx(dt, (size_t)maxw, (size_t)c->IC);
    h.dout = rand_t(dt, nd, 1), h.inp = rand_t(dt, ni, 1);
    h.w = rand_t(dt, nw, 1 / sqrtf((float)c->OC));
    h.dinp = c->dinp_mode == 1 ? rand_t(dt, ndi, 1) : nans(nb(dt, ndi));
    h.dw = rand_f(ndw, 1);
    void *dinp0 = hdup(h.dinp, nb(dt, ndi)), *dw0 = hdup(h.dw, ndw * 4);
    d.dout = dev_of(h.dout, nb(dt, nd)), d.inp = dev_of(h.inp, nb(dt, ni));
    d.w = dev_of(h.w, nb(dt, nw)), d.dinp = dev_of(dinp0, nb(dt, ndi)), d.dw = dev_of(dw0, ndw * 4);
    mmb_call(&backend_cpu, &hc, c, &h);
    where("matmul_backward");
    mmb_call(cu, &dc, c, &d);
    void *gi = host_of(d.dinp, nb(dt, ndi)), *gw = host_of(d.dw, ndw * 4);
    if (c->dinp_mode != 2)
        cmp_tol("matmul_backward.dinp", dt, gi, h.dinp, N, (size_t)c->IC, (size_t)h.lddi,
                tol_prod(dt));
    if (c->with_dw)
        cmp_tol("matmul_backward.dw", F32, gw, h.dw, (size_t)c->OC, (size_t)c->IC, (size_t)h.lddw,
                TOL_RED);
    // again from the same state: the same bits
    cu->to_dev(d.dinp, dinp0, nb(dt, ndi));
    cu->to_dev(d.dw, dw0, ndw * 4);
    where("matmul_backward (repeat)");
    mmb_call(cu, &dc, c, &d);
    int si = !memcmp(host_of(d.dinp, nb(dt, ndi)), gi, nb(dt, ndi));
    int sw = !memcmp(host_of(d.dw, ndw * 4), gw, ndw * 4);
    verdict(si && sw, "matmul_backward.repeat", (double)(!si + !sw), "identical bits",
            !si && !sw ? "dinp and dw differ"
            : !si      ? "dinp differs"
                       : "dw differs");
    release();
}

static void test_matmul(mem_dtype dt) {
    static const mm_case fwd[] = {
        {1, 48, 100, 0, 0},      {7, 100, 176, 1, 0},   {129, 512, 1408, 0, 0},
        {1000, 1408, 512, 1, 0}, {129, 100, 260, 0, 3}, {257, 176, 100, 1, 5},
    };
    static const mmb_case bwd[] = {
        {1, 48, 100, 0, 1, 0},      {7, 100, 176, 1, 0, 0},   {129, 512, 1408, 2, 1, 0},
        {1000, 1408, 512, 0, 1, 0}, {257, 176, 100, 1, 1, 5}, {129, 100, 48, 0, 1, 3},
    };
    for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++)
        matmul_forward_case(dt, &fwd[i]);
    for (size_t i = 0; i < sizeof bwd / sizeof bwd[0]; i++)
        matmul_backward_case(dt, &bwd[i]);
}

/* The LM head: fp32 activations and gradients, w stored; forward overwrites, backward accumulates
 * into dinp and dw. */
static void matmul_f32_case(mem_dtype dt, int N, int IC, int OC) {
    size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    set_case(mem_dtype_name(dt), "N=%d IC=%d OC=%d", N, IC, OC);
    int maxw = IC > OC ? IC : OC;
    typed_ctx hc = cpu_ctx(dt, (size_t)maxw, (size_t)IC),
              dc = dev_ctx(dt, (size_t)maxw, (size_t)IC);
    float *inp = rand_f(ni, 1), *out = nans(no * 4), *dout = rand_f(no, 1);
    float *dinp = rand_f(ni, 1), *dw = rand_f(nw, 1);
    void *w = rand_t(dt, nw, 1 / sqrtf((float)IC));
    float *d_inp = dev_of(inp, ni * 4), *d_out = dev_of(out, no * 4),
          *d_dout = dev_of(dout, no * 4);
    float *d_dinp = dev_of(dinp, ni * 4), *d_dw = dev_of(dw, nw * 4);
    void *d_w = dev_of(w, nb(dt, nw));
    backend_cpu.matmul_forward_f32(&hc, out, inp, w, N, IC, OC);
    where("matmul_forward_f32");
    cu->matmul_forward_f32(&dc, d_out, d_inp, d_w, N, IC, OC);
    double tol = dt == MEM_DTYPE_BF16 ? TOL_TF32 : TOL_RED;
    cmp_tol("matmul_forward_f32", F32, host_of(d_out, no * 4), out, 1, no, no, tol);
    backend_cpu.matmul_backward_f32(&hc, dinp, dw, dout, inp, w, N, IC, OC);
    where("matmul_backward_f32");
    cu->matmul_backward_f32(&dc, d_dinp, d_dw, d_dout, d_inp, d_w, N, IC, OC);
    cmp_tol("matmul_backward_f32.dinp", F32, host_of(d_dinp, ni * 4), dinp, (size_t)N, (size_t)IC,
            (size_t)IC, tol);
    cmp_tol("matmul_backward_f32.dw", F32, host_of(d_dw, nw * 4), dw, (size_t)OC, (size_t)IC,
            (size_t)IC, tol);
    release();
}

static void test_matmul_f32(mem_dtype dt) {
    matmul_f32_case(dt, 1, 48, 260);
    matmul_f32_case(dt, 7, 512, 4099);
    matmul_f32_case(dt, 129, 100, 4099);
    matmul_f32_case(dt, 1000, 176, 260);
}

/* ---- embedding ---------------------------------------------------------------------------------
 */

/* N tokens among `distinct` ids of [0, V), the first V - 1 (the table's last row). */
static int32_t *tokens_of(int N, int V, int distinct) {
    int32_t *ids = halloc((size_t)distinct * 4), *tok = halloc((size_t)N * 4);
    for (int i = 0; i < distinct; i++)
        ids[i] = rng_int(V);
    for (int i = 0; i < N; i++)
        tok[i] = ids[rng_int(distinct)];
    tok[0] = V - 1;
    return tok;
}

static void embedding_case(mem_dtype dt, int N, int C, int V, int distinct) {
    size_t nt = (size_t)V * C, no = (size_t)N * C;
    set_case(mem_dtype_name(dt), "N=%d C=%d V=%d tokens=%d distinct", N, C, V, distinct);
    typed_ctx hc = cpu_ctx(dt, (size_t)C, (size_t)C), dc = dev_ctx(dt, (size_t)C, (size_t)C);
    int32_t *tok = tokens_of(N, V, distinct), *d_tok = dev_of(tok, (size_t)N * 4);
    void *wte = rand_t(dt, nt, 1), *out = halloc(nb(dt, no)), *dout = rand_t(dt, no, 1);
    float *dwte = rand_f(nt, 1);
    void *d_wte = dev_of(wte, nb(dt, nt)), *d_out = dev_of(nans(nb(dt, no)), nb(dt, no));
    void *d_dout = dev_of(dout, nb(dt, no));
    float *d_dwte = dev_of(dwte, nt * 4);
    backend_cpu.embedding_forward(&hc, out, tok, wte, N, C);
    where("embedding_forward");
    cu->embedding_forward(&dc, d_out, d_tok, d_wte, N, C);
    cmp_exact("embedding_forward", dt, host_of(d_out, nb(dt, no)), out, no);
    backend_cpu.embedding_backward(&hc, dwte, dout, tok, N, C);
    where("embedding_backward");
    cu->embedding_backward(&dc, d_dwte, d_dout, d_tok, N, C);
    cmp_tol("embedding_backward.dwte", F32, host_of(d_dwte, nt * 4), dwte, (size_t)V, (size_t)C,
            (size_t)C, TOL_RED);
    release();
}

static void test_embedding(mem_dtype dt) {
    embedding_case(dt, 1, 48, 260, 1);
    embedding_case(dt, 7, 100, 4099, 3);
    embedding_case(dt, 129, 512, 260, 37);
    embedding_case(dt, 1000, 176, 4099, 17);
}

/* ---- RMSNorm -----------------------------------------------------------------------------------
 */

typedef struct {
    mem_dtype dt;
    int N, C;
    typed_ctx hc, dc;
    void *inp, *w, *d_inp, *d_w;
    float *rstd, *d_rstd; /* the CPU's forward statistics, for the backward */
} norm_io;

static void norm_forward(norm_io *io, int out_f32) {
    mem_dtype odt = out_f32 ? F32 : io->dt;
    size_t n = (size_t)io->N * io->C, ob = nb(odt, n), rb = (size_t)io->N * 4;
    void *out = halloc(ob), *d_out = dev_of(nans(ob), ob);
    float *rstd = halloc(rb), *d_rstd = dev_of(nans(rb), rb);
    backend_cpu.rmsnorm_forward(&io->hc, out, out_f32, rstd, io->inp, io->w, io->N, io->C, 1e-5f);
    where("rmsnorm_forward");
    cu->rmsnorm_forward(&io->dc, d_out, out_f32, d_rstd, io->d_inp, io->d_w, io->N, io->C, 1e-5f);
    cmp_tol(out_f32 ? "rmsnorm_forward.out(out_f32=1)" : "rmsnorm_forward.out(out_f32=0)", odt,
            host_of(d_out, ob), out, (size_t)io->N, (size_t)io->C, (size_t)io->C, tol_prod(odt));
    cmp_tol(out_f32 ? "rmsnorm_forward.rstd(out_f32=1)" : "rmsnorm_forward.rstd(out_f32=0)", F32,
            host_of(d_rstd, rb), rstd, 1, (size_t)io->N, (size_t)io->N, TOL_RED);
    if (!out_f32) io->rstd = rstd, io->d_rstd = dev_of(rstd, rb);
}

static void norm_backward(norm_io *io, int dout_f32, int with_dw) {
    mem_dtype gdt = dout_f32 ? F32 : io->dt;
    size_t N = (size_t)io->N, C = (size_t)io->C, n = N * C, ib = nb(io->dt, n);
    void *dout = rand_t(gdt, n, 1), *dinp = rand_t(io->dt, n, 1);
    float *dw = rand_f(C, 1);
    void *d_dout = dev_of(dout, nb(gdt, n)), *d_dinp = dev_of(dinp, ib);
    float *d_dw = dev_of(dw, C * 4);
    backend_cpu.rmsnorm_backward(&io->hc, dinp, with_dw ? dw : NULL, dout, dout_f32, io->inp, io->w,
                                 io->rstd, io->N, io->C);
    where("rmsnorm_backward");
    cu->rmsnorm_backward(&io->dc, d_dinp, with_dw ? d_dw : NULL, d_dout, dout_f32, io->d_inp,
                         io->d_w, io->d_rstd, io->N, io->C);
    char op[80];
    snprintf(op, sizeof op, "rmsnorm_backward.dinp(dout_f32=%d dw=%s)", dout_f32,
             with_dw ? "fp32" : "NULL");
    cmp_tol(op, io->dt, host_of(d_dinp, ib), dinp, N, C, C, tol_prod(io->dt));
    if (!with_dw) return;
    snprintf(op, sizeof op, "rmsnorm_backward.dw(dout_f32=%d)", dout_f32);
    cmp_tol(op, F32, host_of(d_dw, C * 4), dw, 1, C, C, TOL_RED);
}

static void rmsnorm_case(mem_dtype dt, int N, int C) {
    set_case(mem_dtype_name(dt), "N=%d C=%d", N, C);
    norm_io io = {.dt = dt, .N = N, .C = C};
    io.hc = cpu_ctx(dt, (size_t)C, (size_t)C), io.dc = dev_ctx(dt, (size_t)C, (size_t)C);
    float *x = rand_f((size_t)N * C, 1), *w = rand_f((size_t)C, 0.1f);
    for (int i = 0; i < N; i++) /* rows of different scales: rstd varies */
        for (int j = 0; j < C; j++)
            x[(size_t)i * C + j] *= 0.25f + (float)(i % 7);
    for (int j = 0; j < C; j++)
        w[j] += 1.0f;
    io.inp = as_t(dt, x, (size_t)N * C), io.w = as_t(dt, w, (size_t)C);
    io.d_inp = dev_of(io.inp, nb(dt, (size_t)N * C)), io.d_w = dev_of(io.w, nb(dt, (size_t)C));
    norm_forward(&io, 1);
    norm_forward(&io, 0);
    for (int k = 0; k < 4; k++)
        norm_backward(&io, k & 1, k >> 1);
    release();
}

static void test_rmsnorm(mem_dtype dt) {
    rmsnorm_case(dt, 1, 48);
    rmsnorm_case(dt, 7, 100);
    rmsnorm_case(dt, 129, 512);
    rmsnorm_case(dt, 1000, 1408);
}

/* ---- RoPE and SwiGLU ---------------------------------------------------------------------------
 */

static void rope_case(mem_dtype dt, int N, int nh, int HS, long pos0) {
    size_t n = (size_t)N * nh * HS, half = (size_t)HS / 2, tb = (size_t)N * half * 4;
    set_case(mem_dtype_name(dt), "N=%d nh=%d HS=%d pos0=%ld", N, nh, HS, pos0);
    typed_ctx hc = cpu_ctx(dt, n / (size_t)N, 1), dc = dev_ctx(dt, n / (size_t)N, 1);
    float inv[128], *cs = halloc(tb), *sn = halloc(tb);
    rope_inv_freq(inv, HS, 500000.0f);
    rope_tables(cs, sn, inv, pos0, N, HS);
    float *d_cs = dev_of(cs, tb), *d_sn = dev_of(sn, tb);
    for (int back = 0; back < 2; back++) {
        void *x = rand_t(dt, n, 1), *d_x = dev_of(x, nb(dt, n));
        const char *op = back ? "rope_backward" : "rope_forward";
        (back ? backend_cpu.rope_backward : backend_cpu.rope_forward)(&hc, x, cs, sn, N, nh, HS);
        where(op);
        (back ? cu->rope_backward : cu->rope_forward)(&dc, d_x, d_cs, d_sn, N, nh, HS);
        cmp_elem(op, dt, host_of(d_x, nb(dt, n)), x, n);
    }
    release();
}

static void test_rope(mem_dtype dt) {
    rope_case(dt, 1, 4, 16, 0);
    rope_case(dt, 7, 3, 24, 5);
    rope_case(dt, 129, 8, 64, 1000);
    rope_case(dt, 1000, 3, 128, 100000);
    rope_case(dt, 257, 32, 32, 7);
}

/* swiglu_backward in place (dgate = gate, dup = up: the model's use) or into separate outputs. */
static void swiglu_backward_case(mem_dtype dt, size_t n, const typed_ctx *hc, const typed_ctx *dc,
                                 int in_place) {
    size_t b = nb(dt, n);
    void *g = rand_t(dt, n, 2), *u = rand_t(dt, n, 1), *dout = rand_t(dt, n, 1);
    void *d_g = dev_of(g, b), *d_u = dev_of(u, b), *d_dout = dev_of(dout, b);
    void *dg = in_place ? g : halloc(b), *du = in_place ? u : halloc(b);
    void *d_dg = in_place ? d_g : dev_of(nans(b), b), *d_du = in_place ? d_u : dev_of(nans(b), b);
    backend_cpu.swiglu_backward(hc, dg, du, dout, g, u, n);
    where("swiglu_backward");
    cu->swiglu_backward(dc, d_dg, d_du, d_dout, d_g, d_u, n);
    cmp_elem(in_place ? "swiglu_backward.dgate(in place)" : "swiglu_backward.dgate", dt,
             host_of(d_dg, b), dg, n);
    cmp_elem(in_place ? "swiglu_backward.dup(in place)" : "swiglu_backward.dup", dt,
             host_of(d_du, b), du, n);
}

static void swiglu_case(mem_dtype dt, size_t n) {
    size_t b = nb(dt, n);
    set_case(mem_dtype_name(dt), "n=%zu", n);
    typed_ctx hc = cpu_ctx(dt, 4096, 4096), dc = dev_ctx(dt, 4096, 4096);
    void *g = rand_t(dt, n, 2), *u = rand_t(dt, n, 1), *out = halloc(b);
    void *d_g = dev_of(g, b), *d_u = dev_of(u, b), *d_out = dev_of(nans(b), b);
    backend_cpu.swiglu_forward(&hc, out, g, u, n);
    where("swiglu_forward");
    cu->swiglu_forward(&dc, d_out, d_g, d_u, n);
    cmp_elem("swiglu_forward", dt, host_of(d_out, b), out, n);
    swiglu_backward_case(dt, n, &hc, &dc, 1);
    swiglu_backward_case(dt, n, &hc, &dc, 0);
    release();
}

static void test_swiglu(mem_dtype dt) {
    static const size_t ns[] = {1, 7 * 176, 129 * 1408 + 1, 1000 * 1408};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        swiglu_case(dt, ns[i]);
}

/* ---- attention ---------------------------------------------------------------------------------
 */

typedef struct {
    mem_dtype dt;
    int T, NH, NKV, HS;
    typed_ctx hc, dc;
    float *ws, *dws;       /* the CPU's attention workspace; the device's (NULL) */
    void *q, *k, *v, *out; /* host: inputs and the CPU's forward */
    float *lse;
    int32_t *ds; /* doc_start or NULL */
    void *d_q, *d_k, *d_v;
    int32_t *d_ds;
} att_io;

/* doc_start of contiguous documents of random lengths up to T/3 (the second one 1 long). */
static int32_t *make_docs(int T, int *ndocs) {
    int32_t *d = halloc((size_t)T * 4);
    int i = 0, n = 0, most = T / 3 > 1 ? T / 3 : 1;
    while (i < T) {
        int len = n == 1 ? 1 : 1 + rng_int(most);
        for (int j = i; j < T && j < i + len; j++)
            d[j] = i;
        i += len, n++;
    }
    *ndocs = n;
    return d;
}

static void att_forward(att_io *a) {
    size_t nq = (size_t)a->T * a->NH * a->HS, nl = (size_t)a->NH * a->T, bq = nb(a->dt, nq);
    a->out = halloc(bq), a->lse = halloc(nl * 4);
    void *d_out = dev_of(nans(bq), bq);
    float *d_lse = dev_of(nans(nl * 4), nl * 4);
    backend_cpu.attention_forward(&a->hc, a->out, a->lse, a->q, a->k, a->v, a->ds, a->T, a->NH,
                                  a->NKV, a->HS, a->ws);
    where("attention_forward");
    cu->attention_forward(&a->dc, d_out, d_lse, a->d_q, a->d_k, a->d_v, a->d_ds, a->T, a->NH,
                          a->NKV, a->HS, a->dws);
    cmp_tol("attention_forward.out", a->dt, host_of(d_out, bq), a->out, 1, nq, nq, tol_att(a->dt));
    cmp_tol("attention_forward.lse", F32, host_of(d_lse, nl * 4), a->lse, (size_t)a->NH,
            (size_t)a->T, (size_t)a->T, TOL_ATT);
}

/* The backward on the CPU forward's out and lse (on both sides), outputs NaN on the device; then
 * again into the same buffers: the same bits. */
static void att_backward(att_io *a) {
    size_t nq = (size_t)a->T * a->NH * a->HS, nk = (size_t)a->T * a->NKV * a->HS;
    size_t bq = nb(a->dt, nq), bk = nb(a->dt, nk), nl = (size_t)a->NH * a->T;
    void *dout = rand_t(a->dt, nq, 1), *dq = halloc(bq), *dk = halloc(bk), *dv = halloc(bk);
    void *d_dout = dev_of(dout, bq), *d_out = dev_of(a->out, bq);
    float *d_lse = dev_of(a->lse, nl * 4);
    void *d_dq = dev_of(nans(bq), bq), *d_dk = dev_of(nans(bk), bk), *d_dv = dev_of(nans(bk), bk);
    backend_cpu.attention_backward(&a->hc, dq, dk, dv, dout, a->q, a->k, a->v, a->out, a->lse,
                                   a->ds, a->T, a->NH, a->NKV, a->HS, a->ws);
    where("attention_backward");
    cu->attention_backward(&a->dc, d_dq, d_dk, d_dv, d_dout, a->d_q, a->d_k, a->d_v, d_out, d_lse,
                           a->d_ds, a->T, a->NH, a->NKV, a->HS, a->dws);
    void *g0 = host_of(d_dq, bq), *g1 = host_of(d_dk, bk), *g2 = host_of(d_dv, bk);
    /* dq and dk are sums of dS = P (dP - D) terms, where dP - D cancels: where a query sees one
     * key (T = 1, a document of one token) they are 0 in exact arithmetic and both sides hold
     * rounding noise of the size of dv's terms. Their error is measured against dv's scale too
     * (dv = P^T dO: the gradients' own scale), not against the noise. */
    for (size_t i = 0; i < nk; i++)
        cmp_floor = fmax(cmp_floor, fabs(dtype_load(a->dt, dv, i)));
    cmp_tol("attention_backward.dq", a->dt, g0, dq, 1, nq, nq, tol_att(a->dt));
    cmp_tol("attention_backward.dk", a->dt, g1, dk, 1, nk, nk, tol_att(a->dt));
    cmp_floor = 0;
    cmp_tol("attention_backward.dv", a->dt, g2, dv, 1, nk, nk, tol_att(a->dt));
    where("attention_backward (repeat)");
    cu->attention_backward(&a->dc, d_dq, d_dk, d_dv, d_dout, a->d_q, a->d_k, a->d_v, d_out, d_lse,
                           a->d_ds, a->T, a->NH, a->NKV, a->HS, a->dws);
    int s0 = !memcmp(host_of(d_dq, bq), g0, bq), s1 = !memcmp(host_of(d_dk, bk), g1, bk);
    int s2 = !memcmp(host_of(d_dv, bk), g2, bk);
    char why[64];
    snprintf(why, sizeof why, "differ:%s%s%s", s0 ? "" : " dq", s1 ? "" : " dk", s2 ? "" : " dv");
    verdict(s0 && s1 && s2, "attention_backward.repeat", (double)(!s0 + !s1 + !s2),
            "identical bits", why);
}

static void attention_case(mem_dtype dt, int T, int NH, int NKV, int HS, int docs) {
    att_io a = {.dt = dt, .T = T, .NH = NH, .NKV = NKV, .HS = HS};
    int nd = 1;
    a.ds = docs ? make_docs(T, &nd) : NULL;
    char dstr[16] = "none";
    if (docs) snprintf(dstr, sizeof dstr, "%d", nd);
    set_case(mem_dtype_name(dt), "T=%d NH=%d NKV=%d HS=%d docs=%s", T, NH, NKV, HS, dstr);
    size_t nq = (size_t)T * NH * HS, nk = (size_t)T * NKV * HS, w = (size_t)NH * HS;
    a.hc = cpu_ctx(dt, w, w), a.dc = dev_ctx(dt, w, w);
    a.ws = halloc(backend_cpu.attention_workspace_floats(dt, T, NH, NKV, HS) * sizeof(float));
    size_t dwn = cu->attention_workspace_floats(dt, T, NH, NKV, HS);
    a.dws = dwn ? dalloc(dwn * sizeof(float)) : NULL;
    a.q = rand_t(dt, nq, 2), a.k = rand_t(dt, nk, 1), a.v = rand_t(dt, nk, 1);
    a.d_q = dev_of(a.q, nb(dt, nq)), a.d_k = dev_of(a.k, nb(dt, nk));
    a.d_v = dev_of(a.v, nb(dt, nk));
    a.d_ds = docs ? dev_of(a.ds, (size_t)T * 4) : NULL;
    att_forward(&a);
    att_backward(&a);
    release();
}

static void test_attention(mem_dtype dt) {
    static const int shapes[][4] = {
        /* T, NH, NKV, HS */
        {1, 4, 2, 64},    {7, 3, 3, 24},    {100, 8, 1, 16},  {257, 4, 2, 128},
        {1000, 3, 3, 32}, {2049, 4, 2, 64}, {33, 32, 8, 128}, {512, 32, 8, 128},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int docs = 0; docs < 2; docs++)
            attention_case(dt, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], docs);
}

/* ---- conversions: exact -------------------------------------------------------------------------
 */

/* The input of convert's first differing element, if the last check failed. */
static void convert_detail(const uint32_t *in, const uint16_t *got, const uint16_t *want,
                           size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            float x;
            memcpy(&x, &in[i], sizeof x);
            printf("     first differing input [%zu] 0x%08x: got 0x%04x, cpu 0x%04x, bf16_round "
                   "0x%04x\n",
                   i, (unsigned)in[i], got[i], want[i], bf16_round(x));
            return;
        }
}

static void convert_f32_bf16(void) {
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu,
        0x7f7f8000u, 0x7f7f7fffu, 0x00000001u, 0x807fffffu, 0x00800000u, 0x80800000u, 0x7f800000u,
        0xff800000u, 0x7fc00000u, 0x7f800001u, 0xff812345u, 0xffffffffu, 0x3f7fffffu,
    };
    size_t ns = sizeof special / sizeof special[0], n = ((size_t)1 << 20) + ns;
    set_case("-", "f32->bf16 n=%zu (random bits: NaN, Inf, denormals; ties; the largest)", n);
    uint32_t *in = halloc(n * 4);
    for (size_t i = 0; i < n - ns; i++)
        in[i] = (uint32_t)(rng_u64() >> 32);
    memcpy(in + n - ns, special, sizeof special);
    uint16_t *want = halloc(n * 2), *d_out = dalloc(n * 2);
    void *d_in = dev_of(in, n * 4);
    backend_cpu.convert(BF16, want, F32, in, n);
    where("convert f32->bf16");
    cu->convert(BF16, d_out, F32, d_in, n);
    uint16_t *got = host_of(d_out, n * 2);
    int before = n_failed;
    cmp_exact("convert", BF16, got, want, n);
    if (n_failed > before) convert_detail(in, got, want, n);
    release();
}

static void convert_bf16_f32(void) {
    size_t n = 65536;
    set_case("-", "bf16->f32 n=%zu (every bf16)", n);
    uint16_t *in = halloc(n * 2);
    for (size_t i = 0; i < n; i++)
        in[i] = (uint16_t)i;
    float *want = halloc(n * 4), *d_out = dalloc(n * 4);
    void *d_in = dev_of(in, n * 2);
    backend_cpu.convert(F32, want, BF16, in, n);
    where("convert bf16->f32");
    cu->convert(F32, d_out, BF16, d_in, n);
    cmp_exact("convert", F32, host_of(d_out, n * 4), want, n);
    release();
}

static void convert_same(mem_dtype dt) {
    size_t n = 1001, b = nb(dt, n);
    set_case("-", "%s->%s n=%zu (a copy)", mem_dtype_name(dt), mem_dtype_name(dt), n);
    void *in = rand_t(dt, n, 1), *d_in = dev_of(in, b), *d_out = dev_of(nans(b), b);
    where("convert (same type)");
    cu->convert(dt, d_out, dt, d_in, n);
    cmp_exact("convert", dt, host_of(d_out, b), in, n);
    release();
}

static void test_convert(void) {
    convert_f32_bf16();
    convert_bf16_f32();
    convert_same(F32);
    convert_same(BF16);
}

/* ---- loss tiles ---------------------------------------------------------------------------------
 */

/* Targets in [0, V) (the first V - 1), every fifth row from the fourth ignored (-1). */
static int32_t *targets_of(int N, int V, int *valid) {
    int32_t *t = halloc((size_t)N * 4);
    *valid = 0;
    for (int i = 0; i < N; i++) {
        t[i] = i == 0 ? V - 1 : i % 5 == 3 ? -1 : rng_int(V);
        *valid += t[i] >= 0;
    }
    return t;
}

static void ce_fused_case(int N, int V) {
    size_t n = (size_t)N * V;
    set_case("f32", "N=%d V=%d", N, V);
    int valid;
    int32_t *tg = targets_of(N, V, &valid), *d_tg = dev_of(tg, (size_t)N * 4);
    float *lg = rand_f(n, 3), *d_lg = dev_of(lg, n * 4), scale = 1.0f / (float)valid;
    double want = backend_cpu.cross_entropy_fused(lg, tg, N, V, scale);
    where("cross_entropy_fused");
    double got = cu->cross_entropy_fused(d_lg, d_tg, N, V, scale);
    cmp_scalar("cross_entropy_fused.loss", got, want, TOL_LOSS);
    cmp_tol("cross_entropy_fused.dlogits", F32, host_of(d_lg, n * 4), lg, (size_t)N, (size_t)V,
            (size_t)V, TOL_LOSS);
    release();
}

/* Row min(2, N-1) holds a planted tie (100 at columns 3 and V-2): pred is the first, 3. */
static void ce_rows_case(int N, int V) {
    size_t n = (size_t)N * V, r = (size_t)(N > 2 ? 2 : N - 1);
    set_case("f32", "N=%d V=%d tie in row %zu", N, V, r);
    int valid;
    int32_t *tg = targets_of(N, V, &valid), *d_tg = dev_of(tg, (size_t)N * 4);
    float *lg = rand_f(n, 3);
    lg[r * V + 3] = lg[r * V + V - 2] = 100.0f;
    float *d_lg = dev_of(lg, n * 4);
    double *lw = halloc((size_t)N * 8), *lg1 = halloc((size_t)N * 8), *lg2 = halloc((size_t)N * 8);
    int32_t *pw = halloc((size_t)N * 4), *pg1 = halloc((size_t)N * 4), *pg2 = halloc((size_t)N * 4);
    backend_cpu.cross_entropy_rows(lg, tg, N, V, lw, pw);
    where("cross_entropy_rows");
    cu->cross_entropy_rows(d_lg, d_tg, N, V, lg1, pg1);
    cmp_doubles("cross_entropy_rows.loss", lg1, lw, (size_t)N, TOL_LOSS);
    cmp_index("cross_entropy_rows.pred", pg1, pw, (size_t)N);
    cmp_exact("cross_entropy_rows.logits_unchanged", F32, host_of(d_lg, n * 4), lg, n);
    where("cross_entropy_rows (one output NULL)");
    cu->cross_entropy_rows(d_lg, d_tg, N, V, lg2, NULL);
    cu->cross_entropy_rows(d_lg, d_tg, N, V, NULL, pg2);
    cmp_doubles("cross_entropy_rows.loss(pred NULL)", lg2, lw, (size_t)N, TOL_LOSS);
    cmp_index("cross_entropy_rows.pred(loss NULL)", pg2, pw, (size_t)N);
    release();
}

static void test_cross_entropy(void) {
    static const int shapes[][2] = {{1, 260}, {7, 4099}, {129, 4099}, {1000, 260}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        ce_fused_case(shapes[i][0], shapes[i][1]);
        ce_rows_case(shapes[i][0], shapes[i][1]);
    }
}

/* ---- fp32 vectors: the optimizer side -----------------------------------------------------------
 */

static void zero_sum_case(size_t n) {
    set_case("f32", "n=%zu", n);
    float *x = rand_f(n, 1), *d_x = dev_of(x, n * 4);
    where("sum_squares");
    /* one order on both (backend.h, BACKEND_SUMSQ): the same double */
    cmp_scalar("sum_squares", cu->sum_squares(d_x, n), backend_cpu.sum_squares(x, n), 0.0);
    backend_cpu.zero_f32(x, n);
    where("zero_f32");
    cu->zero_f32(d_x, n);
    cmp_exact("zero_f32", F32, host_of(d_x, n * 4), x, n);
    release();
}

static void nonfinite_case(size_t n, size_t i, float a, size_t j, float b, const char *what) {
    set_case("f32", "n=%zu %s", n, what);
    float *x = rand_f(n, 1);
    if (i < n) x[i] = a;
    if (j < n) x[j] = b;
    float *d_x = dev_of(x, n * 4);
    size_t known = i < j ? i : j, want = backend_cpu.first_nonfinite(x, n);
    where("first_nonfinite");
    size_t got = cu->first_nonfinite(d_x, n);
    char why[120];
    snprintf(why, sizeof why, "got %zu, cpu %zu, planted %zu", got, want, known);
    verdict(got == want && want == known, "first_nonfinite", got == want ? 0.0 : 1.0, "exact", why);
    release();
}

static void adamw_case(size_t n, int step, int decay) {
    set_case("f32", "n=%zu step=%d decay=%d grad_scale=0.5", n, step, decay);
    backend_adamw hp = {
        .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    float *p = rand_f(n, 0.02f), *g = rand_f(n, 1), *m = rand_f(n, 0.1f), *v = rand_f(n, 0.1f);
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] * v[i] + 1e-6f;
    float *d_p = dev_of(p, n * 4), *d_g = dev_of(g, n * 4);
    float *d_m = dev_of(m, n * 4), *d_v = dev_of(v, n * 4);
    backend_cpu.adamw_update(p, g, m, v, n, &hp, step, 0.5f, decay);
    where("adamw_update");
    cu->adamw_update(d_p, d_g, d_m, d_v, n, &hp, step, 0.5f, decay);
    /* the same operations, each rounded alone on both sides: the same bits */
    cmp_exact("adamw_update.m", F32, host_of(d_m, n * 4), m, n);
    cmp_exact("adamw_update.v", F32, host_of(d_v, n * 4), v, n);
    cmp_exact("adamw_update.param", F32, host_of(d_p, n * 4), p, n);
    release();
}

/* The copy queue: a copy issued after an op sees its result, copy_wait orders a later op after
 * the copy (a zeroing issued at once would otherwise race it), and a copy back in arrives before
 * the op that waits for it reads it. */
static void copy_queue_case(size_t n) {
    set_case("f32", "n=%zu", n);
    const typed_ctx t = {.dt = F32, .be = cu};
    float *x = rand_f(n, 1), *d_src = dev_of(x, n * 4), *d_x = dalloc(n * 4), *d_y = dalloc(n * 4);
    float *pin = cu->alloc_pinned(n * 4);
    where("copy_out");
    cu->copy(&t, d_x, d_src, n);          /* an op writes d_x ... */
    cu->copy_out(pin, d_x, n * 4, 3, -1); /* ... the copy reads it after */
    cu->copy_wait(3);
    cu->zero(&t, d_x, n); /* after the copy */
    cu->sync();
    cmp_exact("copy_out after an op, before the next", F32, pin, x, n);
    where("copy_in");
    cu->copy_in(d_y, pin, n * 4, 4, -1);
    cu->copy_wait(4);
    cu->copy(&t, d_x, d_y, n); /* reads what came in */
    cmp_exact("copy_in before the op that waits", F32, host_of(d_x, n * 4), x, n);
    where("copy_mark");
    memset(pin, 0, n * 4);
    cu->copy_mark(5);                    /* d_x holds x here ... */
    cu->zero(&t, d_y, n);                /* ... an op after the mark, on another buffer ... */
    cu->copy_out(pin, d_x, n * 4, 6, 5); /* ... and a copy ordered after the mark alone */
    cu->copy_sync(6);
    cmp_exact("copy_out after a mark", F32, pin, x, n);
    cu->free_pinned(pin);
    release();
}

static void test_vectors(void) {
    static const size_t ns[] = {1, 1000, 1000003};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        zero_sum_case(ns[i]);
    const size_t n = 100003;
    nonfinite_case(n, n, 0, n, 0, "none");
    nonfinite_case(n, 77777, NAN, n, 0, "NaN at 77777");
    nonfinite_case(n, 5, INFINITY, 90000, NAN, "Inf at 5, NaN at 90000");
    nonfinite_case(n, n - 1, -INFINITY, n, 0, "-Inf at n-1");
    nonfinite_case(n, 0, NAN, n, 0, "NaN at 0");
    for (int k = 0; k < 4; k++)
        adamw_case(n, k & 1 ? 10 : 1, k >> 1);
    copy_queue_case(1 << 24); /* 64 MiB: long enough for a race to show */
}

/* ---- main ---------------------------------------------------------------------------------------
 */

/* UPIPE_TEST_BACKEND_SELF=1: the CPU backend as the "device", on host memory. */
static void *self_alloc(size_t bytes) {
    return calloc(1, bytes);
}
static void self_copy(void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
}
static void self_sync(void) {}
static const char *self_describe(void) {
    return "self-check: the CPU backend on both sides (UPIPE_TEST_BACKEND_SELF=1)";
}
static const backend_ops *self_backend(void) {
    static backend_ops self;
    self = backend_cpu;
    self.name = "self", self.alloc = self_alloc, self.free = free;
    self.to_dev = self_copy, self.to_host = self_copy, self.sync = self_sync;
    self.describe = self_describe;
    return &self;
}

/* The CPU reference on a widening path: fp32 arithmetic, one rounding per bf16 output. */
static void cpu_reference_path(void) {
    static const char *const widening[] = {"avx512", "avx2", "portable"};
    char err[256];
    for (int i = 0; i < 3; i++)
        if (kernel_path_supported(widening[i]) &&
            kernel_path_set(widening[i], err, sizeof err) == 0)
            break;
    printf("test_backend: cpu reference: %s\n", kernel_path_name());
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void) {
    char err[512] = "";
    unsetenv("UPIPE_TF32"); /* fp32 products in fp32: the tolerances are fp32's */
    const char *self = getenv("UPIPE_TEST_BACKEND_SELF");
    cu = self && self[0] == '1' ? self_backend() : backend_load("cuda", err, sizeof err);
    if (!cu) {
        printf("test_backend: skipped: %s\n", err);
        return 77;
    }
    printf("test_backend: %s\n", cu->describe());
    cpu_reference_path();
    double t0 = now();
    static const mem_dtype dts[] = {MEM_DTYPE_F32, MEM_DTYPE_BF16};
    for (int i = 0; i < 2; i++) {
        test_basic(dts[i]);
        test_matmul(dts[i]);
        test_matmul_f32(dts[i]);
        test_embedding(dts[i]);
        test_rmsnorm(dts[i]);
        test_rope(dts[i]);
        test_swiglu(dts[i]);
        test_attention(dts[i]);
    }
    test_convert();
    test_cross_entropy();
    test_vectors();
    printf("test_backend: %.1f s\n", now() - t0);
    printf("test_backend: %d checks, %d failed\n", n_checks, n_failed);
    fflush(stdout);
    return n_failed ? 1 : 0;
}
