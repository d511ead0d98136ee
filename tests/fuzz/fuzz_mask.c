/* fuzz_mask.c — mask_open on any bytes, then a few mask bytes read, wrapping. */
#include "io/mask.h"

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_write("x.mask", data, size);
    mask_shard m;
    char err[512];
    if (mask_open(&m, p, 0, err, sizeof err) != 0) return 0;
    uint8_t out[64];
    mask_read(&m, 0, 64, out);
    mask_read(&m, m.n - 1, 3, out);
    for (int i = 0; i < 3; i++)
        if (out[i] > 1) abort(); /* mask_open checked every byte */
    mask_close(&m);
    return 0;
}
