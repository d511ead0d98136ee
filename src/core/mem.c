#include "core/mem.h"

#include "core/check.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each block carries a 64-byte header with its size and category, so mem_free needs no size. */
typedef struct {
    size_t bytes;
    int cat;
    unsigned magic;
} mem_header;
#define MEM_HDR 64
#define MEM_MAGIC 0x75706970u

static size_t g_live[MEM_COUNT], g_peak[MEM_COUNT];
static size_t g_live_total, g_peak_total;
static atomic_llong g_off_live;
static atomic_llong g_off_peak;
static long g_fail_after;
static int g_planning;

static const char *g_names[MEM_COUNT] = {"params",      "grads",       "optimizer",
                                         "checkpoints", "activations", "attention",
                                         "workspace",   "comm",        "runtime"};

const char *mem_category_name(mem_category cat) {
    return (cat >= 0 && cat < MEM_COUNT) ? g_names[cat] : "?";
}

void mem_fail_after(long n) {
    g_fail_after = n;
}

/* Per space: live and peak bytes of each category and of all (the sums above are over the
 * spaces). Buffers outside host memory carry no header: a registry keeps their size. */
static size_t g_sp_live[MEM_SPACE_COUNT][MEM_COUNT], g_sp_peak[MEM_SPACE_COUNT][MEM_COUNT];
static size_t g_sp_total[MEM_SPACE_COUNT], g_sp_peak_total[MEM_SPACE_COUNT];
static void *(*g_sp_alloc[MEM_SPACE_COUNT])(size_t);
static void (*g_sp_release[MEM_SPACE_COUNT])(void *);
typedef struct {
    void *p;
    size_t bytes;
    int cat, sp;
} mem_foreign;
static mem_foreign *g_foreign;
static int g_nforeign, g_foreign_cap;

static void count_space(mem_space sp, mem_category cat, size_t bytes) {
    g_sp_live[sp][cat] += bytes;
    g_sp_total[sp] += bytes;
    if (g_sp_live[sp][cat] > g_sp_peak[sp][cat]) g_sp_peak[sp][cat] = g_sp_live[sp][cat];
    if (g_sp_total[sp] > g_sp_peak_total[sp]) g_sp_peak_total[sp] = g_sp_total[sp];
}

static void count_alloc_in(mem_space sp, mem_category cat, size_t bytes) {
    count_space(sp, cat, bytes);
    g_live[cat] += bytes;
    g_live_total += bytes;
    if (g_live[cat] > g_peak[cat]) g_peak[cat] = g_live[cat];
    if (g_live_total > g_peak_total) g_peak_total = g_live_total;
}

static void count_alloc(mem_category cat, size_t bytes) {
    count_alloc_in(MEM_SPACE_HOST, cat, bytes);
}

void mem_plan_begin(void) {
    g_planning = 1;
}

void mem_plan_end(void) {
    g_planning = 0;
    memset(g_live, 0, sizeof g_live);
    memset(g_peak, 0, sizeof g_peak);
    memset(g_sp_live, 0, sizeof g_sp_live);
    memset(g_sp_peak, 0, sizeof g_sp_peak);
    memset(g_sp_total, 0, sizeof g_sp_total);
    memset(g_sp_peak_total, 0, sizeof g_sp_peak_total);
    g_live_total = g_peak_total = 0;
    atomic_store(&g_off_live, 0);
    atomic_store(&g_off_peak, 0);
}

int mem_planning(void) {
    return g_planning;
}

void *mem_try_alloc(mem_category cat, size_t bytes) {
    UP_CHECK(cat >= 0 && cat < MEM_COUNT, "bad memory category %d", (int)cat);
    if (g_planning) {
        count_alloc(cat, bytes);
        return NULL;
    }
    if (g_fail_after > 0 && --g_fail_after == 0) return NULL;
    size_t total = up_add(bytes, MEM_HDR);
    total = (total + 63) & ~(size_t)63;
    void *raw = NULL;
    if (posix_memalign(&raw, 64, total) != 0) return NULL;
    memset(raw, 0, total); /* touch every page: accounted bytes are resident bytes */
    mem_header *h = raw;
    h->bytes = bytes;
    h->cat = (int)cat;
    h->magic = MEM_MAGIC;
    count_alloc(cat, bytes);
    return (char *)raw + MEM_HDR;
}

void *mem_alloc(mem_category cat, size_t bytes) {
    void *p = mem_try_alloc(cat, bytes);
    if (!p && !g_planning) {
        char b1[32], b2[32];
        up_die("out of memory: could not allocate %s for %s (%s already in use); "
               "use a shorter --seq-len or more memory-saving flags",
               up_fmt_bytes(b1, sizeof b1, (double)bytes), mem_category_name(cat),
               up_fmt_bytes(b2, sizeof b2, (double)g_live_total));
    }
    return p;
}

void *mem_alloc_n(mem_category cat, mem_dtype dt, size_t n) {
    return mem_alloc(cat, mem_dtype_bytes(dt, n));
}

float *mem_alloc_f32(mem_category cat, size_t n) {
    return mem_alloc_n(cat, MEM_DTYPE_F32, n);
}

