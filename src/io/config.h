/* config.h — the model configuration, read from an HF LlamaForCausalLM config.json (jansson).
 *
 * Accepted: rope_scaling null/absent, {"type": ...} (legacy) or {"rope_type": ...} with "llama3"
 * or "default"; head_dim absent (= hidden_size / num_attention_heads) or different from it;
 * num_key_value_heads absent (= num_attention_heads, MHA); tie_word_embeddings (default false);
 * initializer_range (default 0.02); rms_norm_eps (default 1e-6); rope_theta (default 10000). */
#ifndef UP_CONFIG_H
#define UP_CONFIG_H

#include <stddef.h>

/* rope_scaling of config.json (HF "llama3" rule, or none). */
typedef struct {
    int type;               /* ROPE_SCALING_NONE or ROPE_SCALING_LLAMA3 */
    float factor;           /* llama3: factor */
    float low_freq_factor;  /* llama3: low_freq_factor */
    float high_freq_factor; /* llama3: high_freq_factor */
    int original_max_pos;   /* llama3: original_max_position_embeddings */
} rope_scaling;
enum { ROPE_SCALING_NONE = 0, ROPE_SCALING_LLAMA3 = 1 };

typedef struct {
    int C;            /* hidden_size */
    int F;            /* intermediate_size */
    int L;            /* num_hidden_layers */
    int NH;           /* num_attention_heads */
    int NKV;          /* num_key_value_heads */
    int HS;           /* head_dim */
    int V;            /* vocab_size */
    float eps;        /* rms_norm_eps */
    float rope_theta; /* rope_theta */
    rope_scaling rope;
    int tied;       /* tie_word_embeddings */
    float init_std; /* initializer_range */
    long max_pos;   /* max_position_embeddings (informational; 0 if absent) */
} model_config;

/* Reads and validates path. Returns 0, or -1 with a one-line message in err ("what is wrong and
 * what to do"): missing file, invalid JSON, missing sizes, NH % NKV != 0, odd head_dim, unknown
 * rope type, and numbers out of range (the message names the key, the value and the range):
 * sizes (hidden_size, intermediate_size, heads, head_dim, vocab_size) in [1, 2^24],
 * num_hidden_layers in [1, 100000], at most 2^50 parameters; rms_norm_eps in (0, 1), rope_theta
 * in (0, 1e12], initializer_range in [0, 10], rope_scaling factor, low_freq_factor and
 * high_freq_factor in (0, 1e6] (so 1e39, finite in JSON but +inf as a float, is refused). */
int config_load(model_config *cfg, const char *path, char *err, size_t errlen);
/* Same from a JSON text (for tests). */
int config_parse(model_config *cfg, const char *json_text, char *err, size_t errlen);
/* Writes cfg as an HF config.json (atomically: temp file then rename). 0 or -1 with err. */
int config_save(const model_config *cfg, const char *path, char *err, size_t errlen);

#endif
