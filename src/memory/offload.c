/* offload.c — checkpoint offload store: one unlinked file, nbuf resident buffers, one I/O thread.
 *
 * Locking: one mutex guards the request queue, the buffer states, the slot table, the error
 * record and the counters. The I/O thread holds it only to pop a request and to publish its
 * result, never during a pread/pwrite, so the main thread blocks only when it needs a buffer
 * or a slot that is not there yet. */
#include "memory/offload.h"

#include "core/check.h"
#include "core/clock.h"
#include "core/mem.h"
#include "core/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define OFFLOAD_ALIGN ((size_t)4096) /* O_DIRECT wants buffer, offset and length aligned */
#define MEM_ALIGN ((size_t)64)       /* mem_alloc's alignment (mem.h) */
#define OFFLOAD_EOF (-1)             /* error code: a transfer moved fewer bytes than asked */

/* BUF_KEEPING: being written while the caller keeps it (offload_write_keep): back to
 * BUF_CALLER, not the free pool, once written. */
typedef enum { BUF_FREE, BUF_CALLER, BUF_WRITING, BUF_KEEPING, BUF_READING, BUF_READY } buf_state;

typedef struct {
    offload_op op;
    int slot;
    int buf;
} offload_req;

struct offload_store {
    char *dir;
    int fd;
    atomic_int direct; /* 1: O_DIRECT, 0: buffered (flush + drop from the page cache); the
                          I/O thread may switch it to 0 (see transfer) */
    size_t slot_bytes; /* rounded up to OFFLOAD_ALIGN */
    int nslots, nbuf;
    void *slab; /* mem_alloc block; base is its first OFFLOAD_ALIGN boundary */
    char *base; /* (nbuf, slot_bytes) */

    pthread_mutex_t mu;
    pthread_cond_t cv_work; /* main -> I/O thread: a request was queued, or stop */
    pthread_cond_t cv_done; /* I/O thread -> main: a buffer became free or ready */
    pthread_t thread;
    int stop;

    buf_state *bstate;  /* (nbuf) */
    offload_req *queue; /* (nbuf) ring: every queued request holds its own buffer */
    int qhead, qcount;
    int *slot_buf;              /* (nslots) buffer of a pending or ready read, -1: none */
    unsigned char *slot_queued; /* (nslots) a write was queued (main side, for checks) */
    unsigned char *slot_held;   /* (nslots) written at least once (counted as offloaded) */
    size_t offloaded;           /* bytes reported to mem_add_offloaded */

    int failed;     /* first I/O error, reported by the next main-thread call */
    int fail_errno; /* errno, or OFFLOAD_EOF for a short transfer */
    offload_op fail_op;
    int fail_slot;
    size_t fail_done;

    offload_stats stats;
    void (*trace)(void *ctx, offload_op op, int slot);
    void *trace_ctx;
};

static int g_allow_direct = 1;

void offload_allow_direct(int allow) {
    g_allow_direct = allow;
}

static size_t round_slot(size_t slot_bytes) {
    return up_add(slot_bytes, OFFLOAD_ALIGN - 1) & ~(OFFLOAD_ALIGN - 1);
}

size_t offload_buffer_bytes(size_t slot_bytes, int nbuf) {
    UP_CHECK(nbuf >= 0, "offload_buffer_bytes: nbuf %d", nbuf);
    /* mem_alloc gives 64-byte alignment; the slack moves base to a 4096 boundary */
    return up_add(up_mul(round_slot(slot_bytes), (size_t)nbuf), OFFLOAD_ALIGN - MEM_ALIGN);
}

size_t offload_store_bytes(size_t slot_bytes, int nslots) {
    UP_CHECK(nslots >= 0, "offload_store_bytes: nslots %d", nslots);
    return up_mul(round_slot(slot_bytes), (size_t)nslots);
}

const char *offload_mode(offload_store *s) {
    return atomic_load(&s->direct) ? "O_DIRECT" : "buffered";
}

/* ---- I/O thread ------------------------------------------------------------------------- */

