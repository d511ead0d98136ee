/* trace.c — the profiler trace: per-thread event buffers, and their gathering to rank 0, which
 * streams them into one JSON trace file (trace.h; the format in DESIGN.md §8.2). During the run
 * the file is a JSON array of the events so far, written at event boundaries, which the viewers
 * load as it is (they accept the array without its closing bracket); the finish rewrites it as
 * the complete trace object, atomically. */
#include "core/trace.h"

#include "core/check.h"
#include "core/fileio.h"
#include "core/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* A string field of an event: a pointer while recorded, an index into its rank's string table
 * while sent to rank 0 and written. */
typedef union {
    const char *s;
    uint64_t id;
} trace_str;

typedef struct {
    uint64_t t0, t1; /* ns: CLOCK_MONOTONIC while recorded, since the origin once prepared */
    trace_str cat, name, k1, k2; /* k1, k2 NULL (TRACE_NONE once prepared): no argument */
    int64_t v1, v2;
} trace_event;
_Static_assert(sizeof(trace_event) == 64, "trace records are 64 bytes");

typedef struct {
    trace_event *ev;
    size_t cap;
    atomic_size_t n;       /* written by the owning thread only (release), read between steps */
    atomic_ullong dropped; /* spans that found the buffer full */
    long long tid;         /* the owner's OS thread id */
} trace_track;

/* What a rank sends rank 0 per track before its events and string table. */
typedef struct {
    long long n, dropped, tid, nstr, blob;
} trace_header;

enum { TRACE_MAX_STRINGS = 512, TRACE_TAG = 7301 };
/* Between steps the events go to the file at least this often, so a killed run loses at most
 * about this much (and its step) of the trace. */
#define TRACE_FLUSH_NS 2000000000ull
#define TRACE_NONE UINT64_MAX

int trace_enabled_;
static _Thread_local trace_track *tl_track;
static struct {
    trace_track tracks[TRACE_TRACKS];
    int ntracks;
    trace_link link; /* the trace's own channel to the other ranks (trace_start) */
    int rank, R;
    uint64_t origin, last_flush;
    int fd;               /* rank 0: the output, "[" and the events so far */
    int werr;             /* rank 0: errno of the first failed write to it (0: none) */
    atomic_int flushing;  /* rank 0: in flush_all, the main buffer's records are being sent */
    unsigned char *named; /* rank 0: R x TRACE_TRACKS, whether the track's thread_name is out */
    char path[4064];
    int first;                 /* no event written yet (no comma before the next) */
    long long events, dropped; /* written and dropped, all ranks (rank 0) */
} g_trace;

/* Rank 0's text on its way to the file: whole events only, so the file always ends at an event
 * boundary (a kill between two writes leaves a loadable array). */
static char g_text[1 << 16];
static size_t g_text_n;

/* The link's calls (trace_link, trace.h). */
static int link_any(int flag) {
    return g_trace.link.any(g_trace.link.ctx, flag);
}
static void link_send(const void *buf, size_t n) {
    g_trace.link.send(g_trace.link.ctx, buf, n, 0, TRACE_TAG);
}
static void link_recv(void *buf, size_t n, int src) {
    g_trace.link.recv(g_trace.link.ctx, buf, n, src, TRACE_TAG);
}

uint64_t trace_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void trace_record(uint64_t t0, const char *cat, const char *name, const char *k1, int64_t v1,
                  const char *k2, int64_t v2) {
    trace_track *t = tl_track;
    if (!t) return; /* a thread without a track */
    uint64_t t1 = trace_now_ns();
    size_t n = atomic_load_explicit(&t->n, memory_order_relaxed);
    if (n == t->cap) {
        atomic_fetch_add_explicit(&t->dropped, 1, memory_order_relaxed);
        return;
    }
    t->ev[n] = (trace_event){t0, t1, {cat}, {name}, {k1}, {k2}, v1, v2};
    atomic_store_explicit(&t->n, n + 1, memory_order_release);
}

/* Events of track k. Test hook: UPIPE_TRACE_EVENTS=N makes the main buffer N events and the I/O
 * one N/16, so that the tests reach the flush between steps and the drops of a full buffer. */
