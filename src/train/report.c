/* report.c — the memory plan, the --mem-limit refusal and the JSON memory report. */
#include "train/report.h"

#include "core/check.h"
#include "core/fileio.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

report_memory report_capture(void) {
    report_memory p;
    memset(&p, 0, sizeof p);
    for (int c = 0; c < MEM_COUNT; c++)
        p.cat[c] = mem_peak((mem_category)c);
    p.peak = mem_peak_total();
    p.offloaded = mem_offloaded_peak();
    p.device = mem_peak_in(MEM_SPACE_DEVICE);
    p.pinned = mem_peak_in(MEM_SPACE_PINNED);
    p.host = mem_peak_in(MEM_SPACE_HOST);
    for (int c = 0; c < MEM_COUNT; c++) {
        p.dev_cat[c] = mem_peak_cat_in(MEM_SPACE_DEVICE, (mem_category)c);
        p.pin_cat[c] = mem_peak_cat_in(MEM_SPACE_PINNED, (mem_category)c);
    }
    return p;
}

/* Flags that shrink each category (for --mem-limit's refusal). */
static const char *g_shrink[MEM_COUNT] = {
    "more ranks (FSDP shards model state)",
    "more ranks (FSDP shards model state)",
    "more ranks (FSDP shards model state)",
    "--offload DIR",
    "--checkpoint",
    "--upipe-heads U (smaller U) or more --cp ranks",
    "--tile-mlp / --tile-loss",
    "fewer ranks per group",
    "fewer --threads (each BLAS thread holds its packing buffers)"};
/* The same on a GPU. */
static const char *g_shrink_gpu[MEM_COUNT] = {
    "--offload-optimizer keeps the fp32 model state in host memory",
    "--offload-optimizer keeps the fp32 model state in host memory",
    "--offload-optimizer keeps the fp32 model state in host memory",
    "--offload DIR (pinned host memory, then a file)",
    "try --checkpoint",
    "try --upipe-heads U (smaller U)",
    "try --tile-mlp / --tile-loss",
    "fewer ranks (FSDP's gather and gradient buffers grow with them)",
    "-"};

void report_print_plan(const report_memory *p, long T, const model_config *c, int P, int T_loc,
                       mem_dtype dt) {
    char b[32], t[32];
    double per = T_loc > 0 ? 1.0 / T_loc : 0; /* this rank's tokens */
    printf("memory plan per rank: T=%ld (T_loc=%d, cp=%d), C=%d L=%d NH=%d NKV=%d F=%d V=%d, "
           "dtype %s\n",
           T, T_loc, P, c->C, c->L, c->NH, c->NKV, c->F, c->V, mem_dtype_name(dt));
    /* a device run: a column for the part of each category in GPU memory, and one for the part
     * in pinned host memory when there is any (the rest is ordinary host memory) */
    char d[32];
    printf("  %-12s %12s %12s%s%s\n", "category", "bytes", "per token",
           p->device ? "       on GPU" : "", p->pinned ? "       pinned" : "");
    for (int k = 0; k < MEM_COUNT; k++) {
        printf("  %-12s %12s %12s", mem_category_name((mem_category)k),
               up_fmt_bytes(b, sizeof b, (double)p->cat[k]),
               up_fmt_bytes(t, sizeof t, (double)p->cat[k] * per));
        if (p->device) printf(" %12s", up_fmt_bytes(d, sizeof d, (double)p->dev_cat[k]));
        if (p->pinned) printf(" %12s", up_fmt_bytes(d, sizeof d, (double)p->pin_cat[k]));
        printf("\n");
    }
    printf("  %-12s %12s %12s", "peak", up_fmt_bytes(b, sizeof b, (double)p->peak),
           up_fmt_bytes(t, sizeof t, (double)p->peak * per));
    if (p->device) printf(" %12s", up_fmt_bytes(d, sizeof d, (double)p->device));
    if (p->pinned) printf(" %12s", up_fmt_bytes(d, sizeof d, (double)p->pinned));
    printf("\n");
    printf("  %-12s %12s %12s\n", "offloaded", up_fmt_bytes(b, sizeof b, (double)p->offloaded),
           up_fmt_bytes(t, sizeof t, (double)p->offloaded * per));
    /* the same peak in (T_loc, C) fp32 tensors: what each token costs, in units of itself */
    printf("  peak = %.1f token-sized tensors (T_loc x hidden_size fp32, %s each)\n",
           (double)p->peak / ((double)T_loc * c->C * sizeof(float)),
           up_fmt_bytes(t, sizeof t, (double)T_loc * c->C * sizeof(float)));
    fflush(stdout);
}

