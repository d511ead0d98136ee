/* harness.h — one counter, one check and one verdict for the unit tests. Each tests/unit/test_*.c
 * is its own program, so the state below is static to it.
 *
 *   CHECK(cond, fmt, ...)     counts one check; a failure prints "FAIL file:line: message"
 *   harness.verbose = 1       passing checks print "PASS message" too
 *   harness.print = 0         print nothing (MPI ranks other than 0)
 *   harness_finish(name)      prints "name: N passed, M failed"; returns the exit status
 *   harness_finish_mpi(name, comm)   the same after agreeing on the failure count (max over the
 *                             ranks of comm), so every rank exits with one verdict; needs
 *                             <mpi.h> included before this header. Collective.
 *   harness_init_mpi(&argc, &argv, &rank, &R)   MPI started as upipe starts it (comm_mpi_init:
 *                             the thread level checked, the rank in check messages), verbose
 *                             checks printed by rank 0 only (every verdict is agreed with
 *                             harness_finish_mpi); needs <mpi.h> too. */
#ifndef UP_TEST_HARNESS_H
#define UP_TEST_HARNESS_H

#include <stdarg.h>
#include <stdio.h>

static struct {
    int pass, fail;
    int verbose; /* print passing checks too */
    int print;   /* print anything at all */
} harness = {0, 0, 0, 1};

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static inline void
harness_check(int ok, const char *file, int line, const char *fmt, ...) {
    if (ok)
        harness.pass++;
    else
        harness.fail++;
    if (!harness.print || (ok && !harness.verbose)) return;
    if (ok)
        printf("PASS ");
    else
        printf("FAIL %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

#define CHECK(cond, ...) harness_check(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

static inline int harness_finish(const char *name) {
    if (harness.print) printf("%s: %d passed, %d failed\n", name, harness.pass, harness.fail);
    fflush(stdout);
    return harness.fail ? 1 : 0;
}

#ifdef MPI_VERSION
#include "comm/comm.h"

static inline void harness_init_mpi(int *argc, char ***argv, int *rank, int *R) {
    comm_mpi_init(argc, argv, rank, R); /* as upipe starts: FUNNELED, the rank in messages */
    harness.print = *rank == 0;
    harness.verbose = 1;
}

static inline int harness_finish_mpi(const char *name, MPI_Comm comm) {
    int fail = harness.fail;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, comm);
    harness.fail = fail;
    return harness_finish(name);
}
#endif

#endif
