/* errors.c — what a failed MPI call says (comm_int.h). */
#include "comm/comm_int.h"

#include <stdio.h>
#include <string.h>

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
