/* weft: the trainer. Wires the data loader, the model, the optimizer and
 * the schedule into the step loop of `weft train`, and writes the run
 * directory (the effective config, the final weights).
 *
 * This module does not do (yet): checkpoints and resume, metrics sinks
 * beyond the console, data parallelism across processes.
 */
#ifndef WEFT_TRAIN_H
#define WEFT_TRAIN_H

#include <stdint.h>

#include "weft/config.h"
#include "weft/model.h"
#include "weft/status.h"

/* Every key of a training config (TOML sections [model], [data], [optim],
 * [train]). Numeric model sizes of 0 mean "from the preset"; the vocabulary
 * defaults to the dataset's. docs/train.md lists them all. */
typedef struct {
    /* [model] */
    char *preset;
    int64_t dim, n_layers, n_heads, n_kv_heads, vocab_size, ffn_hidden_dim, ffn_multiple_of, max_seq_len;
    double ffn_multiplier, norm_eps, rope_theta, init_std;
    int tied;
    /* [data] */
    char *data_dir, *tokenizer;
    int64_t seq_len, batch_size, global_batch_tokens, data_seed;
    /* [optim] */
    char *schedule;
    double lr, min_lr, decay_frac, beta1, beta2, eps, weight_decay, grad_clip;
    int64_t warmup_steps;
    int decay_embeddings;
    /* [train] */
    char *run_dir;
    int64_t steps, seed, eval_every, eval_batches, log_every, threads;
} wf_train_config;

/* The option table of `weft train` (also usable by tests and benchmarks). */
const wf_cmd_spec *wf_train_spec(void);

/* Resolves the model config: the preset, then every non-zero size of `tc`,
 * then the vocabulary (tc->vocab_size, else `data_vocab`). Validates it and
 * the sequence length against it. */
wf_status wf_train_model_config(const wf_train_config *tc, uint32_t data_vocab, wf_model_config *out);

/* Runs the whole training described by `tc`. Prints one line per step (to
 * stdout) and a progress bar on a terminal (stderr). */
wf_status wf_train_run(const wf_train_config *tc);

#endif
