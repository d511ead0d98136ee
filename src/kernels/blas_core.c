/* blas_core.c — which OpenBLAS core the fp32 products run on (contract: blas_check_core in
 * kernels.h; DESIGN.md §8.1).
 *
 * OpenBLAS (DYNAMIC_ARCH) fixes its kernels when the library loads, from the CPU model or from
 * OPENBLAS_CORETYPE, and both can be wrong for the host (Debian 12's 0.3.21 takes "Prescott",
 * SSE3, on Sapphire and Emerald Rapids; OPENBLAS_CORETYPE=Haswell on an AVX-512 host runs at half
 * its rate: DESIGN.md §8.1). So at start the process measures the core it got against the one
 * that matches the CPU's vector width (SkylakeX with AVX-512, Haswell with AVX2) and takes that
 * one unless it is clearly slower (below BLAS_CORE_KEEP of the current): a candidate is only
 * known by loading the library under it, so it runs in a child (this program again, with
 * UPIPE_BLAS_PROBE=1 and OPENBLAS_CORETYPE=candidate), which checks the candidate's products
 * against a float64 reference and reports its rate. Taking the candidate means re-executing the
 * program with OPENBLAS_CORETYPE set, before anything else happens (before MPI starts).
 *
 * The choice sets a run's bits, so ranks and repeated runs must make the same one: rates are
 * thread CPU time on one thread (another process on the core does not count), and the threshold
 * sits far below every ratio measured (DESIGN.md §8.1). Ranks that differed anyway are stopped
 * before the first step (front_check_kernels). A core that is already as wide as the CPU costs
 * nothing: nothing is measured. UPIPE_BLAS_CORE=NAME forces a core without measuring.
 * UPIPE_BLAS_PROBE_FAULT (tests only) makes a probe child's products wrong, so that the check is
 * seen to refuse a core. */
#include "kernels/kernels.h"

#include <cblas.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "kernels/dispatch.h"

extern char **environ;

/* The CPU-wide core is taken unless it measures below BLAS_CORE_KEEP of the current one; oneDNN's
 * sgemm only if it measures BLAS_ONEDNN_WIN faster than OpenBLAS. */
#define BLAS_CORE_KEEP 0.8
#define BLAS_ONEDNN_WIN 1.5

static const char *reason_env = "UPIPE_BLAS_CHOSEN"; /* set for the re-executed program */

const char *blas_core(void) {
    return openblas_get_corename();
}

/* The cores whose sgemm is as wide as AVX-512 / AVX2 (openblas_get_corename's names). */
static int core_in(const char *core, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(core, names[i]) == 0) return 1;
    return 0;
}
static int core_avx512(const char *core) {
    static const char *const w[] = {"skylakex", "cooperlake", "sapphirerapids"};
    return core_in(core, w, sizeof w / sizeof *w);
}
static int core_avx2(const char *core) {
    static const char *const w[] = {"haswell", "zen"};
    return core_avx512(core) || core_in(core, w, sizeof w / sizeof *w);
}

static void fill(float *x, size_t n, unsigned s) {
    for (size_t i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

/* The fastest of 5 timings. */
static double min5(const double *t) {
    double m = t[0];
    for (int i = 1; i < 5; i++)
        m = t[i] < m ? t[i] : m;
    return m;
}

/* Every orientation of a product with edges (odd sizes) against float64 sums: |c - ref| within
 * K * 2^-23 * sum |a||b| (fp32 accumulation of K terms, any order), with a factor 2 of room.
 * A kernel that drops or misplaces a term misses by about |a||b| ~ 0.3: far outside. */
static int products_correct(void) {
    enum { M = 37, N = 45, K = 67 };
    float a[M * K], b[K * N], c[M * N];
    fill(a, M * K, 1), fill(b, K * N, 2);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                        tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, a, ta ? M : K, b, tb ? K : N,
                        0.0f, c, N);
            if (getenv("UPIPE_BLAS_PROBE") && getenv("UPIPE_BLAS_PROBE_FAULT"))
                c[7] += 0.25f; /* tests: a wrong kernel in a probe child */
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double ref = 0.0, mag = 0.0;
                    for (int k = 0; k < K; k++) {
                        double x = ta ? a[k * M + i] : a[i * K + k];
                        double y = tb ? b[j * K + k] : b[k * N + j];
                        ref += x * y, mag += fabs(x * y);
                    }
                    if (!(fabs(c[i * N + j] - ref) <= 2.0 * K * 0x1p-23 * mag)) return 0;
                }
        }
    return 1;
}

