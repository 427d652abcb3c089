/* The training config: every key of `weft train`, its default, range and
 * meaning, and how the model config is resolved from a preset, explicit
 * sizes and the dataset's vocabulary. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "weft/ckpt.h"
#include "weft/model.h"
#include "weft/optim.h"
#include "weft/runctl.h"
#include "weft/train.h"

const char *const wf_train_schedule_units[] = {"steps", "tokens", NULL};
const char *const wf_train_optim_names[] = {"adamw", "muon", NULL};
const char *const wf_train_nonfinite_actions[] = {"stop", "skip", NULL};

/* The table is made from WF_TRAIN_KEYS (include/weft/train.h), the list the
 * struct is made from. */
#define WF_UNPAREN_(...) __VA_ARGS__
#define WF_TRAIN_OPT_(field, type, key, flag, def, range, text) \
    {key, flag, type, offsetof(wf_train_config, field), def, WF_UNPAREN_ range, .help = text},
static const wf_opt train_opts[] = {WF_TRAIN_KEYS(WF_TRAIN_OPT_)};
#undef WF_TRAIN_OPT_

static const wf_cmd_spec train_spec = {
    "train",
    "weft train --config run.toml [--section.key=value ...]",
    "Trains a Llama-style model on a tokenized dataset (fp32, CPU) and writes the weights to "
    "RUN_DIR/model.safetensors. Prints one line per step: loss, learning rate, gradient norm, "
    "tokens/s, step time and MFU; records every step in RUN_DIR/metrics.jsonl and TensorBoard "
    "events in RUN_DIR/tb (`weft report RUN_DIR` plots them) and the run's environment in "
    "RUN_DIR/run.json. Saves checkpoints to RUN_DIR/checkpoints and resumes from the latest one; "
    "SIGTERM or SIGUSR1 saves and exits with status 75 (requeue), as does the memory watchdog; a "
    "RUN_DIR/SAVE file saves, a RUN_DIR/STOP file saves and exits 0. Loss spikes are logged and, "
    "with spike.action, skipped or rolled back. `weft trace request RUN_DIR` captures a profile "
    "of the next steps. See docs/train.md, docs/checkpoints.md, docs/metrics.md, docs/tracing.md.",
    train_opts,
    sizeof train_opts / sizeof *train_opts,
    0,
    0,
    offsetof(wf_train_config, given),
};

const wf_cmd_spec *wf_train_spec(void) { return &train_spec; }


/* The checks every model config passes, wherever it came from: the
 * dataset's vocabulary fits, the config is valid, the sequence fits. */
static wf_status finish_model_config(const wf_train_config *tc, uint32_t data_vocab, wf_model_config *c,
                                     wf_model_config *out) {
    if (data_vocab && (uint32_t)c->vocab_size < data_vocab)
        return wf_error(WF_ERR_CONFIG,
                        "model.vocab_size = %d is smaller than the dataset's vocabulary (%u ids): tokens "
                        "above %d would have no embedding; raise it or leave it 0 to use the dataset's",
                        c->vocab_size, data_vocab, c->vocab_size - 1);
    WF_TRY(wf_model_config_validate(c));
    int64_t T = tc->seq_len ? tc->seq_len : c->max_seq_len;
    if (T > c->max_seq_len)
        return wf_error(WF_ERR_CONFIG,
                        "data.seq_len = %lld is longer than model.max_seq_len = %d: the model has no "
                        "positions beyond that; shorten the sequence or raise max_seq_len",
                        (long long)T, c->max_seq_len);
    *out = *c;
    return WF_OK;
}

static int given(const wf_train_config *tc, const char *key) { return wf_opts_given(&train_spec, tc, key); }

/* ckpt.init_from's architecture, with every size the user gave (a config
 * file or the command line; 0 means "from the source", so not given) as a
 * check that must agree. */