void report_print_comm(const double bytes[COMM_KIND_COUNT], const comm_ctx *comm, int micro) {
    if (comm->R == 1) return;
    char a[32], b[32];
    printf("communication per step (%d micro-batch%s), bytes all %d ranks send: %d node%s: %s\n",
           micro, micro == 1 ? "" : "es", comm->R, comm->nodes, comm->nodes == 1 ? "" : "s",
           comm->node_desc);
    printf("  %-12s %14s %14s\n", "collective", "inside a node", "across nodes");
    for (int k = 0; k < COMM_KIND_COUNT; k++) {
        if (k == COMM_LOSS_REDUCE || k == COMM_OTHER) continue; /* a few bytes */
        double in, out;
        comm_split_nodes(comm, (comm_kind)k, bytes[k], &in, &out);
        printf("  %-12s %14s %14s\n", comm_kind_name((comm_kind)k), up_fmt_bytes(a, sizeof a, in),
               up_fmt_bytes(b, sizeof b, out));
    }
    fflush(stdout);
}

/* The two largest of the categories cat (for a refusal's hints). */
static void largest_two(const unsigned long long *cat, int *a, int *b) {
    *a = 0, *b = 1;
    for (int k = 0; k < MEM_COUNT; k++)
        if (cat[k] > cat[*a]) *a = k;
    if (*a == *b) *b = 0;
    for (int k = 0; k < MEM_COUNT; k++)
        if (k != *a && cat[k] > cat[*b]) *b = k;
}

/* A device run: the plan's device memory and the backend's own against this rank's part of the
 * device's free memory (read at start, front_load_device: ranks that share a GPU split it), or
 * --mem-limit when that is lower (*limit). 1 when they fit; 0 with msg the refusal. */
static int device_fits(const report_memory *p, const front_options *o, unsigned long long *limit,
                       char *msg, size_t len) {
    const backend_ops *be = o->mopt.be;
    unsigned long long mem_limit = o->mem_limit, free_b = o->gpu_free;
    int share = o->gpu_share > 1 ? o->gpu_share : 1;
    long T = o->T;
    unsigned long long need = p->device + be->module_bytes();
    *limit = free_b / (unsigned long long)share;
    if (mem_limit && mem_limit < *limit) *limit = mem_limit;
    if (need <= *limit) return 1;
    char shared[96] = "";
    if (share > 1)
        snprintf(shared, sizeof shared,
                 " (for each of the %d ranks that share it: fewer ranks per GPU)", share);
    int a, b;
    largest_two(p->dev_cat, &a, &b);
    char s1[32], s2[32], s3[32], s4[32];
    snprintf(msg, len,
             "the run plans %s of GPU memory but %s %s%s: largest are %s (%s: %s) and %s (%s: %s), "
             "or use a shorter --seq-len than %ld",
             up_fmt_bytes(s1, sizeof s1, (double)need),
             mem_limit && mem_limit == *limit ? "--mem-limit is" : "the GPU has free",
             up_fmt_bytes(s2, sizeof s2, (double)*limit),
             mem_limit && mem_limit == *limit ? "" : shared, mem_category_name((mem_category)a),
             up_fmt_bytes(s3, sizeof s3, (double)p->dev_cat[a]), g_shrink_gpu[a],
             mem_category_name((mem_category)b), up_fmt_bytes(s4, sizeof s4, (double)p->dev_cat[b]),
             g_shrink_gpu[b], T);
    return 0;
}

/* What shrinks a category's host memory on a GPU run. */
static const char *g_shrink_host[MEM_COUNT] = {
    "without --offload-optimizer the fp32 state stays on the GPU",
    "without --offload-optimizer the fp32 state stays on the GPU",
    "without --offload-optimizer the fp32 state stays on the GPU",
    "a lower --offload-host-limit (the rest to the file) or a higher --offload-keep",
    "-",
    "-",
    "-",
    "-",
    "fewer --threads"};

