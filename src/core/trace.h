/* trace.h — a profiler trace of a run (--trace FILE): spans on one track per thread that records
 * (each rank's main thread, the offload store's I/O thread), written as one Chrome / Perfetto
 * JSON trace: pid = rank, tid = the thread's OS id (DESIGN.md §8.2).
 *
 * Recording a span:
 *
 *     uint64_t t = trace_begin();
 *     layer_forward(m, l, x, x_out);
 *     trace_end1(t, "layer", "forward", "layer", l);
 *
 * Off (no --trace), trace_begin returns 0 and every trace_end* is one predictable branch. On, a
 * span is one fixed-size record (the category, name and argument names are pointers to static
 * strings, the times CLOCK_MONOTONIC nanoseconds) appended to the calling thread's preallocated
 * buffer; a span that finds its buffer full is dropped and counted (the file and the terminal
 * say how many). Spans are recorded when they end, so the spans of one thread nest (or follow
 * each other) exactly as the calls do. Strings must be string literals of letters, digits and
 * '_' (they are written into the JSON unescaped). A thread records only on a track it was given
 * (trace_start: the caller; trace_attach_io: the offload I/O thread); elsewhere the calls do
 * nothing. */
#ifndef UP_TRACE_H
#define UP_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { TRACE_TRACK_MAIN, TRACE_TRACK_IO, TRACE_TRACKS } trace_track_id;

/* Events of each track's buffer: 64-byte records, so 16 MiB and 512 KiB per rank. The buffers
 * are written out between steps when one is half full (trace_step), so one step may record at
 * least half of them: 131072 spans on the main thread (80 layers of 64 UPipe stages record about
 * 80000), 4096 on the I/O thread (two per layer and micro-batch). (Tests: UPIPE_TRACE_EVENTS=N
 * sets the main buffer to N events, the I/O one to N/16.) */
enum { TRACE_MAIN_EVENTS = 1 << 18, TRACE_IO_EVENTS = 1 << 13 };

extern int trace_enabled_; /* set by trace_start, cleared by trace_finish; read trace_begin */

uint64_t trace_now_ns(void); /* CLOCK_MONOTONIC */
void trace_record(uint64_t t0, const char *cat, const char *name, const char *k1, int64_t v1,
                  const char *k2, int64_t v2);

/* The start of a span: its time, or 0 when tracing is off. */
static inline uint64_t trace_begin(void) {
    return trace_enabled_ ? trace_now_ns() : 0;
}
/* The end of a span begun at t0, with no, one or two integer arguments (args: {k1: v1, k2: v2}). */
static inline void trace_end(uint64_t t0, const char *cat, const char *name) {
    if (t0) trace_record(t0, cat, name, NULL, 0, NULL, 0);
}
static inline void trace_end1(uint64_t t0, const char *cat, const char *name, const char *k1,
                              int64_t v1) {
    if (t0) trace_record(t0, cat, name, k1, v1, NULL, 0);
}
static inline void trace_end2(uint64_t t0, const char *cat, const char *name, const char *k1,
                              int64_t v1, const char *k2, int64_t v2) {
    if (t0) trace_record(t0, cat, name, k1, v1, k2, v2);
}

/* Bytes of the event buffers (io_track: with the offload I/O thread's); they come from mem_alloc
 * (category workspace), so the memory plan counts them: trace_plan counts them under plan mode. */
size_t trace_buffer_bytes(int io_track);
void trace_plan(int io_track);

/* How the trace talks to the other ranks. Core knows nothing of MPI: the communication layer
 * fills this (comm_trace_start, comm/comm.h, on a communicator of the trace's own) and calls
 * trace_start with it. */
typedef struct {
    void *ctx;   /* the channel's state, passed to each call */
    int rank, R; /* this rank and the ranks of the channel */
    /* collective: 1 when flag is non-zero on any rank */
    int (*any)(void *ctx, int flag);
    /* point to point, blocking: n bytes to rank dest, or from rank src, with tag */
    void (*send)(void *ctx, const void *buf, size_t n, int dest, int tag);
    void (*recv)(void *ctx, void *buf, size_t n, int src, int tag);
    /* collective: releases the channel (at trace_finish, or when trace_start fails) */
    void (*close)(void *ctx);
} trace_link;

/* Collective over link's ranks (the trace owns link from here on; a copy is kept). Allocates
 * the buffers, gives the calling thread the main track, creates rank 0's output at path (during
 * the run a JSON array of the events written out so far, whole events only, which the viewers
 * load without its closing bracket: a killed run leaves the trace up to its last write-out) and
 * aligns the ranks' clocks: every rank takes its time origin right after one collective that all
 * of them entered (skew: the collective's exit latency, microseconds on one node). Registers the
 * close for a stop that ends the process (up_on_stop: up_die*, UP_CHECK, the watchdog), which
 * writes rank 0's own events not yet out and the closing "]"; the other ranks' events since the
 * last write-out are lost there. 0, or -1 on every rank when rank 0 could not create the file
 * (err filled on rank 0 only, "" elsewhere). */
int trace_start(const char *path, const trace_link *link, int io_track, char *err, size_t errlen);
/* Gives the calling thread the I/O track (the offload store's I/O thread, at its start); nothing
 * when tracing is off or started without io_track. */
void trace_attach_io(void);
/* Collective, between steps, when no other thread records (the offload store is idle): when a
 * buffer of any rank is half full, or 2 s passed since the last write-out, every rank's events
 * so far go to rank 0, which appends them to the file. */
void trace_step(void);
/* Collective, after the offload store closed: writes path atomically (rank 0: the events written
 * so far, the remaining ones, the drop count and the metadata as the trace object into
 * path.tmp.<pid>, renamed over the array), prints a warning when spans were dropped, frees the
 * buffers; tracing is off afterwards. 0, or -1 on every rank when rank 0's write failed (err
 * filled on rank 0 only; the temporary file is removed). */
int trace_finish(char *err, size_t errlen);

#endif