/* Moves one whole slot; returns 0, an errno, or OFFLOAD_EOF; *done = bytes moved. */
static int transfer(offload_store *s, offload_op op, char *p, off_t off, size_t *done) {
    size_t n = s->slot_bytes, k = 0;
    while (k < n) {
        ssize_t got = op == OFFLOAD_OP_WRITE ? pwrite(s->fd, p + k, n - k, off + (off_t)k)
                                             : pread(s->fd, p + k, n - k, off + (off_t)k);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && errno == EINVAL && atomic_load(&s->direct)) {
            /* O_DIRECT refused this transfer (an unaligned rest after a partial write at a
             * file-size limit, or a file system that takes the flag but not the I/O): go on
             * buffered for good, so the real cause (EFBIG, ENOSPC) is what gets reported */
            int fl = fcntl(s->fd, F_GETFL);
            if (fl >= 0 && fcntl(s->fd, F_SETFL, fl & ~O_DIRECT) == 0) {
                atomic_store(&s->direct, 0);
                continue;
            }
        }
        if (got < 0) {
            *done = k;
            return errno;
        }
        if (got == 0) {
            *done = k;
            return OFFLOAD_EOF;
        }
        k += (size_t)got;
    }
    *done = k;
    if (!atomic_load(&s->direct)) {
        /* buffered: push written pages to disk and drop them (and read pages) from the page
         * cache, so the offload does not just move the checkpoints into cached memory */
        if (op == OFFLOAD_OP_WRITE &&
            sync_file_range(s->fd, off, (off_t)n,
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                SYNC_FILE_RANGE_WAIT_AFTER) != 0)
            return errno;
        posix_fadvise(s->fd, off, (off_t)n, POSIX_FADV_DONTNEED);
    }
    return 0;
}

