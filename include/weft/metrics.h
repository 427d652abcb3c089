/* weft: the metrics of a training run. What one step measured, the sinks
 * that record it (metrics.jsonl and TensorBoard event files), host memory,
 * and the reproducibility record (run.json). MFU and its peak are in
 * weft/mfu.h, the HTML report in weft/report.h; the loss-spike detector and
 * the memory watchdog, which decide what training does, are the trainer's
 * (weft/runctl.h).
 *
 * The trainer owns the loop: it fills one wf_metrics_step per step and
 * hands the record to wf_metrics_log. Nothing here touches the model or the
 * data.
 *
 * Formats: docs/formats/metrics-jsonl.md, docs/formats/tensorboard.md,
 * docs/formats/run-json.md; what every field means: docs/metrics.md.
 *
 * Not thread-safe: each object belongs to one thread (the step loop's).
 */
#ifndef WEFT_METRICS_H
#define WEFT_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "weft/arena.h"
#include "weft/mfu.h"
#include "weft/model.h"
#include "weft/status.h"

/* ------------------------------------------------------------ one step
 * Doubles that were not measured this step are NaN (val_loss on most
 * steps, mfu_pct without a peak); integers that are not known are -1. A NaN
 * field is left out of metrics.jsonl and of the event file.
 *
 * Times are seconds of wall clock. step_s is the whole step, from asking for
 * its first batch to the end of its update and of any checkpoint it waited
 * for; it is data_s + fwd_bwd_s + optim_s + ckpt_s + the rest (logging,
 * spike checks), which the report shows as "other". Validation (eval_s) is
 * not part of step_s or of tokens_per_s. */
/* One source of a dataset mixture (data.sources; docs/loader.md) in a
 * step's record: metrics.jsonl's "sources" object and the TensorBoard tags
 * sources/<name>/... (docs/formats/metrics-jsonl.md). */
typedef struct {
    const char *name;      /* the source's name: [A-Za-z0-9_.-], unique in the mixture */
    double weight;         /* its share of the weights the step's batch was drawn with */
    int64_t tokens;        /* tokens of the step's global batch from it (all ranks) */
    int64_t tokens_seen;   /* tokens the run has read from it, this step included */
    double loss;           /* mean training loss over its tokens in the step; NaN when it had none */
    double val_loss;       /* its validation loss; NaN when not computed at this step */
} wf_metrics_source;

/* One downstream task's result in a step's record (train.eval_tasks;
 * docs/eval.md): metrics.jsonl's "tasks" object and the TensorBoard tags
 * tasks/<name>/... */
typedef struct {
    const char *name;
    double examples;       /* scored, all ranks together */
    double acc, acc_norm, centered, bpb;
} wf_metrics_task;

typedef struct {
    int64_t step;          /* optimizer step, 1-based */
    double time;           /* Unix time (s) when the step ended; 0: filled by wf_metrics_log */
    double elapsed_s;      /* seconds since the run (or resume) started */
    double loss;           /* mean training loss of the step (over its micro-batches) */
    double val_loss;       /* validation loss, NaN when not computed at this step */
    double lr;             /* learning rate the update used */
    double grad_norm;      /* global L2 norm of the gradient, before clipping */
    double lr_adamw;       /* optim.name = muon: the AdamW group's learning rate (lr is Muon's); NaN otherwise */
    double muon_update_rms;/* optim.name = muon: RMS of the Muon matrices' change this step; NaN otherwise */
    int64_t tokens;        /* tokens the step trained on (all ranks): its global batch in tokens */
    int64_t batch_seqs;    /* its global batch in sequences (all ranks; grows under a batch-size ramp) */
    int64_t tokens_seen;   /* tokens trained by the run up to and including this step */
    double tokens_per_s;   /* tokens / step_s */
    double step_s;         /* whole step */
    double data_s;         /* waiting for the data loader */
    double fwd_bwd_s;      /* forward and backward, data wait excluded */
    double optim_s;        /* gradient clipping and the optimizer update */
    double ckpt_s;         /* blocked on a checkpoint save (0 when none) */
    double eval_s;         /* validation, NaN when not computed; not in step_s */
    double tflops;         /* model FLOPs / step_s / 1e12, per process */
    double mfu_pct;        /* 100 * tflops / peak TFLOP/s, NaN without a peak */
    int64_t arena_in_use;  /* bytes: wf_arena_stats of the run's arena */
    int64_t arena_reserved;
    int64_t arena_peak;
    int64_t host_rss;      /* bytes: this process's resident set (VmRSS) */
    int64_t host_rss_peak; /* bytes: its high-water mark (VmHWM) */
    int64_t host_available;/* bytes: MemAvailable of the machine */
    double loss_z;         /* loss z-score against the spike window, NaN in warmup */
    double grad_norm_z;    /* same for the gradient norm */
    int spike;             /* 1: the spike detector flagged this step */
    int64_t data_pos;      /* index of the step's first micro-batch in the data order, -1 unknown */
    double comm_s;         /* several ranks: blocked in the gradient communication (DDP: waiting in
                              wf_reducer_finish; ZeRO-1: the reduce-scatter and the all-gather), a part
                              of fwd_bwd_s and optim_s, not another slice of step_s; NaN with one process */
    /* A dataset mixture's sources (borrowed; n_sources 0 and NULL for one dataset). */
    int n_sources;
    const wf_metrics_source *sources;
    /* Downstream tasks scored at this step (train.eval_tasks): their mean
     * centred accuracy, the seconds it took (not in step_s), and each
     * task's figures (borrowed; n_tasks 0 on other steps, when the other
     * two are not used). Written after the sources, as tasks_score,
     * tasks_s and the tasks object. */
    double tasks_score;
    double tasks_s;
    int n_tasks;
    const wf_metrics_task *tasks;
} wf_metrics_step;

