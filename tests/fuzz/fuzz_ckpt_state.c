/* fuzz_ckpt_state.c — ckpt_state_parse (the state.json half of ckpt_check) on any text, against
 * the run of the checkpoint seeds in corpus/ckpt_state. */
#include "train/ckpt.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_state run = {.steps = 4,
                      .T = 64,
                      .global_batch = 2,
                      .warmup = 1,
                      .lr = 1e-3,
                      .min_lr_frac = 0.1,
                      .weight_decay = 0.1,
                      .beta1 = 0.9,
                      .beta2 = 0.95,
                      .adam_eps = 1e-8,
                      .grad_clip = 1.0,
                      .seed = 1};
    long step = -1;
    char msg[512];
    int v = ckpt_state_parse((const char *)data, size, &run, &step, msg, sizeof msg);
    if (v != CKPT_STATE_OK && v != CKPT_STATE_UNREADABLE && v != CKPT_STATE_DIFFERS) abort();
    return 0;
}
