/* test_offload.c — checkpoint offload store (src/memory/offload.h).
 *
 * Every slot is filled from a formula of (step, slot, index), so each buffer read back is checked
 * element by element without a reference copy; values are integers below 2^24, exact in fp32,
 * so the comparisons are exact. The I/O thread's completion order is recorded through the trace
 * hook. Failures that stop the process (I/O errors, a would-be deadlock) run in a forked child
 * whose exit status and stderr are checked. Stores live in a mkdtemp directory under /tmp that
 * is removed at the end. Final line: "N passed, M failed". */
#include "core/mem.h"
#include "memory/offload.h"

#include "harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[256];

static size_t round4k(size_t n) {
    return (n + 4095) & ~(size_t)4095;
}

/* Exact in fp32: a 20-bit integer that depends on step, slot and index. */
static float fill_value(int step, int slot, size_t i) {
    unsigned long long h = (unsigned long long)(step * 131 + slot + 1) * 2654435761ull + i * 40503u;
    return (float)((h >> 7) & 0xFFFFF);
}

static void fill(float *b, size_t n, int step, int slot) {
    for (size_t i = 0; i < n; i++)
        b[i] = fill_value(step, slot, i);
}

/* Number of elements that differ from the formula. */
static size_t count_bad(const float *b, size_t n, int step, int slot) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += b[i] != fill_value(step, slot, i);
    return bad;
}

/* Completion log written by the I/O thread, read by the main thread after offload_close. */
#define LOG_MAX 256
typedef struct {
    int n;
    offload_op op[LOG_MAX];
    int slot[LOG_MAX];
} op_log;

static void log_op(void *ctx, offload_op op, int slot) {
    op_log *lg = ctx;
    if (lg->n < LOG_MAX) {
        lg->op[lg->n] = op;
        lg->slot[lg->n] = slot;
    }
    lg->n++;
}

/* Store files ("upipe-offload-*") visible in g_dir. */
static int visible_store_files(void) {
    DIR *d = opendir(g_dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, "upipe-offload-", 14) == 0;
    closedir(d);
    return n;
}

/* The model's pattern over `steps` training steps; checks data, order, counters, accounting. */
static void run_pattern(size_t n, int L, int nbuf, int steps, int direct, int *modes_seen) {
    size_t slot_bytes = n * sizeof(float), rounded = round4k(slot_bytes);
    char err[512] = "";
    offload_allow_direct(direct);
    offload_store *s = offload_open(g_dir, slot_bytes, L, nbuf, err, sizeof err);
    CHECK(s != NULL, "offload_open(L=%d, nbuf=%d): %s", L, nbuf, err);
    if (!s) return;
    op_log lg = {0};
    offload_set_trace(s, log_op, &lg);
    const char *mode = offload_mode(s);
    modes_seen[strcmp(mode, "O_DIRECT") == 0]++;
    if (!direct) CHECK(strcmp(mode, "buffered") == 0, "O_DIRECT off but mode %s", mode);

    // (2) unlinked at open: nothing to see in the directory
    CHECK(visible_store_files() == 0, "store file visible in %s", g_dir);
    // (3) resident buffers: nbuf rounded slots plus alignment slack under one page
    size_t want = offload_buffer_bytes(slot_bytes, nbuf);
    CHECK(mem_live(MEM_CHECKPOINTS) == want && want >= nbuf * rounded &&
              want - nbuf * rounded < 4096,
          "MEM_CHECKPOINTS %zu, expected %zu (nbuf %d x %zu + slack)", mem_live(MEM_CHECKPOINTS),
          want, nbuf, rounded);

    size_t bad = 0;
    for (int step = 0; step < steps && nbuf == 1; step++) {
        // the model's one-buffer pattern: the residual stream updated in place, each layer's
        // input written while it is read, reads not prefetched
        float *b = offload_acquire(s);
        for (int l = 0; l < L; l++) {
            fill(b, n, step, l);
            offload_write_keep(s, l, b);
            bad += count_bad(b, n, step, l); // reading it meanwhile is fine
            offload_written(s, b);
        }
        offload_release(s, b);
        for (int l = L - 1; l >= 0; l--) {
            b = offload_wait(s, l);
            bad += count_bad(b, n, step, l);
            offload_release(s, b);
        }
    }
    for (int step = 0; step < steps && nbuf > 1; step++) {
        for (int l = 0; l < L; l++) { // forward
            float *b = offload_acquire(s);
            fill(b, n, step, l);
            offload_write(s, l, b);
        }
        offload_prefetch(s, L - 1); // backward
        for (int l = L - 1; l >= 0; l--) {
            float *b = offload_wait(s, l);
            if (l > 0) offload_prefetch(s, l - 1);
            bad += count_bad(b, n, step, l);
            offload_release(s, b);
        }
    }
    offload_stats st;
    offload_get_stats(s, &st);
    offload_close(s);
    CHECK(bad == 0, "L=%d nbuf=%d %s: %zu elements differ", L, nbuf, mode, bad);
    CHECK(st.writes == (long)steps * L && st.reads == (long)steps * L &&
              st.bytes_written == (size_t)steps * L * rounded,
          "stats: %ld writes, %ld reads, %zu bytes written", st.writes, st.reads, st.bytes_written);
    // FIFO: each step's writes 0..L-1 complete, then its reads L-1..0
    int order_ok = lg.n == 2 * L * steps;
    for (int k = 0; order_ok && k < lg.n; k++) {
        int j = k % (2 * L);
        offload_op op = j < L ? OFFLOAD_OP_WRITE : OFFLOAD_OP_READ;
        int slot = j < L ? j : 2 * L - 1 - j;
        order_ok = lg.op[k] == op && lg.slot[k] == slot;
    }
    CHECK(order_ok, "L=%d nbuf=%d: completion order differs from W0..W%d R%d..R0 (%d ops)", L, nbuf,
          L - 1, L - 1, lg.n);
    // (3) offloaded bytes: every slot once, rounded; earlier stores (smaller) gave theirs back
    CHECK(mem_offloaded_peak() == (size_t)L * rounded, "offloaded peak %zu, expected %zu",
          mem_offloaded_peak(), (size_t)L * rounded);
    CHECK(mem_live(MEM_CHECKPOINTS) == 0, "MEM_CHECKPOINTS %zu after close",
          mem_live(MEM_CHECKPOINTS));
    offload_allow_direct(1);
}

