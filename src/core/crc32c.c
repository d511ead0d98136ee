/* crc32c.c — CRC-32C, table and SSE4.2 paths, and the shift that places a piece's CRC in a file
 * (crc32c.h). Bit-reflected polynomial 0x82f63b78; x^k is the bit 1 << (31 - k). */
#include "core/crc32c.h"

#include <string.h>

#define CRC32C_POLY 0x82f63b78u

static uint32_t table[256];

static void table_init(void) {
    if (table[1]) return; /* single-threaded users; the first call fills it */
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        table[i] = c;
    }
}

uint32_t crc32c_raw_ref(uint32_t crc, const void *buf, size_t len) {
    table_init();
    const uint8_t *p = buf;
    for (size_t i = 0; i < len; i++)
        crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return crc;
}

/* a * b mod P (zlib's multmodp for this polynomial). */
static uint32_t multmodp(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

/* x^(8n) mod P by squaring. */
static uint32_t x8nmodp(uint64_t n) {
    uint32_t p = 1u << 31, base = 1u << 23; /* x^0, x^8 */
    for (; n; n >>= 1) {
        if (n & 1) p = multmodp(base, p);
        base = multmodp(base, base);
    }
    return p;
}

uint32_t crc32c_shift(uint32_t crc, uint64_t n) {
    return multmodp(x8nmodp(n), crc);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* Three streams of STRIDE bytes each in flight hide the crc32 instruction's latency (3 cycles,
 * one per cycle issued); they are joined by shifts of STRIDE and 2 * STRIDE bytes. */
enum { STRIDE = 4096 };

__attribute__((target("sse4.2"))) static uint32_t raw_sse42(uint32_t crc, const uint8_t *p,
                                                            size_t len) {
    static uint32_t x1, x2; /* x^(8 STRIDE), x^(16 STRIDE) mod P */
    if (!x1) x1 = x8nmodp(STRIDE), x2 = x8nmodp(2 * STRIDE);
    uint64_t c0 = crc;
    while (len >= 3 * STRIDE) {
        uint64_t c1 = 0, c2 = 0, w0, w1, w2;
        for (size_t i = 0; i < STRIDE; i += 8) {
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p + STRIDE + i, 8);
            memcpy(&w2, p + 2 * STRIDE + i, 8);
            c0 = __builtin_ia32_crc32di(c0, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
        }
        c0 = multmodp(x2, (uint32_t)c0) ^ multmodp(x1, (uint32_t)c1) ^ (uint32_t)c2;
        p += 3 * STRIDE;
        len -= 3 * STRIDE;
    }
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c0 = __builtin_ia32_crc32di(c0, w);
    }
    uint32_t c = (uint32_t)c0;
    for (; len; p++, len--)
        c = __builtin_ia32_crc32qi(c, *p);
    return c;
}

uint32_t crc32c_raw(uint32_t crc, const void *buf, size_t len) {
    static int sse42 = -1;
    if (sse42 < 0) sse42 = __builtin_cpu_supports("sse4.2");
    return sse42 ? raw_sse42(crc, buf, len) : crc32c_raw_ref(crc, buf, len);
}
#else
uint32_t crc32c_raw(uint32_t crc, const void *buf, size_t len) {
    return crc32c_raw_ref(crc, buf, len);
}
#endif

uint32_t crc32c_place(const void *buf, size_t len, uint64_t off, uint64_t total) {
    return crc32c_shift(crc32c_raw(0, buf, len), total - off - len);
}

uint32_t crc32c_finish(uint32_t raw, uint64_t total) {
    /* the standard CRC starts from all ones and inverts at the end: by linearity that adds the
     * raw CRC of the start state carried over total bytes */
    return raw ^ crc32c_shift(0xffffffffu, total) ^ 0xffffffffu;
}

uint32_t crc32c(const void *buf, size_t len) {
    return crc32c_finish(crc32c_raw(0, buf, len), len);
}
