/* Hugging Face interop: export a weft model as a `transformers` Llama
 * directory (model.safetensors + config.json, optionally tokenizer.json),
 * and initialise a weft model from one. weft's tensors already carry
 * Hugging Face's Llama names, shapes and RoPE pairing
 * (docs/formats/model-safetensors.md), so both directions are copies; what
 * this file adds is the config.json mapping and checks that say which
 * field or tensor does not fit. */
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/ckpt.h"
#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/safetensors.h"
#include "weft/tokenizer.h"

static wf_status write_config_json(const wf_model_config *c, const char *path, int bf16, int32_t bos, int32_t eos) {
    json_t *o = json_object();
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("LlamaForCausalLM"));
    json_object_set_new(o, "architectures", arch);
    json_object_set_new(o, "model_type", json_string("llama"));
    json_object_set_new(o, "hidden_size", json_integer(c->dim));
    json_object_set_new(o, "intermediate_size", json_integer(wf_model_config_hidden_dim(c)));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(o, "head_dim", json_integer(c->dim / c->n_heads));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_seq_len));
    json_object_set_new(o, "rms_norm_eps", json_real(c->norm_eps));
    json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(o, "rope_scaling", json_null());
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tied_embeddings));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "attention_bias", json_false());
    json_object_set_new(o, "attention_dropout", json_real(0.0));
    json_object_set_new(o, "mlp_bias", json_false());
    json_object_set_new(o, "initializer_range", json_real(c->init_std));
    json_object_set_new(o, "pretraining_tp", json_integer(1));
    json_object_set_new(o, "use_cache", json_true());
    json_object_set_new(o, "torch_dtype", json_string(bf16 ? "bfloat16" : "float32"));
    if (bos >= 0) json_object_set_new(o, "bos_token_id", json_integer(bos));
    if (eos >= 0) json_object_set_new(o, "eos_token_id", json_integer(eos));
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (!text) return wf_error(WF_ERR_NOMEM, "%s: cannot build config.json", path);
    size_t n = strlen(text);
    text[n] = '\n';
    wf_status s = wf_file_write_atomic(path, text, n + 1);
    free(text);
    return s;
}

wf_status wf_hf_export(const wf_model *m, const char *out_dir, int bf16, const char *tokenizer) {
    WF_TRY(wf_mkdirs(out_dir));
    char path[PATH_MAX], tok_dst[PATH_MAX] = "";
    int32_t bos = -1, eos = -1;
    if (tokenizer && *tokenizer) {
        /* Copy it beside the weights, and read its special ids for config.json. */
        wf_tokenizer *tok;
        WF_TRY(wf_tokenizer_load(&tok, tokenizer));
        bos = wf_tokenizer_bos(tok);
        eos = wf_tokenizer_eos(tok);
        wf_tokenizer_destroy(tok);
        char *data;
        size_t len;
        WF_TRY(wf_file_read(tokenizer, &data, &len));
        wf_status s = wf_path_join(path, sizeof path, out_dir, "tokenizer.json", NULL);
        if (s == WF_OK) s = wf_file_write_atomic(path, data, len);
        free(data);
        WF_TRY(s);
        if (!realpath(path, tok_dst)) snprintf(tok_dst, sizeof tok_dst, "%s", path);
    }
    WF_TRY(wf_path_join(path, sizeof path, out_dir, "config.json", NULL));
    WF_TRY(write_config_json(wf_model_get_config(m), path, bf16, bos, eos));
    WF_TRY(wf_path_join(path, sizeof path, out_dir, "model.safetensors", NULL));
    wf_kv meta[1] = {{"weft.tokenizer", tok_dst}};
    return wf_safetensors_save_as(m, path, meta, tok_dst[0] ? 1 : 0, bf16);
}

/* ---- import ---- */

