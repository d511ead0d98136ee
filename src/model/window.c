/* window.c — a window of a token shard into the model's inputs and targets (DESIGN.md §1: the
 * targets are shifted before the split; §1.1: loss masks and packed documents). */
#include "model/model_int.h"

void model_read_window(model *m, const token_shard *shard, const mask_shard *mask,
                       uint8_t *mask_buf, long doc_sep, size_t first) {
    model_window_bufs w = model_window_buffers(m);
    int T_loc = w.T_loc;
    size_t start = (first + (size_t)w.pos0) % shard->ntok;
    shard_read(shard, start, (size_t)T_loc, w.inputs);
    shard_read(shard, (start + 1) % shard->ntok, (size_t)T_loc, w.targets);
    if (mask) { /* byte t says whether target token t counts */
        mask_read(mask, (start + 1) % shard->ntok, (size_t)T_loc, mask_buf);
        for (int i = 0; i < T_loc; i++)
            if (!mask_buf[i]) w.targets[i] = -1;
    }
    if (doc_sep < 0) return;
    /* packed documents: every rank needs the whole window's boundaries; nobody can predict
     * where the next document starts, so a target equal to the separator does not count */
    shard_read(shard, first, (size_t)T_loc * w.P, w.window);
    for (int i = 0; i < T_loc; i++)
        if (w.targets[i] == (int32_t)doc_sep) w.targets[i] = -1;
}
