/* test_comm — the Ulysses exchanges over real MPI ranks (run with 1..4 ranks under mpiexec).
 * Every rank fills its send buffer from a formula of (source rank, token, head, element), so
 * each rank computes what it must receive without a reference run; the error count is summed
 * over ranks so all agree on one verdict. */
#include "comm/comm.h"
#include "core/check.h"
#include "kernels/bf16.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h" /* after <mpi.h>: harness_finish_mpi */

/* Value of element x of head h of global token t: exact in fp32 (small integers), and in bf16
 * (below 256: bf16 has 8 significant bits) when bf is set. */
static float value(int t, int h, int x, int bf) {
    return (float)((t * 131 + h * 17 + x * 3) % (bf ? 251 : 4093));
}

/* Element i of a buffer of dt, as fp32; and a store. */
static float get(const void *p, mem_dtype dt, size_t i) {
    return dt == MEM_DTYPE_BF16 ? bf16_widen(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
static void put(void *p, mem_dtype dt, size_t i, float v) {
    if (dt == MEM_DTYPE_BF16)
        ((uint16_t *)p)[i] = bf16_round(v);
    else
        ((float *)p)[i] = v;
}

static long check_case(comm_ctx *c, int T_loc, int nh, int HS, mem_dtype dt) {
    int P = c->P, r = c->cp_rank, bf = dt == MEM_DTYPE_BF16;
    int nh_out = nh >= P ? nh / P : 1;
    size_t Tg = (size_t)T_loc * P;
    void *seq = malloc(mem_dtype_bytes(dt, (size_t)T_loc * nh * HS));
    void *head = malloc(mem_dtype_bytes(dt, Tg * nh_out * HS));
    void *back = malloc(mem_dtype_bytes(dt, (size_t)T_loc * nh * HS));
    void *pack = malloc(mem_dtype_bytes(dt, comm_pack_floats(c, T_loc, nh, HS)));
    long errors = 0;
    for (int t = 0; t < T_loc; t++)
        for (int h = 0; h < nh; h++)
            for (int x = 0; x < HS; x++)
                put(seq, dt, ((size_t)t * nh + h) * HS + x, value(r * T_loc + t, h, x, bf));
    comm_seq_to_head(c, seq, head, T_loc, nh, HS, dt, pack);
    /* rank r holds heads r*nh_out.. (or head r*nh/P when replicated) of every token */
    for (size_t t = 0; t < Tg; t++)
        for (int i = 0; i < nh_out; i++) {
            int h = nh >= P ? r * nh_out + i : r * nh / P;
            for (int x = 0; x < HS; x++)
                errors += get(head, dt, (t * nh_out + i) * HS + x) != value((int)t, h, x, bf);
        }
    /* back to sequence layout: the identity, or the sum of P/nh replicas when replicated (in
     * bf16: the exact fp32 sum rounded once) */
    comm_head_to_seq(c, head, back, T_loc, nh, HS, dt, pack);
    float mult = nh >= P ? 1.0f : (float)(P / nh);
    for (int t = 0; t < T_loc; t++)
        for (int h = 0; h < nh; h++)
            for (int x = 0; x < HS; x++) {
                float want = mult * value(r * T_loc + t, h, x, bf);
                if (bf) want = bf16_widen(bf16_round(want));
                errors += get(back, dt, ((size_t)t * nh + h) * HS + x) != want;
            }
    free(seq);
    free(head);
    free(back);
    free(pack);
    return errors;
}

int main(int argc, char **argv) {
    int rank, R;
    harness_init_mpi(&argc, &argv, &rank, &R); /* every verdict below is agreed; rank 0 says it */
    /* every context-parallel degree P that divides R, so DP x CP meshes run too */
    for (int P = 1; P <= R; P++) {
        if (R % P) continue;
        comm_ctx c;
        comm_init(&c, MPI_COMM_WORLD, P);
        int shapes[][3] = {{5, 8, 16}, {1, 4, 3}, {7, 12, 8}, {3, 2, 4}, {4, 1, 5}};
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int T_loc = shapes[s][0], nh = shapes[s][1], HS = shapes[s][2];
            if (nh % P && P % nh) continue;
            for (int dt = 0; dt < MEM_DTYPE_COUNT; dt++) {
                long e = check_case(&c, T_loc, nh, HS, (mem_dtype)dt);
                long total = 0;
                MPI_Allreduce(&e, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
                CHECK(total == 0, "R=%d P=%d T_loc=%d nh=%d HS=%d %s (%ld wrong elements)", R, P,
                      T_loc, nh, HS, mem_dtype_name((mem_dtype)dt), total);
            }
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