/* GFLOP/s of one thread on the model's forward product shape (256 tokens x 512 -> 1408),
 * the fastest of 5 after a warm-up (what a co-running process takes away, cache and memory
 * bandwidth that thread CPU time does not exclude, only slows some repetitions); 0 if the
 * products are wrong or memory is short. */
static double probe_rate(void) {
    if (!products_correct()) return 0.0;
    enum { M = 256, K = 512, N = 1408, REPS = 5 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N * K),
          *c = malloc(sizeof(float) * M * N);
    double t[REPS], rate = 0.0;
    if (a && b && c) {
        int threads = openblas_get_num_threads();
        openblas_set_num_threads(1);
        fill(a, (size_t)M * K, 3), fill(b, (size_t)N * K, 4);
        for (int r = -1; r < REPS; r++) {
            double t0 = kernel_thread_seconds();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c,
                        N);
            if (r >= 0) t[r] = kernel_thread_seconds() - t0;
        }
        openblas_set_num_threads(threads);
        double best = min5(t);
        if (best > 0.0) rate = 2.0 * M * N * K / best / 1e9;
    }
    free(a), free(b), free(c);
    return rate;
}

/* The rate of core in a child (this program under it); 0 if it fails in any way. */
static double child_rate(const char *self, const char *core) {
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 3, sizeof *env);
    char coretype[64];
    if (!env) return 0.0;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "OPENBLAS_CORETYPE=", 18) &&
            strncmp(environ[i], "UPIPE_BLAS_CHOSEN=", 18) &&
            strncmp(environ[i], "UPIPE_BLAS_CORE=", 16))
            env[m++] = environ[i];
    snprintf(coretype, sizeof coretype, "OPENBLAS_CORETYPE=%s", core);
    env[m++] = coretype;
    env[m++] = "UPIPE_BLAS_PROBE=1";
    env[m] = NULL;
    int fd[2];
    double rate = 0.0;
    if (pipe(fd) == 0) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
        posix_spawn_file_actions_addclose(&fa, fd[0]);
        char *argv[] = {(char *)self, NULL};
        pid_t pid;
        int ok = posix_spawn(&pid, self, &fa, NULL, argv, env) == 0;
        posix_spawn_file_actions_destroy(&fa);
        close(fd[1]);
        char buf[128] = "";
        size_t got = 0;
        ssize_t r;
        while (ok && got < sizeof buf - 1 && (r = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0)
            got += (size_t)r;
        buf[got] = '\0';
        close(fd[0]);
        int status = 0;
        char name[64];
        double v;
        if (ok && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0 && sscanf(buf, "%63s %lf", name, &v) == 2 &&
            strcasecmp(name, core) == 0) /* OpenBLAS took the name (it ignores unknown ones) */
            rate = v;
    }
    free(env);
    return rate;
}

static char reason[160];

const char *blas_core_reason(void) {
    if (!reason[0]) {
        const char *r = getenv(reason_env);
        snprintf(reason, sizeof reason, "%s",
                 r && r[0]                     ? r
                 : getenv("OPENBLAS_CORETYPE") ? "OPENBLAS_CORETYPE"
                                               : "CPU");
    }
    return reason;
}

static void reexec(const char *self, char **argv, const char *core, const char *why) {
    if (setenv("OPENBLAS_CORETYPE", core, 1) != 0 || setenv(reason_env, why, 1) != 0) return;
    execv(self, argv);    /* by its own path, so the process keeps its name (ps, pgrep) */
    unsetenv(reason_env); /* exec failed: run on with the core OpenBLAS chose */
}

void blas_check_core(char **argv) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (getenv("UPIPE_BLAS_PROBE")) { /* a child of the calibration below */
        printf("%s %.3f\n", openblas_get_corename(), probe_rate());
        fflush(stdout);
        _exit(0);
    }
    if (getenv(reason_env)) return; /* re-executed: the choice is made */
    const char *core = openblas_get_corename();
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (core == NULL || n <= 0) return;
    self[n] = '\0';
    const char *force = getenv("UPIPE_BLAS_CORE");
    if (force && force[0]) {
        if (strcasecmp(force, core) != 0)
            reexec(self, argv, force, "UPIPE_BLAS_CORE");
        else
            setenv(reason_env, "UPIPE_BLAS_CORE", 1);
        return;
    }
    const kernel_cpu *c = kernel_cpu_get();
    const char *want = NULL;
    if (kernel_cpu_avx512(c) && c->avx2 && c->fma && !core_avx512(core))
        want = "SkylakeX";
    else if (c->avx2 && c->fma && !core_avx2(core))
        want = "Haswell";
    if (!want) return; /* already as wide as the CPU */
    double mine = probe_rate(), theirs = child_rate(self, want);
    if (theirs > 0.0 && theirs >= BLAS_CORE_KEEP * mine) {
        char why[160];
        snprintf(why, sizeof why, "calibrated: %.2fx %s%s", mine > 0.0 ? theirs / mine : 0.0, core,
                 getenv("OPENBLAS_CORETYPE") ? " of OPENBLAS_CORETYPE" : "");
        reexec(self, argv, want, why);
    }
