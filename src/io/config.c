/* config.c — HF LlamaForCausalLM config.json <-> model_config (jansson). */
#include "io/config.h"

#include "core/check.h"
#include "core/fileio.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest accepted size of a model dimension (hidden_size, intermediate_size, heads, head_dim,
 * vocab_size) and of num_hidden_layers: far beyond any real model, small enough that products of
 * two sizes fit easily in size_t and the parameter count can be checked (parse_root). */
#define CONFIG_MAX_DIM (1 << 24)
#define CONFIG_MAX_LAYERS 100000

/* An integer field in [1, max]. required: absent -> error; else absent -> *out untouched,
 * returns 0. null counts as absent (HF writes "head_dim": null in some configs). */
static int get_pos_int(const json_t *root, const char *key, int required, int max, int *out,
                       const char *label, char *err, size_t errlen) {
    json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        if (required)
            return up_errf(err, errlen, label,
                           "required field \"%s\" is missing: add it (a positive integer)", key);
        return 0;
    }
    double d;
    if (json_is_integer(v)) {
        d = (double)json_integer_value(v);
    } else {
        /* Accept 4096.0 (some exporters write floats), reject 4096.5 and strings. */
        d = json_is_real(v) ? json_real_value(v) : NAN;
        if (!(d == floor(d)))
            return up_errf(err, errlen, label, "\"%s\" must be a positive integer: fix its value",
                           key);
    }
    if (!(d >= 1.0 && d <= (double)max))
        return up_errf(err, errlen, label,
                       "\"%s\" is %.17g but must be a positive integer in [1, %d]: fix its value",
                       key, d, max);
    *out = (int)d;
    return 0;
}

/* A real field (integers accepted) in the range lo..hi, each end open or closed; absent or null
 * -> *out untouched. Every range here lies far inside float32, so a value that is finite in JSON
 * but overflows the float the model keeps (1e39) is refused by the range. The message names the
 * key, the value and the range. */
typedef struct {
    double lo, hi;
    int lo_open, hi_open; /* 1: the end itself is excluded */
    const char *hint;     /* what to do, e.g. "use e.g. 1e-5" */
} real_range;

static int get_real(const json_t *obj, const char *key, int required, real_range rg, double *out,
                    const char *label, const char *where, char *err, size_t errlen) {
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v)) {
        if (required)
            return up_errf(err, errlen, label, "%s\"%s\" is missing: add it (a positive number)",
                           where, key);
        return 0;
    }
    if (!json_is_number(v))
        return up_errf(err, errlen, label, "%s\"%s\" must be a number: fix its value", where, key);
    double d = json_number_value(v);
    int in = isfinite(d) && (rg.lo_open ? d > rg.lo : d >= rg.lo) &&
             (rg.hi_open ? d < rg.hi : d <= rg.hi);
    if (!in)
        return up_errf(err, errlen, label, "%s%s is %g but must be in %c%g, %g%c: %s", where, key,
                       d, rg.lo_open ? '(' : '[', rg.lo, rg.hi, rg.hi_open ? ')' : ']', rg.hint);
    *out = d;
    return 0;
}

