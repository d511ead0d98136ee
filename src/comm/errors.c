/* errors.c — what a failed MPI call says, and how a stop reaches every rank (comm_int.h). */
#include "comm/comm_int.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

void comm_mpi_failed(const char *file, int line, const char *func, const char *call, int rc) {
    char phase[96], stack[MPI_MAX_ERROR_STRING], cls[MPI_MAX_ERROR_STRING], routine[64];
    int len = 0, ec = 0;
    watchdog_phase_describe(phase, sizeof phase);
    MPI_Error_string(rc, stack, &len);
    MPI_Error_class(rc, &ec);
    MPI_Error_string(ec, cls, &len);
    snprintf(routine, sizeof routine, "%.*s", (int)strcspn(call, "("), call);
    /* the stack's last line that says something ("MPIR_Bcast_intra_binomial(174): Failure
     * during collective"; the first line repeats the class) */
    const char *last = NULL;
    char *p = strchr(stack, '\n');
    while (p) {
        char *ln = p + 1, *nl = strchr(ln, '\n'), *say;
        if (nl) *nl = 0;
        if ((say = strstr(ln, ": ")) != NULL && say[2]) last = say + 2;
        p = nl;
    }
    up_fatal(file, line, "%s%s%s in %s failed: %s%s%s%s", phase, phase[0] ? ": " : "", routine,
             func, cls, last ? " (" : "", last ? last : "", last ? ")" : "");
}

/* MPI is up and not finalized: there is a job to stop. */
static int mpi_live(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

static void stop_abort_all(int code) {
    if (!mpi_live()) return;
    /* give the launcher a moment to forward this rank's message before the abort tears the job
     * down (otherwise the line can be lost) */
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    MPI_Abort(MPI_COMM_WORLD, code);
}

static void stop_finalize(void) {
    if (mpi_live()) MPI_Finalize();
}

void comm_install_stop_hooks(void) {
    up_set_stop_hooks(&(up_stop_hooks){stop_abort_all, stop_finalize});
}
