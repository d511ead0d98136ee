/* ckpt_tier.h — where the layer inputs live under --offload on a device (DESIGN.md §11
 * "Checkpoints off the GPU"): kept on the device, in pinned host memory, or in the offload file,
 * moved by the backend's copy queue (backend.h) and the offload store (memory/offload.h).
 *
 * Homes. The last `keep` layers' inputs (at least 2) stay on the device; the others are moved:
 * the first of them to pinned host slots, as many as --offload-host-limit holds (all without a
 * limit), the rest to the offload file in the --offload folder.
 *
 * Buffers on the device. A moved layer's input, and each of the last two layers', lives in the
 * pair: layer l's in pair[l % 2]; a kept layer before those has a buffer of its own. Layer l - 1
 * (or the embedding) writes x_l there, layer l reads it and writes x_{l+1}.
 *
 * Forward: before layer l, x_l starts on its way out to its slot (or, for the file, is marked
 * complete and goes out at the next layer in pieces through the store's two buffers), and a
 * write into a pair buffer first waits for the copy out of the layer that held it. Backward:
 * before layer l, x_l (copied in while layer l + 1 ran) is waited for and x_{l-1} starts on its
 * way in (a file layer's pieces read one ahead). The last two layers' inputs are still in the pair
 * when the backward starts. On a GPU the pinned copies overlap a layer's compute; a file layer's
 * pieces are written out while the device runs the layer after the mark, but read back only once
 * the layer that used the pair buffer is done, so the device waits for that layer's disk reads and
 * copies (a third buffer would hide them: docs/PLAN.md). On the CPU backend the copies are memcpy
 * and the path is the same (the tests run it there, with --offload-host-limit). */
#ifndef UP_MODEL_CKPT_TIER_H
#define UP_MODEL_CKPT_TIER_H

#include "kernels/backend.h"

#include <stddef.h>

typedef struct ckpt_tier ckpt_tier;

typedef struct {
    int L;                         /* layers */
    size_t slot_bytes;             /* one layer input */
    int keep;                      /* layers kept on the device (the last; 2 when 0) */
    unsigned long long host_limit; /* bytes of pinned slots (0: as many as moved layers) */
    const char *dir;               /* the offload file's folder (moved layers past the limit) */
} ckpt_tier_spec;

/* The device buffers (category checkpoints), the pinned slots and the offload store; under mem
 * plan mode they are counted (the file's bytes as offloaded), not made. NULL with one line in err
 * when the offload store cannot open (its folder: what is wrong and what to do). */
ckpt_tier *ckpt_tier_init(const backend_ops *be, const ckpt_tier_spec *sp, char *err,
                          size_t errlen);
void ckpt_tier_free(ckpt_tier *t);
/* The device buffer that holds layer l's input (NULL under plan mode). */
void *ckpt_tier_x(const ckpt_tier *t, int l);
/* Before layer l's forward (l = 0 .. L - 1; then once with l = L, after the last layer). */
void ckpt_tier_forward(ckpt_tier *t, int l);
/* Before layer l's backward and its recompute (l = L - 1 .. 0). */
void ckpt_tier_backward(ckpt_tier *t, int l);

#endif
