/* Model configurations: the named presets, validation with messages that
 * name the offending values, and the sizes a config implies (feed-forward
 * width, parameter count). Keys are named as in a run's TOML (model.dim). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "weft/model.h"

/* Bounds that keep every index and size product inside int and size_t. */
#define MODEL_MAX_DIM_ (1 << 16)
#define MODEL_MAX_VOCAB_ (1 << 22)
#define MODEL_MAX_SEQ_ (1 << 20)
#define MODEL_MAX_LAYERS_ 1024

static wf_model_config config_base(void) {
    wf_model_config c;
    memset(&c, 0, sizeof c);
    c.ffn_multiplier = 1.0;
    c.ffn_multiple_of = 32;
    c.norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    c.tied_embeddings = 1;
    c.init_std = 0.02;
    return c;
}

const char *const wf_model_presets[] = {"tiny", "stories15M", "gpt2-small", "gpt2-medium", NULL};

wf_status wf_model_config_preset(wf_model_config *cfg, const char *name) {
    wf_model_config c = config_base();
    if (strcmp(name, "tiny") == 0) {
        c.dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2;
        c.vocab_size = 512, c.max_seq_len = 64;
    } else if (strcmp(name, "stories15M") == 0) {
        c.dim = 288, c.n_layers = 6, c.n_heads = 6, c.n_kv_heads = 6;
        c.vocab_size = 32000, c.max_seq_len = 256, c.ffn_hidden_dim = 768;
    } else if (strcmp(name, "gpt2-small") == 0) {
        c.dim = 768, c.n_layers = 12, c.n_heads = 12, c.n_kv_heads = 12;
        /* GPT-2's 50,257 tokens padded to a multiple of 128 (the extra rows
         * are never a target): tensor-core friendly matmuls on a GPU. */
        c.vocab_size = 50304, c.max_seq_len = 1024, c.ffn_hidden_dim = 2048;
    } else if (strcmp(name, "gpt2-medium") == 0) {
        /* Llama's FFN rule for dim 1024 (2752, a multiple of 64): the
         * parameters of GPT-2 medium's 4x MLP within 0.03%. */
        c.dim = 1024, c.n_layers = 24, c.n_heads = 16, c.n_kv_heads = 16;
        c.vocab_size = 50304, c.max_seq_len = 1024, c.ffn_hidden_dim = 2752;
    } else {
        return wf_error(WF_ERR_CONFIG,
                        "model: unknown preset '%s'; the presets are tiny, stories15M, gpt2-small, gpt2-medium",
                        name);
    }
    *cfg = c;
    return WF_OK;
}

static wf_status check_range(const char *key, long long v, long long lo, long long hi) {
    if (v < lo || v > hi)
        return wf_error(WF_ERR_CONFIG, "model: %s = %lld is out of range; it must be in [%lld, %lld]",
                        key, v, lo, hi);
    return WF_OK;
}

wf_status wf_model_config_validate(const wf_model_config *c) {
    WF_TRY(check_range("model.dim", c->dim, 1, MODEL_MAX_DIM_));
    WF_TRY(check_range("model.n_layers", c->n_layers, 1, MODEL_MAX_LAYERS_));
    WF_TRY(check_range("model.n_heads", c->n_heads, 1, c->dim));
    WF_TRY(check_range("model.n_kv_heads", c->n_kv_heads, 1, c->n_heads));
    WF_TRY(check_range("model.vocab_size", c->vocab_size, 1, MODEL_MAX_VOCAB_));
    WF_TRY(check_range("model.max_seq_len", c->max_seq_len, 1, MODEL_MAX_SEQ_));
    WF_TRY(check_range("model.ffn_hidden_dim", c->ffn_hidden_dim, 0, 16 * MODEL_MAX_DIM_));
    if (c->dim % c->n_heads != 0)
        return wf_error(WF_ERR_CONFIG,
                        "model: model.dim = %d is not divisible by model.n_heads = %d: each head "
                        "gets dim / n_heads channels; choose n_heads dividing dim",
                        c->dim, c->n_heads);
    if ((c->dim / c->n_heads) % 2 != 0)
        return wf_error(WF_ERR_CONFIG,
                        "model: head_dim = model.dim / model.n_heads = %d / %d = %d is odd: RoPE "
                        "rotates pairs of channels, so head_dim must be even",
                        c->dim, c->n_heads, c->dim / c->n_heads);
    if (c->n_heads % c->n_kv_heads != 0)
        return wf_error(WF_ERR_CONFIG,
                        "model: model.n_heads = %d is not divisible by model.n_kv_heads = %d: in "
                        "grouped-query attention each kv head serves n_heads / n_kv_heads query "
                        "heads; choose n_kv_heads dividing n_heads",
                        c->n_heads, c->n_kv_heads);
    if (c->ffn_hidden_dim == 0) {
        if (!(c->ffn_multiplier > 0 && c->ffn_multiplier <= 64))
            return wf_error(WF_ERR_CONFIG,
                            "model: model.ffn_multiplier = %g must be in (0, 64] (it scales the "
                            "feed-forward width when model.ffn_hidden_dim is 0)",
                            c->ffn_multiplier);
        WF_TRY(check_range("model.ffn_multiple_of", c->ffn_multiple_of, 1, 1 << 16));
        int h = wf_model_config_hidden_dim(c);
        if (h < 1 || h > 16 * MODEL_MAX_DIM_)
            return wf_error(WF_ERR_CONFIG,
                            "model: the derived feed-forward width %d (dim %d, multiplier %g, "
                            "multiple_of %d) is out of range [1, %d]; set model.ffn_hidden_dim",
                            h, c->dim, c->ffn_multiplier, c->ffn_multiple_of, 16 * MODEL_MAX_DIM_);
    }
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return wf_error(WF_ERR_CONFIG, "model: model.norm_eps = %g must be in (0, 1)", c->norm_eps);
    if (!(c->rope_theta > 1 && isfinite(c->rope_theta)))
        return wf_error(WF_ERR_CONFIG, "model: model.rope_theta = %g must be a finite number > 1",
                        c->rope_theta);
    if (!(c->init_std >= 0 && c->init_std <= 1))
        return wf_error(WF_ERR_CONFIG, "model: model.init_std = %g must be in [0, 1]", c->init_std);
    if (c->tied_embeddings != 0 && c->tied_embeddings != 1)
        return wf_error(WF_ERR_CONFIG, "model: model.tied_embeddings = %d must be 0 or 1",
                        c->tied_embeddings);
    return WF_OK;
}

int wf_model_config_hidden_dim(const wf_model_config *c) {
    if (c->ffn_hidden_dim > 0) return c->ffn_hidden_dim;
    long long h = 8LL * c->dim / 3;
    h = (long long)(c->ffn_multiplier * (double)h);
    long long m = c->ffn_multiple_of > 0 ? c->ffn_multiple_of : 1;
    h = m * ((h + m - 1) / m);
    return h > INT32_MAX ? INT32_MAX : (int)h;
}

size_t wf_model_config_num_params(const wf_model_config *c) {
    size_t C = (size_t)c->dim, V = (size_t)c->vocab_size, H = (size_t)wf_model_config_hidden_dim(c);
    size_t HD = C / (size_t)c->n_heads, KV = (size_t)c->n_kv_heads * HD;
    size_t layer = C + C * (C + 2 * KV) + C * C + C + 3 * H * C;
    return V * C + (size_t)c->n_layers * layer + C + (c->tied_embeddings ? 0 : V * C);
}