/* Sets every field to "not measured": NaN, -1, spike 0 and no sources. */
void wf_metrics_step_init(wf_metrics_step *r);

/* Fills tokens_per_s (all processes), tflops and mfu_pct (per process)
 * from tokens, step_s, the FLOPs per token (wf_model_flops_per_token), the
 * number of processes that shared the tokens (data-parallel ranks; 1 for a
 * single process) and one process's peak in TFLOP/s (<= 0: no MFU). */
void wf_metrics_step_derive(wf_metrics_step *r, double flops_per_token, int n_procs, double peak_tflops);

/* Fills the arena_* fields from `arena` (NULL: left as they are) and the
 * host_* fields from /proc (left as they are if /proc cannot be read). */
void wf_metrics_step_memory(wf_metrics_step *r, const wf_arena *arena);

/* The fields as one table: JSON key, TensorBoard tag ("" for none), the
 * factor from the JSON unit to the TensorBoard unit, and the unit.
 * X(key, member, type, tag, tb_scale, unit); type is D (double) or I
 * (int64_t); `step` and `time` are the event's own step and wall time. */
#define WF_METRICS_FIELDS(X)                                                         \
    X("step", step, I, "", 1.0, "step")                                              \
    X("time", time, D, "", 1.0, "s (Unix)")                                          \
    X("elapsed_s", elapsed_s, D, "", 1.0, "s")                                       \
    X("loss", loss, D, "train/loss", 1.0, "nats/token")                              \
    X("val_loss", val_loss, D, "train/val_loss", 1.0, "nats/token")                  \
    X("lr", lr, D, "train/lr", 1.0, "")                                              \
    X("grad_norm", grad_norm, D, "train/grad_norm", 1.0, "")                         \
    X("lr_adamw", lr_adamw, D, "train/lr_adamw", 1.0, "")                            \
    X("muon_update_rms", muon_update_rms, D, "train/muon_update_rms", 1.0, "")       \
    X("tokens", tokens, I, "train/batch_tokens", 1.0, "tokens")                      \
    X("batch_seqs", batch_seqs, I, "train/batch_seqs", 1.0, "sequences")             \
    X("tokens_seen", tokens_seen, I, "train/tokens_seen", 1.0, "tokens")             \
    X("tokens_per_s", tokens_per_s, D, "perf/tokens_per_s", 1.0, "tokens/s")         \
    X("tflops", tflops, D, "perf/tflops", 1.0, "TFLOP/s")                            \
    X("mfu_pct", mfu_pct, D, "perf/mfu_pct", 1.0, "%")                               \
    X("step_s", step_s, D, "time/step_s", 1.0, "s")                                  \
    X("data_s", data_s, D, "time/data_s", 1.0, "s")                                  \
    X("fwd_bwd_s", fwd_bwd_s, D, "time/fwd_bwd_s", 1.0, "s")                         \
    X("optim_s", optim_s, D, "time/optim_s", 1.0, "s")                               \
    X("ckpt_s", ckpt_s, D, "time/ckpt_s", 1.0, "s")                                  \
    X("eval_s", eval_s, D, "time/eval_s", 1.0, "s")                                  \
    X("arena_in_use", arena_in_use, I, "memory/arena_in_use_gib", 0x1p-30, "bytes")  \
    X("arena_reserved", arena_reserved, I, "memory/arena_reserved_gib", 0x1p-30, "bytes") \
    X("arena_peak", arena_peak, I, "memory/arena_peak_gib", 0x1p-30, "bytes")        \
    X("host_rss", host_rss, I, "memory/host_rss_gib", 0x1p-30, "bytes")              \
    X("host_rss_peak", host_rss_peak, I, "memory/host_rss_peak_gib", 0x1p-30, "bytes") \
    X("host_available", host_available, I, "memory/host_available_gib", 0x1p-30, "bytes") \
    X("loss_z", loss_z, D, "spike/loss_z", 1.0, "")                                  \
    X("grad_norm_z", grad_norm_z, D, "spike/grad_norm_z", 1.0, "")                   \
    X("spike", spike, B, "spike/flag", 1.0, "0 or 1")                                \
    X("data_pos", data_pos, I, "", 1.0, "micro-batch")                               \
    X("comm_s", comm_s, D, "time/comm_s", 1.0, "s")

