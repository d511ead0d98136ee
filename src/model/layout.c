/* layout.c — what a run's shapes and options must satisfy (checked before anything is
 * allocated, with a message that says what to change), and the FLOP count of a step. */
#include "model/model.h"
#include "model/params.h"
#include "parallel/cp_attention.h"

#include "core/check.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

int model_check_layout(const model_config *c, long T, int P, int R, char *err, size_t errlen) {
    /* suggestions: context-parallel degrees that divide R and satisfy every rule */
    char sug[128] = "";
    for (int p = 1; p <= R; p++) {
        if (R % p || c->NH % p || (c->NKV % p && p % c->NKV) || T % p) continue;
        size_t n = strlen(sug);
        snprintf(sug + n, sizeof sug - n, "%s%d", n ? ", " : "", p);
    }
    if (c->NH % P)
        return up_errf(err, errlen, NULL,
                       "num_attention_heads (%d) is not divisible by the "
                       "context-parallel degree (%d): use --cp %s",
                       c->NH, P, sug);
    if (c->NKV % P && P % c->NKV)
        return up_errf(err, errlen, NULL,
                       "num_key_value_heads (%d) and the context-parallel "
                       "degree (%d) must divide one another: use --cp %s",
                       c->NKV, P, sug);
    if (T % P)
        return up_errf(err, errlen, NULL,
                       "--seq-len %ld is not divisible by the context-parallel "
                       "degree (%d): use a multiple of %d, or --cp %s",
                       T, P, P, sug);
    if (P > 1 && (double)(T / P) * ((c->NH + P - 1) / P) * c->HS > INT_MAX)
        return up_errf(err, errlen, NULL,
                       "--seq-len %ld over %d ranks makes all-to-all blocks "
                       "beyond MPI's int count: use more context-parallel ranks or --upipe-heads",
                       T, P);
    return 0;
}

int model_check_options(const model_config *c, int P, const model_options *o, char *err,
                        size_t errlen) {
    if (o->U && cp_attention_check(c->NH, c->NKV, P, o->U, err, errlen) != 0) return -1;
    if (o->tile_mlp < 0 || o->tile_loss < 0)
        return up_errf(err, errlen, NULL, "tile sizes must be positive token counts");
    return 0;
}

double model_flops_per_step(const model_config *c, int T) {
    /* Matmul parameters (the embedding lookup does no FLOPs; a tied lm_head still multiplies):
     * 2 FLOPs per parameter per token forward, 4 backward. Causal attention per layer and head:
     * forward S = Q K^T and O = P V over T(T+1)/2 (query, key) pairs, 2 FLOPs per multiply-add
     * and 2 matmuls: 4 * HS * T(T+1)/2; backward 2x that (dV, dP, dS->dQ, dK): 8 * HS * ...
     * Backward's recompute of S is not counted (as in the usual 6N + attention convention). */
    double C = c->C, F = c->F, qd = (double)c->NH * c->HS, kvd = (double)c->NKV * c->HS;
    double per_layer = C * qd * 2 + C * kvd * 2 + 3 * C * F;
    double matmul_params = c->L * per_layer + (double)c->V * C;
    double pairs = (double)T * (T + 1) / 2;
    double attn = 12.0 * c->L * c->NH * c->HS * pairs;
    return 6.0 * matmul_params * T + attn;
}

/* Bytes of one exchange of a tensor of nh heads by one rank (comm/alltoall.c: P-1 blocks of T_loc
 * tokens of the heads each rank holds in head layout, one when heads are replicated). */
static double exchange_bytes(int T_loc, int nh, int HS, int P, size_t elt) {
    return (double)(P - 1) * T_loc * (nh >= P ? nh / P : 1) * HS * (double)elt;
}

int model_pipe_wanted(const model_options *opt, const comm_ctx *comm) {
    /* staged, the copies wait: nothing would run beside them; NCCL's exchanges are ordered on
     * the device's stream, not by the pipe's MPI requests */
    if (comm->staged || comm->nccl_cp) return 0;
    return opt->upipe_overlap_node || (opt->upipe_overlap && comm->cp_nodes > 1);
}

void model_comm_per_step(const model_config *c, int T_loc, const comm_ctx *comm,
                         const model_options *o, int micro, double bytes[COMM_KIND_COUNT]) {
    for (int k = 0; k < COMM_KIND_COUNT; k++)
        bytes[k] = 0;
    int P = comm->P, R = comm->R, L = c->L;
    size_t elt = mem_dtype_size(o->dtype);
    /* the attention's schedule (cp_attention.c): chunks of Kc KV heads, stages of U query heads */
    int U = o->U ? o->U : c->NH, keep = o->U == 0, Kc = U < c->NKV ? U : c->NKV;
    int chunks = c->NKV / Kc, stages = c->NH / U;
    double xq = exchange_bytes(T_loc, U, c->HS, P, elt) * stages;       /* q, o, do or dq */
    double xkv = exchange_bytes(T_loc, Kc, c->HS, P, elt) * chunks * 2; /* k and v */
    int recompute = o->checkpoint || o->offload_dir;
    /* forward: k, v, q in, o out; the recompute does it again; backward: k, v, q again unless
     * kept in head layout, o and do in; dq, dk, dv out */
    double to_head = (xkv + xq) * (1 + recompute) + (keep ? 0 : xkv + xq) + 2 * xq;
    double to_seq = xq * (1 + recompute) + xq + xkv;
    bytes[COMM_SEQ_TO_HEAD] = (double)micro * L * to_head;
    bytes[COMM_HEAD_TO_SEQ] = (double)micro * L * to_seq;
    if (R == 1) return;
    param_table t;
    param_table_build(&t, c);
    if (o->fsdp) {
        /* per micro-batch: every unit gathered in the forward, the layers again in the backward
         * but the last (still in its slot from the forward; a recompute reuses its gather),
         * every unit's gradients reduce-scattered (store.h, DESIGN.md §4.5) */
        for (int u = 0; u < t.nunits; u++) {
            double shard = (double)((t.unit_off[u + 1] - t.unit_off[u] + (size_t)R - 1) / R);
            int gathers = u >= 1 && u < L ? 2 : 1;
            bytes[COMM_FSDP_GATHER] += (double)micro * gathers * shard * (double)elt * (R - 1);
            bytes[COMM_FSDP_REDUCE] += (double)micro * shard * sizeof(float) * (R - 1);
        }
    } else {
        bytes[COMM_GRAD_REDUCE] = (double)t.nparams * sizeof(float); /* once per step */
    }
    param_table_free(&t);
}