static wf_status config_from_init(const wf_train_config *tc, wf_model_config *c, char *source, size_t size) {
    WF_TRY(wf_hf_read_config(tc->ckpt_init_from, c, source, size));
    int from_json = strstr(source, "config.json") != NULL;
    struct {
        const char *key, *hf, *name; /* the config key, config.json's field, a short name */
        double given_value, source_value;
        int is_given;
    } f[] = {
        {"model.dim", "hidden_size", "dim", (double)tc->dim, c->dim, tc->dim != 0},
        {"model.n_layers", "num_hidden_layers", "layers", (double)tc->n_layers, c->n_layers, tc->n_layers != 0},
        {"model.n_heads", "num_attention_heads", "heads", (double)tc->n_heads, c->n_heads, tc->n_heads != 0},
        {"model.n_kv_heads", "num_key_value_heads", "kv heads", (double)tc->n_kv_heads, c->n_kv_heads,
         tc->n_kv_heads != 0},
        {"model.vocab_size", "vocab_size", "vocab", (double)tc->vocab_size, c->vocab_size, tc->vocab_size != 0},
        {"model.ffn_hidden_dim", "intermediate_size", "ffn", (double)tc->ffn_hidden_dim,
         wf_model_config_hidden_dim(c), tc->ffn_hidden_dim != 0},
        {"model.max_seq_len", "max_position_embeddings", "max_seq_len", (double)tc->max_seq_len, c->max_seq_len,
         tc->max_seq_len != 0},
        {"model.norm_eps", "rms_norm_eps", "norm_eps", tc->norm_eps, c->norm_eps, tc->norm_eps != 0},
        {"model.rope_theta", "rope_theta", "rope_theta", tc->rope_theta, c->rope_theta, tc->rope_theta != 0},
    };
    const char *fix = "leave it out to take the architecture from ckpt.init_from, or give the model's value";
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        if (!f[i].is_given || f[i].given_value == f[i].source_value) continue;
        if (from_json)
            return wf_error(WF_ERR_CONFIG, "%s: %s = %.10g but this run's %s = %.10g: %s", source, f[i].hf,
                            f[i].source_value, f[i].key, f[i].given_value, fix);
        return wf_error(WF_ERR_CONFIG, "%s holds a model with %s %.10g but this run's %s = %.10g: %s", source,
                        f[i].name, f[i].source_value, f[i].key, f[i].given_value, fix);
    }
    if (given(tc, "model.tied") && (tc->tied != 0) != (c->tied_embeddings != 0))
        return wf_error(WF_ERR_CONFIG, "%s: %s = %s but this run's model.tied = %s: %s", source,
                        from_json ? "tie_word_embeddings" : "tied embeddings", c->tied_embeddings ? "true" : "false",
                        tc->tied ? "true" : "false", fix);
    return WF_OK;
}

wf_status wf_train_model_config(const wf_train_config *tc, uint32_t data_vocab, wf_model_config *out, char *source,
                                size_t source_size) {
    wf_model_config c;
    if (source && source_size) source[0] = '\0';
    if (tc->ckpt_init_from && *tc->ckpt_init_from) {
        WF_TRY(config_from_init(tc, &c, source, source_size));
        return finish_model_config(tc, data_vocab, &c, out);
    }
    WF_TRY(wf_model_config_preset(&c, tc->preset ? tc->preset : "tiny"));
    int sizes_changed = tc->dim || tc->n_layers || tc->n_heads;
    if (tc->dim) c.dim = (int)tc->dim;
    if (tc->n_layers) c.n_layers = (int)tc->n_layers;
    if (tc->n_heads) c.n_heads = (int)tc->n_heads;
    if (tc->n_kv_heads) c.n_kv_heads = (int)tc->n_kv_heads;
    else if (tc->n_heads) c.n_kv_heads = (int)tc->n_heads; /* new head count without GQA */
    if (tc->ffn_hidden_dim) c.ffn_hidden_dim = (int)tc->ffn_hidden_dim;
    else if (sizes_changed || tc->ffn_multiplier || tc->ffn_multiple_of) c.ffn_hidden_dim = 0;
    if (tc->ffn_multiplier) c.ffn_multiplier = tc->ffn_multiplier;
    if (tc->ffn_multiple_of) c.ffn_multiple_of = (int)tc->ffn_multiple_of;
    if (tc->max_seq_len) c.max_seq_len = (int)tc->max_seq_len;
    if (tc->norm_eps) c.norm_eps = tc->norm_eps;
    if (tc->rope_theta) c.rope_theta = tc->rope_theta;
    if (tc->init_std) c.init_std = tc->init_std;
    c.tied_embeddings = tc->tied;
    c.vocab_size = tc->vocab_size ? (int)tc->vocab_size : (int)data_vocab;
    if (source && source_size) snprintf(source, source_size, "model.preset = %s and the [model] sizes",
                                        tc->preset ? tc->preset : "tiny");
    return finish_model_config(tc, data_vocab, &c, out);
}