/* A device run's host memory (ordinary and pinned; their peaks added: an upper bound of the two
 * at once) against --host-mem-limit (*limit; 0: none, then it fits). 1 when it fits; 0 with msg
 * the refusal. */
static int host_fits(const report_memory *p, unsigned long long host_limit, long T,
                     unsigned long long *need, char *msg, size_t len) {
    *need = p->host + p->pinned;
    if (!host_limit || *need <= host_limit) return 1;
    unsigned long long cat[MEM_COUNT];
    for (int k = 0; k < MEM_COUNT; k++)
        cat[k] = p->cat[k] - p->dev_cat[k];
    int a, b;
    largest_two(cat, &a, &b);
    char s1[32], s2[32], s3[32], s4[32], s5[32];
    snprintf(msg, len,
             "the run plans %s of host memory (%s of it pinned) but --host-mem-limit is %s: "
             "largest are %s (%s: %s) and %s (%s: %s), or use a shorter --seq-len than %ld",
             up_fmt_bytes(s1, sizeof s1, (double)*need),
             up_fmt_bytes(s2, sizeof s2, (double)p->pinned),
             up_fmt_bytes(s3, sizeof s3, (double)host_limit), mem_category_name((mem_category)a),
             up_fmt_bytes(s4, sizeof s4, (double)cat[a]), g_shrink_host[a],
             mem_category_name((mem_category)b), up_fmt_bytes(s5, sizeof s5, (double)cat[b]),
             g_shrink_host[b], T);
    return 0;
}

/* This machine's physical memory (the host line's yardstick without --host-mem-limit). */
static unsigned long long host_total(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (unsigned long long)pages * (unsigned long long)size : 0;
}

static void print_host_fit(const report_memory *p, unsigned long long host_limit, long T) {
    unsigned long long need;
    char msg[768], s1[32], s2[32], s3[32];
    if (!host_fits(p, host_limit, T, &need, msg, sizeof msg)) {
        printf("host: does not fit: %s\n", msg);
        return;
    }
    unsigned long long total = host_total();
    printf("host: the plan's %s (%s of it pinned) ", up_fmt_bytes(s1, sizeof s1, (double)need),
           up_fmt_bytes(s2, sizeof s2, (double)p->pinned));
    if (host_limit)
        printf("fit in %s (--host-mem-limit)\n", up_fmt_bytes(s3, sizeof s3, (double)host_limit));
    else
        printf("%s this machine's %s (no --host-mem-limit)\n", need <= total ? "fit in" : "exceed",
               up_fmt_bytes(s3, sizeof s3, (double)total));
}

void report_print_fit(const report_memory *p, const front_options *o) {
    const backend_ops *be = o->mopt.be;
    if (!be || be->space != MEM_SPACE_DEVICE) return;
    unsigned long long limit, mem_limit = o->mem_limit;
    long T = o->T;
    char msg[768], s1[32], s2[32], s3[32], sh[64] = "";
    print_host_fit(p, o->host_mem_limit, T);
    if (o->gpu_share > 1)
        snprintf(sh, sizeof sh, " (its share: %d ranks on this GPU)", o->gpu_share);
    if (device_fits(p, o, &limit, msg, sizeof msg))
        printf("GPU (%s): the plan's %s and the backend's %s fit in %s%s\n", be->describe(),
               up_fmt_bytes(s1, sizeof s1, (double)p->device),
               up_fmt_bytes(s2, sizeof s2, (double)be->module_bytes()),
               up_fmt_bytes(s3, sizeof s3, (double)limit),
               mem_limit && mem_limit == limit ? " (--mem-limit)"
               : o->gpu_share > 1              ? sh
                                               : " free");
    else
        printf("GPU (%s): does not fit: %s\n", be->describe(), msg);
    fflush(stdout);
}