static int parse_rope_scaling(model_config *cfg, const json_t *rs, const char *label, char *err,
                              size_t errlen) {
    cfg->rope.type = ROPE_SCALING_NONE;
    if (rs == NULL || json_is_null(rs)) return 0;
    if (!json_is_object(rs))
        return up_errf(err, errlen, label,
                       "\"rope_scaling\" must be null or an object: use null or "
                       "{\"rope_type\": \"llama3\", ...}");
    /* Newer HF configs say "rope_type", older ones "type"; take whichever is present. */
    json_t *t = json_object_get(rs, "rope_type");
    if (t == NULL || json_is_null(t)) t = json_object_get(rs, "type");
    if (t == NULL || !json_is_string(t))
        return up_errf(err, errlen, label,
                       "\"rope_scaling\" has no string \"rope_type\" (or \"type\"): "
                       "set it to \"llama3\" or \"default\", or make rope_scaling null");
    const char *type = json_string_value(t);
    if (strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "llama3") != 0)
        return up_errf(err, errlen, label,
                       "rope_scaling type \"%s\" is not supported: upipe implements \"llama3\" "
                       "and \"default\" (or null)",
                       type);
    const char *where = "rope_scaling.";
    double factor = 0, low = 0, high = 0;
    const real_range rg = {0, 1e6, 1, 0, "Llama 3.1 uses factor 8, low 1, high 4"};
    if (get_real(rs, "factor", 1, rg, &factor, label, where, err, errlen) ||
        get_real(rs, "low_freq_factor", 1, rg, &low, label, where, err, errlen) ||
        get_real(rs, "high_freq_factor", 1, rg, &high, label, where, err, errlen))
        return -1;
    int orig = 0;
    json_t *o = json_object_get(rs, "original_max_position_embeddings");
    if (o == NULL || json_is_null(o))
        return up_errf(err, errlen, label,
                       "rope_scaling.\"original_max_position_embeddings\" is missing: add it "
                       "(8192 for Llama 3.1)");
    if (get_pos_int(rs, "original_max_position_embeddings", 1, INT_MAX, &orig, label, err, errlen))
        return -1;
    if (!((float)high > (float)low)) /* in the float32 the rope kernel divides by */
        return up_errf(err, errlen, label,
                       "rope_scaling.high_freq_factor (%g) must be greater than low_freq_factor "
                       "(%g): the llama3 rule divides by their difference",
                       high, low);
    cfg->rope.type = ROPE_SCALING_LLAMA3;
    cfg->rope.factor = (float)factor;
    cfg->rope.low_freq_factor = (float)low;
    cfg->rope.high_freq_factor = (float)high;
    cfg->rope.original_max_pos = orig;
    return 0;
}

