/* report.h — the memory side of `upipe train` and `upipe eval`: the plan printed by --dry-run,
 * the --mem-limit refusal, and the JSON memory report (--mem-report, DESIGN.md §5). */
#ifndef UP_TRAIN_REPORT_H
#define UP_TRAIN_REPORT_H

#include "comm/comm.h"
#include "core/mem.h"
#include "io/config.h"
#include "kernels/backend.h"
#include "train/front.h"

/* Per-category bytes of one rank: the plan (captured in mem plan mode) or the measured peaks. */
typedef struct {
    unsigned long long cat[MEM_COUNT], peak, offloaded;
    unsigned long long rss;                        /* peak RSS; 0 for a plan */
    unsigned long long device, dev_cat[MEM_COUNT]; /* the device's peak, and per category */
    unsigned long long pinned, pin_cat[MEM_COUNT]; /* pinned host memory's, the same */
    unsigned long long host;                       /* ordinary host memory's peak */
} report_memory;

/* The counters' peaks now (per category, total, offloaded); rss left 0. */
report_memory report_capture(void);
/* Prints the plan per category on stdout (call on rank 0). T_loc = T / P; dt, the run's --dtype,
 * is named in the header. */
void report_print_plan(const report_memory *p, long T, const model_config *c, int P, int T_loc,
                       mem_dtype dt);
/* --dry-run's communication table (rank 0): the bytes per step of each kind of collective
 * (model_comm_per_step) inside a node and across nodes (comm_split_nodes). */
void report_print_comm(const double bytes[COMM_KIND_COUNT], const comm_ctx *comm, int micro);
/* When --mem-limit is set and the plan's peak exceeds it, stops every rank (up_die_all) with the
 * two largest categories and the flags that shrink them. On a device backend (o->mopt.be) the
 * plan's device memory and the backend's own are held against the device's free memory, or
 * --mem-limit when lower, and the plan's host memory (ordinary and pinned) against
 * --host-mem-limit. Call on every rank. */
void report_check_mem_limit(const report_memory *p, const front_options *o);
/* --dry-run on a device backend (rank 0; nothing for the CPU's): one line each for the device and
 * the host, whether the plan's memory fits (the device's free memory or --mem-limit when lower;
 * --host-mem-limit, or this machine's memory without it), and if not, what to change (the
 * refusal a run would give). */
void report_print_fit(const report_memory *p, const front_options *o);
/* Writes the JSON memory report to path (atomically, from rank 0), each figure the max over
 * ranks; predicted: 1 for a plan (no RSS), 0 for measured peaks. Collective over comm. */
void report_write_memory(const char *path, comm_ctx *comm, const report_memory *p, int predicted);

#endif
