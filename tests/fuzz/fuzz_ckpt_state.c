/* fuzz_ckpt_state.c — ckpt_state_parse (the state.json half of ckpt_check) on any text, against
 * the run of the checkpoint seeds in corpus/ckpt_state (a folder step-00000002), with and without
 * a run to compare, then the data record it returned against the run's (ckpt_data_diff). */
#include "train/ckpt.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ckpt_state run = {.steps = 4,
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
                             .seed = 1,
                             .data = {.shard = {"d.bin", "/tmp/d.bin", 81024, 0x69e737f6u},
                                      .tokens = 40000,
                                      .doc_sep = -1}};
    static ckpt_record rec;
    char msg[512];
    for (int with_run = 0; with_run < 2; with_run++) {
        int v = ckpt_state_parse((const char *)data, size, with_run ? &run : NULL, 2, &rec, msg,
                                 sizeof msg);
        if (v != CKPT_STATE_OK && v != CKPT_STATE_UNREADABLE && v != CKPT_STATE_DIFFERS &&
            v != CKPT_STATE_VERSION)
            abort();
        if (v != CKPT_STATE_OK && strlen(msg) == 0) abort(); /* a refusal always says why */
        if (v == CKPT_STATE_OK && (rec.step != 2 || ckpt_data_diff(&rec.data, &run.data, msg,
                                                                   sizeof msg) > CKPT_DATA_DIFFERS))
            abort();
    }
    return 0;
}
