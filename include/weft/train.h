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
 * distributed layer, include/weft/dist.h; docs/distributed.md): DDP
 * (gradient buckets all-reduced during the backward), or ZeRO-1 with
 * dist.zero1 (the AdamW moments sharded over the ranks).
 */
#ifndef WEFT_TRAIN_H
#define WEFT_TRAIN_H

#include <stdint.h>

#include "weft/config.h"
#include "weft/dist.h"
#include "weft/model.h"
#include "weft/status.h"

/* Every key of a training config (TOML sections [model], [data], [optim],
 * [train], [ckpt], [metrics], [spike], [memory], [dist], [trace]). Numeric model sizes of 0 mean "from the preset"; the vocabulary
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
    /* [ckpt] */
    int64_t ckpt_every, ckpt_keep_last, ckpt_keep_every, ckpt_stop_at;
    int ckpt_async, ckpt_resume;
    char *ckpt_resume_from, *ckpt_init_from;
    /* [metrics] */
    int metrics_jsonl, metrics_tensorboard, metrics_remeasure_peak, metrics_all_ranks;
    double metrics_flush_every_s, metrics_peak_tflops;
    /* [spike] */
    int64_t spike_window, spike_warmup, spike_skip_batches, spike_max_rollbacks;
    double spike_z;
    int spike_grad_norm;
    char *spike_action;
    /* [memory] */
    double memory_max_used_frac, memory_max_rss_frac, memory_max_rss_gib;
    /* [dist] */
    double dist_timeout_first_s, dist_timeout_s, dist_bucket_mb;
    int64_t dist_first_steps;
    int dist_zero1;
    /* [trace] */
    char *trace_dir;
    int64_t trace_skip_first, trace_wait, trace_warmup, trace_active, trace_repeat, trace_buffer_events;
    int trace_requests;
    /* Not config keys: the command line, recorded in RUN_DIR/run.json (set
     * by the caller; argc 0 records none). Borrowed, not freed. */
    int argc;
    char **argv;
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
    int abort_job;    /* on failure only: 1 when this rank failed mid-run with other ranks, which may
                         be blocked in a collective it will never join; the caller must end the
                         whole job (wf_comm_abort), not wf_comm_destroy (MPI_Finalize would wait) */
} wf_train_result;

/* The option table of `weft train` (also usable by tests and benchmarks). */
const wf_cmd_spec *wf_train_spec(void);

/* Resolves the model config: the preset, then every non-zero size of `tc`,
 * then the vocabulary (tc->vocab_size, else `data_vocab`). Validates it and
 * the sequence length against it. */
wf_status wf_train_model_config(const wf_train_config *tc, uint32_t data_vocab, wf_model_config *out);

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
