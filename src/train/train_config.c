/* The training config: every key of `weft train`, its default, range and
 * meaning, and how the model config is resolved from a preset, explicit
 * sizes and the dataset's vocabulary. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "weft/train.h"

#define O(field) offsetof(wf_train_config, field)

static const wf_opt train_opts[] = {
    /* [model] */
    {"model.preset", "preset", WF_OPT_STR, O(preset), "tiny", WF_NO_RANGE,
     "starting sizes: tiny, stories15M or gpt2-small; every size below that is non-zero overrides it"},
    {"model.dim", NULL, WF_OPT_INT, O(dim), "0", 0, 1 << 16, "model width C (0: from the preset)"},
    {"model.n_layers", NULL, WF_OPT_INT, O(n_layers), "0", 0, 1024, "transformer blocks (0: from the preset)"},
    {"model.n_heads", NULL, WF_OPT_INT, O(n_heads), "0", 0, 1024, "attention (query) heads (0: from the preset)"},
    {"model.n_kv_heads", NULL, WF_OPT_INT, O(n_kv_heads), "0", 0, 1024,
     "key/value heads for grouped-query attention, dividing n_heads (0: from the preset)"},
    {"model.vocab_size", NULL, WF_OPT_INT, O(vocab_size), "0", 0, 1 << 24,
     "vocabulary of the embedding (0: the dataset's); must be at least the dataset's"},
    {"model.ffn_hidden_dim", NULL, WF_OPT_INT, O(ffn_hidden_dim), "0", 0, 1 << 20,
     "SwiGLU hidden width (0: from the preset, or from ffn_multiplier when sizes are overridden)"},
    {"model.ffn_multiplier", NULL, WF_OPT_FLOAT, O(ffn_multiplier), "0", 0, 64,
     "hidden = multiplier * 8/3 * dim rounded up to ffn_multiple_of, when ffn_hidden_dim is 0 (0: preset)"},
    {"model.ffn_multiple_of", NULL, WF_OPT_INT, O(ffn_multiple_of), "0", 0, 1 << 16,
     "round the derived hidden width up to a multiple of this (0: preset)"},
    {"model.max_seq_len", NULL, WF_OPT_INT, O(max_seq_len), "0", 0, 1 << 20,
     "longest sequence the model accepts (0: from the preset)"},
    {"model.norm_eps", NULL, WF_OPT_FLOAT, O(norm_eps), "0", 0, 1, "RMSNorm epsilon (0: from the preset)"},
    {"model.rope_theta", NULL, WF_OPT_FLOAT, O(rope_theta), "0", 0, 1e12, "RoPE base (0: from the preset)"},
    {"model.init_std", NULL, WF_OPT_FLOAT, O(init_std), "0", 0, 10,
     "std of the normal init of weight matrices (0: from the preset)"},
    {"model.tied", NULL, WF_OPT_BOOL, O(tied), "true", WF_NO_RANGE,
     "tie the output projection to the token embedding"},
    /* [data] */
    {"data.dir", "data", WF_OPT_STR, O(data_dir), NULL, WF_NO_RANGE,
     "dataset directory written by `weft tokenize` (required)"},
    {"data.tokenizer", "tokenizer", WF_OPT_STR, O(tokenizer), NULL, WF_NO_RANGE,
     "tokenizer.json (default: the one recorded in the dataset); recorded with the model for `weft sample`"},
    {"data.seq_len", "seq-len", WF_OPT_INT, O(seq_len), "0", 0, 1 << 20,
     "T, tokens per sequence (0: the model's max_seq_len)"},
    {"data.batch_size", "batch-size", WF_OPT_INT, O(batch_size), "8", 1, 1 << 20,
     "B, sequences per micro-batch"},
    {"data.global_batch_tokens", NULL, WF_OPT_INT, O(global_batch_tokens), "0", 0, 1e12,
     "tokens per optimizer step, a multiple of B*T: the steps accumulate gradients over "
     "global_batch_tokens / (B*T) micro-batches (0: B*T, no accumulation)"},
    {"data.seed", NULL, WF_OPT_INT, O(data_seed), "0", 0, 9.2e18, "seed of the data order"},
    /* [optim] */
    {"optim.schedule", "schedule", WF_OPT_STR, O(schedule), "cosine", WF_NO_RANGE,
     "learning-rate schedule after warmup: cosine, wsd or constant"},
    {"optim.lr", "lr", WF_OPT_FLOAT, O(lr), "1e-3", 0, 10, "peak learning rate"},
    {"optim.min_lr", NULL, WF_OPT_FLOAT, O(min_lr), "1e-4", 0, 10, "learning rate at the end of the decay"},
    {"optim.warmup_steps", NULL, WF_OPT_INT, O(warmup_steps), "10", 0, 1e12, "linear warmup steps"},
    {"optim.decay_frac", NULL, WF_OPT_FLOAT, O(decay_frac), "0.2", 0, 1,
     "wsd: fraction of the steps spent in the final linear decay"},
    {"optim.beta1", NULL, WF_OPT_FLOAT, O(beta1), "0.9", 0, 0.999999, "AdamW beta1"},
    {"optim.beta2", NULL, WF_OPT_FLOAT, O(beta2), "0.95", 0, 0.999999999, "AdamW beta2"},
    {"optim.eps", NULL, WF_OPT_FLOAT, O(eps), "1e-8", 0, 1, "AdamW epsilon"},
    {"optim.weight_decay", NULL, WF_OPT_FLOAT, O(weight_decay), "0.1", 0, 10,
     "decoupled weight decay, applied to weight matrices only"},
    {"optim.decay_embeddings", NULL, WF_OPT_BOOL, O(decay_embeddings), "false", WF_NO_RANGE,
     "also decay the token embedding (and an untied output projection)"},
    {"optim.grad_clip", NULL, WF_OPT_FLOAT, O(grad_clip), "1.0", 0, 1e9,
     "clip gradients to this global L2 norm (0: no clipping)"},
    /* [train] */
    {"train.run_dir", "run-dir", WF_OPT_STR, O(run_dir), "runs/default", WF_NO_RANGE,
     "where the run's files go (config.toml, checkpoints/, model.safetensors, metrics.jsonl, tb/, run.json, traces/)"},
    {"train.steps", "steps", WF_OPT_INT, O(steps), "100", 1, 1e12, "optimizer steps"},
    {"train.seed", "seed", WF_OPT_INT, O(seed), "1337", 0, 9.2e18, "seed of the initialisation"},
    {"train.eval_every", NULL, WF_OPT_INT, O(eval_every), "50", 0, 1e12,
     "compute the validation loss every N steps and at the end (0: never)"},
    {"train.eval_batches", NULL, WF_OPT_INT, O(eval_batches), "8", 1, 1e9,
     "micro-batches of the validation split per evaluation (always the same ones)"},
    {"train.log_every", NULL, WF_OPT_INT, O(log_every), "1", 1, 1e12, "print a step line every N steps"},
    {"train.threads", "threads", WF_OPT_INT, O(threads), "0", 0, 4096,
     "compute threads for OpenMP and OpenBLAS together (0: WEFT_THREADS or every CPU)"},
    /* [ckpt] */
    {"ckpt.every", NULL, WF_OPT_INT, O(ckpt_every), "100", 0, 1e12,
     "save a checkpoint every N steps into RUN_DIR/checkpoints/step-NNNNNNN (0: only at the end, on "
     "signals and on a SAVE or STOP file)"},
    {"ckpt.keep_last", NULL, WF_OPT_INT, O(ckpt_keep_last), "2", 0, 1e9,
     "keep the newest N checkpoints, delete older ones (0: keep all)"},
    {"ckpt.keep_every", NULL, WF_OPT_INT, O(ckpt_keep_every), "0", 0, 1e12,
     "also keep for good every checkpoint whose step is a multiple of M (0: none)"},
    {"ckpt.async", NULL, WF_OPT_BOOL, O(ckpt_async), "true", WF_NO_RANGE,
     "asynchronous saves: training waits only for a copy into a staging buffer, a thread writes"},
    {"ckpt.resume", "resume", WF_OPT_BOOL, O(ckpt_resume), "true", WF_NO_RANGE,
     "continue from the latest valid checkpoint of the run directory, if there is one (--no-resume: start over)"},
    {"ckpt.resume_from", "resume-from", WF_OPT_STR, O(ckpt_resume_from), NULL, WF_NO_RANGE,
     "continue from this checkpoint directory instead of the run's latest"},
    {"ckpt.init_from", "init-from", WF_OPT_STR, O(ckpt_init_from), NULL, WF_NO_RANGE,
     "initialise the weights from a safetensors model (a file, or a Hugging Face directory with "
     "model.safetensors and config.json) when not resuming"},
    {"ckpt.stop_at", NULL, WF_OPT_INT, O(ckpt_stop_at), "0", 0, 1e12,
     "after this step, save and exit with status 75 as if preempted (0: never); splits a run into jobs"},
    /* [metrics] */
    {"metrics.jsonl", NULL, WF_OPT_BOOL, O(metrics_jsonl), "true", WF_NO_RANGE,
     "write RUN_DIR/metrics.jsonl, one JSON object per step"},
    {"metrics.tensorboard", NULL, WF_OPT_BOOL, O(metrics_tensorboard), "true", WF_NO_RANGE,
     "write TensorBoard event files into RUN_DIR/tb/"},
    {"metrics.flush_every_s", NULL, WF_OPT_FLOAT, O(metrics_flush_every_s), "10", 0, 86400,
     "seconds between writes of the buffered metrics (and at exit); 0: every step"},
    {"metrics.peak_tflops", NULL, WF_OPT_FLOAT, O(metrics_peak_tflops), "0", 0, 1e9,
     "one process's peak TFLOP/s for MFU (0: measure it with a short sgemm benchmark, or use the cached "
     "measurement of this machine)"},
    {"metrics.remeasure_peak", NULL, WF_OPT_BOOL, O(metrics_remeasure_peak), "false", WF_NO_RANGE,
     "measure the peak even when this machine's measurement is cached"},
    {"metrics.all_ranks", NULL, WF_OPT_BOOL, O(metrics_all_ranks), "false", WF_NO_RANGE,
     "several ranks: every rank r > 0 also writes its own metrics (its step times, communication wait and "
     "memory) into RUN_DIR/ranks/rank-NNNNN/ (metrics.jsonl, tb/); rank 0 writes RUN_DIR's as always"},
    /* [spike] */
    {"spike.window", NULL, WF_OPT_INT, O(spike_window), "100", 2, 1048576,
     "steps in the rolling mean and standard deviation of the loss and gradient norm"},
    {"spike.z", NULL, WF_OPT_FLOAT, O(spike_z), "6", 0.001, 1e6,
     "a step whose loss (or gradient norm) is more than z standard deviations above the window's mean is a spike"},
    {"spike.warmup", NULL, WF_OPT_INT, O(spike_warmup), "20", 0, 1048576,
     "steps that only fill the window before the first check (2..window; 0: the window)"},
    {"spike.grad_norm", NULL, WF_OPT_BOOL, O(spike_grad_norm), "true", WF_NO_RANGE,
     "the gradient norm can make a spike too, not only the loss"},
    {"spike.action", NULL, WF_OPT_STR, O(spike_action), "warn", WF_NO_RANGE,
     "on a spike: warn (log it), skip (drop the step's update) or rollback (reload the last checkpoint and "
     "skip the data from there to past the spike's batch)"},
    {"spike.skip_batches", NULL, WF_OPT_INT, O(spike_skip_batches), "200", 0, 1e12,
     "rollback: micro-batches skipped after the spike's own"},
    {"spike.max_rollbacks", NULL, WF_OPT_INT, O(spike_max_rollbacks), "3", 0, 1e9,
     "rollback: at most this many rollbacks to the same checkpoint; further spikes skip their update"},
    /* [memory] */
    {"memory.max_used_frac", NULL, WF_OPT_FLOAT, O(memory_max_used_frac), "0.95", 0, 1,
     "watchdog: save and stop (exit 75) when the machine's memory is more than this fraction used "
     "(1 - MemAvailable/MemTotal; 0: off)"},
    {"memory.max_rss_frac", NULL, WF_OPT_FLOAT, O(memory_max_rss_frac), "0", 0, 1,
     "watchdog: save and stop when this process's resident memory passes this fraction of MemTotal (0: off)"},
    {"memory.max_rss_gib", NULL, WF_OPT_FLOAT, O(memory_max_rss_gib), "0", 0, 1e9,
     "watchdog: save and stop when this process's resident memory passes this many GiB (0: off)"},
    /* [dist] */
    {"dist.timeout_first_s", NULL, WF_OPT_FLOAT, O(dist_timeout_first_s), "600", 0, 1e9,
     "several ranks: a collective blocked longer than this in the first dist.first_steps steps ends the job "
     "with the watchdog's report (0: no limit)"},
    {"dist.timeout_s", NULL, WF_OPT_FLOAT, O(dist_timeout_s), "300", 0, 1e9,
     "several ranks: the same limit after the first steps (0: no limit)"},
    {"dist.first_steps", NULL, WF_OPT_INT, O(dist_first_steps), "2", 0, 1e12,
     "steps that get dist.timeout_first_s (startup and the first steps are slower)"},
    {"dist.bucket_mb", NULL, WF_OPT_FLOAT, O(dist_bucket_mb), "25", 0.001, 1e6,
     "several ranks: MB of gradients per all-reduce bucket"},
    {"dist.zero1", NULL, WF_OPT_BOOL, O(dist_zero1), "false", WF_NO_RANGE,
     "several ranks: ZeRO-1, each rank keeps the AdamW moments of its 1/W of the parameters (reduce-scatter "
     "the gradients, update the shard, all-gather the parameters) instead of DDP's all-reduce; one process "
     "ignores it"},
    /* [trace] */
    {"trace.dir", NULL, WF_OPT_STR, O(trace_dir), NULL, WF_NO_RANGE,
     "where trace captures go, one folder per capture (default: RUN_DIR/traces)"},
    {"trace.skip_first", NULL, WF_OPT_INT, O(trace_skip_first), "0", 0, 1e12,
     "schedule: steps before the first cycle"},
    {"trace.wait", NULL, WF_OPT_INT, O(trace_wait), "0", 0, 1e12, "schedule: steps not recorded at the start of a cycle"},
    {"trace.warmup", NULL, WF_OPT_INT, O(trace_warmup), "1", 0, 1e12,
     "schedule: steps recorded and discarded before the active ones"},
    {"trace.active", NULL, WF_OPT_INT, O(trace_active), "0", 0, 1e6,
     "schedule: steps recorded and written per capture (0: no scheduled captures)"},
    {"trace.repeat", NULL, WF_OPT_INT, O(trace_repeat), "1", 0, 1e12, "schedule: cycles (0: for ever)"},
    {"trace.requests", NULL, WF_OPT_BOOL, O(trace_requests), "true", WF_NO_RANGE,
     "capture the next N steps when `weft trace request RUN_DIR --steps N` asks"},
    {"trace.buffer_events", NULL, WF_OPT_INT, O(trace_buffer_events), "65536", 16, 1 << 30,
     "spans each thread can hold per capture (40 bytes each); more are dropped and counted"},
};

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
