/* ckpt.h — training checkpoints: everything needed to continue a run exactly, in a folder of
 * standard files, written in parallel and made visible atomically (DESIGN.md §6.1).
 *
 *   DIR/step-NNNNNNNN/              NNNNNNNN = completed steps
 *       model.safetensors           the weights, F32, HF names (loadable with --init)
 *       optimizer.safetensors       AdamW moments, F32: exp_avg.<HF name>, exp_avg_sq.<HF name>
 *       state.json                  step, schedule, data position, math flags, seed
 *       config.json                 the model config
 *
 * The data section of each safetensors file is the full parameter layout (tensors in table
 * order), so every rank writes its FSDP ranges in place with pwrite (no gather) and, on resume,
 * reads only the ranges it owns under whatever layout the new run has. A checkpoint is written
 * under DIR/.step-NNNNNNNN.tmp and renamed once every rank has synced its part: a folder named
 * step-NNNNNNNN is complete by construction. Older ones beyond --ckpt-keep are deleted only after
 * the rename. */
#ifndef UP_CKPT_H
#define UP_CKPT_H

#include "comm/comm.h"
#include "io/config.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

/* What a run must share with the checkpoint it resumes: the mathematics of the run. The split
 * of the global batch over replicas and micro-batches is not part of it. */
typedef struct {
    long step;         /* completed steps */
    long steps;        /* --steps: the schedule's length */
    long T;            /* --seq-len */
    long global_batch; /* sequences per step: replicas x --grad-accum */
    long warmup;
    double lr, min_lr_frac, weight_decay, beta1, beta2, adam_eps, grad_clip;
    uint64_t seed;     /* of the random init; training itself draws no random numbers */
} ckpt_state;

/* Newest complete checkpoint in dir: returns its step and writes dir/step-N into path; -1 when
 * there is none (or dir does not exist). */
long ckpt_find_latest(const char *dir, char *path, size_t len);

/* The step folder behind a --ckpt flag: path itself when it holds a state.json, else the newest
 * complete checkpoint in it. 0, or -1 with a message (neither). */
int ckpt_resolve(const char *ckpt, char *path, size_t len, char *err, size_t errlen);

/* Writes the checkpoint of st->step into dir, keeping the newest keep of them (stage: a buffer of
 * ckpt_stage_bytes()). Collective: every
 * rank writes its owned ranges when the model is sharded, else rank 0 writes. A failure on any
 * rank (full disk, permissions) stops every rank with the message; the checkpoints already there
 * are untouched and the partial one is removed. Returns the bytes written (all files). */
double ckpt_write(model *m, comm_ctx *comm, const char *dir, const ckpt_state *st,
                  const model_config *cfg, int keep, void *stage);
/* Bytes of the staging buffer ckpt_write needs (stage: any alignment; allocate it with the rest
 * of the run, so the memory plan counts it). */
size_t ckpt_stage_bytes(void);

/* Reads path's state.json and config.json and compares them with the run's (run->step is
 * ignored); a difference stops every rank with one line naming it. Returns the checkpoint's
 * completed steps. Every rank calls it (same files, same verdict). */
long ckpt_check(const char *path, const ckpt_state *run, const model_config *cfg);

/* The state.json half of ckpt_check, pure (no files, no MPI; for tests and fuzzing): parses the
 * n bytes of text and compares them with run. CKPT_STATE_OK with *step = the checkpoint's
 * completed steps; CKPT_STATE_UNREADABLE (invalid JSON or no integer "step") or
 * CKPT_STATE_DIFFERS (a missing or different field) with one line in msg. */
enum { CKPT_STATE_OK = 0, CKPT_STATE_UNREADABLE = 1, CKPT_STATE_DIFFERS = 2 };
int ckpt_state_parse(const char *text, size_t n, const ckpt_state *run, long *step, char *msg,
                     size_t len);

/* Loads weights and both moments, this rank's owned ranges only. Returns bytes read by this
 * rank. A bad file stops the job with its message. */
double ckpt_load(model *m, const char *path);

#endif