static size_t track_cap(int k) {
    static long events = -1;
    if (events < 0) {
        const char *s = getenv("UPIPE_TRACE_EVENTS");
        long v = s ? strtol(s, NULL, 10) : 0;
        events = v >= 16 && v <= (1L << 24) ? v : TRACE_MAIN_EVENTS;
    }
    return k == TRACE_TRACK_MAIN         ? (size_t)events
           : events == TRACE_MAIN_EVENTS ? TRACE_IO_EVENTS
                                         : (size_t)events / 16;
}

size_t trace_buffer_bytes(int io_track) {
    size_t n = 0;
    for (int k = 0; k < (io_track ? 2 : 1); k++)
        n += track_cap(k) * sizeof(trace_event);
    return n;
}

void trace_plan(int io_track) {
    for (int k = 0; k < (io_track ? 2 : 1); k++)
        mem_alloc(MEM_WORKSPACE, track_cap(k) * sizeof(trace_event));
}

static long long os_tid(void) {
    return (long long)syscall(SYS_gettid);
}

/* ---- writing (rank 0) ----------------------------------------------------------------------- */

/* The text so far into the file (one write, retried on short writes). */
static void out_flush(void) {
    if (g_text_n > 0 && !g_trace.werr && up_write_all(g_trace.fd, g_text, g_text_n) != 0)
        g_trace.werr = errno;
    g_text_n = 0;
}

/* One event of n bytes of JSON, after a comma unless it is the first. */
static void out_event(const char *json, int n) {
    if (n < 0) n = 0;
    if ((size_t)n + 2 > sizeof g_text) n = (int)sizeof g_text - 2; /* never: events are short */
    if (g_text_n + (size_t)n + 2 > sizeof g_text) out_flush();
    memcpy(g_text + g_text_n, g_trace.first ? "\n" : ",\n", 2);
    g_text_n += g_trace.first ? 1 : 2;
    memcpy(g_text + g_text_n, json, (size_t)n);
    g_text_n += (size_t)n;
    g_trace.first = 0;
}

static void write_metadata(void) {
    char line[256];
    for (int r = 0; r < g_trace.R; r++) {
        out_event(line, snprintf(line, sizeof line,
                                 "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{"
                                 "\"name\":\"rank %d\"}}",
                                 r, r));
        out_event(line,
                  snprintf(line, sizeof line,
                           "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":"
                           "{\"sort_index\":%d}}",
                           r, r));
    }
}

/* The name of track k of rank pid (OS thread tid), once per track. */
static void write_thread_name(int pid, long long tid, int k) {
    if (tid <= 0 || !g_trace.named || g_trace.named[pid * TRACE_TRACKS + k]) return;
    g_trace.named[pid * TRACE_TRACKS + k] = 1;
    char line[256];
    out_event(line,
              snprintf(line, sizeof line,
                       "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%lld,\"args\":"
                       "{\"name\":\"%s\"}}",
                       pid, tid, k == TRACE_TRACK_MAIN ? "main" : "offload I/O"));
    out_event(line, snprintf(line, sizeof line,
                             "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%lld,"
                             "\"args\":{\"sort_index\":%d}}",
                             pid, tid, k));
}

/* One span: t0, t1 in ns since the origin; k1, k2 NULL: no argument. */
static void write_span(int pid, long long tid, uint64_t t0, uint64_t t1, const char *cat,
                       const char *name, const char *k1, int64_t v1, const char *k2, int64_t v2) {
    char line[512];
    int n = snprintf(line, sizeof line,
                     "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                     "\"pid\":%d,\"tid\":%lld,\"args\":{",
                     name, cat, (double)t0 / 1e3, (double)(t1 - t0) / 1e3, pid, tid);
    if (k1 && n < (int)sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, "\"%s\":%lld", k1, (long long)v1);
    if (k2 && n < (int)sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, "%s\"%s\":%lld", k1 ? "," : "", k2,
                      (long long)v2);
    if (n < (int)sizeof line) n += snprintf(line + n, sizeof line - (size_t)n, "}}");
    out_event(line, n < (int)sizeof line ? n : (int)sizeof line - 1);
}

