/* bench_reduce_scatter — FSDP's reduce-scatter (comm_reduce_scatter: point to point, polled,
 * each block summed in rank order) against MPI_Reduce_scatter_block, which it replaced, on the
 * same buffers, alternating within each round. usage: mpiexec -n R bench_reduce_scatter
 * [BLOCK_FLOATS ...] (default 65536 1048576 4194304; UPIPE_BENCH_ROUNDS, default 15), with the
 * threads upipe train gives each rank (the node's cores over its ranks). Prints
 * (rank 0) one JSON line per size: the median seconds of each (the slowest rank's time per call)
 * and the median of the rounds' ratios, ours / MPI's. */
#include "bench_util.h"
#include "comm/comm.h"
#include "train/setup.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* Seconds of one call, the slowest rank's, after a barrier. */
static double timed(comm_ctx *c, int ours, const float *full, float *shard, float *recv, size_t n) {
    MPI_Barrier(c->world);
    double t0 = MPI_Wtime();
    if (ours)
        comm_reduce_scatter(c, full, shard, recv, n);
    else
        MPI_Reduce_scatter_block(full, shard, (int)n, MPI_FLOAT, MPI_SUM, c->world);
    double dt = MPI_Wtime() - t0, mx;
    MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, c->world);
    return mx;
}

int main(int argc, char **argv) {
    int rank, R;
    comm_mpi_init(&argc, &argv, &rank, &R);
    int threads = setup_threads(0, rank); /* as upipe train: the node's cores over its ranks */
    comm_ctx c;
    comm_init(&c, MPI_COMM_WORLD, 1);
    const char *re = getenv("UPIPE_BENCH_ROUNDS");
    int rounds = re != NULL && atoi(re) > 0 ? atoi(re) : 15;
    size_t sizes[16] = {65536, 1048576, 4194304};
    int ns = 3;
    if (argc > 1) ns = 0;
    for (int i = 1; i < argc && ns < 16; i++)
        sizes[ns++] = (size_t)atol(argv[i]);
    char cpu[192];
    cpu_model(cpu, sizeof cpu);
    if (rank == 0)
        printf("# cpu: %s, %d ranks, %d thread%s each, %d rounds\n", cpu, R, threads,
               threads > 1 ? "s" : "", rounds);
    double *t[2] = {malloc(sizeof(double) * (size_t)rounds),
                    malloc(sizeof(double) * (size_t)rounds)};
    double *ratio = malloc(sizeof(double) * (size_t)rounds);
    for (int s = 0; s < ns; s++) {
        size_t n = sizes[s];
        float *full = malloc(sizeof(float) * n * (size_t)R), *shard = malloc(sizeof(float) * n),
              *recv = malloc(sizeof(float) * n);
        if (!full || !shard || !recv || !t[0] || !t[1] || !ratio) MPI_Abort(MPI_COMM_WORLD, 1);
        for (size_t i = 0; i < n * (size_t)R; i++)
            full[i] = (float)(i % 1000) * 1e-3f;
        timed(&c, 0, full, shard, recv, n); /* first calls: connections, page faults */
        timed(&c, 1, full, shard, recv, n);
        for (int r = 0; r < rounds; r++) {
            t[0][r] = timed(&c, 0, full, shard, recv, n);
            t[1][r] = timed(&c, 1, full, shard, recv, n);
            ratio[r] = t[1][r] / t[0][r];
        }
        double mpi = median(t[0], rounds), ours = median(t[1], rounds);
        if (rank == 0)
            printf("{\"ranks\": %d, \"block_floats\": %zu, \"mpi_s\": %.6f, \"ours_s\": %.6f, "
                   "\"ours_over_mpi\": %.3f}\n",
                   R, n, mpi, ours, median(ratio, rounds));
        free(full);
        free(shard);
        free(recv);
    }
    free(t[0]);
    free(t[1]);
    free(ratio);
    comm_free(&c);
    MPI_Finalize();
    return 0;
}
