/* Evaluation of checkpoints on tokenized datasets (weft/eval.h,
 * docs/eval.md): the loss and bits per byte of one checkpoint, and the
 * watcher that evaluates each checkpoint of a training run as it is
 * committed.
 *
 * What is evaluated: split S of a dataset is one token stream; sequence i
 * is its tokens [i*T, i*T + T + 1) (the windows of the data loader's
 * unshuffled order, so the first ones are the trainer's own validation
 * batches), inputs the first T, targets the last T. The first n sequences
 * are used, n fixed per dataset (limits in wf_eval_opts), so that every
 * checkpoint is measured on the same tokens. The loss is the mean
 * cross-entropy over all n*T targets; the bytes are those the targets
 * stand for (each id's bytes in the tokenizer, special ids 0), counted
 * once per dataset.
 *
 * The watcher reads checkpoints only under their committed names
 * (wf_ckpt_list: step-<digits>; a save renames a complete, fsynced folder
 * to that name), maps their data files at open (so the trainer's
 * retention deleting the folder afterwards does not disturb the read) and
 * checks each piece of the model against its checksum as it loads it.
 * Its record, RUN_DIR/eval.jsonl, is appended one whole line per dataset
 * with one write and an fsync; a line cut short by a crash is removed by
 * the next watcher before it appends.
 *
 * Not here: several ranks (one process evaluates), generation, other
 * metrics than the loss.
 */
#include "weft/eval.h"

#include "train/eval_tasks_impl.h"
#include "weft/eval_tasks.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "weft/arena.h"
#include "weft/backend.h"
#include "weft/dirlock.h"
#include "weft/fileio.h"
#include "weft/json.h"
#include "weft/lines.h"
#include "weft/log.h"
#include "weft/metrics.h"
#include "weft/model.h"
#include "weft/progress.h"
#include "weft/rundir.h"
#include "weft/shard.h"
#include "weft/sorted.h"
#include "weft/store.h"
#include "weft/thread.h"
#include "weft/tokenizer.h"
#include "weft/train.h"

#define DEFAULT_BATCH 8
#define DEFAULT_INTERVAL_S 10.0

/* ------------------------------------------------------------ datasets */

typedef struct {
    char name[WF_EVAL_NAME_MAX + 1];
    char split[8];
    char *dir;
    char *tok_path;         /* the tokenizer the bytes are counted with */
    wf_dataset ds;
    int open;
    uint32_t vocab;         /* dataset.json's vocab_size */
    uint32_t *id_bytes;     /* (tokenizer vocab) bytes each id stands for; special ids 0 */
    size_t n_ids;
    /* fixed at the first evaluation (they depend on T only) */
    uint64_t n_seq;
    uint64_t bytes;
    int prepared;
} eval_data;

struct wf_evaluator {
    wf_eval_opts o;
    eval_data data[WF_EVAL_MAX_DATASETS];
    size_t n_data;
    int T, B;                /* T: 0 until the first checkpoint fixes it */
    /* the model of the last checkpoint loaded */
    wf_arena *arena;
    wf_model *model;
    wf_model_config mc;
    int planned_T;
    int loaded;
    int32_t *rows, *inputs, *targets; /* (B, T+1), (B, T), (B, T) */
    wf_tasks *tasks;         /* o.tasks, read at the first checkpoint (its tokenizer) */
    wf_task_result *task_res;
    char checked_tok[4096];  /* the model tokenizer the datasets were last compared with */
    char warned_tok[4096];   /* a model tokenizer that could not be read (warned once) */
};

static int name_char_ok(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
}

/* "[NAME=]DIR[:SPLIT]" into its parts. NAME is taken only when everything
 * before the first '=' is a valid name (a path with '=' in a folder name
 * still works); SPLIT only when the text after the last ':' is exactly
 * "val" or "train". */
static wf_status parse_spec(const char *spec, eval_data *d) {
    const char *dir = spec;
    const char *eq = strchr(spec, '=');
    if (eq && eq > spec && (size_t)(eq - spec) <= WF_EVAL_NAME_MAX) {
        int ok = 1;
        for (const char *p = spec; p < eq; p++) ok = ok && name_char_ok(*p);
        if (ok) {
            memcpy(d->name, spec, (size_t)(eq - spec));
            d->name[eq - spec] = '\0';
            dir = eq + 1;
        }
    }
    size_t len = strlen(dir);
    snprintf(d->split, sizeof d->split, "val");
    const char *colon = strrchr(dir, ':');
    if (colon && (strcmp(colon + 1, "val") == 0 || strcmp(colon + 1, "train") == 0)) {
        snprintf(d->split, sizeof d->split, "%s", colon + 1);
        len = (size_t)(colon - dir);
    }
    while (len > 1 && dir[len - 1] == '/') len--;
    if (len == 0) return wf_error(WF_ERR_CONFIG, "dataset '%s': no directory given", spec);
    d->dir = strndup(dir, len);
    if (!d->dir) return wf_error(WF_ERR_NOMEM, "out of memory");
    if (!d->name[0]) {
        const char *base = strrchr(d->dir, '/');
        base = base && base[1] ? base + 1 : d->dir;
        size_t n = 0;
        for (const char *p = base; *p && n < WF_EVAL_NAME_MAX - 6; p++) d->name[n++] = name_char_ok(*p) ? *p : '_';
        d->name[n] = '\0';
        if (strcmp(d->split, "train") == 0) strcat(d->name, "-train");
    }
    return WF_OK;
}

/* The bytes every id stands for: its bytes as the tokenizer decodes it,
 * 0 for special tokens (they mark document ends, not text). */
static wf_status id_byte_table(eval_data *d, const wf_tokenizer *tok) {
    d->n_ids = wf_tokenizer_vocab_size(tok);
    d->id_bytes = calloc(d->n_ids ? d->n_ids : 1, sizeof *d->id_bytes);
    if (!d->id_bytes) return wf_error(WF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < d->n_ids; i++) {
        size_t len = 0;
        if (wf_tokenizer_id_bytes(tok, (int32_t)i, &len)) d->id_bytes[i] = (uint32_t)len;
    }
    wf_tokenizer_info info;
    wf_tokenizer_get_info(tok, &info);
    for (size_t k = 0; k < info.n_added; k++) {
        const char *content;
        int32_t id;
        int special;
        wf_tokenizer_added(tok, k, &content, &id, &special);
        if (special && id >= 0 && (size_t)id < d->n_ids) d->id_bytes[id] = 0;
    }
    return WF_OK;
}