/* n prepared events of one track of rank pid, their strings in strs. */
static void write_events(int pid, long long tid, const trace_event *ev, long long n,
                         const char *const *strs) {
    for (long long i = 0; i < n; i++) {
        const trace_event *e = &ev[i];
        write_span(pid, tid, e->t0, e->t1, strs[e->cat.id], strs[e->name.id],
                   e->k1.id != TRACE_NONE ? strs[e->k1.id] : NULL, e->v1,
                   e->k2.id != TRACE_NONE ? strs[e->k2.id] : NULL, e->v2);
    }
}

/* ---- gathering ------------------------------------------------------------------------------ */

/* The string table of one track: its distinct string pointers and, packed one after another
 * with their NULs, their text. */
typedef struct {
    const char *ptr[TRACE_MAX_STRINGS];
    int n;
    char blob[TRACE_MAX_STRINGS * 64];
    size_t blob_len;
} trace_strings;

static uint64_t intern(trace_strings *st, const char *s) {
    if (!s) return TRACE_NONE;
    for (int i = st->n - 1; i >= 0; i--)
        if (st->ptr[i] == s) return (uint64_t)i;
    size_t len = strlen(s) + 1;
    UP_CHECK(st->n < TRACE_MAX_STRINGS && st->blob_len + len <= sizeof st->blob,
             "trace: more than %d distinct span strings", TRACE_MAX_STRINGS);
    memcpy(st->blob + st->blob_len, s, len);
    st->blob_len += len;
    st->ptr[st->n] = s;
    return (uint64_t)st->n++;
}

/* Turns the first n events of a track into their sent and written form: times since the
 * origin, strings as indices into st. */
static void prepare(trace_track *t, long long n, trace_strings *st) {
    st->n = 0;
    st->blob_len = 0;
    for (long long i = 0; i < n; i++) {
        trace_event *e = &t->ev[i];
        /* a span begun before the origin starts at it */
        e->t0 = e->t0 > g_trace.origin ? e->t0 - g_trace.origin : 0;
        e->t1 = e->t1 > g_trace.origin ? e->t1 - g_trace.origin : 0;
        e->cat.id = intern(st, e->cat.s);
        e->name.id = intern(st, e->name.s);
        e->k1.id = intern(st, e->k1.s);
        e->k2.id = intern(st, e->k2.s);
    }
}

/* The strings of a received table: pointers into blob. */
static void split_strings(char *blob, long long len, long long nstr, const char **strs) {
    long long k = 0;
    for (long long i = 0; i < len && k < nstr; k++) {
        strs[k] = blob + i;
        i += (long long)strlen(blob + i) + 1;
    }
    UP_CHECK(k == nstr, "trace: a string table of %lld strings held %lld", nstr, k);
}

/* Every rank's events so far go to rank 0 (its own first, then rank 1's, ...), which writes
 * them into the file, with the name of each thread the first time it sends; the buffers start
 * over. Collective. */
static void flush_all(void) {
    static trace_strings st; /* 40 KiB: not on the stack */
    atomic_store(&g_trace.flushing, 1);
    for (int k = 0; k < g_trace.ntracks; k++) {
        trace_track *t = &g_trace.tracks[k];
        long long n = (long long)atomic_load_explicit(&t->n, memory_order_acquire);
        prepare(t, n, &st);
        trace_header h = {n, (long long)atomic_exchange(&t->dropped, 0), t->tid, st.n,
                          (long long)st.blob_len};
        if (g_trace.rank == 0) {
            const char *strs[TRACE_MAX_STRINGS];
            split_strings(st.blob, h.blob, h.nstr, strs);
            write_thread_name(0, h.tid, k);
            write_events(0, h.tid, t->ev, n, strs);
            g_trace.events += n;
            g_trace.dropped += h.dropped;
        } else {
            link_send(&h, sizeof h);
            link_send(st.blob, st.blob_len);
            link_send(t->ev, (size_t)n * sizeof(trace_event));
        }
        atomic_store_explicit(&t->n, 0, memory_order_relaxed);
    }
    /* n is 0 while the others' events pass through the buffer */
    atomic_store(&g_trace.flushing, 0);
    if (g_trace.rank != 0) return;
    /* the others', received into rank 0's main buffer (every track of every rank fits: all
     * ranks have the same buffers, the main one the largest) */
    trace_track *buf = &g_trace.tracks[TRACE_TRACK_MAIN];
    for (int r = 1; r < g_trace.R; r++)
        for (int k = 0; k < g_trace.ntracks; k++) {
            trace_header h;
            link_recv(&h, sizeof h, r);
            UP_CHECK(h.n >= 0 && (size_t)h.n <= buf->cap && h.nstr >= 0 &&
                         h.nstr <= TRACE_MAX_STRINGS && h.blob >= 0 &&
                         (size_t)h.blob <= sizeof st.blob,
                     "trace: rank %d sent a bad header (%lld events)", r, h.n);
            link_recv(st.blob, (size_t)h.blob, r);
            link_recv(buf->ev, (size_t)h.n * sizeof(trace_event), r);
            const char *strs[TRACE_MAX_STRINGS];
            split_strings(st.blob, h.blob, h.nstr, strs);
            write_thread_name(r, h.tid, k);
            write_events(r, h.tid, buf->ev, h.n, strs);
            g_trace.events += h.n;
            g_trace.dropped += h.dropped;
        }
    out_flush();
    g_trace.last_flush = trace_now_ns();
}

