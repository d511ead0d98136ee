/* setup.h — what the job front ends (`upipe train`, `upipe eval`) share before anything large is
 * allocated: threads, the checks of the config, layout, data and options (every rank, the same
 * verdict: each failure stops every rank with one line, up_die_all), and output paths. */
#ifndef UP_TRAIN_SETUP_H
#define UP_TRAIN_SETUP_H

#include "io/config.h"
#include "io/shard.h"
#include "model/model.h"

#include <stddef.h>

/* Threads per rank: requested (> 0), else OMP_NUM_THREADS, else this node's cores over its ranks;
 * set for OpenMP and BLAS. Rank 0 warns when the node has more threads than cores. Collective
 * (counts the ranks on this node). Returns the threads. */
int setup_threads(int requested, int rank);
/* 0 when path can be created or replaced: its folder exists and is writable, and path itself is
 * not a folder; else -1 with a message naming flag. */
int setup_check_writable(const char *flag, const char *path, char *err, size_t len);
/* Loads config.json and checks the layout (T tokens over P of world ranks) and the separator
 * (doc_sep < 0: none). */
void setup_config(model_config *cfg, const char *path, long T, int P, int world, long doc_sep);
/* Opens a token shard for a vocabulary of V (flag names it in messages: "--data"), and installs
 * the one-line SIGBUS message for a mapped file truncated under the job. */
void setup_shard(token_shard *s, const char *flag, const char *path, int V);
/* Warnings on rank 0 (stderr, one line each; the job goes on): a window T longer than the
 * config's max_position_embeddings (positions the model was never trained at, with the rope
 * scaling in force), and a doc_sep (>= 0) that never occurs in the shard at path (no document
 * boundary: the flag does nothing). */
void setup_warn_window(const model_config *cfg, long T, const token_shard *s, const char *path,
                       long doc_sep, int rank);
/* Fills the default tile sizes (a flag without a size: hidden_size tokens) and checks the memory
 * and UPipe options against the config and P. */
void setup_model_options(const model_config *cfg, int P, model_options *mopt);

/* The process's own resident bytes before anything large is allocated (runtime, MPI, thread
 * stacks, OpenBLAS's buffers made resident as the widest product of this model at T_loc tokens
 * per rank will), for the `runtime` memory category; the peak RSS starts over from here.
 * Call after the threads are set. */
size_t setup_runtime(const model_config *cfg, int T_loc);

#endif
