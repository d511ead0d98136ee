/* bench_alltoall — a plain MPI_Alltoall of a given block size, the yardstick of the Ulysses
 * exchange's achieved bandwidth. usage: mpiexec -n P bench_alltoall BLOCK_FLOATS [reps]
 * Prints (rank 0) one JSON line: bytes each rank sends per call and GB/s (median). */
#include "bench_util.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    long n = argc > 1 ? atol(argv[1]) : 1 << 20;
    int reps = argc > 2 ? atoi(argv[2]) : 9;
    if (reps > 64) reps = 64;
    float *s = malloc(sizeof(float) * (size_t)n * P), *r = malloc(sizeof(float) * (size_t)n * P);
    if (!s || !r) MPI_Abort(MPI_COMM_WORLD, 1);
    for (long i = 0; i < n * P; i++)
        s[i] = (float)i;
    double rates[64];
    MPI_Alltoall(s, (int)n, MPI_FLOAT, r, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
    for (int k = 0; k < reps; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Alltoall(s, (int)n, MPI_FLOAT, r, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
        double dt = MPI_Wtime() - t0, mx;
        MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        rates[k] = (double)n * (P - 1) * sizeof(float) / mx / 1e9;
    }
    qsort(rates, (size_t)reps, sizeof rates[0], cmp_double);
    if (rank == 0)
        printf("{\"ranks\": %d, \"bytes_sent_per_rank\": %.0f, \"gbps\": %.3f}\n", P,
               (double)n * (P - 1) * sizeof(float), rates[reps / 2]);
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