void mem_count(mem_category cat, long long delta) {
    UP_CHECK(cat >= 0 && cat < MEM_COUNT, "bad memory category %d", (int)cat);
    if (delta >= 0) {
        count_alloc(cat, (size_t)delta);
        return;
    }
    UP_CHECK((size_t)-delta <= g_live[cat], "mem_count: giving back more %s than counted",
             mem_category_name(cat));
    g_live[cat] -= (size_t)-delta;
    g_live_total -= (size_t)-delta;
    g_sp_live[MEM_SPACE_HOST][cat] -= (size_t)-delta;
    g_sp_total[MEM_SPACE_HOST] -= (size_t)-delta;
}

static void uncount(mem_space sp, int cat, size_t bytes) {
    g_live[cat] -= bytes;
    g_live_total -= bytes;
    g_sp_live[sp][cat] -= bytes;
    g_sp_total[sp] -= bytes;
}

void mem_free(void *p) {
    if (!p) return;
    for (int i = g_nforeign - 1; i >= 0; i--)
        if (g_foreign[i].p == p) {
            mem_foreign f = g_foreign[i];
            g_foreign[i] = g_foreign[--g_nforeign];
            uncount((mem_space)f.sp, f.cat, f.bytes);
            g_sp_release[f.sp](p);
            return;
        }
    mem_header *h = (mem_header *)((char *)p - MEM_HDR);
    UP_CHECK(h->magic == MEM_MAGIC, "mem_free of a pointer not from mem_alloc");
    uncount(MEM_SPACE_HOST, h->cat, h->bytes);
    h->magic = 0;
    free(h);
}

size_t mem_live(mem_category cat) {
    return g_live[cat];
}
size_t mem_live_total(void) {
    return g_live_total;
}
size_t mem_peak(mem_category cat) {
    return g_peak[cat];
}
size_t mem_peak_total(void) {
    return g_peak_total;
}

void mem_reset_peaks(void) {
    for (int c = 0; c < MEM_COUNT; c++)
        g_peak[c] = g_live[c];
    g_peak_total = g_live_total;
    memcpy(g_sp_peak, g_sp_live, sizeof g_sp_peak);
    memcpy(g_sp_peak_total, g_sp_total, sizeof g_sp_peak_total);
}

void mem_add_offloaded(long long delta) {
    long long now = atomic_fetch_add(&g_off_live, delta) + delta;
    long long peak = atomic_load(&g_off_peak);
    while (now > peak && !atomic_compare_exchange_weak(&g_off_peak, &peak, now)) {
    }
}

size_t mem_offloaded_peak(void) {
    return (size_t)atomic_load(&g_off_peak);
}

static size_t status_field(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0, klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0) {
            kb = strtoull(line + klen, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

size_t mem_rss_peak(void) {
    return status_field("VmHWM:");
}
size_t mem_rss_now(void) {
    return status_field("VmRSS:");
}

int mem_rss_reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return -1;
    int ok = fputs("5", f) >= 0; /* 5: reset the peak RSS to the current RSS */
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* ---- memory spaces -------------------------------------------------------------------------- */

const char *mem_space_name(mem_space sp) {
    static const char *names[MEM_SPACE_COUNT] = {"host", "pinned", "device"};
    return sp >= 0 && sp < MEM_SPACE_COUNT ? names[sp] : "?";
}

void mem_set_space(mem_space sp, void *(*alloc)(size_t), void (*release)(void *)) {
    UP_CHECK(sp > MEM_SPACE_HOST && sp < MEM_SPACE_COUNT, "mem_set_space: bad space %d", (int)sp);
    g_sp_alloc[sp] = alloc;
    g_sp_release[sp] = release;
}

void *mem_alloc_in(mem_space sp, mem_category cat, size_t bytes) {
    if (sp == MEM_SPACE_HOST) return mem_alloc(cat, bytes);
    UP_CHECK(cat >= 0 && cat < MEM_COUNT, "bad memory category %d", (int)cat);
    UP_CHECK(sp > MEM_SPACE_HOST && sp < MEM_SPACE_COUNT, "bad memory space %d", (int)sp);
    if (g_planning) {
        count_alloc_in(sp, cat, bytes);
        return NULL;
    }
    UP_CHECK(g_sp_alloc[sp], "no allocator for %s memory (no device backend loaded)",
             mem_space_name(sp));
    void *p = bytes ? g_sp_alloc[sp](bytes) : NULL;
    if (!p && bytes) {
        char b1[32], b2[32];
        up_die("out of %s memory: could not allocate %s for %s (%s of it already in use); "
               "use a shorter --seq-len or more memory-saving flags",
               mem_space_name(sp), up_fmt_bytes(b1, sizeof b1, (double)bytes),
               mem_category_name(cat), up_fmt_bytes(b2, sizeof b2, (double)g_sp_total[sp]));
    }
    if (!p) return NULL;
    if (g_nforeign == g_foreign_cap) {
        g_foreign_cap = g_foreign_cap ? 2 * g_foreign_cap : 64;
        g_foreign = realloc(g_foreign, sizeof *g_foreign * (size_t)g_foreign_cap);
        UP_CHECK(g_foreign, "out of memory");
    }
    g_foreign[g_nforeign++] = (mem_foreign){p, bytes, (int)cat, (int)sp};
    count_alloc_in(sp, cat, bytes);
    return p;
}

size_t mem_live_in(mem_space sp) {
    return g_sp_total[sp];
}
size_t mem_peak_in(mem_space sp) {
    return g_sp_peak_total[sp];
}
size_t mem_peak_cat_in(mem_space sp, mem_category cat) {
    return g_sp_peak[sp][cat];
}
