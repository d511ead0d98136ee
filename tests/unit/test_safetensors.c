/* test_safetensors.c — the safetensors reader and writer (io/safetensors.h): F32 round trips,
 * BF16 / F16 conversion (every F16 bit pattern), hand-built corrupt headers, every truncation of
 * a valid file and random header corruption.
 *
 * Every bad input must give -1 and a message naming the problem, never a crash. Files live in a
 * mkdtemp directory under /tmp that is removed at the end. Final line: "N passed, M failed". */
#include "io/safetensors.h"

#include "harness.h"
#include "io_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- safetensors ------------------------------------------------------------------------- */

/* Writes [u64 hlen][header][data]; hlen_override >= 0 replaces the true header length. */
static void write_st_raw(const char *path, const char *header, const void *data, size_t dlen,
                         long long hlen_override) {
    size_t hl = strlen(header);
    uint64_t h = hlen_override >= 0 ? (uint64_t)hlen_override : hl;
    size_t total = 8 + hl + dlen;
    unsigned char *buf = calloc(1, total + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(h >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (dlen) memcpy(buf + 8 + hl, data, dlen);
    write_bytes(path, buf, total);
    free(buf);
}

static float f16_ref(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp(m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(1024 + m, e - 25);
    return (float)(s ? -v : v);
}

static int same_float(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return memcmp(&a, &b, 4) == 0; /* also tells -0 from +0 */
}

static void test_st_roundtrip(void) {
    float w[6] = {1, -2, 3.5f, 1e-30f, -0.0f, 65504};
    float bias[3] = {0.25f, -0.125f, 7};
    float scalar[1] = {42};
    st_entry e[4] = {
        {"z.weight", w, 2, {2, 3}},
        {"a.bias", bias, 1, {3}},
        {"m.scalar", scalar, 0, {0}},
        {"empty", NULL, 2, {0, 5}},
    };
    char err[512] = "";
    const char *p = tmp_path("rt.safetensors");
    int rc = st_write_f32(p, e, 4, err, sizeof err);
    CHECK(rc == 0, "st_write_f32: %s", err);
    CHECK(count_files_with(".tmp.") == 0, "st_write_f32 left a temp file");
    st_file f;
    rc = st_open(&f, p, err, sizeof err);
    CHECK(rc == 0, "st_open of a written file: %s", err);
    if (rc != 0) return;
    CHECK(f.n == 4 && f.data_start % 8 == 0, "n %d data_start %zu", f.n, f.data_start);
    /* the header keeps the given order */
    for (int i = 0; i < 4 && i < f.n; i++)
        CHECK(strcmp(f.tensors[i].name, e[i].name) == 0, "tensor %d is %s, expected %s", i,
              f.tensors[i].name, e[i].name);
    const st_tensor *t = st_find(&f, "z.weight");
    CHECK(t && t->dtype == ST_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
              st_numel(t) == 6,
          "z.weight metadata");
    float out[6] = {0};
    rc = t ? st_read_f32(&f, t, 0, 6, out, err, sizeof err) : -1;
    int ok = rc == 0;
    for (int i = 0; i < 6; i++)
        ok = ok && same_float(out[i], w[i]);
    CHECK(ok, "z.weight data differs: %s", err);
    float part[2] = {0};
    rc = t ? st_read_f32(&f, t, 3, 2, part, err, sizeof err) : -1;
    CHECK(rc == 0 && part[0] == w[3] && part[1] == w[4], "partial read");
    rc = t ? st_read_f32(&f, t, 5, 2, part, err, sizeof err) : 0;
    CHECK(rc == -1 && strstr(err, "outside") != NULL, "read past the tensor's end: \"%s\"", err);
    const st_tensor *s = st_find(&f, "m.scalar");
    CHECK(s && s->ndim == 0 && st_numel(s) == 1, "scalar tensor");
    rc = s ? st_read_f32(&f, s, 0, 1, part, err, sizeof err) : -1;
    CHECK(rc == 0 && part[0] == 42, "scalar value");
    const st_tensor *z = st_find(&f, "empty");
    CHECK(z && st_numel(z) == 0 && z->begin == z->end, "empty tensor");
    CHECK(st_find(&f, "nope") == NULL, "st_find of an absent name");
    st_close(&f);

    /* writer failures leave nothing behind */
    rc = st_write_f32("/nonexistent_dir_upipe/x.safetensors", e, 4, err, sizeof err);
    CHECK(rc == -1 && err[0], "write into a missing directory did not fail");
    st_entry dup[2] = {{"a", w, 1, {2}}, {"a", w, 1, {2}}};
    rc = st_write_f32(tmp_path("dup.safetensors"), dup, 2, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "twice"), "duplicate names written: \"%s\"", err);
    CHECK(access(tmp_path("dup.safetensors"), F_OK) != 0 && count_files_with(".tmp.") == 0,
          "failed write left a file");

    /* every truncation of a valid file is rejected (no crash) */
    size_t len = 0;
    unsigned char *bytes = read_bytes(p, &len);
    int all_rejected = 1;
    const char *tp = tmp_path("trunc.safetensors");
    for (size_t k = 0; k < len; k++) {
        write_bytes(tp, bytes, k);
        err[0] = '\0';
        if (st_open(&f, tp, err, sizeof err) == 0) {
            all_rejected = 0;
            printf("  truncation to %zu bytes accepted\n", k);
            st_close(&f);
        } else if (err[0] == '\0') {
            all_rejected = 0;
            printf("  truncation to %zu bytes: no message\n", k);
        }
    }
    CHECK(all_rejected, "some truncations of a %zu-byte file were not rejected", len);

    /* random byte corruption of the header: open must either fail or give readable tensors */
    uint64_t rng = 12345;
    int crashed_reads = 0;
    size_t hdr_end = 8 + (size_t)bytes[0] + ((size_t)bytes[1] << 8);
    for (int it = 0; it < 2000; it++) {
        unsigned char *b = malloc(len);
        memcpy(b, bytes, len);
        for (int m = 0; m < 3; m++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = (size_t)(rng >> 33) % hdr_end;
            b[pos] = (unsigned char)(rng >> 17);
        }
        write_bytes(tp, b, len);
        if (st_open(&f, tp, err, sizeof err) == 0) {
            for (int i = 0; i < f.n; i++) {
                size_t nel = st_numel(&f.tensors[i]);
                float *buf = malloc((nel ? nel : 1) * sizeof(float));
                if (st_read_f32(&f, &f.tensors[i], 0, nel, buf, err, sizeof err) != 0)
                    crashed_reads++;
                free(buf);
            }
            st_close(&f);
        }
        free(b);
    }
    CHECK(crashed_reads == 0, "%d reads of accepted corrupted files failed", crashed_reads);
    free(bytes);
}

static void test_st_half(void) {
    /* BF16: upper 16 bits of the float. F16: IEEE half incl. subnormals, inf, nan. */
    uint16_t bf[4] = {0x3F80, 0xC000, 0x4049, 0x0001};
    float bf_want[4] = {1.0f, -2.0f, 3.140625f, 0};
    uint32_t tiny = 0x00010000u; /* bf16 0x0001 -> float bits 0x00010000 (an fp32 subnormal) */
    memcpy(&bf_want[3], &tiny, 4);
    uint16_t hf[10] = {0x3C00, 0xC000, 0x0001, 0x03FF, 0x7C00,
                       0xFC00, 0x7E00, 0x7BFF, 0x8000, 0x3555};
    float hf_want[10] = {1.0f,      -2.0f, 0x1p-24f, 1023 * 0x1p-24f, INFINITY,
                         -INFINITY, NAN,   65504.0f, -0.0f,           0.333251953125f};
    float f32[2] = {0.5f, -0.75f};
    unsigned char data[8 + 20 + 8];
    memcpy(data, bf, 8);
    memcpy(data + 8, hf, 20);
    memcpy(data + 28, f32, 8);
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
                      "\"h\":{\"dtype\":\"F16\",\"shape\":[10],\"data_offsets\":[8,28]},"
                      "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[28,36]}}";
    const char *p = tmp_path("half.safetensors");
    write_st_raw(p, hdr, data, sizeof data, -1);
    st_file f;
    char err[512] = "";
    int rc = st_open(&f, p, err, sizeof err);
    CHECK(rc == 0, "hand-built BF16/F16 file rejected: %s", err);
    if (rc != 0) return;
    float out[10];
    const st_tensor *t = st_find(&f, "b");
    rc = st_read_f32(&f, t, 0, 4, out, err, sizeof err);
    int ok = rc == 0 && t->dtype == ST_BF16;
    for (int i = 0; i < 4; i++)
        ok = ok && same_float(out[i], bf_want[i]);
    CHECK(ok, "BF16 values wrong: %g %g %g", (double)out[0], (double)out[1], (double)out[2]);
    t = st_find(&f, "h");
    rc = st_read_f32(&f, t, 0, 10, out, err, sizeof err);
    ok = rc == 0 && t->dtype == ST_F16;
    for (int i = 0; i < 10; i++) {
        if (!same_float(out[i], hf_want[i]))
            printf("  F16 %d: got %g want %g\n", i, (double)out[i], (double)hf_want[i]);
        ok = ok && same_float(out[i], hf_want[i]);
    }
    CHECK(ok, "F16 values wrong");
    t = st_find(&f, "f");
    rc = st_read_f32(&f, t, 1, 1, out, err, sizeof err);
    CHECK(rc == 0 && out[0] == -0.75f, "F32 after half tensors");
    st_close(&f);

    /* every F16 bit pattern, in a tensor larger than the reader's chunk: checks the conversion
     * exhaustively and the chunk boundaries (5 x 65536 elements) */
    size_t n = 5 * 65536;
    uint16_t *all = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        all[i] = (uint16_t)(i * 7 + (i >> 16));
    char hdr2[256];
    snprintf(hdr2, sizeof hdr2,
             "{\"x\":{\"dtype\":\"F16\",\"shape\":[5,65536],\"data_offsets\":[0,%zu]}}", n * 2);
    write_st_raw(p, hdr2, all, n * 2, -1);
    float *o = malloc(n * sizeof *o);
    rc = st_open(&f, p, err, sizeof err);
    CHECK(rc == 0, "large F16 file: %s", err);
    if (rc == 0) {
        rc = st_read_f32(&f, &f.tensors[0], 0, n, o, err, sizeof err);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += !same_float(o[i], f16_ref(all[i]));
        CHECK(rc == 0 && bad == 0, "F16 exhaustive: %zu wrong (%s)", bad, err);
        /* a partial read that crosses a chunk boundary */
        size_t first = 262144 - 100;
        rc = st_read_f32(&f, &f.tensors[0], first, 300, o, err, sizeof err);
        bad = 0;
        for (size_t i = 0; i < 300; i++)
            bad += !same_float(o[i], f16_ref(all[first + i]));
        CHECK(rc == 0 && bad == 0, "F16 partial read across a chunk: %zu wrong", bad);
        st_close(&f);
    }
    free(o);
    free(all);
}

static void test_st_corrupt(void) {
    static const unsigned char zeros[64];
    struct {
        const char *header;
        size_t dlen;
        long long hlen; /* -1: the true length */
        const char *phrase;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, -1, "truncated"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 1000,
         "larger than the file"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0,
         "header length is 0"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 200000000,
         "100 MB"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, -1, "invalid"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}x", 8, -1, "invalid"},
        {"[1,2]", 0, -1, "does not start with '{'"},
        {"{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, -1, "dtype \"Q7\""},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, -1,
         "does not read"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, -1, "span"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, -1, "overlaps"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
         20, -1, "gap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, -1, "gap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         12, -1, "ends at byte 16"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, -1,
         "after the last tensor"},
        {"{}", 4, -1, "no tensors"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1,2],\"data_offsets\":[0,8]}}", 8, -1,
         "non-negative"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
         "\"data_offsets\":[0,8]}}",
         8, -1, "overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}", 8,
         -1, "overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, -1,
         "dimensions"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, -1, "duplicate"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[\"0\",\"8\"]}}", 8, -1,
         "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, -1, "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.0]}}", 8, -1,
         "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":8}}", 8, -1, "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, -1, "begin <= end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8, -1,
         "begin <= end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
         "\"data_offsets\":[0,99999999999999999999]}}",
         8, -1, "invalid"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, -1,
         "non-negative integer"},
        {"{\"a\":5}", 0, -1, "not an object"},
        {"{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, -1, "lacks"},
        {"{\"__metadata__\":[1],\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         -1, "__metadata__"},
    };
    char err[512];
    const char *p = tmp_path("bad.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st_raw(p, cases[i].header, zeros, cases[i].dlen, cases[i].hlen);
        st_file f;
        err[0] = '\0';
        int rc = st_open(&f, p, err, sizeof err);
        CHECK(rc == -1 && strstr(err, cases[i].phrase) != NULL && strchr(err, '\n') == NULL,
              "corrupt safetensors %zu: rc %d, message \"%s\" lacks \"%s\"", i, rc, err,
              cases[i].phrase);
        if (rc == 0) st_close(&f);
    }
    /* too small for the length field; and a missing file */
    write_bytes(p, "abc", 3);
    st_file f;
    int rc = st_open(&f, p, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "too small"), "3-byte file: \"%s\"", err);
    rc = st_open(&f, tmp_path("missing.safetensors"), err, sizeof err);
    CHECK(rc == -1 && strstr(err, "cannot open"), "missing file: \"%s\"", err);
    /* valid edge cases: no tensors at all, trailing spaces in the header, zero-size tensors */
    write_st_raw(p, "{}", NULL, 0, -1);
    rc = st_open(&f, p, err, sizeof err);
    CHECK(rc == 0 && f.n == 0, "empty safetensors rejected: %s", err);
    if (rc == 0) st_close(&f);
    write_st_raw(p,
                 "{\"e\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[0,0]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"z\":{\"dtype\":\"BF16\",\"shape\":[3,0],\"data_offsets\":[8,8]}}     ",
                 zeros, 8, -1);
    rc = st_open(&f, p, err, sizeof err);
    CHECK(rc == 0 && f.n == 3, "zero-size tensors rejected: %s", err);
    if (rc == 0) st_close(&f);
}

int main(void) {
    if (tmp_dir_make("test_safetensors") != 0) return 1;
    test_st_roundtrip();
    test_st_half();
    test_st_corrupt();
    cleanup_dir();
    return harness_finish("test_safetensors");
}
