/* test_comm — the Ulysses exchanges over real MPI ranks (run with 1..4 ranks under mpiexec).
 * Every rank fills its send buffer from a formula of (source rank, token, head, element), so
 * each rank computes what it must receive without a reference run; the error count is summed
 * over ranks so all agree on one verdict. */
#include "comm/comm.h"
#include "core/check.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h" /* after <mpi.h>: harness_finish_mpi */

/* Value of element x of head h of global token t: exact in fp32 (small integers). */
static float value(int t, int h, int x) { return (float)((t * 131 + h * 17 + x * 3) % 4093); }

static long check_case(comm_ctx *c, int T_loc, int nh, int HS) {
    int P = c->P, r = c->cp_rank;
    int nh_out = nh >= P ? nh / P : 1;
    size_t Tg = (size_t)T_loc * P;
    float *seq = malloc(sizeof(float) * (size_t)T_loc * nh * HS);
    float *head = malloc(sizeof(float) * Tg * nh_out * HS);
    float *back = malloc(sizeof(float) * (size_t)T_loc * nh * HS);
    float *pack = malloc(sizeof(float) * comm_pack_floats(c, T_loc, nh, HS));
    long errors = 0;
    for (int t = 0; t < T_loc; t++)
        for (int h = 0; h < nh; h++)
            for (int x = 0; x < HS; x++)
                seq[((size_t)t * nh + h) * HS + x] = value(r * T_loc + t, h, x);
    comm_seq_to_head(c, seq, head, T_loc, nh, HS, pack);
    /* rank r holds heads r*nh_out.. (or head r*nh/P when replicated) of every token */
    for (size_t t = 0; t < Tg; t++)
        for (int i = 0; i < nh_out; i++) {
            int h = nh >= P ? r * nh_out + i : r * nh / P;
            for (int x = 0; x < HS; x++)
                errors += head[(t * nh_out + i) * HS + x] != value((int)t, h, x);
        }
    /* back to sequence layout: the identity, or the sum of P/nh replicas when replicated */
    comm_head_to_seq(c, head, back, T_loc, nh, HS, pack);
    float mult = nh >= P ? 1.0f : (float)(P / nh);
    for (int t = 0; t < T_loc; t++)
        for (int h = 0; h < nh; h++)
            for (int x = 0; x < HS; x++)
                errors += back[((size_t)t * nh + h) * HS + x] != mult * value(r * T_loc + t, h, x);
    free(seq);
    free(head);
    free(back);
    free(pack);
    return errors;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, R;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &R);
    up_set_rank(rank, R);
    harness.print = rank == 0; /* every verdict below is agreed; rank 0 says it */
    harness.verbose = 1;
    /* every context-parallel degree P that divides R, so DP x CP meshes run too */
    for (int P = 1; P <= R; P++) {
        if (R % P) continue;
        comm_ctx c;
        comm_init(&c, MPI_COMM_WORLD, P);
        int shapes[][3] = {{5, 8, 16}, {1, 4, 3}, {7, 12, 8}, {3, 2, 4}, {4, 1, 5}};
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int T_loc = shapes[s][0], nh = shapes[s][1], HS = shapes[s][2];
            if (nh % P && P % nh) continue;
            long e = check_case(&c, T_loc, nh, HS);
            long total = 0;
            MPI_Allreduce(&e, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            CHECK(total == 0, "R=%d P=%d T_loc=%d nh=%d HS=%d (%ld wrong elements)", R, P, T_loc,
                  nh, HS, total);
        }
        /* loss reduction: token-weighted sum and count over all ranks */
        double sum = rank + 1.5;
        long long cnt = rank + 1;
        comm_reduce_loss(&c, &sum, &cnt);
        int ok = sum == R * 1.5 + R * (R - 1) / 2.0 && cnt == (long long)R * (R + 1) / 2;
        float g[3] = {(float)rank, 1.0f, -2.0f};
        comm_reduce_grads(&c, g, 3);
        ok = ok && g[0] == (float)(R * (R - 1) / 2) && g[1] == (float)R && g[2] == -2.0f * R;
        int all_ok = 0;
        MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
        CHECK(all_ok, "R=%d P=%d loss and gradient reductions", R, P);
        comm_free(&c);
    }
    int rc = harness_finish_mpi("test_comm", MPI_COMM_WORLD);
    MPI_Finalize();
    return rc;
}
