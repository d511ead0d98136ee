/* layout.c — what a run's shapes and options must satisfy (checked before anything is
 * allocated, with a message that says what to change), and the FLOP count of a step. */
#include "model/model.h"
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
