/* test_config.c — the config.json reader and writer (io/config.h).
 *
 * Every bad input must give -1 and a message naming the problem, never a crash. Files live in a
 * mkdtemp directory under /tmp that is removed at the end. Final line: "N passed, M failed". */
#include "io/config.h"

#include "harness.h"
#include "io_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
         "rope_scaling.factor is 0 but must be in (0, 1e+06]"},
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

/* Numbers out of range: each refused with a message naming the key, the value and the accepted
 * range. 1e39 is finite in JSON (a double) but +inf as the float the model keeps. */
static void test_config_ranges(void) {
    const char *base = "{\"hidden_size\": 64, \"intermediate_size\": 128, "
                       "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                       "\"vocab_size\": 256";
    struct {
        const char *extra; /* fields after base (each starts with ", ") */
        const char *phrase;
    } cases[] = {
        {", \"rms_norm_eps\": 1e39", "rms_norm_eps is 1e+39 but must be in (0, 1)"},
        {", \"rms_norm_eps\": 1", "rms_norm_eps is 1 but must be in (0, 1)"},
        {", \"rms_norm_eps\": -1e-5", "rms_norm_eps is -1e-05 but must be in (0, 1)"},
        {", \"rope_theta\": 1e39", "rope_theta is 1e+39 but must be in (0, 1e+12]"},
        {", \"rope_theta\": 2e12", "rope_theta is 2e+12 but must be in (0, 1e+12]"},
        {", \"rope_theta\": 0", "rope_theta is 0 but must be in (0, 1e+12]"},
        {", \"initializer_range\": 1e39", "initializer_range is 1e+39 but must be in [0, 10]"},
        {", \"initializer_range\": 11", "initializer_range is 11 but must be in [0, 10]"},
        {", \"initializer_range\": -0.02", "initializer_range is -0.02 but must be in [0, 10]"},
        {", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 1e39, "
         "\"low_freq_factor\": 1, \"high_freq_factor\": 4, "
         "\"original_max_position_embeddings\": 64}",
         "rope_scaling.factor is 1e+39 but must be in (0, 1e+06]"},
        {", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 2e6, "
         "\"low_freq_factor\": 1, \"high_freq_factor\": 4, "
         "\"original_max_position_embeddings\": 64}",
         "rope_scaling.factor is 2e+06 but must be in (0, 1e+06]"},
        {", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, "
         "\"low_freq_factor\": -1, \"high_freq_factor\": 4, "
         "\"original_max_position_embeddings\": 64}",
         "rope_scaling.low_freq_factor is -1 but must be in (0, 1e+06]"},
        {", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, "
         "\"low_freq_factor\": 1, \"high_freq_factor\": 1e39, "
         "\"original_max_position_embeddings\": 64}",
         "rope_scaling.high_freq_factor is 1e+39 but must be in (0, 1e+06]"},
        /* equal as float32 (the kernel divides by high - low in float) */
        {", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, "
         "\"low_freq_factor\": 1, \"high_freq_factor\": 1.00000001, "
         "\"original_max_position_embeddings\": 64}",
         "greater than low_freq_factor"},
        {", \"head_dim\": 33554432", "\"head_dim\" is 33554432 but must be a positive integer in "
                                     "[1, 16777216]"},
        {", \"num_key_value_heads\": 0", "\"num_key_value_heads\" is 0 but must be a positive "
                                         "integer in [1, 16777216]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[1024];
        snprintf(json, sizeof json, "%s%s}", base, cases[i].extra);
        model_config c;
        char err[512] = "";
        int rc = config_parse(&c, json, err, sizeof err);
        CHECK(rc == -1 && strstr(err, cases[i].phrase) != NULL && strchr(err, '\n') == NULL,
              "range case %zu: rc %d, message \"%s\" lacks \"%s\"", i, rc, err, cases[i].phrase);
    }
    /* sizes: each field at the limit + 1 (the rest valid) */
    struct {
        const char *json, *phrase;
    } sizes[] = {
        {"{\"hidden_size\": 16777218, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 2, \"vocab_size\": 256}",
         "\"hidden_size\" is 16777218 but must be a positive integer in [1, 16777216]"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 1e8, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256}",
         "\"intermediate_size\" is 100000000 but must be a positive integer in [1, 16777216]"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 100001,"
         " \"num_attention_heads\": 4, \"vocab_size\": 256}",
         "\"num_hidden_layers\" is 100001 but must be a positive integer in [1, 100000]"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 16777217, \"head_dim\": 2, \"vocab_size\": 256}",
         "\"num_attention_heads\" is 16777217 but must be a positive integer in [1, 16777216]"},
        {"{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"vocab_size\": 9007199254740993}",
         "\"vocab_size\" is 9007199254740992 but must be a positive integer in [1, 16777216]"},
        /* every size within its limit, the product too large for a slab */
        {"{\"hidden_size\": 16777216, \"intermediate_size\": 16777216, "
         "\"num_hidden_layers\": 100000, \"num_attention_heads\": 8192, \"vocab_size\": 256}",
         "more than upipe can hold"},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        model_config c;
        char err[512] = "";
        int rc = config_parse(&c, sizes[i].json, err, sizeof err);
        CHECK(rc == -1 && strstr(err, sizes[i].phrase) != NULL,
              "size case %zu: rc %d, message \"%s\" lacks \"%s\"", i, rc, err, sizes[i].phrase);
    }
    /* the ends of the ranges that are accepted */
    model_config c;
    char err[512] = "";
    char json[1024];
    snprintf(json, sizeof json,
             "%s, \"rope_theta\": 1e12, \"initializer_range\": 10, \"rms_norm_eps\": 0.999,"
             " \"num_key_value_heads\": 4}",
             base);
    int rc = config_parse(&c, json, err, sizeof err);
    CHECK(rc == 0 && c.rope_theta == 1e12f && c.init_std == 10.0f, "range ends refused: %s", err);
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

int main(void) {
    if (tmp_dir_make("test_config") != 0) return 1;
    test_config_good();
    test_config_bad();
    test_config_ranges();
    test_config_save();
    cleanup_dir();
    return harness_finish("test_config");
}
