/* test_trace.c — the span recorder (src/core/trace.h) on one rank: off, a span costs nothing and
 * records nothing; on, spans of two threads land on their own tracks with their arguments, nested
 * as called; a full buffer drops and counts; the file is valid JSON-shaped text (the script test
 * trace.sh parses real runs' files with python). Prints the cost of a span, off and on (the figure
 * in docs/BENCHMARKS.md). Final line: "N passed, M failed". */
#include "comm/comm.h"
#include "core/mem.h"
#include "core/trace.h"

#include <mpi.h>

#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { EVENTS = 4096 }; /* UPIPE_TRACE_EVENTS: the main buffer, the I/O one EVENTS / 16 */

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = s ? fread(s, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!s) return NULL;
    s[got] = '\0';
    return s;
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static void *io_thread(void *arg) {
    (void)arg;
    trace_attach_io();
    for (int i = 0; i < 10; i++) {
        uint64_t t = trace_begin();
        trace_end2(t, "offload", "offload_write", "layer", i, "bytes", 4096);
    }
    return NULL;
}

/* Nanoseconds per begin/end pair over n spans. */
static double span_ns(int n) {
    uint64_t t0 = trace_now_ns();
    for (int i = 0; i < n; i++) {
        uint64_t t = trace_begin();
        trace_end1(t, "bench", "span", "i", i);
    }
    return (double)(trace_now_ns() - t0) / n;
}

int main(int argc, char **argv) {
    int rank, R;
    comm_mpi_init(&argc, &argv, &rank, &R);
    comm_ctx world;
    comm_init(&world, MPI_COMM_WORLD, 1);
    setenv("UPIPE_TRACE_EVENTS", "4096", 1);
    char dir[] = "/tmp/upipe-trace-test.XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/t.json", dir);

    /* off: nothing recorded, the cost of a branch */
    CHECK(trace_begin() == 0, "off: trace_begin is 0");
    double off_ns = span_ns(1000000);
    /* timings only guard against a pathology (a lock or a system call per span): the machine is
     * shared and the sanitizer build slow, so the bounds are loose; the figures are printed */
    CHECK(off_ns < 2000, "off: %.2f ns per span", off_ns);

    /* the plan counts what trace_start allocates */
    mem_plan_begin();
    trace_plan(1);
    size_t planned = mem_peak(MEM_WORKSPACE);
    mem_plan_end();
    CHECK(planned == trace_buffer_bytes(1) && planned == (EVENTS + EVENTS / 16) * 64,
          "plan: %zu bytes", planned);

    char err[512];
    CHECK(comm_trace_start(&world, path, 1, err, sizeof err) == 0, "start: %s", err);
    CHECK(mem_live(MEM_WORKSPACE) == planned, "allocated %zu", mem_live(MEM_WORKSPACE));
    CHECK(trace_begin() != 0, "on: trace_begin is a time");
    uint64_t outer = trace_begin();
    uint64_t inner = trace_begin();
    trace_end2(inner, "layer", "inner", "layer", 3, "bytes", 1LL << 40);
    trace_end(outer, "layer", "outer");
    pthread_t th;
    CHECK(pthread_create(&th, NULL, io_thread, NULL) == 0, "thread");
    pthread_join(th, NULL);
    trace_step(); /* 12 of 4096: no flush */

    /* fill the main buffer: EVENTS - 2 more fit, the rest are dropped */
    double on_ns = span_ns(EVENTS - 2);
    span_ns(100);
    CHECK(on_ns < 20000, "on: %.1f ns per span", on_ns);
    CHECK(trace_finish(err, sizeof err) == 0, "finish: %s", err);
    CHECK(trace_begin() == 0, "off again after finish");
    CHECK(mem_live(MEM_WORKSPACE) == 0, "buffers freed");

    char *s = slurp(path);
    CHECK(s != NULL, "the file exists");
    if (s) {
        CHECK(strncmp(s, "{\"traceEvents\":[", 16) == 0, "opening");
        CHECK(strstr(s, "\"dropped_events\":100,") != NULL, "100 drops counted");
        CHECK(strstr(s, "\"events\":4106,") != NULL, "4096 + 10 spans written");
        CHECK(count(s, "\"ph\":\"X\"") == 4106, "%d spans in the file", count(s, "\"ph\":\"X\""));
        CHECK(strstr(s, "\"name\":\"inner\",\"cat\":\"layer\"") &&
                  strstr(s, "\"args\":{\"layer\":3,\"bytes\":1099511627776}}"),
              "two arguments");
        CHECK(strstr(s, "\"name\":\"outer\",\"cat\":\"layer\"") && strstr(s, "\"args\":{}}"),
              "no argument");
        CHECK(count(s, "\"name\":\"offload_write\"") == 10, "the I/O thread's spans");
        CHECK(strstr(s, "\"args\":{\"name\":\"offload I/O\"}") != NULL, "the I/O thread named");
        CHECK(strstr(s, "\"displayTimeUnit\":\"ms\"") != NULL, "displayTimeUnit");
        size_t n = strlen(s);
        CHECK(n > 2 && strcmp(s + n - 3, "}}\n") == 0, "closing");
        free(s);
    }
    printf("span cost: %.2f ns off, %.1f ns on (record and two clock reads)\n", off_ns, on_ns);
    unlink(path);
    CHECK(rmdir(dir) == 0, "nothing else left in the folder");
    int rc = harness_finish("test_trace");
    comm_free(&world);
    MPI_Finalize();
    return rc;
}