/* Compares one integer field of config.json with the model's value. */
static wf_status check_int(const char *path, const json_t *cfg, const char *field, int have, const char *key,
                           int dflt) {
    const json_t *v = json_object_get(cfg, field);
    json_int_t got = v ? (json_is_integer(v) ? json_integer_value(v) : -1) : dflt;
    if (got < 0)
        return wf_error(WF_ERR_FORMAT, "%s: %s is not an integer", path, field);
    if (got != have)
        return wf_error(WF_ERR_CONFIG,
                        "%s: %s = %" JSON_INTEGER_FORMAT " but this run's %s = %d: set %s = %" JSON_INTEGER_FORMAT
                        " in the config to import this model",
                        path, field, got, key, have, key, got);
    return WF_OK;
}

static wf_status check_real(const char *path, const json_t *cfg, const char *field, double have, const char *key,
                            double dflt) {
    const json_t *v = json_object_get(cfg, field);
    double got = v ? (json_is_number(v) ? json_number_value(v) : NAN) : dflt;
    if (isnan(got)) return wf_error(WF_ERR_FORMAT, "%s: %s is not a number", path, field);
    if (fabs(got - have) > 1e-9 * fabs(have))
        return wf_error(WF_ERR_CONFIG, "%s: %s = %.10g but this run's %s = %.10g: set %s = %.10g in the config", path,
                        field, got, key, have, key, got);
    return WF_OK;
}

/* An integer field of config.json: *out, or `dflt` when absent (dflt < 0:
 * required). */
static wf_status cfg_int(const char *path, const json_t *cfg, const char *field, int dflt, int *out) {
    const json_t *v = json_object_get(cfg, field);
    if (!v || json_is_null(v)) {
        if (dflt < 0) return wf_error(WF_ERR_FORMAT, "%s: %s is missing (weft needs it for the architecture)", path, field);
        *out = dflt;
        return WF_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT_MAX)
        return wf_error(WF_ERR_FORMAT, "%s: %s is not a positive integer", path, field);
    *out = (int)json_integer_value(v);
    return WF_OK;
}

static wf_status cfg_real(const char *path, const json_t *cfg, const char *field, double dflt, double *out) {
    const json_t *v = json_object_get(cfg, field);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return WF_OK;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0))
        return wf_error(WF_ERR_FORMAT, "%s: %s is not a positive number", path, field);
    *out = json_number_value(v);
    return WF_OK;
}

/* What of a config.json weft cannot represent, naming the key. */
static wf_status cfg_supported(const char *path, const json_t *cfg) {
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    if (mt && strcmp(mt, "llama") != 0)
        return wf_error(WF_ERR_UNSUPPORTED, "%s: model_type \"%s\": weft imports Llama models only", path, mt);
    const char *act = json_string_value(json_object_get(cfg, "hidden_act"));
    if (act && strcmp(act, "silu") != 0)
        return wf_error(WF_ERR_UNSUPPORTED, "%s: hidden_act \"%s\": weft's Llama uses silu", path, act);
    static const char *const bias[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++)
        if (json_is_true(json_object_get(cfg, bias[i])))
            return wf_error(WF_ERR_UNSUPPORTED, "%s: %s = true: weft's Llama has no biases", path, bias[i]);
    static const char *const unset[] = {"rope_scaling", "sliding_window"};
    static const char *const why[] = {"weft implements plain RoPE only", "weft's attention is full causal attention"};
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(cfg, unset[i]);
        if (v && !json_is_null(v))
            return wf_error(WF_ERR_UNSUPPORTED, "%s: %s is set: %s", path, unset[i], why[i]);
    }
    if (json_is_true(json_object_get(cfg, "use_sliding_window")))
        return wf_error(WF_ERR_UNSUPPORTED, "%s: use_sliding_window = true: weft's attention is full causal attention",
                        path);
    return WF_OK;
}

/* config.json as a JSON object (the caller json_decref's it). */
static wf_status load_json_object(const char *path, json_t **out) {
    char *text;
    size_t len;
    WF_TRY(wf_file_read(path, &text, &len));
    json_error_t jerr;
    json_t *cfg = json_loads(text, 0, &jerr);
    free(text);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return wf_error(WF_ERR_FORMAT, "%s: line %d: not a JSON object: %s", path, jerr.line, jerr.text);
    }
    *out = cfg;
    return WF_OK;
}