static int parse_root(model_config *cfg, const json_t *root, const char *label, char *err,
                      size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    if (!json_is_object(root))
        return up_errf(err, errlen, label,
                       "the top level is not a JSON object: expected an HF "
                       "LlamaForCausalLM config");
    const int D = CONFIG_MAX_DIM;
    if (get_pos_int(root, "hidden_size", 1, D, &cfg->C, label, err, errlen) ||
        get_pos_int(root, "intermediate_size", 1, D, &cfg->F, label, err, errlen) ||
        get_pos_int(root, "num_hidden_layers", 1, CONFIG_MAX_LAYERS, &cfg->L, label, err, errlen) ||
        get_pos_int(root, "num_attention_heads", 1, D, &cfg->NH, label, err, errlen) ||
        get_pos_int(root, "vocab_size", 1, D, &cfg->V, label, err, errlen))
        return -1;
    cfg->NKV = cfg->NH;
    if (get_pos_int(root, "num_key_value_heads", 0, D, &cfg->NKV, label, err, errlen)) return -1;
    cfg->HS = 0;
    if (get_pos_int(root, "head_dim", 0, D, &cfg->HS, label, err, errlen)) return -1;
    if (cfg->HS == 0) {
        if (cfg->C % cfg->NH != 0)
            return up_errf(err, errlen, label,
                           "hidden_size (%d) is not divisible by num_attention_heads (%d) and "
                           "head_dim is absent: add head_dim or fix the sizes",
                           cfg->C, cfg->NH);
        cfg->HS = cfg->C / cfg->NH;
    }
    if (cfg->NH % cfg->NKV != 0)
        return up_errf(err, errlen, label,
                       "num_attention_heads (%d) is not divisible by num_key_value_heads (%d): "
                       "every KV head must serve the same number of query heads",
                       cfg->NH, cfg->NKV);
    if (cfg->HS % 2 != 0)
        return up_errf(err, errlen, label,
                       "head_dim (%d) is odd: RoPE rotates pairs of channels, use an even "
                       "head_dim",
                       cfg->HS);
    if ((long long)cfg->NH * cfg->HS > INT_MAX)
        return up_errf(err, errlen, label,
                       "num_attention_heads * head_dim overflows: the model "
                       "is too large");

    /* parameters (as param_table_build counts them), in double: every size is below 2^24 and
     * the layers below 10^5, so this is exact enough to refuse a model no size_t slab holds */
    double qd = (double)cfg->NH * cfg->HS, kvd = (double)cfg->NKV * cfg->HS;
    double per_layer =
        2.0 * cfg->C + 2.0 * qd * cfg->C + 2.0 * kvd * cfg->C + 3.0 * cfg->F * cfg->C;
    double nparams = (double)cfg->V * cfg->C * 2 + cfg->C + (double)cfg->L * per_layer;
    if (nparams > 0x1p50)
        return up_errf(err, errlen, label,
                       "the sizes give %.3g parameters, more than upipe can hold (at most 2^50): "
                       "check hidden_size, intermediate_size, num_hidden_layers and vocab_size",
                       nparams);

    double eps = 1e-6, theta = 10000.0, init_std = 0.02;
    if (get_real(root, "rms_norm_eps", 0, (real_range){0, 1, 1, 1, "use e.g. 1e-5"}, &eps, label,
                 "", err, errlen) ||
        get_real(root, "rope_theta", 0, (real_range){0, 1e12, 1, 0, "use e.g. 500000"}, &theta,
                 label, "", err, errlen) ||
        get_real(root, "initializer_range", 0, (real_range){0, 10, 0, 0, "use e.g. 0.02"},
                 &init_std, label, "", err, errlen))
        return -1;
    cfg->eps = (float)eps;
    cfg->rope_theta = (float)theta;
    cfg->init_std = (float)init_std;
    if (!(cfg->eps > 0))
        return up_errf(err, errlen, label, "rms_norm_eps (%g) underflows in fp32: use e.g. 1e-5",
                       eps);

    json_t *tied = json_object_get(root, "tie_word_embeddings");
    if (tied != NULL && !json_is_null(tied)) {
        if (json_is_boolean(tied))
            cfg->tied = json_is_true(tied);
        else if (json_is_integer(tied) &&
                 (json_integer_value(tied) == 0 || json_integer_value(tied) == 1))
            cfg->tied = (int)json_integer_value(tied);
        else
            return up_errf(err, errlen, label, "\"tie_word_embeddings\" must be true or false");
    }

    int max_pos = 0;
    if (get_pos_int(root, "max_position_embeddings", 0, INT_MAX, &max_pos, label, err, errlen))
        return -1;
    cfg->max_pos = max_pos;

    /* Features of other Llama-like models that upipe does not implement: refuse rather than
     * silently ignore them (a checkpoint with biases would load and give wrong numbers). */
    json_t *act = json_object_get(root, "hidden_act");
    if (act != NULL && !json_is_null(act) &&
        (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0))
        return up_errf(err, errlen, label,
                       "hidden_act is \"%s\" but upipe implements only \"silu\" (SwiGLU)",
                       json_is_string(act) ? json_string_value(act) : "?");
    const char *bias_keys[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++) {
        json_t *b = json_object_get(root, bias_keys[i]);
        if (b != NULL && json_is_true(b))
            return up_errf(err, errlen, label,
                           "\"%s\" is true but upipe's Llama has no biases: use a model without "
                           "them",
                           bias_keys[i]);
    }

    return parse_rope_scaling(cfg, json_object_get(root, "rope_scaling"), label, err, errlen);
}

static int parse_text(model_config *cfg, const char *text, size_t len, const char *label, char *err,
                      size_t errlen) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    if (root == NULL)
        return up_errf(err, errlen, label,
                       "invalid JSON at line %d column %d (%s): fix the file or regenerate it",
                       jerr.line, jerr.column, jerr.text);
    int rc = parse_root(cfg, root, label, err, errlen);
    json_decref(root);
    return rc;
}

int config_parse(model_config *cfg, const char *json_text, char *err, size_t errlen) {
    if (json_text == NULL) return up_errf(err, errlen, "config.json", "no text given");
    return parse_text(cfg, json_text, strlen(json_text), "config.json", err, errlen);
}

