/* fsdp.c — FSDP / ZeRO-3 units and shards (DESIGN.md §4): each rank owns a padded 1/R shard of
 * every unit (embedding, each layer, final norm + LM head) of the parameters, gradients and AdamW
 * moments; a unit is all-gathered before its forward and before its backward, and its gradients
 * are reduce-scattered right after its backward. With R_f == 1 every call is a pointer into the
 * slab, so the unsharded path runs the same code. */
#include "core/check.h"
#include "core/mem.h"
#include "model/model.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

void fsdp_layout(model *m, int R_f, int rank_f) {
    const model_config *c = &m->cfg;
    m->R_f = R_f;
    m->rank_f = rank_f;
    m->nunits = c->L + 2;
    m->unit_off = calloc((size_t)m->nunits + 1, sizeof *m->unit_off);
    m->shard_n = calloc((size_t)m->nunits, sizeof *m->shard_n);
    m->shard_off = calloc((size_t)m->nunits, sizeof *m->shard_off);
    m->tensor_unit = calloc((size_t)m->ntensors, sizeof *m->tensor_unit);
    UP_CHECK(m->unit_off && m->shard_n && m->shard_off && m->tensor_unit, "out of memory");
    m->unit_off[0] = m->embed_off;
    for (int l = 0; l < c->L; l++) m->unit_off[l + 1] = m->layer_off[l];
    m->unit_off[c->L + 1] = m->final_norm_off;
    m->unit_off[c->L + 2] = m->nparams;
    for (int t = 0; t < m->ntensors; t++) {
        int u = 0;
        while (m->tensors[t].offset >= m->unit_off[u + 1]) u++;
        m->tensor_unit[t] = u;
    }
    m->nshard = 0;
    for (int u = 0; u < m->nunits; u++) {
        size_t n = m->unit_off[u + 1] - m->unit_off[u];
        m->shard_n[u] = (n + (size_t)R_f - 1) / (size_t)R_f;
        m->shard_off[u] = m->nshard;
        m->nshard = up_add(m->nshard, m->shard_n[u]);
    }
    for (int k = 0; k < 3; k++) m->gbuf_unit[k] = -1;
}

void fsdp_owned(const model *m, int u, size_t *g0, size_t *g1) {
    size_t n = m->unit_off[u + 1] - m->unit_off[u], s = m->shard_n[u];
    size_t a = (size_t)m->rank_f * s, b = a + s;
    *g0 = m->unit_off[u] + (a < n ? a : n);
    *g1 = m->unit_off[u] + (b < n ? b : n);
}

float *fsdp_shard_at(const model *m, float *slab, int u, size_t g) {
    size_t g0, g1;
    fsdp_owned(m, u, &g0, &g1);
    UP_CHECK(g >= g0 && g <= g1, "offset %zu is not in this rank's shard of unit %d", g, u);
    return slab + m->shard_off[u] + (g - g0);
}

void fsdp_invalidate(model *m) {
    for (int k = 0; k < 3; k++) {
        UP_CHECK(!m->gbuf_pending[k], "a gather of unit %d is still in flight", m->gbuf_unit[k]);
        m->gbuf_unit[k] = -1;
    }
}

static int slot_of(const model *m, int u) { return (u == 0 && m->cfg.tied) ? 2 : u % 2; }

void fsdp_prefetch(model *m, int u) {
    if (m->R_f == 1 || u < 0 || u >= m->nunits) return;
    int k = slot_of(m, u);
    if (m->gbuf_unit[k] == u) return;
    UP_CHECK(!m->gbuf_pending[k], "gather slot %d busy with unit %d", k, m->gbuf_unit[k]);
    MPI_Request *req = (MPI_Request *)m->greq + k;
    comm_allgather_start(m->comm, m->params + m->shard_off[u], m->gbuf[k], m->shard_n[u], req);
    m->gbuf_unit[k] = u;
    m->gbuf_pending[k] = 1;
}

float *fsdp_gather(model *m, int u) {
    if (m->R_f == 1) return m->params + m->shard_off[u];
    int k = slot_of(m, u);
    fsdp_prefetch(m, u);
    if (m->gbuf_pending[k]) {
        comm_wait(m->comm, (MPI_Request *)m->greq + k, COMM_FSDP_GATHER);
        m->gbuf_pending[k] = 0;
    }
    return m->gbuf[k];
}

float *fsdp_grads(model *m, int u) {
    if (m->R_f == 1) return m->grads + m->shard_off[u];
    float *g = (u == 0 && m->cfg.tied) ? m->embed_gradbuf : m->gradbuf;
    /* a tied embedding's buffer already holds the LM head's part (zeroed by model_forward) */
    if (!(u == 0 && m->cfg.tied))
        memset(g, 0, sizeof(float) * m->shard_n[u] * (size_t)m->R_f);
    return g;
}

void fsdp_reduce(model *m, int u) {
    if (m->R_f == 1) return;
    const float *g = (u == 0 && m->cfg.tied) ? m->embed_gradbuf : m->gradbuf;
    size_t n = m->shard_n[u];
    /* the reduce-scatter overwrites; the shard accumulates over micro-batches */
    float *tmp = m->rs_tmp;
    comm_reduce_scatter(m->comm, g, tmp, n);
    float *dst = m->grads + m->shard_off[u];
    for (size_t i = 0; i < n; i++) dst[i] += tmp[i];
}
