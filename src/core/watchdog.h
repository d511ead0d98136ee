/* watchdog.h — a job that hangs says where and stops, instead of spinning forever.
 *
 * A thread per rank watches the main thread's progress marks: the entry and exit of every MPI
 * call (comm.c marks them with the calling function and the MPI routine), the end of every
 * step, and ticks of computation (each attention task, each layer). When no mark came for longer than the limit — max(floor, 10 x the longest step so far) —
 * it prints one line naming the step, what the rank is waiting in and for how long, and ends the
 * process with status 1; mpiexec then stops the other ranks (their own watchdogs fire too when
 * they wait on the stalled one). */
#ifndef UP_WATCHDOG_H
#define UP_WATCHDOG_H

/* Starts the watchdog with this floor in seconds (<= 0: not started). */
void watchdog_start(double floor_s);
void watchdog_stop(void);
/* Progress marks of the main thread: an MPI call entered (where: the calling function, what: the
 * MPI routine; both static strings) and left; a step finished after step_s seconds. Cheap. */
void watchdog_enter(const char *where, const char *what);
void watchdog_leave(void);
void watchdog_step(long step, double step_s);
/* Computation goes on (the attention kernels' tasks, the layers): a step of hours at long T is
 * progress, not a hang. A stalled rank makes no ticks; a rank inside MPI ignores them. */
void watchdog_tick(void);

#endif