int config_load(model_config *cfg, const char *path, char *err, size_t errlen) {
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return up_errf(err, errlen, path,
                       "cannot open (%s): pass the path of the model's config.json",
                       strerror(errno));
    /* Configs are a few KB; refuse anything absurd instead of reading it into memory. */
    const size_t max_bytes = (size_t)16 << 20;
    char *buf = malloc(max_bytes + 1);
    if (buf == NULL) {
        fclose(fp);
        return up_errf(err, errlen, path, "out of memory reading the config");
    }
    size_t len = fread(buf, 1, max_bytes + 1, fp);
    int rd_err = ferror(fp);
    fclose(fp);
    int rc;
    if (rd_err)
        rc = up_errf(err, errlen, path, "read error: check the file");
    else if (len > max_bytes)
        rc = up_errf(err, errlen, path, "file is larger than 16 MiB: this is not a config.json");
    else
        rc = parse_text(cfg, buf, len, path, err, errlen);
    free(buf);
    return rc;
}

/* The shortest decimal that reads back as the same float, as a double, so the JSON shows
 * "1e-05" rather than "9.99999974737875e-06" (the file is dumped with 9 significant digits). */
static json_t *json_float(float x) {
    char buf[64];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    return json_real(strtod(buf, NULL));
}

int config_save(const model_config *cfg, const char *path, char *err, size_t errlen) {
    json_t *root = json_object();
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("LlamaForCausalLM"));
    json_object_set_new(root, "architectures", arch);
    json_object_set_new(root, "model_type", json_string("llama"));
    json_object_set_new(root, "hidden_size", json_integer(cfg->C));
    json_object_set_new(root, "intermediate_size", json_integer(cfg->F));
    json_object_set_new(root, "num_hidden_layers", json_integer(cfg->L));
    json_object_set_new(root, "num_attention_heads", json_integer(cfg->NH));
    json_object_set_new(root, "num_key_value_heads", json_integer(cfg->NKV));
    json_object_set_new(root, "head_dim", json_integer(cfg->HS));
    json_object_set_new(root, "vocab_size", json_integer(cfg->V));
    if (cfg->max_pos > 0)
        json_object_set_new(root, "max_position_embeddings", json_integer(cfg->max_pos));
    json_object_set_new(root, "rms_norm_eps", json_float(cfg->eps));
    json_object_set_new(root, "rope_theta", json_float(cfg->rope_theta));
    if (cfg->rope.type == ROPE_SCALING_LLAMA3) {
        json_t *rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("llama3"));
        json_object_set_new(rs, "factor", json_float(cfg->rope.factor));
        json_object_set_new(rs, "low_freq_factor", json_float(cfg->rope.low_freq_factor));
        json_object_set_new(rs, "high_freq_factor", json_float(cfg->rope.high_freq_factor));
        json_object_set_new(rs, "original_max_position_embeddings",
                            json_integer(cfg->rope.original_max_pos));
        json_object_set_new(root, "rope_scaling", rs);
    } else {
        json_object_set_new(root, "rope_scaling", json_null());
    }
    json_object_set_new(root, "tie_word_embeddings", json_boolean(cfg->tied));
    json_object_set_new(root, "initializer_range", json_float(cfg->init_std));
    json_object_set_new(root, "hidden_act", json_string("silu"));
    json_object_set_new(root, "attention_bias", json_false());
    json_object_set_new(root, "mlp_bias", json_false());
    json_object_set_new(root, "torch_dtype", json_string("float32"));

    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (text == NULL) return up_errf(err, errlen, path, "out of memory formatting the config");
    /* A trailing newline, as HF writes it. */
    size_t len = strlen(text);
    char *out = malloc(len + 2);
    if (out == NULL) {
        free(text);
        return up_errf(err, errlen, path, "out of memory formatting the config");
    }
    memcpy(out, text, len);
    out[len] = '\n';
    out[len + 1] = '\0';
    free(text);
    int rc = up_write_file_atomic(path, out, len + 1, err, errlen);
    free(out);
    return rc;
}
