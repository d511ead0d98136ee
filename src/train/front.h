/* front.h — the flags `upipe train` and `upipe eval` share: the model and data, the element
 * type, context parallelism, the memory techniques, the memory plan, the threads and the outputs
 * every run has (DESIGN.md §6). One table, front_table, which each command parses and prints
 * with its own table of the rest (core/flags.h): a flag shared here has one name, one meaning,
 * one default and one validation in both. */
#ifndef UP_TRAIN_FRONT_H
#define UP_TRAIN_FRONT_H

#include "comm/comm.h"
#include "core/flags.h"
#include "model/model.h"

/* The shared options; each command's options hold them as their member `front`. */
typedef struct {
    const char *config;     /* --config: HF config.json */
    const char *data;       /* --data: the token shard */
    const char *loss_mask;  /* --loss-mask: a mask shard aligned with --data; NULL: none */
    const char *mem_report; /* --mem-report: the JSON memory report; NULL: none */
    const char *trace;      /* --trace: a Chrome / Perfetto JSON trace of the run; NULL: none */
    long T;                 /* --seq-len */
    long doc_sep;           /* --doc-sep: the token id that opens a document; -1: none */
    int cp;                 /* --cp: context-parallel degree; 0: all ranks */
    int threads;            /* --threads: 0: default */
    int dry_run;            /* --dry-run */
    int quiet;              /* --quiet */
    unsigned long long mem_limit;  /* --mem-limit: bytes, 0: none (a device run: the device's) */
    const char *device;            /* --device: cpu (default) or cuda */
    unsigned long long device_mem; /* --device-mem: a planned GPU's free bytes; 0: the GPU's */
    unsigned long long host_mem_limit; /* --host-mem-limit: host bytes (ordinary and pinned)
                                          per rank, 0: none */
    model_options mopt; /* --checkpoint, --offload, --tile-mlp, --tile-loss, --upipe-heads,
                           --[no-]upipe-overlap, --fsdp, --dtype; docs from --doc-sep */
    /* a device run (front_load_device): the least free memory of the job's GPUs, read once every
     * rank had started its backend, and the ranks that share this rank's GPU (1: its own) */
    unsigned long long gpu_free;
    int gpu_share;
} front_options;

/* The shared table, storing into o. Its help texts are training's; a command words a flag its own
 * way on its help page (flag_help_line.text). */
flag_table front_table(front_options *o);
/* After parsing: the fields derived from the flags (mopt.docs from --doc-sep). */
void front_finish(front_options *o);
/* Stops every rank when --data is missing, with the command that makes a shard. */
void front_require_data(const front_options *o);
/* Stops every rank unless all ranks of c chose the same kernels (the kernels line, its measured
 * ratios left out): the choices that depend on measurement (blas_core.c, calibrate.c) set a
 * run's bits, so ranks that differed would break the exactness across layouts. Collective. */
void front_check_kernels(comm_ctx *c);
/* Loads the --device backend on every rank (mopt.be) and refuses, on every rank together, a
 * backend that does not load or the flags it does not run yet (one line, exit status 1). With
 * several ranks on a device, their exchanges are staged through host memory (c->staged: DESIGN.md
 * §11 "Ranks on a GPU"; UPIPE_COMM_STAGE=1 stages a CPU run's the same way), and gpu_free and
 * gpu_share say what each rank may plan on its GPU. Collective. */
void front_load_device(front_options *o, comm_ctx *c);
/* Ends what front_load_device started beside comm (the NCCL communicators), before comm_free. */
void front_release_device(front_options *o, comm_ctx *c);

#endif