/* ---- the run -------------------------------------------------------------------------------- */

/* Rank 0's output, created at the start: "[" and the metadata, written at once, so the file
 * is a loadable trace from the first moment on. */
static int open_output(const char *path, char *err, size_t errlen) {
    if (strlen(path) >= sizeof g_trace.path)
        return up_errf(err, errlen, NULL, "--trace %s: the path is too long", path);
    snprintf(g_trace.path, sizeof g_trace.path, "%s", path);
    g_trace.fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (g_trace.fd < 0)
        return up_errf(err, errlen, NULL, "--trace %s: cannot create it (%s): check the folder",
                       path, strerror(errno));
    g_trace.named = calloc((size_t)g_trace.R * TRACE_TRACKS, 1);
    UP_CHECK(g_trace.named, "out of memory");
    g_text_n = 0;
    memcpy(g_text, "[", 1);
    g_text_n = 1;
    g_trace.first = 1;
    write_metadata();
    out_flush();
    return 0;
}

/* The finished trace: the opening, the events written so far (the file after its "["), the
 * closing with otherData, into path.tmp.<pid>, renamed over the file. */
static int write_output(char *err, size_t errlen) {
    out_flush();
    if (g_trace.werr)
        return up_errf(err, errlen, g_trace.path, "write failed (%s): check free disk space",
                       strerror(g_trace.werr));
    up_atomic_file out;
    if (up_atomic_open(&out, g_trace.path, err, errlen) != 0) return -1;
    fputs("{\"traceEvents\":[", out.f);
    char buf[1 << 16];
    ssize_t n = 0;
    for (off_t off = 1; (n = pread(g_trace.fd, buf, sizeof buf, off)) > 0; off += n)
        fwrite(buf, 1, (size_t)n, out.f);
    fprintf(out.f,
            "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"tool\":\"upipe\",\"ranks\":%d,"
            "\"events\":%lld,\"dropped_events\":%lld,\"clock\":\"CLOCK_MONOTONIC, origin "
            "aligned over the ranks by a collective at the start\"}}\n",
            g_trace.R, g_trace.events, g_trace.dropped);
    if (n < 0) {
        int e = errno;
        up_atomic_abort(&out);
        return up_errf(err, errlen, g_trace.path, "cannot read back what was written (%s)",
                       strerror(e));
    }
    return up_atomic_commit(&out, err, errlen);
}

/* Rank 0's file, closed where the ranks cannot finish together (trace.h). Its own events not
 * yet written (unless flush_all is sending them: then they are in the text already), the names
 * of its threads, and "]". Reads the records below each buffer's count, which the owner
 * published with release, so a main thread that still records does not disturb it. */
static void close_on_stop(void) {
    if (!trace_enabled_ || g_trace.rank != 0 || g_trace.fd < 0) return;
    trace_enabled_ = 0;
    for (int k = 0; k < g_trace.ntracks && !atomic_load(&g_trace.flushing); k++) {
        trace_track *t = &g_trace.tracks[k];
        size_t n = atomic_load_explicit(&t->n, memory_order_acquire);
        write_thread_name(0, t->tid, k);
        for (size_t i = 0; i < n; i++) {
            const trace_event *e = &t->ev[i];
            uint64_t t0 = e->t0 > g_trace.origin ? e->t0 - g_trace.origin : 0;
            uint64_t t1 = e->t1 > g_trace.origin ? e->t1 - g_trace.origin : 0;
            write_span(0, t->tid, t0, t1, e->cat.s, e->name.s, e->k1.s, e->v1, e->k2.s, e->v2);
        }
    }
    out_flush();
    if (!g_trace.werr && up_write_all(g_trace.fd, "\n]\n", 3) == 0) fsync(g_trace.fd);
}