static wf_status config_from_hf_json(const char *path, wf_model_config *out) {
    json_t *cfg;
    WF_TRY(load_json_object(path, &cfg));
    wf_model_config c;
    wf_status s = wf_model_config_preset(&c, "tiny"); /* for the fields config.json does not have */
    if (s == WF_OK) s = cfg_supported(path, cfg);
    if (s == WF_OK) s = cfg_int(path, cfg, "hidden_size", -1, &c.dim);
    if (s == WF_OK) s = cfg_int(path, cfg, "num_hidden_layers", -1, &c.n_layers);
    if (s == WF_OK) s = cfg_int(path, cfg, "num_attention_heads", -1, &c.n_heads);
    if (s == WF_OK) s = cfg_int(path, cfg, "num_key_value_heads", c.n_heads, &c.n_kv_heads);
    if (s == WF_OK) s = cfg_int(path, cfg, "intermediate_size", -1, &c.ffn_hidden_dim);
    if (s == WF_OK) s = cfg_int(path, cfg, "vocab_size", -1, &c.vocab_size);
    if (s == WF_OK) s = cfg_int(path, cfg, "max_position_embeddings", 2048, &c.max_seq_len);
    if (s == WF_OK) s = cfg_real(path, cfg, "rms_norm_eps", 1e-6, &c.norm_eps);
    if (s == WF_OK) s = cfg_real(path, cfg, "rope_theta", 10000.0, &c.rope_theta);
    if (s == WF_OK) s = cfg_real(path, cfg, "initializer_range", 0.02, &c.init_std);
    if (s == WF_OK) c.tied_embeddings = json_is_true(json_object_get(cfg, "tie_word_embeddings")); /* default: untied */
    const json_t *hd = json_object_get(cfg, "head_dim");
    if (s == WF_OK && hd && !json_is_null(hd) &&
        (!json_is_integer(hd) || json_integer_value(hd) * c.n_heads != c.dim))
        s = wf_error(WF_ERR_UNSUPPORTED,
                     "%s: head_dim = %s but hidden_size / num_attention_heads = %d: weft's heads split the width "
                     "exactly",
                     path, json_is_integer(hd) ? "another value" : "not an integer", c.dim / (c.n_heads ? c.n_heads : 1));
    json_decref(cfg);
    if (s == WF_OK && wf_model_config_validate(&c) != WF_OK) s = wf_error_wrap(WF_ERR_CONFIG, "%s: ", path);
    if (s != WF_OK) return s;
    *out = c;
    return WF_OK;
}

wf_status wf_hf_read_config(const char *path, wf_model_config *out, char *source, size_t source_size) {
    char cfg[PATH_MAX], file[PATH_MAX];
    if (wf_path_is_dir(path)) {
        WF_TRY(wf_path_join(cfg, sizeof cfg, path, "config.json", NULL));
        if (wf_path_exists(cfg)) {
            if (source) snprintf(source, source_size, "%s", cfg);
            return config_from_hf_json(cfg, out);
        }
        WF_TRY(wf_path_join(file, sizeof file, path, "model.safetensors", NULL));
    } else if (wf_path_exists(path)) {
        snprintf(file, sizeof file, "%s", path);
    } else {
        return wf_error(WF_ERR_NOTFOUND, "%s: no such file or directory", path);
    }
    /* A weft file records its config in its metadata. */
    wf_status s = wf_safetensors_read_config(file, out);
    if (s != WF_OK)
        return wf_error(s == WF_ERR_NOTFOUND ? WF_ERR_NOTFOUND : WF_ERR_CONFIG,
                        "%s: no config.json beside it and no weft model config in it: the architecture is unknown "
                        "(%s)",
                        path, wf_error_msg());
    if (source) snprintf(source, source_size, "%s (weft.model_config)", file);
    return WF_OK;
}