/* A read queued behind writes of the same slot returns the last one written. */
static void test_rewrite_then_read(void) {
    size_t n = 3000;
    char err[512];
    offload_store *s = offload_open(g_dir, n * sizeof(float), 2, 3, err, sizeof err);
    CHECK(s != NULL, "offload_open: %s", err);
    if (!s) return;
    float *a = offload_acquire(s), *b = offload_acquire(s);
    fill(a, n, 1, 0);
    fill(b, n, 2, 0);
    offload_write(s, 0, a);
    offload_write(s, 0, b);
    float *r = offload_wait(s, 0); // no prefetch issued: wait issues it
    CHECK(count_bad(r, n, 2, 0) == 0, "read after two queued writes: not the last data");
    offload_write(s, 1, r); // a buffer from wait may be written directly
    offload_prefetch(s, 1);
    offload_prefetch(s, 1); // second prefetch of the same slot: no-op
    float *r1 = offload_wait(s, 1);
    CHECK(count_bad(r1, n, 2, 0) == 0, "buffer from wait written to slot 1: wrong data");
    offload_release(s, r1);
    offload_close(s);
}

/* 1 MiB+ slots, default mode (O_DIRECT where the file system takes it) and buffered. */
static void test_large(void) {
    size_t n = (1u << 18) + 1000; // 1 MiB + 4000 bytes: not a multiple of 4096
    int L = 6;
    for (int direct = 1; direct >= 0; direct--) {
        offload_allow_direct(direct);
        char err[512];
        offload_store *s = offload_open(g_dir, n * sizeof(float), L, 3, err, sizeof err);
        CHECK(s != NULL, "offload_open large: %s", err);
        if (!s) continue;
        const char *mode = offload_mode(s);
        size_t bad = 0;
        for (int l = 0; l < L; l++) {
            float *b = offload_acquire(s);
            fill(b, n, 7, l);
            offload_write(s, l, b);
        }
        offload_prefetch(s, L - 1);
        for (int l = L - 1; l >= 0; l--) {
            float *b = offload_wait(s, l);
            if (l > 0) offload_prefetch(s, l - 1);
            bad += count_bad(b, n, 7, l);
            offload_release(s, b);
        }
        offload_stats st;
        offload_get_stats(s, &st);
        offload_close(s);
        CHECK(bad == 0, "large slots (%s): %zu elements differ", mode, bad);
        CHECK(mem_offloaded_peak() == (size_t)L * round4k(n * sizeof(float)),
              "large: offloaded peak %zu", mem_offloaded_peak());
        // figures only: disk speed here is not the code's to guarantee
        printf("large slots %.2f MiB x %d, %s: write %.0f MB/s, read %.0f MB/s\n",
               (double)n * 4 / 1048576.0, L, mode,
               st.write_seconds > 0 ? 1e-6 * (double)st.bytes_written / st.write_seconds : 0.0,
               st.read_seconds > 0 ? 1e-6 * (double)st.bytes_read / st.read_seconds : 0.0);
    }
    offload_allow_direct(1);
}

