/* Downstream tasks in the training loop (train.eval_tasks, docs/eval.md
 * "In the training loop"): the tasks of weft/eval_tasks.h scored with the
 * model being trained, each rank its share of the examples (example i on
 * rank i % world), the sums added over ranks, so that every rank holds the
 * results of one process scoring all of them. Sequences are cut to the
 * run's data.seq_len and batched by the run's per-rank micro-batch: the
 * shape the model is planned for. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/log.h"
#include "weft/thread.h"
#include "weft/tokenizer.h"
#include "weft/trace.h"

/* The sums of a result that add over ranks, in one array. */
#define N_SUMS 8

static void sums_out(const wf_task_result *r, double *v) {
    v[0] = r->examples, v[1] = r->correct, v[2] = r->correct_norm, v[3] = r->baseline;
    v[4] = r->nats, v[5] = r->bytes, v[6] = r->requests, v[7] = r->tokens;
}

static void sums_in(wf_task_result *r, const double *v) {
    r->examples = v[0], r->correct = v[1], r->correct_norm = v[2], r->baseline = v[3];
    r->nats = v[4], r->bytes = v[5], r->requests = v[6], r->tokens = v[7];
}

wf_status wf__train_tasks_setup(trainer *t) {
    const wf_train_config *tc = t->tc;
    if (!tc->eval_tasks || !*tc->eval_tasks) return WF_OK;
    if (!t->tokenizer_path)
        return wf_error(WF_ERR_CONFIG, "train.eval_tasks needs the model's tokenizer: give data.tokenizer");
    const char *dir = tc->eval_task_dir ? tc->eval_task_dir : getenv("WEFT_TASK_DIR");
    if (!dir || !*dir) dir = "data/oe_eval_tasks";
    wf_tokenizer *tok = NULL;
    WF_TRY(wf_tokenizer_load(&tok, t->tokenizer_path));
    wf_tasks_opts o = {.task_dir = dir,
                       .tasks = tc->eval_tasks,
                       .limit = tc->eval_tasks_limit,
                       .batch_size = t->Bl,
                       .max_seq = t->T,
                       .rank = t->rank,
                       .world = t->world,
                       .threads = wf_kern_threads()};
    wf_status s = wf_tasks_create(&t->tasks, &o, tok);
    wf_tokenizer_destroy(tok);
    if (s != WF_OK) return wf_error_wrap(s, "train.eval_tasks: ");
    t->n_tasks = wf_tasks_count(t->tasks);
    t->task_res = calloc(t->n_tasks, sizeof *t->task_res);
    t->task_rec = calloc(t->n_tasks, sizeof *t->task_rec);
    if (!t->task_res || !t->task_rec) return wf_error(WF_ERR_NOMEM, "out of memory");
    t->task_score = NAN;
    return WF_OK;
}

void wf__train_tasks_free(trainer *t) {
    wf_tasks_destroy(t->tasks);
    free(t->task_res);
    free(t->task_rec);
    t->tasks = NULL;
    t->task_res = NULL;
    t->task_rec = NULL;
    t->n_tasks = 0;
}

int wf__train_tasks_due(const trainer *t, int64_t done) {
    if (!t->tasks) return 0;
    int64_t every = t->tc->eval_tasks_every;
    return done == t->tc->steps || (every > 0 && done % every == 0);
}

wf_status wf__train_tasks_run(trainer *t) {
    wf_trace_span span = wf_trace_begin(WF_TRACE_REGION, "eval_tasks");
    wf_status s = wf_tasks_run(t->tasks, t->model, t->task_res);
    double *v = s == WF_OK ? malloc(t->n_tasks * N_SUMS * sizeof *v) : NULL;
    if (s == WF_OK && !v) s = wf_error(WF_ERR_NOMEM, "out of memory");
    if (s == WF_OK) {
        for (size_t i = 0; i < t->n_tasks; i++) sums_out(&t->task_res[i], v + i * N_SUMS);
        if (t->world > 1) s = wf_comm_all_reduce_f64(t->comm, v, t->n_tasks * N_SUMS, WF_COMM_SUM, "eval tasks");
    }
    for (size_t i = 0; s == WF_OK && i < t->n_tasks; i++) {
        wf_task_result *r = &t->task_res[i];
        sums_in(r, v + i * N_SUMS);
        wf_tasks_finish(r);
        t->task_rec[i] = (wf_metrics_task){.name = r->name,
                                           .examples = r->examples,
                                           .acc = r->acc,
                                           .acc_norm = r->acc_norm,
                                           .centered = r->centered,
                                           .bpb = r->bpb};
    }
    if (s == WF_OK) t->task_score = wf_tasks_aggregate(t->tasks, t->task_res, t->n_tasks, &t->task_label);
    free(v);
    wf_trace_end(span);
    return s == WF_OK ? WF_OK : wf_error_wrap(s, "train.eval_tasks: ");
}
