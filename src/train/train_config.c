/* The training config: every key of `weft train`, its default, range and
 * meaning, and how the model config is resolved from a preset, explicit
 * sizes and the dataset's vocabulary. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "weft/train.h"

/* The table is made from WF_TRAIN_KEYS (include/weft/train.h), the list the
 * struct is made from. */
#define WF_UNPAREN_(...) __VA_ARGS__
#define WF_TRAIN_OPT_(field, type, key, flag, def, range, help) \
    {key, flag, type, offsetof(wf_train_config, field), def, WF_UNPAREN_ range, help},
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
};

const wf_cmd_spec *wf_train_spec(void) { return &train_spec; }

wf_status wf_train_model_config(const wf_train_config *tc, uint32_t data_vocab, wf_model_config *out) {
    wf_model_config c;
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
    if (data_vocab && (uint32_t)c.vocab_size < data_vocab)
        return wf_error(WF_ERR_CONFIG,
                        "model.vocab_size = %d is smaller than the dataset's vocabulary (%u ids): tokens "
                        "above %d would have no embedding; raise it or leave it 0 to use the dataset's",
                        c.vocab_size, data_vocab, c.vocab_size - 1);
    WF_TRY(wf_model_config_validate(&c));
    int64_t T = tc->seq_len ? tc->seq_len : c.max_seq_len;
    if (T > c.max_seq_len)
        return wf_error(WF_ERR_CONFIG,
                        "data.seq_len = %lld is longer than model.max_seq_len = %d: the model has no "
                        "positions beyond that; shorten the sequence or raise max_seq_len",
                        (long long)T, c.max_seq_len);
    *out = c;
    return WF_OK;
}