void report_check_mem_limit(const report_memory *p, const front_options *o) {
    const backend_ops *be = o->mopt.be;
    unsigned long long limit, mem_limit = o->mem_limit;
    long T = o->T;
    char msg[768];
    if (be && be->space == MEM_SPACE_DEVICE) {
        if (!device_fits(p, o, &limit, msg, sizeof msg)) up_die_all("%s", msg);
        if (!host_fits(p, o->host_mem_limit, T, &limit, msg, sizeof msg)) up_die_all("%s", msg);
        return;
    }
    /* the CPU: all of it is host memory, under the lower of the two limits */
    const char *flag = "--mem-limit";
    if (o->host_mem_limit && (!mem_limit || o->host_mem_limit < mem_limit)) {
        mem_limit = o->host_mem_limit;
        flag = "--host-mem-limit";
    }
    if (mem_limit == 0 || p->peak <= mem_limit) return;
    /* the two largest categories and what shrinks them */
    int a, b;
    largest_two(p->cat, &a, &b);
    char s1[32], s2[32], s3[32], s4[32];
    up_die_all("the run needs %s per rank but %s is %s: largest are %s (%s: try %s) and "
               "%s (%s: try %s), or use a shorter --seq-len than %ld",
               up_fmt_bytes(s1, sizeof s1, (double)p->peak), flag,
               up_fmt_bytes(s2, sizeof s2, (double)mem_limit), mem_category_name((mem_category)a),
               up_fmt_bytes(s3, sizeof s3, (double)p->cat[a]), g_shrink[a],
               mem_category_name((mem_category)b), up_fmt_bytes(s4, sizeof s4, (double)p->cat[b]),
               g_shrink[b], T);
}

void report_write_memory(const char *path, comm_ctx *comm, const report_memory *p, int predicted) {
    /* every figure the max over ranks: the categories, the peaks (all, RSS, offloaded, device,
     * pinned, host), a device's and pinned memory's categories */
    enum {
        G_PEAK = MEM_COUNT,
        G_RSS,
        G_OFF,
        G_DEV,
        G_PIN,
        G_HOST,
        G_DCAT,
        G_PCAT = G_DCAT + MEM_COUNT,
        G_N = G_PCAT + MEM_COUNT
    };
    unsigned long long glob[G_N];
    for (int c = 0; c < MEM_COUNT; c++) {
        glob[c] = p->cat[c];
        glob[G_DCAT + c] = p->dev_cat[c];
        glob[G_PCAT + c] = p->pin_cat[c];
    }
    glob[G_PEAK] = p->peak;
    glob[G_RSS] = p->rss;
    glob[G_OFF] = p->offloaded;
    glob[G_DEV] = p->device;
    glob[G_PIN] = p->pinned;
    glob[G_HOST] = p->host;
    comm_max_u64(comm, glob, G_N);
    if (comm->rank != 0) return;
    json_t *root = json_object(), *cats = json_object();
    json_object_set_new(root, "peak_bytes", json_integer((json_int_t)glob[G_PEAK]));
    json_object_set_new(root, "rss_peak_bytes", json_integer((json_int_t)glob[G_RSS]));
    json_object_set_new(root, "offloaded_peak_bytes", json_integer((json_int_t)glob[G_OFF]));
    for (int c = 0; c < MEM_COUNT; c++)
        json_object_set_new(cats, mem_category_name((mem_category)c),
                            json_integer((json_int_t)glob[c]));
    json_object_set_new(root, "categories", cats);
    if (glob[G_DEV]) { /* a device run: its memory apart */
        json_t *dc = json_object();
        for (int c = 0; c < MEM_COUNT; c++)
            json_object_set_new(dc, mem_category_name((mem_category)c),
                                json_integer((json_int_t)glob[G_DCAT + c]));
        json_object_set_new(root, "device_peak_bytes", json_integer((json_int_t)glob[G_DEV]));
        json_object_set_new(root, "device_categories", dc);
        json_t *pc = json_object();
        for (int c = 0; c < MEM_COUNT; c++)
            json_object_set_new(pc, mem_category_name((mem_category)c),
                                json_integer((json_int_t)glob[G_PCAT + c]));
        json_object_set_new(root, "pinned_peak_bytes", json_integer((json_int_t)glob[G_PIN]));
        json_object_set_new(root, "host_peak_bytes", json_integer((json_int_t)glob[G_HOST]));
        json_object_set_new(root, "pinned_categories", pc);
    }
    json_object_set_new(root, "predicted", json_boolean(predicted));
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    UP_CHECK(text, "json_dumps failed");
    char err[512];
    int rc = up_write_line_atomic(path, text, err, sizeof err);
    free(text);
    if (rc != 0) up_die("%s", err);
}