/* (4) user errors at open: NULL and a message that names the problem. */
static void test_open_errors(void) {
    char err[512], path[512];
    snprintf(path, sizeof path, "%s/missing", g_dir);
    err[0] = '\0';
    CHECK(offload_open(path, 4096, 2, 2, err, sizeof err) == NULL &&
              strstr(err, "no such directory") && strstr(err, path),
          "missing dir: '%s'", err);

    snprintf(path, sizeof path, "%s/plain_file", g_dir);
    FILE *fp = fopen(path, "w");
    if (fp) fclose(fp);
    err[0] = '\0';
    CHECK(offload_open(path, 4096, 2, 2, err, sizeof err) == NULL && strstr(err, "not a directory"),
          "regular file: '%s'", err);
    unlink(path);

    if (geteuid() != 0) { // root writes anywhere: the permission case only means something else
        snprintf(path, sizeof path, "%s/readonly", g_dir);
        mkdir(path, 0500);
        err[0] = '\0';
        CHECK(offload_open(path, 4096, 2, 2, err, sizeof err) == NULL &&
                  strstr(err, "cannot create a file there"),
              "read-only dir: '%s'", err);
        rmdir(path);
    }

    err[0] = '\0'; // 1 PiB: more than this disk has
    CHECK(offload_open(g_dir, (size_t)1 << 40, 1024, 2, err, sizeof err) == NULL &&
              strstr(err, "free there"),
          "too big for the disk: '%s'", err);

    struct rlimit old, small;
    getrlimit(RLIMIT_FSIZE, &old);
    small = old;
    small.rlim_cur = 1 << 20;
    setrlimit(RLIMIT_FSIZE, &small);
    err[0] = '\0';
    CHECK(offload_open(g_dir, 1 << 20, 4, 2, err, sizeof err) == NULL && strstr(err, "ulimit -f"),
          "over the file-size limit at open: '%s'", err);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(mem_live(MEM_CHECKPOINTS) == 0 && visible_store_files() == 0,
          "failed opens left buffers or files behind");
}

/* Runs fn in a child with stderr captured; returns the exit status (-1: killed or hung). */
static int run_child(void (*fn)(int), int arg, char *out, size_t outlen) {
    char path[512];
    snprintf(path, sizeof path, "%s/child_stderr", g_dir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) dup2(fd, 2);
        alarm(10); // a hang in the child shows as a failure, not a stuck test
        fn(arg);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    out[0] = '\0';
    FILE *fp = fopen(path, "r");
    if (fp) {
        size_t k = fread(out, 1, outlen - 1, fp);
        out[k] = '\0';
        fclose(fp);
    }
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Child: a file-size limit of 3 slots (plus 100 bytes when arg & 2: a partial write, whose
 * unaligned rest O_DIRECT refuses), then the forward writes 6 slots. Must die in up_die. */
static void child_write_past_limit(int arg) {
    int direct = arg & 1;
    size_t slot = 64 * 1024;
    char err[512];
    offload_allow_direct(direct);
    offload_store *s = offload_open(g_dir, slot, 6, 2, err, sizeof err);
    if (!s) {
        fprintf(stderr, "child open failed: %s\n", err);
        _exit(3);
    }
    struct rlimit rl;
    getrlimit(RLIMIT_FSIZE, &rl);
    rl.rlim_cur = 3 * slot + ((arg & 2) ? 100 : 0);
    setrlimit(RLIMIT_FSIZE, &rl);
    for (int l = 0; l < 6; l++) {
        float *b = offload_acquire(s);
        fill(b, slot / sizeof(float), 0, l);
        offload_write(s, l, b);
    }
    offload_close(s); // the failure must be reported by now at the latest
    _exit(0);
}

/* Child: holds both buffers of a 2-buffer store and asks for a third. */
static void child_deadlock(int unused) {
    (void)unused;
    char err[512];
    offload_store *s = offload_open(g_dir, 4096, 4, 2, err, sizeof err);
    if (!s) _exit(3);
    offload_acquire(s);
    offload_acquire(s);
    offload_acquire(s);
    _exit(0);
}

static void test_failures(void) {
    char out[4096];
    for (int arg = 0; arg < 4; arg++) {
        int rc = run_child(child_write_past_limit, arg, out, sizeof out);
        CHECK(rc == 1, "write past ulimit -f (%s, %s limit): child exit %d, stderr '%s'",
              (arg & 1) ? "default mode" : "buffered", (arg & 2) ? "unaligned" : "aligned", rc,
              out);
        CHECK(strstr(out, "write of layer checkpoint 3 failed") && strstr(out, "File too large") &&
                  strstr(out, g_dir) && strstr(out, "ulimit -f"),
              "write past ulimit -f: message '%s'", out);
    }
    int rc = run_child(child_deadlock, 0, out, sizeof out);
    CHECK(rc == 2 && strstr(out, "would deadlock"), "deadlock guard: exit %d, stderr '%s'", rc,
          out);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/upipe-test-offload-XXXXXX");
    if (!mkdtemp(g_dir)) {
        printf("cannot create a temp dir under /tmp\n");
        return 1;
    }
    // (1)-(3): L ascending so each store's offloaded peak is the largest so far
    int modes[2] = {0, 0};
    for (int L = 1; L <= 8; L++)
        for (int nbuf = 1; nbuf <= 3; nbuf++) {
            run_pattern(10000, L, nbuf, 2, 1, modes); // 40000 B slots: rounded to 40960
            run_pattern(10000, L, nbuf, 1, 0, modes);
        }
    printf("pattern runs: %d O_DIRECT, %d buffered\n", modes[1], modes[0]);
    test_rewrite_then_read();
    test_large();
    test_open_errors();
    test_failures();
    CHECK(visible_store_files() == 0, "store files left in %s", g_dir);
    if (rmdir(g_dir) != 0) CHECK(0, "could not remove %s (not empty?)", g_dir);
    return harness_finish("test_offload");
}
