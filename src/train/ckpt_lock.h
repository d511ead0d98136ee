/* ckpt_lock.h — one training job per checkpoint folder: rank 0 holds an flock on DIR/.lock for
 * the job's life, so a second job on the same --ckpt-dir is refused with one line naming the
 * first (pid and host) instead of failing later with a rename or fsync error (DESIGN.md §6.1).
 * The kernel releases the lock when the process ends, however it ends: a lock is never stale.
 * The file stays behind (it is not a checkpoint: no step-N name, never pruned); removing it
 * while a job runs would let a second job lock a new file, so it is never removed. */
#ifndef UP_CKPT_LOCK_H
#define UP_CKPT_LOCK_H

#include <stddef.h>

/* Name of the lock file inside a checkpoint folder. */
#define CKPT_LOCK_NAME ".lock"

/* Takes the lock of dir for the rest of the process (the descriptor stays open) and writes this
 * process's pid and host into the file. 0: held, or the file system does not support flock
 * (ENOLCK, EOPNOTSUPP: one warning on stderr, the run goes on unprotected). -1 with a one-line
 * message in err: another process holds it, or the file cannot be created. Rank 0 only; not
 * thread-safe; a second call on the same dir returns 0. */
int ckpt_lock_take(const char *dir, char *err, size_t errlen);

#endif
