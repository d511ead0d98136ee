/* ckpt.h — training checkpoints: everything needed to continue a run exactly, in a folder of
 * standard files, written in parallel and made visible atomically (DESIGN.md §6.1).
 *
 *   DIR/step-NNNNNNNN/              NNNNNNNN = completed steps
 *       model.safetensors           the weights, F32, HF names (loadable with --init)
 *       optimizer.safetensors       AdamW moments, F32: exp_avg.<HF name>, exp_avg_sq.<HF name>
 *       state.json                  format and version, step, schedule, data position, math
 *                                   flags, seed, the data read (--data, --doc-sep, --loss-mask)
 *                                   and each data file's size and CRC-32C
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
#include "core/check.h"
#include "io/config.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

#define CKPT_FORMAT "upipe-checkpoint"
#define CKPT_VERSION 2 /* 2: file checksums and the data record; 1 had neither */
enum { CKPT_PATH_LEN = 1024 };

/* A file the run reads, as state.json records it: enough to tell the same file at another path
 * from a different file without reading it whole. */
typedef struct {
    char path[CKPT_PATH_LEN];    /* as given on the command line */
    char abspath[CKPT_PATH_LEN]; /* realpath */
    uint64_t bytes;              /* the file's size */
    uint32_t sample;             /* CRC-32C of its first, middle and last 64 KiB (header in) */
} ckpt_file_id;

/* The data of a run: what the steps read besides the model. */
typedef struct {
    ckpt_file_id shard; /* --data */
    uint64_t tokens;    /* its token count */
    long doc_sep;       /* --doc-sep; -1: none */
    int has_mask;       /* --loss-mask given */
    ckpt_file_id mask;  /* --loss-mask */
} ckpt_data;

/* What a run must share with the checkpoint it resumes: the mathematics of the run and its data.
 * The split of the global batch over replicas and micro-batches is not part of it. */
typedef struct {
    long step;         /* completed steps */
    long steps;        /* --steps: the schedule's length */
    long T;            /* --seq-len */
    long global_batch; /* sequences per step: replicas x --grad-accum */
    long warmup;
    double lr, min_lr_frac, weight_decay, beta1, beta2, adam_eps, grad_clip;
    uint64_t seed; /* of the random init; training itself draws no random numbers */
    ckpt_data data;
} ckpt_state;

/* The two data files of a checkpoint, with their size and the CRC-32C of the whole file. */
enum { CKPT_MODEL = 0, CKPT_OPTIMIZER = 1, CKPT_NDATA = 2 };
extern const char *const CKPT_DATA_FILES[CKPT_NDATA];
typedef struct {
    uint64_t bytes;
    uint32_t crc32c;
} ckpt_file_sum;

/* What state.json says beyond the run's mathematics. */
typedef struct {
    long step;
    ckpt_file_sum files[CKPT_NDATA];
    ckpt_data data;
} ckpt_record;

/* Newest complete checkpoint in dir: returns its step and writes dir/step-N into path; -1 when
 * there is none (or dir does not exist). */
long ckpt_find_latest(const char *dir, char *path, size_t len);

/* The step folder behind a --ckpt flag: path itself when it holds a state.json, else the newest
 * complete checkpoint in it. 0, or -1 with a message (neither). */
int ckpt_resolve(const char *ckpt, char *path, size_t len, char *err, size_t errlen);

/* Writes the checkpoint of st->step into dir, keeping the newest keep of them (stage: a buffer of
 * ckpt_stage_bytes()). Collective: every
 * rank writes its owned ranges when the model is sharded, else rank 0 writes, and computes their
 * CRC-32C as it writes them; rank 0 combines them and writes state.json last. A failure on any
 * rank (full disk, permissions) stops every rank with the message; the checkpoints already there
 * are untouched and the partial one is removed. Returns the bytes written (all files). */
double ckpt_write(model *m, comm_ctx *comm, const char *dir, const ckpt_state *st,
                  const model_config *cfg, int keep, void *stage);
/* Bytes of the staging buffer ckpt_write needs (stage: any alignment; allocate it with the rest
 * of the run, so the memory plan counts it). */
size_t ckpt_stage_bytes(void);

