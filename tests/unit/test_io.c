/* test_io.c — config.json, safetensors and token-shard readers/writers, `upipe data`.
 *
 * Every bad input must give -1 and a message naming the problem, never a crash. Files live in a
 * mkdtemp directory under /tmp that is removed at the end. Final line: "N passed, M failed". */
#include "cmd/data_cmd.h"
#include "io/config.h"
#include "io/corpus.h"
#include "io/safetensors.h"
#include "io/shard.h"

#include "harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[256];


static const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", g_dir, name);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t len) {
    FILE *fp = fopen(path, "wb");
    if (fp == NULL) {
        printf("cannot create %s\n", path);
        exit(1);
    }
    if (len > 0 && fwrite(data, 1, len, fp) != len) exit(1);
    fclose(fp);
}

static unsigned char *read_bytes(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, fp) != (size_t)n) n = 0;
    fclose(fp);
    *len = (size_t)n;
    return b;
}

static void cleanup_dir(void) {
    DIR *d = opendir(g_dir);
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        unlink(tmp_path(e->d_name));
    }
    closedir(d);
    rmdir(g_dir);
}

/* Counts files in the temp dir whose name contains s (to find stray temp files). */
static int count_files_with(const char *s) {
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += strstr(e->d_name, s) != NULL;
    if (d) closedir(d);
    return n;
}

/* ---- config ------------------------------------------------------------------------------ */

static const char *cfg_llama3 =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\","
    " \"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_hidden_layers\": 32,"
    " \"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"vocab_size\": 128256,"
    " \"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0,"
    " \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
    " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
    " \"tie_word_embeddings\": false, \"hidden_act\": \"silu\", \"torch_dtype\": \"bfloat16\"}";

static void test_config_good(void) {
    model_config c;
    char err[512] = "";
    int rc = config_parse(&c, cfg_llama3, err, sizeof err);
    CHECK(rc == 0, "llama3 config rejected: %s", err);
    CHECK(c.C == 4096 && c.F == 14336 && c.L == 32 && c.NH == 32 && c.NKV == 8 && c.HS == 128 &&
              c.V == 128256,
          "llama3 sizes wrong");
    CHECK(c.eps == 1e-5f && c.rope_theta == 500000.0f && c.max_pos == 131072 && c.tied == 0,
          "llama3 scalars wrong");
    CHECK(c.rope.type == ROPE_SCALING_LLAMA3 && c.rope.factor == 8.0f &&
              c.rope.low_freq_factor == 1.0f && c.rope.high_freq_factor == 4.0f &&
              c.rope.original_max_pos == 8192,
          "llama3 rope_scaling wrong");
    CHECK(c.init_std == 0.02f, "initializer_range default wrong");

    /* null rope_scaling, NKV absent (MHA), defaults */
    rc = config_parse(&c,
                      "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                      " \"num_attention_heads\": 4, \"vocab_size\": 256, \"rope_scaling\": null}",
                      err, sizeof err);
    CHECK(rc == 0, "minimal config rejected: %s", err);
    CHECK(c.NKV == 4 && c.HS == 16 && c.rope.type == ROPE_SCALING_NONE && c.eps == 1e-6f &&
              c.rope_theta == 10000.0f && c.tied == 0 && c.max_pos == 0,
          "minimal config defaults wrong (NKV %d HS %d eps %g theta %g)", c.NKV, c.HS,
          (double)c.eps, (double)c.rope_theta);

    /* legacy "type" key */
    rc = config_parse(
        &c,
        "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
        " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 256,"
        " \"rope_scaling\": {\"type\": \"llama3\", \"factor\": 4, \"low_freq_factor\": 1,"
        " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 64}}",
        err, sizeof err);
    CHECK(rc == 0 && c.rope.type == ROPE_SCALING_LLAMA3 && c.rope.factor == 4.0f &&
              c.rope.original_max_pos == 64,
          "legacy rope_scaling type rejected or wrong: %s", err);

    /* rope_type "default" means no scaling */
    rc = config_parse(&c,
                      "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                      " \"num_attention_heads\": 4, \"vocab_size\": 256,"
                      " \"rope_scaling\": {\"rope_type\": \"default\"}}",
                      err, sizeof err);
    CHECK(rc == 0 && c.rope.type == ROPE_SCALING_NONE, "rope_type default: %s", err);

    /* head_dim different from C / NH, tied embeddings */
    rc = config_parse(&c,
                      "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 1,"
                      " \"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"head_dim\": 32,"
                      " \"vocab_size\": 300, \"tie_word_embeddings\": true,"
                      " \"initializer_range\": 0.05}",
                      err, sizeof err);
    CHECK(rc == 0 && c.HS == 32 && c.NKV == 1 && c.tied == 1 && c.init_std == 0.05f,
          "head_dim/tied config wrong: %s", err);

    /* config_load from a file */
    write_bytes(tmp_path("config.json"), cfg_llama3, strlen(cfg_llama3));
    rc = config_load(&c, tmp_path("config.json"), err, sizeof err);
    CHECK(rc == 0 && c.NKV == 8, "config_load failed: %s", err);
}