static wf_status open_dataset(eval_data *d, const char *tokenizer) {
    wf_dataset_info info;
    memset(&info, 0, sizeof info);
    if (!wf_store_is_remote(d->dir) && !wf_path_is_dir(d->dir))
        return wf_error(WF_ERR_NOTFOUND, "dataset %s: %s is not a directory (a dataset written by `weft tokenize`)",
                        d->name, d->dir);
    wf_status s = wf_dataset_info_load(&info, d->dir);
    if (s != WF_OK) return wf_error_wrap(s, "dataset %s: ", d->name);
    d->vocab = info.vocab_size;
    const char *tp = tokenizer ? tokenizer : info.tokenizer;
    if (!tp) s = wf_error(WF_ERR_CONFIG,
                          "dataset %s: %s/dataset.json records no tokenizer, which bits per byte need: give "
                          "--tokenizer",
                          d->name, d->dir);
    else if (!wf_path_exists(tp))
        s = wf_error(WF_ERR_NOTFOUND, "dataset %s: the tokenizer %s %s does not exist%s", d->name,
                     tokenizer ? "given" : "that dataset.json records", tp,
                     tokenizer ? "" : " (recorded as given to `weft tokenize`; give --tokenizer)");
    if (s == WF_OK && !(d->tok_path = strdup(tp))) s = wf_error(WF_ERR_NOMEM, "out of memory");
    wf_dataset_info_free(&info);
    WF_TRY(s);
    wf_tokenizer *tok = NULL;
    s = wf_tokenizer_load(&tok, d->tok_path);
    if (s != WF_OK) return wf_error_wrap(s, "dataset %s: ", d->name);
    if (wf_tokenizer_vocab_size(tok) != d->vocab)
        s = wf_error(WF_ERR_CONFIG,
                     "dataset %s: %s was tokenized with a vocabulary of %" PRIu32 " ids, but the tokenizer %s has "
                     "%zu: not the dataset's tokenizer",
                     d->name, d->dir, d->vocab, d->tok_path, wf_tokenizer_vocab_size(tok));
    if (s == WF_OK) s = id_byte_table(d, tok);
    wf_tokenizer_destroy(tok);
    WF_TRY(s);
    s = wf_dataset_open(&d->ds, d->dir, d->split, 1);
    if (s != WF_OK) return wf_error_wrap(s, "dataset %s (split %s): ", d->name, d->split);
    d->open = 1;
    return WF_OK;
}

/* Fixes the sequences of dataset d for sequence length T and counts the
 * bytes their targets stand for. */
static wf_status prepare_dataset(wf_evaluator *e, eval_data *d) {
    int T = e->T;
    uint64_t avail = d->ds.n_tokens > 0 ? (d->ds.n_tokens - 1) / (uint64_t)T : 0;
    if (avail == 0)
        return wf_error(WF_ERR_CONFIG,
                        "dataset %s: split %s of %s has %" PRIu64 " tokens, fewer than one sequence of %d + 1: "
                        "use a shorter --seq-len or another split",
                        d->name, d->split, d->dir, d->ds.n_tokens, T);
    uint64_t n = avail;
    if (e->o.max_batches > 0 && (uint64_t)e->o.max_batches * (uint64_t)e->B < n)
        n = (uint64_t)e->o.max_batches * (uint64_t)e->B;
    if (e->o.max_tokens > 0) {
        uint64_t by_tokens = (uint64_t)e->o.max_tokens / (uint64_t)T;
        if (by_tokens == 0)
            return wf_error(WF_ERR_CONFIG, "--tokens %" PRId64 " is less than one sequence of %d tokens",
                            e->o.max_tokens, T);
        if (by_tokens < n) n = by_tokens;
    }
    int32_t *buf = malloc((size_t)(T + 1) * sizeof *buf);
    if (!buf) return wf_error(WF_ERR_NOMEM, "out of memory");
    uint64_t bytes = 0;
    wf_status s = WF_OK;
    for (uint64_t i = 0; i < n && s == WF_OK; i++) {
        s = wf_dataset_read(&d->ds, i * (uint64_t)T, (size_t)T + 1, buf);
        for (int t = 1; s == WF_OK && t <= T; t++) {
            if ((size_t)buf[t] >= d->n_ids)
                s = wf_error(WF_ERR_FORMAT, "dataset %s: token %" PRId32 " at %" PRIu64 " is outside the tokenizer",
                             d->name, buf[t], i * (uint64_t)T + (uint64_t)t);
            else
                bytes += d->id_bytes[buf[t]];
        }
    }
    free(buf);
    if (s != WF_OK) return wf_error_wrap(s, "dataset %s: ", d->name);
    if (bytes == 0)
        return wf_error(WF_ERR_CONFIG, "dataset %s: the evaluated tokens stand for no bytes of text (only special "
                        "tokens?)", d->name);
    d->n_seq = n;
    d->bytes = bytes;
    d->prepared = 1;
    WF_INFO("dataset %s: split %s of %s, %" PRIu64 " sequences of %d tokens (%" PRIu64 " tokens, %" PRIu64
            " bytes of text%s)",
            d->name, d->split, d->dir, n, T, n * (uint64_t)T, bytes, n < avail ? "; limited" : "");
    return WF_OK;
}

static wf_status add_dataset(wf_evaluator *e, const char *spec) {
    if (e->n_data >= WF_EVAL_MAX_DATASETS)
        return wf_error(WF_ERR_CONFIG, "at most %d datasets per evaluation", WF_EVAL_MAX_DATASETS);
    eval_data *d = &e->data[e->n_data];
    memset(d, 0, sizeof *d);
    e->n_data++; /* counted now, so that destroy frees what parse_spec made */
    WF_TRY(parse_spec(spec, d));
    for (size_t i = 0; i + 1 < e->n_data; i++)
        if (strcmp(e->data[i].name, d->name) == 0)
            return wf_error(WF_ERR_CONFIG,
                            "two datasets are named %s (%s and %s): name them, NAME=DIR (names appear in "
                            "eval.jsonl and TensorBoard)",
                            d->name, e->data[i].dir, d->dir);
    return open_dataset(d, e->o.tokenizer);
}

static void free_dataset(eval_data *d) {
    if (d->open) wf_dataset_close(&d->ds);
    free(d->dir);
    free(d->tok_path);
    free(d->id_bytes);
    memset(d, 0, sizeof *d);
}

/* Forgets the dataset add_dataset failed to set up. */
static void drop_last_dataset(wf_evaluator *e) {
    if (e->n_data) free_dataset(&e->data[--e->n_data]);
}