#else
    (void)argv;
#endif
}

/* ---- the fp32 product's library: OpenBLAS or oneDNN's sgemm -------------------------------- */

/* oneDNN (libdnnl, in the process already for the bf16 routes) has its own JIT sgemm. Which of
 * the two runs the fp32 products is measured at the first product, the same way as the cores
 * above: thread CPU time on one thread, the model's forward shape, each library's fastest of 5,
 * oneDNN taken only if BLAS_ONEDNN_WIN (1.5x) faster, far above the ratios measured (DESIGN.md
 * §8.1). UPIPE_SGEMM=openblas|onednn forces one. */
#include <dnnl.h>
#include <omp.h>
#include <pthread.h>

static int use_onednn;
static double onednn_ratio; /* oneDNN's rate over OpenBLAS's, 0 if not measured */
static const char *sgemm_why = "measured";
static pthread_once_t sgemm_once = PTHREAD_ONCE_INIT;

static void sgemm_openblas(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                           int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void sgemm_onednn(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                         const float *B, int ldb, float beta, float *C, int ldc) {
    dnnl_status_t st =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success) /* only for arguments the callers have checked already */
        sgemm_openblas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void sgemm_choose(void) {
    const char *force = getenv("UPIPE_SGEMM");
    if (force && force[0]) {
        if (strcmp(force, "onednn") && strcmp(force, "openblas"))
            up_die("UPIPE_SGEMM: unknown library '%s': use openblas or onednn, or unset it for "
                   "the faster of the two",
                   force);
        use_onednn = strcmp(force, "onednn") == 0;
        sgemm_why = "UPIPE_SGEMM";
        return;
    }
    enum { M = 256, K = 512, N = 1408 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N * K),
          *c = malloc(sizeof(float) * M * N);
    if (a && b && c) {
        fill(a, (size_t)M * K, 5), fill(b, (size_t)N * K, 6);
        int omp = omp_get_max_threads(), blas = openblas_get_num_threads();
        omp_set_num_threads(1);
        openblas_set_num_threads(1);
        double to[5], td[5];
        for (int r = -1; r < 5; r++) { /* interleaved, after a warm-up of each */
            double t0 = kernel_thread_seconds();
            sgemm_openblas(0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
            double t1 = kernel_thread_seconds();
            sgemm_onednn(0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
            double t2 = kernel_thread_seconds();
            if (r >= 0) to[r] = t1 - t0, td[r] = t2 - t1;
        }
        omp_set_num_threads(omp);
        openblas_set_num_threads(blas);
        double mo = min5(to), md = min5(td);
        onednn_ratio = md > 0.0 ? mo / md : 0.0;
        use_onednn = onednn_ratio >= BLAS_ONEDNN_WIN;
    }
    free(a), free(b), free(c);
}

void sgemm_rm(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    pthread_once(&sgemm_once, sgemm_choose);
    (use_onednn ? sgemm_onednn : sgemm_openblas)(transa, transb, M, N, K, alpha, A, lda, B, ldb,
                                                 beta, C, ldc);
}

int sgemm_uses_onednn(void) {
    pthread_once(&sgemm_once, sgemm_choose);
    return use_onednn;
}

void sgemm_agree(int onednn) {
    pthread_once(&sgemm_once, sgemm_choose);
    use_onednn = onednn;
}

const char *sgemm_route(void) {
    static char line[96];
    pthread_once(&sgemm_once, sgemm_choose);
    if (onednn_ratio > 0.0)
        snprintf(line, sizeof line, "%s (onednn %.2fx openblas, %s)",
                 use_onednn ? "onednn" : "openblas", onednn_ratio, sgemm_why);
    else
        snprintf(line, sizeof line, "%s (%s)", use_onednn ? "onednn" : "openblas", sgemm_why);
    return line;
}
