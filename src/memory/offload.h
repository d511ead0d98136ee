/* offload.h — checkpoint offload store (DESIGN.md §4.2).
 *
 * Moves each layer's saved input x_l (T_loc, C) out of working memory into a file on disk and
 * brings it back one layer ahead of its use in backward. A background I/O thread serves the
 * requests in FIFO order, one large sequential pwrite/pread of a whole slot at a time, so a read
 * of a slot whose write is still queued returns the written data.
 *
 * Memory: the store owns nbuf resident buffers (one slab in MEM_CHECKPOINTS, 4096-aligned for
 * O_DIRECT, allocated at open by the main thread); the file's bytes are reported through
 * mem_add_offloaded when a slot is first written and given back at close.
 *
 * Buffer life cycle (each buffer is in exactly one state):
 *   free --offload_acquire--> caller --offload_write--> writing --(I/O thread)--> free
 *   caller --offload_write_keep--> keeping --(I/O thread)--> caller   (offload_written waits)
 *   free --offload_prefetch--> reading --(I/O thread)--> ready --offload_wait--> caller
 *   caller --offload_release--> free
 *
 * The model opens the store with one buffer, the residual stream itself (DESIGN.md §4.2):
 *   forward:  b = acquire(); embed into b;
 *             for l in 0..L-1 { read b; write_keep(l, b); compute; written(b); update b in place }
 *             loss(b); release(b)
 *   backward: for l = L-1..0 { b = wait(l); use b; release(b); }
 * so layer l's write overlaps its attention, and the read of a layer's input is not overlapped
 * (a prefetch needs a second buffer: the pattern with prefetch(l-1) before use needs nbuf >= 2).
 * A call that would wait for a buffer while none can ever come back (all held by the caller or
 * prefetched and not yet waited for) stops with a check failure instead of hanging.
 *
 * Errors: an I/O failure in the thread (ENOSPC, EFBIG, EIO, short transfer) is recorded; the
 * next main-thread call on the store (acquire/write/prefetch/wait/close) stops every rank
 * through up_die with a message naming the directory, the slot, the system error and what to
 * do. Not thread-safe: every offload_* call comes from one (main) thread. */
#ifndef UP_OFFLOAD_H
#define UP_OFFLOAD_H

#include "core/mem.h"

#include <stddef.h>

typedef struct offload_store offload_store;

/* Creates the store file in dir (mkstemp, unlinked at once so nothing is left even after a
 * crash), tries O_DIRECT and falls back to buffered I/O (writes then flushed and dropped from
 * the page cache) when the file system refuses it, allocates nbuf (>= 1) resident buffers of
 * slot_bytes rounded up to 4096, and starts the I/O thread. Checks up front that the directory
 * has room for nslots slots and that the file-size limit (ulimit -f) allows them; ignores
 * SIGXFSZ so that the limit gives an error instead of killing the process.
 * Returns NULL with a one-line message in err (what is wrong and what to do) on a user error. */
offload_store *offload_open(const char *dir, size_t slot_bytes, int nslots, int nbuf, char *err,
                            size_t errlen);
/* The same with the buffers in memory space sp (pinned: a device copies to and from them
 * without staging; mem_alloc_in's pinned memory is page-aligned, as O_DIRECT wants). */
offload_store *offload_open_in(mem_space sp, const char *dir, size_t slot_bytes, int nslots,
                               int nbuf, char *err, size_t errlen);
/* Joins the I/O thread (queued writes that nobody can read any more are dropped), closes the
 * file, frees the buffers and gives back the offloaded bytes. NULL is fine. */
void offload_close(offload_store *s);

/* A free resident buffer of slot_bytes (blocks while all buffers are being written). The caller
 * owns it until offload_write or offload_release. */
void *offload_acquire(offload_store *s);
/* Queues the write of buf (a buffer the caller owns) into slot and returns at once; buf goes
 * back to the free pool once written. A slot may be rewritten any number of times. */
void offload_write(offload_store *s, int slot, void *buf);
/* Queues the write of buf into slot like offload_write, but the caller keeps buf: it may read
 * buf meanwhile, and must call offload_written before it changes buf or hands it on. */
void offload_write_keep(offload_store *s, int slot, const void *buf);
/* Waits until the offload_write_keep of buf is on its way to disk (the I/O thread has copied it
 * out: written, or failed, which stops every rank with the message). */
void offload_written(offload_store *s, const void *buf);
/* Queues the read of slot (written before) into a free buffer (blocks only until a buffer is
 * free). No-op when slot is already prefetched and not yet waited for. */
void offload_prefetch(offload_store *s, int slot);
/* The buffer holding slot: waits for its prefetch (issues it first when none was). The caller
 * owns the buffer until offload_release (or offload_write). */
void *offload_wait(offload_store *s, int slot);
/* Gives a buffer from offload_acquire/offload_wait back to the free pool. */
void offload_release(offload_store *s, void *buf);

/* Sizes for the memory plan: resident bytes the store allocates in MEM_CHECKPOINTS (nbuf
 * rounded slots plus alignment slack under 4096 bytes), and the bytes a store of nslots slots
 * holds on disk (what mem_offloaded_peak reports once every slot is written). */
size_t offload_buffer_bytes(size_t slot_bytes, int nbuf);
size_t offload_store_bytes(size_t slot_bytes, int nslots);

/* "O_DIRECT" or "buffered": the I/O mode the store's file system accepted. A store falls back
 * to buffered for good if the file system later refuses an O_DIRECT transfer (EINVAL). */
const char *offload_mode(offload_store *s);
/* Test/user switch: 0 makes stores opened afterwards use buffered I/O without trying O_DIRECT. */
void offload_allow_direct(int allow);

typedef enum { OFFLOAD_OP_WRITE, OFFLOAD_OP_READ } offload_op;

/* Counters of completed operations (a snapshot, consistent under the store's lock). */
typedef struct {
    long writes, reads;                 /* completed slot writes / reads */
    size_t bytes_written, bytes_read;   /* bytes moved to and from the file */
    double write_seconds, read_seconds; /* time the I/O thread spent in pwrite / pread */
} offload_stats;
void offload_get_stats(offload_store *s, offload_stats *out);

/* Debug hook: fn(ctx, op, slot) is called by the I/O thread after each completed operation, in
 * completion order (which is request order). Set it before any request; NULL turns it off. */
void offload_set_trace(offload_store *s, void (*fn)(void *ctx, offload_op op, int slot), void *ctx);

#endif