/* --------------------------------------------------------------- sinks
 * metrics.jsonl (one JSON object a step) and a TensorBoard event file in
 * DIR/tb/. Records are kept in memory and written when flush_every_s has
 * passed since the last write, when the buffer passes 1 MiB, on
 * wf_metrics_flush and on wf_metrics_close. A run that resumes appends to
 * metrics.jsonl and starts a new event file; after a rollback the same
 * steps appear again, later lines replacing earlier ones (the report
 * stitches them). */
typedef struct {
    const char *dir;      /* run directory; must exist */
    int jsonl;            /* write DIR/metrics.jsonl */
    int tensorboard;      /* write DIR/tb/events.out.tfevents.* */
    double flush_every_s; /* seconds between writes; 0: write every record at once */
} wf_metrics_options;

typedef struct wf_metrics wf_metrics;

wf_status wf_metrics_open(wf_metrics **out, const wf_metrics_options *opt);
/* Records one step. `time` 0 is replaced by the current Unix time. */
wf_status wf_metrics_log(wf_metrics *m, const wf_metrics_step *r);
/* Before logging step `step` again after a rollback, or at a resume from a
 * checkpoint: marks the restart in the event file, on which TensorBoard
 * forgets the events it had at steps >= step. (metrics.jsonl keeps every
 * line; readers stitch by step, as wf_report_write does.) */
wf_status wf_metrics_restart(wf_metrics *m, int64_t step);
/* A scalar of the caller's own, to TensorBoard only (e.g. "eval/ppl"). */
wf_status wf_metrics_scalar(wf_metrics *m, const char *tag, double value, int64_t step);
/* Writes what is buffered and flushes the files to the kernel. */
wf_status wf_metrics_flush(wf_metrics *m);
/* Flushes, fsyncs and closes; frees `m` even on error. Accepts NULL. */
wf_status wf_metrics_close(wf_metrics *m);
/* The event file's path (for the log), or NULL without TensorBoard. */
const char *wf_metrics_tb_path(const wf_metrics *m);

/* The TensorBoard writer alone (the one wf_metrics uses): an event file
 * with a file_version event first, then one event per step whose summary
 * holds scalar values (simple_value). */
typedef struct wf_tb_writer wf_tb_writer;
/* Creates DIR (mkdir -p) and DIR/events.out.tfevents.<unix time>.<host>.<pid>.<n>. */
wf_status wf_tb_open(wf_tb_writer **out, const char *dir, double flush_every_s);
/* Starts an event at `step` (wall time: now); the scalars added until the
 * next begin, flush or close go into its summary. */
wf_status wf_tb_begin(wf_tb_writer *w, int64_t step, double wall_time);
wf_status wf_tb_add(wf_tb_writer *w, const char *tag, float value);
/* Buffers one event with a single scalar: add_scalar(tag, value, step). */
wf_status wf_tb_add_scalar(wf_tb_writer *w, const char *tag, double value, int64_t step);
/* Buffers a SessionLog START event at `step`: TensorBoard then drops the
 * events it read at steps >= step (a restart from a checkpoint). */