int trace_start(const char *path, const trace_link *link, int io_track, char *err, size_t errlen) {
    memset(&g_trace, 0, sizeof g_trace);
    g_trace.link = *link;
    g_trace.rank = link->rank;
    g_trace.R = link->R;
    g_trace.ntracks = io_track ? 2 : 1;
    for (int k = 0; k < g_trace.ntracks; k++) {
        g_trace.tracks[k].cap = track_cap(k);
        g_trace.tracks[k].ev = mem_alloc(MEM_WORKSPACE, track_cap(k) * sizeof(trace_event));
    }
    if (err && errlen) err[0] = '\0';
    int bad = 0;
    g_trace.fd = -1;
    if (g_trace.rank == 0) bad = open_output(path, err, errlen) != 0;
    /* the verdict, and the clocks' alignment: every rank has entered this all-reduce before
     * any leaves it */
    bad = link_any(bad);
    g_trace.origin = trace_now_ns();
    g_trace.last_flush = g_trace.origin;
    if (bad) {
        for (int k = 0; k < g_trace.ntracks; k++)
            mem_free(g_trace.tracks[k].ev);
        g_trace.link.close(g_trace.link.ctx);
        if (g_trace.fd >= 0) close(g_trace.fd);
        free(g_trace.named);
        memset(&g_trace, 0, sizeof g_trace);
        return -1;
    }
    g_trace.tracks[TRACE_TRACK_MAIN].tid = os_tid();
    tl_track = &g_trace.tracks[TRACE_TRACK_MAIN];
    trace_enabled_ = 1;
    up_on_stop(close_on_stop); /* a stop of the process (up_die*, the watchdog) closes the file */
    return 0;
}

void trace_attach_io(void) {
    if (!trace_enabled_ || g_trace.ntracks <= TRACE_TRACK_IO) return;
    g_trace.tracks[TRACE_TRACK_IO].tid = os_tid();
    tl_track = &g_trace.tracks[TRACE_TRACK_IO];
}

void trace_step(void) {
    if (!trace_enabled_) return;
    uint64_t t0 = trace_now_ns();
    int full = 0;
    for (int k = 0; k < g_trace.ntracks; k++)
        full |= atomic_load_explicit(&g_trace.tracks[k].n, memory_order_acquire) >
                g_trace.tracks[k].cap / 2;
    if (g_trace.rank == 0 && t0 - g_trace.last_flush >= TRACE_FLUSH_NS) full = 1; /* now and then */
    if (!link_any(full)) return;
    flush_all();
    trace_record(t0, "trace", "trace_flush", NULL, 0, NULL, 0); /* in the next batch */
}

int trace_finish(char *err, size_t errlen) {
    if (!trace_enabled_) return 0;
    up_on_stop(NULL);
    trace_enabled_ = 0;
    tl_track = NULL;
    flush_all();
    int bad = 0;
    if (err && errlen) err[0] = '\0';
    if (g_trace.rank == 0) {
        bad = write_output(err, errlen) != 0;
        close(g_trace.fd);
        free(g_trace.named);
        if (!bad && g_trace.dropped > 0) {
            fprintf(stderr,
                    "upipe: warning: --trace: %lld span%s dropped: an event buffer (%zu "
                    "spans on the main thread) filled within one step; the trace is incomplete\n",
                    g_trace.dropped, g_trace.dropped == 1 ? "" : "s", track_cap(TRACE_TRACK_MAIN));
            fflush(stderr);
        }
    }
    bad = link_any(bad);
    for (int k = 0; k < g_trace.ntracks; k++)
        mem_free(g_trace.tracks[k].ev);
    g_trace.link.close(g_trace.link.ctx);
    memset(&g_trace, 0, sizeof g_trace);
    return bad ? -1 : 0;
}