static void *io_main(void *arg) {
    offload_store *s = arg;
    trace_attach_io(); /* --trace: this thread's spans on their own track */
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->qcount == 0 && !s->stop)
            pthread_cond_wait(&s->cv_work, &s->mu);
        if (s->stop) break; /* closing: queued requests are dropped below */
        offload_req r = s->queue[s->qhead];
        s->qhead = (s->qhead + 1) % s->nbuf;
        s->qcount--;
        int skip = s->failed; /* after a failure nothing more is written or read */
        pthread_mutex_unlock(&s->mu);

        char *p = s->base + (size_t)r.buf * s->slot_bytes;
        off_t off = (off_t)((size_t)r.slot * s->slot_bytes); /* < store size, checked at open */
        size_t done = 0;
        double t0 = now_s();
        uint64_t tt = skip ? 0 : trace_begin();
        int e = skip ? 0 : transfer(s, r.op, p, off, &done);
        trace_end2(tt, "offload", r.op == OFFLOAD_OP_WRITE ? "offload_write" : "offload_read",
                   "layer", r.slot, "bytes", (int64_t)done);
        double dt = now_s() - t0;
        if (!skip && !e && s->trace) s->trace(s->trace_ctx, r.op, r.slot);

        pthread_mutex_lock(&s->mu);
        if (e && !s->failed) {
            s->failed = 1;
            s->fail_errno = e;
            s->fail_op = r.op;
            s->fail_slot = r.slot;
            s->fail_done = done;
        }
        if (r.op == OFFLOAD_OP_WRITE) {
            if (!skip && !e) {
                s->stats.writes++;
                s->stats.bytes_written += s->slot_bytes;
                s->stats.write_seconds += dt;
                if (!s->slot_held[r.slot]) {
                    s->slot_held[r.slot] = 1;
                    s->offloaded += s->slot_bytes;
                    mem_add_offloaded((long long)s->slot_bytes); /* atomic: fine off-thread */
                }
            }
            s->bstate[r.buf] = s->bstate[r.buf] == BUF_KEEPING ? BUF_CALLER : BUF_FREE;
        } else {
            if (!skip && !e) {
                s->stats.reads++;
                s->stats.bytes_read += s->slot_bytes;
                s->stats.read_seconds += dt;
            }
            s->bstate[r.buf] = BUF_READY; /* on failure the waiter sees s->failed first */
        }
        pthread_cond_broadcast(&s->cv_done);
    }
    for (; s->qcount > 0; s->qcount--, s->qhead = (s->qhead + 1) % s->nbuf) {
        offload_req *r = &s->queue[s->qhead];
        buf_state *b = &s->bstate[r->buf];
        *b = r->op == OFFLOAD_OP_READ ? BUF_READY : *b == BUF_KEEPING ? BUF_CALLER : BUF_FREE;
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- main-thread side (s->mu held unless said otherwise) ---------------------------------- */

/* Stops the process with the recorded I/O failure, if any. */
static void check_failed(offload_store *s) {
    if (!s->failed) return;
    char what[128], size[32];
    if (s->fail_errno == OFFLOAD_EOF)
        snprintf(what, sizeof what, "only %zu of %zu bytes transferred", s->fail_done,
                 s->slot_bytes);
    else
        snprintf(what, sizeof what, "%s", strerror(s->fail_errno));
    const char *hint;
    if (s->fail_op == OFFLOAD_OP_READ)
        hint = "check the disk (dmesg) or point --offload at another directory";
    else if (s->fail_errno == ENOSPC || s->fail_errno == EDQUOT || s->fail_errno == OFFLOAD_EOF)
        hint = "free disk space or point --offload at a larger disk";
    else if (s->fail_errno == EFBIG)
        hint = "the file-size limit (ulimit -f) or the file system's largest file is too small "
               "for the store: raise the limit or point --offload at another file system";
    else
        hint = "check the disk (dmesg) or point --offload at another directory";
    up_fmt_bytes(size, sizeof size, (double)offload_store_bytes(s->slot_bytes, s->nslots));
    pthread_mutex_unlock(&s->mu);
    up_die("offload store in %s (%s): %s of layer checkpoint %d failed (%s): %s", s->dir, size,
           s->fail_op == OFFLOAD_OP_WRITE ? "write" : "read", s->fail_slot, what, hint);
}

/* Index of a free buffer; waits while buffers are in flight. */
static int wait_free_buffer(offload_store *s, const char *who) {
    for (;;) {
        check_failed(s);
        int inflight = 0;
        for (int b = 0; b < s->nbuf; b++) {
            if (s->bstate[b] == BUF_FREE) return b;
            if (s->bstate[b] == BUF_WRITING || s->bstate[b] == BUF_READING) inflight++;
        }
        /* nothing in flight: every buffer is held by the caller or prefetched and not yet
         * waited for, so none can come back while we wait */
        UP_CHECK(inflight > 0,
                 "%s: all %d offload buffers are held by the caller or prefetched and not yet "
                 "waited for; waiting would deadlock (release a buffer first or open the store "
                 "with more buffers)",
                 who, s->nbuf);
        pthread_cond_wait(&s->cv_done, &s->mu);
    }
}

static void enqueue(offload_store *s, offload_op op, int slot, int buf) {
    UP_CHECK(s->qcount < s->nbuf, "offload queue overflow (%d requests)", s->qcount);
    s->queue[(s->qhead + s->qcount) % s->nbuf] = (offload_req){op, slot, buf};
    s->qcount++;
    pthread_cond_signal(&s->cv_work);
}

static int buffer_index(const offload_store *s, const void *buf, const char *who) {
    const char *p = (const char *)buf;
    UP_CHECK(p >= s->base && p < s->base + (size_t)s->nbuf * s->slot_bytes &&
                 (size_t)(p - s->base) % s->slot_bytes == 0,
             "%s: %p is not one of the store's buffers", who, (const void *)buf);
    return (int)((size_t)(p - s->base) / s->slot_bytes);
}

static void check_slot(const offload_store *s, int slot, const char *who) {
    UP_CHECK(slot >= 0 && slot < s->nslots, "%s: slot %d out of range [0, %d)", who, slot,
             s->nslots);
}

void *offload_acquire(offload_store *s) {
    uint64_t tt = trace_begin();
    pthread_mutex_lock(&s->mu);
    int b = wait_free_buffer(s, "offload_acquire");
    s->bstate[b] = BUF_CALLER;
    pthread_mutex_unlock(&s->mu);
    trace_end(tt, "offload", "offload_acquire");
    return s->base + (size_t)b * s->slot_bytes;
}

static void write_locked(offload_store *s, int slot, void *buf, buf_state st, const char *who) {
    check_slot(s, slot, who);
    pthread_mutex_lock(&s->mu);
    check_failed(s);
    int b = buffer_index(s, buf, who);
    UP_CHECK(s->bstate[b] == BUF_CALLER, "%s: buffer %d is not held by the caller", who, b);
    s->bstate[b] = st;
    s->slot_queued[slot] = 1;
    enqueue(s, OFFLOAD_OP_WRITE, slot, b);
    pthread_mutex_unlock(&s->mu);
}

void offload_write(offload_store *s, int slot, void *buf) {
    write_locked(s, slot, buf, BUF_WRITING, "offload_write");
}

void offload_write_keep(offload_store *s, int slot, const void *buf) {
    write_locked(s, slot, (void *)buf, BUF_KEEPING, "offload_write_keep");
}

void offload_written(offload_store *s, const void *buf) {
    uint64_t tt = trace_begin();
    pthread_mutex_lock(&s->mu);
    int b = buffer_index(s, buf, "offload_written");
    while (s->bstate[b] == BUF_KEEPING) {
        check_failed(s);
        pthread_cond_wait(&s->cv_done, &s->mu);
    }
    check_failed(s);
    UP_CHECK(s->bstate[b] == BUF_CALLER, "offload_written: buffer %d is not held by the caller", b);
    pthread_mutex_unlock(&s->mu);
    trace_end(tt, "offload", "offload_written");
}

static void prefetch_locked(offload_store *s, int slot) {
    check_failed(s);
    if (s->slot_buf[slot] >= 0) return;
    UP_CHECK(s->slot_queued[slot], "offload_prefetch: slot %d was never written", slot);
    int b = wait_free_buffer(s, "offload_prefetch");
    s->bstate[b] = BUF_READING;
    s->slot_buf[slot] = b;
    enqueue(s, OFFLOAD_OP_READ, slot, b);
}

void offload_prefetch(offload_store *s, int slot) {
    check_slot(s, slot, "offload_prefetch");
    pthread_mutex_lock(&s->mu);
    prefetch_locked(s, slot);
    pthread_mutex_unlock(&s->mu);
}

void *offload_wait(offload_store *s, int slot) {
    check_slot(s, slot, "offload_wait");
    uint64_t tt = trace_begin();
    pthread_mutex_lock(&s->mu);
    prefetch_locked(s, slot);
    int b = s->slot_buf[slot];
    while (s->bstate[b] != BUF_READY) {
        check_failed(s);
        pthread_cond_wait(&s->cv_done, &s->mu);
    }
    check_failed(s); /* a failed read also ends in BUF_READY */
    s->bstate[b] = BUF_CALLER;
    s->slot_buf[slot] = -1;
    pthread_mutex_unlock(&s->mu);
    trace_end2(tt, "offload", "offload_wait", "layer", slot, "bytes", (int64_t)s->slot_bytes);
    return s->base + (size_t)b * s->slot_bytes;
}

void offload_release(offload_store *s, void *buf) {
    pthread_mutex_lock(&s->mu);
    int b = buffer_index(s, buf, "offload_release");
    UP_CHECK(s->bstate[b] == BUF_CALLER, "offload_release: buffer %d is not held by the caller", b);
    s->bstate[b] = BUF_FREE;
    pthread_mutex_unlock(&s->mu);
}

void offload_get_stats(offload_store *s, offload_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
}

void offload_set_trace(offload_store *s, void (*fn)(void *ctx, offload_op op, int slot),
                       void *ctx) {
    pthread_mutex_lock(&s->mu);
    s->trace = fn;
    s->trace_ctx = ctx;
    pthread_mutex_unlock(&s->mu);
}

/* ---- open / close ------------------------------------------------------------------------- */

static void free_meta(offload_store *s) {
    free(s->dir);
    free(s->bstate);
    free(s->queue);
    free(s->slot_buf);
    free(s->slot_queued);
    free(s->slot_held);
    free(s);
}

/* Turns O_DIRECT on when the file system takes it for a whole aligned block both ways. Returns
 * 0 (s->direct says the mode) or an errno of a write that failed in both modes. */
static int choose_mode(offload_store *s) {
    int fl = fcntl(s->fd, F_GETFL);
    s->direct = 0;
    errno = 0;
    if (g_allow_direct && fl >= 0 && fcntl(s->fd, F_SETFL, fl | O_DIRECT) == 0) {
        if (pwrite(s->fd, s->base, OFFLOAD_ALIGN, 0) == (ssize_t)OFFLOAD_ALIGN &&
            pread(s->fd, s->base, OFFLOAD_ALIGN, 0) == (ssize_t)OFFLOAD_ALIGN)
            s->direct = 1;
        else
            fcntl(s->fd, F_SETFL, fl); /* refused at I/O time (some FUSE / network fs) */
    }
    if (s->direct) return 0;
    /* buffered: still make sure a block can be written here (full disk, ulimit -f) */
    errno = 0;
    if (pwrite(s->fd, s->base, OFFLOAD_ALIGN, 0) != (ssize_t)OFFLOAD_ALIGN)
        return errno ? errno : ENOSPC;
    return 0;
}

/* The directory exists, is one, and has room for the store's file (disk space, ulimit -f).
 * 0, or -1 with a message that says what to do. */
static int check_dir(const char *dir, size_t total, char *err, size_t errlen) {
    if (dir == NULL || dir[0] == '\0')
        return up_errf(err, errlen, "--offload", "no directory given: pass a writable directory");
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT)
            return up_errf(err, errlen, NULL,
                           "--offload %s: no such directory: create it or pass an "
                           "existing writable directory",
                           dir);
        return up_errf(err, errlen, NULL,
                       "--offload %s: cannot access it (%s): pass a writable "
                       "directory",
                       dir, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return up_errf(err, errlen, NULL,
                       "--offload %s: not a directory: pass a directory (the store "
                       "creates its own file in it)",
                       dir);
    char b1[32], b2[32];
    struct statvfs vfs;
    if (statvfs(dir, &vfs) == 0 && vfs.f_blocks > 0) { /* 0 blocks: fs that does not say */
        double avail = (double)vfs.f_bavail * (double)vfs.f_frsize;
        if (avail < (double)total)
            return up_errf(err, errlen, NULL,
                           "--offload %s: the store needs %s but only %s are free there: "
                           "free disk space or pass a directory on a larger disk",
                           dir, up_fmt_bytes(b1, sizeof b1, (double)total),
                           up_fmt_bytes(b2, sizeof b2, avail));
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (double)rl.rlim_cur < (double)total)
        return up_errf(err, errlen, NULL,
                       "--offload %s: the store needs a file of %s but the file-size limit "
                       "(ulimit -f) is %s: raise it (ulimit -f unlimited)",
                       dir, up_fmt_bytes(b1, sizeof b1, (double)total),
                       up_fmt_bytes(b2, sizeof b2, (double)rl.rlim_cur));
    return 0;
}

/* The store's bookkeeping: every buffer free, no slot written. */
static offload_store *alloc_meta(const char *dir, size_t slot_bytes, int nslots, int nbuf) {
    offload_store *s = calloc(1, sizeof *s);
    UP_CHECK(s != NULL, "offload_open: out of memory");
    s->fd = -1;
    s->slot_bytes = round_slot(slot_bytes);
    s->nslots = nslots;
    s->nbuf = nbuf;
    s->dir = strdup(dir);
    s->bstate = calloc((size_t)nbuf, sizeof *s->bstate); /* BUF_FREE == 0 */
    s->queue = calloc((size_t)nbuf, sizeof *s->queue);
    s->slot_buf = malloc((size_t)nslots * sizeof *s->slot_buf);
    s->slot_queued = calloc((size_t)nslots, 1);
    s->slot_held = calloc((size_t)nslots, 1);
    UP_CHECK(s->dir && s->bstate && s->queue && s->slot_buf && s->slot_queued && s->slot_held,
             "offload_open: out of memory");
    for (int i = 0; i < nslots; i++)
        s->slot_buf[i] = -1;
    return s;
}

/* The store's file in s->dir, unlinked at once. 0, or -1 with a message. */
static int create_file(offload_store *s, char *err, size_t errlen) {
    size_t dlen = strlen(s->dir);
    char *path = malloc(dlen + 32);
    UP_CHECK(path != NULL, "offload_open: out of memory");
    snprintf(path, dlen + 32, "%s/upipe-offload-XXXXXX", s->dir);
    s->fd = mkostemp(path, O_CLOEXEC);
    if (s->fd < 0) {
        int e = errno;
        free(path);
        return up_errf(err, errlen, NULL,
                       "--offload %s: cannot create a file there (%s): pass a writable "
                       "directory",
                       s->dir, strerror(e));
    }
    unlink(path); /* the open descriptor keeps the data; nothing is left behind, even on a crash */
    free(path);
    return 0;
}

/* The lock, the conditions and the I/O thread. 0, or -1 with a message (nothing left to
 * destroy). */
static int start_thread(offload_store *s, char *err, size_t errlen) {
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv_work, NULL);
    pthread_cond_init(&s->cv_done, NULL);
    int e = pthread_create(&s->thread, NULL, io_main, s);
    if (e == 0) return 0;
    pthread_cond_destroy(&s->cv_done);
    pthread_cond_destroy(&s->cv_work);
    pthread_mutex_destroy(&s->mu);
    return up_errf(err, errlen, NULL, "--offload %s: cannot start the I/O thread (%s)", s->dir,
                   strerror(e));
}

