/* mem.h — counting allocator with categories (DESIGN.md §5).
 *
 * Every large buffer comes from mem_alloc with a category. The module knows the live bytes per
 * category, the peak of each category and the peak of their sum. Memory is 64-byte aligned and
 * zeroed (so it is touched: accounted bytes track resident bytes). Not thread-safe: allocate
 * from the main thread only (the offload I/O thread reports through mem_add_offloaded). */
#ifndef UP_MEM_H
#define UP_MEM_H

#include "core/dtype.h" /* mem_dtype: the element types (DESIGN.md §5.1) */

#include <stddef.h>

typedef enum {
    MEM_PARAMS,
    MEM_GRADS,
    MEM_OPTIMIZER,
    MEM_CHECKPOINTS,
    MEM_ACTIVATIONS,
    MEM_ATTENTION,
    MEM_WORKSPACE,
    MEM_COMM,
    MEM_RUNTIME, /* the process itself: code, libraries, MPI, thread stacks, BLAS buffers */
    MEM_COUNT
} mem_category;

const char *mem_category_name(mem_category cat);

/* Where a buffer lives (DESIGN.md §11). The plan counts each space apart; the figures without a
 * space (mem_live, mem_peak_total, ...) are the sums over the spaces, which a CPU run has only
 * the first of. */
typedef enum {
    MEM_SPACE_HOST,   /* ordinary host memory (the CPU backend's tensors) */
    MEM_SPACE_PINNED, /* page-locked host memory (the GPU's copies in and out) */
    MEM_SPACE_DEVICE, /* GPU memory (the CUDA backend's tensors) */
    MEM_SPACE_COUNT
} mem_space;
const char *mem_space_name(mem_space sp); /* "host", "pinned", "device" */
/* The allocator of a space other than host (the backend's: zeroed memory, NULL when short). */
void mem_set_space(mem_space sp, void *(*alloc)(size_t), void (*release)(void *));
/* mem_alloc in space sp (host: mem_alloc itself). Out of memory stops every rank with a message
 * naming the space, the category and the size. */
void *mem_alloc_in(mem_space sp, mem_category cat, size_t bytes);
/* Live and peak bytes of one space (all categories), and of one category in it. */
size_t mem_live_in(mem_space sp);
size_t mem_peak_in(mem_space sp);
size_t mem_peak_cat_in(mem_space sp, mem_category cat);

/* Panic variant: out of memory stops every rank with a message naming the category and size. */
void *mem_alloc(mem_category cat, size_t bytes);
/* Try variant: NULL on failure (nothing counted). */
void *mem_try_alloc(mem_category cat, size_t bytes);
/* mem_alloc(cat, mem_dtype_bytes(dt, n)): n elements of dt. */
void *mem_alloc_n(mem_category cat, mem_dtype dt, size_t n);
/* mem_alloc_n(cat, MEM_DTYPE_F32, n). */
float *mem_alloc_f32(mem_category cat, size_t n);
void mem_free(void *p); /* NULL is fine; any space */
/* Counts bytes that are resident but not ours to allocate (MPI's temporaries inside a
 * collective, the process baseline): added to the live and peak figures exactly like an
 * allocation, in plan mode too; a negative delta gives them back. */
void mem_count(mem_category cat, long long delta);

size_t mem_live(mem_category cat);
size_t mem_live_total(void);
size_t mem_peak(mem_category cat);
size_t mem_peak_total(void);
void mem_reset_peaks(void); /* peaks := live */

/* Bytes currently held in the offload store (outside working memory) and their peak. */
void mem_add_offloaded(long long delta);
size_t mem_offloaded_peak(void);

/* The process's peak resident set size (VmHWM), in bytes. */
size_t mem_rss_peak(void);
/* Current resident set size (VmRSS), in bytes. */
size_t mem_rss_now(void);
/* Starts the peak resident set size over from the current one (Linux: /proc/self/clear_refs);
 * 0 on success, -1 where the kernel does not allow it. */
int mem_rss_reset_peak(void);

/* Plan mode (measure, then allocate): between mem_plan_begin and mem_plan_end, allocations are
 * counted exactly as real ones (live bytes, peaks, offloaded bytes) but not made: they return
 * NULL and must not be touched. Running the model's sizing code under plan mode gives the
 * memory plan of a run without allocating it. mem_plan_end resets every counter to zero. */
void mem_plan_begin(void);
void mem_plan_end(void);
int mem_planning(void);

/* Debug hook: make the n-th following allocation fail (0 = off); for tests of the try path. */
void mem_fail_after(long n);

#endif