/* Checks a Hugging Face config.json against the model's config. */
static wf_status check_hf_config(const char *path, const wf_model_config *c) {
    json_t *cfg;
    WF_TRY(load_json_object(path, &cfg));
    wf_status s = cfg_supported(path, cfg);
    if (s == WF_OK) s = check_int(path, cfg, "hidden_size", c->dim, "model.dim", -1);
    if (s == WF_OK) s = check_int(path, cfg, "num_hidden_layers", c->n_layers, "model.n_layers", -1);
    if (s == WF_OK) s = check_int(path, cfg, "num_attention_heads", c->n_heads, "model.n_heads", -1);
    const json_t *nh = json_object_get(cfg, "num_attention_heads");
    if (s == WF_OK)
        s = check_int(path, cfg, "num_key_value_heads", c->n_kv_heads, "model.n_kv_heads",
                      json_is_integer(nh) ? (int)json_integer_value(nh) : -1);
    if (s == WF_OK && json_object_get(cfg, "head_dim") && !json_is_null(json_object_get(cfg, "head_dim")))
        s = check_int(path, cfg, "head_dim", c->dim / c->n_heads, "model.dim / model.n_heads", -1);
    if (s == WF_OK)
        s = check_int(path, cfg, "intermediate_size", wf_model_config_hidden_dim(c), "model.ffn_hidden_dim", -1);
    if (s == WF_OK) s = check_int(path, cfg, "vocab_size", c->vocab_size, "model.vocab_size", -1);
    if (s == WF_OK) {
        const json_t *tw = json_object_get(cfg, "tie_word_embeddings");
        int tied = tw ? json_is_true(tw) : 0; /* LlamaConfig's default is untied */
        if (tied != (c->tied_embeddings != 0))
            s = wf_error(WF_ERR_CONFIG, "%s: tie_word_embeddings = %s but this run's model.tied = %s: set model.tied = %s",
                         path, tied ? "true" : "false", c->tied_embeddings ? "true" : "false", tied ? "true" : "false");
    }
    if (s == WF_OK) s = check_real(path, cfg, "rms_norm_eps", c->norm_eps, "model.norm_eps", 1e-6);
    if (s == WF_OK) s = check_real(path, cfg, "rope_theta", c->rope_theta, "model.rope_theta", 10000.0);
    if (s == WF_OK) {
        const json_t *mp = json_object_get(cfg, "max_position_embeddings");
        if (json_is_integer(mp) && json_integer_value(mp) < c->max_seq_len)
            WF_WARN("%s: max_position_embeddings = %" JSON_INTEGER_FORMAT " is below this run's model.max_seq_len = %d: "
                    "the model was not trained on positions that far",
                    path, json_integer_value(mp), c->max_seq_len);
    }
    json_decref(cfg);
    return s;
}

/* ckpt.init_from's file (a directory's model.safetensors, or the file),
 * checked against the model's config (config.json if there, the tied
 * head, the weft config stored in the file) into file[PATH_MAX]. */
