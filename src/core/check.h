/* check.h — always-on checks and fatal errors.
 *
 * Four ways to stop, for two kinds of failure. An internal invariant or a library call failed:
 *  - UP_CHECK(cond, fmt, ...): prints "[rank r] file:line: message" and stops every rank
 *    (MPI_Abort once MPI is up, through the stop hooks below).
 * A user mistake or bad input (a flag, a file, a shape), told in a sentence that says what to do:
 *  - up_die(fmt, ...): found by one rank. Prints "upipe: error: message" and stops every rank.
 *  - up_die_all(fmt, ...): the same mistake found by every rank at once (collective validation):
 *    rank 0 prints the message once, every rank exits non-zero without MPI_Abort noise.
 *  - up_die_agreed(msg): a failure some ranks found, after they agreed on it (comm_any).
 * None of these return. Never use assert() for input validation. */
#ifndef UP_CHECK_H
#define UP_CHECK_H

#include <stddef.h>

#if defined(__GNUC__)
#define UP_NORETURN __attribute__((noreturn))
#define UP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define UP_NORETURN
#define UP_PRINTF(a, b)
#endif

UP_NORETURN void up_fatal(const char *file, int line, const char *fmt, ...) UP_PRINTF(3, 4);
UP_NORETURN void up_die(const char *fmt, ...) UP_PRINTF(1, 2);
UP_NORETURN void up_die_all(const char *fmt, ...) UP_PRINTF(1, 2);
/* After a collective verdict that some rank failed: ranks with a message (msg != NULL) print it,
 * every rank exits non-zero without MPI_Abort. Call on every rank. */
UP_NORETURN void up_die_agreed(const char *msg);

#define UP_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) up_fatal(__FILE__, __LINE__, __VA_ARGS__);                                    \
    } while (0)

/* Formats "<label>: <message>" into err (for functions that return -1 with a message) and
 * returns -1. label == NULL: the message alone (it names its subject itself). The one way a
 * library function fills its err buffer. */
int up_errf(char *err, size_t errlen, const char *label, const char *fmt, ...) UP_PRINTF(4, 5);

/* What to do before a stop ends the process (up_die*, UP_CHECK, the watchdog): fn runs once, on
 * the stopping thread (the trace closes its file there; trace.h). NULL: nothing. up_run_on_stop
 * runs it (once over the process, whichever thread comes first); the stops above call it. */
void up_on_stop(void (*fn)(void));
void up_run_on_stop(void);

/* Rank used in messages; set by the communication layer once MPI is up (0 before). */
void up_set_rank(int rank, int world_size);
int up_rank(void);

/* How a stop reaches the other ranks, given by the communication layer once MPI is up
 * (comm_mpi_init); core itself knows nothing of MPI. abort_all ends every rank of the job with
 * code (MPI_Abort; UP_CHECK and up_die, with more than one rank); finalize ends this rank's part
 * when every rank stops together (MPI_Finalize; up_die_all, up_die_agreed). Each returns at once
 * when there is nothing to end (MPI not up, or finalized already). NULL hooks, or none given:
 * a stop is a plain exit. */
typedef struct {
    void (*abort_all)(int code);
    void (*finalize)(void);
} up_stop_hooks;
void up_set_stop_hooks(const up_stop_hooks *hooks);

/* Size arithmetic with overflow checks (T*T overflows int early; T*V*4 overflows 32 bits). */
size_t up_mul(size_t a, size_t b);
size_t up_mul3(size_t a, size_t b, size_t c);
size_t up_add(size_t a, size_t b);

/* Parses a size: "6GiB", "512MiB", "1.5GB", "100K", "1000000" (bytes). 0, or -1 when s is not
 * one (or is 0, or overflows). */
int up_parse_bytes(const char *s, unsigned long long *out);

/* Formats a byte count as "1.50 GiB" into buf (returns buf). */
char *up_fmt_bytes(char *buf, size_t len, double bytes);

#endif