/* Reads path's state.json and config.json, validates the state (ckpt_state_parse with the step
 * of the folder's name), compares both with the run's (run->step is ignored) and checks that the
 * data files have the recorded sizes; a problem stops every rank with one line naming it. A
 * different --data, --doc-sep or --loss-mask is refused unless data_changed (then one line says
 * so); the same data at a new path only gets a note. verbose: print those lines (rank 0). Fills
 * rec (the checksums ckpt_load verifies) and returns the checkpoint's completed steps. Every rank
 * calls it (same files, same verdict). */
long ckpt_check(const char *path, const ckpt_state *run, const model_config *cfg, int data_changed,
                int verbose, ckpt_record *rec);

/* state.json as text, from the state, the data files' checksums and the writer's layout
 * (informational). malloc'd. */
char *ckpt_state_json(const ckpt_state *st, const ckpt_file_sum *files, int ranks, int cp,
                      int accum, int fsdp);

/* The state.json half of ckpt_check, pure (no files, no MPI; for tests and fuzzing): parses the
 * n bytes of text, checks every field's presence and type (integers may be written 4.0, not
 * 4.5), the format and version, and that step is a count in [0, steps] equal to folder_step
 * (-1: not checked) and to next_sequence / global_batch; then, when run is not NULL, compares the
 * run's mathematics. CKPT_STATE_OK with rec filled; else one line in msg (what is wrong, no
 * advice): CKPT_STATE_UNREADABLE (not JSON, a field missing, of a wrong type or out of range),
 * CKPT_STATE_VERSION (no "format" of upipe or another "version": an older upipe wrote it),
 * CKPT_STATE_DIFFERS (a field differs from run's). */
enum {
    CKPT_STATE_OK = 0,
    CKPT_STATE_UNREADABLE = 1,
    CKPT_STATE_DIFFERS = 2,
    CKPT_STATE_VERSION = 3
};
int ckpt_state_parse(const char *text, size_t n, const ckpt_state *run, long folder_step,
                     ckpt_record *rec, char *msg, size_t len);

/* One line naming the first difference of model configs a (the checkpoint's) and b (the run's);
 * 0 if none. Pure. */
int ckpt_config_diff(const model_config *a, const model_config *b, char *msg, size_t len);

/* Compares the data a checkpoint was trained on (was) with the run's (now), pure: CKPT_DATA_SAME,
 * CKPT_DATA_MOVED (the same sizes and samples at another path; msg says which file moved) or
 * CKPT_DATA_DIFFERS (msg names the first difference). */
enum { CKPT_DATA_SAME = 0, CKPT_DATA_MOVED = 1, CKPT_DATA_DIFFERS = 2 };
int ckpt_data_diff(const ckpt_data *was, const ckpt_data *now, char *msg, size_t len);

/* The identity of a file of bytes bytes mapped at map (given on the command line as path). */
void ckpt_file_identify(ckpt_file_id *id, const char *path, const void *map, size_t bytes);

/* Loads weights and both moments, this rank's owned ranges only, and verifies each file's
 * CRC-32C in rec over what the ranks read (no second read: the placed CRCs of the ranges are
 * XOR-reduced when the model is sharded). A bad file stops every rank with its message.
 * Returns bytes read by this rank. Collective. */
double ckpt_load(model *m, comm_ctx *comm, const char *path, const ckpt_record *rec);

/* For readers outside a run (export, eval): path's state.json validated (no run to compare) into
 * rec. 0, or -1 with a message saying what is wrong and what to do. */
int ckpt_read_record(const char *path, ckpt_record *rec, char *err, size_t errlen);
/* Streams data file k of the checkpoint at path and compares its size and CRC-32C with rec. 0, or
 * -1 with a message naming the file and what to do. */
int ckpt_verify_file(const char *path, int k, const ckpt_record *rec, char *err, size_t errlen);

/* snprintf for paths and messages of ckpt.c and ckpt_state.c (paths are checked against
 * CKPT_PATH_MAX at start-up; messages are cut, which is harmless). */
void ckpt_fmt(char *buf, size_t len, const char *f, ...) UP_PRINTF(3, 4);

#endif