static wf_status import_check(const wf_model *m, const char *path, char *file) {
    char cfg[PATH_MAX] = "";
    if (wf_path_is_dir(path)) {
        WF_TRY(wf_path_join(file, PATH_MAX, path, "model.safetensors", NULL));
        if (!wf_path_exists(file)) {
            char idx[PATH_MAX];
            WF_TRY(wf_path_join(idx, sizeof idx, path, "model.safetensors.index.json", NULL));
            if (wf_path_exists(idx))
                return wf_error(WF_ERR_UNSUPPORTED, "%s: a sharded safetensors model (model.safetensors.index.json); "
                                "weft imports a single model.safetensors: merge the shards first", path);
            return wf_error(WF_ERR_NOTFOUND, "%s: no model.safetensors in this directory", path);
        }
        WF_TRY(wf_path_join(cfg, sizeof cfg, path, "config.json", NULL));
        if (!wf_path_exists(cfg)) cfg[0] = '\0';
    } else if (wf_path_exists(path)) {
        snprintf(file, PATH_MAX, "%s", path);
    } else {
        return wf_error(WF_ERR_NOTFOUND, "%s: no such file or directory", path);
    }
    const wf_model_config *c = wf_model_get_config(m);
    if (cfg[0]) WF_TRY(check_hf_config(cfg, c));
    int has_head;
    WF_TRY(wf_safetensors_has_tensor(file, "lm_head.weight", &has_head));
    if (has_head && c->tied_embeddings)
        return wf_error(WF_ERR_CONFIG, "%s has lm_head.weight (an untied output projection) but model.tied = true: "
                        "set model.tied = false", file);
    if (!has_head && !c->tied_embeddings)
        return wf_error(WF_ERR_CONFIG, "%s has no lm_head.weight (tied embeddings) but model.tied = false: "
                        "set model.tied = true", file);
    /* A weft file records its config: compare it too, for a clear message. */
    wf_model_config fc;
    if (wf_safetensors_read_config(file, &fc) == WF_OK) {
        if (fc.dim != c->dim || fc.n_layers != c->n_layers || fc.n_heads != c->n_heads ||
            fc.n_kv_heads != c->n_kv_heads || fc.vocab_size != c->vocab_size ||
            fc.ffn_hidden_dim != wf_model_config_hidden_dim(c) || fc.tied_embeddings != c->tied_embeddings)
            return wf_error(WF_ERR_CONFIG,
                            "%s holds a model with dim %d, %d layers, %d heads (%d kv), ffn %d, vocab %d, %s; this run's "
                            "is dim %d, %d layers, %d heads (%d kv), ffn %d, vocab %d, %s: set [model] to match",
                            file, fc.dim, fc.n_layers, fc.n_heads, fc.n_kv_heads, fc.ffn_hidden_dim, fc.vocab_size,
                            fc.tied_embeddings ? "tied" : "untied", c->dim, c->n_layers, c->n_heads, c->n_kv_heads,
                            wf_model_config_hidden_dim(c), c->vocab_size, c->tied_embeddings ? "tied" : "untied");
    } else {
        wf_error_clear();
    }
    return WF_OK;
}

/* The checks, then tensor by tensor into a host buffer and into the
 * model's memory (its backend's) through wf_model_write. */
wf_status wf_hf_import(wf_model *m, const char *path) {
    char file[PATH_MAX];
    WF_TRY(import_check(m, path, file));
    size_t largest = 0;
    for (int i = 0; i < wf_model_num_tensors(m); i++)
        if (wf_model_tensor(m, i)->numel > largest) largest = wf_model_tensor(m, i)->numel;
    float *stage = malloc((largest ? largest : 1) * sizeof *stage);
    if (!stage) return wf_error(WF_ERR_NOMEM, "--init-from: a staging buffer of %zu floats", largest);
    wf_status s = WF_OK;
    for (int i = 0; i < wf_model_num_tensors(m) && s == WF_OK; i++) {
        const wf_tensor_info *ti = wf_model_tensor(m, i);
        s = wf_safetensors_load_range(m, file, ti->offset, ti->numel, stage);
        if (s != WF_OK) s = wf_error_wrap(s, "--init-from: ");
        else s = wf_model_write(m, WF_MODEL_PARAMS, i, 0, ti->numel, stage);
    }
    free(stage);
    return s;
}

wf_status wf_hf_import_ranges(const wf_model *m, const char *path, int count, const size_t *first, const size_t *n,
                              float *const *dst) {
    char file[PATH_MAX];
    WF_TRY(import_check(m, path, file));
    for (int i = 0; i < count; i++) {
        wf_status s = wf_safetensors_load_range(m, file, first[i], n[i], dst[i]);
        if (s != WF_OK) return wf_error_wrap(s, "--init-from: ");
    }
    return WF_OK;
}