static void test_config_bad(void) {
    struct {
        const char *json;
        const char *phrase;
    } cases[] = {
        {"{\"hidden_size\": 60, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 6, \"num_key_value_heads\": 4, \"vocab_size\": 256}",
         "not divisible by num_key_value_heads"},
        {"{\"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
         " \"vocab_size\": 256}",
         "\"hidden_size\" is missing"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,",
         "invalid JSON"},
        {"[1, 2]", "not a JSON object"},
        {"{\"hidden_size\": 64, \"intermediate_size\": -5, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256}",
         "intermediate_size"},
        {"{\"hidden_size\": \"64\", \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256}",
         "positive integer"},
        {"{\"hidden_size\": 60, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256}",
         "odd"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 5, \"vocab_size\": 256}",
         "not divisible by num_attention_heads"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256, \"rms_norm_eps\": 0}",
         "rms_norm_eps"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256, \"rope_theta\": -1}",
         "rope_theta"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256,"
         " \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
         "\"yarn\" is not supported"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256,"
         " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4,"
         " \"high_freq_factor\": 1, \"original_max_position_embeddings\": 64}}",
         "greater than low_freq_factor"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256,"
         " \"rope_scaling\": {\"rope_type\": \"llama3\", \"low_freq_factor\": 1,"
         " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 64}}",
         "\"factor\" is missing"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256,"
         " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 0, \"low_freq_factor\": 1,"
         " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 64}}",
         "must be positive"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256, \"rope_scaling\": {\"factor\": 2}}",
         "rope_type"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256, \"hidden_act\": \"gelu\"}",
         "silu"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256, \"attention_bias\": true}",
         "attention_bias"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_config c;
        char err[512] = "";
        int rc = config_parse(&c, cases[i].json, err, sizeof err);
        CHECK(rc == -1 && strstr(err, cases[i].phrase) != NULL &&
                  strncmp(err, "config.json: ", 13) == 0 && strchr(err, '\n') == NULL,
              "bad config %zu: rc %d, message \"%s\" lacks \"%s\"", i, rc, err, cases[i].phrase);
    }
    model_config c;
    char err[512] = "";
    int rc = config_load(&c, tmp_path("no_such_config.json"), err, sizeof err);
    CHECK(rc == -1 && strstr(err, "cannot open") != NULL && strstr(err, "no_such_config") != NULL,
          "missing config file: rc %d \"%s\"", rc, err);
}

static void test_config_save(void) {
    model_config a, b;
    char err[512] = "";
    if (config_parse(&a, cfg_llama3, err, sizeof err) != 0) {
        CHECK(0, "parse: %s", err);
        return;
    }
    a.init_std = 0.02f;
    const char *p = tmp_path("saved_config.json");
    int rc = config_save(&a, p, err, sizeof err);
    CHECK(rc == 0, "config_save: %s", err);
    rc = config_load(&b, p, err, sizeof err);
    CHECK(rc == 0 && memcmp(&a, &b, sizeof a) == 0, "config save/load round trip differs: %s", err);
    json_error_t jerr;
    json_t *root = json_load_file(p, 0, &jerr);
    CHECK(root != NULL, "saved config is not valid JSON: %s", jerr.text);
    if (root != NULL) {
        json_t *arch = json_object_get(root, "architectures");
        CHECK(json_is_array(arch) &&
                  strcmp(json_string_value(json_array_get(arch, 0)), "LlamaForCausalLM") == 0,
              "architectures missing");
        CHECK(strcmp(json_string_value(json_object_get(root, "model_type")), "llama") == 0 &&
                  strcmp(json_string_value(json_object_get(root, "torch_dtype")), "float32") == 0,
              "model_type / torch_dtype wrong");
        json_t *rs = json_object_get(root, "rope_scaling");
        CHECK(json_is_object(rs) &&
                  strcmp(json_string_value(json_object_get(rs, "rope_type")), "llama3") == 0,
              "rope_scaling not written");
        json_decref(root);
    }
    size_t len = 0;
    char *text = (char *)read_bytes(p, &len);
    if (text) text[len] = '\0';
    /* floats are written in their shortest round-trip form, not as 9.99999975e-06 */
    CHECK(text && strstr(text, "\"rms_norm_eps\": 1e-5") &&
              strstr(text, "\"initializer_range\": 0.02,"),
          "float formatting: %s", text ? text : "(null)");
    free(text);

    /* no scaling -> null, and round trip */
    a.rope.type = ROPE_SCALING_NONE;
    a.rope.factor = a.rope.low_freq_factor = a.rope.high_freq_factor = 0;
    a.rope.original_max_pos = 0;
    a.tied = 1;
    rc = config_save(&a, p, err, sizeof err) || config_load(&b, p, err, sizeof err);
    CHECK(rc == 0 && memcmp(&a, &b, sizeof a) == 0, "round trip without scaling differs: %s", err);
    CHECK(count_files_with(".tmp.") == 0, "config_save left a temp file");
    rc = config_save(&a, "/nonexistent_dir_upipe/config.json", err, sizeof err);
    CHECK(rc == -1 && err[0] != '\0', "config_save into a missing directory did not fail");
}

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

/* ---- shards ------------------------------------------------------------------------------ */

static void write_shard_raw(const char *path, int32_t magic, int32_t version, int32_t count,
                            const void *tok, size_t tok_bytes) {
    unsigned char *buf = calloc(1, 1024 + tok_bytes);
    int32_t h[3] = {magic, version, count};
    memcpy(buf, h, sizeof h);
    if (tok_bytes) memcpy(buf + 1024, tok, tok_bytes);
    write_bytes(path, buf, 1024 + tok_bytes);
    free(buf);
}

static void test_shards(void) {
    char err[512] = "";
    size_t n = 1000;
    uint32_t *tok = malloc(n * sizeof *tok);
    for (size_t i = 0; i < n; i++)
        tok[i] = (uint32_t)((i * 37) % 300);
    const char *p16 = tmp_path("s16.bin");
    int rc = shard_write(p16, tok, n, err, sizeof err);
    CHECK(rc == 0, "shard_write u16: %s", err);
    size_t len = 0;
    unsigned char *raw = read_bytes(p16, &len);
    int32_t h[3];
    memcpy(h, raw, sizeof h);
    uint16_t t1;
    memcpy(&t1, raw + 1024 + 2, 2);
    CHECK(len == 1024 + 2 * n && h[0] == SHARD_MAGIC_U16 && h[1] == 1 && h[2] == (int32_t)n &&
              t1 == tok[1],
          "u16 shard layout (len %zu magic %d version %d count %d)", len, h[0], h[1], h[2]);
    free(raw);
    token_shard s;
    rc = shard_open(&s, p16, 300, err, sizeof err);
    CHECK(rc == 0 && s.ntok == n && s.token_bytes == 2, "shard_open u16: %s", err);
    if (rc == 0) {
        size_t m = 2 * n + 10;
        int32_t *out = malloc(m * sizeof *out);
        size_t starts[3] = {0, n - 5, 3 * n + 7};
        for (int k = 0; k < 3; k++) {
            shard_read(&s, starts[k], m, out);
            size_t bad = 0;
            for (size_t i = 0; i < m; i++)
                bad += out[i] != (int32_t)tok[(starts[k] + i) % n];
            CHECK(bad == 0, "shard_read from %zu: %zu wrong", starts[k], bad);
        }
        free(out);
        shard_close(&s);
    }
    /* vocab too small for the data */
    rc = shard_open(&s, p16, 299, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "is >= vocab_size 299") && strstr(err, "token 299 at position"),
          "token >= vocab: \"%s\"", err);

    /* u32 format when an id needs it */
    tok[12] = 70000;
    const char *p32 = tmp_path("s32.bin");
    rc = shard_write(p32, tok, n, err, sizeof err);
    CHECK(rc == 0, "shard_write u32: %s", err);
    rc = shard_open(&s, p32, 100000, err, sizeof err);
    CHECK(rc == 0 && s.token_bytes == 4 && s.ntok == n, "shard_open u32: %s", err);
    if (rc == 0) {
        int32_t out[20];
        shard_read(&s, n - 3, 20, out);
        int ok = 1;
        for (size_t i = 0; i < 20; i++)
            ok = ok && out[i] == (int32_t)tok[(n - 3 + i) % n];
        CHECK(ok && out[15] == 70000, "u32 wrap-around read");
        shard_close(&s);
    }
    rc = shard_open(&s, p32, 4096, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "token 70000 at position 12 is >= vocab_size 4096"),
          "u32 token >= vocab: \"%s\"", err);

    /* corrupt shards */
    const char *pb = tmp_path("bad.bin");
    raw = read_bytes(p16, &len);
    write_bytes(pb, raw, len - 3);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "truncated") && strstr(err, "1000 tokens"), "truncated: \"%s\"",
          err);
    unsigned char *more = calloc(1, len + 4);
    memcpy(more, raw, len);
    write_bytes(pb, more, len + 4);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "trailing"), "trailing bytes: \"%s\"", err);
    free(more);
    free(raw);
    uint16_t few[4] = {1, 2, 3, 4};
    write_shard_raw(pb, 12345, 1, 4, few, 8);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "bad magic 12345"), "bad magic: \"%s\"", err);
    write_shard_raw(pb, SHARD_MAGIC_U16, 7, 4, few, 8);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "version 7"), "bad version: \"%s\"", err);
    write_shard_raw(pb, SHARD_MAGIC_U32, 1, 2, few, 8);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "version 1"), "bad u32 version: \"%s\"", err);
    write_shard_raw(pb, SHARD_MAGIC_U16, 1, 0, NULL, 0);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "empty"), "empty count: \"%s\"", err);
    write_shard_raw(pb, SHARD_MAGIC_U16, 1, -5, NULL, 0);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "-5 tokens"), "negative count: \"%s\"", err);
    write_bytes(pb, few, 8);
    rc = shard_open(&s, pb, 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "smaller than the 1024-byte"), "tiny file: \"%s\"", err);
    rc = shard_open(&s, tmp_path("missing.bin"), 300, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "cannot open"), "missing shard: \"%s\"", err);
    /* a hand-built llm.c shard reads back */
    write_shard_raw(pb, SHARD_MAGIC_U16, 1, 4, few, 8);
    rc = shard_open(&s, pb, 5, err, sizeof err);
    CHECK(rc == 0, "hand-built shard: %s", err);
    if (rc == 0) {
        int32_t out[5];
        shard_read(&s, 2, 5, out);
        CHECK(out[0] == 3 && out[1] == 4 && out[2] == 1 && out[4] == 3, "hand-built shard read");
        shard_close(&s);
    }
    rc = shard_write(pb, tok, 0, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "no tokens"), "empty shard_write: \"%s\"", err);
    CHECK(count_files_with(".tmp.") == 0, "shard_write left a temp file");
    free(tok);
}

