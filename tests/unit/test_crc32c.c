/* test_crc32c.c — CRC-32C (core/crc32c.h): the standard check value, the SSE4.2 path against the
 * table twin at every length around its stride, and the placed CRCs of pieces cut at random
 * (as ranks write a checkpoint) XOR-ing to the whole buffer's, in any order. Prints the speed. */
#include "core/crc32c.h"

#include "harness.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(void) {
    CHECK(crc32c("123456789", 9) == 0xe3069283u, "check value: %08x", crc32c("123456789", 9));
    CHECK(crc32c("", 0) == 0, "empty: %08x", crc32c("", 0));
    size_t n = 3 * 4096 * 5 + 37;
    uint8_t *buf = malloc(n);
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)next();
    int same = 1;
    for (size_t len = 0; len <= n; len += len < 64 ? 1 : 1 + next() % 997)
        same &= crc32c_raw(0x1234567u, buf + 1, len > n - 1 ? n - 1 : len) ==
                crc32c_raw_ref(0x1234567u, buf + 1, len > n - 1 ? n - 1 : len);
    CHECK(same, "crc32c_raw = crc32c_raw_ref at every length");
    /* chained raw updates = one update; the shift is appending zeros */
    uint32_t a = crc32c_raw(0, buf, 1000);
    CHECK(crc32c_raw(a, buf + 1000, n - 1000) == crc32c_raw(0, buf, n), "chained update");
    uint8_t zeros[777] = {0};
    CHECK(crc32c_shift(a, sizeof zeros) == crc32c_raw(a, zeros, sizeof zeros), "shift = zeros");
    /* random disjoint pieces, XOR of the placed CRCs in any order = the whole buffer's */
    uint32_t whole = crc32c(buf, n);
    for (int trial = 0; trial < 50; trial++) {
        uint32_t x = 0;
        for (size_t off = 0; off < n;) {
            size_t len = 1 + next() % (trial < 25 ? 50000 : 300);
            if (len > n - off) len = n - off;
            x ^= crc32c_place(buf + off, len, off, n);
            off += len;
        }
        same &= crc32c_finish(x, n) == whole;
    }
    CHECK(same, "placed pieces combine to the whole: %08x", whole);
    buf[n / 2] ^= 0x10;
    CHECK(crc32c(buf, n) != whole, "one flipped bit changes it");
    free(buf);

    size_t big = (size_t)64 << 20;
    uint8_t *b = malloc(big);
    memset(b, 1, big);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile uint32_t c = crc32c_raw(0, b, big);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("crc32c_raw: %.1f GB/s (64 MiB, crc %08x)\n", (double)big / s / 1e9, (unsigned)c);
    free(b);
    return harness_finish("test_crc32c");
}