void wf_eval_destroy(wf_evaluator *e) {
    if (!e) return;
    for (size_t i = 0; i < e->n_data; i++) free_dataset(&e->data[i]);
    free((char *)e->o.tokenizer);
    free((char *)e->o.tasks);
    free((char *)e->o.task_dir);
    wf_tasks_destroy(e->tasks);
    free(e->task_res);
    free(e->rows);
    free(e->inputs);
    free(e->targets);
    wf_model_destroy(e->model);
    wf_arena_destroy(e->arena);
    free(e);
}

wf_status wf_eval_create(wf_evaluator **out, const wf_eval_opts *o) {
    *out = NULL;
    if (o->n_data > WF_EVAL_MAX_DATASETS)
        return wf_error(WF_ERR_CONFIG, "%zu datasets: at most %d per evaluation", o->n_data, WF_EVAL_MAX_DATASETS);
    if (o->seq_len < 0 || o->batch_size < 0 || o->max_batches < 0 || o->max_tokens < 0)
        return wf_error(WF_ERR_CONFIG, "negative sequence length, batch size or limit");
    wf_evaluator *e = calloc(1, sizeof *e);
    if (!e) return wf_error(WF_ERR_NOMEM, "out of memory");
    e->o = *o;
    e->o.data = NULL;
    e->o.n_data = 0;
    e->o.tokenizer = NULL;
    e->B = o->batch_size > 0 ? o->batch_size : DEFAULT_BATCH;
    wf_status s = WF_OK;
    if (o->tokenizer && !(e->o.tokenizer = strdup(o->tokenizer))) s = wf_error(WF_ERR_NOMEM, "out of memory");
    e->o.tasks = NULL;
    e->o.task_dir = NULL;
    if (s == WF_OK && o->tasks && !(e->o.tasks = strdup(o->tasks))) s = wf_error(WF_ERR_NOMEM, "out of memory");
    if (s == WF_OK && o->task_dir && !(e->o.task_dir = strdup(o->task_dir)))
        s = wf_error(WF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; s == WF_OK && i < o->n_data; i++) s = add_dataset(e, o->data[i]);
    if (s != WF_OK) {
        wf_eval_destroy(e);
        return s;
    }
    wf_kern_set_threads(o->threads > 0 ? o->threads : wf_default_threads());
    *out = e;
    return WF_OK;
}

size_t wf_eval_num_datasets(const wf_evaluator *e) { return e->n_data; }
const char *wf_eval_dataset_name(const wf_evaluator *e, size_t i) { return e->data[i].name; }
const char *wf_eval_dataset_split(const wf_evaluator *e, size_t i) { return e->data[i].split; }

/* ------------------------------------------------------------ the model */

/* Whether two tokenizers are the same: the same ids standing for the same
 * bytes, and the same special ids. *diff gets the first id that differs. */
static int same_tokenizer(const wf_tokenizer *a, const wf_tokenizer *b, size_t *diff) {
    size_t n = wf_tokenizer_vocab_size(a);
    *diff = n;
    if (n != wf_tokenizer_vocab_size(b)) return 0;
    for (size_t i = 0; i < n; i++) {
        size_t la = 0, lb = 0;
        const char *pa = wf_tokenizer_id_bytes(a, (int32_t)i, &la), *pb = wf_tokenizer_id_bytes(b, (int32_t)i, &lb);
        if (!pa != !pb || la != lb || (pa && memcmp(pa, pb, la) != 0)) {
            *diff = i;
            return 0;
        }
    }
    return wf_tokenizer_eos(a) == wf_tokenizer_eos(b) && wf_tokenizer_bos(a) == wf_tokenizer_bos(b);
}

/* The datasets must have been tokenized with the tokenizer the model was
 * trained with (the checkpoint's data.tokenizer): compared id by id. A
 * model tokenizer that cannot be read is warned about once, and only the
 * vocabulary sizes are checked then. */
static wf_status check_tokenizers(wf_evaluator *e, wf_ckpt *c) {
    for (size_t i = 0; i < e->n_data; i++) {
        const eval_data *d = &e->data[i];
        if (d->vocab > (uint32_t)e->mc.vocab_size)
            return wf_error(WF_ERR_CONFIG,
                            "dataset %s (%s) was tokenized with a vocabulary of %" PRIu32 " ids, but the model of %s "
                            "has %d: the dataset was not made with the model's tokenizer",
                            d->name, d->dir, d->vocab, wf_ckpt_path(c), e->mc.vocab_size);
    }
    const char *mt = NULL;
    if (wf_ckpt_get_str(c, "data.tokenizer", &mt) != WF_OK || !mt || !*mt) {
        wf_error_clear();
        return WF_OK; /* the run recorded none: the vocabulary check above is all there is */
    }
    if (strcmp(mt, e->checked_tok) == 0 || strcmp(mt, e->warned_tok) == 0) return WF_OK;
    wf_tokenizer *model_tok = NULL;
    if (!wf_path_exists(mt) || wf_tokenizer_load(&model_tok, mt) != WF_OK) {
        WF_WARN("the model's tokenizer %s (data.tokenizer of %s) cannot be read: %s; the datasets are checked "
                "against the model's vocabulary size only",
                mt, wf_ckpt_path(c), wf_path_exists(mt) ? wf_error_msg() : "it does not exist");
        wf_error_clear();
        snprintf(e->warned_tok, sizeof e->warned_tok, "%s", mt);
        return WF_OK;
    }
    wf_status s = WF_OK;
    for (size_t i = 0; i < e->n_data && s == WF_OK; i++) {
        const eval_data *d = &e->data[i];
        wf_tokenizer *dt = NULL;
        s = wf_tokenizer_load(&dt, d->tok_path);
        if (s != WF_OK) break;
        size_t diff;
        if (!same_tokenizer(dt, model_tok, &diff)) {
            if (diff < wf_tokenizer_vocab_size(dt) && diff < wf_tokenizer_vocab_size(model_tok))
                s = wf_error(WF_ERR_CONFIG,
                             "dataset %s was tokenized with %s, but the model of %s was trained with %s, and they "
                             "differ (id %zu first): its loss would mean nothing; tokenize it with the model's "
                             "tokenizer",
                             d->name, d->tok_path, wf_ckpt_path(c), mt, diff);
            else
                s = wf_error(WF_ERR_CONFIG,
                             "dataset %s was tokenized with %s (%zu ids), but the model of %s was trained with %s "
                             "(%zu ids): tokenize it with the model's tokenizer",
                             d->name, d->tok_path, wf_tokenizer_vocab_size(dt), wf_ckpt_path(c), mt,
                             wf_tokenizer_vocab_size(model_tok));
        }
        wf_tokenizer_destroy(dt);
    }
    wf_tokenizer_destroy(model_tok);
    if (s == WF_OK) snprintf(e->checked_tok, sizeof e->checked_tok, "%s", mt);
    return s;
}