/* ---- corpora and `upipe data` ------------------------------------------------------------ */

static void test_tokenize(void) {
    const char *p = tmp_path("text.txt");
    const char text[] = "hello\n\xff";
    write_bytes(p, text, 7);
    char err[512] = "";
    size_t n = 0;
    uint32_t *t = corpus_tokenize_bytes(p, &n, err, sizeof err);
    CHECK(t && n == 7 && t[0] == 'h' && t[5] == '\n' && t[6] == 255, "byte tokenizer: %s", err);
    free(t);
    write_bytes(p, "", 0);
    t = corpus_tokenize_bytes(p, &n, err, sizeof err);
    CHECK(t == NULL && strstr(err, "empty"), "empty text: \"%s\"", err);
    t = corpus_tokenize_bytes(tmp_path("missing.txt"), &n, err, sizeof err);
    CHECK(t == NULL && strstr(err, "cannot open"), "missing text: \"%s\"", err);
}

/* Parses the corpus and checks every question: its key was stated earlier, its answer is the
 * value of the latest statement, and the question is about `distance` tokens after the fact. */
static void check_recall(size_t n, size_t distance, uint64_t seed) {
    uint32_t *t = corpus_make_recall(n, distance, seed);
    CHECK(t != NULL, "corpus_make_recall returned NULL");
    if (t == NULL) return;
    uint32_t *t2 = corpus_make_recall(n, distance, seed);
    uint32_t *t3 = corpus_make_recall(n, distance, seed + 1);
    CHECK(t2 && memcmp(t, t2, n * 4) == 0, "recall corpus not deterministic in seed");
    CHECK(t3 && memcmp(t, t3, n * 4) != 0, "recall corpus ignores the seed");
    free(t2);
    free(t3);
    size_t maxkey = 1;
    for (int i = 0; i < 6; i++)
        maxkey *= 26;
    /* key -> (value, position of the fact); keys are at most 6 letters, use a hash table */
    size_t cap = 1 << 20;
    uint64_t *hk = calloc(cap, sizeof *hk);
    uint32_t *hv = calloc(cap, sizeof *hv);
    size_t *hp = calloc(cap, sizeof *hp);
    size_t facts = 0, questions = 0, wrong = 0, unknown = 0, badfmt = 0, bytes_bad = 0;
    double dist_sum = 0;
    size_t i = 0;
    for (size_t k = 0; k < n; k++)
        bytes_bad += t[k] >= 128;
    while (i < n) {
        size_t start = i;
        uint64_t key = 0;
        while (i < n && t[i] >= 'a' && t[i] <= 'z')
            key = key * 26 + (t[i++] - 'a');
        if (i + 2 >= n) break; /* the last record may be cut off */
        uint32_t sep = t[i], val = t[i + 1], semi = t[i + 2];
        i += 3;
        if (i - start < 4 || (sep != '=' && sep != '?') || semi != ';' ||
            !strchr("0123456789ABCDEF", (int)val) || key >= maxkey) {
            badfmt++;
            break;
        }
        key += 1; /* 0 marks an empty slot */
        size_t slot = (size_t)(key * 0x9e3779b97f4a7c15ull >> 44) & (cap - 1);
        while (hk[slot] != 0 && hk[slot] != key)
            slot = (slot + 1) & (cap - 1);
        if (sep == '=') {
            hk[slot] = key;
            hv[slot] = val;
            hp[slot] = start;
            facts++;
        } else {
            questions++;
            if (hk[slot] == 0)
                unknown++;
            else {
                wrong += hv[slot] != val;
                dist_sum += (double)(start - hp[slot]);
            }
        }
    }
    double mean = questions ? dist_sum / (double)questions : 0;
    CHECK(bytes_bad == 0 && badfmt == 0, "recall format: %zu bad records, %zu ids >= 128", badfmt,
          bytes_bad);
    CHECK(wrong == 0 && unknown == 0, "recall answers: %zu wrong, %zu without a fact", wrong,
          unknown);
    /* About half the records are questions once the first gap has passed: with a corpus of
     * ~100 gaps, more than 40% of all records must be questions. */
    CHECK(questions > 0.4 * (double)(facts + questions), "recall: %zu questions, %zu facts",
          questions, facts);
    /* The due time is distance +- 50% (mean distance, rounded up to whole records); questions are
     * delayed a little when several fall due together. 0.9..1.5 x distance catches a wrong
     * scale without tracking the queueing exactly. */
    CHECK(mean >= 0.9 * (double)distance && mean <= 1.5 * (double)distance,
          "recall: mean fact-question distance %.1f for distance %zu", mean, distance);
    printf("  recall n=%zu distance=%zu: %zu facts, %zu questions, mean distance %.1f\n", n,
           distance, facts, questions, mean);
    free(hk);
    free(hv);
    free(hp);
    free(t);
}

