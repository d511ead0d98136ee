/* watchdog.h — a job that hangs says where and stops, instead of spinning forever; a healthy job,
 * however slow its host, is never stopped.
 *
 * A thread per rank watches the main thread's progress marks: the entry and exit of every MPI
 * call (comm marks them with the calling function and the MPI routine), the phases of the run
 * (start-up, each step, validation, a checkpoint write, the end) and ticks of computation (each
 * attention task, each layer and tile). The time since the last mark is judged by the phase:
 *
 *   - a step after this process's first one: any wait, in MPI or in computation, longer than
 *     max(floor, 10 x the longest step after the first), or in the second step, before there is
 *     one, max(floor, 10 x the first step), is a hang. The first step is left out once a later
 *     one is measured: it pays one-time costs (MPI connects its endpoints lazily on the first
 *     collectives; the buffers' first page faults), and 10 x those made a lost link wait 25.6 s
 *     under a floor of 3 s after a first step of 2.5 s;
 *   - start-up (allocation, loading), the first step (its page faults), validation, checkpoint
 *     writes and the end of the run: computation and I/O are never judged (nothing measured says
 *     how long they may take); a wait inside MPI is a hang after max(floor, 10 x the longest step
 *     (the first included), 10 x the longest earlier run of the same phase, or
 *     WATCHDOG_UNMEASURED_S when there was none).
 *
 * A rank stalled in computation thus shows as its peers' wait in a collective. On a hang in a
 * blocking MPI call or in computation the thread prints one line naming the phase and step, what
 * it waits in, for how long and the limit, and ends the process with status 1; mpiexec then stops
 * the other ranks. A wait the main thread polls (comm's non-blocking collectives completed by
 * MPI_Test in a loop) is left to the main thread, which can still call MPI and find out which peer
 * does not answer: the thread only flags it (watchdog_overdue), and stops the process itself when
 * the main thread has not done so WATCHDOG_POLL_GRACE_S later. */
#ifndef UP_WATCHDOG_H
#define UP_WATCHDOG_H

#include <stddef.h>

/* A wait in MPI in a phase nothing has measured yet (start-up, the first step, the first
 * checkpoint or validation) is judged against this many seconds at least: NCCL's default
 * collective timeout, long enough for a peer that loads, allocates or writes at disk speed. */
#define WATCHDOG_UNMEASURED_S 600.0

/* How long past the limit a polled wait is left to the main thread (its probes of the peers, up to
 * comm.h's COMM_PROBE_S, and the stop) before the watch thread stops the process itself. */
#define WATCHDOG_POLL_GRACE_S 5.0

typedef enum {
    WATCHDOG_STARTUP,    /* allocation, loading or initialising the weights */
    WATCHDOG_STEP,       /* forward, backward, reduction and update */
    WATCHDOG_VALIDATION, /* a validation pass between steps */
    WATCHDOG_CHECKPOINT, /* writing a checkpoint */
    WATCHDOG_END,        /* writing the weights and reports, freeing */
    WATCHDOG_NPHASES
} watchdog_phase;

/* Starts the watchdog with this floor in seconds (<= 0: not started), in WATCHDOG_STARTUP. */
void watchdog_start(double floor_s);
void watchdog_stop(void);
/* The main thread enters phase p belonging to step (0-based: the step being taken, or the one just
 * finished for validation and checkpoints). Ends the previous phase, whose duration is recorded. */
void watchdog_phase_enter(watchdog_phase p, long step);
/* Progress marks of the main thread: an MPI call entered (where: the calling function, what: the
 * MPI routine; both static strings) and left. Cheap. */
void watchdog_enter(const char *where, const char *what);
void watchdog_leave(void);
/* The main thread waits for a GPU (the CUDA backend's synchronisations, through backend.h's
 * set_wait_hooks): what names the op it waits for (e.g. "the backward at layer 3"; the caller's
 * buffer, unchanged until watchdog_leave). Judged as computation (a hung kernel in a step after
 * the first is named with its op; before that a long first step is never taken for a hang). */
void watchdog_enter_device(const char *what);
/* The same for a wait the main thread completes by testing in a loop: past its limit the thread
 * flags it instead of stopping the process. watchdog_overdue, cheap enough for every turn of the
 * loop: 1 when the wait entered last has passed its limit (idle: seconds since it began, limit:
 * the limit), else 0. watchdog_leave ends it. */
void watchdog_enter_polled(const char *where, const char *what);
int watchdog_overdue(double *idle, double *limit);
/* The main thread found every peer of its overdue polled wait alive and waits on: a fresh mark for
 * the same wait, judged against max(its limit, at_least) (the time a peer needs to name the rank
 * it waits for itself), then flagged again by watchdog_overdue. */
void watchdog_wait_again(double at_least);
/* Computation goes on (the attention kernels' tasks, the layers): a step of hours at long T is
 * progress, not a hang. A stalled rank makes no ticks; a rank inside MPI ignores them. */
void watchdog_tick(void);

/* The floor the watchdog runs with (--watchdog; 0: not running), for a message. */
double watchdog_floor(void);

/* Where the run is, for a message: "step 5", "the checkpoint after step 4", ... into buf; an
 * empty string when the watchdog is not running (--watchdog 0). */
void watchdog_phase_describe(char *buf, size_t len);

/* The verdict of the watch thread, pure (for tests): seconds a wait in phase p may last (in_mpi:
 * inside an MPI call), given the floor, the duration of this process's first step (0: not
 * finished) and the longest finished run of each phase (0: none yet), where
 * longest[WATCHDOG_STEP] is the longest step after the first. Returns the limit; the wait is a
 * hang when it lasts longer. A negative limit: the wait is not judged. */
double watchdog_limit(watchdog_phase p, int in_mpi, double floor_s, double first_step,
                      const double longest[WATCHDOG_NPHASES]);

#endif
