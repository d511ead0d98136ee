/* fuzz_shard.c — shard_open (vocab 65536) on any bytes, then a few tokens read, wrapping. */
#include "io/shard.h"

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_write("x.bin", data, size);
    token_shard s;
    char err[512];
    if (shard_open(&s, p, 65536, err, sizeof err) != 0) return 0;
    int32_t out[64];
    shard_read(&s, 0, 64, out);
    shard_read(&s, s.ntok - 1, 3, out);
    for (int i = 0; i < 3; i++)
        if (out[i] < 0 || out[i] >= 65536) abort(); /* shard_open checked every id */
    shard_close(&s);
    return 0;
}