/* Runs data_main with stdout/stderr silenced. */
/* Runs `upipe data` in a child with stdout and stderr silenced (a refusal stops the process with
 * up_die); returns the child's exit status. */
static int run_data_quiet(int argc, char **argv) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int nul = open("/dev/null", O_WRONLY);
        dup2(nul, 1);
        dup2(nul, 2);
        int rc = data_main(argc, argv);
        fflush(stdout);
        _exit(rc);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_data_main(void) {
    char out[512], in[512], missing[512];
    snprintf(out, sizeof out, "%s", tmp_path("cli.bin"));
    snprintf(in, sizeof in, "%s", tmp_path("cli.txt"));
    snprintf(missing, sizeof missing, "%s", tmp_path("missing.txt"));
    write_bytes(in, "abcabcabc", 9);
    char *a1[] = {"data", "recall",     "--output", out,      "--tokens",
                  "5000", "--distance", "100",      "--seed", "7"};
    int rc = run_data_quiet(10, a1);
    token_shard s;
    char err[512] = "";
    CHECK(rc == 0, "upipe data recall failed");
    rc = shard_open(&s, out, 256, err, sizeof err);
    CHECK(rc == 0 && s.ntok == 5000 && s.token_bytes == 2, "recall shard: %s", err);
    if (rc == 0) shard_close(&s);
    char *a2[] = {"data", "text", "--input", in, "--output", out};
    rc = run_data_quiet(6, a2);
    CHECK(rc == 0, "upipe data text failed");
    rc = shard_open(&s, out, 256, err, sizeof err);
    CHECK(rc == 0 && s.ntok == 9, "text shard: %s", err);
    if (rc == 0) {
        int32_t t[3];
        shard_read(&s, 8, 3, t);
        CHECK(t[0] == 'c' && t[1] == 'a' && t[2] == 'b', "text shard content");
        shard_close(&s);
    }
    char *a3[] = {"data", "recall", "--output", out, "--tokens", "100"}; /* default distance */
    CHECK(run_data_quiet(6, a3) == 0, "recall with the default distance and few tokens failed");
    char *help[] = {"data", "--help"};
    CHECK(run_data_quiet(2, help) == 0, "--help");
    char *b1[] = {"data", "recall", "--tokens", "100"};
    char *b2[] = {"data", "recall", "--output", out, "--tokens", "12x"};
    char *b3[] = {"data", "recall", "--output", out, "--tokens", "100", "--bogus", "1"};
    char *b4[] = {"data", "text", "--input", missing, "--output", out};
    char *b5[] = {"data", "frobnicate"};
    char *b6[] = {"data", "recall", "--output", out, "--tokens", "100", "--distance", "90"};
    char *b7[] = {"data", "recall", "--output", out, "--tokens"};
    char *b8[] = {"data"};
    CHECK(run_data_quiet(4, b1) != 0, "missing --output accepted");
    CHECK(run_data_quiet(6, b2) != 0, "bad --tokens accepted");
    CHECK(run_data_quiet(8, b3) != 0, "unknown flag accepted");
    CHECK(run_data_quiet(6, b4) != 0, "missing input accepted");
    CHECK(run_data_quiet(2, b5) != 0, "unknown subcommand accepted");
    CHECK(run_data_quiet(8, b6) != 0, "distance > tokens/2 accepted");
    CHECK(run_data_quiet(5, b7) != 0, "flag without value accepted");
    CHECK(run_data_quiet(1, b8) != 0, "no subcommand accepted");
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/upipe_test_io.XXXXXX");
    if (mkdtemp(g_dir) == NULL) {
        printf("test_io: cannot create a temp directory\n");
        return 1;
    }
    test_config_good();
    test_config_bad();
    test_config_save();
    test_st_roundtrip();
    test_st_half();
    test_st_corrupt();
    test_shards();
    test_tokenize();
    check_recall(200000, 64, 1);
    check_recall(400000, 2048, 2);
    check_recall(3000, 4, 3);
    test_data_main();
    cleanup_dir();
    return harness_finish("test_io");
}