/* A model for config mc planned for (B, T), reused while the config stays. */
static wf_status make_model(wf_evaluator *e, const wf_model_config *mc) {
    if (e->model && memcmp(&e->mc, mc, sizeof *mc) == 0 && e->planned_T == e->T) return WF_OK;
    wf_model_destroy(e->model);
    wf_arena_destroy(e->arena);
    e->model = NULL;
    e->arena = NULL;
    e->loaded = 0;
    e->mc = *mc;
    WF_TRY(wf_arena_create(&e->arena, 0));
    WF_TRY(wf_model_create(&e->model, mc, e->arena));
    WF_TRY(wf_model_plan(e->model, e->B, e->T));
    e->planned_T = e->T;
    return WF_OK;
}

/* The downstream tasks, tokenized with --tokenizer or the model's own
 * (the checkpoint's data.tokenizer). Their problems are the setup's. */
static wf_status open_tasks(wf_evaluator *e, wf_ckpt *c) {
    const char *tp = e->o.tokenizer;
    if (!tp && (wf_ckpt_get_str(c, "data.tokenizer", &tp) != WF_OK || !tp || !*tp)) {
        wf_error_clear();
        return wf_error(WF_ERR_CONFIG, "%s records no tokenizer (data.tokenizer), which the tasks need: give "
                        "--tokenizer", wf_ckpt_path(c));
    }
    wf_tokenizer *tok = NULL;
    wf_status s = wf_tokenizer_load(&tok, tp);
    if (s != WF_OK) return wf_error_wrap(WF_ERR_CONFIG, "the tasks' tokenizer: ");
    const char *dir = e->o.task_dir ? e->o.task_dir : getenv("WEFT_TASK_DIR");
    wf_tasks_opts to = {.task_dir = dir && *dir ? dir : "data/oe_eval_tasks",
                        .tasks = e->o.tasks,
                        .shots = e->o.shots,
                        .fewshot_seed = e->o.fewshot_seed,
                        .limit = e->o.task_limit,
                        .batch_size = e->B,
                        .max_seq = e->T};
    s = wf_tasks_create(&e->tasks, &to, tok);
    wf_tokenizer_destroy(tok);
    if (s != WF_OK) return wf_error_wrap(WF_ERR_CONFIG, "tasks: ");
    e->task_res = calloc(wf_tasks_count(e->tasks), sizeof *e->task_res);
    return e->task_res ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
}