wf_status wf_tb_restart(wf_tb_writer *w, int64_t step);
wf_status wf_tb_flush(wf_tb_writer *w);
wf_status wf_tb_close(wf_tb_writer *w); /* accepts NULL; frees even on error */
const char *wf_tb_path(const wf_tb_writer *w);

/* CRC-32C (Castagnoli), as TFRecord framing uses it; `crc` is 0 to start
 * or a previous result to continue. */
uint32_t wf_crc32c(uint32_t crc, const void *data, size_t len);
/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t wf_crc32c_mask(uint32_t crc);

/* --------------------------------------------------------------- memory */

typedef struct {
    int64_t rss;            /* bytes, VmRSS of /proc/self/status */
    int64_t rss_peak;       /* bytes, VmHWM */
    int64_t mem_total;      /* bytes, MemTotal of /proc/meminfo */
    int64_t mem_available;  /* bytes, MemAvailable */
} wf_host_mem;

/* Reads /proc/self/status and /proc/meminfo. Fields it cannot find are -1. */
wf_status wf_host_mem_read(wf_host_mem *out);
/* Parses the two files' text (either may be NULL); for tests. */
void wf_host_mem_parse(const char *status_text, const char *meminfo_text, wf_host_mem *out);

/* ------------------------------------------------- reproducibility record */

/* How the run is spread over processes (run.json's "dist"). */
typedef struct {
    int world_size;                  /* ranks */
    const char *backend;             /* the communicator's: "single", "openmpi", "mpich", ... */
    const char *mode;                /* "single" (one process), "ddp", "zero1", "zero2" or "fsdp" */
    int64_t optim_bytes;             /* optimizer state on rank 0 (zero1: its moments' shard plus the
                                        gradient shard of the reduce-scatter; wf_zero1_plan_memory) */
    int64_t optim_unsharded_bytes;   /* the same unsharded (AdamW's two moments, 8 bytes a parameter) */
    int64_t zero1_shard_floats;      /* zero1: parameters per shard; 0 otherwise */
} wf_run_dist;

/* What the training arena holds after setup (run.json's "arena"),
 * measured from the arena's in_use counter around each of the trainer's
 * allocations: named blocks in allocation order (each includes the
 * alignment padding before it), and the counters then. `weft plan`
 * (weft/plan.h) predicts the same figures. */
#define WF_RUN_ARENA_MAX 8
typedef struct {
    int n;
    const char *names[WF_RUN_ARENA_MAX]; /* "model" (parameters and gradients), "activations", ... */
    int64_t bytes[WF_RUN_ARENA_MAX];
    int64_t in_use, peak, reserved;      /* wf_arena_stats after setup */
} wf_run_arena;

typedef struct {
    const char *config_toml;  /* the effective configuration, or NULL */
    int argc;                 /* the command line, or 0 */
    char *const *argv;
    const wf_peak *peak;      /* or NULL */
    double flops_per_token;   /* 0: unknown */
    int64_t n_params;         /* -1: unknown */
    const char *source_dir;   /* git checkout to describe; NULL: where weft was built */
    const wf_run_dist *dist;  /* or NULL: "dist" is null */
    const char *model_source; /* where the model's architecture came from, or NULL */
    const wf_run_arena *arena; /* or NULL: "arena" is null */
} wf_run_record;

/* One line saying how this weft was built: compiler and version, the flags
 * that change speed or checks (-O, -g, -march, -fsanitize) and OpenMP,
 * e.g. "gcc 12.2.0, -O2 -g, OpenMP 201511" (`weft doctor` compares it
 * across ranks). */
void wf_build_describe(char *buf, size_t size);

/* Writes DIR/run.json (atomically): weft's version, the time, the command
 * line, the config, git commit and dirty state of the source checkout,
 * compiler and flags, library versions, host (uname, CPU, cores, memory),
 * the kernels' threads and BLAS core, selected environment variables (OMP_*,
 * OPENBLAS_*, GOMP_*, WEFT_*, LD_PRELOAD, ...), the MFU inputs. When the
 * checkout has uncommitted changes to tracked files, their diff goes to
 * DIR/git.diff. Facts that cannot be found are null, never an error. */
wf_status wf_run_record_write(const char *dir, const wf_run_record *r);

#endif
