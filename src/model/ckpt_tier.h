/* ckpt_tier.h — the layer inputs kept in host memory under --offload on a device (DESIGN.md
 * §11 "Checkpoints in host memory"): pinned host slots, a pair of buffers in the backend's
 * space, and the copy queue of the backend between them (backend.h).
 *
 * Layer l's input x_l lives in pair[l % 2] while it is computed and used: layer l - 1 (or the
 * embedding) writes it there, layer l reads it and writes x_{l+1} into the other buffer. In the
 * forward, x_l is copied out to host slot l while layer l runs, and layer l + 1 waits for that
 * copy before it overwrites the buffer. In the backward, x_{l-1} is copied back in while layer
 * l's backward runs, and layer l - 1 waits for it. The last two layers' inputs are still in the
 * pair when the backward starts: they have no slot. So the device holds two layer inputs and the
 * host L - 2; every copy overlaps a layer's compute on a GPU; on the CPU backend the copies are
 * memcpy and the path is the same (the tests run it there). */
#ifndef UP_MODEL_CKPT_TIER_H
#define UP_MODEL_CKPT_TIER_H

#include "kernels/backend.h"

#include <stddef.h>

typedef struct ckpt_tier ckpt_tier;

/* Host slots a model of L layers needs (L - 2, none below 3 layers). */
int ckpt_tier_slots(int L);
/* The pair (category checkpoints, the backend's space) and the host slots (pinned on a device),
 * slot_bytes each. Under mem plan mode they are counted, not allocated. Slots over host_limit
 * bytes (0: none) stop every rank with what to change (the file past the limit is not built). */
ckpt_tier *ckpt_tier_init(const backend_ops *be, int L, size_t slot_bytes,
                          unsigned long long host_limit);
void ckpt_tier_free(ckpt_tier *t);
/* The buffer that holds layer l's input (pair[l % 2]; NULL under plan mode). */
void *ckpt_tier_x(const ckpt_tier *t, int l);
/* Before layer l's forward: waits (the device does) for x_{l-1}'s copy out, then starts x_l's. */
void ckpt_tier_forward(ckpt_tier *t, int l);
/* Before layer l's backward (and its recompute): waits for x_l's copy in, then starts
 * x_{l-1}'s. */
void ckpt_tier_backward(ckpt_tier *t, int l);

#endif
