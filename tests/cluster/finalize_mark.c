/* finalize_mark.c — preloaded into the ranks of a cluster test (LD_PRELOAD, tests/cluster/job.sh):
 * MPI_Finalize first leaves a file UPIPE_FINALIZE_DIR/rank.<world rank>, so that the test knows
 * every rank finished its work. MPICH 4.0.2's ch4:ucx can deadlock inside MPI_Finalize across
 * nodes (a rank waits in ucp_disconnect_nb for a peer already in the PMI barrier;
 * pmodels/mpich#6596, fixed in later MPICH), and job.sh ends such a job once every rank is
 * there. Then PMPI_Finalize as usual. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int MPI_Finalize(void) {
    const char *dir = getenv("UPIPE_FINALIZE_DIR");
    int rank = -1;
    if (dir && PMPI_Comm_rank(MPI_COMM_WORLD, &rank) == MPI_SUCCESS) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rank.%d", dir, rank);
        FILE *f = fopen(path, "w");
        if (f) fclose(f);
    }
    fflush(stdout);
    fflush(stderr);
    return PMPI_Finalize();
}