offload_store *offload_open(const char *dir, size_t slot_bytes, int nslots, int nbuf, char *err,
                            size_t errlen) {
    return offload_open_in(MEM_SPACE_HOST, dir, slot_bytes, nslots, nbuf, err, errlen);
}

offload_store *offload_open_in(mem_space sp, const char *dir, size_t slot_bytes, int nslots,
                               int nbuf, char *err, size_t errlen) {
    UP_CHECK(slot_bytes > 0 && nslots >= 1 && nbuf >= 1,
             "offload_open: slot_bytes %zu, nslots %d, nbuf %d (need > 0, >= 1, >= 1)", slot_bytes,
             nslots, nbuf);
    if (check_dir(dir, offload_store_bytes(slot_bytes, nslots), err, errlen) != 0) return NULL;
    signal(SIGXFSZ, SIG_IGN); /* exceeding the limit later: EFBIG, not a killed process */

    offload_store *s = alloc_meta(dir, slot_bytes, nslots, nbuf);
    if (create_file(s, err, errlen) != 0) {
        free_meta(s);
        return NULL;
    }
    s->slab = mem_alloc_in(sp, MEM_CHECKPOINTS, offload_buffer_bytes(slot_bytes, nbuf));
    UP_CHECK(s->slab != NULL, "offload_open: no buffers (memory plan mode? plan with "
                              "offload_buffer_bytes instead)");
    s->base = (char *)(((uintptr_t)s->slab + OFFLOAD_ALIGN - 1) & ~(uintptr_t)(OFFLOAD_ALIGN - 1));

    int e = choose_mode(s);
    if (e != 0) {
        up_errf(err, errlen, NULL,
                "--offload %s: cannot write to a file there (%s): free disk space "
                "or pass another directory",
                dir, strerror(e));
        goto fail;
    }
    if (start_thread(s, err, errlen) != 0) goto fail;
    return s;
fail:
    close(s->fd);
    mem_free(s->slab);
    free_meta(s);
    return NULL;
}

void offload_close(offload_store *s) {
    if (s == NULL) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    int e = pthread_join(s->thread, NULL);
    UP_CHECK(e == 0, "offload_close: pthread_join: %s", strerror(e));
    pthread_mutex_lock(&s->mu);
    check_failed(s); /* an error no later call would have reported */
    pthread_mutex_unlock(&s->mu);
    pthread_cond_destroy(&s->cv_done);
    pthread_cond_destroy(&s->cv_work);
    pthread_mutex_destroy(&s->mu);
    close(s->fd);
    mem_add_offloaded(-(long long)s->offloaded);
    mem_free(s->slab);
    free_meta(s);
}