wf_status wf_eval_load(wf_evaluator *e, wf_ckpt *c) {
    e->loaded = 0;
    wf_model_config mc;
    memset(&mc, 0, sizeof mc);
    wf_status s = wf_ckpt_get_model_config(c, &mc);
    if (s != WF_OK) return s;
    if (e->n_data == 0 && !e->o.tasks) {
        /* No dataset given: the one the run trained on, its validation
         * split; a mixture's sources, each as NAME=DIR (mix.dirs). */
        const char *dir = NULL, *mix = NULL;
        if (wf_ckpt_get_str(c, "data.dir", &dir) != WF_OK || !dir || !*dir) {
            if (wf_ckpt_get_str(c, "mix.dirs", &mix) != WF_OK || !mix || !*mix)
                return wf_error(WF_ERR_CONFIG, "%s records no dataset (data.dir): give --data DIR", wf_ckpt_path(c));
            wf_error_clear();
            for (const char *p = mix; *p;) {
                size_t len = strcspn(p, "\n");
                char *spec = strndup(p, len);
                s = spec ? add_dataset(e, spec) : wf_error(WF_ERR_NOMEM, "out of memory");
                free(spec);
                if (s != WF_OK) {
                    wf_status r = wf_error_wrap(WF_ERR_CONFIG, "the run's own sources (mix.dirs of %s): ",
                                                wf_ckpt_path(c));
                    drop_last_dataset(e);
                    return r;
                }
                p += len;
                if (*p) p++;
            }
        }
        if (!mix) s = add_dataset(e, dir);
        if (s != WF_OK) {
            wf_status r = wf_error_wrap(WF_ERR_CONFIG, "the run's own dataset (data.dir of %s): ", wf_ckpt_path(c));
            drop_last_dataset(e);
            return r;
        }
    }
    if (!e->T) {
        uint64_t T = (uint64_t)e->o.seq_len;
        if (!T && wf_ckpt_get_u64(c, "data.seq_len", &T) != WF_OK) {
            wf_error_clear();
            T = (uint64_t)mc.max_seq_len;
        }
        if (T < 1 || T > (uint64_t)mc.max_seq_len)
            return wf_error(WF_ERR_CONFIG, "sequence length %" PRIu64 " is outside 1..%d, the model's max_seq_len", T,
                            mc.max_seq_len);
        e->T = (int)T;
    }
    if (e->T > mc.max_seq_len)
        return wf_error(WF_ERR_CONFIG,
                        "the model of %s takes sequences of at most %d tokens, but this evaluation uses %d: give "
                        "--seq-len",
                        wf_ckpt_path(c), mc.max_seq_len, e->T);
    WF_TRY(make_model(e, &mc));
    WF_TRY(check_tokenizers(e, c));
    if (e->o.tasks && !e->tasks) WF_TRY(open_tasks(e, c));
    for (size_t i = 0; i < e->n_data; i++)
        if (!e->data[i].prepared) WF_TRY(prepare_dataset(e, &e->data[i]));
    if (!e->rows) {
        size_t n = (size_t)e->B * (size_t)e->T;
        e->rows = malloc((n + (size_t)e->B) * sizeof *e->rows);
        e->inputs = malloc(n * sizeof *e->inputs);
        e->targets = malloc(n * sizeof *e->targets);
        if (!e->rows || !e->inputs || !e->targets) return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    s = wf_ckpt_load_model(c, e->model);
    /* The model was made from the checkpoint's own config: a tensor that
     * does not fit it is the checkpoint's fault, not the setup's. */
    if (s == WF_ERR_CONFIG) s = wf_error_wrap(WF_ERR_FORMAT, "%s does not hold its own model: ", wf_ckpt_path(c));
    if (s != WF_OK) return s;
    e->loaded = 1;
    return WF_OK;
}

/* ------------------------------------------------------------ evaluating */

static double unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

wf_status wf_eval_run(wf_evaluator *e, size_t i, wf_eval_result *r) {
    if (!e->loaded) return wf_error(WF_ERR_INVALID, "wf_eval_run: no checkpoint is loaded (wf_eval_load)");
    if (i >= e->n_data) return wf_error(WF_ERR_INVALID, "wf_eval_run: no dataset %zu", i);
    eval_data *d = &e->data[i];
    const int T = e->T;
    double t0 = wf_time_now();
    char label[WF_EVAL_NAME_MAX + 32];
    snprintf(label, sizeof label, "eval %s", d->name);
    wf_progress prog;
    wf_progress_init(&prog, label, "seq", d->n_seq);
    double nats = 0; /* summed over the targets */
    wf_status s = WF_OK;
    for (uint64_t first = 0; first < d->n_seq && s == WF_OK; first += (uint64_t)e->B) {
        int b = d->n_seq - first < (uint64_t)e->B ? (int)(d->n_seq - first) : e->B;
        for (int k = 0; k < b && s == WF_OK; k++)
            s = wf_dataset_read(&d->ds, (first + (uint64_t)k) * (uint64_t)T, (size_t)T + 1,
                                e->rows + (size_t)k * (size_t)(T + 1));
        if (s != WF_OK) break;
        for (int k = 0; k < b; k++) {
            const int32_t *row = e->rows + (size_t)k * (size_t)(T + 1);
            memcpy(e->inputs + (size_t)k * (size_t)T, row, (size_t)T * sizeof *row);
            memcpy(e->targets + (size_t)k * (size_t)T, row + 1, (size_t)T * sizeof *row);
        }
        float loss = 0;
        s = wf_model_forward(e->model, e->inputs, e->targets, b, T, &loss);
        /* the forward's mean over b*T targets, back to their sum */
        nats += (double)loss * (double)b * (double)T;
        wf_progress_update(&prog, first + (uint64_t)b);
    }
    if (s != WF_OK) {
        wf_progress_clear(&prog);
        return wf_error_wrap(s, "evaluating dataset %s: ", d->name);
    }
    wf_progress_clear(&prog);
    memset(r, 0, sizeof *r);
    r->dataset = d->name;
    r->split = d->split;
    r->dir = d->dir;
    r->sequences = d->n_seq;
    r->seq_len = T;
    r->tokens = d->n_seq * (uint64_t)T;
    r->bytes = d->bytes;
    r->loss = nats / (double)r->tokens;
    r->bpb = nats / ((double)r->bytes * log(2.0));
    r->time = unix_now();
    r->seconds = wf_time_now() - t0;
    return WF_OK;
}

/* The shortest of %.15g..%.17g that reads back as v; null when not finite. */
/* The shortest decimal that reads back to v ("null" when not finite); also
 * the downstream tasks' lines (eval_tasks.c). */
int wf__eval_put_num(char *buf, size_t size, double v) {
    if (!isfinite(v)) return snprintf(buf, size, "null");
    char tmp[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    return snprintf(buf, size, "%s", tmp);
}

size_t wf_eval_result_json(const wf_eval_result *r, const char *checkpoint, char *buf, size_t size) {
    char time_s[40], loss[40], bpb[40], secs[40];
    wf__eval_put_num(time_s, sizeof time_s, r->time);
    wf__eval_put_num(loss, sizeof loss, r->loss);
    wf__eval_put_num(bpb, sizeof bpb, r->bpb);
    wf__eval_put_num(secs, sizeof secs, r->seconds);
    size_t ncp = checkpoint ? strlen(checkpoint) : 0, ndir = strlen(r->dir);
    char *ecp = malloc(wf_json_escaped_len(checkpoint ? checkpoint : "", ncp) + 1);
    char *edir = malloc(wf_json_escaped_len(r->dir, ndir) + 1);
    int n = -1;
    if (ecp && edir) {
        ecp[wf_json_escape(ecp, checkpoint ? checkpoint : "", ncp)] = '\0';
        edir[wf_json_escape(edir, r->dir, ndir)] = '\0';
        /* dataset names and splits need no escaping (name_char_ok) */
        n = snprintf(buf, size,
                     "{\"step\":%" PRIu64 ",\"time\":%s,\"dataset\":\"%s\",\"split\":\"%s\",\"loss\":%s,\"bpb\":%s,"
                     "\"tokens\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"sequences\":%" PRIu64
                     ",\"seq_len\":%d,\"eval_s\":%s,\"data_dir\":\"%s\"%s%s%s,\"version\":%d}\n",
                     r->step, time_s, r->dataset, r->split, loss, bpb, r->tokens, r->bytes, r->sequences, r->seq_len,
                     secs, edir, checkpoint ? ",\"checkpoint\":\"" : "", checkpoint ? ecp : "", checkpoint ? "\"" : "",
                     WF_EVAL_JSONL_VERSION);
    }
    free(ecp);
    free(edir);
    return n > 0 && (size_t)n < size ? (size_t)n : 0;
}

/* ------------------------------------------------------------ the watcher */

#define PATH_CAP 4200

typedef struct {
    wf_evaluator *e;
    const wf_eval_watch_opts *o;
    wf_eval_watch_result *res;
    char root[PATH_CAP];       /* RUN_DIR/checkpoints */
    char jsonl[PATH_CAP];      /* RUN_DIR/eval.jsonl */
    char eval_dir[PATH_CAP];   /* RUN_DIR/eval (the lock, tb/) */
    char stop_path[PATH_CAP];  /* RUN_DIR/STOP */
    char config_path[PATH_CAP];/* RUN_DIR/config.toml */
    int fd;                    /* eval.jsonl, appending */
    wf_tb_writer *tb;
    uint64_t *done;            /* sorted keys step * WF_EVAL_MAX_DATASETS + dataset: in eval.jsonl */
    size_t n_done, cap_done;
    uint64_t *tasks_done;      /* sorted steps whose tasks eval.jsonl holds (their aggregate line) */
    size_t n_tasks_done, cap_tasks_done;
    uint64_t *handled;         /* sorted steps this watcher is through with */
    size_t n_handled, cap_handled;
    uint64_t newest;           /* the newest step handled */
    int any;
    int config_warned;
} watch;

/* Sets of keys kept as sorted arrays (weft/sorted.h searches them). */
static wf_status set_add(uint64_t **a, size_t *n, size_t *cap, uint64_t k) {
    size_t i = wf_sorted_u64_lower_bound(*a, *n, k);
    if (i < *n && (*a)[i] == k) return WF_OK;
    WF_TRY(WF_GROW(*a, *cap, *n + 1, 64));
    memmove(*a + i + 1, *a + i, (*n - i) * sizeof **a);
    (*a)[i] = k;
    (*n)++;
    return WF_OK;
}

static uint64_t done_key(uint64_t step, size_t dataset) { return step * WF_EVAL_MAX_DATASETS + dataset; }

/* Reads what eval.jsonl already holds for our datasets. A last line
 * without its newline (a watcher killed while writing it) is cut off, so
 * that the next line starts on a line of its own. */
static wf_status read_done(watch *w) {
    if (!wf_path_exists(w->jsonl)) return WF_OK;
    char *text = NULL;
    size_t len = 0;
    WF_TRY(wf_file_read(w->jsonl, &text, &len));
    if (len && text[len - 1] != '\n') {
        size_t keep = len;
        while (keep && text[keep - 1] != '\n') keep--;
        WF_WARN("%s ends in a partial line (%zu bytes; a watcher stopped while writing it?): removed it", w->jsonl,
                len - keep);
        if (truncate(w->jsonl, (off_t)keep) != 0) {
            free(text);
            return wf_error(WF_ERR_IO, "%s: cannot remove its partial last line: %s", w->jsonl, strerror(errno));
        }
        text[keep] = '\0';
        len = keep;
    }
    size_t bad = 0, first_bad = 0, held = 0;
    wf_status s = WF_OK;
    wf_lines it;
    wf_lines_init(&it, text, len);
    json_t *o;
    while (s == WF_OK && wf_lines_next_json(&it, &o)) {
        /* version 1 (no key: dataset lines, and the tasks' lines of before
         * the bump) and 2 read alike; a later one is refused */
        json_t *ver = json_object_get(o, "version");
        if (ver && !(json_is_integer(ver) && json_integer_value(ver) >= 1 &&
                     json_integer_value(ver) <= WF_EVAL_JSONL_VERSION)) {
            char v[32];
            if (json_is_integer(ver)) snprintf(v, sizeof v, "%" JSON_INTEGER_FORMAT, json_integer_value(ver));
            else snprintf(v, sizeof v, "that is not an integer");
            s = wf_error(WF_ERR_FORMAT,
                         "%s: line %zu is of eval.jsonl version %s, which this weft does not read (it reads versions "
                         "1 to %d): use the weft that wrote it, or move the file away",
                         w->jsonl, it.lineno, v, WF_EVAL_JSONL_VERSION);
            json_decref(o);
            break;
        }
        json_t *step = json_object_get(o, "step");
        const char *name = json_string_value(json_object_get(o, "dataset"));
        const char *split = json_string_value(json_object_get(o, "split"));
        const char *kind = json_string_value(json_object_get(o, "kind"));
        if (json_is_string(json_object_get(o, "task"))) {
            /* a downstream task's line: its aggregate says the step's tasks are done */
            if (w->e->o.tasks && kind && strcmp(kind, "aggregate") == 0 && json_is_integer(step) &&
                json_integer_value(step) >= 0)
                s = set_add(&w->tasks_done, &w->n_tasks_done, &w->cap_tasks_done,
                            (uint64_t)json_integer_value(step));
        } else if (!json_is_integer(step) || json_integer_value(step) < 0 || !name || !split) {
            if (!bad++) first_bad = it.lineno;
        } else {
            for (size_t i = 0; i < w->e->n_data; i++)
                if (strcmp(w->e->data[i].name, name) == 0 && strcmp(w->e->data[i].split, split) == 0) {
                    s = set_add(&w->done, &w->n_done, &w->cap_done,
                                done_key((uint64_t)json_integer_value(step), i));
                    held++;
                }
        }
        json_decref(o);
    }
    free(text);
    WF_TRY(s);
    if (bad) WF_WARN("%s: %zu line%s that are not evaluation records (the first: line %zu) are ignored", w->jsonl, bad,
                     bad == 1 ? "" : "s", first_bad);
    if (held) WF_INFO("%s holds %zu result%s of these datasets already: those are not evaluated again", w->jsonl, held,
                      held == 1 ? "" : "s");
    return WF_OK;
}

/* Appends one line with one write and makes it durable. */
static wf_status append_line(watch *w, const char *line, size_t n) {
    if (w->fd < 0) {
        int existed = wf_path_exists(w->jsonl);
        w->fd = open(w->jsonl, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (w->fd < 0) return wf_error(WF_ERR_IO, "%s: cannot open for appending: %s", w->jsonl, strerror(errno));
        if (!existed) WF_TRY(wf_fsync_dir(w->o->run_dir));
    }
    ssize_t k = write(w->fd, line, n);
    if (k != (ssize_t)n)
        return wf_error(WF_ERR_IO, "%s: write failed: %s", w->jsonl, k < 0 ? strerror(errno) : "short write");
    if (fsync(w->fd) != 0) return wf_error(WF_ERR_IO, "%s: fsync failed: %s", w->jsonl, strerror(errno));
    return WF_OK;
}

static wf_status record(watch *w, const wf_eval_result *r, const char *ckpt_dir) {
    char line[4 * PATH_CAP + 512];
    size_t n = wf_eval_result_json(r, ckpt_dir, line, sizeof line);
    if (!n) return wf_error(WF_ERR_INTERNAL, "an eval.jsonl line did not fit its buffer");
    WF_TRY(append_line(w, line, n));
    if (w->o->tensorboard) {
        char dir[PATH_CAP + 8];
        if (!w->tb) {
            WF_TRY(wf_rundir_path(dir, sizeof dir, w->eval_dir, WF_RUN_TB));
            WF_TRY(wf_tb_open(&w->tb, dir, 0));
            WF_INFO("TensorBoard events: %s", wf_tb_path(w->tb));
        }
        char tag[WF_EVAL_NAME_MAX + 16];
        WF_TRY(wf_tb_begin(w->tb, (int64_t)r->step, r->time));
        snprintf(tag, sizeof tag, "eval/%s/loss", r->dataset);
        WF_TRY(wf_tb_add(w->tb, tag, (float)r->loss));
        snprintf(tag, sizeof tag, "eval/%s/bpb", r->dataset);
        WF_TRY(wf_tb_add(w->tb, tag, (float)r->bpb));
        WF_TRY(wf_tb_flush(w->tb));
    }
    if (w->o->on_result) w->o->on_result(w->o->ctx, r, ckpt_dir);
    return WF_OK;
}

/* Errors that no later checkpoint would fix end the watcher; the others
 * belong to one checkpoint, which is skipped. */
/* The tasks' lines of checkpoint `step` (and their TensorBoard scalars). */
static wf_status record_tasks(watch *w, uint64_t step, const char *ckpt_dir) {
    wf_evaluator *e = w->e;
    size_t n = wf_tasks_count(e->tasks);
    char line[4 * PATH_CAP + 512];
    for (size_t i = 0; i <= n; i++) {
        size_t len = i < n ? wf_tasks_result_json(&e->task_res[i], step, ckpt_dir, line, sizeof line)
                           : wf_tasks_aggregate_json(e->tasks, e->task_res, n, step, ckpt_dir, line, sizeof line);
        if (!len) return wf_error(WF_ERR_INTERNAL, "an eval.jsonl line did not fit its buffer");
        WF_TRY(append_line(w, line, len));
    }
    if (w->o->tensorboard) {
        if (!w->tb) {
            char dir[PATH_CAP + 8];
            WF_TRY(wf_rundir_path(dir, sizeof dir, w->eval_dir, WF_RUN_TB));
            WF_TRY(wf_tb_open(&w->tb, dir, 0));
        }
        WF_TRY(wf_tb_begin(w->tb, (int64_t)step, unix_now()));
        char tag[WF_TASK_NAME_MAX + 32];
        for (size_t i = 0; i < n; i++) {
            const wf_task_result *r = &e->task_res[i];
            snprintf(tag, sizeof tag, "tasks/%s/acc", r->name);
            WF_TRY(wf_tb_add(w->tb, tag, (float)r->acc));
            snprintf(tag, sizeof tag, "tasks/%s/centered", r->name);
            WF_TRY(wf_tb_add(w->tb, tag, (float)r->centered));
            snprintf(tag, sizeof tag, "tasks/%s/bpb", r->name);
            WF_TRY(wf_tb_add(w->tb, tag, (float)r->bpb));
        }
        WF_TRY(wf_tb_add(w->tb, "tasks/score", (float)wf_tasks_aggregate(e->tasks, e->task_res, n, NULL)));
        WF_TRY(wf_tb_flush(w->tb));
    }
    return set_add(&w->tasks_done, &w->n_tasks_done, &w->cap_tasks_done, step);
}

static int fatal(wf_status s) {
    return s == WF_ERR_CONFIG || s == WF_ERR_NOMEM || s == WF_ERR_INTERNAL || s == WF_ERR_INVALID;
}

static wf_status mark_handled(watch *w, uint64_t step) {
    if (!w->any || step > w->newest) w->newest = step;
    w->any = 1;
    return set_add(&w->handled, &w->n_handled, &w->cap_handled, step);
}

/* Evaluates checkpoint `step` on the datasets eval.jsonl does not hold it
 * for. */
static wf_status handle_step(watch *w, uint64_t step) {
    wf_evaluator *e = w->e;
    size_t missing = 0;
    /* With no dataset given, the run's own is known only from a checkpoint. */
    for (size_t i = 0; i < e->n_data; i++) missing += !wf_sorted_u64_contains(w->done, w->n_done, done_key(step, i));
    int tasks_missing = e->o.tasks && !wf_sorted_u64_contains(w->tasks_done, w->n_tasks_done, step);
    if ((e->n_data || e->o.tasks) && !missing && !tasks_missing) {
        w->res->already_done++;
        return mark_handled(w, step);
    }
    char dir[PATH_CAP + 32];
    wf_ckpt_step_dir(dir, sizeof dir, w->root, step);
    wf_ckpt *c = NULL;
    wf_status s = wf_ckpt_open(&c, dir);
    if (s == WF_OK && wf_ckpt_step(c) != step)
        s = wf_error(WF_ERR_FORMAT, "%s: its manifest says step %" PRIu64, dir, wf_ckpt_step(c));
    if (s == WF_OK) {
        size_t before = e->n_data;
        s = wf_eval_load(e, c);
        if (s == WF_OK && before == 0 && e->n_data > 0) {
            /* The run's own dataset was just added: eval.jsonl may hold it. */
            wf_ckpt_close(c);
            c = NULL;
            WF_TRY(read_done(w));
            return handle_step(w, step);
        }
    }
    if (s != WF_OK) {
        wf_ckpt_close(c);
        if (fatal(s)) return s;
        if (!wf_path_is_dir(dir))
            WF_INFO("checkpoint %s was removed (the trainer keeps ckpt.keep_last of them) before it could be read: "
                    "skipped",
                    dir);
        else
            WF_WARN("checkpoint %s cannot be read: %s; skipped (a later `weft eval --watch` tries it again)", dir,
                    wf_error_msg());
        wf_error_clear();
        w->res->skipped++;
        return mark_handled(w, step);
    }
    WF_INFO("evaluating %s (step %" PRIu64 ") on %zu dataset%s", dir, step, missing, missing == 1 ? "" : "s");
    for (size_t i = 0; i < e->n_data && s == WF_OK; i++) {
        if (wf_sorted_u64_contains(w->done, w->n_done, done_key(step, i))) continue;
        wf_eval_result r;
        s = wf_eval_run(e, i, &r);
        if (s != WF_OK) break;
        r.step = step;
        s = record(w, &r, dir);
        if (s == WF_OK) s = set_add(&w->done, &w->n_done, &w->cap_done, done_key(step, i));
        if (s == WF_OK)
            WF_INFO("step %" PRIu64 " %s: loss %.4f, %.4f bits per byte (%" PRIu64 " tokens, %.2f s)", step, r.dataset,
                    r.loss, r.bpb, r.tokens, r.seconds);
    }
    if (s == WF_OK && tasks_missing) {
        WF_INFO("scoring %s (step %" PRIu64 ") on %zu task%s", dir, step, wf_tasks_count(e->tasks),
                wf_tasks_count(e->tasks) == 1 ? "" : "s");
        s = wf_tasks_run(e->tasks, e->model, e->task_res);
        if (s == WF_OK) s = record_tasks(w, step, dir);
        if (s == WF_OK) {
            const char *label;
            double v = wf_tasks_aggregate(e->tasks, e->task_res, wf_tasks_count(e->tasks), &label);
            WF_INFO("step %" PRIu64 " tasks: %s %.4f", step, label, v);
            if (w->o->on_tasks) w->o->on_tasks(w->o->ctx, step, e->task_res, wf_tasks_count(e->tasks), label, v);
        }
    }
    wf_ckpt_close(c);
    WF_TRY(s);
    w->res->evaluated++;
    return mark_handled(w, step);
}

/* The run's last step, from RUN_DIR/config.toml (which `weft train`
 * rewrites at every start); 0 when it is not there (yet). */
static uint64_t run_final_step(watch *w) {
    if (!wf_path_exists(w->config_path)) return 0;
    wf_train_config tc;
    memset(&tc, 0, sizeof tc);
    char flag[] = "--config";
    char *argv[] = {flag, w->config_path};
    wf_strs pos = {0};
    int help = 0;
    wf_status s = wf_opts_parse(wf_train_spec(), &tc, 2, argv, &pos, &help);
    uint64_t steps = s == WF_OK && tc.steps > 0 ? (uint64_t)tc.steps : 0;
    if (s == WF_OK && tc.ckpt_dir && *tc.ckpt_dir) { /* the run saves elsewhere (an object store, say) */
        size_t n = strlen(tc.ckpt_dir);
        while (n > 1 && tc.ckpt_dir[n - 1] == '/') n--;
        if (n < sizeof w->root && (strlen(w->root) != n || strncmp(w->root, tc.ckpt_dir, n) != 0)) {
            snprintf(w->root, sizeof w->root, "%.*s", (int)n, tc.ckpt_dir);
            WF_INFO("following the run's checkpoints in %s (ckpt.dir of %s)", w->root, w->config_path);
        }
    }
    if (s != WF_OK && !w->config_warned) {
        WF_WARN("%s cannot be read (%s): the run's last step is unknown, so only --stop-after, a STOP file or "
                "--idle-timeout end this watcher",
                w->config_path, wf_error_msg());
        w->config_warned = 1;
    }
    wf_error_clear();
    wf_opts_free(wf_train_spec(), &tc);
    wf_opts_free_positional(&pos);
    return steps;
}

/* Looks at the checkpoints once and evaluates the new ones; *found gets
 * how many it had not handled before. */
static wf_status scan(watch *w, int *found) {
    (void)run_final_step(w); /* the run's ckpt.dir, once its config.toml is there */
    uint64_t *steps = NULL;
    size_t n = 0;
    *found = 0;
    WF_TRY(wf_ckpt_list(w->root, &steps, &n));
    wf_status s = WF_OK;
    for (size_t i = 0; i < n && s == WF_OK; i++) {
        if (wf_sorted_u64_contains(w->handled, w->n_handled, steps[i])) continue;
        (*found)++;
        s = handle_step(w, steps[i]);
    }
    free(steps);
    return s;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static wf_status watch_loop(watch *w) {
    const wf_eval_watch_opts *o = w->o;
    double interval = o->interval_s > 0 ? o->interval_s : DEFAULT_INTERVAL_S;
    double last_new = wf_time_now();
    int waiting_said = 0;
    for (;;) {
        int found = 0;
        WF_TRY(scan(w, &found));
        if (found) {
            last_new = wf_time_now();
            waiting_said = 0;
        }
        uint64_t final = o->stop_after ? o->stop_after : run_final_step(w);
        if (final && w->any && w->newest >= final) {
            w->res->reason = o->stop_after ? "stop-after" : "final";
            WF_INFO("checkpoint step %" PRIu64 " is %s (step %" PRIu64 "): done", w->newest,
                    o->stop_after ? "at or past --stop-after" : "the run's last", final);
            return WF_OK;
        }
        char holder[512];
        if (wf_path_exists(w->stop_path) && wf_dirlock_describe(o->run_dir, holder, sizeof holder) != 0) {
            /* The trainer has exited, so its last save is committed: one
             * more look catches a checkpoint made since the scan above. */
            WF_TRY(scan(w, &found));
            if (!found) {
                w->res->reason = "stop-file";
                WF_INFO("%s exists and no trainer holds %s: every checkpoint is evaluated, done", w->stop_path,
                        o->run_dir);
                return WF_OK;
            }
            continue;
        }
        if (o->idle_timeout_s > 0 && wf_time_now() - last_new >= o->idle_timeout_s) {
            w->res->reason = "idle";
            WF_INFO("no new checkpoint in %s for %.0f s (--idle-timeout): done", w->root, o->idle_timeout_s);
            return WF_OK;
        }
        if (!waiting_said) {
            WF_INFO("waiting for new checkpoints in %s (looking every %g s)", w->root, interval);
            waiting_said = 1;
        }
        sleep_s(interval);
    }
}

wf_status wf_eval_watch(wf_evaluator *e, const wf_eval_watch_opts *o, wf_eval_watch_result *result) {
    memset(result, 0, sizeof *result);
    result->reason = "error";
    if (!o->run_dir || !*o->run_dir) return wf_error(WF_ERR_CONFIG, "no run directory to watch");
    if (!wf_path_is_dir(o->run_dir))
        return wf_error(WF_ERR_NOTFOUND, "%s: no such run directory (start `weft train` first, or mkdir it)",
                        o->run_dir);
    watch w;
    memset(&w, 0, sizeof w);
    w.e = e;
    w.o = o;
    w.res = result;
    w.fd = -1;
    WF_TRY(wf_rundir_check(o->run_dir, "--watch"));
    WF_TRY(wf_rundir_path(w.root, sizeof w.root, o->run_dir, WF_RUN_CHECKPOINTS));
    WF_TRY(wf_rundir_path(w.jsonl, sizeof w.jsonl, o->run_dir, WF_RUN_EVAL_JSONL));
    WF_TRY(wf_rundir_path(w.eval_dir, sizeof w.eval_dir, o->run_dir, WF_RUN_EVAL));
    WF_TRY(wf_rundir_path(w.stop_path, sizeof w.stop_path, o->run_dir, WF_RUN_STOP));
    WF_TRY(wf_rundir_path(w.config_path, sizeof w.config_path, o->run_dir, WF_RUN_CONFIG));
    WF_TRY(wf_mkdirs(w.eval_dir));
    wf_dirlock *lock = NULL;
    wf_dirlock_opts lo = {.command = "weft eval --watch", .what = "evaluation directory"};
    WF_TRY(wf_dirlock_acquire(&lock, w.eval_dir, &lo));
    wf_error_keep k = WF_ERROR_KEEP_INIT;
    wf_status s = wf_error_keep_note(&k, read_done(&w));
    if (s == WF_OK) s = wf_error_keep_note(&k, watch_loop(&w));
    if (w.tb) wf_error_keep_note(&k, wf_tb_close(w.tb));
    if (w.fd >= 0) close(w.fd);
    free(w.done);
    free(w.tasks_done);
    free(w.handled);
    wf_dirlock_release(lock);
    return wf_error_keep_restore(&k);
}
