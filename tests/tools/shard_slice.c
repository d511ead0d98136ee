/* shard_slice — tokens [start, start + n) of a shard, then one more token, as a new shard (tests
 * that run one document of a packed shard alone, followed by the separator that ends it).
 *
 *   shard_slice IN.bin START N NEXT_TOKEN OUT.bin          exit 0, or 2 with a message */
#include "io/shard.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: shard_slice IN.bin START N NEXT_TOKEN OUT.bin\n");
        return 2;
    }
    char err[512];
    token_shard s;
    if (shard_open(&s, argv[1], 1 << 30, err, sizeof err) != 0) {
        fprintf(stderr, "shard_slice: %s\n", err);
        return 2;
    }
    size_t start = strtoull(argv[2], NULL, 10), n = strtoull(argv[3], NULL, 10);
    int32_t *t = malloc((n + 1) * sizeof *t);
    uint32_t *u = malloc((n + 1) * sizeof *u);
    if (!t || !u || start + n > s.ntok) {
        fprintf(stderr, "shard_slice: range outside the shard\n");
        return 2;
    }
    shard_read(&s, start, n, t);
    for (size_t i = 0; i < n; i++)
        u[i] = (uint32_t)t[i];
    u[n] = (uint32_t)strtoul(argv[4], NULL, 10);
    if (shard_write(argv[5], u, n + 1, err, sizeof err) != 0) {
        fprintf(stderr, "shard_slice: %s\n", err);
        return 2;
    }
    shard_close(&s);
    free(t);
    free(u);
    return 0;
}
